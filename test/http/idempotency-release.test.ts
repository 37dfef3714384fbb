import { Effect } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type StoreShape, StoreUnavailable } from "../../src/store/Store.ts"
import { client, eventually, gatedAcquirer, startApp, type TestApp, transactionBody } from "../support/app.ts"

// CONTRACT section 5, the claims of requests that do not finish normally: a response that could
// not be stored, and a request cut off in the middle. Neither may leave the key blocked for
// IDEMPOTENCY_LEASE (60 s): the client's retry runs at once and finds what was done.

/** Keys whose next completion fails as if the database went away. */
const failNextCompletion = new Set<string>()
const failingCompletion = (store: StoreShape): StoreShape => ({
  ...store,
  completeIdempotencyKey: (merchantId, key, status, body) =>
    failNextCompletion.delete(key)
      ? Effect.fail(new StoreUnavailable({ cause: "test: connection lost" }))
      : store.completeIdempotencyKey(merchantId, key, status, body)
})

/** The sandbox acquirer without its instant answer (so the flow runs as a fiber), gated for `tok_gated`. */
const gated = gatedAcquirer()

let app: TestApp
beforeAll(async () => {
  app = await startApp({ label: "idempotency_release", wrapStore: failingCompletion, acquirer: gated.layer })
})
afterAll(async () => {
  await app?.close()
})

const lockState = async (key: string) =>
  (await app.query(`SELECT state, locked_until <= now() AS released FROM idempotency_keys WHERE key = $1`, [key]))[0]

describe("claims of requests that do not finish normally", () => {
  it("a capture whose response could not be stored answers 503; its retry is answered at once and captures once", async () => {
    const { key } = await app.createMerchant()
    const api = client(app.baseUrl, key)
    const created = await api.post("/api/v1/transactions", transactionBody({ capture_method: "manual" }))
    expect(created.body.transaction.status).toBe("authorized")
    const id = created.body.transaction.id

    failNextCompletion.add("capture-1")
    const first = await api.post(`/api/v1/transactions/${id}/capture`, {}, { idempotencyKey: "capture-1" })
    expect(first.status).toBe(503)
    expect(first.body.error.code).toBe("service_unavailable")
    // The capture committed; its claim is released, not left to the lease.
    expect(await lockState("capture-1")).toEqual({ state: "in_progress", released: true })

    const retry = await api.post(`/api/v1/transactions/${id}/capture`, {}, { idempotencyKey: "capture-1" })
    expect(retry.status).toBe(200)
    expect(retry.body.transaction.status).toBe("captured")
    const events = await api.get(`/api/v1/transactions/${id}/events`)
    expect(events.body.events.filter((e: { type: string }) => e.type === "payment.captured")).toHaveLength(1)
    // And from then on it replays.
    const replay = await api.post(`/api/v1/transactions/${id}/capture`, {}, { idempotencyKey: "capture-1" })
    expect(replay.headers.get("idempotent-replayed")).toBe("true")
    expect(replay.text).toBe(retry.text)
  })

  it("a create whose response could not be stored: the retry finds the same payment", async () => {
    const { key } = await app.createMerchant()
    const api = client(app.baseUrl, key)
    failNextCompletion.add("create-1")
    const first = await api.post("/api/v1/transactions", transactionBody(), { idempotencyKey: "create-1" })
    expect(first.status).toBe(503)
    const retry = await api.post("/api/v1/transactions", transactionBody(), { idempotencyKey: "create-1" })
    expect(retry.status).toBe(201)
    const list = await api.get("/api/v1/transactions")
    expect(list.body.transactions.map((t: { id: string }) => t.id)).toEqual([retry.body.transaction.id])
  })

  it("a create cut off by its client in the middle releases its claim; the retry resumes the same payment", async () => {
    const { key } = await app.createMerchant()
    const api = client(app.baseUrl, key)
    const abort = new AbortController()
    const cut = fetch(`${app.baseUrl}/api/v1/transactions`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${key}`,
        "content-type": "application/json",
        "x-idempotency-key": "create-cut"
      },
      body: JSON.stringify(transactionBody({ card_token: "tok_gated" })),
      signal: abort.signal
    }).catch(() => null)
    await gated.entered()
    abort.abort()
    expect(await cut).toBeNull()
    await eventually(async () => ((await lockState("create-cut"))?.released === true ? true : undefined), {
      what: "the claim to be released"
    })

    await gated.open()
    const retry = await api.post("/api/v1/transactions", transactionBody({ card_token: "tok_gated" }), {
      idempotencyKey: "create-cut"
    })
    expect(retry.status).toBe(201)
    expect(retry.body.transaction.status).toBe("captured")
    const list = await api.get("/api/v1/transactions")
    expect(list.body.transactions.map((t: { id: string }) => t.id)).toEqual([retry.body.transaction.id])
  })
})
