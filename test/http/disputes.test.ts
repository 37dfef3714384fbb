import { Clock, Effect, Layer } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { sandboxDisputeId } from "../../src/acquirer/Acquirer.ts"
import type { DisputeAction } from "../../src/domain/Dispute.ts"
import { disputeFeeCents, processingFeeCents } from "../../src/domain/Money.ts"
import { Payments } from "../../src/services/Payments.ts"
import { WebhookStore } from "../../src/store/WebhookStore.ts"
import { sandboxDisputePass } from "../../src/workers/SandboxDisputes.ts"
import { type Client, client, createTransaction, errorOf, startApp, type TestApp } from "../support/app.ts"
import { pgStoreLayer } from "../support/database.ts"
import { answer, engineLayer, eventually, startReceiver, verifySignature } from "../webhooks/support.ts"

// Disputes end to end on PostgreSQL: acquirer notifications through the service
// operation, everything observed through the HTTP API.

let app: TestApp
beforeAll(async () => {
  app = await startApp({ label: "disputes", config: { webhookAllowPrivateUrls: true } })
})
afterAll(async () => {
  await app.close()
})

const fee = processingFeeCents(10_000, "USD")

const notify = (paymentId: string, acquirerDisputeId: string, action: DisputeAction) =>
  app.run(Effect.flatMap(Payments, (p) => p.applyDisputeNotification({ acquirerDisputeId, paymentId, action })))
const notifyExit = (paymentId: string, acquirerDisputeId: string, action: DisputeAction) =>
  app.run(
    Effect.flatMap(Payments, (p) => p.applyDisputeNotification({ acquirerDisputeId, paymentId, action })).pipe(
      Effect.result
    )
  )
const settleNow = () =>
  app.run(
    Effect.flatMap(Payments, (p) => Effect.flatMap(Clock.currentTimeMillis, (now) => p.settle(now + 1)))
  )

/** The sandbox network's pass as it would run `aheadMs` from now (a clock that is ahead, not a sleep). */
const passIn = (aheadMs: number) =>
  Clock.clockWith((clock) => {
    const ahead: Clock.Clock = {
      currentTimeMillisUnsafe: () => clock.currentTimeMillisUnsafe() + aheadMs,
      currentTimeNanosUnsafe: () => clock.currentTimeNanosUnsafe() + BigInt(aheadMs) * 1_000_000n,
      currentTimeMillis: Effect.map(clock.currentTimeMillis, (ms) => ms + aheadMs),
      currentTimeNanos: Effect.map(clock.currentTimeNanos, (ns) => ns + BigInt(aheadMs) * 1_000_000n),
      monotonicTimeNanosUnsafe: () => clock.monotonicTimeNanosUnsafe(),
      monotonicTimeNanos: clock.monotonicTimeNanos,
      sleep: (duration) => clock.sleep(duration)
    }
    return Effect.provideService(sandboxDisputePass, Clock.Clock, ahead)
  })

const newMerchant = async () => client(app.baseUrl, (await app.createMerchant("Disputed Shop")).key)
const balance = async (api: Client) => (await api.get("/api/v1/merchants/me/balance")).body.balances[0]
const transaction = async (api: Client, id: string) => (await api.get(`/api/v1/transactions/${id}`)).body.transaction
const events = async (api: Client, id: string) =>
  (await api.get(`/api/v1/transactions/${id}/events`)).body.events as Array<any>
const ledger = async (api: Client, id: string) =>
  (await api.get(`/api/v1/transactions/${id}/ledger`)).body.ledger_entries as Array<any>
/** The last ledger group of a payment as [account, direction, amount] rows. */
const lastGroup = async (api: Client, id: string) => {
  const entries = await ledger(api, id)
  const groupId = entries[entries.length - 1].group_id
  return entries.filter((e) => e.group_id === groupId).map((e) => [e.account, e.direction, e.amount_cents]).sort()
}

