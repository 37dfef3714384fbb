import { afterEach, describe, expect, it } from "vitest"
import { Redeliveries, sameNumberAfterCut } from "../../../bench/harness/scenarios/Redeliveries.ts"
import { startWebhookServer, type WebhookServer } from "../../../bench/harness/scenarios/WebhookServer.ts"
import { Auditor } from "../../../sim/checks/Auditor.ts"
import { defaultFaults, type FaultRates } from "../../../sim/engine/Options.ts"
import { Prng } from "../../../sim/engine/Prng.ts"
import {
  auditDeliveries,
  type AuditedDelivery,
  makeSimulatedEndpoints,
  Receipts
} from "../../../sim/world/Endpoints.ts"
import { postEvent, signedWith } from "../../support/webhookPost.ts"

/**
 * The webhook laws as the harness reads them (CONTRACT.md section 8): at least once, an event sent
 * again only after an attempt cut off (by the timeout or a fault), those redeliveries counted.
 */

describe("redeliveries as the endpoint counts them", () => {
  it("counts a POST after one the service got no answer to, or a 2xx to; a retry after a failure answer is no redelivery", () => {
    let faultMs = Number.NEGATIVE_INFINITY
    const log = new Redeliveries(() => faultMs)
    // Answered 500, then retried: an ordinary retry.
    log.answered(0, log.received(0, "evt_a", "whd_a", 1, 1_000), 500)
    log.received(0, "evt_a", "whd_a", 2, 2_000)
    expect(log.count).toBe(0)
    // Held (no answer written: the service's timeout cut it), then the next attempt: a redelivery.
    log.received(1, "evt_b", "whd_b", 1, 1_000)
    log.received(1, "evt_b", "whd_b", 2, 4_000)
    expect([log.count, log.afterFault]).toEqual([1, 0])
    // A 2xx written, then the same number again after a fault began (an instance killed before it recorded the answer).
    log.answered(2, log.received(2, "evt_c", "whd_c", 1, 1_000), 200)
    faultMs = 1_500
    log.received(2, "evt_c", "whd_c", 1, 40_000)
    expect([log.count, log.afterFault]).toEqual([2, 1])
    expect(log.sameAttempt).toEqual([{
      eventId: "evt_c",
      deliveryId: "whd_c",
      attempt: 1,
      firstAtMs: 1_000,
      atMs: 40_000,
      afterFault: true
    }])
    // An answer to an earlier POST of the event does not stand for the latest.
    const first = log.received(3, "evt_d", "whd_d", 1, 50_000)
    log.received(3, "evt_d", "whd_d", 2, 53_000)
    log.answered(3, first, 503)
    log.received(3, "evt_d", "whd_d", 3, 56_000)
    expect(log.count).toBe(4)
  })

  it("finds the same number twice against section 8 only when the service records cuts, and only across a fault (the endpoint refused the others as they came)", () => {
    const repeats = [
      { eventId: "evt_a", deliveryId: "whd_a", attempt: 2, firstAtMs: 0, atMs: 35_000, afterFault: true },
      { eventId: "evt_b", deliveryId: "whd_b", attempt: 1, firstAtMs: 0, atMs: 3_000, afterFault: false }
    ]
    expect(sameNumberAfterCut(repeats, false)).toEqual([])
    const found = sameNumberAfterCut(repeats, true)
    expect(found).toHaveLength(1)
    expect(found[0]).toContain("delivery whd_a (event evt_a): attempt 2 arrived again")
    expect(found[0]).toContain("sent again as the next attempt number")
  })
})

const secret = "whsec_test_secret"
const quiet: FaultRates = {
  ...defaultFaults,
  webhook4xx: 0,
  webhook5xx: 0,
  webhookSlow: 0,
  webhookLagging: 0,
  webhookNoAnswer: 0,
  webhookOutagesPerDay: 0
}
let server: WebhookServer | null = null
afterEach(async () => {
  await server?.close()
  server = null
})

const post = (url: string, eventId: string, attempt: number) =>
  postEvent(url, { id: eventId }, attempt, signedWith(secret))

