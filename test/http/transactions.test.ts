import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { processingFeeCents } from "../../src/domain/Money.ts"
import {
  type Client,
  client,
  createTransaction,
  errorOf,
  startApp,
  type TestApp,
  transactionBody,
  unbalancedGroups
} from "../support/app.ts"

// CONTRACT section 6 through the public API, on PostgreSQL.

let app: TestApp
beforeAll(async () => {
  app = await startApp({ label: "transactions" })
})
afterAll(async () => {
  await app?.close()
})

/** Every test gets its own merchant: the fraud model counts earlier attempts per card and merchant. */
const newMerchant = async () => {
  const merchant = await app.createMerchant()
  return { ...merchant, api: client(app.baseUrl, merchant.key) }
}

const eventTypes = async (api: Client, id: string) => {
  const reply = await api.get(`/api/v1/transactions/${id}/events`)
  expect(reply.status).toBe(200)
  return (reply.body.events as Array<{ type: string }>).map((e) => e.type)
}

const ledgerOf = async (api: Client, id: string) => {
  const reply = await api.get(`/api/v1/transactions/${id}/ledger`)
  expect(reply.status).toBe(200)
  return reply.body.ledger_entries as Array<Record<string, any>>
}

const getTransaction = async (api: Client, id: string) => {
  const reply = await api.get(`/api/v1/transactions/${id}`)
  expect(reply.status).toBe(200)
  return reply.body.transaction as Record<string, any>
}

/** Everything a refused request must leave untouched. */
const snapshotOf = async (api: Client, id: string) => ({
  transaction: await getTransaction(api, id),
  events: (await api.get(`/api/v1/transactions/${id}/events`)).body,
  ledger: (await api.get(`/api/v1/transactions/${id}/ledger`)).body,
  balance: (await api.get("/api/v1/merchants/me/balance")).body
})

const expectInvalidState = (reply: { status: number; body: any; headers: Headers }, status: string) => {
  expect(reply.status).toBe(409)
  const error = errorOf(reply as any)
  expect(error.type).toBe("invalid_request_error")
  expect(error.code).toBe("invalid_state")
  expect(error.message).toContain(`'${status}'`)
  expect(error.request_id).toBe(reply.headers.get("x-request-id"))
}

const expectAmountRefused = (reply: { status: number; body: any }) => {
  expect(reply.status).toBe(422)
  const error = errorOf(reply as any)
  expect(error.code).toBe("validation_failed")
  expect(error.param).toBe("amount_cents")
}

