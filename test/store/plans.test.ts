import { Effect } from "effect"
import pg from "pg"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { defaultPoolTimeouts, migrate } from "../../src/platform/Database.ts"
import { hotStatements } from "../../src/store/PgHotStatements.ts"
import { hotPathPlannerSettings } from "../../src/store/PgPrepared.ts"
import { freshDatabase } from "../support/database.ts"

/**
 * The hot path's statements plan as index lookups whatever the tables hold: each connection of
 * the `pg` pool plans a named statement once and keeps the plan while the tables grow
 * (`hotPathPlannerSettings` in src/store/PgPrepared.ts). Every statement's generic plan (the
 * one a prepared statement keeps) is read with EXPLAIN on an empty database and on one loaded
 * with tens of thousands of payments and their rows, analyzed; a plan that scans a table, or
 * joins by hashing or merging (which reads a side whole), fails the guard.
 */

interface PlanNode {
  readonly "Node Type": string
  readonly "Relation Name"?: string
  readonly "Index Name"?: string
  readonly "Index Cond"?: string
  readonly Plans?: ReadonlyArray<PlanNode>
}

/** What in a plan reads more than the rows it asks for. */
export const scansOf = (node: PlanNode): Array<string> => {
  const own: Array<string> = []
  const type = node["Node Type"]
  if (type === "Seq Scan") own.push(`Seq Scan on ${node["Relation Name"]}`)
  if (type === "Hash Join" || type === "Merge Join") own.push(type)
  if ((type === "Index Scan" || type === "Index Only Scan" || type === "Bitmap Index Scan") && node["Index Cond"] === undefined) {
    own.push(`${type} of all of ${node["Index Name"]}`)
  }
  return [...own, ...(node.Plans ?? []).flatMap(scansOf)]
}

const planOf = async (db: pg.Client, text: string, settings: Readonly<Record<string, string>>) => {
  await db.query("BEGIN")
  try {
    for (const [name, value] of Object.entries(settings)) await db.query(`SET LOCAL ${name} = ${value}`)
    const rows = (await db.query(`EXPLAIN (GENERIC_PLAN, FORMAT JSON) ${text}`)).rows
    return rows[0]["QUERY PLAN"][0].Plan as PlanNode
  } finally {
    await db.query("ROLLBACK")
  }
}

const scansByStatement = async (db: pg.Client, settings: Readonly<Record<string, string>>) => {
  const found: Record<string, Array<string>> = {}
  for (const [name, text] of Object.entries(hotStatements)) {
    const scans = scansOf(await planOf(db, text, settings))
    if (scans.length > 0) found[name] = scans
  }
  return found
}

