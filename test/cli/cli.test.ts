import { execFile } from "node:child_process"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import pg from "pg"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { startEmbeddedPostgres } from "../../src/platform/Database.ts"
import { client, createTransaction, startApp, type TestApp } from "../support/app.ts"
import { freshShellEnv } from "../support/childEnv.ts"
import { freshDatabase } from "../support/database.ts"

// The command line (CONTRACT section 4): run as a child process, as an operator would, through
// the same launcher as `npx payments` (bin/payments.mjs, which runs the bundle of src/main.ts).

const root = resolve(import.meta.dirname, "../..")

interface Run {
  readonly code: number
  readonly stdout: string
  readonly stderr: string
}

/** `payments ARGS` with `env` added to a fresh shell's environment (no DATABASE_URL unless given). */
const payments = (args: ReadonlyArray<string>, env: Record<string, string>) =>
  new Promise<Run>((done) => {
    execFile(
      process.execPath,
      ["bin/payments.mjs", ...args],
      // The first run after a source change builds the bundle: seconds on a busy two-core host.
      { cwd: root, env: freshShellEnv(env), timeout: 120_000 },
      (error, stdout, stderr) => done({ code: error === null ? 0 : Number(error.code ?? 1), stdout, stderr })
    )
  })

const cli = (databaseUrl: string, args: ReadonlyArray<string>, env: Record<string, string> = {}) =>
  payments(args, { ...env, DATABASE_URL: databaseUrl })

const query = async (databaseUrl: string, text: string) => {
  const connection = new pg.Client({ connectionString: databaseUrl })
  await connection.connect()
  try {
    return (await connection.query(text)).rows
  } finally {
    await connection.end()
  }
}
const countMerchants = async (databaseUrl: string) =>
  Number((await query(databaseUrl, "SELECT count(*) AS n FROM merchants"))[0].n)

// One database for the whole file: `migrate` prepares it, and every later command runs the
// migrations again on start, which must be harmless.
let url: string
let app: TestApp | undefined
beforeAll(async () => {
  url = await freshDatabase("cli")
})
afterAll(async () => {
  await app?.close()
})

describe("migrate", () => {
  it("applies the migrations to an empty database and exits 0 with nothing on stdout", async () => {
    const run = await cli(url, ["migrate"])
    expect(run.code).toBe(0)
    expect(run.stdout).toBe("")
    const tables = await query(url, "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'")
    for (
      const table of [
        "merchants",
        "api_keys",
        "payments",
        "payment_events",
        "ledger_entries",
        "fraud_cases",
        "idempotency_keys"
      ]
    ) {
      expect(tables.map((r) => r.table_name)).toContain(table)
    }
  })
})

describe("merchant create", () => {
  it("prints exactly one JSON object with the merchant and its first key, which works against the API", async () => {
    const run = await cli(url, [
      "merchant",
      "create",
      "--name",
      "CLI Shop",
      "--webhook-url",
      "https://example.com/hook"
    ])
    expect(run.code).toBe(0)
    // From the bundle, not the slower fallback through tsx.
    expect(run.stderr).not.toContain("through tsx")
    const lines = run.stdout.split("\n").filter((line) => line.trim() !== "")
    expect(lines).toHaveLength(1)
    const printed = JSON.parse(lines[0]!)
    expect(Object.keys(printed)).toEqual(["merchant", "api_key"])
    expect(printed.merchant).toMatchObject({ name: "CLI Shop", webhook_url: "https://example.com/hook" })
    expect(printed.merchant.id).toMatch(/^mer_/)
    expect(printed.merchant.webhook_secret).toMatch(/^whsec_/)
    expect(printed.api_key).toMatchObject({ status: "active" })
    expect(printed.api_key.id).toMatch(/^key_/)
    expect(printed.api_key.key).toMatch(/^sk_live_[A-Za-z0-9]+$/)
    expect(printed.api_key.prefix).toBe(printed.api_key.key.slice(0, 12))

    app = await startApp({ databaseUrl: url })
    const me = await client(app.baseUrl, printed.api_key.key).get("/api/v1/merchants/me")
    expect(me.status).toBe(200)
    expect(me.body.merchant).toEqual(printed.merchant)
    const rows = await app.query("SELECT key_hash FROM api_keys WHERE merchant_id = $1", [printed.merchant.id])
    expect(JSON.stringify(rows)).not.toContain(printed.api_key.key)
  })

  it("refuses bad arguments: non-zero exit, a message on stderr, nothing on stdout, nothing created", async () => {
    const before = await countMerchants(url)
    const refused = [
      ["merchant", "create", "--name", "x".repeat(201)],
      ["merchant", "create", "--name", "Bad URL", "--webhook-url", "ftp://example.com/x"],
      ["frobnicate"]
    ]
    const runs = await Promise.all(refused.map((args) => cli(url, args)))
    for (const [index, run] of runs.entries()) {
      expect(run.code, JSON.stringify(refused[index])).not.toBe(0)
      expect(run.stdout).toBe("")
      expect(run.stderr.trim().length).toBeGreaterThan(0)
    }
    expect(await countMerchants(url)).toBe(before)
  })
})

