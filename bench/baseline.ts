/**
 * The create baseline: a minimal `node:http` + `pg` server doing the service's own create SQL
 * (bench/sql.ts: the same two prepared statements, parameters and domain decisions), with no
 * framework, no authentication and no validation beyond JSON.parse. What the service's create
 * could reach if everything but its SQL cost nothing.
 *
 *   DATABASE_URL=... PORT=... MERCHANT_ID=... node --import tsx bench/baseline.ts
 */
import { randomBytes } from "node:crypto"
import { createServer } from "node:http"
import pg from "pg"
import { formatId, idRandomChars } from "../src/domain/Ids.ts"
import {
  insertCreatedSql,
  insertCreatedValues,
  readForCreateSql,
  readForCreateValues,
  toHistory
} from "../src/store/PgHotPath.ts"
import { hotPathPlannerOptions } from "../src/store/PgPrepared.ts"
import { createUnit } from "./sql.ts"

// The service's planner settings too: the same SQL, planned the same way.
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 8, options: hotPathPlannerOptions })
const merchantId = process.env.MERCHANT_ID!
const mintId = (kind: Parameters<typeof formatId>[0]) => formatId(kind, Date.now(), randomBytes(idRandomChars))

const server = createServer((request, response) => {
  if (request.method !== "POST") {
    response.writeHead(404).end()
    return
  }
  const chunks: Array<Buffer> = []
  request.on("data", (chunk: Buffer) => chunks.push(chunk))
  request.on("end", async () => {
    try {
      const t = JSON.parse(Buffer.concat(chunks).toString("utf8")).transaction
      const key = request.headers["x-idempotency-key"]
      const unit = createUnit(merchantId, mintId, {
        amountCents: t.amount_cents,
        currency: t.currency,
        cardToken: t.card_token
      }, typeof key === "string" ? key : null)
      const read = await pool.query({
        name: "read_for_create_v1",
        text: readForCreateSql,
        values: readForCreateValues([unit.read])
      })
      const write = unit.once(toHistory(read.rows[0]))
      await pool.query({ name: "insert_created_v1", text: insertCreatedSql, values: insertCreatedValues([write]) })
      response.writeHead(201, { "content-type": "application/json" })
      response.end(write.response?.body ?? "{}")
    } catch (error) {
      response.writeHead(500, { "content-type": "application/json" })
      response.end(JSON.stringify({ error: String(error) }))
    }
  })
})
server.listen(Number(process.env.PORT), "127.0.0.1", () => console.error(`baseline listening on ${process.env.PORT}`))
process.on("SIGTERM", () => {
  server.close()
  void pool.end().then(() => process.exit(0))
})
