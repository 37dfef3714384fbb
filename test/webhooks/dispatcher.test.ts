import { Effect } from "effect"
import { describe, expect, it } from "vitest"
import { attemptTimes, type Delivery } from "../../src/domain/Webhook.ts"
import { Webhooks } from "../../src/services/Webhooks.ts"
import * as WebhookDispatcher from "../../src/workers/WebhookDispatcher.ts"
import { seedEvent, seedMerchant, verifySignature } from "./support.ts"
import { after, noAnswer, type Post, status, VirtualWebhooks } from "./virtual.ts"

/**
 * The real dispatcher, Webhooks service and memory stores under discrete-event virtual time with
 * an in-memory endpoint (./virtual.ts): every time is exact and every "nothing happens yet" is a
 * deterministic check, because nothing runs unless the test moves virtual time.
 */

const t0 = Date.parse("2026-11-22T04:00:00.000Z")
const secret = "whsec_test_secret_0123456789"
const url = "https://shop.example/hooks"
const day = 86_400_000
const schedule = [60_000, 300_000, 1_800_000, 7_200_000, day]

const setUp = (respond: ConstructorParameters<typeof VirtualWebhooks>[0]["respond"]) => {
  const h = new VirtualWebhooks({ startMs: t0, respond })
  seedMerchant(h.state, { id: "mer_1", url, secret, atMs: t0 })
  return h
}

/** What every POST of a delivery must carry: its ids, its attempt number, the same signed body. */
const expectPostsOf = (posts: ReadonlyArray<Post>, delivery: Delivery, attemptNumbers: ReadonlyArray<number>) => {
  expect(posts.map((p) => p.headers["x-service-delivery-attempt"])).toEqual(attemptNumbers.map(String))
  for (const post of posts) {
    expect(post.url).toBe(delivery.url)
    expect(post.headers["content-type"]).toBe("application/json")
    expect(post.headers["x-service-delivery-id"]).toBe(delivery.id)
    expect(post.headers["x-service-event-id"]).toBe(delivery.eventId)
    expect(post.body).toBe(delivery.payload)
    const nowSeconds = Math.floor(post.atMs / 1000)
    const header = post.headers["x-service-signature"]!
    expect(header.startsWith(`t=${nowSeconds},`)).toBe(true)
    expect(verifySignature(header, post.body, secret, 300, nowSeconds)).toBe(true)
  }
}

