import { describe, expect, it } from "@effect/vitest"
import { Clock, Effect, Layer } from "effect"
import * as SqlClient from "effect/sql/SqlClient"
import * as Config from "../../src/platform/Config.ts"
import * as Ids from "../../src/platform/Ids.ts"
import * as WebhooksService from "../../src/services/Webhooks.ts"
import { Webhooks } from "../../src/services/Webhooks.ts"
import { WebhookStore } from "../../src/store/WebhookStore.ts"
import { freshDatabase, pgStoreLayer } from "../support/database.ts"
import { answer, engineLayer, eventually, startReceiver, verifySignature } from "./support.ts"

const secret = "whsec_pg_secret"

const seedMerchant = (url: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) =>
      sql`INSERT INTO merchants (id, name, webhook_url, webhook_secret, created_at, updated_at)
      VALUES ('mer_1', 'Shop', ${url}, ${secret}, now(), now()) ON CONFLICT (id) DO NOTHING`
  )

const all = Effect.flatMap(WebhookStore, (s) => s.listDeliveries("mer_1", {}, { page: 1, perPage: 100 }))

/** A "process": its own connection pool, dispatcher and ids, on the shared database. */
const processOn = (
  url: string,
  seed: number,
  schedule: ReadonlyArray<number>,
  config: { readonly webhookTimeoutMs?: number } = {},
  options: { readonly concurrencyPerEndpoint?: number; readonly leaseMarginMs?: number } = {}
) =>
  engineLayer(pgStoreLayer(url), { webhookAllowPrivateUrls: true, webhookRetryScheduleMs: schedule, ...config }, {
    pollIntervalMs: 50,
    ...options
  }, seed)

/** How many times each (event, attempt) reached the receiver. */
const receipts = (received: ReadonlyArray<{ readonly headers: Record<string, unknown> }>) => {
  const seen = new Map<string, number>()
  for (const r of received) {
    const key = `${r.headers["x-service-event-id"]}#${r.headers["x-service-delivery-attempt"]}`
    seen.set(key, (seen.get(key) ?? 0) + 1)
  }
  return seen
}

