import { Effect, type Fiber } from "effect"
import pg from "pg"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { hasPendingInterrupt } from "../../src/platform/EffectInternals.ts"
import type { StoreShape } from "../../src/store/Store.ts"
import { client, eventually, startApp, type TestApp, transactionBody } from "../support/app.ts"

// docs/api.md, idempotency: a request cut off by its client releases its claim. The create's first
// statement claims the key and inserts the payment, group-committed with other creates
// (src/store/PgHotPath.ts); a request interrupted while that statement runs waits for it, but
// never sees its outcome: the store releases the claim that statement committed before the
// interruption ends. Left locked, it would hold for IDEMPOTENCY_LEASE and every retry would answer
// 409 `idempotency_in_progress` for a minute. Here the statement is held on a table lock, so the
// client hangs up while it is provably on its way; test/ops/hang-up-claims.test.ts is the storm.

/** The request fibers that sent the create's first statement, by idempotency key. */
const senders = new Map<string, Fiber.Fiber<unknown, unknown>>()
const watchingSenders = (store: StoreShape): StoreShape => ({
  ...store,
  openPayment: (open) =>
    Effect.withFiber((fiber) => {
      if (open.claim !== null) senders.set(open.claim.key, fiber as Fiber.Fiber<unknown, unknown>)
      return store.openPayment(open)
    })
})

let app: TestApp
let blocker: pg.Client
beforeAll(async () => {
  app = await startApp({ label: "hang_up_claim", wrapStore: watchingSenders })
  blocker = new pg.Client({ connectionString: app.databaseUrl })
  await blocker.connect()
})
afterAll(async () => {
  await blocker?.end()
  await app?.close()
})

const interrupted = (fiber: Fiber.Fiber<unknown, unknown>) => hasPendingInterrupt(fiber)

describe("a create whose client hangs up while its first statement is on its way", () => {
  it("releases the claim that statement commits: the retry resumes the same payment at once", async () => {
    const { key } = await app.createMerchant()
    const api = client(app.baseUrl, key)
    const body = transactionBody({ amount_cents: 4_200 })

    // Inserts into payments wait until this transaction ends.
    await blocker.query("BEGIN")
    await blocker.query("LOCK TABLE payments IN SHARE MODE")
    const abort = new AbortController()
    const cut = fetch(`${app.baseUrl}/api/v1/transactions`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${key}`,
        "content-type": "application/json",
        "x-idempotency-key": "cut-in-flight"
      },
      body: JSON.stringify(body),
      signal: abort.signal
    }).catch(() => null)
    try {
      // (Waiting to bind: pg_stat_activity still shows the connection's previous query, pg_locks the wait.)
      await eventually(async () => {
        const waiting = await blocker.query(
          `SELECT 1 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
           WHERE a.datname = current_database() AND l.relation = 'payments'::regclass AND NOT l.granted`
        )
        return waiting.rows.length > 0 && senders.has("cut-in-flight") ? true : undefined
      }, { what: "the create's first statement to wait on the lock" })
      const sender = senders.get("cut-in-flight")!
      abort.abort()
      expect(await cut).toBeNull()
      // The service has seen the hang-up (the request waits for its statement) before the statement can go on.
      await eventually(async () => (interrupted(sender) ? true : undefined), { what: "the request to be interrupted" })
      expect(sender.pollUnsafe()).toBeUndefined()
    } finally {
      await blocker.query("COMMIT")
    }
    const sender = senders.get("cut-in-flight")!
    await eventually(async () => (sender.pollUnsafe() !== undefined ? true : undefined), {
      what: "the cut-off request to end"
    })

    // The statement committed the claim and the payment after the request was interrupted.
    const claims = await app.query(
      `SELECT state, locked_until <= now() AS released, applied_to FROM idempotency_keys WHERE key = 'cut-in-flight'`
    )
    expect(claims).toHaveLength(1)
    const opened = await app.query(`SELECT id FROM payments WHERE idempotency_key = 'cut-in-flight'`)
    expect(opened).toHaveLength(1)
    expect(claims[0], "the claim is still locked: every retry answers 409 until the lease ends").toEqual({
      state: "in_progress",
      released: true,
      applied_to: opened[0]!.id
    })

    // The retry is answered at once with the payment the cut-off request opened, and stored.
    const retry = await api.post("/api/v1/transactions", body, { idempotencyKey: "cut-in-flight" })
    expect(retry.status, retry.text).toBe(201)
    expect(retry.body.transaction.id).toBe(opened[0]!.id)
    expect(retry.body.transaction.status).toBe("captured")
    const replay = await api.post("/api/v1/transactions", body, { idempotencyKey: "cut-in-flight" })
    expect(replay.headers.get("idempotent-replayed")).toBe("true")
    expect(replay.text).toBe(retry.text)
    expect(await app.query(`SELECT id FROM payments WHERE idempotency_key = 'cut-in-flight'`)).toHaveLength(1)
  })
})
