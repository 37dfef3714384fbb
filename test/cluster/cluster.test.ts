import { Effect } from "effect"
import { execFileSync } from "node:child_process"
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"
import { resolve } from "node:path"
import pg from "pg"
import { afterAll, describe, expect, it } from "vitest"
import { defaultPoolTimeouts, migrate } from "../../src/platform/Database.ts"
import { client, eventually, transactionBody } from "../support/app.ts"
import { freshDatabase } from "../support/database.ts"
import { killServices, serviceEnv, type ServiceProcess, startService } from "../support/service.ts"

/**
 * Several instances of the service on one PostgreSQL, as a deployment runs them
 * (docs/operations.md, "Running several instances"): started together on an empty database, and
 * one killed with SIGKILL while it holds webhook attempts and payments waiting on the card network.
 * Real processes and a real receiver: the bounds are checked on the wall clock, polling, never sleeping.
 */

const root = resolve(import.meta.dirname, "../..")

afterAll(() => killServices())

/** The daily settlement must not run during a test. */
const cutoffFarFromNow = () => new Date(Date.now() + 12 * 3_600_000).toISOString().slice(11, 16)

const withDatabase = async <A>(url: string, use: (db: pg.Client) => Promise<A>) => {
  const db = new pg.Client({ connectionString: url })
  await db.connect()
  try {
    return await use(db)
  } finally {
    await db.end()
  }
}