/** Loads `count` payments with an event, a balanced ledger group, an idempotency key and a delivery each, then analyzes. */
const load = async (db: pg.Client, count: number) => {
  await db.query(`INSERT INTO merchants (id, name, webhook_url, webhook_secret, created_at, updated_at)
    SELECT CASE g WHEN 1 THEN 'mer_plans' ELSE 'mer_plans_' || g END, 'Plans', 'https://shop.example/hooks', 'whsec_plans', now(), now()
    FROM generate_series(1, 500) g`)
  await db.query(`INSERT INTO api_keys (id, merchant_id, name, key_hash, prefix, last_four, status, created_at)
    SELECT 'key_plans_' || g, 'mer_plans', 'k', 'hash_' || g, 'sk_live_abcd', 'abcd', 'active', now() FROM generate_series(1, 1000) g`)
  await db.query(`INSERT INTO payments (id, merchant_id, status, amount_cents, currency, captured_amount_cents, refunded_amount_cents,
      fee_cents, card_brand, card_last_four, card_token, capture_method, idempotency_key, idempotency_hold, metadata, in_flight, version,
      created_at, updated_at, captured_at, flow_owner)
    SELECT 'pay_plans_' || g, 'mer_plans', 'captured', 1000, 'USD', 1000, 0, 59, 'visa', '4242', 'tok_plans_' || (g % 500), 'automatic',
      'key_' || g, 'key_' || g, '{}'::jsonb, false, 4, now() - g * interval '1 second', now() - g * interval '1 second',
      now() - g * interval '1 second', 'ins_plans'
    FROM generate_series(1, $1::int) g`, [count])
  await db.query(`INSERT INTO payment_events (id, payment_id, merchant_id, type, sequence, data, created_at)
    SELECT 'evt_plans_' || g || '_' || s, 'pay_plans_' || g, 'mer_plans', 'payment.captured', s, '{}'::jsonb, now()
    FROM generate_series(1, $1::int) g, generate_series(1, 3) s`, [count])
  await db.query(`INSERT INTO ledger_entries (id, group_id, payment_id, merchant_id, account, direction, amount_cents, currency, created_at)
    SELECT 'le_plans_' || g || '_' || d, 'grp_plans_' || g, 'pay_plans_' || g, 'mer_plans',
      CASE d WHEN 1 THEN 'network_receivable' ELSE 'merchant_pending' END, CASE d WHEN 1 THEN 'debit' ELSE 'credit' END, 1000, 'USD', now()
    FROM generate_series(1, $1::int) g, generate_series(1, 2) d`, [count])
  await db.query(`INSERT INTO idempotency_keys (merchant_id, key, fingerprint, state, response_status, response_body, applied_to,
      locked_until, created_at, expires_at, owner)
    SELECT 'mer_plans', 'key_' || g, 'fp', 'completed', 201, '{}', 'pay_plans_' || g, now(), now(), now() + interval '1 day', 'ins_plans'
    FROM generate_series(1, $1::int) g`, [count])
  await db.query(`INSERT INTO webhook_deliveries (id, merchant_id, event_id, event_type, url, payload, status, attempts, next_attempt_at,
      created_at, completed_at, payment_id, event_sequence)
    SELECT 'whd_plans_' || g, 'mer_plans', 'evt_plans_' || g || '_1', 'payment.captured', 'https://shop.example/hooks', '{}',
      CASE WHEN g % 100 = 0 THEN 'retrying' ELSE 'succeeded' END, '[]'::jsonb,
      CASE WHEN g % 100 = 0 THEN now() ELSE NULL END, now(), CASE WHEN g % 100 = 0 THEN NULL ELSE now() END, 'pay_plans_' || g, 1
    FROM generate_series(1, $1::int) g`, [count])
  await db.query(`INSERT INTO webhook_outbox (event_id, merchant_id, created_at)
    SELECT 'evt_plans_' || g || '_2', 'mer_plans', now() FROM generate_series(1, $1::int / 10) g`, [count])
  await db.query(`INSERT INTO fraud_cases (id, payment_id, merchant_id, status, priority, risk_score, model_version, explanations, created_at, updated_at)
    SELECT 'fc_plans_' || g, 'pay_plans_' || g, 'mer_plans', 'open', 'medium', 0.6, 'v1', '[]'::jsonb, now(), now()
    FROM generate_series(1, $1::int / 10) g`, [count])
  await db.query(`INSERT INTO service_instances (id, alive_until) VALUES ('ins_plans', now())`)
  await db.query("ANALYZE")
}

let db: pg.Client
beforeAll(async () => {
  const url = await freshDatabase("plans")
  await Effect.runPromise(migrate(url, defaultPoolTimeouts))
  db = new pg.Client({ connectionString: url })
  await db.connect()
})
afterAll(async () => {
  await db?.end()
})

describe("the hot path's plans", () => {
  it("every statement the pool prepares is index lookups on an empty database, and the settings are what makes it so", async () => {
    expect(await scansByStatement(db, hotPathPlannerSettings)).toEqual({})
    // Planned as PostgreSQL would by default, on the empty tables a fresh deployment starts with,
    // the create's commit reads payments whole: what the settings are for.
    const unguarded = await scansByStatement(db, {})
    expect(unguarded["commit_changes"] ?? []).toContain("Seq Scan on payments")
  })

  it("and on a loaded, analyzed database (500 merchants, 20,000 payments with their events, ledger, keys, deliveries and cases)", async () => {
    await load(db, 20_000)
    expect(await scansByStatement(db, hotPathPlannerSettings)).toEqual({})
  })
})
