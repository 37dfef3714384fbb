import { Effect } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { processingFeeCents } from "../../src/domain/Money.ts"
import { Payments } from "../../src/services/Payments.ts"
import { type Client, client, createTransaction, errorOf, startApp, type TestApp } from "../support/app.ts"

// CONTRACT sections 7 and 9: the merchant profile, balances from the ledger, analytics.

let app: TestApp
beforeAll(async () => {
  app = await startApp({ label: "merchants" })
})
afterAll(async () => {
  await app?.close()
})

const newMerchant = async (name?: string) => {
  const merchant = await app.createMerchant(name)
  return { ...merchant, api: client(app.baseUrl, merchant.key) }
}

const settle = (cutoff: string) => app.run(Effect.flatMap(Payments, (payments) => payments.settle(Date.parse(cutoff))))
const plusMs = (iso: string, ms: number) => new Date(Date.parse(iso) + ms).toISOString()

const balances = async (api: Client) => {
  const reply = await api.get("/api/v1/merchants/me/balance")
  expect(reply.status).toBe(200)
  expect(Object.keys(reply.body)).toEqual(["balances"])
  return reply.body.balances as Array<{ currency: string; pending: number; available: number; reserved: number }>
}

/** The balances recomputed from every transaction's ledger entries through the API. */
const balancesFromLedger = async (api: Client) => {
  const list = await api.get("/api/v1/transactions?per_page=100")
  const totals = new Map<string, { pending: number; available: number; reserved: number }>()
  for (const t of list.body.transactions) {
    const entries = (await api.get(`/api/v1/transactions/${t.id}/ledger`)).body.ledger_entries as Array<any>
    for (const e of entries) {
      const kind =
        ({ merchant_pending: "pending", merchant_available: "available", merchant_reserved: "reserved" } as const)[
          e.account as "merchant_pending"
        ]
      if (kind === undefined) continue
      const total = totals.get(e.currency) ?? { pending: 0, available: 0, reserved: 0 }
      total[kind] += e.direction === "credit" ? e.amount_cents : -e.amount_cents
      totals.set(e.currency, total)
    }
  }
  return [...totals].map(([currency, t]) => ({ currency, ...t })).sort((a, b) => a.currency.localeCompare(b.currency))
}