describe("webhook dispatcher under virtual time", () => {
  it("a wake makes the first attempt at once; without one, the next poll does, not earlier", () => {
    // Woken: the attempt is made at the very instant.
    const woken = setUp(() => status(204))
    const engine = woken.start({}, { pollIntervalMs: 2 * day })
    const event = seedEvent(woken.state, { id: "evt_1", merchantId: "mer_1", atMs: t0 })
    expect(woken.posts).toHaveLength(0)
    engine.run(Effect.flatMap(Webhooks, (w) => w.wake))
    expect(woken.nowMs).toBe(t0)
    const delivery = woken.delivery("mer_1")
    expect(delivery).toMatchObject({
      eventId: event.id,
      status: "succeeded",
      nextAttemptAt: null,
      completedAt: t0
    })
    expect(delivery.attempts).toEqual([{ attempt: 1, at: t0, responseStatus: 204, durationMs: 0, error: null }])
    expect(JSON.parse(woken.posts[0]!.body)).toEqual({
      id: event.id,
      type: event.type,
      created_at: new Date(event.createdAt).toISOString(),
      data: event.data
    })
    expectPostsOf(woken.posts, delivery, [1])

    // Not woken: an outbox event waits for the dispatcher's next poll (default interval), exactly.
    const polled = setUp(() => status(204))
    polled.start()
    seedEvent(polled.state, { id: "evt_1", merchantId: "mer_1", atMs: t0 })
    const pollMs = WebhookDispatcher.defaultOptions.pollIntervalMs
    polled.runUntil(t0 + pollMs - 1)
    expect(polled.posts).toHaveLength(0)
    expect(polled.deliveries("mer_1")).toHaveLength(0)
    polled.runUntil(t0 + pollMs)
    expect(polled.posts.map((p) => p.atMs)).toEqual([t0 + pollMs])
    expect(polled.delivery("mer_1").status).toBe("succeeded")
    expect([...woken.logs, ...polled.logs]).toEqual([])
  })

  // With the 2-day poll only the dispatcher's own wake-ups at due times make attempts. The
  // 59,999 ms poll also claims in every gap between attempts, once exactly 1 ms before the first
  // retry is due: neither may bring an attempt forward by a millisecond.
  for (const pollIntervalMs of [2 * day, 59_999]) {
    it(`retries at exactly 1m, 5m, 30m, 2h and 24h after the first failure, then fails (poll every ${pollIntervalMs} ms)`, () => {
      const h = setUp(() => status(500))
      seedEvent(h.state, { id: "evt_1", merchantId: "mer_1", atMs: t0 })
      const expected = attemptTimes(t0, schedule)
      expect(expected.map((ms) => ms - t0)).toEqual([0, 60_000, 300_000, 1_800_000, 7_200_000, day])
      h.start({}, { pollIntervalMs })
      // The dispatcher's first poll (at start) makes the first attempt at once.
      expect(h.posts.map((p) => p.atMs)).toEqual([t0])
      for (let i = 1; i < expected.length; i++) {
        const before = h.delivery("mer_1")
        expect(before.status).toBe("retrying")
        expect(before.nextAttemptAt).toBe(expected[i]!)
        expect(before.attempts).toHaveLength(i)
        // One millisecond early: nothing.
        h.runUntil(expected[i]! - 1)
        expect(h.posts).toHaveLength(i)
        expect(h.delivery("mer_1").attempts).toHaveLength(i)
        // On time: exactly one attempt, recorded at once (the endpoint answers in no time).
        h.runUntil(expected[i]!)
        expect(h.posts).toHaveLength(i + 1)
        expect(h.posts[i]!.atMs).toBe(expected[i])
        expect(h.delivery("mer_1").attempts).toHaveLength(i + 1)
      }
      const delivery = h.delivery("mer_1")
      expect(delivery.attempts).toEqual(expected.map((ms, i) => ({
        attempt: i + 1,
        at: ms,
        responseStatus: 500,
        durationMs: 0,
        error: "HTTP 500: internal error"
      })))
      expect(delivery.status).toBe("failed")
      expect(delivery.nextAttemptAt).toBeNull()
      expect(delivery.completedAt).toBe(expected.at(-1)!)
      expectPostsOf(h.posts, delivery, [1, 2, 3, 4, 5, 6])
      // A week later: not one more POST, and the delivery is as it was.
      h.runUntil(expected.at(-1)! + 7 * day)
      expect(h.posts).toHaveLength(6)
      expect(h.delivery("mer_1")).toEqual(delivery)
      expect(h.logs).toEqual([])
    })
  }

  it("a configured schedule (WEBHOOK_RETRY_SCHEDULE=10s,25s) is kept exactly: the retry is not held to the lease's end or a poll", () => {
    // The first retry falls before the claim's lease ends (60 s) and long before the next poll:
    // only the attempt waking the dispatcher gets it out on time.
    const h = setUp(() => status(502))
    seedEvent(h.state, { id: "evt_1", merchantId: "mer_1", atMs: t0 })
    h.start({ webhookRetryScheduleMs: [10_000, 25_000] }, { pollIntervalMs: 2 * day })
    for (const dueMs of [t0 + 10_000, t0 + 25_000]) {
      const count = h.posts.length
      h.runUntil(dueMs - 1)
      expect(h.posts).toHaveLength(count)
      h.runUntil(dueMs)
      expect(h.posts).toHaveLength(count + 1)
    }
    const delivery = h.delivery("mer_1")
    expect(delivery.attempts.map((a) => a.at)).toEqual([t0, t0 + 10_000, t0 + 25_000])
    expect(delivery).toMatchObject({ status: "failed", completedAt: t0 + 25_000, nextAttemptAt: null })
    expectPostsOf(h.posts, delivery, [1, 2, 3])
    h.runUntil(t0 + 7 * day)
    expect(h.posts).toHaveLength(3)
    expect(h.logs).toEqual([])
  })

  it.each([false, true])(
    "an endpoint that does not answer within WEBHOOK_TIMEOUT: abandoned at 30 s exactly, a failure, retried 60 s after it started (timeout applied by the transport: %s)",
    (transportAppliesTimeout) => {
      const h = new VirtualWebhooks({ startMs: t0, respond: () => noAnswer, transportAppliesTimeout })
      seedMerchant(h.state, { id: "mer_1", url, secret, atMs: t0 })
      seedEvent(h.state, { id: "evt_1", merchantId: "mer_1", atMs: t0 })
      const engine = h.start({}, { pollIntervalMs: 2 * day })
      expect(engine.config.webhookTimeoutMs).toBe(30_000)
      expect(h.posts).toMatchObject([{ atMs: t0, end: "in flight" }])
      h.runUntil(t0 + 29_999)
      expect(h.posts).toMatchObject([{ atMs: t0, end: "in flight" }])
      expect(h.delivery("mer_1")).toMatchObject({ status: "pending", attempts: [] })
      h.runUntil(t0 + 30_000)
      // The POST was given up (interrupted) at 30 s, and the attempt recorded then.
      expect(h.posts).toMatchObject([{ atMs: t0, end: "interrupted", endedAtMs: t0 + 30_000 }])
      const failed = h.delivery("mer_1")
      expect(failed.attempts).toHaveLength(1)
      expect(failed.attempts[0]).toMatchObject({ attempt: 1, at: t0, responseStatus: null, durationMs: 30_000 })
      expect(failed.attempts[0]!.error).toBe("timeout: no answer within 30000 ms")
      expect(failed.status).toBe("retrying")
      expect(failed.nextAttemptAt).toBe(t0 + 60_000)
      // The endpoint is back: the retry goes out at +60 s, not before.
      h.respond = () => status(200)
      h.runUntil(t0 + 59_999)
      expect(h.posts).toHaveLength(1)
      h.runUntil(t0 + 60_000)
      const delivery = h.delivery("mer_1")
      expect(delivery.status).toBe("succeeded")
      expect(delivery.attempts.map((a) => [a.attempt, a.at, a.responseStatus])).toEqual([[1, t0, null], [
        2,
        t0 + 60_000,
        200
      ]])
      expectPostsOf(h.posts, delivery, [1, 2])
      expect(h.logs).toEqual([])
    }
  )

  it("slow answers: one 1 ms inside the timeout counts with its duration; a slow failure's retry counts from its start", () => {
    // 29,999 ms: answered in time, a success.
    const inTime = setUp(() => after(29_999, status(200)))
    seedEvent(inTime.state, { id: "evt_1", merchantId: "mer_1", atMs: t0 })
    inTime.start({}, { pollIntervalMs: 2 * day })
    inTime.runUntil(t0 + 29_998)
    expect(inTime.delivery("mer_1").attempts).toEqual([])
    inTime.runUntil(t0 + 29_999)
    expect(inTime.delivery("mer_1")).toMatchObject({
      status: "succeeded",
      completedAt: t0 + 29_999,
      attempts: [{ attempt: 1, at: t0, responseStatus: 200, durationMs: 29_999, error: null }]
    })
    expect(inTime.posts).toMatchObject([{ end: "answered", endedAtMs: t0 + 29_999 }])

    // A 500 after 10 s: recorded with its duration; the schedule counts from the attempt's start.
    const slow = setUp(() => after(10_000, status(500)))
    seedEvent(slow.state, { id: "evt_1", merchantId: "mer_1", atMs: t0 })
    slow.start({}, { pollIntervalMs: 2 * day })
    slow.runUntil(t0 + 10_000)
    expect(slow.delivery("mer_1")).toMatchObject({
      status: "retrying",
      nextAttemptAt: t0 + 60_000,
      attempts: [{ attempt: 1, at: t0, responseStatus: 500, durationMs: 10_000 }]
    })
    slow.runUntil(t0 + 59_999)
    expect(slow.posts).toHaveLength(1)
    slow.runUntil(t0 + 60_000)
    expect(slow.posts.map((p) => p.atMs)).toEqual([t0, t0 + 60_000])
    expect([...inTime.logs, ...slow.logs]).toEqual([])
  })

  it("a scheduled retry survives a restart of the service: made once, at its time, by the new process", () => {
    const h = setUp(() => status(503))
    seedEvent(h.state, { id: "evt_1", merchantId: "mer_1", atMs: t0 })
    // First process: one failed attempt, then it stops.
    const first = h.start({}, { pollIntervalMs: 2 * day })
    expect(h.delivery("mer_1")).toMatchObject({ status: "retrying", nextAttemptAt: t0 + 60_000 })
    h.runUntil(t0 + 10_000)
    first.stop()
    // Nothing while no process runs.
    h.respond = () => status(200)
    h.runUntil(t0 + 20_000)
    expect(h.posts).toHaveLength(1)
    // Second process over the same data: the retry at its time, once.
    h.start({}, { pollIntervalMs: 2 * day })
    h.runUntil(t0 + 59_999)
    expect(h.posts).toHaveLength(1)
    h.runUntil(t0 + 60_000)
    const delivery = h.delivery("mer_1")
    expect(delivery.status).toBe("succeeded")
    expect(delivery.attempts.map((a) => [a.attempt, a.at, a.responseStatus])).toEqual([
      [1, t0, 503],
      [2, t0 + 60_000, 200]
    ])
    expectPostsOf(h.posts, delivery, [1, 2])
    h.runUntil(t0 + 7 * day)
    expect(h.posts).toHaveLength(2)
    expect(h.logs).toEqual([])
  })

  it("a retry that fell due while no process ran is made as soon as one starts, once", () => {
    const h = setUp(() => status(503))
    seedEvent(h.state, { id: "evt_1", merchantId: "mer_1", atMs: t0 })
    const first = h.start({}, { pollIntervalMs: 2 * day })
    first.stop()
    h.respond = () => status(200)
    h.runUntil(t0 + 300_000)
    expect(h.posts).toHaveLength(1)
    h.start({}, { pollIntervalMs: 2 * day })
    expect(h.posts.map((p) => p.atMs)).toEqual([t0, t0 + 300_000])
    const delivery = h.delivery("mer_1")
    expect(delivery.attempts.map((a) => [a.attempt, a.at, a.responseStatus])).toEqual([
      [1, t0, 503],
      [2, t0 + 300_000, 200]
    ])
    expectPostsOf(h.posts, delivery, [1, 2])
    h.runUntil(t0 + 7 * day)
    expect(h.posts).toHaveLength(2)
  })

  it("a process that dies mid-attempt: the new one takes the delivery over when the lease ends, same delivery id", () => {
    const h = setUp(() => noAnswer)
    seedEvent(h.state, { id: "evt_1", merchantId: "mer_1", atMs: t0 })
    const first = h.start({}, { pollIntervalMs: 2 * day })
    h.runUntil(t0 + 10_000)
    first.crash()
    // The POST in flight was cut off with the process; nothing was recorded.
    expect(h.posts).toMatchObject([{ atMs: t0, end: "interrupted", endedAtMs: t0 + 10_000 }])
    expect(h.delivery("mer_1")).toMatchObject({ status: "pending", attempts: [] })
    h.respond = () => status(200)
    const second = h.start({}, { pollIntervalMs: 2 * day })
    // The lease (WEBHOOK_TIMEOUT + margin, renewed when the attempt started at t0) still holds it.
    const leaseEndMs = t0 + second.config.webhookTimeoutMs + WebhookDispatcher.defaultOptions.leaseMarginMs
    h.runUntil(leaseEndMs - 1)
    expect(h.posts).toHaveLength(1)
    h.runUntil(leaseEndMs)
    expect(h.posts.map((p) => p.atMs)).toEqual([t0, leaseEndMs])
    const delivery = h.delivery("mer_1")
    expect(delivery.status).toBe("succeeded")
    expect(delivery.attempts).toEqual([{
      attempt: 1,
      at: leaseEndMs,
      responseStatus: 200,
      durationMs: 0,
      error: null
    }])
    // Both POSTs were attempt 1 of the same delivery: the receiver can de-duplicate them.
    expectPostsOf(h.posts, delivery, [1, 1])
    h.runUntil(t0 + 7 * day)
    expect(h.posts).toHaveLength(2)
    expect(h.logs).toEqual([])
  })
})

