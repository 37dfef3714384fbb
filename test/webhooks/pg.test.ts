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
const processOn = (url: string, seed: number, schedule: ReadonlyArray<number>) =>
  engineLayer(pgStoreLayer(url), { webhookAllowPrivateUrls: true, webhookRetryScheduleMs: schedule }, { pollIntervalMs: 50 }, seed)

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
      const seen = new Map<string, number>()
      for (const r of receiver.received) {
        const key = `${r.headers["x-service-event-id"]}#${r.headers["x-service-delivery-attempt"]}`
        seen.set(key, (seen.get(key) ?? 0) + 1)
      }
      expect(receiver.received).toHaveLength(2 * count)
      expect([...seen.values()].every((n) => n === 1)).toBe(true)
      expect(seen.size).toBe(2 * count)
    }), 60_000)
})