describe("a dispute on a captured payment", () => {
  it("opening moves the disputed amount from pending to reserved; refunds of it are refused while open; won returns it", async () => {
    const api = await newMerchant()
    const t = await createTransaction(api, { amount_cents: 10_000 })
    expect(t.dispute).toBeNull()
    // The hot path wrote no dispute: the column is SQL NULL (the sandbox worker's index relies on it).
    expect((await app.query("SELECT dispute IS NULL AS none FROM payments WHERE id = $1", [t.id]))[0]?.none).toBe(true)

    const opened = await notify(t.id, "dp_http_1", { _tag: "Open", reason: "product_not_received", amountCents: 4_000 })
    expect(opened.applied).toBe(true)
    const record = await transaction(api, t.id)
    expect(record.status).toBe("captured")
    expect(record.dispute).toEqual({
      status: "open",
      reason: "product_not_received",
      amount_cents: 4_000,
      opened_at: record.updated_at,
      resolved_at: null
    })
    expect(await balance(api)).toEqual({
      currency: "USD",
      pending: 10_000 - fee - 4_000,
      available: 0,
      reserved: 4_000
    })
    expect(await lastGroup(api, t.id)).toEqual([["merchant_pending", "debit", 4_000], [
      "merchant_reserved",
      "credit",
      4_000
    ]])

    // The undisputed 6,000 may be refunded; a cent more, or "the whole remainder", is 409 and changes nothing.
    for (const body of [{ amount_cents: 6_001 }, undefined]) {
      const refused = await api.post(`/api/v1/transactions/${t.id}/refund`, body)
      expect(refused.status).toBe(409)
      expect(errorOf(refused)).toMatchObject({ code: "invalid_state" })
      expect(errorOf(refused).message).toContain("open dispute")
    }
    expect((await transaction(api, t.id)).refunded_amount_cents).toBe(0)
    const refunded = await api.post(`/api/v1/transactions/${t.id}/refund`, { amount_cents: 1_000 })
    expect(refunded.status).toBe(200)
    expect(refunded.body.transaction).toMatchObject({ status: "captured", refunded_amount_cents: 1_000 })

    const won = await notify(t.id, "dp_http_1", { _tag: "Resolve", outcome: "won" })
    expect(won.applied).toBe(true)
    const after = await transaction(api, t.id)
    expect(after.dispute).toMatchObject({ status: "won", amount_cents: 4_000, resolved_at: after.updated_at })
    expect(await balance(api)).toEqual({ currency: "USD", pending: 10_000 - fee - 1_000, available: 0, reserved: 0 })
    expect(await lastGroup(api, t.id)).toEqual([["merchant_pending", "credit", 4_000], [
      "merchant_reserved",
      "debit",
      4_000
    ]])

    const types = (await events(api, t.id)).map((e) => e.type)
    expect(types.slice(-3)).toEqual([
      "payment.dispute_opened",
      "payment.partially_refunded",
      "payment.dispute_resolved"
    ])
    const [openedEvent, , resolvedEvent] = (await events(api, t.id)).slice(-3)
    expect(openedEvent.data.dispute).toMatchObject({ status: "open", amount_cents: 4_000, resolved_at: null })
    expect(resolvedEvent.data.dispute).toMatchObject({ status: "won", amount_cents: 4_000 })

    // Resolving twice (the acquirer's retry) changes nothing; a different outcome is refused.
    const entriesBefore = await ledger(api, t.id)
    const again = await notify(t.id, "dp_http_1", { _tag: "Resolve", outcome: "won" })
    expect(again.applied).toBe(false)
    expect(again.payment.dispute?.status).toBe("won")
    const reopened = await notify(t.id, "dp_http_1", { _tag: "Open", reason: "other" })
    expect(reopened.applied).toBe(false)
    const conflicting = await notifyExit(t.id, "dp_http_1", { _tag: "Resolve", outcome: "lost" })
    expect(conflicting._tag).toBe("Failure")
    expect(await ledger(api, t.id)).toEqual(entriesBefore)
    expect((await events(api, t.id)).length).toBe(types.length)
    // After a won dispute the remaining 9,000 are refundable again.
    expect((await api.post(`/api/v1/transactions/${t.id}/refund`)).body.transaction).toMatchObject({
      status: "refunded",
      refunded_amount_cents: 10_000
    })
  })

  it("settlement while a dispute is open settles only what is still pending; a dispute won after settlement returns to available", async () => {
    const api = await newMerchant()
    const t = await createTransaction(api, { amount_cents: 10_000 })
    await notify(t.id, "dp_http_2", { _tag: "Open", reason: "duplicate", amountCents: 4_000 })
    await settleNow()
    expect((await transaction(api, t.id)).status).toBe("settled")
    expect(await balance(api)).toEqual({
      currency: "USD",
      pending: 0,
      available: 10_000 - fee - 4_000,
      reserved: 4_000
    })
    expect(await lastGroup(api, t.id)).toEqual([["merchant_available", "credit", 10_000 - fee - 4_000], [
      "merchant_pending",
      "debit",
      10_000 - fee - 4_000
    ]])
    await notify(t.id, "dp_http_2", { _tag: "Resolve", outcome: "won" })
    expect(await balance(api)).toEqual({ currency: "USD", pending: 0, available: 10_000 - fee, reserved: 0 })
  })
})

