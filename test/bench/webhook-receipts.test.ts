import { describe, expect, it } from "vitest"
import { classifyReceipts, exitStatus, type Receipt } from "../../bench/webhookReceipts.ts"
import type { Attempt, Delivery } from "../../src/domain/Webhook.ts"

/**
 * The webhook bench's accounting: every receipt beyond an event's first is either a redelivery
 * at-least-once allows (the attempt the receiver got is recorded as failed: timed out, or another
 * failure such as a connection reset) or a duplicate, a bug that fails the bench.
 */
const t0 = Date.parse("2026-01-01T00:00:00.000Z")
const at = (ms: number) => t0 + ms
const timedOut = (attempt: number, startMs: number): Attempt => ({
  attempt,
  at: at(startMs),
  responseStatus: null,
  durationMs: 30_000,
  error: "timeout: no answer within 30000 ms"
})
const reset = (attempt: number, startMs: number): Attempt => ({
  attempt,
  at: at(startMs),
  responseStatus: null,
  durationMs: 3,
  error: "connection error: ECONNRESET"
})
const ok = (attempt: number, startMs: number): Attempt => ({
  attempt,
  at: at(startMs),
  responseStatus: 200,
  durationMs: 5,
  error: null
})

const delivery = (eventId: string, attempts: ReadonlyArray<Attempt>, id = `whd_${eventId}`): Delivery => ({
  id,
  merchantId: "mer_1",
  eventId,
  eventType: "payment.captured",
  url: "http://127.0.0.1:1234/hook",
  payload: "{}",
  status: attempts.some((a) => a.responseStatus === 200) ? "succeeded" : "retrying",
  attempts,
  nextAttemptAt: null,
  firstFailedAt: null,
  createdAt: at(0),
  completedAt: null,
  order: null
})
const receipt = (eventId: string, attempt: number, receivedMs: number, deliveryId = `whd_${eventId}`): Receipt => ({
  eventId,
  deliveryId,
  attempt,
  receivedMs: t0 + receivedMs,
  answeredMs: t0 + receivedMs + 1
})

describe("the webhook bench's receipts", () => {
  it("counts an event received once as delivered, and an event never received as not delivered within the run", () => {
    const counts = classifyReceipts(
      [receipt("evt_1", 1, 10)],
      [delivery("evt_1", [ok(1, 5)]), delivery("evt_2", [reset(1, 5)])],
      new Set(["evt_1", "evt_2"])
    )
    expect(counts).toMatchObject({
      expected: 2,
      delivered: 1,
      acknowledged: 1,
      notDeliveredWithinRun: 1,
      redeliveredAfterTimeout: 0
    })
    expect(counts.duplicates.total).toBe(0)
    expect(exitStatus(counts)).toBe(2)
  })

  it("a retry after an attempt the receiver got but that timed out is a redelivery, allowed; so is one after a connection reset", () => {
    const counts = classifyReceipts(
      [receipt("evt_1", 1, 10), receipt("evt_1", 2, 90_000), receipt("evt_2", 1, 10), receipt("evt_2", 2, 60_100)],
      [delivery("evt_1", [timedOut(1, 0), ok(2, 90_000)]), delivery("evt_2", [reset(1, 0), ok(2, 60_000)])],
      new Set(["evt_1", "evt_2"])
    )
    expect(counts).toMatchObject({
      delivered: 2,
      acknowledged: 2,
      redeliveredAfterTimeout: 1,
      redeliveredAfterOtherFailure: 1
    })
    expect(counts.duplicates.total).toBe(0)
    expect(counts.timedOutReceived).toEqual([{ startedMs: t0, answeredMs: t0 + 11 }])
    expect(exitStatus(counts)).toBe(0)
  })

  it("a timed-out attempt reaching the receiver after the retry that followed it is still that redelivery", () => {
    const counts = classifyReceipts(
      [receipt("evt_1", 2, 60_100), receipt("evt_1", 1, 60_200)],
      [delivery("evt_1", [timedOut(1, 0), ok(2, 60_000)])],
      new Set(["evt_1"])
    )
    expect(counts.redeliveredAfterTimeout).toBe(1)
    expect(counts.duplicates.total).toBe(0)
  })

  it("the same attempt twice, a second delivery of an event, an attempt after a 2xx and a retry no failure explains are duplicates: the bench fails", () => {
    const cases: ReadonlyArray<[string, ReadonlyArray<Receipt>, ReadonlyArray<Delivery>]> = [
      ["same_attempt_twice", [receipt("evt_1", 1, 10), receipt("evt_1", 1, 20)], [delivery("evt_1", [ok(1, 0)])]],
      ["second_delivery_for_event", [receipt("evt_1", 1, 10), receipt("evt_1", 1, 20, "whd_other")], [
        delivery("evt_1", [ok(1, 0)])
      ]],
      ["attempt_after_2xx", [receipt("evt_1", 1, 10), receipt("evt_1", 2, 20)], [
        delivery("evt_1", [ok(1, 0), ok(2, 15)])
      ]],
      ["unexplained", [receipt("evt_1", 1, 10), receipt("evt_1", 2, 20)], [delivery("evt_1", [])]]
    ]
    for (const [kind, receipts, deliveries] of cases) {
      const counts = classifyReceipts(receipts, deliveries, new Set(["evt_1"]))
      expect(counts.duplicates, kind).toMatchObject({ [kind]: 1, total: 1 })
      expect(counts.redeliveredAfterTimeout + counts.redeliveredAfterOtherFailure, kind).toBe(0)
      expect(counts.examples[0], kind).toMatch(new RegExp(`^${kind}: `))
      expect(exitStatus(counts), kind).toBe(1)
    }
    // Two deliveries of one event in the store are a duplicate even if only one reached the receiver.
    const stored = classifyReceipts([receipt("evt_1", 1, 10)], [
      delivery("evt_1", [ok(1, 0)]),
      delivery("evt_1", [], "whd_second")
    ], new Set(["evt_1"]))
    expect(stored.duplicates).toMatchObject({ second_delivery_for_event: 1, total: 1 })
  })
})
