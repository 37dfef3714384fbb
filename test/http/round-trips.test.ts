import { Effect } from "effect"
import type * as Statement from "effect/sql/Statement"
import pg from "pg"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type Client, client, startApp, type TestApp } from "../support/app.ts"

/**
 * The create path's budget (docs/performance.md), counted, not timed: SQL statements sent to the
 * app's database, commits, and fibers started, per request. Round trips, unlike time, can be
 * asserted; a change that adds one to the hot path fails here.
 */

/** Statements and commits the app's own connections send: `pg`'s counted on its client, Effect's driver's by a statement transformer. */
const counter = { database: "", statements: 0, commits: 0 }
const inTransaction = new WeakSet<object>()
const originalQuery = pg.Client.prototype.query

/**
 * Statements of Effect's own PostgreSQL driver (every statement off the create path), counted as
 * they are sent, each its own commit: the paths measured here open no transaction on that driver
 * (a transaction's BEGIN and COMMIT would not pass through this hook).
 */
const countEffectSql: Statement.Transformer = (statement) =>
  Effect.sync(() => {
    counter.statements++
    counter.commits++
    return statement
  })

/** Fibers the app starts, counted by Effect's fiber runtime metrics hook (child fibers). */
const fibers = {
  started: 0,
  recordFiberStart: () => {
    fibers.started++
  },
  recordFiberEnd: () => {}
}
let app: TestApp
let api: Client

beforeAll(async () => {
  // The API key lookup is cached for API_KEY_CACHE_TTL (5 s); on a loaded machine a measured run
  // can outlast it and count one more statement. The budget is about the request path, not the cache.
  app = await startApp({
    label: "round-trips",
    fiberMetrics: fibers,
    sqlTransformer: countEffectSql,
    config: { apiKeyCacheTtlMs: 3_600_000 }
  })
  counter.database = new URL(app.databaseUrl).pathname.slice(1)
  pg.Client.prototype.query = function(this: pg.Client & { database?: string }, ...args: Array<any>) {
    if (this.database === counter.database) {
      const config = args[0]
      const text = String(typeof config === "string" ? config : config?.text ?? "").trim().toUpperCase()
      counter.statements++
      if (text.startsWith("BEGIN") || text.startsWith("START TRANSACTION")) inTransaction.add(this)
      else if (text.startsWith("COMMIT")) {
        inTransaction.delete(this)
        counter.commits++
      } else if (text.startsWith("ROLLBACK")) inTransaction.delete(this)
      else if (!inTransaction.has(this)) counter.commits++
    }
    return (originalQuery as any).apply(this, args)
  } as any
  const merchant = await app.createMerchant()
  api = client(app.baseUrl, merchant.key)
  // Warm-up: the key's first lookup and its last_used_at write are not per request.
  expect((await api.post("/api/v1/transactions", transactionBody(0))).status).toBe(201)
})

afterAll(async () => {
  pg.Client.prototype.query = originalQuery
  await app?.close()
})

const transactionBody = (n: number) => ({
  transaction: {
    amount_cents: 1_000 + n,
    currency: "USD",
    card_token: "tok_visa",
    card_last_four: "4242",
    card_brand: "visa"
  }
})

/** Statements, commits and fibers per request over `count` requests made by `send`. */
const perRequest = async (count: number, send: (n: number) => Promise<void>) => {
  const before = { ...counter, fibers: fibers.started }
  await send(count)
  return {
    statements: (counter.statements - before.statements) / count,
    commits: (counter.commits - before.commits) / count,
    fibers: (fibers.started - before.fibers) / count
  }
}

describe("the create path's budget", () => {
  it("a create with an idempotency key: 2 statements, 2 commits, at most 2 fibers", async () => {
    const used = await perRequest(20, async (count) => {
      for (let n = 0; n < count; n++) {
        const reply = await api.post("/api/v1/transactions", transactionBody(n), { idempotencyKey: `budget-${n}` })
        expect(reply.status).toBe(201)
        expect(reply.body.transaction.status).toBe("captured")
      }
    })
    expect(used).toEqual({ statements: 2, commits: 2, fibers: expect.any(Number) })
    // The supervisor sees the app's fibers (at least the request's own), and no more than two.
    expect(used.fibers).toBeGreaterThanOrEqual(1)
    expect(used.fibers).toBeLessThanOrEqual(2)
  })

  it("a create without a key: the same", async () => {
    const used = await perRequest(20, async (count) => {
      for (let n = 0; n < count; n++) {
        expect((await api.post("/api/v1/transactions", transactionBody(n))).status).toBe(201)
      }
    })
    expect(used.statements).toBe(2)
    expect(used.commits).toBe(2)
    expect(used.fibers).toBeLessThanOrEqual(2)
  })

  it("concurrent creates share round trips: never more than 2 statements and 2 commits each", async () => {
    const used = await perRequest(48, async (count) => {
      const replies = await Promise.all(
        Array.from(
          { length: count },
          (_, n) => api.post("/api/v1/transactions", transactionBody(n), { idempotencyKey: `burst-${n}` })
        )
      )
      expect(replies.map((r) => r.status)).toEqual(Array(count).fill(201))
      expect(new Set(replies.map((r) => r.body.transaction.id)).size).toBe(count)
    })
    expect(used.statements).toBeLessThanOrEqual(2)
    expect(used.commits).toBeLessThanOrEqual(2)
  })

  it("a replay of a finished create: 1 statement, byte for byte", async () => {
    const first = await api.post("/api/v1/transactions", transactionBody(7), { idempotencyKey: "replayed" })
    expect(first.status).toBe(201)
    const used = await perRequest(10, async (count) => {
      for (let n = 0; n < count; n++) {
        const again = await api.post("/api/v1/transactions", transactionBody(7), { idempotencyKey: "replayed" })
        expect(again.headers.get("idempotent-replayed")).toBe("true")
        expect(again.text).toBe(first.text)
      }
    })
    expect(used.statements).toBe(1)
    expect(used.commits).toBe(1)
  })

  it("a keyed refund: 4 statements (claim, read, version-checked commit, stored response)", async () => {
    const created = await api.post("/api/v1/transactions", {
      transaction: { ...transactionBody(9).transaction, amount_cents: 100_000 }
    })
    const id = created.body.transaction.id
    const used = await perRequest(10, async (count) => {
      for (let n = 0; n < count; n++) {
        const refund = await api.post(`/api/v1/transactions/${id}/refund`, { amount_cents: 100 }, {
          idempotencyKey: `refund-${n}`
        })
        expect(refund.status).toBe(200)
      }
    })
    expect(used.statements).toBe(4)
    expect(used.commits).toBe(4)
    expect(used.fibers).toBeLessThanOrEqual(2)
  })

  it("GET one transaction: 1 statement, 1 commit", async () => {
    const created = await api.post("/api/v1/transactions", transactionBody(1))
    const used = await perRequest(20, async (count) => {
      for (let n = 0; n < count; n++) {
        expect((await api.get(`/api/v1/transactions/${created.body.transaction.id}`)).status).toBe(200)
      }
    })
    expect(used.statements).toBe(1)
    expect(used.commits).toBe(1)
    expect(used.fibers).toBeLessThanOrEqual(2)
  })
})