describe("create and the automatic flow", () => {
  it("tok_visa is authorized, screened and captured, with the record of CONTRACT section 6", async () => {
    const { api, merchantId } = await newMerchant()
    const reply = await api.post(
      "/api/v1/transactions",
      transactionBody({
        amount_cents: 10_000,
        currency: "USD",
        card_token: "tok_visa",
        metadata: { order_id: "A-1" }
      })
    )
    expect(reply.status).toBe(201)
    expect(reply.headers.get("content-type")).toMatch(/^application\/json/)
    expect(Object.keys(reply.body)).toEqual(["transaction"])
    const t = reply.body.transaction
    expect(t).toMatchObject({
      merchant_id: merchantId,
      status: "captured",
      amount_cents: 10_000,
      currency: "USD",
      captured_amount_cents: 10_000,
      refunded_amount_cents: 0,
      card_brand: "visa",
      card_last_four: "4242",
      capture_method: "automatic",
      idempotency_key: null,
      metadata: { order_id: "A-1" },
      fraud_case_id: null,
      failure_code: null,
      failure_message: null
    })
    expect(t.id).toMatch(/^pay_[A-Za-z0-9_-]+$/)
    expect(t.fraud_score).toBeGreaterThanOrEqual(0)
    expect(t.fraud_score).toBeLessThan(0.5)
    expect(t.created_at).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/)
    expect(t.updated_at).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/)
    // The card token is never echoed.
    expect(reply.text).not.toContain("tok_visa")
    for (
      const field of [
        "id",
        "merchant_id",
        "status",
        "amount_cents",
        "currency",
        "captured_amount_cents",
        "refunded_amount_cents",
        "card_brand",
        "card_last_four",
        "capture_method",
        "idempotency_key",
        "metadata",
        "fraud_score",
        "fraud_model_version",
        "fraud_explanations",
        "fraud_case_id",
        "failure_code",
        "failure_message",
        "created_at",
        "updated_at"
      ]
    ) expect(t).toHaveProperty(field)

    expect(await getTransaction(api, t.id)).toEqual(t)
    expect(await eventTypes(api, t.id)).toEqual([
      "payment.initiated",
      "payment.authorized",
      "payment.fraud_passed",
      "payment.captured"
    ])
  })

  it("lists events oldest first with the payment snapshot of each moment", async () => {
    const { api } = await newMerchant()
    const t = await createTransaction(api, { amount_cents: 2_500, currency: "EUR" })
    const reply = await api.get(`/api/v1/transactions/${t.id}/events`)
    expect(Object.keys(reply.body)).toEqual(["events"])
    const events = reply.body.events as Array<Record<string, any>>
    const times = events.map((e) => e.created_at as string)
    expect([...times].sort()).toEqual(times)
    for (const e of events) {
      expect(e.id).toMatch(/^evt_/)
      expect(e.data).toMatchObject({ id: t.id, amount_cents: 2_500, currency: "EUR", merchant_id: t.merchant_id })
    }
    expect(events.map((e) => e.data.status)).toEqual(["pending", "authorized", "authorized", "captured"])
    expect(events.at(-1)!.data.fraud_score).toBe(t.fraud_score)
  })

  it("posts balanced ledger groups: the hold at authorization, then capture with fee and the release of the hold", async () => {
    const { api } = await newMerchant()
    const t = await createTransaction(api, { amount_cents: 10_000 })
    const reply = await api.get(`/api/v1/transactions/${t.id}/ledger`)
    expect(Object.keys(reply.body)).toEqual(["ledger_entries"])
    const entries = reply.body.ledger_entries as Array<Record<string, any>>
    expect(entries.length).toBeGreaterThan(0)
    for (const e of entries) {
      expect(e.id).toMatch(/^le_/)
      expect(e.transaction_id).toBe(t.id)
      expect(["debit", "credit"]).toContain(e.direction)
      expect(Number.isInteger(e.amount_cents) && e.amount_cents > 0).toBe(true)
      expect(e.currency).toBe("USD")
    }
    expect(unbalancedGroups(entries as any)).toEqual([])
    const fee = processingFeeCents(10_000, "USD")
    const credited = (account: string) =>
      entries.filter((e) => e.account === account).reduce(
        (sum, e) => sum + (e.direction === "credit" ? e.amount_cents : -e.amount_cents),
        0
      )
    expect(credited("merchant_pending")).toBe(10_000 - fee)
    expect(credited("fee_revenue")).toBe(fee)
    // The authorization hold is fully released once captured.
    expect(credited("authorization_holds")).toBe(0)
  })

  it.each([
    ["tok_decline_insufficient_funds", "insufficient_funds"],
    ["tok_decline_do_not_honor", "do_not_honor"],
    ["tok_decline_expired_card", "expired_card"]
  ])("%s fails with failure_code %s, no money moves", async (token, code) => {
    const { api } = await newMerchant()
    const t = await createTransaction(api, { card_token: token })
    expect(t.status).toBe("failed")
    expect(t.failure_code).toBe(code)
    expect(typeof t.failure_message).toBe("string")
    expect(t.failure_message.length).toBeGreaterThan(0)
    expect(t.captured_amount_cents).toBe(0)
    expect(await eventTypes(api, t.id)).toEqual(["payment.initiated", "payment.authorization_failed"])
    expect(await ledgerOf(api, t.id)).toEqual([])
    expectInvalidState(await api.post(`/api/v1/transactions/${t.id}/capture`), "failed")
    expectInvalidState(await api.post(`/api/v1/transactions/${t.id}/refund`), "failed")
    expectInvalidState(await api.post(`/api/v1/transactions/${t.id}/void`), "failed")
  })

  it("tok_risk_review stays authorized with an open fraud case carrying explanations", async () => {
    const { api } = await newMerchant()
    const t = await createTransaction(api, { card_token: "tok_risk_review", amount_cents: 5_000 })
    expect(t.status).toBe("authorized")
    expect(t.fraud_score).toBeGreaterThanOrEqual(0.5)
    expect(t.fraud_score).toBeLessThan(0.8)
    expect(t.fraud_case_id).toMatch(/^fc_/)
    expect(await eventTypes(api, t.id)).toEqual(["payment.initiated", "payment.authorized"])

    const cases = await api.get("/api/v1/fraud/cases?status=open")
    expect(cases.status).toBe(200)
    expect(cases.body.meta).toMatchObject({ page: 1, total_count: 1 })
    const fraudCase = cases.body.fraud_cases[0]
    expect(fraudCase).toMatchObject({
      id: t.fraud_case_id,
      transaction_id: t.id,
      status: "open",
      risk_score: t.fraud_score,
      notes: null,
      reviewed_at: null
    })
    expect(["low", "medium", "high", "critical"]).toContain(fraudCase.priority)
    expect(typeof fraudCase.model_version).toBe("string")
    const explanations = fraudCase.explanations as Array<{ feature: string; value: number; contribution: number }>
    expect(explanations.length).toBeGreaterThan(0)
    const magnitudes = explanations.map((e) => Math.abs(e.contribution))
    expect([...magnitudes].sort((a, b) => b - a)).toEqual(magnitudes)
    expect(explanations[0]!.feature).toBe("network_risk_logit")
    // Exact: the contributions sum to the model output (log-odds of the score) minus the base value (docs/fraud-model.md).
    const output = Math.log(fraudCase.risk_score / (1 - fraudCase.risk_score))
    expect(fraudCase.model_output).toBeCloseTo(output, 4)
    expect(fraudCase.base_value + explanations.reduce((sum, e) => sum + e.contribution, 0)).toBeCloseTo(
      fraudCase.model_output,
      9
    )
    // The transaction record shows the model and its largest contributions.
    const record = await getTransaction(api, t.id)
    expect(record.fraud_model_version).toBe(fraudCase.model_version)
    expect(record.fraud_explanations).toEqual(explanations.slice(0, 5))
    // A held payment cannot be captured before the review.
    expectInvalidState(await api.post(`/api/v1/transactions/${t.id}/capture`), "authorized")
  })

  it("tok_risk_highest is blocked with an open fraud case and its hold released", async () => {
    const { api } = await newMerchant()
    const t = await createTransaction(api, { card_token: "tok_risk_highest" })
    expect(t.status).toBe("blocked")
    expect(t.fraud_score).toBeGreaterThanOrEqual(0.8)
    expect(t.fraud_case_id).toMatch(/^fc_/)
    expect(await eventTypes(api, t.id)).toEqual(["payment.initiated", "payment.authorized", "payment.fraud_blocked"])
    const entries = await ledgerOf(api, t.id)
    expect(unbalancedGroups(entries as any)).toEqual([])
    expect(entries.some((e) => e.account === "merchant_pending")).toBe(false)
    const cases = await api.get("/api/v1/fraud/cases")
    expect(cases.body.fraud_cases.map((c: any) => [c.id, c.status, c.transaction_id])).toEqual([[
      t.fraud_case_id,
      "open",
      t.id
    ]])
    expectInvalidState(await api.post(`/api/v1/transactions/${t.id}/capture`), "blocked")
    expectInvalidState(await api.post(`/api/v1/transactions/${t.id}/refund`), "blocked")
  })
})