describe("the endpoints over HTTP, told of the faults", () => {
  it("take the same attempt twice across a fault as a redelivery, and without one as a violation", async () => {
    const auditor = new Auditor(() => Date.now())
    let faultMs = Number.NEGATIVE_INFINITY
    const lastFault = () => faultMs
    const endpoints = makeSimulatedEndpoints({
      prng: new Prng(1),
      faults: quiet,
      auditor,
      window: { startMs: Date.now(), endMs: Date.now() + 60_000 },
      nowMs: () => Date.now(),
      lastCrashMs: lastFault,
      secretsOf: () => [secret],
      overNetwork: true
    })
    const redeliveries = new Redeliveries(lastFault)
    server = await startWebhookServer({
      host: "127.0.0.1",
      endpoints,
      timeoutMs: 2_000,
      latencyScale: 1 / 100,
      redeliveries
    })
    const url = server.urlOf(0)
    // A kill between the two sendings of attempt 1 (its instance died before recording the 2xx).
    expect(await post(url, "evt_killed", 1)).toBe(200)
    faultMs = Date.now()
    expect(await post(url, "evt_killed", 1)).toBe(200)
    expect(auditor.violations).toEqual([])
    expect([redeliveries.count, redeliveries.afterFault]).toEqual([1, 1])
    // No fault since: nothing explains it.
    expect(await post(url, "evt_twice", 1)).toBe(200)
    expect(await post(url, "evt_twice", 1)).toBe(200)
    expect(auditor.violations.map((v) => `${v.invariant}: ${v.message}`)).toEqual([
      "webhook-once-per-attempt: delivery whd_evt_twice: attempt 1 arrived twice"
    ])
    expect([redeliveries.count, redeliveries.afterFault]).toEqual([2, 1])
  })

  it("count a redelivery after a POST held past the timeout", async () => {
    const auditor = new Auditor(() => Date.now())
    const endpoints = makeSimulatedEndpoints({
      prng: new Prng(1),
      faults: { ...quiet, webhookNoAnswer: 1 },
      auditor,
      window: { startMs: Date.now(), endMs: Date.now() + 60_000 },
      nowMs: () => Date.now(),
      lastCrashMs: () => -1,
      secretsOf: () => [secret],
      overNetwork: true
    })
    const redeliveries = new Redeliveries()
    // The server holds an unanswered POST for its timeout and a second, then drops it.
    server = await startWebhookServer({
      host: "127.0.0.1",
      endpoints,
      timeoutMs: 100,
      latencyScale: 1 / 100,
      redeliveries
    })
    expect(await post(server.urlOf(0), "evt_held", 1)).toBeNull()
    expect(await post(server.urlOf(0), "evt_held", 2)).toBeNull()
    expect(auditor.violations).toEqual([])
    expect([redeliveries.count, redeliveries.afterFault]).toEqual([1, 0])
  })
})