describe("settle", () => {
  it("settles captured payments: status settled, payment.settled events, pending moves to available", async () => {
    // Without --webhook-url the merchant has none.
    const created = JSON.parse((await cli(url, ["merchant", "create", "--name", "Settler"])).stdout)
    expect(created.merchant).toMatchObject({ name: "Settler", webhook_url: null })
    app ??= await startApp({ databaseUrl: url })
    const api = client(app.baseUrl, created.api_key.key)
    const captured = await createTransaction(api, { amount_cents: 10_000 })
    const refunded = await createTransaction(api, { amount_cents: 3_000 })
    await api.post(`/api/v1/transactions/${refunded.id}/refund`, { amount_cents: 1_000 })
    const manual = await createTransaction(api, { amount_cents: 5_000, capture_method: "manual" })
    const failed = await createTransaction(api, { card_token: "tok_decline_expired_card" })
    const before = (await api.get("/api/v1/merchants/me/balance")).body.balances
    expect(before).toHaveLength(1)
    expect(before[0].available).toBe(0)

    const run = await cli(url, ["settle", "--json"])
    expect(run.code).toBe(0)
    expect(JSON.parse(run.stdout)).toEqual({ settled: 2 })

    for (const t of [captured, refunded]) {
      const after = (await api.get(`/api/v1/transactions/${t.id}`)).body.transaction
      expect(after.status).toBe("settled")
      const types = (await api.get(`/api/v1/transactions/${t.id}/events`)).body.events.map((e: any) => e.type)
      expect(types.at(-1)).toBe("payment.settled")
      expect(types.filter((type: string) => type === "payment.settled")).toHaveLength(1)
    }
    expect((await api.get(`/api/v1/transactions/${manual.id}`)).body.transaction.status).toBe("authorized")
    expect((await api.get(`/api/v1/transactions/${failed.id}`)).body.transaction.status).toBe("failed")
    const after = (await api.get("/api/v1/merchants/me/balance")).body.balances
    expect(after).toEqual([{ currency: "USD", pending: 0, available: before[0].pending, reserved: 0 }])

    // Nothing left to settle.
    const again = await cli(url, ["settle", "--json"])
    expect(JSON.parse(again.stdout)).toEqual({ settled: 0 })
    expect((await api.get("/api/v1/merchants/me/balance")).body.balances).toEqual(after)
  })
})