describe("a lost dispute", () => {
  it("on a settled payment: the reserved money goes to the network and the dispute fee is charged from available", async () => {
    const api = await newMerchant()
    const t = await createTransaction(api, { amount_cents: 10_000 })
    await settleNow()
    await notify(t.id, "dp_http_3", { _tag: "Open", reason: "fraudulent" })
    // Without an amount, the whole captured amount not refunded is disputed, from available.
    expect((await transaction(api, t.id)).dispute).toMatchObject({ status: "open", amount_cents: 10_000 })
    expect(await balance(api)).toEqual({ currency: "USD", pending: 0, available: -fee, reserved: 10_000 })
    await notify(t.id, "dp_http_3", { _tag: "Resolve", outcome: "lost" })
    expect(await balance(api)).toEqual({
      currency: "USD",
      pending: 0,
      available: -fee - disputeFeeCents.USD,
      reserved: 0
    })
    expect(await lastGroup(api, t.id)).toEqual([
      ["card_network", "credit", 10_000],
      ["fee_revenue", "credit", disputeFeeCents.USD],
      ["merchant_available", "debit", disputeFeeCents.USD],
      ["merchant_reserved", "debit", 10_000]
    ])
    // The chargeback returned the money already: nothing is left to refund.
    expect((await api.post(`/api/v1/transactions/${t.id}/refund`, { amount_cents: 1 })).status).toBe(422)

    // It counts as fraud the screening let through (fraud statistics; not a block) and as a dispute (analytics).
    const stats = (await api.get("/api/v1/fraud/stats")).body.fraud_stats
    expect(stats.lost_dispute_count).toBe(1)
    expect(stats.lost_dispute_rate).toBe(1)
    expect(stats.fraud_rate).toBe(0)
    expect((await api.get("/api/v1/merchants/me/analytics")).body.analytics.dispute_rate).toBe(1)
  })

  it("before settlement: the fee comes from pending, and settlement sweeps only the rest", async () => {
    const api = await newMerchant()
    const t = await createTransaction(api, { amount_cents: 10_000 })
    await createTransaction(api, { amount_cents: 10_000 })
    await notify(t.id, "dp_http_4", { _tag: "Open", reason: "fraudulent", amountCents: 2_500 })
    await notify(t.id, "dp_http_4", { _tag: "Resolve", outcome: "lost" })
    const pending = 2 * (10_000 - fee) - 2_500 - disputeFeeCents.USD
    expect(await balance(api)).toEqual({ currency: "USD", pending, available: 0, reserved: 0 })
    await settleNow()
    expect(await balance(api)).toEqual({ currency: "USD", pending: 0, available: pending, reserved: 0 })
    expect((await api.get("/api/v1/merchants/me/analytics")).body.analytics.dispute_rate).toBe(0.5)
  })
})

describe("notifications that do not fit", () => {
  it("are refused and change nothing", async () => {
    const api = await newMerchant()
    const manual = await createTransaction(api, { capture_method: "manual" })
    const declined = await createTransaction(api, { card_token: "tok_decline_do_not_honor" })
    const t = await createTransaction(api, { amount_cents: 3_000 })
    const refusedWith = async (paymentId: string, id: string, action: DisputeAction) => {
      const exit = await notifyExit(paymentId, id, action)
      if (exit._tag !== "Failure") throw new Error("expected a refusal")
      return exit.failure._tag
    }
    expect(await refusedWith(manual.id, "dp_r1", { _tag: "Open", reason: "other" })).toBe("InvalidState")
    expect(await refusedWith(declined.id, "dp_r2", { _tag: "Open", reason: "other" })).toBe("InvalidState")
    expect(await refusedWith(t.id, "dp_r3", { _tag: "Open", reason: "other", amountCents: 3_001 })).toBe("InvalidInput")
    expect(await refusedWith(t.id, "dp_r3", { _tag: "Resolve", outcome: "won" })).toBe("InvalidState")
    expect(await refusedWith("pay_unknown", "dp_r4", { _tag: "Open", reason: "other" })).toBe("NotFound")
    await notify(t.id, "dp_r5", { _tag: "Open", reason: "other" })
    expect(await refusedWith(t.id, "dp_r6", { _tag: "Open", reason: "other" })).toBe("InvalidState")
    expect(await refusedWith(t.id, "dp_r6", { _tag: "Resolve", outcome: "lost" })).toBe("InvalidState")
    expect((await transaction(api, t.id)).dispute).toMatchObject({ status: "open", amount_cents: 3_000 })
    expect(await balance(api)).toMatchObject({ reserved: 3_000 })
  })
})

