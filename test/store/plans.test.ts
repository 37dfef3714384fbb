import { Effect } from "effect"
import pg from "pg"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { preloadPayments } from "../../bench/preload.ts"
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
  if (
    (type === "Index Scan" || type === "Index Only Scan" || type === "Bitmap Index Scan") &&
    node["Index Cond"] === undefined
  ) {
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

/** 500 merchants, 20,000 payments of one with their rows (bench/preload.ts), analyzed. */
const load = async (db: pg.Client) => {
  await db.query(`INSERT INTO merchants (id, name, webhook_url, webhook_secret, created_at, updated_at)
    VALUES ('mer_plans', 'Plans', 'https://shop.example/hooks', 'whsec_plans', now(), now())`)
  await preloadPayments(db, { merchantId: "mer_plans", payments: 20_000, extraMerchants: 499, outbox: true })
  await db.query(`INSERT INTO service_instances (id, alive_until) VALUES ('ins_preload', now())`)
  await db.query("ANALYZE service_instances")
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
    await load(db)
    expect(await scansByStatement(db, hotPathPlannerSettings)).toEqual({})
  })
})
