import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type Client, client, createTransaction, errorOf, startApp, type TestApp } from "../support/app.ts"

/**
 * GET /api/v1/merchants/me/analytics?interval=hour|day|week (docs/analytics.md) on PostgreSQL:
 * the series equals sums the test computes itself from the transactions it created, per
 * currency and UTC period, within a window; rates are counts, never amounts across currencies.
 */
let app: TestApp
beforeAll(async () => {
  app = await startApp({ label: "analytics" })
})
afterAll(async () => {
  await app?.close()
})

type Transaction = Record<string, any>
const days = (n: number) => n * 86_400_000
const dayOf = (iso: string) => `${iso.slice(0, 10)}T00:00:00.000Z`

/** The expected series, computed from transaction records alone. */
const expectedSeries = (transactions: ReadonlyArray<Transaction>, periodOf: (createdAt: string) => string) => {
  const rows = new Map<string, Transaction>()
  for (const t of transactions) {
    const key = `${t.currency} ${periodOf(t.created_at)}`
    const row = rows.get(key) ?? {
      currency: t.currency,
      period_start: periodOf(t.created_at),
      transaction_count: 0,
      volume_cents: 0,
      captured_cents: 0,
      refunded_cents: 0,
      fees_cents: 0,
      decided: 0,
      approved: 0,
      blocked: 0,
      captured: 0,
      disputed: 0
    }
    row.transaction_count++
    row.volume_cents += t.amount_cents
    row.captured_cents += t.captured_amount_cents
    row.refunded_cents += t.refunded_amount_cents
    row.fees_cents += t.fee_cents
    if (t.status !== "pending") row.decided++
    if (t.status !== "pending" && t.status !== "failed") row.approved++
    if (t.status === "blocked") row.blocked++
    if (t.captured_amount_cents > 0) row.captured++
    if (t.dispute !== null) row.disputed++
    rows.set(key, row)
  }
  const ratio = (a: number, b: number) => (b === 0 ? null : Math.round((a / b) * 1e6) / 1e6)
  return [...rows.entries()].sort(([a], [b]) => (a < b ? -1 : 1)).map(([, r]) => ({
    currency: r.currency,
    period_start: r.period_start,
    transaction_count: r.transaction_count,
    volume_cents: r.volume_cents,
    captured_cents: r.captured_cents,
    refunded_cents: r.refunded_cents,
    fees_cents: r.fees_cents,
    revenue_cents: r.captured_cents - r.refunded_cents - r.fees_cents,
    // The definitions of docs/api.md ("Rates"), written out again here.
    approval_rate: ratio(r.approved, r.decided),
    fraud_rate: ratio(r.blocked, r.approved),
    refund_rate: ratio(r.refunded_cents, r.captured_cents),
    dispute_rate: ratio(r.disputed, r.captured)
  }))
}