describe("webhook dispatcher on PostgreSQL", () => {
  it.live("a delivery survives a restart between attempts", () =>
    Effect.gen(function*() {
      const url = yield* Effect.promise(() => freshDatabase("whrestart"))
      let status = 500
      const receiver = yield* Effect.acquireRelease(
        Effect.promise(() => startReceiver((req, res) => answer(status)(req, res))),
        (r) => Effect.promise(r.close)
      )
      yield* Effect.scoped(Effect.gen(function*() {
        const context = yield* Layer.build(processOn(url, 1, [1_000]))
        yield* Effect.provide(seedMerchant(receiver.url), context)
        yield* Effect.provide(Effect.flatMap(Webhooks, (w) => w.sendTest("mer_1", "payment.captured")), context)
        yield* Effect.provide(eventually(all, (p) => p.items[0]?.attempts.length === 1), context)
      }))
      status = 200
      const page = yield* eventually(all, (p) => p.items[0]?.status === "succeeded").pipe(
        Effect.provide(processOn(url, 2, [1_000]))
      )
      const delivery = page.items[0]!
      expect(delivery.attempts.map((a) => [a.attempt, a.responseStatus])).toEqual([[1, 500], [2, 200]])
      expect(delivery.attempts[1]!.at - delivery.attempts[0]!.at).toBeGreaterThanOrEqual(1_000)
      expect(receiver.received.map((r) => r.headers["x-service-delivery-attempt"])).toEqual(["1", "2"])
      for (const r of receiver.received) {
        expect(
          verifySignature(String(r.headers["x-service-signature"]), r.body, secret, 60, Math.floor(Date.now() / 1000))
        ).toBe(true)
      }
    }))

  it.live("two dispatchers on one database deliver each attempt exactly once", () =>
    Effect.gen(function*() {
      const url = yield* Effect.promise(() => freshDatabase("whtwo"))
      const receiver = yield* Effect.acquireRelease(
        // Every first attempt fails, every retry succeeds: each delivery has exactly two attempts.
        Effect.promise(() =>
          startReceiver((req, res) => answer(req.headers["x-service-delivery-attempt"] === "1" ? 500 : 200)(req, res))
        ),
        (r) => Effect.promise(r.close)
      )
      const count = 150
      yield* Effect.gen(function*() {
        const first = yield* Layer.build(processOn(url, 11, [300]))
        yield* Effect.provide(seedMerchant(receiver.url), first)
        yield* Effect.scoped(Effect.gen(function*() {
          yield* Layer.build(processOn(url, 22, [300]))
          yield* Effect.provide(
            Effect.forEach(Array.from({ length: count }), () =>
              Effect.flatMap(Webhooks, (w) => w.sendTest("mer_1", "payment.authorized")), { concurrency: 10 }),
            first
          )
          const everything = Effect.flatMap(WebhookStore, (s) =>
            s.listDeliveries("mer_1", { status: "succeeded" }, { page: 1, perPage: 100 }))
          yield* Effect.provide(
            eventually(everything, (p) =>
              p.totalCount === count, 30_000),
            first
          )
        }))
      }).pipe(Effect.scoped)
      const seen = receipts(receiver.received)
      expect(receiver.received).toHaveLength(2 * count)
      expect([...seen.values()].every((n) =>
        n === 1
      )).toBe(true)
      expect(seen.size).toBe(2 * count)
    }), 60_000)

  it.live(
    "an endpoint answering 4xx: the delivery is never counted delivered, retried at its offsets, then failed",
    () =>
      Effect.gen(function*() {
        const url = yield* Effect.promise(() => freshDatabase("wh4xx"))
        const receiver = yield* Effect.acquireRelease(
          Effect.promise(() => startReceiver((req, res) => answer(404)(req, res))),
          (r) => Effect.promise(r.close)
        )
        const schedule = [300, 600]
        const page = yield* Effect.gen(function*() {
          yield* seedMerchant(receiver.url)
          yield* Effect.flatMap(Webhooks, (w) => w.sendTest("mer_1", "payment.captured"))
          return yield* eventually(all, (p) => p.items[0]?.status === "failed", 20_000)
        }).pipe(Effect.provide(processOn(url, 3, schedule)))
        const delivery = page.items[0]!
        expect(delivery.attempts.map((a) => [a.attempt, a.responseStatus])).toEqual([[1, 404], [2, 404], [3, 404]])
        expect(delivery.attempts.every((a) => a.error?.startsWith("HTTP 404") === true)).toBe(true)
        const firstMs = delivery.attempts[0]!.at
        expect(delivery.attempts[1]!.at - firstMs).toBeGreaterThanOrEqual(schedule[0]!)
        expect(delivery.attempts[2]!.at - firstMs).toBeGreaterThanOrEqual(schedule[1]!)
        const stats = yield* Effect.flatMap(WebhookStore, (s) => s.stats("mer_1", 0)).pipe(
          Effect.provide(processOn(url, 4, schedule))
        )
        expect(stats.counts).toMatchObject({ succeeded: 0, failed: 1 })
        expect(stats.successfulAttemptsLastDay).toBe(0)
        expect(receiver.received).toHaveLength(3)
      }),
    60_000
  )

  it.live(
    "claims that wait past their lease behind a slow endpoint are taken over; no attempt reaches it twice",
    () =>
      Effect.gen(function*() {
        const url = yield* Effect.promise(() => freshDatabase("whlease"))
        // Every answer takes 100 ms; each process works one attempt at a time, under a 1.15 s lease
        // (1 s timeout + 150 ms margin): a queue of 30 claims lasts 3 s, over two leases. The
        // timeout stays ten times the answer time, so a loaded machine (CI runs files in
        // parallel on two cores) does not turn a slow answer into a failed attempt.
        const receiver = yield* Effect.acquireRelease(
          Effect.promise(() => startReceiver((req, res) => void setTimeout(() => answer(200)(req, res), 100))),
          (r) => Effect.promise(r.close)
        )
        const count = 30
        const slow = (seed: number) =>
          processOn(url, seed, [60_000], { webhookTimeoutMs: 1_000 }, { concurrencyPerEndpoint: 1, leaseMarginMs: 150 })
        yield* Effect.gen(function*() {
          const first = yield* Layer.build(slow(31))
          yield* Effect.provide(seedMerchant(receiver.url), first)
          yield* Layer.build(slow(32))
          yield* Effect.provide(
            Effect.forEach(
              Array.from({ length: count }),
              () => Effect.flatMap(Webhooks, (w) => w.sendTest("mer_1", "payment.authorized")),
              { concurrency: 4 }
            ),
            first
          )
          const succeeded = Effect.flatMap(
            WebhookStore,
            (s) => s.listDeliveries("mer_1", { status: "succeeded" }, { page: 1, perPage: 100 })
          )
          yield* Effect.provide(eventually(succeeded, (p) => p.totalCount === count, 60_000), first)
        }).pipe(Effect.scoped)
        const seen = receipts(receiver.received)
        expect([...seen.values()].every((n) => n === 1)).toBe(true)
        expect(receiver.received).toHaveLength(count)
        const deliveries = yield* all.pipe(Effect.provide(processOn(url, 33, [60_000])))
        expect(deliveries.items.every((d) => d.attempts.length === 1 && d.status === "succeeded")).toBe(true)
      }),
    120_000
  )
})

