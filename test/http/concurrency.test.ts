import { afterAll, beforeAll, describe, expect, it } from "vitest"
import {
  type Client,
  client,
  createTransaction,
  errorOf,
  startApp,
  type TestApp,
  unbalancedGroups
} from "../support/app.ts"

// Racing commands on one payment: exactly one wins, the loser gets the answer the winner's
// state implies, and the ledger never moves twice. Run in one process (per-payment actors)
// and across two instances of the service on one database (row locks).

let app: TestApp
let twin: TestApp
beforeAll(async () => {
  app = await startApp({ label: "concurrency" })
  twin = await startApp({ databaseUrl: app.databaseUrl })
})
afterAll(async () => {
  await twin?.close()
  await app?.close()
})

const rounds = 8

const checkLedger = async (api: Client, id: string) => {
  const entries = (await api.get(`/api/v1/transactions/${id}/ledger`)).body.ledger_entries
  expect(unbalancedGroups(entries)).toEqual([])
  return entries as Array<{ account: string; direction: string; amount_cents: number; group_id: string }>
}

const settings = [
  ["in one process", () => ({ first: app, second: app })],
  ["across two instances on one database", () => ({ first: app, second: twin })]
] as const

describe.each(settings)("racing commands %s", (_, instances) => {
  it("two concurrent refunds of 60 on a captured 100: exactly one 200 and one 422", async () => {
    const { first, second } = instances()
    const { key } = await first.createMerchant()
    const a = client(first.baseUrl, key)
    const b = client(second.baseUrl, key)
    const payments = await Promise.all(
      Array.from({ length: rounds }, () => createTransaction(a, { amount_cents: 100 }))
    )
    await Promise.all(payments.map(async (t) => {
      const replies = await Promise.all([
        a.post(`/api/v1/transactions/${t.id}/refund`, { amount_cents: 60 }),
        b.post(`/api/v1/transactions/${t.id}/refund`, { amount_cents: 60 })
      ])
      expect(replies.map((r) => r.status).sort()).toEqual([200, 422])
      const loser = replies.find((r) => r.status === 422)!
      expect(errorOf(loser)).toMatchObject({ code: "validation_failed", param: "amount_cents" })
      const after = (await a.get(`/api/v1/transactions/${t.id}`)).body.transaction
      expect(after).toMatchObject({ status: "captured", refunded_amount_cents: 60 })
      const events = (await a.get(`/api/v1/transactions/${t.id}/events`)).body.events
      expect(events.filter((e: any) => e.type === "payment.partially_refunded")).toHaveLength(1)
      const entries = await checkLedger(a, t.id)
      const refunded = entries.filter((e) => e.account === "card_network" && e.direction === "credit")
      expect(refunded.map((e) => e.amount_cents)).toEqual([60])
    }))
  })

  it("capture and void at once on a manual authorized payment: one succeeds, the other is 409", async () => {
    const { first, second } = instances()
    const { key } = await first.createMerchant()
    const a = client(first.baseUrl, key)
    const b = client(second.baseUrl, key)
    const payments = await Promise.all(
      Array.from({ length: rounds }, () => createTransaction(a, { amount_cents: 1_000, capture_method: "manual" }))
    )
    await Promise.all(payments.map(async (t, index) => {
      // Alternate which command is sent first.
      const capture = () => a.post(`/api/v1/transactions/${t.id}/capture`)
      const voiding = () => b.post(`/api/v1/transactions/${t.id}/void`)
      const [captureReply, voidReply] = index % 2 === 0
        ? await Promise.all([capture(), voiding()])
        : await Promise.all([voiding(), capture()]).then(([v, c]) => [c, v] as const)
      expect([captureReply.status, voidReply.status].sort()).toEqual([200, 409])
      const winner = captureReply.status === 200 ? "captured" : "voided"
      const loser = captureReply.status === 200 ? voidReply : captureReply
      expect(errorOf(loser).code).toBe("invalid_state")
      expect(errorOf(loser).message).toContain(`'${winner}'`)
      const after = (await a.get(`/api/v1/transactions/${t.id}`)).body.transaction
      expect(after.status).toBe(winner)
      const types = (await a.get(`/api/v1/transactions/${t.id}/events`)).body.events.map((e: any) => e.type)
      expect(types.filter((type: string) => type === "payment.captured" || type === "payment.voided")).toEqual([
        `payment.${winner}`
      ])
      const entries = await checkLedger(a, t.id)
      const holds = entries.filter((e) => e.account === "authorization_holds")
        .reduce((sum, e) => sum + (e.direction === "credit" ? e.amount_cents : -e.amount_cents), 0)
      expect(holds).toBe(0)
    }))
  })

  it("two concurrent full captures: one 200, one 409, one capture group", async () => {
    const { first, second } = instances()
    const { key } = await first.createMerchant()
    const a = client(first.baseUrl, key)
    const b = client(second.baseUrl, key)
    const t = await createTransaction(a, { amount_cents: 2_000, capture_method: "manual" })
    const replies = await Promise.all([
      a.post(`/api/v1/transactions/${t.id}/capture`, { amount_cents: 1_500 }),
      b.post(`/api/v1/transactions/${t.id}/capture`, { amount_cents: 1_000 })
    ])
    expect(replies.map((r) => r.status).sort()).toEqual([200, 409])
    const entries = await checkLedger(a, t.id)
    expect(
      new Set(entries.filter((e) => e.account === "card_network" && e.direction === "debit").map((e) => e.group_id))
        .size
    ).toBe(1)
  })
})
