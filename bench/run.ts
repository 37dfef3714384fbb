/**
 * Load harness: starts the real service (a child process on its own embedded PostgreSQL),
 * runs autocannon scenarios against it on 127.0.0.1, prints latency percentiles and
 * throughput, then audits the ledger. Bounded in time; stops by itself.
 *
 *   npx tsx bench/run.ts [--duration 10] [--connections 16] [--scenario create|read|mixed]
 */
import autocannon from "autocannon"
import { spawn, execFileSync, type ChildProcess } from "node:child_process"
import { mkdtempSync, rmSync, writeFileSync, mkdirSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import pg from "pg"
import { freePort, startEmbeddedPostgres } from "../src/platform/Database.ts"

const argument = (name: string, fallback: string) => {
  const index = process.argv.indexOf(`--${name}`)
  return index === -1 ? fallback : process.argv[index + 1] ?? fallback
}
const durationSeconds = Math.min(120, Number(argument("duration", "10")))
const connections = Math.min(256, Number(argument("connections", "16")))
const scenario = argument("scenario", "create")

const waitFor = async (url: string, deadlineMs: number) => {
  const until = performance.now() + deadlineMs
  while (performance.now() < until) {
    try {
      if ((await fetch(url)).ok) return
    } catch { /* not up yet */ }
    await new Promise((r) => setTimeout(r, 100))
  }
  throw new Error(`${url} did not come up`)
}

const body = (n: number) =>
  JSON.stringify({
    transaction: {
      amount_cents: 100 + (n % 50_000),
      currency: ["USD", "EUR", "GBP"][n % 3],
      card_token: n % 20 === 0 ? "tok_decline_do_not_honor" : "tok_visa",
      card_last_four: "4242",
      card_brand: "visa"
    }
  })

const main = async () => {
  const directory = mkdtempSync(join(tmpdir(), "payments-bench-pg-"))
  const database = await startEmbeddedPostgres({ directory, persistent: false, flags: ["-c", "max_connections=100"] })
  const databaseUrl = database.url
  const port = await freePort()
  const env = { ...process.env, DATABASE_URL: databaseUrl, PORT: String(port), HOST: "127.0.0.1", RATE_LIMIT_PER_SECOND: "1000000" }
  let service: ChildProcess | undefined
  try {
    const created = JSON.parse(execFileSync("npx", ["tsx", "src/main.ts", "merchant", "create", "--name", "Bench"], { env, encoding: "utf8" }))
    const key: string = created.api_key.key
    service = spawn("npx", ["tsx", "src/main.ts", "serve"], { env, stdio: ["ignore", "ignore", "inherit"], detached: true })
    await waitFor(`http://127.0.0.1:${port}/healthz`, 30_000)
    const base = `http://127.0.0.1:${port}`
    const headers = { authorization: `Bearer ${key}`, "content-type": "application/json" }
    let counter = 0
    const seed = await fetch(`${base}/api/v1/transactions`, { method: "POST", headers, body: body(1) })
    const seeded = (await seed.json()) as { transaction: { id: string } }

    const requests = scenario === "read"
      ? [{ method: "GET" as const, path: `/api/v1/transactions/${seeded.transaction.id}` }]
      : scenario === "mixed"
      ? [
        { method: "POST" as const, path: "/api/v1/transactions", setupRequest: (r: any) => ({ ...r, headers: { ...headers, "x-idempotency-key": `bench-${++counter}` }, body: body(counter) }) },
        { method: "GET" as const, path: `/api/v1/transactions?per_page=20` },
        { method: "GET" as const, path: `/api/v1/merchants/me/balance` }
      ]
      : [{ method: "POST" as const, path: "/api/v1/transactions", setupRequest: (r: any) => ({ ...r, headers: { ...headers, "x-idempotency-key": `bench-${++counter}` }, body: body(counter) }) }]

    console.error(`scenario=${scenario} duration=${durationSeconds}s connections=${connections}`)
    const result = await autocannon({ url: base, connections, duration: durationSeconds, headers, requests })
    const figures = {
      scenario,
      date: new Date().toISOString(),
      connections,
      duration_s: durationSeconds,
      requests: result.requests.total,
      throughput_rps: result.requests.average,
      latency_ms: { p50: result.latency.p50, p90: result.latency.p90, p99: result.latency.p99, max: result.latency.max },
      non_2xx: result.non2xx,
      errors: result.errors,
      timeouts: result.timeouts
    }

    // Ledger audit: every group balances; every payment finished its flow; one capture per payment.
    await new Promise((r) => setTimeout(r, 2_000))
    const client = new pg.Client({ connectionString: databaseUrl })
    await client.connect()
    const unbalanced = await client.query(`SELECT count(*)::int AS n FROM (SELECT group_id FROM ledger_entries GROUP BY group_id, currency
      HAVING sum(CASE direction WHEN 'debit' THEN amount_cents ELSE -amount_cents END) <> 0) g`)
    const pending = await client.query(`SELECT count(*)::int AS n FROM payments WHERE status = 'pending'`)
    const doubleCaptures = await client.query(`SELECT count(*)::int AS n FROM (SELECT payment_id FROM payment_events
      WHERE type = 'payment.captured' GROUP BY payment_id HAVING count(*) > 1) d`)
    const payments = await client.query(`SELECT status, count(*)::int AS n FROM payments GROUP BY status ORDER BY status`)
    await client.end()
    const audit = {
      unbalanced_groups: unbalanced.rows[0].n,
      pending_payments: pending.rows[0].n,
      double_captures: doubleCaptures.rows[0].n,
      payments_by_status: Object.fromEntries(payments.rows.map((r) => [r.status, r.n]))
    }
    const report = { ...figures, audit }
    console.log(JSON.stringify(report, null, 2))
    mkdirSync("bench/results", { recursive: true })
    writeFileSync(join("bench/results", `${scenario}-latest.json`), JSON.stringify(report, null, 2) + "\n")
    const ok = audit.unbalanced_groups === 0 && audit.pending_payments === 0 && audit.double_captures === 0
    if (!ok) {
      console.error("LEDGER AUDIT FAILED")
      process.exitCode = 1
    }
  } finally {
    if (service?.pid !== undefined) {
      try {
        process.kill(-service.pid, "SIGTERM")
      } catch { /* already gone */ }
    }
    await new Promise((r) => setTimeout(r, 500))
    await database.stop()
    rmSync(directory, { recursive: true, force: true })
  }
}

await main()