describe("manual capture, capture and void", () => {
  it("stops at authorized, then captures part of the amount; the rest of the hold is released", async () => {
    const { api } = await newMerchant()
    const t = await createTransaction(api, { capture_method: "manual", amount_cents: 10_000 })
    expect(t.status).toBe("authorized")
    expect(t.capture_method).toBe("manual")
    expect(await eventTypes(api, t.id)).toEqual(["payment.initiated", "payment.authorized", "payment.fraud_passed"])

    const over = await api.post(`/api/v1/transactions/${t.id}/capture`, { amount_cents: 10_001 })
    expectAmountRefused(over)

    const captured = await api.post(`/api/v1/transactions/${t.id}/capture`, { amount_cents: 6_000 })
    expect(captured.status).toBe(200)
    expect(captured.body.transaction).toMatchObject({
      status: "captured",
      amount_cents: 10_000,
      captured_amount_cents: 6_000
    })
    expect((await eventTypes(api, t.id)).at(-1)).toBe("payment.captured")
    const entries = await ledgerOf(api, t.id)
    expect(unbalancedGroups(entries as any)).toEqual([])
    const net = (account: string) =>
      entries.filter((e) => e.account === account).reduce(
        (s, e) => s + (e.direction === "credit" ? e.amount_cents : -e.amount_cents),
        0
      )
    expect(net("authorization_holds")).toBe(0)
    expect(net("merchant_pending")).toBe(6_000 - processingFeeCents(6_000, "USD"))

    expectInvalidState(await api.post(`/api/v1/transactions/${t.id}/capture`), "captured")
    expectInvalidState(await api.post(`/api/v1/transactions/${t.id}/void`), "captured")
  })

  it("captures the whole amount without a body", async () => {
    const { api } = await newMerchant()
    const t = await createTransaction(api, { capture_method: "manual", amount_cents: 4_321 })
    const captured = await api.post(`/api/v1/transactions/${t.id}/capture`)
    expect(captured.status).toBe(200)
    expect(captured.body.transaction).toMatchObject({ status: "captured", captured_amount_cents: 4_321 })
  })

  it("voids an authorized payment, which can then be neither captured nor refunded", async () => {
    const { api } = await newMerchant()
    const t = await createTransaction(api, { capture_method: "manual" })
    const voided = await api.post(`/api/v1/transactions/${t.id}/void`)
    expect(voided.status).toBe(200)
    expect(voided.body.transaction.status).toBe("voided")
    expect((await eventTypes(api, t.id)).at(-1)).toBe("payment.voided")
    const entries = await ledgerOf(api, t.id)
    expect(unbalancedGroups(entries as any)).toEqual([])
    expect(entries.some((e) => e.account === "merchant_pending")).toBe(false)
    expectInvalidState(await api.post(`/api/v1/transactions/${t.id}/capture`), "voided")
    expectInvalidState(await api.post(`/api/v1/transactions/${t.id}/refund`), "voided")
    expectInvalidState(await api.post(`/api/v1/transactions/${t.id}/void`), "voided")
  })

  it("void takes no body fields", async () => {
    const { api } = await newMerchant()
    const t = await createTransaction(api, { capture_method: "manual" })
    const reply = await api.post(`/api/v1/transactions/${t.id}/void`, { amount_cents: 5 })
    expect(reply.status).toBe(422)
    expect(errorOf(reply).param).toBe("amount_cents")
    expect((await getTransaction(api, t.id)).status).toBe("authorized")
  })
})

