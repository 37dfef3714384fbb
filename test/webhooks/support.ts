import { Effect, Layer } from "effect"
import { createHmac, timingSafeEqual } from "node:crypto"
import { createServer, type IncomingHttpHeaders, type ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"
import type { Merchant } from "../../src/domain/Merchant.ts"
import type { PaymentEvent } from "../../src/domain/Payment.ts"
import * as Config from "../../src/platform/Config.ts"
import * as Ids from "../../src/platform/Ids.ts"
import * as WebhookTransport from "../../src/platform/WebhookTransport.ts"
import * as Webhooks from "../../src/services/Webhooks.ts"
import type { MemoryState } from "../../src/store/MemoryStore.ts"
import * as WebhookDispatcher from "../../src/workers/WebhookDispatcher.ts"

export interface Received {
  readonly headers: IncomingHttpHeaders
  readonly body: string
}

/** A real HTTP endpoint on 127.0.0.1; `respond` decides each answer (status, or leave it hanging). */
export const startReceiver = async (respond: (request: Received, response: ServerResponse) => void) => {
  const received: Array<Received> = []
  /** Requests whose client went away before the answer was sent (an abandoned request). */
  let abandoned = 0
  const server = createServer((req, res) => {
    res.on("close", () => {
      if (!res.writableEnded) abandoned++
    })
    const chunks: Array<Buffer> = []
    req.on("data", (chunk: Buffer) => chunks.push(chunk))
    req.on("end", () => {
      const request = { headers: req.headers, body: Buffer.concat(chunks).toString("utf8") }
      received.push(request)
      respond(request, res)
    })
  })
  await new Promise<void>((done) => server.listen(0, "127.0.0.1", done))
  const port = (server.address() as AddressInfo).port
  return {
    url: `http://127.0.0.1:${port}/hooks`,
    port,
    received,
    abandoned: () => abandoned,
    close: () =>
      new Promise<void>((done) => {
        server.closeAllConnections()
        server.close(() => done())
      })
  }
}

export const answer = (status: number) => (_: Received, response: ServerResponse) => {
  response.writeHead(status, { "content-type": "text/plain" })
  response.end(status < 300 ? "ok" : "x".repeat(100_000))
}

/**
 * Signature verification as a merchant would write it (docs/webhooks.md), independent of the
 * service's code: every v1 value is compared in constant time against the HMAC of "t.body".
 */
export const verifySignature = (
  header: string,
  body: string,
  secret: string,
  toleranceSeconds: number | null,
  nowSeconds: number
) => {
  const parts = header.split(",").map((part) => {
    const index = part.indexOf("=")
    return [part.slice(0, index), part.slice(index + 1)] as const
  })
  const timestamp = parts.find(([key]) => key === "t")?.[1]
  if (timestamp === undefined) return false
  if (toleranceSeconds !== null && Math.abs(nowSeconds - Number(timestamp)) > toleranceSeconds) return false
  const expected = Buffer.from(createHmac("sha256", secret).update(`${timestamp}.${body}`).digest("hex"))
  return parts.some(([key, value]) =>
    key === "v1" && value.length === expected.length && timingSafeEqual(Buffer.from(value), expected)
  )
}

/**
 * Waits in real time until `check` holds (at most `timeoutMs`): only for real I/O (an HTTP
 * receiver, PostgreSQL) to complete. Never use it to show that something did NOT happen: a
 * real-time wait proves nothing and makes the test slow; absence is checked under virtual time
 * (./virtual.ts) or against a later event the test has awaited.
 */
export const eventually = <A, E, R>(probe: Effect.Effect<A, E, R>, check: (a: A) => boolean, timeoutMs = 10_000) =>
  Effect.gen(function*() {
    // Wall-clock time, not a count of polls: on a loaded machine each probe itself takes time.
    const deadline = Date.now() + timeoutMs
    for (;;) {
      const value = yield* probe
      if (check(value)) return value
      if (Date.now() > deadline) return yield* Effect.die(new Error(`condition not reached within ${timeoutMs} ms`))
      yield* Effect.promise(() => new Promise((done) => setTimeout(done, 10)))
    }
  })

/** A merchant with a webhook URL and secret, straight into a memory state. */
export const seedMerchant = (
  state: MemoryState,
  merchant: { readonly id: string; readonly url: string; readonly secret: string; readonly atMs: number }
) => {
  const at = merchant.atMs
  const row: Merchant = {
    id: merchant.id,
    name: merchant.id,
    webhookUrl: merchant.url,
    webhookSecret: merchant.secret,
    createdAt: at,
    updatedAt: at
  }
  state.merchants.set(row.id, row)
  return row
}

/** A `payment.captured` event of the merchant in the outbox (the dispatcher's next poll makes it a delivery). */
export const seedEvent = (
  state: MemoryState,
  event: { readonly id: string; readonly merchantId: string; readonly atMs: number }
): PaymentEvent => {
  const paymentId = `pay_${event.id}`
  const row: PaymentEvent = {
    id: event.id,
    paymentId,
    merchantId: event.merchantId,
    type: "payment.captured",
    sequence: 3,
    createdAt: event.atMs,
    data: {
      id: paymentId,
      merchant_id: event.merchantId,
      status: "captured",
      amount_cents: 4200,
      currency: "EUR",
      captured_amount_cents: 4200,
      refunded_amount_cents: 0,
      fraud_score: 0.1,
      failure_code: null,
      dispute: null
    }
  }
  state.outbox.push(row)
  return row
}

/** The webhook engine (service, transport — production HTTP unless given — dispatcher) over given stores. */
export const engineLayer = <E, R>(
  stores: Layer.Layer<any, E, R>,
  config: Partial<Config.AppConfigShape>,
  options: Partial<WebhookDispatcher.DispatcherOptions> = {},
  seed = 1,
  transport: Layer.Layer<WebhookTransport.WebhookTransport, never, Config.AppConfig> = WebhookTransport.layer
) => {
  const infrastructure = Layer.mergeAll(
    transport,
    Ids.layerSeeded(seed)
  ).pipe(Layer.provideMerge(stores), Layer.provideMerge(Config.layerWith(Config.defaultsWith(config))))
  return WebhookDispatcher.layerWith(options).pipe(
    Layer.provideMerge(Webhooks.layer),
    Layer.provideMerge(infrastructure)
  )
}