/** Payments with `events` events each, written as the service writes them: events and outbox rows, interleaved across payments. */
const seedPaymentEvents = (payments: number, events: number, inOutbox: (sequence: number) => boolean = () => true) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    // One transaction: every event reaches the dispatchers at once.
    sql.withTransaction(Effect.gen(function*() {
      for (let p = 0; p < payments; p++) {
        yield* sql`INSERT INTO payments (id, merchant_id, status, amount_cents, currency, captured_amount_cents, refunded_amount_cents,
            fee_cents, card_brand, card_last_four, card_token, capture_method, metadata, in_flight, version, created_at, updated_at)
          VALUES (${`pay_o${p}`}, 'mer_1', 'captured', 100, 'USD', 100, 0, 0, 'visa', '4242', 'tok_visa', 'automatic', '{}', false, ${events}, now(), now())`
      }
      for (let sequence = 1; sequence <= events; sequence++) {
        for (let p = 0; p < payments; p++) {
          const id = `evt_o${p}_${sequence}`
          const data = JSON.stringify({
            id: `pay_o${p}`,
            merchant_id: "mer_1",
            status: "captured",
            amount_cents: 100,
            currency: "USD",
            captured_amount_cents: 100,
            refunded_amount_cents: 0,
            fraud_score: null,
            failure_code: null
          })
          yield* sql`INSERT INTO payment_events (id, payment_id, type, sequence, data, created_at)
            VALUES (${id}, ${`pay_o${p}`}, 'payment.captured', ${sequence}, ${data}::jsonb, now())`
          if (
            inOutbox(sequence)
          ) {
            yield* sql`INSERT INTO webhook_outbox (event_id, payment_id, sequence, merchant_id, created_at)
              VALUES (${id}, ${`pay_o${p}`}, ${sequence}, 'mer_1', now())`
          }
        }
      }
    })))

