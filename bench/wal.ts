/**
 * What a create writes, counted exactly: the create path's two statements (src/store/PgHotPath.ts)
 * run in batches of a fixed size on an embedded PostgreSQL, as the group commit runs them (one
 * statement and one commit per batch each), without the service, HTTP or timing in the way. After
 * a warm-up, a checkpoint, then the measured creates: WAL bytes per create and how many of them are
 * full-page images, WAL records by kind (pg_walinspect: heap inserts, HOT and other updates, B-tree
 * entries), shared buffers each statement touched (pg_stat_statements: hit in shared buffers, read
 * into them, dirtied, written out by the statement's own backend), the tables' rows and bytes, and
 * PostgreSQL's CPU (the only figure here a busy host moves).
 *
 *   npm run bench:wal -- [--creates 2000] [--warmup 2000] [--batch 10] [--preload N] [--shared-buffers 128MB]
 *     [--code-dir DIR] [--json]
 *
 * `--preload N` loads a history of N payments with their rows first (bench/preload.ts, analyzed),
 * so the same creates are counted on grown tables: the buffer counts say what a create costs more
 * there, and why (deeper indexes: more hits; pages no longer in shared buffers: reads and writes).
 *
 * `--code-dir` takes the statements and the migrations from another checkout (its
 * src/store/PgHotPath.ts and src/platform/Database.ts, with its node_modules), so two schemas are
 * compared on the same creates: the decisions, ids and bodies are this checkout's domain's.
 */
