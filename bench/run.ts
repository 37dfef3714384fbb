/**
 * Load harness: starts the real service (a child process on its own embedded PostgreSQL, or on
 * `--url`), drives one scenario with autocannon on 127.0.0.1, and reads per-request counters:
 * service and PostgreSQL CPU, SQL statements and commits (pg_stat_statements, pg_stat_database),
 * WAL bytes and full-page images (pg_current_wal_insert_lsn, pg_stat_wal), RSS. For `create` it
 * measures, in the same run and at the same concurrency, the limit beside it: pgbench running the
 * service's own create SQL, and a minimal node:http + pg server doing that SQL (bench/sql.ts,
 * bench/baseline.ts). Then it audits the ledger. Bounded in time.
 *
 *   npm run bench -- [--scenario create|read|mixed|refund|idempotent-retry|webhooks|analytics]
 *                    [--duration 10] [--connections 64] [--rate N] [--url postgres://...] [--no-baselines] [--cards N]
 *                    [--profile DIR] [--payments 1000000 (analytics)] [--preload N]
 *                    [--service-dir DIR] [--entry src/main.ts] [--label NAME] [--statements N] [--json]
 *
 * `--rate N` offers N requests a second in all (autocannon's overallRate) instead of sending the
 * next request as soon as a connection is free: latency at a fixed load ("p99 of create at 1,000
 * creates a second"); the table shows the achieved rate beside the offered one.
 *
 * `--service-dir` runs the service of another checkout (its own code and node_modules, e.g. a
 * worktree of another branch) and `--entry` another entry point of it (one that takes `serve` and
 * `merchant create --name`); bench/ab.ts alternates two such services, round after round.
 *
 * `analytics` bulk-loads `--payments` payments of the bench merchant over 90 days with one
 * INSERT … SELECT generate_series (no events or ledger: analytics reads payments only), then
 * loads the analytics endpoint with totals and hour/day/week series (docs/analytics.md).
 *
 * Results go to bench/results/<scenario>-<timestamp>.json; `npm run bench:report` renders them.
 */