describe("beside a running service's embedded PostgreSQL", () => {
  it("uses the server another process started and leaves it running, without claiming to stop it", async () => {
    // As `npm start` leaves it: the embedded server under PAYMENTS_DATA_DIR/postgres, started by another process.
    const dataDirectory = mkdtempSync(join(tmpdir(), "payments-cli-data-"))
    const server = await startEmbeddedPostgres({
      directory: join(dataDirectory, "postgres"),
      persistent: false,
      flags: ["-c", "fsync=off"]
    })
    try {
      const run = await payments(["merchant", "create", "--name", "Beside"], { PAYMENTS_DATA_DIR: dataDirectory })
      expect(run.code, run.stderr).toBe(0)
      expect(JSON.parse(run.stdout).merchant).toMatchObject({ name: "Beside" })
      expect(run.stderr).toContain("embedded PostgreSQL already running")
      expect(run.stderr).not.toContain("embedded PostgreSQL stopped")
      // Still up, with the merchant the command created.
      expect(await query(server.url, "SELECT name FROM merchants")).toEqual([{ name: "Beside" }])
    } finally {
      await server.stop()
      rmSync(dataDirectory, { recursive: true, force: true })
    }
  })
})

describe("usage", () => {
  it("--help says what each command does and names its flags with their defaults, on stdout, exit 0", async () => {
    const [root, merchant, create, open] = await Promise.all([
      payments(["--help"], {}),
      payments(["merchant", "--help"], {}),
      payments(["merchant", "create", "--help"], {}),
      payments(["dispute", "open", "--help"], {})
    ])
    for (const run of [root, merchant, create, open]) {
      expect(run.code, run.stderr).toBe(0)
      expect(run.stdout).toContain("USAGE")
    }
    for (const command of ["serve", "migrate", "merchant", "settle", "dispute"]) {
      expect(root.stdout).toMatch(new RegExp(`^\\s+${command}\\s`, "m"))
    }
    expect(merchant.stdout).toMatch(/^\s+create\s+Create a merchant/m)
    expect(create.stdout).toContain("--name")
    expect(create.stdout).toContain("--webhook-url")
    expect(open.stdout).toMatch(/--reason .*fraudulent, product_not_received/)
    expect(open.stdout).toMatch(/--dispute-id .*\(default: dp_operator_<payment id>/)
  })

  it("a command that needs a subcommand lists them on stderr and exits 2", async () => {
    const run = await payments(["merchant"], {})
    expect(run.code).toBe(2)
    expect(run.stdout).toBe("")
    expect(run.stderr).toMatch(/^\s+create\s+Create a merchant/m)
  })

  it("a bad invocation exits 2 with one line naming the problem, before touching a database", async () => {
    const cases: ReadonlyArray<readonly [ReadonlyArray<string>, string]> = [
      [["frobnicate"], `Unknown subcommand "frobnicate"`],
      [["settle", "--bogus"], "Unrecognized flag: --bogus"],
      [["merchant", "create"], "Missing required flag: --name"],
      [["dispute", "open", "--reason", "fraudulent"], "Missing required argument: payment-id"],
      [["dispute", "open", "pay_x", "--reason", "fraudulent", "--amount", "abc"], "--amount"],
      [["dispute", "resolve", "pay_x", "--outcome", "maybe"], "--outcome"]
    ]
    // An unreachable database: a command that got past its arguments would fail otherwise.
    const runs = await Promise.all(
      cases.map(([args]) => payments(args, { DATABASE_URL: "postgres://nobody@127.0.0.1:1/none" }))
    )
    for (const [index, run] of runs.entries()) {
      const [args, message] = cases[index]!
      expect(run.code, JSON.stringify(args)).toBe(2)
      expect(run.stdout).toBe("")
      expect(run.stderr.trim().split("\n"), run.stderr).toHaveLength(1)
      expect(run.stderr).toContain(message)
      expect(run.stderr).toContain("--help")
    }
  })

  it("settle prints a table for a person and, with --json, the JSON object", async () => {
    const [table, json] = [await cli(url, ["settle"]), await cli(url, ["settle", "--json"])]
    expect(table.code, table.stderr).toBe(0)
    expect(table.stdout).toMatch(/^payments settled\s+\d+\n$/)
    expect(JSON.parse(json.stdout)).toEqual({ settled: expect.any(Number) })
  })
})