describe("analytics series", () => {
  let api: Client
  let all: Array<Transaction>

  beforeAll(async () => {
    api = client(app.baseUrl, (await app.createMerchant()).key)
    const made: Array<Transaction> = []
    const make = async (fields: Record<string, unknown>) => made.push(await createTransaction(api, fields))
    for (const currency of ["USD", "EUR"]) {
      await make({ currency, amount_cents: 10_000 })
      await make({ currency, amount_cents: 2_500, card_token: "tok_decline_insufficient_funds" })
      await make({ currency, amount_cents: 4_000, card_token: "tok_risk_highest" })
      await make({ currency, amount_cents: 7_000, capture_method: "manual" })
      await make({ currency, amount_cents: 12_345 })
    }
    // Spread them over three days (the API has no way to create in the past): two days ago,
    // yesterday and today, in UTC.
    const now = Date.now()
    for (const [i, t] of made.entries()) {
      const createdAt = new Date(now - days(i % 3)).toISOString()
      await app.query("UPDATE payments SET created_at = $1 WHERE id = $2", [createdAt, t.id])
    }
    // Refunds after the move (they change figures, not creation times).
    await api.post(`/api/v1/transactions/${made[0]!.id}/refund`, { amount_cents: 3_000 })
    await api.post(`/api/v1/transactions/${made[5]!.id}/refund`)
    all = (await api.get("/api/v1/transactions?per_page=100")).body.transactions
    expect(all).toHaveLength(10)
  })

  it("interval=day: per currency and day, equal to the sums of the transactions", async () => {
    const reply = await api.get("/api/v1/merchants/me/analytics?interval=day")
    expect(reply.status).toBe(200)
    expect(reply.body.analytics.interval).toBe("day")
    expect(reply.body.analytics.series).toEqual(expectedSeries(all, dayOf))
    expect(new Set(reply.body.analytics.series.map((r: Transaction) => r.currency))).toEqual(new Set(["EUR", "USD"]))
    // The series adds up to the totals, per currency.
    for (const total of reply.body.analytics.by_currency) {
      const periods = reply.body.analytics.series.filter((r: Transaction) => r.currency === total.currency)
      for (
        const field of [
          "transaction_count",
          "volume_cents",
          "captured_cents",
          "refunded_cents",
          "fees_cents",
          "revenue_cents"
        ]
      ) {
        expect(periods.reduce((sum: number, r: Transaction) => sum + r[field], 0)).toBe(total[field])
      }
    }
  })

  it("a window (from, to) keeps only the payments created in it", async () => {
    const yesterday = new Date(Date.now() - days(1)).toISOString().slice(0, 10)
    const reply = await api.get(`/api/v1/merchants/me/analytics?interval=hour&from=${yesterday}&to=${yesterday}`)
    expect(reply.status).toBe(200)
    const inWindow = all.filter((t) => t.created_at.slice(0, 10) === yesterday)
    expect(inWindow.length).toBeGreaterThan(0)
    expect(reply.body.analytics.series).toEqual(expectedSeries(inWindow, (iso) => `${iso.slice(0, 13)}:00:00.000Z`))
    expect(reply.body.analytics.transaction_count).toBe(inWindow.length)
  })

  it("interval=week starts on Monday (UTC); without interval the series is empty", async () => {
    const monday = (iso: string) => {
      const day = Date.parse(dayOf(iso))
      return new Date(day - days((new Date(day).getUTCDay() + 6) % 7)).toISOString()
    }
    expect((await api.get("/api/v1/merchants/me/analytics?interval=week")).body.analytics.series).toEqual(
      expectedSeries(all, monday)
    )
    const plain = (await api.get("/api/v1/merchants/me/analytics")).body.analytics
    expect(plain).toMatchObject({ interval: null, series: [] })
  })

  it("the rollups the triggers keep equal the payments' own figures, per currency and hour", async () => {
    const figures =
      `sum(transaction_count)::int AS n, sum(volume_cents)::int AS volume, sum(captured_cents)::int AS captured,
      sum(refunded_cents)::int AS refunded, sum(fees_cents)::int AS fees, sum(decided_count)::int AS decided,
      sum(approved_count)::int AS approved, sum(blocked_count)::int AS blocked`
    const rollups = await app.query(`SELECT merchant_id, currency, hour, ${figures} FROM payment_rollups
      GROUP BY 1, 2, 3 HAVING sum(transaction_count) <> 0 ORDER BY 1, 2, 3`)
    const recomputed = await app.query(`SELECT merchant_id, currency, date_trunc('hour', created_at, 'UTC') AS hour,
        count(*)::int AS n, sum(amount_cents)::int AS volume, sum(captured_amount_cents)::int AS captured,
        sum(refunded_amount_cents)::int AS refunded, sum(fee_cents)::int AS fees,
        count(*) FILTER (WHERE status <> 'pending')::int AS decided,
        count(*) FILTER (WHERE status NOT IN ('pending', 'failed'))::int AS approved,
        count(*) FILTER (WHERE status = 'blocked')::int AS blocked
      FROM payments GROUP BY 1, 2, 3 ORDER BY 1, 2, 3`)
    expect(recomputed.length).toBeGreaterThan(0)
    expect(rollups).toEqual(recomputed)
  })

  it("the OpenAPI document describes the interval, the series and the new fraud fields", async () => {
    const openapi = (await api.get("/api/v1/openapi.json")).body
    const parameters = openapi.paths["/api/v1/merchants/me/analytics"].get.parameters.map((p: { name: string }) =>
      p.name
    )
    expect(parameters).toEqual(expect.arrayContaining(["from", "to", "interval"]))
    const text = JSON.stringify(openapi)
    for (
      const name of [
        "period_start",
        "score_histogram",
        "by_model_version",
        "fraud_explanations",
        "model_output",
        "base_value"
      ]
    ) {
      expect(text).toContain(`"${name}"`)
    }
  })

  it("an unknown interval is a 422 naming it", async () => {
    const reply = await api.get("/api/v1/merchants/me/analytics?interval=month")
    expect(reply.status).toBe(422)
    expect(errorOf(reply).param).toBe("interval")
  })
})
