import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer, TestClock } from "effect"
import type { Merchant } from "../../src/domain/Merchant.ts"
import type { PaymentEvent } from "../../src/domain/Payment.ts"
import { attemptTimes } from "../../src/domain/Webhook.ts"
import { emptyState, layerMemoryFrom, type MemoryState } from "../../src/store/MemoryStore.ts"
import { Webhooks } from "../../src/services/Webhooks.ts"
import { WebhookStore } from "../../src/store/WebhookStore.ts"
import { answer, engineLayer, eventually, realSleep, startReceiver, verifySignature } from "./support.ts"

const t0 = Date.parse("2026-11-22T04:00:00.000Z")
const secret = "whsec_test_secret_0123456789"
const day = 86_400_000

const seed = (state: MemoryState, url: string, eventId = "evt_1"): PaymentEvent => {
  const merchant: Merchant = {
    id: "mer_1",
    name: "Shop",
    webhookUrl: url,
    webhookSecret: secret,
    createdAt: new Date(t0).toISOString(),
    updatedAt: new Date(t0).toISOString()
  }
  state.merchants.set(merchant.id, merchant)
  const event: PaymentEvent = {
    id: eventId,
    paymentId: "pay_1",
    merchantId: merchant.id,
    type: "payment.captured",
    sequence: 3,
    createdAt: new Date(t0).toISOString(),
    data: {
      id: "pay_1",
      merchant_id: merchant.id,
      status: "captured",
      amount_cents: 4200,
      currency: "EUR",
      captured_amount_cents: 4200,
      refunded_amount_cents: 0,
      fraud_score: 0.1,
      failure_code: null
    }
  }
  state.outbox.push(event)
  return event
}

const deliveries = Effect.flatMap(WebhookStore, (s) => s.listDeliveries("mer_1", {}, { page: 1, perPage: 100 }))
const firstDelivery = Effect.map(deliveries, (page) => page.items[0])
const wake = Effect.flatMap(Webhooks, (w) => w.wake)

/** The engine over a memory state, with polling off: the test clock alone moves time. */
const engine = (state: MemoryState, config = {}) =>
  engineLayer(layerMemoryFrom(state), { webhookAllowPrivateUrls: true, ...config }, { pollIntervalMs: 2 * day })

