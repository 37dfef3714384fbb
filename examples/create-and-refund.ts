/**
 * The typed client in use: create a payment, refund part of it, and verify the signature of the
 * webhook that reports the refund.
 *
 *   PAYMENTS_BASE_URL=http://127.0.0.1:3000 PAYMENTS_API_KEY=sk_live_... npx tsx examples/create-and-refund.ts
 *
 * The webhook receiver here listens on 127.0.0.1, so the service must run with
 * WEBHOOK_ALLOW_PRIVATE_URLS=true (local development); in production your endpoint is a public
 * HTTPS URL and the same verification applies. The example sets the merchant's webhook_url to
 * its receiver and removes it again at the end.
 */
import { Effect } from "effect"
import { randomUUID } from "node:crypto"
import { createServer, type IncomingHttpHeaders } from "node:http"
import { layerFetch, makeClient, verifyWebhookSignature } from "../src/client.ts"

interface Received {
  readonly headers: IncomingHttpHeaders
  /** The raw body: the signature covers these exact bytes, so verify before parsing. */
  readonly body: string
}

/** A minimal webhook endpoint: answers 204 to every POST and keeps what it received. */
const startReceiver = Effect.acquireRelease(
  Effect.callback<{ readonly url: string; readonly received: Array<Received>; readonly close: () => void }>(
    (resume) => {
      const received: Array<Received> = []
      const server = createServer((request, response) => {
        let body = ""
        request.setEncoding("utf8")
        request.on("data", (chunk: string) => (body += chunk))
        request.on("end", () => {
          received.push({ headers: request.headers, body })
          response.writeHead(204).end()
        })
      })
      server.listen(0, "127.0.0.1", () => {
        const address = server.address()
        const port = typeof address === "object" && address !== null ? address.port : 0
        resume(Effect.succeed({ url: `http://127.0.0.1:${port}/webhooks`, received, close: () => server.close() }))
      })
    }
  ),
  (receiver) => Effect.sync(receiver.close)
)

/** Waits (up to `timeoutMs`) for a delivery whose event matches. */
const awaitDelivery = (received: Array<Received>, matches: (event: any) => boolean, timeoutMs = 30_000) =>
  Effect.gen(function*() {
    const deadline = Date.now() + timeoutMs
    for (;;) {
      const found = received.find((delivery) => matches(JSON.parse(delivery.body)))
      if (found !== undefined) return found
      if (Date.now() > deadline) return yield* Effect.fail(new Error("no matching webhook arrived in time"))
      yield* Effect.sleep("50 millis")
    }
  })

export const main = (options: { readonly baseUrl: string; readonly apiKey: string }) =>
  Effect.gen(function*() {
    const client = yield* makeClient(options)
    const receiver = yield* startReceiver

    // Deliver this merchant's webhooks to our receiver; the secret signs them.
    const { merchant } = yield* client.merchants.update({ payload: { webhook_url: receiver.url } })
    yield* Effect.addFinalizer(() => Effect.ignore(client.merchants.update({ payload: { webhook_url: null } })))

    // 1. A payment of 100.00 USD, captured automatically. The idempotency key makes a retry safe.
    const { transaction: payment } = yield* client.transactions.create({
      headers: { "x-idempotency-key": `order-${randomUUID()}` },
      payload: {
        transaction: {
          amount_cents: 10_000,
          currency: "USD",
          card_token: "tok_visa",
          card_last_four: "4242",
          card_brand: "visa",
          metadata: { order_id: "1042" }
        }
      }
    })
    console.log(`created ${payment.id}: ${payment.status}, ${payment.amount_cents} ${payment.currency}`)

    // 2. Refund 25.00 of it.
    const { transaction: refunded } = yield* client.transactions.refund({
      params: { id: payment.id },
      headers: { "x-idempotency-key": `refund-${randomUUID()}` },
      payload: { amount_cents: 2_500 }
    })
    console.log(`refunded ${refunded.refunded_amount_cents} of ${refunded.captured_amount_cents}: ${refunded.status}`)

    // 3. The webhook for the refund, verified with the merchant's signing secret.
    const delivery = yield* awaitDelivery(
      receiver.received,
      (event) => event.type === "payment.partially_refunded" && event.data.id === payment.id
    )
    const header = delivery.headers["x-service-signature"]
    const nowSeconds = Math.floor(Date.now() / 1000)
    // (null when the service can no longer open the stored secret: rotating it gives a new one.)
    const secret = merchant.webhook_secret
    if (secret === null) {
      return yield* Effect.fail(
        new Error("the webhook secret cannot be shown: rotate it (POST /api/v1/webhooks/secret/rotate)")
      )
    }
    const valid = verifyWebhookSignature(
      secret,
      typeof header === "string" ? header : undefined,
      delivery.body,
      nowSeconds
    )
    const tampered = verifyWebhookSignature(
      secret,
      typeof header === "string" ? header : undefined,
      delivery.body.replace("2500", "9999"),
      nowSeconds
    )
    console.log(
      `webhook ${JSON.parse(delivery.body).type}: signature ${valid ? "valid" : "INVALID"}; a tampered body is ${
        tampered ? "ACCEPTED" : "rejected"
      }`
    )
    if (!valid || tampered) return yield* Effect.fail(new Error("webhook signature check failed"))
    return { paymentId: payment.id, refundedCents: refunded.refunded_amount_cents, signatureValid: valid }
  }).pipe(Effect.scoped, Effect.provide(layerFetch))

if (import.meta.url === `file://${process.argv[1]}`) {
  const baseUrl = process.env.PAYMENTS_BASE_URL ?? "http://127.0.0.1:3000"
  const apiKey = process.env.PAYMENTS_API_KEY
  if (apiKey === undefined) {
    console.error("set PAYMENTS_API_KEY (the demo key is in .data/demo-api-key)")
    process.exit(2)
  }
  Effect.runPromise(main({ baseUrl, apiKey })).then(
    (result) => console.log(JSON.stringify(result)),
    (error) => {
      console.error(String(error))
      process.exit(1)
    }
  )
}
