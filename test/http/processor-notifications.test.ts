import { Layer, Redacted } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { Acquirer } from "../../src/acquirer/Acquirer.ts"
import { makeProcessor } from "../../src/acquirer/sandbox-processor/Processor.ts"
import { type RunningProcessor, startProcessorServer } from "../../src/acquirer/sandbox-processor/Server.ts"
import { make } from "../../src/acquirer/Stripe.ts"
import { startApp, type TestApp } from "../support/app.ts"
import { startNotificationReceiver } from "../support/notificationReceiver.ts"

// The service with ACQUIRER=stripe's connector against the standalone sandbox processor over a
// socket: payments go through the processor, and its signed dispute notifications, posted to
// /api/v1/processor/notifications, feed the dispute flow once each.

const secretKey = "sk_test_notify0123"
const webhookSecret = "whsec_notify0123"

/** What the processor posts, caught here so the test can deliver it (and deliver it again). */
let receiver: Awaited<ReturnType<typeof startNotificationReceiver>>
const notifications = (count: number) => receiver.first(count)

let processor: RunningProcessor
let app: TestApp
let sandboxApp: TestApp
beforeAll(async () => {
  receiver = await startNotificationReceiver()
  processor = await startProcessorServer({
    processor: makeProcessor({ secretKey }),
    port: 0,
    webhook: { url: receiver.url(), secret: webhookSecret },
    log: () => {}
  })
  const connector = make({
    secretKey: Redacted.make(secretKey),
    webhookSecret: Redacted.make(webhookSecret),
    apiBase: processor.url,
    defaultTimeoutMs: 10_000
  })
  app = await startApp({
    label: "processor_notifications",
    acquirer: Layer.succeed(Acquirer, connector),
    config: { acquirer: "stripe" }
  })
  sandboxApp = await startApp({ label: "processor_notifications_sandbox" })
}, 120_000)
afterAll(async () => {
  await app?.close()
  await sandboxApp?.close()
  await processor?.close()
  await receiver?.close()
})

const post = (target: TestApp, body: string, signature: string | undefined) =>
  fetch(`${target.baseUrl}/api/v1/processor/notifications`, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      ...(signature === undefined ? {} : { "stripe-signature": signature })
    },
    body
  }).then(async (response) => ({ status: response.status, body: await response.json() as any }))

/** The merchant's API on the service with the connector, answers parsed. */
const apiOf = (merchant: { readonly key: string }) => (method: string, path: string, body?: unknown) =>
  fetch(`${app.baseUrl}/api/v1${path}`, {
    method,
    headers: { authorization: `Bearer ${merchant.key}`, "content-type": "application/json" },
    ...(body === undefined ? {} : { body: JSON.stringify(body) })
  }).then(async (response) => ({ status: response.status, body: await response.json() as any }))

