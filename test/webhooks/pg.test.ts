import { describe, expect, it } from "@effect/vitest"
import * as SqlClient from "@effect/sql/SqlClient"
import { Effect, Layer } from "effect"
import { Webhooks } from "../../src/services/Webhooks.ts"
import { WebhookStore } from "../../src/store/WebhookStore.ts"
import { freshDatabase, pgStoreLayer } from "../support/database.ts"
import { answer, engineLayer, eventually, startReceiver, verifySignature } from "./support.ts"

const secret = "whsec_pg_secret"

const seedMerchant = (url: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql`INSERT INTO merchants (id, name, webhook_url, webhook_secret, created_at, updated_at)
      VALUES ('mer_1', 'Shop', ${url}, ${secret}, now(), now()) ON CONFLICT (id) DO NOTHING`)

const all = Effect.flatMap(WebhookStore, (s) => s.listDeliveries("mer_1", {}, { page: 1, perPage: 100 }))

/** A "process": its own connection pool, dispatcher and ids, on the shared database. */
const processOn = (
  url: string,
  seed: number,
  schedule: ReadonlyArray<number>,
  config: { readonly webhookTimeoutMs?: number } = {},
  options: { readonly concurrencyPerEndpoint?: number; readonly leaseMarginMs?: number } = {}
) =>
  engineLayer(pgStoreLayer(url), { webhookAllowPrivateUrls: true, webhookRetryScheduleMs: schedule, ...config }, { pollIntervalMs: 50, ...options }, seed)

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
  it.scopedLive("a delivery survives a restart between attempts", () =>
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
      const page = yield* eventually(all, (p) => p.items[0]?.status === "succeeded").pipe(Effect.provide(processOn(url, 2, [1_000])))
      const delivery = page.items[0]!
      expect(delivery.attempts.map((a) => [a.attempt, a.responseStatus])).toEqual([[1, 500], [2, 200]])
      expect(Date.parse(delivery.attempts[1]!.at) - Date.parse(delivery.attempts[0]!.at)).toBeGreaterThanOrEqual(1_000)
      expect(receiver.received.map((r) => r.headers["x-service-delivery-attempt"])).toEqual(["1", "2"])
      for (const r of receiver.received) {
        expect(verifySignature(String(r.headers["x-service-signature"]), r.body, secret, 60, Math.floor(Date.now() / 1000))).toBe(true)
      }
    }))

  it.scopedLive("two dispatchers on one database deliver each attempt exactly once", () =>
    Effect.gen(function*() {
      const url = yield* Effect.promise(() => freshDatabase("whtwo"))
      const receiver = yield* Effect.acquireRelease(
        // Every first attempt fails, every retry succeeds: each delivery has exactly two attempts.
        Effect.promise(() => startReceiver((req, res) => answer(req.headers["x-service-delivery-attempt"] === "1" ? 500 : 200)(req, res))),
        (r) => Effect.promise(r.close)
      )
      const count = 150
      yield* Effect.gen(function*() {
        const first = yield* Layer.build(processOn(url, 11, [300]))
        yield* Effect.provide(seedMerchant(receiver.url), first)
        yield* Effect.scoped(Effect.gen(function*() {
          yield* Layer.build(processOn(url, 22, [300]))
          yield* Effect.provide(
            Effect.forEach(Array.from({ length: count }), () => Effect.flatMap(Webhooks, (w) => w.sendTest("mer_1", "payment.authorized")), { concurrency: 10 }),
            first
          )
          const everything = Effect.flatMap(WebhookStore, (s) => s.listDeliveries("mer_1", { status: "succeeded" }, { page: 1, perPage: 100 }))
          yield* Effect.provide(eventually(everything, (p) => p.totalCount === count, 30_000), first)
        }))
      }).pipe(Effect.scoped)
      const seen = receipts(receiver.received)
      expect(receiver.received).toHaveLength(2 * count)
      expect([...seen.values()].every((n) => n === 1)).toBe(true)
      expect(seen.size).toBe(2 * count)
    }), 60_000)

  it.scopedLive("an endpoint answering 4xx: the delivery is never counted delivered, retried at its offsets, then failed", () =>
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
      const firstMs = Date.parse(delivery.attempts[0]!.at)
      expect(Date.parse(delivery.attempts[1]!.at) - firstMs).toBeGreaterThanOrEqual(schedule[0]!)
      expect(Date.parse(delivery.attempts[2]!.at) - firstMs).toBeGreaterThanOrEqual(schedule[1]!)
      const stats = yield* Effect.flatMap(WebhookStore, (s) => s.stats("mer_1", new Date(0).toISOString())).pipe(Effect.provide(processOn(url, 4, schedule)))
      expect(stats.counts).toMatchObject({ succeeded: 0, failed: 1 })
      expect(stats.successfulAttemptsLastDay).toBe(0)
      expect(receiver.received).toHaveLength(3)
    }), 60_000)

  it.scopedLive("claims that wait past their lease behind a slow endpoint are taken over; no attempt reaches it twice", () =>
    Effect.gen(function*() {
      const url = yield* Effect.promise(() => freshDatabase("whlease"))
      // Every answer takes 150 ms; each process works one attempt at a time, under a 400 ms lease
      // (250 ms timeout + 150 ms margin): a queue of 12 claims lasts 1.8 s, four leases.
      const receiver = yield* Effect.acquireRelease(
        Effect.promise(() => startReceiver((req, res) => void setTimeout(() => answer(200)(req, res), 150))),
        (r) => Effect.promise(r.close)
      )
      const count = 12
      const slow = (seed: number) => processOn(url, seed, [60_000], { webhookTimeoutMs: 250 }, { concurrencyPerEndpoint: 1, leaseMarginMs: 150 })
      yield* Effect.gen(function*() {
        const first = yield* Layer.build(slow(31))
        yield* Effect.provide(seedMerchant(receiver.url), first)
        yield* Layer.build(slow(32))
        yield* Effect.provide(
          Effect.forEach(Array.from({ length: count }), () => Effect.flatMap(Webhooks, (w) => w.sendTest("mer_1", "payment.authorized")), { concurrency: 4 }),
          first
        )
        const succeeded = Effect.flatMap(WebhookStore, (s) => s.listDeliveries("mer_1", { status: "succeeded" }, { page: 1, perPage: 100 }))
        yield* Effect.provide(eventually(succeeded, (p) => p.totalCount === count, 30_000), first)
      }).pipe(Effect.scoped)
      const seen = receipts(receiver.received)
      expect([...seen.values()].every((n) => n === 1)).toBe(true)
      expect(receiver.received).toHaveLength(count)
      const deliveries = yield* all.pipe(Effect.provide(processOn(url, 33, [60_000])))
      expect(deliveries.items.every((d) => d.attempts.length === 1 && d.status === "succeeded")).toBe(true)
    }), 60_000)
})