describe("sandbox tokens", () => {
  it("tok_dispute_won and tok_dispute_lost: the sandbox network opens a dispute after capture and resolves it with the token's outcome", async () => {
    const api = await newMerchant()
    const won = await createTransaction(api, { card_token: "tok_dispute_won", amount_cents: 5_000 })
    const lost = await createTransaction(api, { card_token: "tok_dispute_lost", amount_cents: 5_000 })
    // A pass at the time it runs finds nothing due yet (SANDBOX_DISPUTE_OPEN_AFTER, 1 minute by default).
    expect(await app.run(sandboxDisputePass)).toBe(0)
    // A pass a minute and a second later opens both disputes; one two minutes later resolves them.
    expect(await app.run(passIn(61_000))).toBe(2)
    expect((await transaction(api, won.id)).dispute).toMatchObject({
      status: "open",
      reason: "fraudulent",
      amount_cents: 5_000
    })
    expect((await balance(api)).reserved).toBe(10_000)
    expect(await app.run(passIn(61_000))).toBe(0)
    expect(await app.run(passIn(122_000))).toBe(2)
    expect((await transaction(api, won.id)).dispute).toMatchObject({ status: "won" })
    expect((await transaction(api, lost.id)).dispute).toMatchObject({ status: "lost" })
    // Nothing is left to do: another pass changes nothing.
    expect(await app.run(passIn(300_000))).toBe(0)
    const row = await app.query("SELECT dispute->>'acquirerDisputeId' AS id FROM payments WHERE id = $1", [won.id])
    expect(row[0]?.id).toBe(sandboxDisputeId(won.id))
    const fee5000 = processingFeeCents(5_000, "USD")
    expect(await balance(api)).toEqual({
      currency: "USD",
      pending: 2 * (5_000 - fee5000) - 5_000 - disputeFeeCents.USD,
      available: 0,
      reserved: 0
    })
  })
})

describe("webhooks", () => {
  it("payment.dispute_opened and payment.dispute_resolved go out as signed webhooks with the dispute in the data", async () => {
    const receiver = await startReceiver(answer(200))
    try {
      const merchant = await app.createMerchant("Hooked Shop")
      const api = client(app.baseUrl, merchant.key)
      expect((await api.patch("/api/v1/merchants/me", { webhook_url: receiver.url })).status).toBe(200)
      const t = await createTransaction(api, { amount_cents: 2_000 })
      await notify(t.id, "dp_hook", { _tag: "Open", reason: "fraudulent", amountCents: 500 })
      await notify(t.id, "dp_hook", { _tag: "Resolve", outcome: "lost" })
      await notify(t.id, "dp_hook", { _tag: "Resolve", outcome: "lost" })
      const dispatcher = engineLayer(pgStoreLayer(app.databaseUrl), { webhookAllowPrivateUrls: true }, {
        pollIntervalMs: 50
      }, 99)
      const listDeliveries = Effect.flatMap(
        WebhookStore,
        (s) => s.listDeliveries(merchant.merchantId, {}, { page: 1, perPage: 100 })
      )
      await Effect.runPromise(Effect.scoped(Effect.gen(function*() {
        const context = yield* Layer.build(dispatcher)
        yield* Effect.provide(
          eventually(
            listDeliveries,
            (page) =>
              page.items.filter((d) => d.eventType.startsWith("payment.dispute") && d.status === "succeeded").length ===
                2
          ),
          context
        )
      })))
      const bodies = receiver.received.map((r) => ({ r, body: JSON.parse(r.body) })).filter(({ body }) =>
        body.type.startsWith("payment.dispute")
      )
      // One delivery per event (in any order: an endpoint's deliveries run concurrently); the repeated resolve sent nothing.
      expect(bodies.map(({ body }) => body.type).sort()).toEqual(["payment.dispute_opened", "payment.dispute_resolved"])
      const resolved = bodies.find(({ body }) => body.type === "payment.dispute_resolved")
      expect(resolved?.body.data.dispute).toMatchObject({ status: "lost", reason: "fraudulent", amount_cents: 500 })
      for (const { r } of bodies) {
        expect(
          verifySignature(
            String(r.headers["x-service-signature"]),
            r.body,
            merchant.webhookSecret,
            300,
            Math.floor(Date.now() / 1000)
          )
        ).toBe(true)
      }
    } finally {
      await receiver.close()
    }
  })
})