describe("several instances on one database", () => {
  it("migrations: 32 runs at once on an empty database all succeed (they queue on an advisory lock; CREATE TABLE IF NOT EXISTS alone races)", async () => {
    const url = await freshDatabase("cluster_migrate")
    const runs = await Promise.allSettled(
      Array.from({ length: 32 }, () => Effect.runPromise(migrate(url, defaultPoolTimeouts)))
    )
    expect(runs.filter((r) => r.status === "rejected").map((r) => String((r as PromiseRejectedResult).reason))).toEqual(
      []
    )
    await withDatabase(url, async (db) => {
      const applied = (await db.query("SELECT migration_id FROM effect_sql_migrations ORDER BY migration_id")).rows.map(
        (r) => r.migration_id
      )
      expect(new Set(applied).size).toBe(applied.length)
      expect(applied.length).toBeGreaterThan(0)
    })
  })

  it(
    "six instances started at once on an empty database all come up (one applies the migrations, the others wait for it) and one leads",
    async () => {
      const url = await freshDatabase("cluster_start")
      const extra = { SETTLEMENT_CUTOFF: cutoffFarFromNow() }
      const started = await Promise.allSettled(Array.from({ length: 6 }, () => startService(url, extra)))
      const failures = started.filter((s) => s.status === "rejected").map((s) =>
        String((s as PromiseRejectedResult).reason)
      )
      expect(failures).toEqual([])
      const services = started.map((s) => (s as PromiseFulfilledResult<ServiceProcess>).value)
      for (const service of services) expect((await fetch(`${service.baseUrl}/readyz`)).status).toBe(200)
      await withDatabase(url, async (db) => {
        const migrations = await db.query("SELECT count(*)::int AS n FROM effect_sql_migrations")
        expect(migrations.rows[0].n).toBeGreaterThan(0)
        const beating = await db.query("SELECT count(*)::int AS n FROM service_instances WHERE alive_until > now()")
        expect(beating.rows[0].n).toBe(6)
        const leaders = await eventually(async () => {
          const rows = (await db.query("SELECT holder FROM service_leaders WHERE role = 'jobs'")).rows
          return rows.length === 1 ? rows : undefined
        }, { timeoutMs: 10_000, what: "a leader" })
        expect(leaders).toHaveLength(1)
      })
      for (const service of services) service.child.kill("SIGTERM")
      expect(await Promise.all(services.map((s) => s.exited))).toEqual([0, 0, 0, 0, 0, 0])
    },
    240_000
  )

  it(
    "kill -9 of an instance: another resends its webhook attempts within 10 s and ends its payments within ACQUIRER_TIMEOUT + 10 s; one payment per key; every event delivered",
    async () => {
      const url = await freshDatabase("cluster_kill")
      const acquirerTimeoutMs = 15_000
      const extra = {
        SETTLEMENT_CUTOFF: cutoffFarFromNow(),
        ACQUIRER_TIMEOUT: `${acquirerTimeoutMs / 1000}s`,
        REQUEST_DEADLINE: "1s",
        WEBHOOK_ALLOW_PRIVATE_URLS: "true"
      }
      // The merchants' endpoint: it holds every request (never answers) until told to answer.
      let answering = false
      const held: Array<ServerResponse> = []
      const receipts: Array<{ eventId: string; attempt: number; atMs: number }> = []
      const receiver: Server = createServer((req: IncomingMessage, res: ServerResponse) => {
        req.resume()
        req.on("end", () => {
          receipts.push({
            eventId: String(req.headers["x-service-event-id"]),
            attempt: Number(req.headers["x-service-delivery-attempt"]),
            atMs: Date.now()
          })
          if (answering) res.writeHead(200).end("ok")
          else held.push(res)
        })
      })
      await new Promise<void>((done) => receiver.listen(0, "127.0.0.1", done))
      const hooks = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hooks`
      try {
        const a = await startService(url, extra)
        const created = JSON.parse(
          execFileSync(process.execPath, [
            "--import",
            "tsx",
            "src/main.ts",
            "merchant",
            "create",
            "--name",
            "Cluster Shop",
            "--webhook-url",
            hooks
          ], {
            cwd: root,
            env: serviceEnv(url, extra),
            encoding: "utf8",
            stdio: ["ignore", "pipe", "pipe"]
          })
        ) as { api_key: { key: string } }
        const onA = client(a.baseUrl, created.api_key.key)
        const keys = ["order-1", "order-2", "order-3"]
        const firstIds: Array<string> = []
        for (const key of keys) {
          const reply = await onA.post("/api/v1/transactions", transactionBody({ card_token: "tok_network_timeout" }), {
            idempotencyKey: key
          })
          expect(reply.status).toBe(201)
          expect(reply.body.transaction.status).toBe("pending")
          firstIds.push(reply.body.transaction.id)
        }
        // A sends each payment's first event and holds the attempts open.
        await eventually(async () => (receipts.length >= keys.length ? true : undefined), {
          timeoutMs: 10_000,
          what: "A's attempts"
        })
        const b = await startService(url, extra)
        const onB = client(b.baseUrl, created.api_key.key)
        const leaderBefore = await withDatabase(
          url,
          async (db) => (await db.query("SELECT holder FROM service_leaders")).rows[0]?.holder
        )
        // Still pending (the network has not answered), still A's.
        for (const id of firstIds) {
          expect((await onB.get(`/api/v1/transactions/${id}`)).body.transaction.status).toBe("pending")
        }
        const receivedBeforeKill = receipts.length

        a.child.kill("SIGKILL")
        const killedAtMs = Date.now()
        await a.exited
        answering = true
        for (const res of held.splice(0)) res.destroy()

        // The attempts A held are sent again by B, as the next attempt of the same event.
        const resent = await eventually(async () => {
          const again = receipts.slice(receivedBeforeKill).filter((r) => r.attempt >= 2)
          return again.length >= keys.length ? again : undefined
        }, { timeoutMs: 30_000, intervalMs: 100, what: "the held attempts to be sent again" })
        expect(Math.max(...resent.slice(0, keys.length).map((r) => r.atMs)) - killedAtMs).toBeLessThanOrEqual(10_000)

        // A's payments end on B: the network did not answer, so they fail with network_timeout.
        const ended = await eventually(async () => {
          const payments = await Promise.all(
            firstIds.map(async (id) => (await onB.get(`/api/v1/transactions/${id}`)).body.transaction)
          )
          return payments.every((p) => p.status !== "pending") ? payments : undefined
        }, { timeoutMs: acquirerTimeoutMs + 30_000, intervalMs: 200, what: "A's payments to end" })
        expect(Date.now() - killedAtMs).toBeLessThanOrEqual(acquirerTimeoutMs + 10_000)
        for (const payment of ended) {
          expect(payment).toMatchObject({ status: "failed", failure_code: "network_timeout" })
        }

        // One payment per key: the retries on B answer the same payments.
        for (const [i, key] of keys.entries()) {
          const retry = await onB.post("/api/v1/transactions", transactionBody({ card_token: "tok_network_timeout" }), {
            idempotencyKey: key
          })
          expect(retry.body.transaction.id).toBe(firstIds[i])
        }
        const list = await onB.get("/api/v1/transactions?per_page=100")
        expect(list.body.meta.total_count).toBe(keys.length)

        // Every event delivered (2xx), each with its cut attempt recorded where A's attempt was cut.
        const deliveries = await eventually(async () => {
          const reply = await onB.get("/api/v1/webhooks/deliveries?per_page=100")
          const all = reply.body.deliveries as Array<any>
          return all.length === 2 * keys.length && all.every((d) => d.status === "succeeded") ? all : undefined
        }, { timeoutMs: 30_000, intervalMs: 200, what: "every event delivered" })
        const cut = deliveries.filter((d) => d.attempts[0].cut === true)
        expect(cut).toHaveLength(keys.length)
        for (const d of cut) expect(d.attempts.map((x: any) => [x.attempt, x.cut])).toEqual([[1, true], [2, false]])
        const events = new Set(receipts.map((r) => r.eventId))
        expect(events.size).toBe(2 * keys.length)

        // The leader's role moved to B (A led: it started first).
        const leaderAfter = await withDatabase(
          url,
          async (db) => (await db.query("SELECT holder FROM service_leaders")).rows[0]?.holder
        )
        expect(leaderAfter).not.toBe(leaderBefore)
        b.child.kill("SIGTERM")
        expect(await b.exited).toBe(0)
      } finally {
        receiver.closeAllConnections()
        await new Promise((done) => receiver.close(done))
      }
    },
    240_000
  )
})
