import { Effect, type Fiber, Layer } from "effect"
import pg from "pg"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { Acquirer, sandboxAuthorize, sandboxAuthorizeWithin } from "../../src/acquirer/Acquirer.ts"
import { hasPendingInterrupt } from "../../src/platform/EffectInternals.ts"
import type { StoreShape } from "../../src/store/Store.ts"
import { client, eventually, startApp, type TestApp, transactionBody } from "../support/app.ts"

// docs/api.md, idempotency: a request cut off by its client releases its claim. On the general
// path (an acquirer that is waited for) the create's first statement claims the key and inserts
// the payment, group-committed with other creates (src/store/PgHotPath.ts); a request interrupted
// while that statement runs waits for it, but never sees its outcome: the store releases the
// claim that statement committed before the interruption ends. Left locked, it would hold for
// IDEMPOTENCY_LEASE and every retry would answer 409 `idempotency_in_progress` for a minute. A
// create whose acquirer answers at once writes its key finished, with the payment, in one
// statement: cut off while that statement runs, its retry is the stored answer. Here the statement
// is held on a table lock, so the client hangs up while it is provably on its way;
// test/ops/hang-up-claims.test.ts is the storm.

/** The request fibers that sent a create's writing statement, by idempotency key. */
const senders = new Map<string, Fiber.Fiber<unknown, unknown>>()
const watchingSenders = (store: StoreShape): StoreShape => ({
  ...store,
  openPayment: (open) =>
    Effect.withFiber((fiber) => {
      if (open.claim !== null) senders.set(open.claim.key, fiber as Fiber.Fiber<unknown, unknown>)
      return store.openPayment(open)
    }),
  insertCreated: (commit) =>
    Effect.withFiber((fiber) => {
      if (commit.claim !== null) senders.set(commit.claim.key, fiber as Fiber.Fiber<unknown, unknown>)
      return store.insertCreated(commit)
    })
})

/** The sandbox network as one that is waited for: no answer at once, so every create takes the general path. */
const waitedFor = Layer.succeed(Acquirer, { authorize: sandboxAuthorize, authorizeWithin: sandboxAuthorizeWithin })

let general: TestApp
let once: TestApp
let blocker: pg.Client
beforeAll(async () => {
  general = await startApp({ label: "hang_up_claim", wrapStore: watchingSenders, acquirer: waitedFor })
  once = await startApp({ label: "hang_up_once", wrapStore: watchingSenders })
})
afterAll(async () => {
  await general?.close()
  await once?.close()
})

const interrupted = (fiber: Fiber.Fiber<unknown, unknown>) => hasPendingInterrupt(fiber)

/**
 * Sends a create keyed `key` while inserts into payments wait on a table lock, hangs up once its
 * writing statement waits on that lock and the service has seen the hang-up, then lets it go on:
 * resolves once the cut-off request has ended.
 */
const cutWhileWriting = async (app: TestApp, key: string, apiKey: string, body: unknown) => {
  blocker = new pg.Client({ connectionString: app.databaseUrl })
  await blocker.connect()
  // Inserts into payments wait until this transaction ends.
  await blocker.query("BEGIN")
  await blocker.query("LOCK TABLE payments IN SHARE MODE")
  const abort = new AbortController()
  const cut = fetch(`${app.baseUrl}/api/v1/transactions`, {
    method: "POST",
    headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json", "x-idempotency-key": key },
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
      return waiting.rows.length > 0 && senders.has(key) ? true : undefined
    }, { what: "the create's writing statement to wait on the lock" })
    const sender = senders.get(key)!
    abort.abort()
    expect(await cut).toBeNull()
    // The service has seen the hang-up (the request waits for its statement) before the statement can go on.
    await eventually(async () => (interrupted(sender) ? true : undefined), { what: "the request to be interrupted" })
    expect(sender.pollUnsafe()).toBeUndefined()
  } finally {
    await blocker.query("COMMIT")
    await blocker.end()
  }
  const sender = senders.get(key)!
  await eventually(async () => (sender.pollUnsafe() !== undefined ? true : undefined), {
    what: "the cut-off request to end"
  })
}

describe("a create whose client hangs up while its writing statement is on its way", () => {
  it("releases the claim that statement commits: the retry resumes the same payment at once", async () => {
    const app = general
    const { key } = await app.createMerchant()
    const api = client(app.baseUrl, key)
    const body = transactionBody({ amount_cents: 4_200 })
    await cutWhileWriting(app, "cut-in-flight", key, body)

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
  it("written once: the cut-off create's key holds its answer, which the retry gets", async () => {
    const app = once
    const { key } = await app.createMerchant()
    const api = client(app.baseUrl, key)
    const body = transactionBody({ amount_cents: 4_300 })
    await cutWhileWriting(app, "cut-once", key, body)

    // The statement wrote the payment, captured, and the key with its answer: nothing is left locked.
    const written = await app.query(`SELECT id, status FROM payments WHERE idempotency_key = 'cut-once'`)
    expect(written).toEqual([{ id: expect.any(String), status: "captured" }])
    expect(await app.query(`SELECT state, response_status, applied_to FROM idempotency_keys WHERE key = 'cut-once'`))
      .toEqual([{ state: "completed", response_status: 201, applied_to: written[0]!.id }])
    const retry = await api.post("/api/v1/transactions", body, { idempotencyKey: "cut-once" })
    expect(retry.status, retry.text).toBe(201)
    expect(retry.headers.get("idempotent-replayed")).toBe("true")
    expect(retry.body.transaction.id).toBe(written[0]!.id)
    expect(await app.query(`SELECT id FROM payments WHERE idempotency_key = 'cut-once'`)).toHaveLength(1)
  })
})
