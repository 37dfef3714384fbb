/**
 * EXPLAIN (ANALYZE, BUFFERS) of the hot statements (the create's two, GET one transaction) on an
 * embedded PostgreSQL holding `--payments N` creates (default 20,000) made with the same SQL.
 * Each explained statement runs in a transaction that is rolled back.
 *
 *   npm run bench:explain -- [--payments 20000]
 */
import { Command } from "effect/cli"
import { execFileSync, spawnSync } from "node:child_process"
import { randomBytes } from "node:crypto"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import pg from "pg"
import { formatId, idRandomChars } from "../src/domain/Ids.ts"
import * as Cli from "../src/platform/Cli.ts"
import { startEmbeddedPostgres } from "../src/platform/Database.ts"
import {
  getPaymentSql,
  insertCreatedSql,
  insertCreatedValues,
  readForCreateSql,
  readForCreateValues,
  toHistory
} from "../src/store/PgHotPath.ts"
import { hotPathPlannerOptions } from "../src/store/PgPrepared.ts"
import { createUnit, pgbenchScript } from "./sql.ts"

const explainCommand = Command.make("bench:explain", {
  payments: Cli.integer("payments", "creates made before the statements are explained", {
    max: 1_000_000,
    default: 20_000
  })
}).pipe(Command.withDescription(
  "EXPLAIN (ANALYZE, BUFFERS) of the hot statements (the create's two, GET one transaction) on an embedded PostgreSQL holding --payments creates; " +
    "each explained statement runs in a transaction that is rolled back. Exits 2 on bad arguments."
))
const { payments } = Cli.parseOrExit(explainCommand, process.argv.slice(2))
const scratch = mkdtempSync(join(tmpdir(), "payments-explain-"))
const database = await startEmbeddedPostgres({ directory: scratch, persistent: false })
try {
  const env = { ...process.env, DATABASE_URL: database.url, RESPONSE_ENCRYPTION_KEY: "ab".repeat(32) }
  const created = JSON.parse(
    execFileSync(process.execPath, ["--import", "tsx", "src/main.ts", "merchant", "create", "--name", "Explain"], {
      env,
      encoding: "utf8"
    })
  )
  const merchantId: string = created.merchant.id
  // Planned as the service's hot-path connections plan (hotPathPlannerSettings).
  const client = new pg.Client({ connectionString: database.url, options: hotPathPlannerOptions })
  await client.connect()
  if (payments > 0) {
    const file = join(scratch, "create.sql")
    writeFileSync(file, await pgbenchScript(client, merchantId))
    const run = spawnSync("pgbench", [
      "-n",
      "-M",
      "prepared",
      "-c",
      "4",
      "-t",
      String(Math.ceil(payments / 4)),
      "-f",
      file,
      database.url
    ], { encoding: "utf8" })
    if (run.status !== 0) throw new Error(`pgbench could not load the payments: ${run.stderr}`)
  }
  await client.query("VACUUM ANALYZE")
  const mintId = (kind: Parameters<typeof formatId>[0]) => formatId(kind, Date.now(), randomBytes(idRandomChars))
  // Warm-up on this connection (trigger functions compiled, caches filled), as on a service connection.
  for (let i = 0; i < 5; i++) {
    const warm = createUnit(
      merchantId,
      mintId,
      { amountCents: 1234, currency: "USD", cardToken: "tok_visa" },
      `warm-${i}`
    )
    const read = await client.query({ text: readForCreateSql, values: readForCreateValues([warm.read]) })
    await client.query({ text: insertCreatedSql, values: insertCreatedValues([warm.once(toHistory(read.rows[0]))]) })
  }
  const unit = createUnit(
    merchantId,
    mintId,
    { amountCents: 1234, currency: "USD", cardToken: "tok_visa" },
    "explain-key"
  )
  const explain = async (title: string, text: string, values: Array<unknown>) => {
    await client.query("BEGIN")
    // A generic plan, as a named prepared statement gets after its fifth execution.
    await client.query("SET LOCAL plan_cache_mode = force_generic_plan")
    await client.query({
      name: `explain_${title.replace(/\W/g, "_").slice(0, 40)}`,
      text: `EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, SUMMARY ON) ${text}`,
      values
    })
      .then((result) => console.log(`\n## ${title}\n\n${result.rows.map((r) => r["QUERY PLAN"]).join("\n")}`))
    return client
  }
  const read = await explain(
    "create, round trip 1: the key's state and the fraud history (read only)",
    readForCreateSql,
    readForCreateValues([unit.read])
  )
  const rows = await read.query({ text: readForCreateSql, values: readForCreateValues([unit.read]) })
  await read.query("ROLLBACK")
  await (await explain(
    "create, round trip 2: the key claimed finished, the payment written once with its events, ledger and response",
    insertCreatedSql,
    insertCreatedValues([unit.once(toHistory(rows.rows[0]))])
  )).query("ROLLBACK")
  const any = await client.query("SELECT id FROM payments LIMIT 1")
  await (await explain("GET one transaction", getPaymentSql, [any.rows[0]?.id ?? "pay_none", merchantId])).query(
    "ROLLBACK"
  )
  await client.end()
} finally {
  await database.stop()
  rmSync(scratch, { recursive: true, force: true })
}
