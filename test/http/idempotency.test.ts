import { afterAll, beforeAll, describe, expect, it } from "vitest"
import {
  client,
  createTransaction,
  errorOf,
  eventually,
  gatedAcquirer,
  startApp,
  type TestApp,
  transactionBody
} from "../support/app.ts"

// CONTRACT section 5 through the public API, on PostgreSQL.

let app: TestApp
beforeAll(async () => {
  app = await startApp({ label: "idempotency" })
})
afterAll(async () => {
  await app?.close()
})

const newApi = async () => {
  const merchant = await app.createMerchant()
  return { ...merchant, api: client(app.baseUrl, merchant.key) }
}

const paymentsWithKey = async (merchantId: string, key: string) =>
  app.query("SELECT id FROM payments WHERE merchant_id = $1 AND idempotency_key = $2", [merchantId, key])

describe("replay", () => {
  it("answers a repeated create with the stored response byte for byte and Idempotent-Replayed: true", async () => {
    const { api, merchantId } = await newApi()
    const body = transactionBody({ amount_cents: 1_234, metadata: { order: "42", note: "first" } })
    const first = await api.post("/api/v1/transactions", body, { idempotencyKey: "order-42" })
    expect(first.status).toBe(201)
    expect(first.headers.get("idempotent-replayed")).toBeNull()
    expect(first.body.transaction.idempotency_key).toBe("order-42")

    const second = await api.post("/api/v1/transactions", body, { idempotencyKey: "order-42" })
    expect(second.status).toBe(201)
    expect(second.headers.get("idempotent-replayed")).toBe("true")
    expect(second.text).toBe(first.text)
    // Every response still has its own request id.
    expect(second.headers.get("x-request-id")).not.toBe(first.headers.get("x-request-id"))

    // Key order in the JSON does not make a different request.
    const reordered = {
      transaction: {
        metadata: { note: "first", order: "42" },
        card_brand: "visa",
        card_last_four: "4242",
        card_token: "tok_visa",
        currency: "USD",
        amount_cents: 1_234
      }
    }
    const third = await api.post("/api/v1/transactions", reordered, { idempotencyKey: "order-42" })
    expect(third.status).toBe(201)
    expect(third.text).toBe(first.text)
    expect(await paymentsWithKey(merchantId, "order-42")).toHaveLength(1)
    const events = await api.get(`/api/v1/transactions/${first.body.transaction.id}/events`)
    expect(events.body.events.filter((e: any) => e.type === "payment.initiated")).toHaveLength(1)
    expect(events.body.events.filter((e: any) => e.type === "payment.captured")).toHaveLength(1)
  })

  it("treats transaction.idempotency_key like the header", async () => {
    const { api, merchantId } = await newApi()
    const body = transactionBody({ idempotency_key: "idem_body_1" })
    const first = await api.post("/api/v1/transactions", body)
    expect(first.status).toBe(201)
    expect(first.body.transaction.idempotency_key).toBe("idem_body_1")
    const again = await api.post("/api/v1/transactions", body)
    expect(again.headers.get("idempotent-replayed")).toBe("true")
    expect(again.text).toBe(first.text)
    const withHeader = await api.post("/api/v1/transactions", body, { idempotencyKey: "idem_body_1" })
    expect(withHeader.text).toBe(first.text)
    expect(await paymentsWithKey(merchantId, "idem_body_1")).toHaveLength(1)
  })

  it("stores a finished refusal too: a repeated over-refund replays the same 422", async () => {
    const { api } = await newApi()
    const t = await createTransaction(api, { amount_cents: 500 })
    const first = await api.post(`/api/v1/transactions/${t.id}/refund`, { amount_cents: 600 }, {
      idempotencyKey: "refund-too-much"
    })
    expect(first.status).toBe(422)
    const again = await api.post(`/api/v1/transactions/${t.id}/refund`, { amount_cents: 600 }, {
      idempotencyKey: "refund-too-much"
    })
    expect(again.status).toBe(422)
    expect(again.text).toBe(first.text)
    expect(again.headers.get("idempotent-replayed")).toBe("true")
  })

  it("applies a repeated refund once", async () => {
    const { api } = await newApi()
    const t = await createTransaction(api, { amount_cents: 1_000 })
    const first = await api.post(`/api/v1/transactions/${t.id}/refund`, { amount_cents: 300 }, {
      idempotencyKey: "refund-1"
    })
    const again = await api.post(`/api/v1/transactions/${t.id}/refund`, { amount_cents: 300 }, {
      idempotencyKey: "refund-1"
    })
    expect(first.status).toBe(200)
    expect(again.text).toBe(first.text)
    const current = await api.get(`/api/v1/transactions/${t.id}`)
    expect(current.body.transaction.refunded_amount_cents).toBe(300)
    const events = await api.get(`/api/v1/transactions/${t.id}/events`)
    expect(events.body.events.filter((e: any) => e.type === "payment.partially_refunded")).toHaveLength(1)
  })

  it("replays capture, void and review answers", async () => {
    const { api } = await newApi()
    const manual = await createTransaction(api, { capture_method: "manual" })
    const capture = await api.post(`/api/v1/transactions/${manual.id}/capture`, { amount_cents: 100 }, {
      idempotencyKey: "cap"
    })
    expect(
      (await api.post(`/api/v1/transactions/${manual.id}/capture`, { amount_cents: 100 }, { idempotencyKey: "cap" }))
        .text
    )
      .toBe(capture.text)
    const other = await createTransaction(api, { capture_method: "manual" })
    const voided = await api.post(`/api/v1/transactions/${other.id}/void`, undefined, { idempotencyKey: "void" })
    expect(voided.status).toBe(200)
    expect((await api.post(`/api/v1/transactions/${other.id}/void`, undefined, { idempotencyKey: "void" })).text).toBe(
      voided.text
    )
    const held = await createTransaction(api, { card_token: "tok_risk_review", capture_method: "manual" })
    const review = await api.post(`/api/v1/fraud/cases/${held.fraud_case_id}/review`, { status: "confirmed_fraud" }, {
      idempotencyKey: "rev"
    })
    expect(review.status).toBe(200)
    const replay = await api.post(`/api/v1/fraud/cases/${held.fraud_case_id}/review`, { status: "confirmed_fraud" }, {
      idempotencyKey: "rev"
    })
    expect(replay.status).toBe(200)
    expect(replay.text).toBe(review.text)
  })
})