describe("profile", () => {
  it("GET /merchants/me returns the merchant with its webhook signing secret", async () => {
    const { api, merchantId, webhookSecret } = await newMerchant("Corner Shop")
    const reply = await api.get("/api/v1/merchants/me")
    expect(reply.status).toBe(200)
    expect(Object.keys(reply.body)).toEqual(["merchant"])
    expect(reply.body.merchant).toEqual({
      id: merchantId,
      name: "Corner Shop",
      webhook_url: null,
      webhook_secret: webhookSecret,
      created_at: expect.stringMatching(/Z$/),
      updated_at: expect.stringMatching(/Z$/)
    })
    expect(merchantId).toMatch(/^mer_/)
    expect(webhookSecret).toMatch(/^whsec_/)
  })

  it("PATCH updates the name and the webhook URL, and null removes the URL", async () => {
    const { api } = await newMerchant()
    const renamed = await api.patch("/api/v1/merchants/me", { name: "Renamed" })
    expect(renamed.status).toBe(200)
    expect(renamed.body.merchant.name).toBe("Renamed")
    // An address literal: no DNS needed. 93.184.215.14 is public.
    const withUrl = await api.patch("/api/v1/merchants/me", { webhook_url: "https://93.184.215.14/hooks" })
    expect(withUrl.status).toBe(200)
    expect(withUrl.body.merchant).toMatchObject({ name: "Renamed", webhook_url: "https://93.184.215.14/hooks" })
    expect(withUrl.body.merchant.updated_at >= renamed.body.merchant.updated_at).toBe(true)
    expect((await api.get("/api/v1/merchants/me")).body.merchant).toEqual(withUrl.body.merchant)
    const cleared = await api.patch("/api/v1/merchants/me", { webhook_url: null })
    expect(cleared.body.merchant.webhook_url).toBeNull()
    expect(cleared.body.merchant.name).toBe("Renamed")
  })

  it.each<readonly [Record<string, unknown>, string]>([
    [{ name: "" }, "name"],
    [{ name: "n".repeat(201) }, "name"],
    [{ name: 5 }, "name"],
    [{ webhook_url: "not a url" }, "webhook_url"],
    [{ webhook_url: "ftp://93.184.215.14/x" }, "webhook_url"],
    [{ webhook_url: "https://user:pass@93.184.215.14/x" }, "webhook_url"],
    [{ webhook_url: "http://127.0.0.1:8080/hook" }, "webhook_url"],
    [{ webhook_url: "http://10.1.2.3/hook" }, "webhook_url"],
    [{ webhook_url: "http://169.254.169.254/latest" }, "webhook_url"],
    [{ webhook_url: "http://[::1]/hook" }, "webhook_url"],
    // Every spelling of loopback and of the metadata address (normalised, then classified).
    ...[
      "http://[::ffff:127.0.0.1]/",
      "http://[::ffff:a9fe:a9fe]/",
      "http://[0:0:0:0:0:ffff:7f00:1]/",
      "http://[::127.0.0.1]/",
      "http://[64:ff9b::7f00:1]/",
      "http://[64:ff9b::a9fe:a9fe]/",
      "http://[2002:7f00:1::]/",
      "http://[2002:a9fe:a9fe::1]/",
      "http://2130706433/",
      "http://0x7f.1/",
      "http://017700000001/",
      "http://0177.0.0.01/",
      "http://127.1/",
      "http://127.0.0.1./",
      "http://2852039166/",
      "http://0xa9.0xfe.0xa9.0xfe/",
      "http://[fe80::1%25eth0]/",
      "http://[fc00::1]/",
      "http://0.0.0.0/",
      "http://[::]/",
      "http://localhost/",
      "http://localhost./",
      "http://LocalHost:8080/",
      "http://api.localhost/",
      "http://100.64.0.1/",
      "http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/"
    ].map((url) => [{ webhook_url: url }, "webhook_url"] as const),
    [{ webhok_url: "https://93.184.215.14/" }, "webhok_url"]
  ])("PATCH refuses %j with 422 naming %s and changes nothing", async (body, param) => {
    const { api } = await newMerchant("Unchanged")
    const before = (await api.get("/api/v1/merchants/me")).body
    const reply = await api.patch("/api/v1/merchants/me", body)
    expect(reply.status).toBe(422)
    expect(errorOf(reply)).toMatchObject({ code: "validation_failed", param })
    expect((await api.get("/api/v1/merchants/me")).body).toEqual(before)
  })

  it("accepts a host name without resolving it: one that does not resolve (yet) is checked at delivery time", async () => {
    const { api } = await newMerchant()
    const reply = await api.patch("/api/v1/merchants/me", { webhook_url: "https://hooks.example.invalid/x" })
    expect(reply.status).toBe(200)
    expect(reply.body.merchant.webhook_url).toBe("https://hooks.example.invalid/x")
    expect((await api.get("/api/v1/merchants/me")).body.merchant.webhook_url).toBe("https://hooks.example.invalid/x")
  })

  it("accepts private webhook URLs when WEBHOOK_ALLOW_PRIVATE_URLS is set", async () => {
    const permissive = await startApp({ label: "private", config: { webhookAllowPrivateUrls: true } })
    try {
      const merchant = await permissive.createMerchant()
      const reply = await client(permissive.baseUrl, merchant.key).patch("/api/v1/merchants/me", {
        webhook_url: "http://127.0.0.1:9/hook"
      })
      expect(reply.status).toBe(200)
      expect(reply.body.merchant.webhook_url).toBe("http://127.0.0.1:9/hook")
    } finally {
      await permissive.close()
    }
  })
})