describe("webhook dispatcher under virtual time: instances that beat", () => {
  it("an instance killed mid-attempt: another sends the delivery again within seconds of its last beat, as the next attempt, the cut one recorded", () => {
    const h = setUp(() => noAnswer)
    seedEvent(h.state, { id: "evt_1", merchantId: "mer_1", atMs: t0 })
    const a = h.start({}, {}, "ins_a")
    h.runUntil(t0 + 100)
    const b = h.start({}, {}, "ins_b")
    h.runUntil(t0 + 10_000)
    expect(h.posts).toHaveLength(1)
    a.crash()
    h.respond = () => status(200)
    // A's last beat (at t0 + 10 s) keeps it alive for 5 s: its lease holds until then, not for its minute.
    h.runUntil(t0 + 15_000)
    expect(h.posts).toHaveLength(1)
    h.runUntil(t0 + 16_000)
    expect(h.posts).toHaveLength(2)
    const takenOverAt = h.posts[1]!.atMs
    expect(takenOverAt).toBeGreaterThan(t0 + 15_000)
    expect(takenOverAt).toBeLessThanOrEqual(t0 + 15_250)
    const delivery = h.delivery("mer_1")
    expect(delivery.status).toBe("succeeded")
    expect(delivery.attempts).toMatchObject([
      { attempt: 1, at: takenOverAt, responseStatus: null, error: expect.stringMatching(/^cut off/), cut: true },
      { attempt: 2, at: takenOverAt, responseStatus: 200, error: null }
    ])
    // The same event and delivery, the next attempt number: the receiver de-duplicates on the event id.
    expectPostsOf(h.posts, delivery, [1, 2])
    h.runUntil(t0 + 2 * day)
    expect(h.posts).toHaveLength(2)
    b.stop()
  })

  it("a cut attempt schedules no retry: a failure after it counts the schedule from itself", () => {
    const h = setUp(() => noAnswer)
    seedEvent(h.state, { id: "evt_1", merchantId: "mer_1", atMs: t0 })
    const a = h.start({ webhookTimeoutMs: 30_000 }, {}, "ins_a")
    h.runUntil(t0 + 1_000)
    a.crash()
    h.respond = () => status(500)
    h.start({ webhookTimeoutMs: 30_000, webhookRetryScheduleMs: [60_000, 300_000] }, {}, "ins_b")
    h.runUntil(t0 + 7_000)
    const failedAt = h.posts[1]!.atMs
    expect(h.delivery("mer_1")).toMatchObject({ status: "retrying", nextAttemptAt: failedAt + 60_000 })
    h.respond = () => status(200)
    h.runUntil(failedAt + 60_000)
    const delivery = h.delivery("mer_1")
    expect(delivery.attempts.map((x) => [x.attempt, x.cut === true, x.responseStatus])).toEqual([[1, true, null], [
      2,
      false,
      500
    ], [3, false, 200]])
    expect(delivery.status).toBe("succeeded")
  })
})