describe("the final audit of a delivery record with an attempt cut off", () => {
  const baseMs = 1_800_000_000_000
  const scheduleMs = [1_000, 2_000, 4_000, 8_000]
  /** A delivery of `evt_<id>` whose attempts reached the endpoint as recorded (ms from the base), the last one acknowledged when it succeeded. */
  const audit = (
    attempts: AuditedDelivery["attempts"],
    status: AuditedDelivery["status"],
    crashesMs: ReadonlyArray<number> = [],
    arrivals?: ReadonlyArray<[number, number]>
  ) => {
    const auditor = new Auditor(() => baseMs)
    const receipts = new Receipts(baseMs)
    const slot = receipts.add("whd_1")
    receipts.firstOfEvent("evt_1", slot)
    for (
      const [attempt, atMs] of arrivals ??
        attempts.filter((a) => a.cut !== true).map((a) => [a.attempt, a.at - baseMs] as [number, number])
    ) receipts.received(slot, attempt, atMs)
    if (status === "succeeded") receipts.ackedAtMs[slot] = attempts[attempts.length - 1]!.at - baseMs
    const delivery: AuditedDelivery = {
      id: "whd_1",
      eventId: "evt_1",
      eventType: "payment.captured",
      url: "http://127.0.0.1:1/m/0",
      status,
      order: null,
      createdAt: baseMs,
      firstFailedAt: null,
      attempts
    }
    auditDeliveries(auditor, () => [delivery], {
      nowMs: baseMs + 600_000,
      scheduleMs,
      timeoutMs: 2_000,
      toleranceMs: 32_000,
      crashesMs: crashesMs.map((ms) => baseMs + ms),
      receipts,
      unansweredMayBeLost: true
    })
    return auditor.violations.map((v) => `${v.invariant}: ${v.message}`)
  }
  const at = (attempt: number, ms: number, status: number | null, cut?: boolean) => ({
    attempt,
    at: baseMs + ms,
    responseStatus: status,
    error: status === null ? (cut === true ? "cut off: instance lost" : "timeout: 2s") : null,
    ...(cut === undefined ? {} : { cut })
  })

  it("holds when the attempt cut off is sent again as the next number once the delivery is taken over, late across the fault", () => {
    // Attempt 2 (the first retry) was under way on an instance killed at 1.5 s; taken over 35 s
    // later, it went again as attempt 3, which takes its place in the schedule.
    expect(audit([at(1, 0, 500, false), at(2, 1_000, null, true), at(3, 36_000, 200, false)], "succeeded", [1_500]))
      .toEqual([])
    // Without the fault, so late a retry is a violation: the cut record does not excuse lateness alone.
    expect(audit([at(1, 0, 500, false), at(2, 1_000, null, true), at(3, 36_000, 200, false)], "succeeded")).toEqual([
      expect.stringMatching(
        /^webhook-schedule: delivery whd_1: attempt 3 reached the endpoint at .*, 35000 ms after its offset from the first attempt's arrival \(or the end of the attempt before it, whichever is later\)$/
      )
    ])
  })

  it("counts no cut attempt against the attempts of the schedule, and still refuses one too many", () => {
    // The first attempt and the four retries of the schedule, all failed.
    const failing = [0, 1_000, 2_000, 4_000, 8_000].map((ms, i) => at(i + 1, ms, 503, false))
    expect(audit(failing, "failed")).toEqual([])
    // The first attempt cut off: the schedule starts at the attempt that took its place.
    const cutFirst = [
      at(1, 0, null, true),
      ...failing.map((a) => ({ ...a, attempt: a.attempt + 1, at: a.at + 10_000 }))
    ]
    expect(audit(cutFirst, "failed", [500])).toEqual([])
    // The last retry cut off and made again as attempt 6: the delivery fails after it, not before.
    expect(audit([...failing.slice(0, 4), at(5, 8_000, null, true), at(6, 40_000, 503, false)], "failed", [8_100]))
      .toEqual([])
    expect(audit([...failing.slice(0, 4), at(5, 8_000, null, true)], "failed", [8_100])).toContainEqual(
      expect.stringMatching(/^webhook-give-up: delivery whd_1: failed after 5 attempts/)
    )
    // Five attempts answered, none cut: the delivery must have failed, and a sixth is one too many.
    expect(audit(failing, "retrying")).toContainEqual(
      expect.stringMatching(/^webhook-give-up: delivery whd_1: retrying after 5 attempts/)
    )
    expect(audit([...failing, at(6, 16_000, 503, false)], "failed")).toContainEqual(
      "webhook-attempt-limit: delivery whd_1: 6 attempts"
    )
  })

  it("still finds a retry early by its place in the schedule, cut attempts left out", () => {
    // The schedule counts from attempt 2 (attempt 1 was cut): attempt 3 is due a second after it.
    expect(audit([at(1, 0, null, true), at(2, 5_000, 500, false), at(3, 5_500, 200, false)], "succeeded", [200]))
      .toContainEqual(
        expect.stringMatching(/^webhook-schedule: delivery whd_1: attempt 3 recorded at .*, 500 ms before its offset/)
      )
  })

  it("reads a record without cut fields as before", () => {
    expect(audit([at(1, 0, 500), at(2, 1_000, 200)], "succeeded")).toEqual([])
    expect(audit([at(1, 0, 500), at(2, 400, 200)], "succeeded")).toContainEqual(
      expect.stringMatching(/^webhook-schedule: delivery whd_1: attempt 2 recorded at/)
    )
  })
})