describe("POST /api/v1/processor/notifications", () => {
  it("applies the processor's dispute notifications to the payment, each once; a bad signature is 401 and changes nothing", async () => {
    const merchant = await app.createMerchant()
    const created = await fetch(`${app.baseUrl}/api/v1/transactions`, {
      method: "POST",
      headers: { authorization: `Bearer ${merchant.key}`, "content-type": "application/json" },
      body: JSON.stringify({
        transaction: {
          amount_cents: 3_100,
          currency: "USD",
          card_token: "tok_dispute_lost",
          card_brand: "visa",
          card_last_four: "4242"
        }
      })
    }).then((response) => response.json() as any)
    const paymentId = created.transaction.id as string
    expect(created.transaction.status).toBe("captured")

    await fetch(`${processor.url}/__advance`, { method: "POST", body: "{}" })
    const [first, second] = await notifications(2)
    const bodies = [first!, second!].sort((
      a,
      b
    ) => (a.body.includes("dispute.created") ? -1 : b.body.includes("dispute.created") ? 1 : 0))
    const [opened, closed] = bodies as [typeof first & {}, typeof first & {}]

    expect((await post(app, opened.body, `${opened.signature.split(",")[0]},v1=${"0".repeat(64)}`)).status).toBe(401)
    expect((await post(app, opened.body, undefined)).status).toBe(401)
    const read = () =>
      fetch(`${app.baseUrl}/api/v1/transactions/${paymentId}`, { headers: { authorization: `Bearer ${merchant.key}` } })
        .then((r) => r.json() as any)
    expect((await read()).transaction.dispute).toBeNull()

    const applied = await post(app, opened.body, opened.signature)
    expect(applied).toMatchObject({ status: 200, body: { received: true, outcome: "dispute_applied" } })
    expect((await read()).transaction.dispute).toMatchObject({
      status: "open",
      reason: "fraudulent",
      amount_cents: 3_100
    })
    // The processor sends it again: nothing changes.
    expect((await post(app, opened.body, opened.signature)).body.outcome).toBe("already_applied")
    expect((await post(app, closed.body, closed.signature)).body.outcome).toBe("dispute_applied")
    expect((await read()).transaction.dispute).toMatchObject({ status: "lost" })
    expect((await post(app, closed.body, closed.signature)).body.outcome).toBe("already_applied")
    const events = await fetch(`${app.baseUrl}/api/v1/transactions/${paymentId}/events`, {
      headers: { authorization: `Bearer ${merchant.key}` }
    })
      .then((r) => r.json() as any)
    expect(events.events.map((e: { type: string }) => e.type).filter((t: string) => t.startsWith("payment.dispute")))
      .toEqual([
        "payment.dispute_opened",
        "payment.dispute_resolved"
      ])
  })

  it("a capture and a refund asked for later name the intent stored with the authorization: the processor's lagging search is not needed", async () => {
    const merchant = await app.createMerchant()
    const api = apiOf(merchant)
    // Search finds nothing for ten minutes after a write.
    await fetch(`${processor.url}/__faults`, { method: "POST", body: JSON.stringify({ searchLagMs: 600_000 }) })
    try {
      const created = await api("POST", "/transactions", {
        transaction: {
          amount_cents: 5_000,
          currency: "USD",
          card_token: "tok_visa",
          card_brand: "visa",
          card_last_four: "4242",
          capture_method: "manual"
        }
      })
      expect(created.body.transaction.status).toBe("authorized")
      const id = created.body.transaction.id as string
      expect((await api("POST", `/transactions/${id}/capture`, { amount_cents: 4_000 })).body.transaction)
        .toMatchObject({ status: "captured", captured_amount_cents: 4_000 })
      expect((await api("POST", `/transactions/${id}/refund`, { amount_cents: 1_000 })).body.transaction).toMatchObject(
        { refunded_amount_cents: 1_000 }
      )
      const intents = await fetch(`${processor.url}/__intents`).then((r) => r.json() as any)
      const intent = intents.find((i: any) => i.metadata.payment_id === id)
      expect(intent).toMatchObject({ status: "succeeded", amount_received: 4_000 })
      expect(intent.latest_charge.amount_refunded).toBe(1_000)
    } finally {
      await fetch(`${processor.url}/__faults`, { method: "POST", body: JSON.stringify({ searchLagMs: 0 }) })
    }
  })

  it("takes back a refund the processor failed after accepting it, once; the ledger returns the money to the merchant", async () => {
    const merchant = await app.createMerchant()
    const api = apiOf(merchant)
    const created = await api("POST", "/transactions", {
      transaction: {
        amount_cents: 3_100,
        currency: "USD",
        card_token: "tok_refund_fail",
        card_brand: "visa",
        card_last_four: "4242"
      }
    })
    const id = created.body.transaction.id as string
    expect(created.body.transaction.status).toBe("captured")
    expect((await api("POST", `/transactions/${id}/refund`, {})).body.transaction).toMatchObject({
      status: "refunded",
      refunded_amount_cents: 3_100
    })

    const seen = receiver.caught.length
    await fetch(`${processor.url}/__advance`, { method: "POST", body: "{}" })
    const failed = (await notifications(seen + 1))[seen]!
    expect(JSON.parse(failed.body)).toMatchObject({
      type: "refund.failed",
      data: { object: { status: "failed", amount: 3_100 } }
    })

    expect(await post(app, failed.body, failed.signature)).toMatchObject({
      status: 200,
      body: { received: true, outcome: "refund_failure_applied" }
    })
    const after = (await api("GET", `/transactions/${id}`)).body.transaction
    expect(after).toMatchObject({ status: "captured", refunded_amount_cents: 0 })
    const events = (await api("GET", `/transactions/${id}/events`)).body.events.map((e: { type: string }) => e.type)
    expect(events.slice(-2)).toEqual(["payment.refunded", "payment.refund_failed"])
    const ledger = (await api("GET", `/transactions/${id}/ledger`)).body
    const entries = ledger.ledger_entries as Array<{ account: string; direction: string; amount_cents: number }>
    const net = (account: string) =>
      entries.filter((e) => e.account === account).reduce(
        (sum, e) => sum + (e.direction === "credit" ? e.amount_cents : -e.amount_cents),
        0
      )
    // Captured, less the fee: the refund taken back returns the 3,100 to pending.
    expect(net("merchant_pending")).toBe(3_100 - after.fee_cents)
    // The processor reports it again: nothing changes.
    expect((await post(app, failed.body, failed.signature)).body.outcome).toBe("already_applied")
    expect((await api("GET", `/transactions/${id}`)).body.transaction).toMatchObject({
      status: "captured",
      refunded_amount_cents: 0
    })
    // The money is the merchant's to refund again.
    expect((await api("POST", `/transactions/${id}/refund`, { amount_cents: 100 })).status).toBe(200)
  })

  it("is 404 when no processor is configured (the in-process sandbox)", async () => {
    const answer = await post(sandboxApp, "{}", "t=1,v1=00")
    expect(answer.status).toBe(404)
    expect(answer.body.error.code).toBe("not_found")
  })
})