describe("refunds", () => {
  it("refunds part, then the rest without a body: partially_refunded then refunded", async () => {
    const { api } = await newMerchant()
    const t = await createTransaction(api, { amount_cents: 10_000 })
    const partial = await api.post(`/api/v1/transactions/${t.id}/refund`, { amount_cents: 3_000 })
    expect(partial.status).toBe(200)
    expect(partial.body.transaction).toMatchObject({ status: "captured", refunded_amount_cents: 3_000 })
    expect((await eventTypes(api, t.id)).at(-1)).toBe("payment.partially_refunded")

    const rest = await api.post(`/api/v1/transactions/${t.id}/refund`)
    expect(rest.status).toBe(200)
    expect(rest.body.transaction).toMatchObject({ status: "refunded", refunded_amount_cents: 10_000 })
    expect(await eventTypes(api, t.id)).toEqual([
      "payment.initiated",
      "payment.authorized",
      "payment.fraud_passed",
      "payment.captured",
      "payment.partially_refunded",
      "payment.refunded"
    ])
    expect(unbalancedGroups((await ledgerOf(api, t.id)) as any)).toEqual([])
    expectInvalidState(await api.post(`/api/v1/transactions/${t.id}/refund`), "refunded")
  })

  it("a refund without a body is the whole remainder at once", async () => {
    const { api } = await newMerchant()
    const t = await createTransaction(api, { amount_cents: 777 })
    const reply = await api.post(`/api/v1/transactions/${t.id}/refund`)
    expect(reply.status).toBe(200)
    expect(reply.body.transaction).toMatchObject({ status: "refunded", refunded_amount_cents: 777 })
    expect((await eventTypes(api, t.id)).at(-1)).toBe("payment.refunded")
  })

  it("a refund of a partial capture is bounded by the captured amount", async () => {
    const { api } = await newMerchant()
    const t = await createTransaction(api, { capture_method: "manual", amount_cents: 10_000 })
    await api.post(`/api/v1/transactions/${t.id}/capture`, { amount_cents: 4_000 })
    expectAmountRefused(await api.post(`/api/v1/transactions/${t.id}/refund`, { amount_cents: 4_001 }))
    const full = await api.post(`/api/v1/transactions/${t.id}/refund`)
    expect(full.body.transaction).toMatchObject({ status: "refunded", refunded_amount_cents: 4_000 })
  })

  it("refuses a refund above the remainder (422 amount_cents) and changes nothing", async () => {
    const { api } = await newMerchant()
    const t = await createTransaction(api, { amount_cents: 10_000 })
    await api.post(`/api/v1/transactions/${t.id}/refund`, { amount_cents: 9_000 })
    const before = await snapshotOf(api, t.id)
    expectAmountRefused(await api.post(`/api/v1/transactions/${t.id}/refund`, { amount_cents: 1_001 }))
    expect(await snapshotOf(api, t.id)).toEqual(before)
  })

  it("refuses a refund from authorized (409 naming the state) and changes nothing", async () => {
    const { api } = await newMerchant()
    const t = await createTransaction(api, { capture_method: "manual" })
    const before = await snapshotOf(api, t.id)
    expectInvalidState(await api.post(`/api/v1/transactions/${t.id}/refund`, { amount_cents: 100 }), "authorized")
    expect(await snapshotOf(api, t.id)).toEqual(before)
  })

  it.each([
    [{ amount_cents: 0 }, "amount_cents"],
    [{ amount_cents: -5 }, "amount_cents"],
    [{ amount_cents: 1.5 }, "amount_cents"],
    [{ amount_cents: "100" }, "amount_cents"],
    [{ amount: 100 }, "amount"]
  ])("refuses a malformed refund body %j (422 %s) and changes nothing", async (body, param) => {
    const { api } = await newMerchant()
    const t = await createTransaction(api, { amount_cents: 1_000 })
    const before = await snapshotOf(api, t.id)
    const reply = await api.post(`/api/v1/transactions/${t.id}/refund`, body)
    expect(reply.status).toBe(422)
    expect(errorOf(reply)).toMatchObject({ code: "validation_failed", param })
    expect(await snapshotOf(api, t.id)).toEqual(before)
  })
})