describe("reuse", () => {
  it("refuses the same key with a different request: 422 idempotency_key_reused, nothing created", async () => {
    const { api, merchantId } = await newApi()
    const first = await api.post("/api/v1/transactions", transactionBody({ amount_cents: 1_000 }), {
      idempotencyKey: "k-1"
    })
    expect(first.status).toBe(201)
    const differentBody = await api.post("/api/v1/transactions", transactionBody({ amount_cents: 1_001 }), {
      idempotencyKey: "k-1"
    })
    expect(differentBody.status).toBe(422)
    expect(errorOf(differentBody)).toMatchObject({
      type: "idempotency_error",
      code: "idempotency_key_reused",
      param: "X-Idempotency-Key"
    })
    expect(errorOf(differentBody).message).toContain("X-Idempotency-Key")
    expect(errorOf(differentBody).request_id).toBe(differentBody.headers.get("x-request-id"))
    // Another path is another request.
    const differentPath = await api.post(`/api/v1/transactions/${first.body.transaction.id}/refund`, undefined, {
      idempotencyKey: "k-1"
    })
    expect(differentPath.status).toBe(422)
    expect(errorOf(differentPath)).toMatchObject({ code: "idempotency_key_reused", param: "X-Idempotency-Key" })
    // A key given in the body alone is named as the body's field.
    const inBody = await api.post(
      "/api/v1/transactions",
      transactionBody({ amount_cents: 1_002, idempotency_key: "k-1" })
    )
    expect(inBody.status).toBe(422)
    expect(errorOf(inBody)).toMatchObject({ code: "idempotency_key_reused", param: "transaction.idempotency_key" })
    expect(errorOf(inBody).message).toContain("transaction.idempotency_key")
    expect(await paymentsWithKey(merchantId, "k-1")).toHaveLength(1)
    const current = await api.get(`/api/v1/transactions/${first.body.transaction.id}`)
    expect(current.body.transaction.refunded_amount_cents).toBe(0)
  })

  it("scopes keys to one merchant", async () => {
    const a = await newApi()
    const b = await newApi()
    const fromA = await a.api.post("/api/v1/transactions", transactionBody(), { idempotencyKey: "shared" })
    const fromB = await b.api.post("/api/v1/transactions", transactionBody(), { idempotencyKey: "shared" })
    expect(fromA.status).toBe(201)
    expect(fromB.status).toBe(201)
    expect(fromB.headers.get("idempotent-replayed")).toBeNull()
    expect(fromB.body.transaction.id).not.toBe(fromA.body.transaction.id)
    expect(fromB.body.transaction.merchant_id).toBe(b.merchantId)
  })
})

