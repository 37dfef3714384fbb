import { type ChildProcess, execFileSync, spawn } from "node:child_process"
import { resolve } from "node:path"
import pg from "pg"
import { afterAll, describe, expect, it } from "vitest"
import { freePort } from "../../src/platform/Database.ts"
import { aliveForMs } from "../../src/platform/Instance.ts"
import { eventually } from "../support/app.ts"
import { freshShellEnv } from "../support/childEnv.ts"
import { freshDatabase } from "../support/database.ts"

// A service killed with SIGKILL in the middle of a keyed create, as an orchestrator or the OOM
// killer would: the client's retry, sent to the next process, must resolve once the dead
// process's beats stop (about 5 s), not after IDEMPOTENCY_LEASE (60 s).

const root = resolve(import.meta.dirname, "../..")
const children: Array<ChildProcess> = []
afterAll(() => {
  for (const child of children) child.kill("SIGKILL")
})

const startService = async (databaseUrl: string) => {
  const port = await freePort()
  const env = freshShellEnv({ DATABASE_URL: databaseUrl, PORT: String(port), RESPONSE_ENCRYPTION_KEY: "ab".repeat(32) })
  const service = spawn(process.execPath, ["--import", "tsx", "src/main.ts", "serve"], {
    cwd: root,
    env,
    stdio: ["ignore", "ignore", "pipe"]
  })
  children.push(service)
  let output = ""
  service.stderr!.on("data", (chunk: Buffer) => (output += chunk.toString()))
  const baseUrl = `http://127.0.0.1:${port}`
  await eventually(async () => {
    if (service.exitCode !== null) throw new Error(`the service exited ${service.exitCode}: ${output}`)
    const ready = await fetch(`${baseUrl}/readyz`).catch(() => null)
    return ready?.status === 200 ? true : undefined
  }, { timeoutMs: 60_000, intervalMs: 100, what: "the service to be ready" })
  return { service, baseUrl }
}

describe("a keyed create whose process stops in the middle", () => {
  it("is resumed by the retry as soon as the dead process stops beating, not after the lease", async () => {
    const databaseUrl = await freshDatabase("kill_retry")
    const env = freshShellEnv({ DATABASE_URL: databaseUrl, RESPONSE_ENCRYPTION_KEY: "ab".repeat(32) })
    const created = JSON.parse(
      execFileSync(process.execPath, ["--import", "tsx", "src/main.ts", "merchant", "create", "--name", "Kill"], {
        cwd: root,
        env,
        encoding: "utf8"
      })
    )
    const key: string = created.api_key.key
    const db = new pg.Client({ connectionString: databaseUrl })
    await db.connect()
    try {
      const first = await startService(databaseUrl)
      // The network never answers this token: the request holds its claim up to REQUEST_DEADLINE (5 s).
      const body = JSON.stringify({
        transaction: {
          amount_cents: 1500,
          currency: "USD",
          card_token: "tok_network_timeout",
          card_last_four: "4242",
          card_brand: "visa"
        }
      })
      const headers = {
        authorization: `Bearer ${key}`,
        "content-type": "application/json",
        "x-idempotency-key": "order-killed"
      }
      const send = (baseUrl: string) => fetch(`${baseUrl}/api/v1/transactions`, { method: "POST", headers, body })
      const lost = send(first.baseUrl).catch(() => null)
      // Killed while the claim is held, named after its process.
      const owner = await eventually(async () => {
        const rows = await db.query(
          `SELECT owner FROM idempotency_keys WHERE key = 'order-killed' AND state = 'in_progress'`
        )
        return rows.rows[0]?.owner as string | undefined
      }, { timeoutMs: 10_000, what: "the claim" })
      expect(owner).toMatch(/^ins_/)
      first.service.kill("SIGKILL")
      expect(await lost).toBeNull()

      const second = await startService(databaseUrl)
      // While the dead process's last beat still counts, the retry is told to wait, as for any claim in flight.
      const lease = await db.query(
        `SELECT locked_until > now() + interval '30 seconds' AS long FROM idempotency_keys WHERE key = 'order-killed'`
      )
      expect(lease.rows[0].long).toBe(true)
      await eventually(async () => {
        const rows = await db.query(`SELECT alive_until <= now() AS gone FROM service_instances WHERE id = $1`, [owner])
        return rows.rows[0]?.gone === true ? true : undefined
      }, { timeoutMs: aliveForMs + 5_000, intervalMs: 100, what: "the killed process to stop counting as alive" })
      // Then the retry takes the claim over at once (the lease has most of its 60 s left) and finds the same payment.
      const retry = await send(second.baseUrl)
      const answer = await retry.json() as { transaction?: { id: string; status: string }; error?: unknown }
      expect(retry.status, JSON.stringify(answer)).toBe(201)
      const payments = await db.query(`SELECT id FROM payments`)
      expect(payments.rows.map((r) => r.id)).toEqual([answer.transaction!.id])
      second.service.kill("SIGTERM")
    } finally {
      await db.end()
    }
  })

  it("a graceful stop (SIGTERM) in the middle finishes the request first: the retry on the next process replays its answer", async () => {
    const databaseUrl = await freshDatabase("stop_retry")
    const env = freshShellEnv({ DATABASE_URL: databaseUrl, RESPONSE_ENCRYPTION_KEY: "ab".repeat(32) })
    const created = JSON.parse(
      execFileSync(process.execPath, ["--import", "tsx", "src/main.ts", "merchant", "create", "--name", "Stop"], {
        cwd: root,
        env,
        encoding: "utf8"
      })
    )
    const db = new pg.Client({ connectionString: databaseUrl })
    await db.connect()
    try {
      const first = await startService(databaseUrl)
      const body = JSON.stringify({
        transaction: {
          amount_cents: 1500,
          currency: "USD",
          card_token: "tok_network_timeout",
          card_last_four: "4242",
          card_brand: "visa"
        }
      })
      const headers = {
        authorization: `Bearer ${created.api_key.key}`,
        "content-type": "application/json",
        "x-idempotency-key": "order-stopped"
      }
      const send = (baseUrl: string) => fetch(`${baseUrl}/api/v1/transactions`, { method: "POST", headers, body })
      const inFlight = send(first.baseUrl).then(async (r) => ({ status: r.status, text: await r.text() }))
      await eventually(async () => {
        const rows = await db.query(
          `SELECT 1 FROM idempotency_keys WHERE key = 'order-stopped' AND state = 'in_progress'`
        )
        return rows.rows.length === 1 ? true : undefined
      }, { timeoutMs: 10_000, what: "the claim" })
      const exited = new Promise<number | null>((done) => first.service.once("exit", (code) => done(code)))
      first.service.kill("SIGTERM")
      // The server drains: the request in flight gets its answer (pending, past REQUEST_DEADLINE), stored under its key.
      const answered = await inFlight
      expect(answered.status).toBe(201)
      expect(JSON.parse(answered.text).transaction.status).toBe("pending")
      expect(await exited).toBe(0)
      const claim = await db.query(`SELECT state FROM idempotency_keys WHERE key = 'order-stopped'`)
      expect(claim.rows[0].state).toBe("completed")

      const second = await startService(databaseUrl)
      const retry = await send(second.baseUrl)
      expect(retry.status).toBe(201)
      expect(retry.headers.get("idempotent-replayed")).toBe("true")
      expect(await retry.text()).toBe(answered.text)
      expect((await db.query(`SELECT count(*)::int AS n FROM payments`)).rows[0].n).toBe(1)
      second.service.kill("SIGTERM")
    } finally {
      await db.end()
    }
  })
})
