import { describe, expect, it } from "vitest"
import type { EventType, PaymentEvent } from "../../src/domain/Payment.ts"
import type { MemoryState } from "../../src/store/MemoryStore.ts"
import { seedMerchant } from "./support.ts"
import { after, type Post, type Respond, status, VirtualWebhooks } from "./virtual.ts"

// Issue 12 item 6: the events of one payment reach an endpoint in order; the next waits until the
// previous is delivered or has failed for good, while other payments go on concurrently.
// The real dispatcher, Webhooks service and memory store under virtual time (./virtual.ts).

const t0 = Date.parse("2026-11-22T04:00:00.000Z")
const url = "https://shop.example/hooks"
const types: ReadonlyArray<EventType> = [
  "payment.initiated",
  "payment.authorized",
  "payment.fraud_passed",
  "payment.captured"
]

/** Events of `payments` payments, all in the outbox at once, interleaved across payments. */
const seedPayments = (state: MemoryState, payments: number, perPayment = types.length) => {
  for (let sequence = 1; sequence <= perPayment; sequence++) {
    for (let p = 0; p < payments; p++) {
      const paymentId = `pay_order${p}`
      const event: PaymentEvent = {
        id: `evt_${p}_${sequence}`,
        paymentId,
        merchantId: "mer_1",
        type: types[(sequence - 1) % types.length]!,
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
      }
      state.outbox.push(event)
    }
  }
}

const paymentOf = (post: Post) => JSON.parse(post.body).data.id as string
const sequenceOf = (post: Post) => Number(post.headers["x-service-event-id"]!.split("_")[2])

/**
 * For every payment: its POSTs in the order they were sent name events in sequence order, and
 * the first POST of an event is sent only after the last POST of the event before it ended.
 */
const expectInOrderPerPayment = (posts: ReadonlyArray<Post>) => {
  const byPayment = new Map<string, Array<Post>>()
  for (const post of posts) byPayment.set(paymentOf(post), [...(byPayment.get(paymentOf(post)) ?? []), post])
  for (const [paymentId, list] of byPayment) {
    const sequences = list.map(sequenceOf)
    expect(sequences, paymentId).toEqual([...sequences].sort((a, b) => a - b))
    for (let i = 1; i < list.length; i++) {
      if (sequenceOf(list[i]!) === sequenceOf(list[i - 1]!)) continue
      expect(list[i - 1]!.end, paymentId).toBe("answered")
      expect(list[i]!.atMs, paymentId).toBeGreaterThanOrEqual(list[i - 1]!.endedAtMs!)
    }
  }
  return byPayment
}

describe("webhooks in order per payment (virtual time)", () => {
  it("eight workers serve the endpoint: payments go concurrently, each payment's events one after another", () => {
    // Every answer takes 1–4 s; the first attempt of every second event fails with a 500, so it
    // is retried a minute later while the events behind it wait.
    const seen = new Set<string>()
    const respond: Respond = (post) => {
      const first = !seen.has(post.headers["x-service-event-id"]!)
      seen.add(post.headers["x-service-event-id"]!)
      const latencyMs = 1_000 + (sequenceOf(post) * 7 + paymentOf(post).length) % 4 * 1_000
      return after(latencyMs, status(first && sequenceOf(post) % 2 === 0 ? 500 : 200))
    }
    const h = new VirtualWebhooks({ startMs: t0, respond })
    seedMerchant(h.state, { id: "mer_1", url, secret: "whsec_order", atMs: t0 })
    seedPayments(h.state, 12)
    h.start({ webhookRetryScheduleMs: [60_000, 300_000] })
    h.runUntil(t0 + 600_000)

    const deliveries = h.deliveries("mer_1")
    expect(deliveries).toHaveLength(48)
    expect(deliveries.every((d) => d.status === "succeeded")).toBe(true)
    const byPayment = expectInOrderPerPayment(h.posts)
    expect(byPayment.size).toBe(12)
    for (const list of byPayment.values()) expect(list.map(sequenceOf)).toEqual([1, 2, 2, 3, 4, 4])
    // Concurrency across payments is kept: 8 POSTs (the per-endpoint concurrency) were in flight at once.
    const inFlightAt = (ms: number) => h.posts.filter((p) => p.atMs <= ms && (p.endedAtMs ?? Infinity) > ms).length
    expect(Math.max(...h.posts.map((p) => inFlightAt(p.atMs)))).toBe(8)
    expect(h.logs).toEqual([])
  })

  it("a delivery that failed for good lets the next one go; one still retrying holds it", () => {
    // The endpoint refuses the payment's first event every time; the schedule has one retry.
    const h = new VirtualWebhooks({ startMs: t0, respond: (post) => status(sequenceOf(post) === 1 ? 503 : 200) })
    seedMerchant(h.state, { id: "mer_1", url, secret: "whsec_order", atMs: t0 })
    seedPayments(h.state, 1, 2)
    h.start({ webhookRetryScheduleMs: [60_000] })
    h.runUntil(t0 + 59_999)
    // The first event failed once and waits for its retry: the second is not sent.
    expect(h.posts.map((p) => [sequenceOf(p), p.atMs - t0])).toEqual([[1, 0]])
    expect(h.deliveries("mer_1").map((d) => d.status).sort()).toEqual(["pending", "retrying"])
    h.runUntil(t0 + 120_000)
    // The retry fails too: the first event has failed for good, and the second goes at once.
    expect(h.posts.map((p) => [sequenceOf(p), p.atMs - t0])).toEqual([[1, 0], [1, 60_000], [2, 60_000]])
    const statuses = Object.fromEntries(h.deliveries("mer_1").map((d) => [d.eventId, d.status]))
    expect(statuses).toEqual({ evt_0_1: "failed", evt_0_2: "succeeded" })
  })
})
