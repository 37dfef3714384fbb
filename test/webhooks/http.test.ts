import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as TestClock from "effect/testing/TestClock"
import { Webhooks } from "../../src/services/Webhooks.ts"
import { emptyState, layerMemoryFrom, type MemoryState } from "../../src/store/MemoryStore.ts"
import { WebhookStore } from "../../src/store/WebhookStore.ts"
import { answer, engineLayer, eventually, seedEvent, seedMerchant, startReceiver, verifySignature } from "./support.ts"

/**
 * The dispatcher with the production HTTP transport against real receivers on 127.0.0.1: only
 * what needs real I/O (bytes on the wire, a socket that never answers, the SSRF lookup). Time is
 * Effect's TestClock; `eventually` waits for the real I/O to complete. The schedule, the
 * timeout's exact boundary and everything that must NOT happen are checked under virtual time
 * in dispatcher.test.ts and actor.test.ts.
 */

const t0 = Date.parse("2026-11-22T04:00:00.000Z")
const secret = "whsec_test_secret_0123456789"
const day = 86_400_000

const seed = (state: MemoryState, url: string) => {
  seedMerchant(state, { id: "mer_1", url, secret, atMs: t0 })
  return seedEvent(state, { id: "evt_1", merchantId: "mer_1", atMs: t0 })
}

const deliveries = Effect.flatMap(WebhookStore, (s) => s.listDeliveries("mer_1", {}, { page: 1, perPage: 100 }))
const firstDelivery = Effect.map(deliveries, (page) => page.items[0])
const wake = Effect.flatMap(Webhooks, (w) => w.wake)

/** The engine over a memory state, with polling off: the test clock alone moves time. */
const engine = (state: MemoryState, config = {}) =>
  engineLayer(layerMemoryFrom(state), { webhookAllowPrivateUrls: true, ...config }, { pollIntervalMs: 2 * day })

const receiverWith = (respond: Parameters<typeof startReceiver>[0]) =>
  Effect.acquireRelease(Effect.promise(() => startReceiver(respond)), (r) => Effect.promise(r.close))