describe("listing", () => {
  it("lists newest first with pagination metadata and the filters of the interface", async () => {
    const { api } = await newMerchant()
    const created: Array<Record<string, any>> = []
    for (
      const [amount, token] of [[100, "tok_visa"], [200, "tok_decline_do_not_honor"], [300, "tok_visa"], [
        400,
        "tok_visa"
      ], [500, "tok_decline_expired_card"]] as const
    ) {
      created.push(await createTransaction(api, { amount_cents: amount, card_token: token }))
    }
    const all = await api.get("/api/v1/transactions")
    expect(all.status).toBe(200)
    expect(Object.keys(all.body).sort()).toEqual(["meta", "transactions"])
    expect(all.body.meta).toEqual({ page: 1, per_page: 20, total_count: 5, total_pages: 1, has_more: false })
    const expectedOrder = [...created].sort((a, b) =>
      a.created_at < b.created_at ? 1 : a.created_at > b.created_at ? -1 : a.id < b.id ? 1 : -1
    ).map((t) => t.id)
    expect(all.body.transactions.map((t: any) => t.id)).toEqual(expectedOrder)

    const page2 = await api.get("/api/v1/transactions?per_page=2&page=2")
    expect(page2.body.meta).toEqual({ page: 2, per_page: 2, total_count: 5, total_pages: 3, has_more: true })
    expect(page2.body.transactions.map((t: any) => t.id)).toEqual(expectedOrder.slice(2, 4))
    const page3 = await api.get("/api/v1/transactions?per_page=2&page=3")
    expect(page3.body.meta.has_more).toBe(false)
    expect(page3.body.transactions).toHaveLength(1)

    const failed = await api.get("/api/v1/transactions?status=failed")
    expect(failed.body.transactions.map((t: any) => t.amount_cents).sort()).toEqual([200, 500])
    const band = await api.get("/api/v1/transactions?min_amount=200&max_amount=400")
    expect(band.body.transactions.map((t: any) => t.amount_cents).sort()).toEqual([200, 300, 400])
    const today = created[0]!.created_at.slice(0, 10)
    expect((await api.get(`/api/v1/transactions?from=${today}&to=${today}`)).body.meta.total_count).toBe(5)
    expect((await api.get("/api/v1/transactions?to=2000-01-01")).body.meta.total_count).toBe(0)
    expect((await api.get(`/api/v1/transactions?from=${encodeURIComponent(created[4]!.created_at)}`)).body.transactions
      .map((t: any) => t.id)).toContain(created[4]!.id)
  })

  it.each([
    ["per_page=101", "per_page"],
    ["per_page=0", "per_page"],
    ["page=0", "page"],
    ["status=pending_review", "status"],
    ["min_amount=abc", "min_amount"],
    ["from=yesterday", "from"],
    ["colour=red", "colour"]
  ])("refuses ?%s with 422 naming %s", async (query, param) => {
    const { api } = await newMerchant()
    const reply = await api.get(`/api/v1/transactions?${query}`)
    expect(reply.status).toBe(422)
    expect(errorOf(reply)).toMatchObject({ code: "validation_failed", param })
  })
})