describe("webhook dispatcher under virtual time: a graceful stop", () => {
  it("a stop (SIGTERM) mid-attempt hands the delivery back at once: the next process sends it on its first poll, not after the lease", () => {
    const h = setUp(() => noAnswer)
    seedEvent(h.state, { id: "evt_1", merchantId: "mer_1", atMs: t0 })
    const first = h.start({}, { pollIntervalMs: 2 * day })
    h.runUntil(t0 + 10_000)
    first.stop()
    expect(h.posts).toMatchObject([{ atMs: t0, end: "interrupted", endedAtMs: t0 + 10_000 }])
    h.respond = () => status(200)
    h.start({}, { pollIntervalMs: 2 * day })
    expect(h.posts.map((p) => p.atMs)).toEqual([t0, t0 + 10_000])
    expect(h.delivery("mer_1")).toMatchObject({
      status: "succeeded",
      attempts: [{ attempt: 1, at: t0 + 10_000, responseStatus: 200 }]
    })
  })

  it("claims still queued behind a busy endpoint go back at a stop too", () => {
    const h = setUp(() => after(20_000, status(200)))
    for (let i = 0; i < 5; i++) seedEvent(h.state, { id: `evt_${i}`, merchantId: "mer_1", atMs: t0 })
    const first = h.start({}, { pollIntervalMs: 2 * day, concurrencyPerEndpoint: 1 })
    h.runUntil(t0 + 1_000)
    first.stop()
    h.start({}, { pollIntervalMs: 2 * day, concurrencyPerEndpoint: 5 })
    // All five go out at once from the new process: none waited for a lease to end.
    expect(h.posts.filter((p) => p.atMs === t0 + 1_000)).toHaveLength(5)
    h.runUntil(t0 + 30_000)
    expect(h.deliveries("mer_1").every((d) => d.status === "succeeded" && d.attempts.length === 1)).toBe(true)
  })
})