describe("webhook dispatcher", () => {
  it.scoped("signs each POST so a receiver can verify it with its own code", () =>
    Effect.gen(function*() {
      yield* TestClock.setTime(t0)
      const receiver = yield* Effect.acquireRelease(Effect.promise(() => startReceiver(answer(204))), (r) => Effect.promise(r.close))
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
        expect(JSON.parse(request.body)).toEqual({ id: event.id, type: event.type, created_at: event.createdAt, data: event.data })
        const header = String(request.headers["x-service-signature"])
        expect(header).toMatch(/^t=\d+,v1=[0-9a-f]{64}$/)
        expect(header.startsWith(`t=${Math.floor(t0 / 1000)},`)).toBe(true)
        expect(verifySignature(header, request.body, secret, 300, Math.floor(t0 / 1000))).toBe(true)
        expect(verifySignature(header, request.body, "whsec_other", 300, Math.floor(t0 / 1000))).toBe(false)
        expect(verifySignature(header, request.body + " ", secret, 300, Math.floor(t0 / 1000))).toBe(false)
        expect(delivery!.attempts).toEqual([
          { attempt: 1, at: new Date(t0).toISOString(), responseStatus: 204, durationMs: 0, error: null }
        ])
        expect(delivery!.completedAt).toBe(new Date(t0).toISOString())
      }).pipe(Effect.provide(engine(state)))
    }))

  it.scoped("retries at exactly 1m, 5m, 30m, 2h and 24h after the first failure, then fails", () =>
    Effect.gen(function*() {
      yield* TestClock.setTime(t0)
      const receiver = yield* Effect.acquireRelease(Effect.promise(() => startReceiver(answer(500))), (r) => Effect.promise(r.close))
      const state = emptyState()
      seed(state, receiver.url)
      const expected = attemptTimes(new Date(t0).toISOString(), [60_000, 300_000, 1_800_000, 7_200_000, day])
      yield* Effect.gen(function*() {
        yield* wake
        yield* eventually(firstDelivery, (d) => d?.attempts.length === 1)
        for (let i = 1; i < expected.length; i++) {
          const before = yield* firstDelivery
          expect(before!.status).toBe("retrying")
          expect(before!.nextAttemptAt).toBe(expected[i])
          // One millisecond early: nothing happens.
          yield* TestClock.setTime(Date.parse(expected[i]!) - 1)
          yield* realSleep(30)
          expect((yield* firstDelivery)!.attempts).toHaveLength(i)
          yield* TestClock.setTime(Date.parse(expected[i]!))
          yield* eventually(firstDelivery, (d) => d?.attempts.length === i + 1)
        }
        const delivery = (yield* firstDelivery)!
        expect(delivery.attempts.map((a) => a.at)).toEqual(expected)
        expect(delivery.attempts.map((a) => a.attempt)).toEqual([1, 2, 3, 4, 5, 6])
        expect(delivery.attempts.every((a) => a.responseStatus === 500 && a.error!.startsWith("HTTP 500"))).toBe(true)
        // The endpoint's 100 kB answer is never kept whole.
        expect(delivery.attempts.every((a) => a.error!.length <= 200)).toBe(true)
        expect(delivery.status).toBe("failed")
        expect(delivery.nextAttemptAt).toBeNull()
        expect(delivery.completedAt).toBe(expected.at(-1))
        expect(receiver.received.map((r) => r.headers["x-service-delivery-attempt"])).toEqual(["1", "2", "3", "4", "5", "6"])
        yield* TestClock.adjust(7 * day)
        yield* realSleep(30)
        expect(receiver.received).toHaveLength(6)
      }).pipe(Effect.provide(engine(state)))
    }))

  it.scoped("an endpoint that does not answer within WEBHOOK_TIMEOUT counts as a failure", () =>
    Effect.gen(function*() {
      yield* TestClock.setTime(t0)
      const receiver = yield* Effect.acquireRelease(Effect.promise(() => startReceiver(() => {})), (r) => Effect.promise(r.close))
      const state = emptyState()
      seed(state, receiver.url)
      yield* Effect.gen(function*() {
        yield* wake
        yield* eventually(Effect.sync(() => receiver.received.length), (n) => n === 1)
        yield* TestClock.adjust(29_999)
        yield* realSleep(30)
        expect((yield* firstDelivery)!.attempts).toHaveLength(0)
        yield* TestClock.adjust(1)
        const delivery = (yield* eventually(firstDelivery, (d) => d?.attempts.length === 1))!
        expect(delivery.attempts[0]).toMatchObject({ attempt: 1, responseStatus: null, durationMs: 30_000 })
        expect(delivery.attempts[0]!.error).toMatch(/^timeout/)
        expect(delivery.status).toBe("retrying")
        expect(delivery.nextAttemptAt).toBe(new Date(t0 + 60_000).toISOString())
      }).pipe(Effect.provide(engine(state)))
    }))

  it.scoped("a scheduled retry survives a restart of the service", () =>
    Effect.gen(function*() {
      yield* TestClock.setTime(t0)
      let status = 503
      const receiver = yield* Effect.acquireRelease(
        Effect.promise(() => startReceiver((request, response) => answer(status)(request, response))),
        (r) => Effect.promise(r.close)
      )
      const state = emptyState()
      seed(state, receiver.url)
      // First process: one failed attempt, then it stops.
      yield* Effect.scoped(Effect.gen(function*() {
        const context = yield* Layer.build(engine(state))
        yield* Effect.provide(wake, context)
        yield* Effect.provide(eventually(firstDelivery, (d) => d?.attempts.length === 1), context)
      }))
      status = 200
      yield* TestClock.setTime(t0 + 60_000)
      yield* realSleep(30)
      expect(receiver.received).toHaveLength(1)
      // Second process over the same data: the retry happens, once.
      yield* Effect.gen(function*() {
        const delivery = (yield* eventually(firstDelivery, (d) => d?.status === "succeeded"))!
        expect(delivery.attempts.map((a) => [a.attempt, a.at, a.responseStatus])).toEqual([
          [1, new Date(t0).toISOString(), 503],
          [2, new Date(t0 + 60_000).toISOString(), 200]
        ])
        expect(receiver.received.map((r) => r.headers["x-service-delivery-attempt"])).toEqual(["1", "2"])
      }).pipe(Effect.provide(engine(state)))
    }))

  it.scoped("refuses loopback and private addresses at delivery time unless allowed", () =>
    Effect.gen(function*() {
      yield* TestClock.setTime(t0)
      const receiver = yield* Effect.acquireRelease(Effect.promise(() => startReceiver(answer(200))), (r) => Effect.promise(r.close))
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
      expect(receiver.received).toHaveLength(0)
    }))

  it.scoped("after a secret rotation both secrets sign for 24 hours, then only the new one", () =>
    Effect.gen(function*() {
      yield* TestClock.setTime(t0)
      const receiver = yield* Effect.acquireRelease(Effect.promise(() => startReceiver(answer(200))), (r) => Effect.promise(r.close))
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