describe("another merchant's records", () => {
  it("are 404 for every transaction endpoint and stay untouched", async () => {
    const owner = await newMerchant()
    const other = await newMerchant()
    const automatic = await createTransaction(owner.api, { amount_cents: 5_000 })
    const manual = await createTransaction(owner.api, { capture_method: "manual", amount_cents: 5_000 })
    const before = [await snapshotOf(owner.api, automatic.id), await snapshotOf(owner.api, manual.id)]
    const attempts = [
      other.api.get(`/api/v1/transactions/${automatic.id}`),
      other.api.get(`/api/v1/transactions/${automatic.id}/events`),
      other.api.get(`/api/v1/transactions/${automatic.id}/ledger`),
      other.api.post(`/api/v1/transactions/${automatic.id}/refund`),
      other.api.post(`/api/v1/transactions/${manual.id}/capture`),
      other.api.post(`/api/v1/transactions/${manual.id}/void`)
    ]
    for (const reply of await Promise.all(attempts)) {
      expect(reply.status).toBe(404)
      expect(errorOf(reply)).toMatchObject({ type: "invalid_request_error", code: "not_found" })
    }
    expect((await other.api.get("/api/v1/transactions")).body.meta.total_count).toBe(0)
    expect([await snapshotOf(owner.api, automatic.id), await snapshotOf(owner.api, manual.id)]).toEqual(before)
  })

  it("an unknown id is 404 too", async () => {
    const { api } = await newMerchant()
    const reply = await api.get("/api/v1/transactions/pay_doesnotexist")
    expect(reply.status).toBe(404)
    expect(errorOf(reply).code).toBe("not_found")
  })
})