describe("webhooks in order per payment on PostgreSQL", () => {
  it.live(
    "two dispatchers with eight workers each: every payment's events reach the endpoint one after another",
    () =>
      Effect.gen(function*() {
        const url = yield* Effect.promise(() => freshDatabase("whorder"))
        // The receiver answers after 0–20 ms; the first attempt of every even event fails.
        const answered = new Map<string, number>()
        const arrivals: Array<
          { readonly eventId: string; readonly paymentId: string; readonly sequence: number; readonly atMs: number }
        > = []
        const receiver = yield* Effect.acquireRelease(
          Effect.promise(() =>
            startReceiver((req, res) => {
              const eventId = String(req.headers["x-service-event-id"])
              const sequence = Number(eventId.split("_")[2])
              const first = req.headers["x-service-delivery-attempt"] === "1"
              arrivals.push({ eventId, paymentId: JSON.parse(req.body).data.id, sequence, atMs: performance.now() })
              setTimeout(() => {
                const status = first && sequence % 2 === 0 ? 500 : 200
                if (status === 200) answered.set(eventId, performance.now())
                answer(status)(req, res)
              }, (sequence * 7 + eventId.length) % 20)
            })
          ),
          (r) => Effect.promise(r.close)
        )
        const payments = 30
        const events = 4
        yield* Effect.gen(function*() {
          const first = yield* Layer.build(processOn(url, 31, [200]))
          yield* Effect.provide(seedMerchant(receiver.url), first)
          yield* Layer.build(processOn(url, 32, [200]))
          yield* Effect.provide(seedPaymentEvents(payments, events), first)
          const succeeded = Effect.flatMap(
            WebhookStore,
            (s) => s.listDeliveries("mer_1", { status: "succeeded" }, { page: 1, perPage: 1 })
          )
          yield* Effect.provide(eventually(succeeded, (p) => p.totalCount === payments * events, 40_000), first)
        }).pipe(Effect.scoped)
        // Per payment: arrivals in sequence order, and an event's first arrival after the one before was answered 2xx.
        for (let p = 0; p < payments; p++) {
          const mine = arrivals.filter((a) => a.paymentId === `pay_o${p}`)
          expect(mine.map((a) => a.sequence)).toEqual([1, 2, 2, 3, 4, 4])
          for (const arrival of mine) {
            if (arrival.sequence === 1) continue
            expect(arrival.atMs).toBeGreaterThanOrEqual(answered.get(`evt_o${p}_${arrival.sequence - 1}`)!)
          }
        }
        // Payments were served concurrently: some payment's event arrived while another payment's was unanswered.
        const overlapping = arrivals.some((a) =>
          arrivals.some((b) =>
            b.paymentId !== a.paymentId && b.atMs < a.atMs && (answered.get(b.eventId) ?? Infinity) > a.atMs
          )
        )
        expect(overlapping).toBe(true)
      }),
    90_000
  )

  it.effect("a delivery waits while an earlier event of its payment is still in the outbox (another process drains it)", () =>
    Effect.gen(function*() {
      const url = yield* Effect.promise(() => freshDatabase("whoutbox"))
      yield* Effect.gen(function*() {
        yield* seedMerchant("http://127.0.0.1:9/hooks")
        // Event 1 is still in the outbox; event 2 already became a delivery.
        yield* seedPaymentEvents(1, 2, (sequence) => sequence === 1)
        const store = yield* WebhookStore
        const now = Date.parse("2030-01-01T00:00:00.000Z")
        yield* store.insertDelivery({
          id: "whd_second",
          merchantId: "mer_1",
          eventId: "evt_o0_2",
          eventType: "payment.captured",
          url: "http://127.0.0.1:9/hooks",
          payload: "{}",
          status: "pending",
          attempts: [],
          nextAttemptAt: 0,
          firstFailedAt: null,
          createdAt: 0,
          completedAt: null,
          order: { paymentId: "pay_o0", sequence: 2 }
        })
        // A poll that drains nothing (no batch) claims: the outbox is left to the other process.
        const claim = (token: string) =>
          Effect.map(
            store.poll({
              drainLimit: 1,
              drainBatches: 0,
              build: () => null,
              now,
              lease: () => ({ token, until: now }),
              claimLimit: 10
            }),
            (p) => p.claimed
          )
        expect(yield* claim("a")).toEqual([])
        const build = (yield* Webhooks).deliveryBuilder(yield* Clock.currentTimeMillis)
        expect((yield* store.drainOutbox(10, build)).drained).toBe(1)
        expect((yield* claim("b")).map((d) => d.eventId)).toEqual(["evt_o0_1"])
      }).pipe(
        // The Webhooks service and the stores, no dispatcher: nothing drains or claims behind the test's back.
        Effect.provide(WebhooksService.layer.pipe(
          Layer.provideMerge(pgStoreLayer(url)),
          Layer.provideMerge(Layer.merge(Ids.layerSeeded(5), Config.layerWith(Config.defaults)))
        )),
        Effect.scoped
      )
    }))
})
