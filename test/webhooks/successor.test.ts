import { Effect } from "effect"
import { describe, expect, it } from "vitest"
import type { PaymentEvent } from "../../src/domain/Payment.ts"
import { StoreUnavailable } from "../../src/store/Store.ts"
import * as WebhookDispatcher from "../../src/workers/WebhookDispatcher.ts"
import { seedMerchant } from "./support.ts"
import { after, status, VirtualWebhooks } from "./virtual.ts"

/**
 * The successor an attempt's record claims (the payment's next delivery to its URL) is queued on
 * the attempt's own endpoint; a full queue gives it back to the store, unsent, for the next poll
 * (src/workers/dispatcher/Attempt.ts). Under virtual time (./virtual.ts).
 */

const t0 = Date.parse("2026-11-22T04:00:00.000Z")
const url = "https://shop.example/hooks"

const event = (paymentId: string, sequence: number, id: string): PaymentEvent => ({
  id,
  paymentId,
  merchantId: "mer_1",
  type: sequence === 1 ? "payment.authorized" : "payment.captured",
  sequence,
  createdAt: t0,
  data: {
    id: paymentId,
    merchant_id: "mer_1",
    status: "captured",
    amount_cents: 100,
    currency: "USD",
    captured_amount_cents: 100,
    refunded_amount_cents: 0,
    fraud_score: 0.1,
    failure_code: null,
    dispute: null
  }
})

/**
 * Payment A's two events and payment B's one, an endpoint answering in 1 s, one worker and a
 * queue of one: the first poll claims A1 and B1 (A2 waits for A1) and gives B1 back (full); the
 * next claims B1, which waits in the queue while A1 is answered, so A1's successor, A2, finds the
 * queue full.
 */
const setUp = (failReleaseOf: string | null) => {
  const releases: Array<[string, number]> = []
  let failed = false
  const h: VirtualWebhooks = new VirtualWebhooks({
    startMs: t0,
    respond: () => after(1_000, status(200)),
    wrapStore: (store) => ({
      ...store,
      releaseLease: (id, token, cutAt) =>
        Effect.suspend(() => {
          releases.push([id, h.nowMs - t0])
          if (id === failReleaseOf && !failed) {
            failed = true
            return Effect.fail(new StoreUnavailable({ cause: "test: connection lost" }))
          }
          return store.releaseLease(id, token, cutAt)
        })
    })
  })
  seedMerchant(h.state, { id: "mer_1", url, secret: "whsec_successor", atMs: t0 })
  h.state.outbox.push(event("pay_a", 1, "evt_a1"), event("pay_a", 2, "evt_a2"), event("pay_b", 1, "evt_b1"))
  const engine = h.start({}, { pollIntervalMs: 250, concurrencyPerEndpoint: 1, queueCapacity: 1 })
  const sent = () => h.posts.map((p) => [p.headers["x-service-event-id"], p.atMs - t0])
  return { h, engine, releases, sent }
}

describe("an attempt's successor and its endpoint's queue", () => {
  it("a successor that finds its endpoint's queue full is given back unsent at once, and the next poll takes it", () => {
    const { h, releases, sent } = setUp(null)
    h.runUntil(t0 + 3_000)
    expect(sent()).toEqual([["evt_a1", 0], ["evt_b1", 1_000], ["evt_a2", 2_000]])
    // B1 given back by the first poll (queue full), A2 by A1's attempt when it was recorded.
    expect(releases).toEqual([["whd_b1", 0], ["whd_a2", 1_000]])
    expect(h.deliveries("mer_1").map((d) => [d.eventId, d.status, d.attempts.length])).toEqual(
      expect.arrayContaining([["evt_a1", "succeeded", 1], ["evt_a2", "succeeded", 1], ["evt_b1", "succeeded", 1]])
    )
    expect(h.logs).toEqual([])
  })

  it("a successor whose give-back fails is logged, not the attempt's failure, and is taken over when its lease ends", () => {
    const { engine, h, releases, sent } = setUp("whd_a2")
    const leaseMs = engine.config.webhookTimeoutMs + WebhookDispatcher.defaultOptions.leaseMarginMs
    expect(h.logs).toEqual([])
    h.runUntil(t0 + 1_000)
    expect(releases).toEqual([["whd_b1", 0], ["whd_a2", 1_000]])
    expect(h.logs.map((l) => [l.level, l.message])).toEqual([
      ["WARN", "webhook delivery whd_a2 (successor of whd_a1) not handed out; taken over when its lease ends"]
    ])
    // A1's attempt stood: recorded, succeeded.
    expect(h.deliveries("mer_1").find((d) => d.eventId === "evt_a1")).toMatchObject({ status: "succeeded" })
    // A2 stays under the successor's lease (from the end of A1's attempt) until it ends, not a millisecond less.
    h.runUntil(t0 + 1_000 + leaseMs - 1)
    expect(sent()).toEqual([["evt_a1", 0], ["evt_b1", 1_000]])
    h.runUntil(t0 + 1_000 + leaseMs + 1_000)
    expect(sent()).toEqual([["evt_a1", 0], ["evt_b1", 1_000], ["evt_a2", 1_000 + leaseMs]])
    expect(h.deliveries("mer_1").every((d) => d.status === "succeeded" && d.attempts.length === 1)).toBe(true)
    expect(h.logs).toHaveLength(1)
  })
})
