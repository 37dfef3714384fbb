import { execFile } from "node:child_process"
import { resolve } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { disputeFeeCents, processingFeeCents } from "../../src/domain/Money.ts"
import { client, createTransaction, startApp, type TestApp } from "../support/app.ts"

// `payments dispute open|resolve`: the operator speaks for the card network through the service
// operation an acquirer notification takes; run as `npx payments` runs it (bin/payments.mjs), as a
// child process on the app's database.

const root = resolve(import.meta.dirname, "../..")

const cli = (databaseUrl: string, args: ReadonlyArray<string>) =>
  new Promise<{ code: number; stdout: string; stderr: string }>((done) => {
    execFile(
      process.execPath,
      ["bin/payments.mjs", ...args],
      // The first run after a source change builds the bundle: seconds on a busy two-core host.
      { cwd: root, env: { ...process.env, DATABASE_URL: databaseUrl }, timeout: 120_000 },
      (error, stdout, stderr) => done({ code: error === null ? 0 : Number(error.code ?? 1), stdout, stderr })
    )
  })

let app: TestApp
beforeAll(async () => {
  app = await startApp({ label: "clidisputes" })
})
afterAll(async () => {
  await app.close()
})

describe("dispute open / resolve", () => {
  it("opens and resolves a dispute, idempotently, with the money and events an acquirer notification makes", async () => {
    const api = client(app.baseUrl, (await app.createMerchant("CLI Disputes")).key)
    const t = await createTransaction(api, { amount_cents: 10_000 })
    const fee = processingFeeCents(10_000, "USD")

    const opened = await cli(app.databaseUrl, [
      "dispute",
      "open",
      t.id,
      "--reason",
      "product_not_received",
      "--amount",
      "3000",
      "--json"
    ])
    expect(opened.code, opened.stderr).toBe(0)
    const printed = JSON.parse(opened.stdout)
    expect(printed).toMatchObject({ dispute_id: `dp_operator_${t.id}`, applied: true })
    expect(printed.transaction.dispute).toMatchObject({
      status: "open",
      reason: "product_not_received",
      amount_cents: 3_000,
      resolved_at: null
    })
    expect((await api.get("/api/v1/merchants/me/balance")).body.balances).toEqual([
      { currency: "USD", pending: 10_000 - fee - 3_000, available: 0, reserved: 3_000 }
    ])
    // While open, a refund that would touch the disputed 3,000 is refused.
    expect((await api.post(`/api/v1/transactions/${t.id}/refund`, { amount_cents: 7_001 })).status).toBe(409)

    // The same command again is the same dispute (its derived id): nothing changes.
    const [again, refused] = await Promise.all([
      cli(app.databaseUrl, ["dispute", "open", t.id, "--reason", "product_not_received", "--amount", "3000", "--json"]),
      // Another dispute id on a payment with a dispute: refused, exit 1, nothing on stdout.
      cli(app.databaseUrl, ["dispute", "open", t.id, "--reason", "other", "--dispute-id", "dp_other", "--json"])
    ])
    expect(JSON.parse(again.stdout)).toMatchObject({ applied: false })
    expect(refused.code).not.toBe(0)
    expect(refused.stdout).toBe("")
    expect(refused.stderr).toContain("already has dispute")

    const lost = await cli(app.databaseUrl, ["dispute", "resolve", t.id, "--outcome", "lost", "--json"])
    expect(lost.code, lost.stderr).toBe(0)
    expect(JSON.parse(lost.stdout).transaction.dispute).toMatchObject({ status: "lost", amount_cents: 3_000 })
    const resolvedAgain = await cli(app.databaseUrl, ["dispute", "resolve", t.id, "--outcome", "lost", "--json"])
    expect(JSON.parse(resolvedAgain.stdout)).toMatchObject({ applied: false })
    expect((await api.get("/api/v1/merchants/me/balance")).body.balances).toEqual([
      { currency: "USD", pending: 10_000 - fee - 3_000 - disputeFeeCents.USD, available: 0, reserved: 0 }
    ])
    const types = (await api.get(`/api/v1/transactions/${t.id}/events`)).body.events.map((e: any) => e.type)
    expect(types.filter((type: string) => type.startsWith("payment.dispute"))).toEqual([
      "payment.dispute_opened",
      "payment.dispute_resolved"
    ])
  })

  it("refuses bad arguments: non-zero exit, a message on stderr, nothing on stdout, nothing changed", async () => {
    const api = client(app.baseUrl, (await app.createMerchant("CLI Refusals")).key)
    const t = await createTransaction(api, { amount_cents: 1_000 })
    const refused = [
      ["dispute", "open", t.id, "--reason", "because"],
      ["dispute", "open", t.id, "--reason", "fraudulent", "--amount", "1001"],
      ["dispute", "open", t.id, "--reason", "fraudulent", "--amount", "1.5"],
      ["dispute", "open", "pay_nonexistent", "--reason", "fraudulent"],
      ["dispute", "resolve", t.id, "--outcome", "won"],
      ["dispute", "resolve", t.id, "--outcome", "maybe"],
      ["dispute", "close", t.id]
    ]
    const runs = await Promise.all(refused.map((args) => cli(app.databaseUrl, args)))
    for (const [index, run] of runs.entries()) {
      expect(run.code, JSON.stringify(refused[index])).not.toBe(0)
      expect(run.stdout).toBe("")
      expect(run.stderr.trim().length).toBeGreaterThan(0)
    }
    expect((await api.get(`/api/v1/transactions/${t.id}`)).body.transaction.dispute).toBeNull()
  })
})