describe("fraud review", () => {
  it("false_positive releases a held automatic payment, which is then captured", async () => {
    const { api } = await newMerchant()
    const t = await createTransaction(api, { card_token: "tok_risk_review", amount_cents: 5_000 })
    const reply = await api.post(`/api/v1/fraud/cases/${t.fraud_case_id}/review`, {
      status: "false_positive",
      notes: "known customer"
    })
    expect(reply.status).toBe(200)
    expect(Object.keys(reply.body)).toEqual(["fraud_case"])
    expect(reply.body.fraud_case).toMatchObject({
      id: t.fraud_case_id,
      status: "false_positive",
      notes: "known customer"
    })
    expect(reply.body.fraud_case.reviewed_at).toMatch(/Z$/)
    // The review answers once the resumed flow has captured (within the request deadline).
    const captured = await getTransaction(api, t.id)
    expect(captured.status).toBe("captured")
    expect(captured.captured_amount_cents).toBe(5_000)
    expect(await eventTypes(api, t.id)).toEqual([
      "payment.initiated",
      "payment.authorized",
      "payment.fraud_passed",
      "payment.captured"
    ])
    expect(unbalancedGroups((await ledgerOf(api, t.id)) as any)).toEqual([])
  })

  it("false_positive on a manual payment releases it without capturing", async () => {
    const { api } = await newMerchant()
    const t = await createTransaction(api, { card_token: "tok_risk_review", capture_method: "manual" })
    expect(t.status).toBe("authorized")
    const reply = await api.post(`/api/v1/fraud/cases/${t.fraud_case_id}/review`, { status: "false_positive" })
    expect(reply.status).toBe(200)
    expect((await eventTypes(api, t.id)).at(-1)).toBe("payment.fraud_passed")
    const captured = await api.post(`/api/v1/transactions/${t.id}/capture`)
    expect(captured.status).toBe(200)
    expect(captured.body.transaction.status).toBe("captured")
  })

  it("confirmed_fraud blocks a held payment and releases its hold", async () => {
    const { api } = await newMerchant()
    const t = await createTransaction(api, { card_token: "tok_risk_review" })
    const reply = await api.post(`/api/v1/fraud/cases/${t.fraud_case_id}/review`, {
      status: "confirmed_fraud",
      notes: "stolen card"
    })
    expect(reply.status).toBe(200)
    expect(reply.body.fraud_case.status).toBe("confirmed_fraud")
    const blocked = await getTransaction(api, t.id)
    expect(blocked.status).toBe("blocked")
    expect((await eventTypes(api, t.id)).at(-1)).toBe("payment.fraud_blocked")
    const entries = await ledgerOf(api, t.id)
    expect(unbalancedGroups(entries as any)).toEqual([])
    expect(
      entries.filter((e) => e.account === "authorization_holds")
        .reduce((s, e) => s + (e.direction === "credit" ? e.amount_cents : -e.amount_cents), 0)
    ).toBe(0)
  })

  it("reviewing a case of an already blocked payment only labels it", async () => {
    const { api } = await newMerchant()
    const t = await createTransaction(api, { card_token: "tok_risk_highest" })
    const events = await eventTypes(api, t.id)
    const reply = await api.post(`/api/v1/fraud/cases/${t.fraud_case_id}/review`, { status: "confirmed_fraud" })
    expect(reply.status).toBe(200)
    expect(reply.body.fraud_case.status).toBe("confirmed_fraud")
    expect((await getTransaction(api, t.id)).status).toBe("blocked")
    expect(await eventTypes(api, t.id)).toEqual(events)
  })

  it("reviewing a case that is no longer open is 409 and changes nothing", async () => {
    const { api } = await newMerchant()
    const t = await createTransaction(api, { card_token: "tok_risk_review", capture_method: "manual" })
    await api.post(`/api/v1/fraud/cases/${t.fraud_case_id}/review`, { status: "confirmed_fraud" })
    const before = await snapshotOf(api, t.id)
    const cases = (await api.get("/api/v1/fraud/cases")).body
    for (const status of ["false_positive", "confirmed_fraud"]) {
      const again = await api.post(`/api/v1/fraud/cases/${t.fraud_case_id}/review`, { status })
      expect(again.status).toBe(409)
      expect(errorOf(again).code).toBe("invalid_state")
      expect(errorOf(again).message).toContain("confirmed_fraud")
    }
    expect(await snapshotOf(api, t.id)).toEqual(before)
    expect((await api.get("/api/v1/fraud/cases")).body).toEqual(cases)
  })

  it("refuses a review with an unknown decision (422 status) and another merchant's case (404)", async () => {
    const owner = await newMerchant()
    const other = await newMerchant()
    const t = await createTransaction(owner.api, { card_token: "tok_risk_review" })
    const bad = await owner.api.post(`/api/v1/fraud/cases/${t.fraud_case_id}/review`, { status: "open" })
    expect(bad.status).toBe(422)
    expect(errorOf(bad).param).toBe("status")
    const foreign = await other.api.post(`/api/v1/fraud/cases/${t.fraud_case_id}/review`, { status: "false_positive" })
    expect(foreign.status).toBe(404)
    expect((await other.api.get("/api/v1/fraud/cases")).body.fraud_cases).toEqual([])
    const still = (await owner.api.get("/api/v1/fraud/cases")).body.fraud_cases[0]
    expect(still.status).toBe("open")
    expect((await getTransaction(owner.api, t.id)).status).toBe("authorized")
  })

  it("reports fraud statistics: cases by status and priority, blocked money, fraud rate and review precision", async () => {
    const { api } = await newMerchant()
    const empty = await api.get("/api/v1/fraud/stats")
    expect(empty.status).toBe(200)
    expect(empty.body).toEqual({
      fraud_stats: {
        cases: {
          total: 0,
          by_status: { open: 0, confirmed_fraud: 0, false_positive: 0 },
          by_priority: { low: 0, medium: 0, high: 0, critical: 0 }
        },
        approved_count: 0,
        screened_count: 0,
        blocked: { count: 0, by_currency: [] },
        lost_dispute_count: 0,
        fraud_rate: null,
        lost_dispute_rate: null,
        review_precision: null,
        score_histogram: Array.from({ length: 10 }, (_, bin) => ({ from: bin / 10, to: (bin + 1) / 10, count: 0 })),
        by_model_version: []
      }
    })
    const visa = await createTransaction(api, { card_token: "tok_visa", amount_cents: 1_000 })
    const held = await createTransaction(api, {
      card_token: "tok_risk_review",
      amount_cents: 1_000,
      capture_method: "manual"
    })
    const released = await createTransaction(api, {
      card_token: "tok_risk_review",
      amount_cents: 1_000,
      capture_method: "manual"
    })
    const blocked = await createTransaction(api, {
      card_token: "tok_risk_highest",
      amount_cents: 2_500,
      currency: "EUR"
    })
    await createTransaction(api, { card_token: "tok_decline_do_not_honor" })
    await api.post(`/api/v1/fraud/cases/${held.fraud_case_id}/review`, { status: "confirmed_fraud" })
    await api.post(`/api/v1/fraud/cases/${released.fraud_case_id}/review`, { status: "false_positive" })
    const stats = (await api.get("/api/v1/fraud/stats")).body.fraud_stats
    expect(stats.cases.total).toBe(3)
    expect(stats.cases.by_status).toEqual({ open: 1, confirmed_fraud: 1, false_positive: 1 })
    expect(stats.cases.by_priority.critical).toBe(1)
    // Four payments were screened (the decline never was); two ended blocked: one by the model, one by review.
    expect(stats.approved_count).toBe(4)
    expect(stats.screened_count).toBe(4)
    expect(stats.blocked).toEqual({
      count: 2,
      by_currency: [{ currency: "EUR", count: 1, amount_cents: 2_500 }, {
        currency: "USD",
        count: 1,
        amount_cents: 1_000
      }]
    })
    // fraud_rate: blocked / approved (docs/api.md, "Rates").
    expect(stats.fraud_rate).toBe(0.5)
    expect(stats.lost_dispute_rate).toBe(0)
    expect(stats.review_precision).toBe(0.5)
    expect(blocked.status).toBe("blocked")
    // The histogram counts the screened payments by their scores, as the test computes it.
    const scores = [visa, held, released, blocked].map((t) => t.fraud_score as number)
    expect(stats.score_histogram.map((b: { count: number }) => b.count)).toEqual(
      Array.from({ length: 10 }, (_, bin) => scores.filter((s) => Math.min(Math.floor(s * 10), 9) === bin).length)
    )
    expect(stats.score_histogram.reduce((n: number, b: { count: number }) => n + b.count, 0)).toBe(4)
    expect(stats.by_model_version).toEqual([{
      model_version: visa.fraud_model_version,
      screened_count: 4,
      blocked_count: 2,
      fraud_rate: 0.5,
      cases: { total: 3, by_status: { open: 1, confirmed_fraud: 1, false_positive: 1 } },
      review_precision: 0.5
    }])
  })

  it("filters cases by status and priority", async () => {
    const { api } = await newMerchant()
    const held = await createTransaction(api, { card_token: "tok_risk_review", amount_cents: 1_000 })
    const blocked = await createTransaction(api, { card_token: "tok_risk_highest", amount_cents: 1_000 })
    await api.post(`/api/v1/fraud/cases/${blocked.fraud_case_id}/review`, { status: "confirmed_fraud" })
    const open = await api.get("/api/v1/fraud/cases?status=open")
    expect(open.body.fraud_cases.map((c: any) => c.id)).toEqual([held.fraud_case_id])
    const confirmed = await api.get("/api/v1/fraud/cases?status=confirmed_fraud")
    expect(confirmed.body.fraud_cases.map((c: any) => c.id)).toEqual([blocked.fraud_case_id])
    const critical = await api.get("/api/v1/fraud/cases?priority=critical")
    expect(critical.body.fraud_cases.map((c: any) => c.id)).toEqual([blocked.fraud_case_id])
    const bad = await api.get("/api/v1/fraud/cases?priority=urgent")
    expect(bad.status).toBe(422)
    expect(errorOf(bad).param).toBe("priority")
  })
})