import { Effect } from "effect"
import { Command } from "effect/cli"
import { mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import { pathToFileURL } from "node:url"
import pg from "pg"
import type { Currency } from "../src/domain/Money.ts"
import * as Cli from "../src/platform/Cli.ts"
import { startEmbeddedPostgres } from "../src/platform/Database.ts"
import { makeIds, pooledRandomBytes } from "../src/platform/Ids.ts"
import { postgresCpuSeconds } from "./host.ts"
import { preloadPayments } from "./preload.ts"
import { createUnit } from "./sql.ts"

const walCommand = Command.make("bench:wal", {
  creates: Cli.integer("creates", "creates measured (after the warm-up and a checkpoint)", {
    min: 10,
    max: 1_000_000,
    default: 2_000
  }),
  warmup: Cli.integer("warmup", "creates made before the checkpoint, so the tables and their indexes are not empty", {
    min: 0,
    max: 1_000_000,
    default: 2_000
  }),
  batch: Cli.integer("batch", "creates a statement carries (the group commit's batch)", {
    min: 1,
    max: 32,
    default: 10
  }),
  preload: Cli.integer(
    "preload",
    "payments (with their events, ledger, keys and deliveries: bench/preload.ts) loaded and analyzed before the warm-up",
    { min: 0, max: 100_000_000, default: 0 }
  ),
  sharedBuffers: Cli.text("shared-buffers", "the server's shared_buffers (its default when empty)", { default: "" }),
  codeDir: Cli.text("code-dir", "the checkout whose create statements and migrations run", { default: "." }),
  json: Cli.json
}).pipe(Command.withDescription(
  "Exact counts of what a create writes to PostgreSQL: WAL bytes, full-page images, records by kind, index entries, HOT updates, table sizes. " +
    "Exits 2 on bad arguments."
))

const flags = Cli.parseOrExit(walCommand, process.argv.slice(2))

interface HotPath {
  /** The create written once (absent from checkouts before it): a read, then one insert of everything. */
  readonly readForCreateSql?: string
  readonly insertCreatedSql?: string
  readonly readForCreateValues?: (units: ReadonlyArray<any>) => Array<unknown>
  readonly insertCreatedValues?: (units: ReadonlyArray<any>) => Array<unknown>
  readonly openPaymentsSql: string
  readonly commitChangesSql: string
  readonly openPaymentsValues: (units: ReadonlyArray<any>) => Array<unknown>
  readonly commitChangesValues: (units: ReadonlyArray<any>) => Array<unknown>
  readonly toHistory: (row: any) => any
}

const codeDir = resolve(flags.codeDir)
const hot = await import(pathToFileURL(join(codeDir, "src/store/PgHotPath.ts")).href) as HotPath
const database = await import(pathToFileURL(join(codeDir, "src/platform/Database.ts")).href)

const currencies: ReadonlyArray<Currency> = ["USD", "EUR", "GBP"]
const ids = makeIds(pooledRandomBytes(), Date.now)
let made = 0

/** One batch of creates as the bench's load sends them: one in twenty declined, every other `tok_visa`, keyed. */
const createBatch = async (client: pg.Client, merchantId: string, size: number) => {
  const units = Array.from({ length: size }, () => {
    const n = ++made
    return createUnit(merchantId, ids.mint, {
      amountCents: 100 + (n % 50_000),
      currency: currencies[n % 3]!,
      cardToken: n % 20 === 0 ? "tok_decline_do_not_honor" : "tok_visa"
    }, `wal-${n}-${ids.mint("request")}`)
  })
  if (hot.readForCreateSql !== undefined && hot.insertCreatedSql !== undefined) {
    const read = await client.query({
      name: "read",
      text: hot.readForCreateSql,
      values: hot.readForCreateValues!(units.map((u) => u.read))
    })
    const writes = read.rows.map((row, i) => {
      if (row.key_taken === true) throw new Error("a create of the batch found its key taken")
      return units[i]!.once(hot.toHistory(row))
    })
    const written = await client.query({
      name: "write",
      text: hot.insertCreatedSql,
      values: hot.insertCreatedValues!(writes)
    })
    if (!written.rows.every((row) => row.committed === true)) throw new Error("a create of the batch was not written")
    return
  }
  const opened = await client.query({
    name: "open",
    text: hot.openPaymentsSql,
    values: hot.openPaymentsValues(units.map((u) => u.open))
  })
  const commits = opened.rows.map((row, i) => {
    if (row.opened !== true) throw new Error("a create of the batch was not opened")
    return units[i]!.commit(hot.toHistory(row))
  })
  const committed = await client.query({
    name: "commit",
    text: hot.commitChangesSql,
    values: hot.commitChangesValues(commits)
  })
  if (!committed.rows.every((row) => row.committed === true)) throw new Error("a create of the batch was not committed")
}

const lsn = async (client: pg.Client) =>
  String((await client.query("SELECT pg_current_wal_insert_lsn() AS l")).rows[0].l)

/** Milliseconds spent in each PL/pgSQL function (the triggers' own time), by name. */
const functionTimes = async (client: pg.Client) => {
  await client.query("SELECT pg_stat_force_next_flush()")
  await client.query("SELECT pg_stat_clear_snapshot()")
  const rows =
    (await client.query(`SELECT funcname, calls::bigint AS calls, self_time FROM pg_stat_user_functions`)).rows
  return new Map(rows.map((r) => [r.funcname as string, { calls: Number(r.calls), ms: Number(r.self_time) }]))
}

const tableStats = async (client: pg.Client) => {
  await client.query("SELECT pg_stat_force_next_flush()")
  await client.query("SELECT pg_stat_clear_snapshot()")
  const rows = (await client.query(
    `SELECT relname, n_tup_ins::bigint AS ins, n_tup_upd::bigint AS upd, n_tup_hot_upd::bigint AS hot,
      pg_table_size(relid)::bigint AS heap_bytes, pg_indexes_size(relid)::bigint AS index_bytes,
      (pg_relation_size(relid) / current_setting('block_size')::int)::bigint AS pages
    FROM pg_stat_user_tables ORDER BY relname`
  )).rows
  return new Map(
    rows.map((
      r
    ) => [r.relname as string, {
      ins: Number(r.ins),
      upd: Number(r.upd),
      hot: Number(r.hot),
      heap: Number(r.heap_bytes),
      index: Number(r.index_bytes),
      pages: Number(r.pages)
    }])
  )
}

/**
 * The average stored size of each column of `table` (pg_column_size: after compression, before
 * TOAST), and of its rows, over the pages from `fromPage` on: the rows the measured creates
 * appended (a TID range scan, so a preloaded table is not read whole).
 */
const columnSizes = async (client: pg.Client, table: string, fromPage: number) => {
  const columns = (await client.query(
    `SELECT attname FROM pg_attribute WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum`,
    [table]
  )).rows.map((r) => String(r.attname))
  const row = (await client.query(
    `SELECT ${columns.map((c, i) => `avg(pg_column_size(t.${c}))::float8 AS c${i}`).join(", ")},
      avg(pg_column_size(t.*))::float8 AS whole FROM ${table} t WHERE t.ctid >= $1::tid`,
    [`(${fromPage},0)`]
  )).rows[0]
  return {
    table,
    row_bytes: Number(row.whole),
    columns: columns.map((name, i) => ({ column: name, bytes: Number(row[`c${i}`]) }))
  }
}

/** Session settings as the service's pool has them, and a merchant to create for. */
const prepare = async (client: pg.Client) => {
  await client.query("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
  await client.query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
  // The pool's settings for these statements (src/store/PgPrepared.ts), where the checkout has them.
  const prepared = await import(pathToFileURL(join(codeDir, "src/store/PgPrepared.ts")).href).catch(() => ({}))
  for (const [name, value] of Object.entries((prepared as any).hotPathPlannerSettings ?? {})) {
    await client.query(`SET ${name} = ${value}`)
  }
  // The time spent in PL/pgSQL functions (the triggers), read from pg_stat_user_functions.
  await client.query("SET track_functions = 'pl'")
  const merchantId = ids.mint("merchant")
  await client.query(
    `INSERT INTO merchants (id, name, webhook_url, webhook_secret, created_at, updated_at)
    VALUES ($1, 'WAL', NULL, 'whsec_wal', now(), now())`,
    [merchantId]
  )
  if (flags.preload > 0) {
    const loading = performance.now()
    await preloadPayments(client, { merchantId, payments: flags.preload })
    console.error(
      `bench:wal: preloaded ${flags.preload} payments with their rows in ${
        ((performance.now() - loading) / 1000).toFixed(1)
      } s`
    )
  }
  return merchantId
}

/** The warm-up, a checkpoint, then the measured creates: the counters on both sides of them. */
const measureCreates = async (client: pg.Client, merchantId: string, postmasterPid: number) => {
  for (let done = 0; done < flags.warmup; done += flags.batch) {
    await createBatch(client, merchantId, Math.min(flags.batch, flags.warmup - done))
  }
  await client.query("VACUUM ANALYZE")
  await client.query("CHECKPOINT")
  const tablesBefore = await tableStats(client)
  await client.query("SELECT pg_stat_statements_reset()")
  const functionsBefore = await functionTimes(client)
  const start = await lsn(client)
  const cpuBefore = postgresCpuSeconds(postmasterPid)
  const startedAt = performance.now()
  for (let done = 0; done < flags.creates; done += flags.batch) {
    await createBatch(client, merchantId, Math.min(flags.batch, flags.creates - done))
  }
  const statementsMs = performance.now() - startedAt
  const cpuAfter = postgresCpuSeconds(postmasterPid)
  const end = await lsn(client)
  const tablesAfter = await tableStats(client)
  const functionsAfter = await functionTimes(client)
  // Shared buffers each of the two statements touched (the commit is the one that updates payments).
  const buffers = (await client.query(
    `SELECT CASE WHEN query LIKE '%UPDATE payments p SET%' OR query LIKE '%INSERT INTO ledger_entries%' THEN 'write'
        ELSE 'read' END AS statement,
      sum(calls)::bigint AS calls, sum(shared_blks_hit)::bigint AS hit, sum(shared_blks_read)::bigint AS read,
      sum(shared_blks_dirtied)::bigint AS dirtied, sum(shared_blks_written)::bigint AS written,
      sum(total_exec_time)::float8 AS exec_ms
    FROM pg_stat_statements WHERE query LIKE '%idempotency_keys%' GROUP BY 1 ORDER BY 1 DESC`
  )).rows.map((r) => ({
    statement: String(r.statement),
    calls: Number(r.calls),
    hit: Number(r.hit),
    read: Number(r.read),
    dirtied: Number(r.dirtied),
    written: Number(r.written),
    execMs: Number(r.exec_ms)
  }))
  const triggers = [...functionsAfter].map(([name, after]) => ({
    function: name,
    calls: after.calls - (functionsBefore.get(name)?.calls ?? 0),
    ms: after.ms - (functionsBefore.get(name)?.ms ?? 0)
  })).filter((f) => f.calls > 0)
  const cpuMs = cpuBefore === null || cpuAfter === null ? null : (cpuAfter - cpuBefore) * 1000
  return { start, end, tablesBefore, tablesAfter, triggers, buffers, statementsMs, cpuMs }
}

/** The WAL written from `start` to `end`: its bytes, its records by kind, its full-page images by relation. */
const walBetween = async (client: pg.Client, start: string, end: string) => {
  const walBytes = Number(
    (await client.query("SELECT ($2::pg_lsn - $1::pg_lsn)::bigint AS b", [start, end])).rows[0].b
  )
  const byKind = (await client.query(
    `SELECT "resource_manager/record_type" AS kind, count::bigint AS count,
      record_size::bigint AS record_bytes, fpi_size::bigint AS fpi_bytes
    FROM pg_get_wal_stats($1::pg_lsn, $2::pg_lsn, true) WHERE count > 0 ORDER BY combined_size DESC`,
    [start, end]
  )).rows
    .map((r) => ({
      kind: String(r.kind),
      count: Number(r.count),
      recordBytes: Number(r.record_bytes),
      fpiBytes: Number(r.fpi_bytes)
    }))
  // WAL by relation (heap or index): each record's bytes shared among the blocks it names, and the
  // full-page images (which pages a checkpoint makes the creates copy whole).
  const byRelation = (await client.query(
    `SELECT coalesce(c.relname, b.relfilenode::text) AS relation, count(DISTINCT b.start_lsn)::bigint AS records,
      sum(b.record_length::float8 / b.blocks)::bigint AS record_bytes,
      count(*) FILTER (WHERE b.block_fpi_length > 0)::bigint AS images, sum(b.block_fpi_length)::bigint AS fpi_bytes
    FROM (SELECT *, count(*) OVER (PARTITION BY start_lsn) AS blocks FROM pg_get_wal_block_info($1::pg_lsn, $2::pg_lsn)) b
    LEFT JOIN pg_class c ON c.relfilenode = b.relfilenode
    GROUP BY 1 ORDER BY 3 DESC`,
    [start, end]
  )).rows
    .map((r) => ({
      relation: String(r.relation),
      records: Number(r.records),
      recordBytes: Number(r.record_bytes),
      pages: Number(r.images),
      bytes: Number(r.fpi_bytes)
    }))
  const imagesByRelation = byRelation.filter((r) => r.pages > 0).sort((a, b) => b.bytes - a.bytes)
  return { walBytes, byKind, byRelation, imagesByRelation }
}

/** Everything per create, as `--json` prints it. */
const reportOf = async (
  client: pg.Client,
  measured: Awaited<ReturnType<typeof measureCreates>>,
  { byKind, byRelation, imagesByRelation, walBytes }: Awaited<ReturnType<typeof walBetween>>
) => {
  const { tablesBefore, tablesAfter, triggers, buffers, statementsMs, cpuMs } = measured
  const n = flags.creates
  const fullPageImages = imagesByRelation.reduce((total, r) => total + r.pages, 0)
  const sum = (pick: (k: typeof byKind[number]) => number, match: (kind: string) => boolean = () => true) =>
    byKind.filter((k) => match(k.kind)).reduce((total, k) => total + pick(k), 0)
  const tables = [...tablesAfter].map(([name, after]) => {
    const before = tablesBefore.get(name)
    return {
      table: name,
      inserts: (after.ins - (before?.ins ?? 0)) / n,
      updates: (after.upd - (before?.upd ?? 0)) / n,
      hot_updates: (after.hot - (before?.hot ?? 0)) / n,
      heap_bytes: after.heap,
      index_bytes: after.index
    }
  }).filter((t) => t.inserts > 0 || t.updates > 0)
  const rowSizes = []
  for (const t of tables) {
    if (t.inserts > 0) rowSizes.push(await columnSizes(client, t.table, tablesBefore.get(t.table)?.pages ?? 0))
  }
  return {
    date: new Date().toISOString(),
    code_dir: codeDir,
    creates: n,
    warmup: flags.warmup,
    batch: flags.batch,
    preload: flags.preload,
    shared_buffers: String((await client.query("SHOW shared_buffers")).rows[0].shared_buffers),
    per_create: {
      wal_bytes: walBytes / n,
      fpi_bytes: sum((k) => k.fpiBytes) / n,
      full_page_images: fullPageImages / n,
      records: sum((k) => k.count) / n,
      // Leaf entries a B-tree gained: an insert into a leaf, into a posting list, or the one a split places.
      index_entries: sum((k) => k.count, (kind) => /^Btree\/(INSERT_LEAF|INSERT_POST|SPLIT_L|SPLIT_R)$/.test(kind)) /
        n,
      heap_inserts: sum((k) => k.count, (kind) => /^Heap2?\/(INSERT|MULTI_INSERT)/.test(kind)) / n,
      updates: sum((k) => k.count, (kind) => /^Heap\/UPDATE/.test(kind)) / n,
      hot_updates: sum((k) => k.count, (kind) => /^Heap\/HOT_UPDATE/.test(kind)) / n,
      statements: 2 / flags.batch,
      commits: sum((k) => k.count, (kind) => kind === "Transaction/COMMIT") / n,
      postgres_cpu_ms: cpuMs === null ? null : cpuMs / n,
      // The statements' round trips as the client waited for them (the Node side of a batch aside).
      statement_ms: statementsMs / n,
      trigger_ms: triggers.reduce((total, f) => total + f.ms, 0) / n,
      buffers_hit: buffers.reduce((total, b) => total + b.hit, 0) / n,
      buffers_read: buffers.reduce((total, b) => total + b.read, 0) / n,
      buffers_dirtied: buffers.reduce((total, b) => total + b.dirtied, 0) / n,
      buffers_written: buffers.reduce((total, b) => total + b.written, 0) / n
    },
    buffers_by_statement: buffers.map((b) => ({
      statement: b.statement,
      calls: b.calls,
      hit: b.hit / n,
      read: b.read / n,
      dirtied: b.dirtied / n,
      written: b.written / n,
      exec_ms: b.execMs / n
    })),
    triggers: triggers.map((f) => ({ function: f.function, calls_per_create: f.calls / n, ms_per_create: f.ms / n })),
    full_page_images_by_relation: imagesByRelation.map((r) => ({
      relation: r.relation,
      per_create: r.pages / n,
      bytes: r.bytes / n
    })),
    wal_by_relation: byRelation.map((r) => ({
      relation: r.relation,
      records: r.records / n,
      record_bytes: r.recordBytes / n
    })),
    wal_by_kind: byKind.map((k) => ({
      kind: k.kind,
      per_create: k.count / n,
      record_bytes: k.recordBytes / n,
      fpi_bytes: k.fpiBytes / n
    })),
    tables,
    row_sizes: rowSizes
  }
}

/** A titled table of the report, after a blank line. */
const section = (title: string, headers: ReadonlyArray<string>, rows: ReadonlyArray<ReadonlyArray<string>>) => {
  console.log(`\n${title}`)
  console.log(Cli.table(headers, rows, "  "))
}

/** The report as tables for the terminal. */
const printReport = (report: Awaited<ReturnType<typeof reportOf>>) => {
  const n = report.creates
  const f = (value: number | null, digits = 0) => Cli.formatNumber(value, digits)
  const p = report.per_create
  console.log(Cli.fields([
    [
      "creates",
      `${f(n)} measured after ${flags.preload > 0 ? `${f(flags.preload)} preloaded payments, ` : ""}${
        f(flags.warmup)
      } and a checkpoint, ${flags.batch} a statement (${codeDir})`
    ],
    ["shared_buffers", report.shared_buffers],
    ["WAL bytes per create", f(p.wal_bytes)],
    ["of which full-page images", `${f(p.fpi_bytes)} bytes (${f(p.full_page_images, 2)} pages)`],
    ["WAL records per create", f(p.records, 1)],
    ["B-tree entries per create", f(p.index_entries, 1)],
    [
      "heap inserts / updates / HOT updates per create",
      `${f(p.heap_inserts, 2)} / ${f(p.updates, 2)} / ${f(p.hot_updates, 2)}`
    ],
    ["statements / commits per create", `${f(p.statements, 2)} / ${f(p.commits, 2)}`],
    ["PostgreSQL CPU ms per create", f(p.postgres_cpu_ms, 3)],
    ["statements' wall time ms per create", f(p.statement_ms, 3)],
    [
      "of which in PL/pgSQL triggers",
      `${f(p.trigger_ms, 3)} (${report.triggers.map((t) => `${t.function} ${f(t.ms_per_create, 3)}`).join(", ")})`
    ]
  ], "  "))
  section(
    "WAL by record kind, per create:",
    ["kind", "records", "record bytes", "full-page bytes"],
    report.wal_by_kind.slice(0, 16).map((k) => [k.kind, f(k.per_create, 2), f(k.record_bytes), f(k.fpi_bytes)])
  )
  section("WAL by relation, per create (a record's bytes shared among the blocks it names):", [
    "relation",
    "records",
    "record bytes"
  ], report.wal_by_relation.slice(0, 20).map((r) => [r.relation, f(r.records, 2), f(r.record_bytes)]))
  section(
    "full-page images by relation, per create:",
    ["relation", "pages", "bytes"],
    report.full_page_images_by_relation.slice(0, 16).map((r) => [r.relation, f(r.per_create, 3), f(r.bytes)])
  )
  section(
    "tables written, per create, and their size after the run:",
    ["table", "inserts", "updates", "HOT", "heap bytes", "index bytes"],
    report.tables.map((
      t
    ) => [t.table, f(t.inserts, 2), f(t.updates, 2), f(t.hot_updates, 2), f(t.heap_bytes), f(t.index_bytes)])
  )
  console.log(
    "\nbytes a row by column, on average over the measured creates' rows (pg_column_size; a row's header and alignment in its total):"
  )
  for (const t of report.row_sizes) {
    console.log(
      `  ${t.table} ${f(t.row_bytes)}: ${
        t.columns.filter((c) => c.bytes > 0).map((c) => `${c.column} ${f(c.bytes)}`).join(", ")
      }`
    )
  }
  section("shared buffers and execution time per create (pg_stat_statements):", [
    "statement",
    "hit",
    "read",
    "dirtied",
    "written",
    "exec ms"
  ], [
    ...report.buffers_by_statement.map((
      b
    ) => [b.statement, f(b.hit, 1), f(b.read, 1), f(b.dirtied, 1), f(b.written, 1), f(b.exec_ms, 3)]),
    [
      "both",
      f(p.buffers_hit, 1),
      f(p.buffers_read, 1),
      f(p.buffers_dirtied, 1),
      f(p.buffers_written, 1),
      f(report.buffers_by_statement.reduce((total, b) => total + b.exec_ms, 0), 3)
    ]
  ])
}

const main = async () => {
  const scratch = mkdtempSync(join(tmpdir(), "payments-wal-pg-"))
  const server = await startEmbeddedPostgres({
    directory: scratch,
    persistent: false,
    flags: [
      "-c",
      "shared_preload_libraries=pg_stat_statements",
      ...(flags.sharedBuffers === "" ? [] : ["-c", `shared_buffers=${flags.sharedBuffers}`])
    ]
  })
  const postmasterPid = Number(readFileSync(join(server.directory, "postmaster.pid"), "utf8").split("\n")[0])
  const client = new pg.Client({ connectionString: server.url })
  try {
    await Effect.runPromise(database.migrate(server.url, database.defaultPoolTimeouts))
    await client.connect()
    const merchantId = await prepare(client)
    const measured = await measureCreates(client, merchantId, postmasterPid)
    const report = await reportOf(client, measured, await walBetween(client, measured.start, measured.end))
    if (flags.json) console.log(JSON.stringify(report, null, 2))
    else printReport(report)
  } finally {
    await client.end().catch(() => {})
    await server.stop()
    rmSync(scratch, { recursive: true, force: true })
  }
}

await main()