import autocannon from "autocannon"
import { Command, Flag } from "effect/cli"
import { type ChildProcess, execFileSync, spawn, spawnSync } from "node:child_process"
import { existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { createServer, type Server } from "node:http"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import pg from "pg"
import * as Cli from "../src/platform/Cli.ts"
import { freePort, startEmbeddedPostgres } from "../src/platform/Database.ts"
import { analyticsSeriesSql, analyticsTotalsSql } from "../src/store/PgStore.ts"
import { cpuSeconds, postgresCpuSeconds, rssMb, sleep, startNodeFlags, waitFor } from "./host.ts"
import { preloadPayments } from "./preload.ts"
import { type BenchScenario, benchScenarios } from "./scenarioNames.ts"
import { pgbenchScript } from "./sql.ts"
import { statementsTable, statementStats } from "./statements.ts"

const benchCommand = Command.make("bench", {
  scenario: Cli.choice("scenario", benchScenarios, "what the load does", { default: "create" }),
  duration: Cli.integer("duration", "seconds each load phase lasts", { min: 1, max: 120, default: 10 }),
  connections: Cli.integer("connections", "connections autocannon keeps open (requests in flight at most)", {
    min: 1,
    max: 256,
    default: 64
  }),
  rate: Cli.integer(
    "rate",
    "offered rate: requests a second over all connections, whatever the answers' speed (autocannon's overallRate: each connection's share of a second goes out at the start of that second, so the load comes in bursts; the harness spreads its arrivals evenly. Default: as fast as the connections go)",
    { min: 1 }
  ).pipe(Flag.optional),
  url: Cli.text("url", "the PostgreSQL to use (default: an embedded one, started and removed)").pipe(Flag.optional),
  noBaselines: Cli.toggle("no-baselines", "create only: skip pgbench and the node:http + pg baseline"),
  cards: Cli.integer(
    "cards",
    "distinct card tokens the creates cycle through (0: all tok_visa, the fraud history's worst case)",
    { default: 0 }
  ),
  profile: Cli.text(
    "profile",
    "a directory where the service writes a V8 CPU profile when it stops (bench/profile.ts summarises it)"
  ).pipe(Flag.optional),
  nodeFlags: Cli.text("node-flags", "V8/Node flags for the service process (default: those of npm start)").pipe(
    Flag.optional
  ),
  serviceDir: Cli.text("service-dir", "the checkout whose service runs (its code and node_modules)", { default: "." }),
  entry: Cli.text("entry", "the service's entry point in --service-dir (takes serve and merchant create --name)", {
    default: "src/main.ts"
  }),
  label: Cli.text("label", "a name for this run in the results file and the report", { default: "", shown: "none" }),
  statements: Cli.integer(
    "statements",
    "list the N statements that took PostgreSQL longest, with their calls per request",
    { default: 0 }
  ),
  payments: Cli.integer("payments", "analytics only: payments bulk-loaded before the load", {
    min: 1,
    max: 5_000_000,
    default: 1_000_000
  }),
  preload: Cli.integer(
    "preload",
    "payments (with their events, ledger, keys and deliveries: bench/preload.ts) loaded before the service starts, to measure it as its tables grow",
    { min: 0, max: 20_000_000, default: 0 }
  ),
  json: Cli.toggle("json", "print the results (what bench/results/*.json holds) as JSON instead of the table")
}).pipe(Command.withDescription(
  "HTTP load against the real service on 127.0.0.1 (autocannon), with per-request counters (service and PostgreSQL CPU, statements, commits, RSS), " +
    "pgbench and node:http + pg baselines for create, and a ledger audit. Writes bench/results/<scenario>-<time>.json. " +
    "Exits 1 when the audit fails, 2 on bad arguments."
))

const flags = Cli.parseOrExit(benchCommand, process.argv.slice(2))
const scenario: BenchScenario = flags.scenario
const durationSeconds = flags.duration
const connections = flags.connections
/** `--rate N`: a fixed offered rate (requests a second over all connections); null: closed loop, as fast as answers come. */
const offeredRate = Cli.given(flags.rate) ?? null
const externalUrl = Cli.given(flags.url) ?? ""
const baselines = !flags.noBaselines && scenario === "create"
/**
 * Distinct card tokens the creates cycle through (0: every approved create uses `tok_visa`, the
 * fraud history's worst case: each create reads the newest 50 payments of one card).
 */
const cards = flags.cards
/** `--profile DIR`: the service writes a V8 CPU profile there when it stops (summarise with bench/profile.ts). */
const profileDirectory = Cli.given(flags.profile) ?? ""
/** `--node-flags "..."`: V8/Node flags for the service process; by default those of `npm start`. */
const nodeFlagsArgument = Cli.given(flags.nodeFlags) ?? ""
const serviceNodeFlags = nodeFlagsArgument === ""
  ? startNodeFlags()
  : nodeFlagsArgument.split(" ").filter((flag) => flag !== "")
/** The checkout whose service runs (its working directory: its code and its node_modules), and its entry point. */
const serviceDirectory = resolve(flags.serviceDir)
const serviceEntry = flags.entry
const label = flags.label
/** `--statements N`: the N statements that took PostgreSQL longest during the load, with their calls per request. */
const topStatements = flags.statements

const log = (line: string) => process.stderr.write(`${line}\n`)

// ---------------------------------------------------------------------------------------------
// Counters from PostgreSQL

interface DbCounters {
  readonly statements: number | null
  readonly commits: number
  /** The WAL's insert position in bytes (the whole cluster's: this run's service and the bench's monitor). */
  readonly walBytes: number
  /** Full-page images written to the WAL so far (pg_stat_wal; null where the server keeps none). */
  readonly walFullPages: number | null
}
const dbCounters = async (client: pg.Client): Promise<DbCounters> => {
  const commits = await client.query(`SELECT xact_commit::bigint AS n,
      (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint::text AS wal FROM pg_stat_database WHERE datname = current_database()`)
  let walFullPages: number | null = null
  try {
    // Flushed first, so the figure counts this backend's own records too; only other backends' may lag by a second.
    await client.query("SELECT pg_stat_force_next_flush()")
    walFullPages = Number((await client.query(`SELECT wal_fpi::bigint AS n FROM pg_stat_wal`)).rows[0].n)
  } catch { /* a server without these views */ }
  let statements: number | null = null
  try {
    const rows = await client.query(`SELECT coalesce(sum(calls), 0)::bigint AS n FROM pg_stat_statements
      WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())`)
    statements = Number(rows.rows[0].n)
  } catch { /* pg_stat_statements not loaded */ }
  return { statements, commits: Number(commits.rows[0].n), walBytes: Number(commits.rows[0].wal), walFullPages }
}

interface Sample {
  readonly at: number
  readonly serviceCpu: number
  readonly postgresCpu: number | null
  readonly db: DbCounters
}
const sample = async (client: pg.Client, servicePid: number, postmasterPid: number | null): Promise<Sample> => ({
  at: performance.now(),
  serviceCpu: cpuSeconds(servicePid),
  postgresCpu: postgresCpuSeconds(postmasterPid),
  db: await dbCounters(client)
})

// ---------------------------------------------------------------------------------------------
// Load

const transactionBody = (n: number) =>
  JSON.stringify({
    transaction: {
      amount_cents: 100 + (n % 50_000),
      currency: ["USD", "EUR", "GBP"][n % 3],
      card_token: n % 20 === 0 ? "tok_decline_do_not_honor" : cards > 0 ? `tok_bench_${n % cards}` : "tok_visa",
      card_last_four: "4242",
      card_brand: "visa"
    }
  })

interface LoadResult {
  readonly requests: number
  readonly rps: number
  readonly latency: { readonly p50: number; readonly p90: number; readonly p99: number; readonly max: number }
  readonly statusCodes: Record<string, number>
  readonly errors: number
  readonly timeouts: number
}

const load = async (
  label: string,
  url: string,
  requests: Array<autocannon.Request>,
  headers: Record<string, string>
) => {
  log(
    `${label}: ${connections} connections for ${durationSeconds}s${
      offeredRate === null ? "" : `, ${offeredRate} requests/s offered`
    }`
  )
  const result = await new Promise<autocannon.Result>((done, fail) => {
    const rate = offeredRate === null ? {} : { overallRate: offeredRate }
    const instance = autocannon(
      { url, connections, duration: durationSeconds, headers, requests, ...rate },
      (error, finished) => error ? fail(error) : done(finished)
    )
    autocannon.track(instance, {
      renderProgressBar: true,
      renderResultsTable: false,
      renderLatencyTable: false,
      outputStream: process.stderr
    })
  })
  const statusCodes: Record<string, number> = {}
  for (const [code, count] of Object.entries(result.statusCodeStats ?? {})) {
    statusCodes[code] = (count as { count: number }).count
  }
  return {
    requests: result.requests.total,
    rps: result.requests.total / durationSeconds,
    latency: { p50: result.latency.p50, p90: result.latency.p90, p99: result.latency.p99, max: result.latency.max },
    statusCodes,
    errors: result.errors,
    timeouts: result.timeouts
  } satisfies LoadResult
}

const perRequest = (before: Sample, after: Sample, requests: number) => ({
  service_cpu_ms: requests === 0 ? null : ((after.serviceCpu - before.serviceCpu) * 1000) / requests,
  postgres_cpu_ms: requests === 0 || before.postgresCpu === null || after.postgresCpu === null
    ? null
    : ((after.postgresCpu - before.postgresCpu) * 1000) / requests,
  statements: requests === 0 || before.db.statements === null || after.db.statements === null
    ? null
    : (after.db.statements - before.db.statements) / requests,
  commits: requests === 0 ? null : (after.db.commits - before.db.commits) / requests,
  wal_bytes: requests === 0 ? null : (after.db.walBytes - before.db.walBytes) / requests,
  wal_full_pages: requests === 0 || before.db.walFullPages === null || after.db.walFullPages === null
    ? null
    : (after.db.walFullPages - before.db.walFullPages) / requests
})

const runPgbench = (databaseUrl: string, script: string) => {
  const which = spawnSync("pgbench", ["--version"], { encoding: "utf8" })
  if (which.status !== 0) return { skipped: "pgbench is not installed (Debian: apt-get install postgresql-client)" }
  const directory = mkdtempSync(join(tmpdir(), "payments-pgbench-"))
  const file = join(directory, "create.sql")
  writeFileSync(file, script)
  log(`pgbench: the service's create SQL, ${connections} clients for ${durationSeconds}s`)
  const run = spawnSync("pgbench", [
    "-n",
    "-M",
    "prepared",
    "-c",
    String(connections),
    "-j",
    "2",
    "-T",
    String(durationSeconds),
    "-f",
    file,
    databaseUrl
  ], {
    encoding: "utf8",
    timeout: (durationSeconds + 60) * 1000
  })
  rmSync(directory, { recursive: true, force: true })
  const tps = /tps = ([\d.]+) \(without initial connection time\)/.exec(run.stdout ?? "")
  const latency = /latency average = ([\d.]+) ms/.exec(run.stdout ?? "")
  if (run.status !== 0 || tps === null) {
    return { skipped: `pgbench failed: ${(run.stderr || run.stdout || "").split("\n").slice(-3).join(" ")}` }
  }
  const failed = /number of failed transactions: (\d+)/.exec(run.stdout ?? "")
  return {
    tps: Number(tps[1]),
    latency_avg_ms: latency ? Number(latency[1]) : null,
    failed: failed ? Number(failed[1]) : 0
  }
}

// ---------------------------------------------------------------------------------------------

const table = (rows: Array<[string, string]>) => Cli.fields(rows, "  ")
/** A figure for the table: "n/a" when there is none (no requests, no baseline, a division by zero). */
const fixed = (
  n: number | null | undefined,
  digits = 2
) => (n === null || n === undefined || !Number.isFinite(n) ? "n/a" : n.toFixed(digits))

/**
 * `count` payments of one merchant in one statement, spread over the last 90 days, in five
 * currencies and every final status (none pending, so the ledger audit still holds).
 */
const bulkLoadPayments = async (client: pg.Client, merchantId: string, count: number) => {
  await client.query(
    `
    INSERT INTO payments (id, merchant_id, status, amount_cents, currency, captured_amount_cents, refunded_amount_cents,
      fee_cents, card_brand, card_last_four, card_token, capture_method, metadata, fraud_score, fraud_verdict,
      in_flight, version, created_at, updated_at)
    SELECT 'pay_bulk' || g, $1,
      (ARRAY['captured', 'captured', 'captured', 'settled', 'settled', 'refunded', 'failed', 'blocked'])[kind + 1],
      amount, (ARRAY['USD', 'USD', 'EUR', 'GBP', 'JPY'])[g % 5 + 1],
      CASE WHEN kind >= 6 THEN 0 ELSE amount END, CASE WHEN kind = 5 THEN amount ELSE 0 END,
      CASE WHEN kind >= 6 THEN 0 ELSE least(amount, amount * 29 / 1000 + 30) END,
      'visa', '4242', 'tok_bulk_' || (g % 50000), 'automatic', '{}'::jsonb,
      CASE WHEN kind = 6 THEN NULL WHEN kind = 7 THEN 0.9 ELSE 0.02 END,
      CASE WHEN kind = 6 THEN NULL WHEN kind = 7 THEN 'blocked' ELSE 'passed' END,
      false, 3, created, created
    FROM (SELECT g, g % 8 AS kind, (100 + (g::bigint * 7919) % 50000)::int AS amount,
        now() - ((g::bigint * 7919) % 7776000) * interval '1 second' AS created
      FROM generate_series(1, $2::int) g) s`,
    [merchantId, count]
  )
  await client.query("VACUUM ANALYZE payments")
}

interface Database {
  readonly url: string
  /** The embedded server, null when `--url` names one. */
  readonly embedded: { url: string; directory: string; stop: () => Promise<void> } | null
  readonly scratch: string | null
  readonly postmasterPid: number | null
}

/** The database the run measures: `--url`'s, or an embedded one in a scratch directory. */
const startDatabase = async (): Promise<Database> => {
  if (externalUrl !== "") return { url: externalUrl, embedded: null, scratch: null, postmasterPid: null }
  const scratch = mkdtempSync(join(tmpdir(), "payments-bench-pg-"))
  const embedded = await startEmbeddedPostgres({
    directory: scratch,
    persistent: false,
    flags: ["-c", "max_connections=300", "-c", "shared_preload_libraries=pg_stat_statements"]
  })
  const postmasterPid = Number(readFileSync(join(embedded.directory, "postmaster.pid"), "utf8").split("\n")[0])
  return { url: embedded.url, embedded, scratch, postmasterPid }
}

/**
 * The whole run is bounded: each load phase lasts `--duration` (the create scenario runs three:
 * the service, pgbench, node:http + pg), and set-up, warm-up and the audit take well under
 * five minutes. A run past that is stuck (once: the embedded PostgreSQL vanished under it), so
 * it stops by itself, says so, and fails.
 */
const startWatchdog = (children: ReadonlyArray<ChildProcess>, database: Database) => {
  const boundSeconds = durationSeconds * 4 + 300 + Math.ceil(flags.preload / 1_000)
  const watchdog = setTimeout(() => {
    console.error(
      `bench: still running after ${boundSeconds} s (bound: 4 × --duration + 300 s); stopping, nothing measured`
    )
    for (const child of children) child.kill("SIGKILL")
    void (database.embedded?.stop() ?? Promise.resolve()).finally(() => process.exit(1))
    setTimeout(() => process.exit(1), 10_000).unref()
  }, boundSeconds * 1000)
  watchdog.unref()
  return watchdog
}

/** The merchant the load runs as, made by the service's own CLI: its API key and id. */
const createMerchant = (env: NodeJS.ProcessEnv) => {
  const createdText = execFileSync(process.execPath, [
    "--import",
    "tsx",
    serviceEntry,
    "merchant",
    "create",
    "--name",
    "Bench"
  ], {
    env,
    cwd: serviceDirectory,
    encoding: "utf8"
  })
  const created = JSON.parse(createdText.split("\n").find((line) => line.startsWith("{\"merchant\"")) ?? createdText)
  return { key: created.api_key.key as string, merchantId: created.merchant.id as string }
}

/** The service under measure, its log to a file (its cost is measured, the terminal stays readable). */
const startService = (env: NodeJS.ProcessEnv) => {
  const profiling = profileDirectory === "" ? [] : ["--cpu-prof", `--cpu-prof-dir=${profileDirectory}`]
  mkdirSync("bench/results", { recursive: true })
  const serviceLog = openSync(join("bench/results", "service.log"), "w")
  return spawn(process.execPath, [
    ...serviceNodeFlags,
    ...profiling,
    "--import",
    "tsx",
    serviceEntry,
    "serve"
  ], {
    env,
    cwd: serviceDirectory,
    stdio: ["ignore", "ignore", serviceLog]
  })
}

/** What a scenario's set-up works with: the service, the merchant and the database. */
interface Bench {
  readonly base: string
  readonly headers: Record<string, string>
  readonly merchantId: string
  readonly monitor: pg.Client
  readonly post: (path: string, body: string, extra?: Record<string, string>) => Promise<{ status: number; body: any }>
  /** Numbers the requests of the load, shared by every request template. */
  readonly counter: { n: number }
  readonly createRequest: autocannon.Request
  /** Webhooks the receiver got (the webhooks scenario). */
  readonly received: { webhooks: number }
  readonly receivers: Array<Server>
}

/** The requests of the load for the scenario, after the set-up it needs (payments to refund, keys to replay, rows to read). */
const scenarioRequests = async (bench: Bench): Promise<Array<autocannon.Request>> => {
  switch (scenario) {
    case "create":
      return [bench.createRequest]
    case "read": {
      const seeded = await bench.post("/api/v1/transactions", transactionBody(1))
      return [{ method: "GET", path: `/api/v1/transactions/${seeded.body.transaction.id}` }]
    }
    case "health":
      // The HTTP stack alone (no authentication, no database): the ceiling of any route.
      return [{ method: "GET", path: "/healthz" }]
    case "mixed":
      return [bench.createRequest, { method: "GET", path: "/api/v1/transactions?per_page=20" }, {
        method: "GET",
        path: "/api/v1/merchants/me/balance"
      }]
    case "refund":
      return refundRequests(bench)
    case "idempotent-retry":
      return retryRequests(bench)
    case "analytics":
      return analyticsRequests(bench)
    case "webhooks":
      await receiveWebhooks(bench)
      return [bench.createRequest]
  }
}

/** Captured payments large enough for a million 1-cent refunds each, refunded round robin. */
const refundRequests = async ({ post, headers, counter }: Bench): Promise<Array<autocannon.Request>> => {
  const ids: Array<string> = []
  for (let batch = 0; batch < 16; batch++) {
    const made = await Promise.all(
      Array.from({ length: 32 }, () =>
        post(
          "/api/v1/transactions",
          JSON.stringify({
            transaction: {
              amount_cents: 99_000_000,
              currency: "USD",
              card_token: "tok_visa",
              card_last_four: "4242",
              card_brand: "visa"
            }
          })
        ))
    )
    ids.push(...made.map((m) => m.body.transaction.id as string))
  }
  return [{
    method: "POST",
    path: "/api/v1/transactions",
    setupRequest: (r: any) => {
      const n = ++counter.n
      return {
        ...r,
        path: `/api/v1/transactions/${ids[n % ids.length]}/refund`,
        headers: { ...headers, "x-idempotency-key": `refund-${n}` },
        body: JSON.stringify({ amount_cents: 1 })
      }
    }
  }]
}

/** 200 keys, each created once; the load replays them. */
const retryRequests = async ({ post, headers, counter }: Bench): Promise<Array<autocannon.Request>> => {
  for (let batch = 0; batch < 8; batch++) {
    await Promise.all(
      Array.from({ length: 25 }, (_, i) =>
        post("/api/v1/transactions", transactionBody(batch * 25 + i), {
          "x-idempotency-key": `retry-${batch * 25 + i}`
        }))
    )
  }
  return [{
    method: "POST",
    path: "/api/v1/transactions",
    setupRequest: (r: any) => {
      const n = ++counter.n % 200
      return { ...r, headers: { ...headers, "x-idempotency-key": `retry-${n}` }, body: transactionBody(n) }
    }
  }]
}

const day = (offset: number) => new Date(Date.now() - offset * 86_400_000).toISOString().slice(0, 10)

/**
 * `--payments` rows loaded in bulk, each analytics query timed alone, the plans of the store's
 * two queries logged; then the load cycles through the queries.
 */
const analyticsRequests = async ({ monitor, merchantId, base, headers, counter }: Bench) => {
  const payments = flags.payments
  const started = performance.now()
  await bulkLoadPayments(monitor, merchantId, payments)
  log(`loaded ${payments} payments in ${((performance.now() - started) / 1000).toFixed(1)} s`)
  const paths = [
    "/api/v1/merchants/me/analytics",
    `/api/v1/merchants/me/analytics?from=${day(0)}&to=${day(0)}`,
    `/api/v1/merchants/me/analytics?interval=hour&from=${day(0)}&to=${day(0)}`,
    `/api/v1/merchants/me/analytics?interval=day&from=${day(6)}&to=${day(0)}`,
    `/api/v1/merchants/me/analytics?interval=day&from=${day(30)}&to=${day(0)}`,
    "/api/v1/merchants/me/analytics?interval=week"
  ]
  const alone = await analyticsAlone(base, headers, paths)
  if (!flags.json) console.log(`one at a time, 15 runs each, ${payments} payments:\n${table(alone)}`)
  await explainAnalytics(monitor, merchantId)
  const requests: Array<autocannon.Request> = [{
    method: "GET",
    path: paths[0]!,
    setupRequest: (r: any) => ({ ...r, path: paths[++counter.n % paths.length] })
  }]
  return requests
}

/** Each query alone, one at a time: its latency without queueing behind the others. */
const analyticsAlone = async (base: string, headers: Record<string, string>, paths: ReadonlyArray<string>) => {
  const alone: Array<[string, string]> = []
  for (const path of paths) {
    const times: Array<number> = []
    for (let i = 0; i < 15; i++) {
      const started = performance.now()
      const reply = await fetch(`${base}${path}`, { headers })
      if (reply.status !== 200) throw new Error(`${path} answered ${reply.status}`)
      await reply.arrayBuffer()
      times.push(performance.now() - started)
    }
    times.sort((a, b) => a - b)
    alone.push([
      path.replace("/api/v1/merchants/me/analytics", "analytics"),
      `p50 ${times[7]!.toFixed(1)} ms, p90 ${times[13]!.toFixed(1)} ms, max ${times[14]!.toFixed(1)} ms`
    ])
  }
  return alone
}

/** The plans of the store's two queries (src/store/PgStore.ts), for docs/analytics.md. */
const explainAnalytics = async (monitor: pg.Client, merchantId: string) => {
  const explain = async (title: string, text: string, values: Array<unknown>) => {
    const plan = await monitor.query(`EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) ${text}`, values)
    log(`\n## ${title}\n${plan.rows.map((r) => r["QUERY PLAN"]).join("\n")}`)
  }
  await explain("totals per currency, all time", analyticsTotalsSql, [merchantId, null, null])
  await explain("day series, 30 days", analyticsSeriesSql, [
    merchantId,
    `${day(30)}T00:00:00.000Z`,
    `${day(0)}T23:59:59.999Z`,
    "day",
    5001
  ])
  await explain("hour series, a window with partial hours at both ends", analyticsSeriesSql, [
    merchantId,
    `${day(1)}T10:30:00.000Z`,
    `${day(0)}T09:15:00.000Z`,
    "hour",
    5001
  ])
}

/** A receiver that answers every webhook 200, set as the merchant's webhook URL. */
const receiveWebhooks = async ({ base, headers, received, receivers }: Bench) => {
  const receiver = createServer((request, response) => {
    request.resume()
    request.on("end", () => {
      received.webhooks++
      response.writeHead(200).end("ok")
    })
  })
  receivers.push(receiver)
  const receiverPort = await freePort()
  await new Promise<void>((done) => receiver.listen(receiverPort, "127.0.0.1", done))
  const patched = await fetch(`${base}/api/v1/merchants/me`, {
    method: "PATCH",
    headers,
    body: JSON.stringify({ webhook_url: `http://127.0.0.1:${receiverPort}/hooks` })
  })
  if (patched.status !== 200) throw new Error(`setting the webhook URL answered ${patched.status}`)
}

/** The load against the service, with its CPU, statements and RSS (sampled through the run) per request. */
const measureService = async (
  bench: Bench,
  service: ChildProcess,
  database: Database,
  requests: Array<autocannon.Request>
) => {
  const { monitor } = bench
  let peakRss = rssMb(service.pid!)
  const sampler = setInterval(() => (peakRss = Math.max(peakRss, rssMb(service.pid!))), 250)
  const statementsBefore = topStatements > 0 ? await statementStats(monitor) : new Map()
  const before = await sample(monitor, service.pid!, database.postmasterPid)
  const result = await load(`service ${scenario}`, bench.base, requests, bench.headers)
  const after = await sample(monitor, service.pid!, database.postmasterPid)
  const statementsAfter = topStatements > 0 ? await statementStats(monitor) : new Map()
  clearInterval(sampler)
  const counters = perRequest(before, after, result.requests)
  return { result, counters, peakRss, statementsBefore, statementsAfter }
}

/** Waits (a minute at most) for every webhook to be delivered; how many, and how late. */
const webhookFigures = async (monitor: pg.Client, received: number) => {
  const until = performance.now() + 60_000
  let open = Infinity
  while (performance.now() < until) {
    open = Number(
      (await monitor.query(
        `SELECT count(*) FILTER (WHERE status <> 'succeeded')::int AS open FROM webhook_deliveries`
      )).rows[0].open
    )
    const outbox = Number((await monitor.query(`SELECT count(*)::int AS n FROM webhook_outbox`)).rows[0].n)
    if (open === 0 && outbox === 0) break
    await sleep(500)
  }
  const lag = await monitor.query(`SELECT count(*)::int AS n,
      percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM completed_at - created_at) * 1000) AS p50,
      percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM completed_at - created_at) * 1000) AS p99
    FROM webhook_deliveries WHERE status = 'succeeded'`)
  const events = Number((await monitor.query(`SELECT count(*)::int AS n FROM payment_events`)).rows[0].n)
  return {
    events,
    delivered: lag.rows[0].n,
    received,
    still_open: open,
    lag_ms: { p50: lag.rows[0].p50, p99: lag.rows[0].p99 }
  }
}

/** The limit beside the service: its own create SQL under pgbench and behind a minimal server. */
const measureBaselines = async (
  bench: Bench,
  { service, database, env, children }: {
    readonly service: ChildProcess
    readonly database: Database
    readonly env: NodeJS.ProcessEnv
    readonly children: Array<ChildProcess>
  }
) => {
  const { monitor, merchantId } = bench
  const script = await pgbenchScript(monitor, merchantId)
  const pgBefore = await sample(monitor, service.pid!, database.postmasterPid)
  const run = runPgbench(database.url, script)
  const pgAfter = await sample(monitor, service.pid!, database.postmasterPid)
  const units = run.tps === undefined ? 0 : Math.round(run.tps * durationSeconds)
  const pgbench: Record<string, unknown> = { ...run, per_unit: perRequest(pgBefore, pgAfter, units) }

  const baselinePort = await freePort()
  const server = spawn(process.execPath, ["--import", "tsx", "bench/baseline.ts"], {
    env: { ...env, PORT: String(baselinePort), MERCHANT_ID: merchantId },
    stdio: ["ignore", "ignore", "inherit"]
  })
  children.push(server)
  await waitFor(`http://127.0.0.1:${baselinePort}/`, 30_000)
  const bBefore = await sample(monitor, server.pid!, database.postmasterPid)
  const bResult = await load(
    "node:http + pg baseline",
    `http://127.0.0.1:${baselinePort}`,
    [bench.createRequest],
    bench.headers
  )
  const bAfter = await sample(monitor, server.pid!, database.postmasterPid)
  const baseline: Record<string, unknown> = { ...bResult, per_request: perRequest(bBefore, bAfter, bResult.requests) }
  return { pgbench, baseline }
}

/** Ledger audit: every group balances; no payment left pending; one capture per payment; no orphans. */
const ledgerAudit = async (monitor: pg.Client) => {
  await sleep(1_000)
  const one = async (text: string) => Number((await monitor.query(text)).rows[0].n)
  return {
    unbalanced_groups: await one(
      `SELECT count(*)::int AS n FROM (SELECT group_id FROM ledger_entries GROUP BY group_id, currency
      HAVING sum(CASE direction WHEN 'debit' THEN amount_cents ELSE -amount_cents END) <> 0) g`
    ),
    pending_payments: await one(`SELECT count(*)::int AS n FROM payments WHERE status = 'pending'`),
    double_captures: await one(`SELECT count(*)::int AS n FROM (SELECT payment_id FROM payment_events
      WHERE type = 'payment.captured' GROUP BY payment_id HAVING count(*) > 1) d`),
    over_refunded: await one(
      `SELECT count(*)::int AS n FROM payments WHERE refunded_amount_cents > captured_amount_cents`
    ),
    payments: await one(`SELECT count(*)::int AS n FROM payments`)
  }
}

type Measured = Awaited<ReturnType<typeof measureService>>
type Audit = Awaited<ReturnType<typeof ledgerAudit>>

/** The run's report, as written to bench/results. */
const reportOf = async (
  { result, counters, peakRss }: Measured,
  extra: {
    readonly webhooks: Record<string, unknown> | undefined
    readonly pgbench: Record<string, unknown> | undefined
    readonly baseline: Record<string, unknown> | undefined
    readonly audit: Audit
  }
) => {
  const { webhooks, pgbench, baseline, audit } = extra
  return {
    scenario,
    label,
    service_dir: serviceDirectory,
    entry: serviceEntry,
    date: new Date().toISOString(),
    connections,
    duration_s: durationSeconds,
    offered_rate: offeredRate,
    machine: { cpus: (await import("node:os")).cpus().length, node: process.version },
    service: { ...result, per_request: counters, rss_peak_mb: Math.round(peakRss) },
    ...(webhooks ? { webhooks } : {}),
    ...(pgbench ? { pgbench } : {}),
    ...(baseline ? { baseline } : {}),
    ratios: baselines
      ? {
        vs_pgbench: pgbench && typeof pgbench.tps === "number" ? result.rps / pgbench.tps : null,
        vs_node_pg: baseline && typeof baseline.rps === "number" ? result.rps / baseline.rps : null
      }
      : undefined,
    audit
  }
}

type Report = Awaited<ReturnType<typeof reportOf>>

/** The report as a table for the terminal. */
const reportRows = (report: Report, { result, counters, peakRss }: Measured): Array<[string, string]> => {
  const { webhooks, pgbench, baseline, audit } = report
  const rows: Array<[string, string]> = [
    ["scenario", `${scenario}, ${connections} connections, ${durationSeconds}s${label === "" ? "" : `, ${label}`}`],
    [
      "requests/s",
      offeredRate === null ? fixed(result.rps, 1) : `${fixed(result.rps, 1)} achieved of ${offeredRate} offered`
    ],
    [
      "latency p50/p90/p99/max ms",
      [result.latency.p50, result.latency.p90, result.latency.p99, result.latency.max].map((ms) => fixed(ms, 0)).join(
        " / "
      )
    ],
    ["status codes", JSON.stringify(result.statusCodes)],
    ["errors / timeouts", `${result.errors} / ${result.timeouts}`],
    ["service CPU ms per request", fixed(counters.service_cpu_ms)],
    ["PostgreSQL CPU ms per request", fixed(counters.postgres_cpu_ms)],
    ["SQL statements per request", fixed(counters.statements)],
    ["commits per request", fixed(counters.commits)],
    ["WAL bytes per request", fixed(counters.wal_bytes, 0)],
    ["WAL full-page images per request", fixed(counters.wal_full_pages, 3)],
    ["service RSS peak MB", String(Math.round(peakRss))]
  ]
  if (webhooks) rows.push(["webhooks", JSON.stringify(webhooks)])
  if (pgbench) {
    rows.push([
      "pgbench, same SQL",
      "tps" in pgbench ? `${fixed(pgbench.tps as number, 1)} tps (${pgbench.failed} failed)` : String(pgbench.skipped)
    ])
  }
  if (baseline) {
    rows.push([
      "node:http + pg, same SQL",
      `${fixed(baseline.rps as number, 1)} req/s, p99 ${fixed((baseline.latency as any).p99, 0)} ms`
    ])
  }
  if (report.ratios) {
    rows.push(["service / pgbench", fixed(report.ratios.vs_pgbench)])
    rows.push(["service / node:http + pg", fixed(report.ratios.vs_node_pg)])
  }
  rows.push(["audit", JSON.stringify(audit)])
  return rows
}

/** Prints the report (as JSON with `--json`), writes it to bench/results, and fails the run on a broken ledger. */
const publish = (report: Report, measured: Measured) => {
  if (flags.json) console.log(JSON.stringify(report, null, 2))
  else console.log(table(reportRows(report, measured)))
  if (topStatements > 0 && !flags.json) {
    console.log(`\nstatements that took PostgreSQL longest during the load (execution time only):`)
    console.log(
      table(
        statementsTable(measured.statementsBefore, measured.statementsAfter, measured.result.requests, topStatements)
      )
    )
  }

  mkdirSync("bench/results", { recursive: true })
  const file = join(
    "bench/results",
    `${scenario}${label === "" ? "" : `-${label}`}-${report.date.replace(/[:.]/g, "-")}.json`
  )
  writeFileSync(file, JSON.stringify(report, null, 2) + "\n")
  log(`results: ${file}`)
  if (!flags.json) console.log(`results: ${file}`)
  const audit = report.audit
  const ok = audit.unbalanced_groups === 0 && audit.pending_payments === 0 && audit.double_captures === 0 &&
    audit.over_refunded === 0
  if (!ok) {
    console.error("LEDGER AUDIT FAILED")
    process.exitCode = 1
  }
}

const main = async () => {
  const database = await startDatabase()
  const port = await freePort()
  const env = {
    ...process.env,
    DATABASE_URL: database.url,
    PORT: String(port),
    HOST: "127.0.0.1",
    RATE_LIMIT_PER_SECOND: "1000000",
    WEBHOOK_ALLOW_PRIVATE_URLS: "true",
    RESPONSE_ENCRYPTION_KEY: "ab".repeat(32)
  }
  const children: Array<ChildProcess> = []
  const receivers: Array<Server> = []
  const watchdog = startWatchdog(children, database)
  const monitor = new pg.Client({ connectionString: database.url })
  try {
    const { key, merchantId } = createMerchant(env)
    await monitor.connect()
    try {
      await monitor.query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    } catch {
      log("pg_stat_statements is not available: statements per request will read n/a")
    }
    if (flags.preload > 0) {
      const started = performance.now()
      await preloadPayments(monitor, { merchantId, payments: flags.preload })
      log(
        `preloaded ${flags.preload} payments with their rows in ${((performance.now() - started) / 1000).toFixed(1)} s`
      )
    }
    const service = startService(env)
    children.push(service)
    const base = `http://127.0.0.1:${port}`
    await waitFor(`${base}/healthz`, 30_000)
    const bench = benchOf({ base, key, merchantId, monitor, receivers })
    const requests = await scenarioRequests(bench)
    const measured = await measureService(bench, service, database, requests)
    const webhooks = scenario === "webhooks" ? await webhookFigures(monitor, bench.received.webhooks) : undefined
    const { pgbench, baseline } = baselines
      ? await measureBaselines(bench, { service, database, env, children })
      : { pgbench: undefined, baseline: undefined }
    const audit = await ledgerAudit(monitor)
    publish(await reportOf(measured, { webhooks, pgbench, baseline, audit }), measured)
  } finally {
    clearTimeout(watchdog)
    for (const child of children) child.kill("SIGTERM")
    for (const receiver of receivers) receiver.close()
    await sleep(500)
    await monitor.end().catch(() => {})
    if (database.embedded !== null) await database.embedded.stop()
    if (database.scratch !== null && existsSync(database.scratch)) {
      rmSync(database.scratch, { recursive: true, force: true })
    }
  }
}

/** The scenarios' context: requests signed with the merchant's key, numbered from one counter. */
const benchOf = (
  { base, key, merchantId, monitor, receivers }: {
    readonly base: string
    readonly key: string
    readonly merchantId: string
    readonly monitor: pg.Client
    readonly receivers: Array<Server>
  }
): Bench => {
  const headers = { authorization: `Bearer ${key}`, "content-type": "application/json" }
  const counter = { n: 0 }
  return {
    base,
    headers,
    merchantId,
    monitor,
    post: (path, body, extra = {}) =>
      fetch(`${base}${path}`, { method: "POST", headers: { ...headers, ...extra }, body }).then(async (r) => ({
        status: r.status,
        body: await r.json() as any
      })),
    counter,
    createRequest: {
      method: "POST",
      path: "/api/v1/transactions",
      setupRequest: (r: any) => ({
        ...r,
        headers: { ...headers, "x-idempotency-key": `bench-${++counter.n}` },
        body: transactionBody(counter.n)
      })
    },
    received: { webhooks: 0 },
    receivers
  }
}

await main()