describe("balances", () => {
  it("a new merchant has no balances", async () => {
    const { api } = await newMerchant()
    expect(await balances(api)).toEqual([])
  })

  it("after capture pending = captured − fee; after settlement it is available, and refunds come out of it", async () => {
    const { api } = await newMerchant()
    const t = await createTransaction(api, { amount_cents: 10_000 })
    const fee = processingFeeCents(10_000, "USD")
    expect(t.fee_cents).toBe(fee)
    expect(await balances(api)).toEqual([{ currency: "USD", pending: 10_000 - fee, available: 0, reserved: 0 }])

    // A partial capture: only the captured amount counts.
    const manual = await createTransaction(api, { amount_cents: 5_000, capture_method: "manual" })
    expect(await balances(api)).toEqual([{ currency: "USD", pending: 10_000 - fee, available: 0, reserved: 0 }])
    await api.post(`/api/v1/transactions/${manual.id}/capture`, { amount_cents: 2_000 })
    const fee2 = processingFeeCents(2_000, "USD")
    expect(await balances(api)).toEqual([{
      currency: "USD",
      pending: 10_000 - fee + 2_000 - fee2,
      available: 0,
      reserved: 0
    }])

    // A refund before settlement comes out of pending.
    await api.post(`/api/v1/transactions/${manual.id}/refund`, { amount_cents: 500 })
    const pending = 10_000 - fee + 2_000 - fee2 - 500
    expect(await balances(api)).toEqual([{ currency: "USD", pending, available: 0, reserved: 0 }])

    const settled = await settle(new Date().toISOString())
    expect(settled).toBeGreaterThanOrEqual(2)
    expect(await balances(api)).toEqual([{ currency: "USD", pending: 0, available: pending, reserved: 0 }])
    const after = await api.get(`/api/v1/transactions/${t.id}`)
    expect(after.body.transaction.status).toBe("settled")
    const events = (await api.get(`/api/v1/transactions/${t.id}/events`)).body.events
    expect(events.at(-1).type).toBe("payment.settled")
    expect(events.at(-1).data.status).toBe("settled")

    // A refund of a settled payment comes out of available; it keeps its status until fully refunded.
    const partial = await api.post(`/api/v1/transactions/${t.id}/refund`, { amount_cents: 1_000 })
    expect(partial.body.transaction).toMatchObject({ status: "settled", refunded_amount_cents: 1_000 })
    expect(await balances(api)).toEqual([{ currency: "USD", pending: 0, available: pending - 1_000, reserved: 0 }])
    const rest = await api.post(`/api/v1/transactions/${t.id}/refund`)
    expect(rest.body.transaction).toMatchObject({ status: "refunded", refunded_amount_cents: 10_000 })
    expect(await balances(api)).toEqual(await balancesFromLedger(api))
  })

  it("keeps one balance per currency, derived from the ledger", async () => {
    const { api } = await newMerchant()
    await createTransaction(api, { amount_cents: 1_000, currency: "USD" })
    await createTransaction(api, { amount_cents: 2_000, currency: "EUR" })
    await createTransaction(api, { amount_cents: 300, currency: "JPY" })
    await createTransaction(api, { amount_cents: 900, currency: "GBP", card_token: "tok_decline_do_not_honor" })
    await createTransaction(api, { amount_cents: 900, currency: "GBP", card_token: "tok_risk_highest" })
    const reported = await balances(api)
    expect(reported.map((b) => b.currency)).toEqual(["EUR", "JPY", "USD"])
    expect(reported).toEqual(await balancesFromLedger(api))
    expect(reported.find((b) => b.currency === "JPY")!.pending).toBe(300 - processingFeeCents(300, "JPY"))
  })

  it("settles only what was captured before the cut-off", async () => {
    const { api } = await newMerchant()
    const t = await createTransaction(api, { amount_cents: 4_000 })
    // Capture happened at updated_at: a cut-off at that instant is not after it.
    expect(await settle("2000-01-01T00:00:00.000Z")).toBe(0)
    await settle(t.updated_at)
    expect((await api.get(`/api/v1/transactions/${t.id}`)).body.transaction.status).toBe("captured")
    await settle(plusMs(t.updated_at, 1))
    expect((await api.get(`/api/v1/transactions/${t.id}`)).body.transaction.status).toBe("settled")
    // Settling again changes nothing.
    const before = await balances(api)
    await settle(new Date().toISOString())
    expect(await balances(api)).toEqual(before)
    expect(
      (await api.get(`/api/v1/transactions/${t.id}/events`)).body.events.filter((e: any) =>
        e.type === "payment.settled"
      )
    )
      .toHaveLength(1)
  })
})

