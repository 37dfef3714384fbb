import { Effect, Redacted } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { operationKeys } from "../../src/acquirer/Acquirer.ts"
import { makeProcessor } from "../../src/acquirer/sandbox-processor/Processor.ts"
import { type RunningProcessor, startProcessorServer } from "../../src/acquirer/sandbox-processor/Server.ts"
import { make } from "../../src/acquirer/Stripe.ts"
import { startNotificationReceiver } from "../support/notificationReceiver.ts"
import { checkEvent } from "./openapiCheck.ts"

// The standalone sandbox processor on a real socket: the connector drives it over HTTP, a lost
// answer arrives as a reset connection, faults switch through the admin route, and its dispute
// notifications reach a webhook endpoint signed as Stripe signs them.

const secretKey = "sk_test_standalone01"
const webhookSecret = "whsec_standalone01"

let receiver: Awaited<ReturnType<typeof startNotificationReceiver>>
const deliveries = (count: number) => receiver.first(count)

let running: RunningProcessor
beforeAll(async () => {
  receiver = await startNotificationReceiver()
  running = await startProcessorServer({
    processor: makeProcessor({ secretKey }),
    port: 0,
    webhook: { url: receiver.url("/stripe"), secret: webhookSecret },
    log: () => {}
  })
})
afterAll(async () => {
  await running.close()
  await receiver.close()
})

const connector = () =>
  make({
    secretKey: Redacted.make(secretKey),
    webhookSecret: Redacted.make(webhookSecret),
    apiBase: running.url,
    defaultTimeoutMs: 10_000
  })

const admin = async (path: string, body?: unknown) => {
  const response = await fetch(
    `${running.url}${path}`,
    body === undefined ? {} : { method: "POST", body: JSON.stringify(body) }
  )
  return { status: response.status, body: await response.json() as unknown }
}

describe("the standalone sandbox processor", () => {
  it("answers the connector over a socket; a lost answer is a reset, and the replay finds the one intent", async () => {
    const request = {
      paymentId: "pay_socket1",
      merchantId: "mer_1",
      amountCents: 1_200,
      currency: "USD",
      cardToken: "tok_dispute_won",
      cardBrand: "visa"
    }
    expect((await admin("/__faults", { lostAnswerRate: 1 })).body).toMatchObject({ lostAnswerRate: 1 })
    const lost = await Effect.runPromiseExit(connector().authorize(request))
    expect(lost._tag === "Failure" && String(lost.cause)).toContain("AcquirerOutcomeUnknown")
    await admin("/__faults", { lostAnswerRate: 0 })
    const outcome = await Effect.runPromise(connector().authorize(request))
    expect(outcome).toMatchObject({ _tag: "Approved" })
    const intents = (await admin("/__intents")).body as Array<{ id: string }>
    expect(intents.map((intent) => intent.id)).toEqual([outcome._tag === "Approved" ? outcome.reference : null])
    expect((await admin("/__faults", { lostAnswerRate: 2 })).status).toBe(400)

    const reference = outcome._tag === "Approved" ? outcome.reference! : ""
    await Effect.runPromise(connector().operations!.capture({
      paymentId: request.paymentId,
      reference,
      idempotencyKey: operationKeys.capture(request.paymentId),
      timeoutMs: 10_000,
      amountCents: 1_200,
      currency: "USD"
    }))
    await admin("/__advance", {})
    const [opened, closed] = await deliveries(2)
    const notifications = await Promise.all([opened!, closed!].map(({ body, signature }) => {
      expect(checkEvent(JSON.parse(body))).toEqual([])
      return Effect.runPromise(connector().operations!.notification({ body, signature, nowMs: Date.now() }))
    }))
    // Sent one after the other, the two deliveries may arrive in either order.
    const actions = notifications.map((n) => n._tag === "Dispute" ? [n.dispute.paymentId, n.dispute.action] : n)
    expect(actions.sort((a, b) => JSON.stringify(a).localeCompare(JSON.stringify(b)))).toEqual([
      [request.paymentId, { _tag: "Open", reason: "fraudulent", amountCents: 1_200 }],
      [request.paymentId, { _tag: "Resolve", outcome: "won" }]
    ])
  })
})
