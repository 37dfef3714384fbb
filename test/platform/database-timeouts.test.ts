import Pg from "pg"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { defaults } from "../../src/platform/Config.ts"
import { poolOptions } from "../../src/platform/Database.ts"
import { freshDatabase } from "../support/database.ts"

// The pool's bounded waits (src/platform/Database.ts). A statement given up client-side leaves
// pg's connection busy with it; lent again, the next borrower's statement would wait behind it
// (here: the rest of a 5 s sleep). The pool must close that connection instead.

let url: string
let pool: Pg.Pool
beforeAll(async () => {
  url = await freshDatabase("pooltimeouts")
  pool = new Pg.Pool(poolOptions(url, 1, { statementTimeoutMs: 10_000, connectTimeoutMs: 2_000 }))
  pool.on("error", () => {})
})
afterAll(async () => {
  await pool?.end()
})

const query = (client: Pg.PoolClient, config: Pg.QueryConfig & { query_timeout?: number }) =>
  new Promise<Pg.QueryResult>((done, fail) =>
    client.query(config, (error: Error | undefined, result: Pg.QueryResult) => (error ? fail(error) : done(result)))
  )

describe("the service's database pool", () => {
  it("has the documented defaults", () => {
    expect(defaults.databaseStatementTimeoutMs).toBe(3_000)
    expect(defaults.databaseConnectTimeoutMs).toBe(2_000)
    const options = poolOptions(url, 8, { statementTimeoutMs: 3_000, connectTimeoutMs: 2_000 })
    expect(options).toMatchObject({
      statement_timeout: 3_000,
      query_timeout: 3_500,
      connectionTimeoutMillis: 2_000,
      keepAlive: true
    })
  })

  it("closes a connection whose statement's answer did not come in time, instead of lending it again", async () => {
    const client = await pool.connect()
    const pid = (await query(client, { text: "SELECT pg_backend_pid() AS pid" })).rows[0].pid
    await expect(query(client, { text: "SELECT pg_sleep(5)", query_timeout: 200 } as Pg.QueryConfig)).rejects.toThrow(
      "Query read timeout"
    )
    // Released without an error, as @effect/sql-pg releases a connection after a failed statement.
    client.release()
    const started = performance.now()
    const next = await pool.query("SELECT pg_backend_pid() AS pid")
    expect(performance.now() - started).toBeLessThan(2_000)
    expect(next.rows[0].pid).not.toBe(pid)
  })

  it("lets PostgreSQL cancel a statement that runs too long, before the service's own limit: 57014 (a 503)", async () => {
    const short = new Pg.Pool(poolOptions(url, 1, { statementTimeoutMs: 300, connectTimeoutMs: 2_000 }))
    try {
      await expect(short.query("SELECT pg_sleep(5)")).rejects.toMatchObject({ code: "57014" })
    } finally {
      await short.end()
    }
  })
})