describe("webhook dispatcher over real HTTP", () => {
  it.effect("signs each POST so a receiver can verify it with its own code", () =>
    Effect.gen(function*() {
      yield* TestClock.setTime(t0)
      const receiver = yield* receiverWith(answer(204))
      const state = emptyState()
      const event = seed(state, receiver.url)
      yield* Effect.gen(function*() {
        yield* wake
        const delivery = yield* eventually(firstDelivery, (d) => d?.status === "succeeded")
        expect(receiver.received).toHaveLength(1)
        const request = receiver.received[0]!
        expect(request.headers["content-type"]).toBe("application/json")
        expect(request.headers["x-service-event-id"]).toBe(event.id)
        expect(request.headers["x-service-delivery-attempt"]).toBe("1")
        expect(request.headers["x-service-delivery-id"]).toBe(delivery!.id)
        // Only the documented headers (and HTTP's own): nothing internal such as trace context.
        expect(Object.keys(request.headers).sort()).toEqual([
          "connection",
          "content-length",
          "content-type",
          "host",
          "user-agent",
          "x-service-delivery-attempt",
          "x-service-delivery-id",
          "x-service-event-id",
          "x-service-signature"
        ])
        expect(JSON.parse(request.body)).toEqual({
          id: event.id,
          type: event.type,
          created_at: new Date(event.createdAt).toISOString(),
          data: event.data
        })
        const header = String(request.headers["x-service-signature"])
        expect(header).toMatch(/^t=\d+,v1=[0-9a-f]{64}$/)
        expect(header.startsWith(`t=${Math.floor(t0 / 1000)},`)).toBe(true)
        expect(verifySignature(header, request.body, secret, 300, Math.floor(t0 / 1000))).toBe(true)
        expect(verifySignature(header, request.body, "whsec_other", 300, Math.floor(t0 / 1000))).toBe(false)
        expect(verifySignature(header, request.body + " ", secret, 300, Math.floor(t0 / 1000))).toBe(false)
        expect(delivery!.attempts).toEqual([
          { attempt: 1, at: t0, responseStatus: 204, durationMs: 0, error: null }
        ])
        expect(delivery!.completedAt).toBe(t0)
      }).pipe(Effect.provide(engine(state)))
    }))

  it.effect("a 500 with a 100 kB body is recorded as 'HTTP 500: ...' cut to 200 characters; the retry goes out on the same delivery id", () =>
    Effect.gen(function*() {
      yield* TestClock.setTime(t0)
      const receiver = yield* receiverWith(answer(500))
      const state = emptyState()
      seed(state, receiver.url)
      yield* Effect.gen(function*() {
        yield* wake
        const first = (yield* eventually(firstDelivery, (d) => d?.attempts.length === 1))!
        // The endpoint's 100 kB answer (all "x") is never kept whole: a reason of 200 characters.
        expect(first.attempts[0]).toEqual({
          attempt: 1,
          at: t0,
          responseStatus: 500,
          durationMs: 0,
          error: `HTTP 500: ${"x".repeat(190)}`
        })
        expect(first.status).toBe("retrying")
        expect(first.nextAttemptAt).toBe(t0 + 60_000)
        // The retry, over the connection the unread rest of that answer was left on.
        yield* TestClock.adjust(60_000)
        const second = (yield* eventually(firstDelivery, (d) => d?.attempts.length === 2))!
        expect(second.attempts[1]).toMatchObject({
          attempt: 2,
          at: t0 + 60_000,
          responseStatus: 500
        })
        expect(second.attempts[1]!.error!.length).toBe(200)
        expect(receiver.received.map((r) => r.headers["x-service-delivery-attempt"])).toEqual(["1", "2"])
        expect(receiver.received.map((r) => r.headers["x-service-delivery-id"])).toEqual([first.id, first.id])
        expect(receiver.received[1]!.body).toBe(receiver.received[0]!.body)
      }).pipe(Effect.provide(engine(state)))
    }))

  it.effect("a socket that never answers is abandoned after WEBHOOK_TIMEOUT and recorded as a timeout", () =>
    Effect.gen(function*() {
      yield* TestClock.setTime(t0)
      const receiver = yield* receiverWith(() => {})
      const state = emptyState()
      seed(state, receiver.url)
      yield* Effect.gen(function*() {
        yield* wake
        yield* eventually(Effect.sync(() => receiver.received.length), (n) => n === 1)
        // The request is on the wire and the clock has not moved: no answer, no timeout, nothing recorded.
        expect((yield* firstDelivery)!.attempts).toHaveLength(0)
        // (Where exactly the timeout falls, to the millisecond, is checked under virtual time.)
        yield* TestClock.adjust(30_000)
        const delivery = (yield* eventually(firstDelivery, (d) => d?.attempts.length === 1))!
        expect(delivery.attempts[0]).toMatchObject({ attempt: 1, responseStatus: null, durationMs: 30_000 })
        expect(delivery.attempts[0]!.error).toMatch(/^timeout/)
        expect(delivery.status).toBe("retrying")
        expect(delivery.nextAttemptAt).toBe(t0 + 60_000)
        // The request was really abandoned: the receiver sees its client go away.
        yield* eventually(Effect.sync(() => receiver.abandoned()), (n) => n === 1)
      }).pipe(Effect.provide(engine(state)))
    }))

  it.effect("refuses loopback and private addresses at delivery time unless allowed", () =>
    Effect.gen(function*() {
      yield* TestClock.setTime(t0)
      const receiver = yield* receiverWith(answer(200))
      for (const url of [receiver.url, `http://localhost:${receiver.port}/hooks`]) {
        const state = emptyState()
        seed(state, url)
        yield* Effect.gen(function*() {
          yield* wake
          const delivery = (yield* eventually(firstDelivery, (d) => d?.attempts.length === 1))!
          expect(delivery.attempts[0]!.error).toMatch(/refused/)
          expect(delivery.attempts[0]!.responseStatus).toBeNull()
        }).pipe(Effect.provide(engine(state, { webhookAllowPrivateUrls: false })))
      }
      // Deterministic, no waiting: an attempt that had reached the receiver would have been
      // recorded only after the receiver took the whole request (and answered it).
      expect(receiver.received).toHaveLength(0)
    }))

  it.effect("after a secret rotation both secrets sign for 24 hours, then only the new one", () =>
    Effect.gen(function*() {
      yield* TestClock.setTime(t0)
      const receiver = yield* receiverWith(answer(200))
      const state = emptyState()
      seed(state, receiver.url)
      yield* Effect.gen(function*() {
        const webhooks = yield* Webhooks
        const { merchant } = yield* webhooks.rotateSecret("mer_1")
        expect(merchant.webhookSecret).toMatch(/^whsec_/)
        expect(merchant.webhookSecret).not.toBe(secret)
        yield* webhooks.wake
        yield* eventually(Effect.sync(() => receiver.received.length), (n) => n === 1)
        const first = receiver.received[0]!
        const header = String(first.headers["x-service-signature"])
        expect(header.split(",").filter((p) => p.startsWith("v1="))).toHaveLength(2)
        expect(verifySignature(header, first.body, secret, null, 0)).toBe(true)
        expect(verifySignature(header, first.body, merchant.webhookSecret, null, 0)).toBe(true)
        yield* TestClock.adjust(day)
        yield* webhooks.sendTest("mer_1", "payment.refunded")
        yield* eventually(Effect.sync(() => receiver.received.length), (n) => n === 2)
        const second = receiver.received[1]!
        const later = String(second.headers["x-service-signature"])
        expect(later.split(",").filter((p) => p.startsWith("v1="))).toHaveLength(1)
        expect(verifySignature(later, second.body, merchant.webhookSecret, null, 0)).toBe(true)
        expect(verifySignature(later, second.body, secret, null, 0)).toBe(false)
        expect(JSON.parse(second.body).type).toBe("payment.refunded")
      }).pipe(Effect.provide(engine(state)))
    }))
})