describe("analytics", () => {
  it("reports volume, revenue, approval, fraud and refund rates per currency", async () => {
    const { api } = await newMerchant()
    const empty = await api.get("/api/v1/merchants/me/analytics")
    expect(empty.status).toBe(200)
    expect(empty.body.analytics).toMatchObject({
      transaction_count: 0,
      approval_rate: null,
      fraud_rate: null,
      refund_rate: null,
      by_currency: []
    })

    const a = await createTransaction(api, { amount_cents: 10_000 })
    await createTransaction(api, { amount_cents: 2_000 })
    await createTransaction(api, { amount_cents: 3_000, card_token: "tok_decline_insufficient_funds" })
    await createTransaction(api, { amount_cents: 4_000, card_token: "tok_risk_highest" })
    await createTransaction(api, { amount_cents: 1_500, currency: "EUR" })
    await api.post(`/api/v1/transactions/${a.id}/refund`, { amount_cents: 2_500 })

    const reply = await api.get("/api/v1/merchants/me/analytics")
    expect(Object.keys(reply.body)).toEqual(["analytics"])
    const analytics = reply.body.analytics
    expect(analytics.transaction_count).toBe(5)
    // Approved: 4 of 5 decided; blocked: 1 of the 4 approved.
    expect(analytics.approval_rate).toBeCloseTo(0.8, 6)
    expect(analytics.fraud_rate).toBeCloseTo(0.25, 6)
    const usdFees = processingFeeCents(10_000, "USD") + processingFeeCents(2_000, "USD")
    const eurFee = processingFeeCents(1_500, "EUR")
    expect(analytics.by_currency).toEqual([
      {
        currency: "EUR",
        transaction_count: 1,
        volume_cents: 1_500,
        captured_cents: 1_500,
        refunded_cents: 0,
        fees_cents: eurFee,
        revenue_cents: 1_500 - eurFee,
        approval_rate: 1,
        fraud_rate: 0,
        refund_rate: 0,
        dispute_rate: 0
      },
      {
        currency: "USD",
        transaction_count: 4,
        volume_cents: 19_000,
        captured_cents: 12_000,
        refunded_cents: 2_500,
        fees_cents: usdFees,
        revenue_cents: 12_000 - 2_500 - usdFees,
        // 3 approved of 4 decided; 1 blocked of the 3 approved; refunds in USD of captures in USD.
        approval_rate: 0.75,
        fraud_rate: 0.333333,
        refund_rate: 0.208333,
        dispute_rate: 0
      }
    ])
    // Money of two currencies is never added: the refund rate is per currency only.
    expect(analytics.refund_rate).toBeNull()
    expect(analytics.dispute_rate).toBe(0)
    // With one currency, the top-level refund rate is that currency's.
    const single = await newMerchant()
    const usd = await createTransaction(single.api, { amount_cents: 8_000 })
    await single.api.post(`/api/v1/transactions/${usd.id}/refund`, { amount_cents: 2_000 })
    expect((await single.api.get("/api/v1/merchants/me/analytics")).body.analytics).toMatchObject({
      refund_rate: 0.25,
      by_currency: [{ refund_rate: 0.25 }]
    })

    const outside = await api.get("/api/v1/merchants/me/analytics?from=2000-01-01&to=2000-12-31")
    expect(outside.body.analytics).toMatchObject({
      from: "2000-01-01T00:00:00.000Z",
      to: "2000-12-31T23:59:59.999Z",
      transaction_count: 0
    })
    const today = a.created_at.slice(0, 10)
    expect((await api.get(`/api/v1/merchants/me/analytics?from=${today}&to=${today}`)).body.analytics.transaction_count)
      .toBe(5)

    const bad = await api.get("/api/v1/merchants/me/analytics?from=last-week")
    expect(bad.status).toBe(422)
    expect(errorOf(bad).param).toBe("from")
  })

  it("only counts the merchant's own payments", async () => {
    const busy = await newMerchant()
    const quiet = await newMerchant()
    await createTransaction(busy.api, { amount_cents: 700 })
    expect((await quiet.api.get("/api/v1/merchants/me/analytics")).body.analytics.transaction_count).toBe(0)
    expect(await balances(quiet.api)).toEqual([])
  })
})
