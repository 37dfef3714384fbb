import { Effect } from "effect"
import pg from "pg"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { preloadPayments } from "../../bench/preload.ts"
import { defaultPoolTimeouts, migrate } from "../../src/platform/Database.ts"
import { migrationTexts } from "../../src/store/migrations.ts"
import { freshDatabase } from "../support/database.ts"

/**
 * A database that holds rows migrates to the current schema without losing one: the migrations up
 * to `before` are applied as a deployment of that time applied them, the database is filled with
 * payments and every row they bring (bench/preload.ts: events, ledger, keys, deliveries, cases,
 * outbox), and the rest of the migrations run over it. Every table then holds the same rows, column
 * for column, in every column the table had before, save those a migration drops because another
 * column holds their values (`droppedColumns`, each checked before the migration).
 */

/** The last migration of the schema the rows are written in. */
const before = 13

const tables = [
  "merchants",
  "api_keys",
  "payments",
  "payment_events",
  "ledger_entries",
  "fraud_cases",
  "idempotency_keys",
  "webhook_outbox",
  "webhook_deliveries",
  "webhook_attempts",
  "payment_rollups",
  "service_instances"
] as const

/**
 * Columns the migrations after `before` drop, each with the expression over the table's row
 * `t` that gives the value it held.
 */
const droppedColumns: ReadonlyArray<readonly [table: string, column: string, derived: string]> = [
  // 0019: an event names its payment; the payment names the merchant.
  ["payment_events", "merchant_id", "(SELECT p.merchant_id FROM payments p WHERE p.id = t.payment_id)"]
]

const applyUpTo = async (db: pg.Client, last: number) => {
  await db.query(`CREATE TABLE IF NOT EXISTS effect_sql_migrations (
    migration_id integer primary key, created_at timestamp with time zone not null default now(), name text not null)`)
  const upTo = Object.entries(migrationTexts)
    .map(([key, text]) => ({ id: Number(key.split("_")[0]), name: key.slice(key.indexOf("_") + 1), text }))
    .filter((m) => m.id <= last)
    .sort((a, b) => a.id - b.id)
  for (const m of upTo) {
    await db.query("BEGIN")
    await db.query(m.text)
    await db.query("INSERT INTO effect_sql_migrations (migration_id, name) VALUES ($1, $2)", [m.id, m.name])
    await db.query("COMMIT")
  }
}

const columnsOf = async (db: pg.Client, table: string) =>
  (await db.query(
    `SELECT column_name FROM information_schema.columns WHERE table_schema = 'public' AND table_name = $1
    ORDER BY ordinal_position`,
    [table]
  )).rows.map((r) => r.column_name as string)

/** Each table's rows in the given columns: how many, and a digest of them in a fixed order. */
const contents = async (db: pg.Client, columns: ReadonlyMap<string, ReadonlyArray<string>>) => {
  const found: Record<string, { rows: number; digest: string }> = {}
  for (const [table, names] of columns) {
    const list = names.map((c) => `t.${pg.escapeIdentifier(c)}`).join(", ")
    const r =
      (await db.query(`SELECT count(*)::int AS n, md5(coalesce(string_agg(x.r, E'\\n' ORDER BY x.r), '')) AS digest
      FROM (SELECT row(${list})::text AS r FROM ${table} t) x`)).rows[0]
    found[table] = { rows: r.n, digest: r.digest }
  }
  return found
}

let db: pg.Client
let url: string
beforeAll(async () => {
  url = await freshDatabase("migrations")
  db = new pg.Client({ connectionString: url })
  await db.connect()
})
afterAll(async () => {
  await db?.end()
})

describe("migrations over a database with rows", () => {
  it(`take a database of migration ${before} with payments and all their rows to the current schema, every row kept`, async () => {
    await applyUpTo(db, before)
    await db.query(`INSERT INTO merchants (id, name, webhook_url, webhook_secret, created_at, updated_at)
      VALUES ('mer_migrations', 'Migrations', 'https://shop.example/hooks', 'whsec_migrations', now(), now())`)
    await preloadPayments(db, {
      merchantId: "mer_migrations",
      payments: 3_000,
      extraMerchants: 3,
      batch: 1_000,
      outbox: true
    })
    await db.query(`INSERT INTO service_instances (id, alive_until) VALUES ('ins_preload', now())`)
    await db.query(
      `INSERT INTO webhook_attempts (delivery_id, attempt, merchant_id, at, response_status, duration_ms, error, succeeded)
      SELECT id, 1, merchant_id, created_at, 200, 12, NULL, true FROM webhook_deliveries`
    )
    const columns = new Map<string, ReadonlyArray<string>>()
    for (const table of tables) columns.set(table, await columnsOf(db, table))
    // A column a later migration drops holds nothing another does not: each is checked here first.
    for (const [table, column, derived] of droppedColumns) {
      const differing =
        (await db.query(`SELECT count(*)::int AS n FROM ${table} t WHERE ${derived} IS DISTINCT FROM t.${column}`))
          .rows[0].n
      expect(differing, `${table}.${column}`).toBe(0)
      columns.set(table, columns.get(table)!.filter((c) => c !== column))
    }
    const was = await contents(db, columns)
    expect(was["payments"]!.rows).toBe(3_000)
    expect(was["ledger_entries"]!.rows).toBe(6_000)
    expect(was["payment_rollups"]!.rows).toBeGreaterThan(0)

    await Effect.runPromise(migrate(url, defaultPoolTimeouts))

    const applied = (await db.query("SELECT max(migration_id)::int AS n FROM effect_sql_migrations")).rows[0].n
    expect(applied).toBe(Math.max(...Object.keys(migrationTexts).map((key) => Number(key.split("_")[0]))))
    expect(await contents(db, columns)).toEqual(was)
    // The outbox's rows name their events by payment and sequence now (migration 0016): each the event it named by id.
    const named = (await db.query(`SELECT count(*)::int AS n FROM webhook_outbox o
      JOIN payment_events e ON e.payment_id = o.payment_id AND e.sequence = o.sequence AND e.id = o.event_id`)).rows[0]
      .n
    expect(named).toBe(was["webhook_outbox"]!.rows)
    expect(named).toBeGreaterThan(0)
  })
})