describe("webhook dispatcher under virtual time: 4xx answers and leases outlived behind a slow endpoint", () => {
  for (const code of [400, 404, 410, 429]) {
    it(`an endpoint answering ${code}: never delivered, retried at every offset of the schedule, then failed`, () => {
      const h = setUp(() => status(code, "nope"))
      seedEvent(h.state, { id: "evt_1", merchantId: "mer_1", atMs: t0 })
      h.start({}, { pollIntervalMs: 2 * day })
      const expected = attemptTimes(t0, schedule)
      for (let i = 1; i < expected.length; i++) {
        expect(h.delivery("mer_1")).toMatchObject({
          status: "retrying",
          nextAttemptAt: expected[i]!,
          completedAt: null
        })
        h.runUntil(expected[i]! - 1)
        expect(h.posts).toHaveLength(i)
        h.runUntil(expected[i]!)
        expect(h.posts).toHaveLength(i + 1)
      }
      const delivery = h.delivery("mer_1")
      expect(delivery.status).toBe("failed")
      expect(delivery.attempts.map((a) => [a.at, a.responseStatus, a.error])).toEqual(
        expected.map((ms) => [ms, code, `HTTP ${code}: nope`])
      )
      expectPostsOf(h.posts, delivery, [1, 2, 3, 4, 5, 6])
    })
  }

  it("two processes, one attempt at a time, answers of 25 s: claims that wait past their lease are taken over by a later claim, and no attempt reaches the endpoint twice", () => {
    const h = setUp(() => after(25_000, status(200)))
    const events = 12
    for (let i = 0; i < events; i++) seedEvent(h.state, { id: `evt_${i}`, merchantId: "mer_1", atMs: t0 })
    // Each process holds 12 claims for one endpoint that it works one at a time: 300 s of work
    // behind a 60 s lease (30 s timeout + 30 s margin).
    h.start({}, { pollIntervalMs: 5_000, concurrencyPerEndpoint: 1 })
    h.start({}, { pollIntervalMs: 5_000, concurrencyPerEndpoint: 1 })
    h.runUntil(t0 + 10 * 60_000)
    const deliveries = h.deliveries("mer_1")
    expect(deliveries).toHaveLength(events)
    for (const delivery of deliveries) {
      expect(delivery.status).toBe("succeeded")
      expect(delivery.attempts).toHaveLength(1)
    }
    // Every (delivery, attempt) reached the endpoint exactly once, and never two at a time for one delivery.
    const sent = h.posts.map((p) => `${p.headers["x-service-delivery-id"]}#${p.headers["x-service-delivery-attempt"]}`)
    expect(new Set(sent).size).toBe(sent.length)
    expect(sent).toHaveLength(events)
    // The claims that waited were taken over by a later poll (a new lease token): 12 POSTs, one
    // at a time, 25 s apart, none of them a stale claim sent again.
    expect(h.posts.map((p) => p.atMs - t0)).toEqual(Array.from({ length: events }, (_, i) => i * 25_000))
    expect(h.logs).toEqual([])
  })
})