describe("requests in flight", () => {
  it("answers 409 idempotency_in_progress with Retry-After while the first request runs, then replays it", async () => {
    const acquirer = gatedAcquirer()
    const gated = await startApp({ label: "inflight", acquirer: acquirer.layer })
    try {
      const merchant = await gated.createMerchant()
      const api = client(gated.baseUrl, merchant.key)
      const body = transactionBody({ card_token: "tok_gated" })
      const first = api.post("/api/v1/transactions", body, { idempotencyKey: "slow" })
      await acquirer.entered()
      const retry = await api.post("/api/v1/transactions", body, { idempotencyKey: "slow" })
      expect(retry.status).toBe(409)
      expect(errorOf(retry)).toMatchObject({ type: "idempotency_error", code: "idempotency_in_progress" })
      expect(Number(retry.headers.get("retry-after"))).toBeGreaterThanOrEqual(1)
      await acquirer.open()
      const answered = await first
      expect(answered.status).toBe(201)
      expect(answered.body.transaction.status).toBe("captured")
      const replay = await api.post("/api/v1/transactions", body, { idempotencyKey: "slow" })
      expect(replay.text).toBe(answered.text)
      expect(replay.headers.get("idempotent-replayed")).toBe("true")
    } finally {
      await gated.close()
    }
  })

  it("25 concurrent identical requests make exactly one transaction: one 201, the rest 409 while it runs", async () => {
    const acquirer = gatedAcquirer()
    const gated = await startApp({ label: "burst", acquirer: acquirer.layer })
    try {
      const merchant = await gated.createMerchant()
      const api = client(gated.baseUrl, merchant.key)
      const body = transactionBody({ card_token: "tok_gated", amount_cents: 2_500 })
      const requests = Array.from(
        { length: 25 },
        () => api.post("/api/v1/transactions", body, { idempotencyKey: "burst" })
      )
      await acquirer.entered()
      // The first claim holds the key until the gate opens: every other request has its answer already.
      const settled: Array<Awaited<(typeof requests)[number]>> = []
      for (const r of requests) r.then((reply) => settled.push(reply))
      await eventually(async () => (settled.length >= 24 ? true : undefined), { what: "24 answers" })
      expect(settled.map((r) => r.status)).toEqual(Array(24).fill(409))
      await acquirer.open()
      const replies = await Promise.all(requests)
      const created = replies.filter((r) => r.status === 201)
      expect(created).toHaveLength(1)
      expect(await gated.query("SELECT id FROM payments WHERE idempotency_key = 'burst'")).toHaveLength(1)
      expect(await gated.query("SELECT * FROM payment_events WHERE type = 'payment.initiated'")).toHaveLength(1)
      expect(await gated.query("SELECT * FROM payment_events WHERE type = 'payment.captured'")).toHaveLength(1)
    } finally {
      await gated.close()
    }
  })

  it("25 concurrent identical requests against the plain sandbox agree on one transaction", async () => {
    const { api, merchantId } = await newApi()
    const body = transactionBody({ amount_cents: 3_300 })
    const replies = await Promise.all(
      Array.from({ length: 25 }, () => api.post("/api/v1/transactions", body, { idempotencyKey: "race" }))
    )
    for (const r of replies) expect([201, 409]).toContain(r.status)
    const created = replies.filter((r) => r.status === 201)
    expect(created.length).toBeGreaterThanOrEqual(1)
    expect(new Set(created.map((r) => r.text)).size).toBe(1)
    expect(await paymentsWithKey(merchantId, "race")).toHaveLength(1)
    const settled = await api.post("/api/v1/transactions", body, { idempotencyKey: "race" })
    expect(settled.text).toBe(created[0]!.text)
  })
})

describe("expiry", () => {
  /** Waits (bounded) until the stored claim of `key` is past its expiry on the database clock. */
  const expired = (target: TestApp, key: string) =>
    eventually(async () => {
      const rows = await target.query("SELECT expires_at < now() AS gone FROM idempotency_keys WHERE key = $1", [key])
      return rows[0]?.gone === true ? true : undefined
    }, { what: `idempotency key ${key} to expire` })

  it("forgets keys after IDEMPOTENCY_TTL: the key may then carry a new request", async () => {
    const shortLived = await startApp({ label: "ttl", config: { idempotencyTtlMs: 1 } })
    try {
      const merchant = await shortLived.createMerchant()
      const api = client(shortLived.baseUrl, merchant.key)
      const first = await api.post("/api/v1/api_keys", { name: "first" }, { idempotencyKey: "ttl-key" })
      expect(first.status).toBe(201)
      await expired(shortLived, "ttl-key")
      // Before the TTL this would be 422 idempotency_key_reused.
      const reused = await api.post("/api/v1/api_keys", { name: "second" }, { idempotencyKey: "ttl-key" })
      expect(reused.status).toBe(201)
      expect(reused.headers.get("idempotent-replayed")).toBeNull()
      expect(reused.body.api_key.name).toBe("second")
      await expired(shortLived, "ttl-key")
      // And the same request is run again, not replayed.
      const again = await api.post("/api/v1/api_keys", { name: "second" }, { idempotencyKey: "ttl-key" })
      expect(again.status).toBe(201)
      expect(again.body.api_key.id).not.toBe(reused.body.api_key.id)

      const t = await createTransaction(api, { amount_cents: 1_000 })
      const refund = await api.post(`/api/v1/transactions/${t.id}/refund`, { amount_cents: 100 }, {
        idempotencyKey: "ttl-refund"
      })
      expect(refund.status).toBe(200)
      await expired(shortLived, "ttl-refund")
      const secondRefund = await api.post(`/api/v1/transactions/${t.id}/refund`, { amount_cents: 100 }, {
        idempotencyKey: "ttl-refund"
      })
      expect(secondRefund.status).toBe(200)
      expect(secondRefund.body.transaction.refunded_amount_cents).toBe(200)
    } finally {
      await shortLived.close()
    }
  })

  it("a create may reuse a key after IDEMPOTENCY_TTL and makes a new transaction", async () => {
    const shortLived = await startApp({ label: "ttlcreate", config: { idempotencyTtlMs: 1 } })
    try {
      const merchant = await shortLived.createMerchant()
      const api = client(shortLived.baseUrl, merchant.key)
      const first = await api.post("/api/v1/transactions", transactionBody({ amount_cents: 100 }), {
        idempotencyKey: "ttl-create"
      })
      expect(first.status).toBe(201)
      await expired(shortLived, "ttl-create")
      const second = await api.post("/api/v1/transactions", transactionBody({ amount_cents: 200 }), {
        idempotencyKey: "ttl-create"
      })
      expect(second.status).toBe(201)
      expect(second.body.transaction.amount_cents).toBe(200)
      expect(second.body.transaction.id).not.toBe(first.body.transaction.id)
      expect(second.body.transaction.idempotency_key).toBe("ttl-create")
      // The first payment is untouched.
      const old = await api.get(`/api/v1/transactions/${first.body.transaction.id}`)
      expect(old.body.transaction).toMatchObject({ amount_cents: 100, status: "captured" })
    } finally {
      await shortLived.close()
    }
  })

  it("keeps keys within IDEMPOTENCY_TTL (default 24 h)", async () => {
    const { api } = await newApi()
    const first = await api.post("/api/v1/api_keys", { name: "kept" }, { idempotencyKey: "kept-key" })
    const rows = await app.query("SELECT created_at, expires_at FROM idempotency_keys WHERE key = 'kept-key'")
    expect(Date.parse(rows[0]!.expires_at) - Date.parse(rows[0]!.created_at)).toBe(24 * 3_600_000)
    const reused = await api.post("/api/v1/api_keys", { name: "other" }, { idempotencyKey: "kept-key" })
    expect(reused.status).toBe(422)
    expect(errorOf(reused).code).toBe("idempotency_key_reused")
    expect(first.status).toBe(201)
  })
})
