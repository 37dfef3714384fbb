import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import pg from "pg"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { startEmbeddedPostgres } from "../../src/platform/Database.ts"
import { eventually, unbalancedGroups } from "../support/app.ts"
import { createMerchantWithCli, killServices, type ServiceProcess, startService } from "../support/service.ts"
import { startReceiver } from "../webhooks/support.ts"

// A database that stops answering (SIGSTOP: the kernel still accepts connections and bytes, the
// server answers nothing) must cost a client at most the request deadline plus 1 s and a 503
// service_unavailable, never the length of the freeze; the service recovers by itself when the
// database thaws, and nothing is doubled. The server is a PostgreSQL of this file alone: the shared
// test server must never stop.

const requestDeadlineMs = 5_000 // REQUEST_DEADLINE's default
const requestLimitMs = requestDeadlineMs + 1_000
const readinessLimitMs = 2_000 + 500 // /readyz's documented 2 s, and what a loaded machine adds to an answer

type Server = Awaited<ReturnType<typeof startEmbeddedPostgres>>

let directory: string
let server: Server
let service: ServiceProcess | undefined
let frozen: Array<number> = []

/** The postmaster and every process below it (backends, checkpointer, WAL writer...). */
const serverProcesses = (): Array<number> => {
  const postmaster = Number(readFileSync(join(server.directory, "postmaster.pid"), "utf8").split("\n")[0])
  const parentOf = new Map<number, number>()
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue
    try {
      // `pid (comm) state ppid ...`; comm may hold spaces and parentheses, so read after the last ')'.
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8")
      parentOf.set(Number(entry), Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]))
    } catch {
      // The process ended while the list was read.
    }
  }
  const all = [postmaster]
  for (let i = 0; i < all.length; i++) {
    for (const [pid, parent] of parentOf) if (parent === all[i]) all.push(pid)
  }
  return all
}

const freeze = () => {
  frozen = serverProcesses()
  for (const pid of frozen) process.kill(pid, "SIGSTOP")
}

const thaw = () => {
  for (const pid of frozen) {
    try {
      process.kill(pid, "SIGCONT")
    } catch {
      // Gone (it cannot have been: a stopped process does not exit), nothing to continue.
    }
  }
  frozen = []
}

beforeAll(async () => {
  directory = mkdtempSync(join(tmpdir(), "payments-frozen-pg-"))
  server = await startEmbeddedPostgres({
    directory,
    persistent: false,
    flags: ["-c", "fsync=off", "-c", "synchronous_commit=off"]
  })
})

afterAll(async () => {
  thaw()
  killServices()
  if (service !== undefined) await service.exited
  await server?.stop()
  rmSync(directory, { recursive: true, force: true })
})

/** Every event has its delivery, and every delivery succeeded. */
const allDelivered = (db: pg.Client) =>
  eventually(async () => {
    const counts = await db.query(`SELECT (SELECT count(*)::int FROM payment_events) AS events,
      (SELECT count(*)::int FROM webhook_deliveries) AS deliveries,
      (SELECT count(*)::int FROM webhook_deliveries WHERE status = 'succeeded') AS succeeded`)
    const { deliveries, events, succeeded } = counts.rows[0]
    return events > 0 && deliveries === events && succeeded === deliveries ? true : undefined
  }, { timeoutMs: 20_000, intervalMs: 50, what: "every event delivered" })

interface Timed {
  readonly status: number
  readonly body: any
  readonly elapsedMs: number
}

/** A request and how long its answer took; status 0 when none came within 15 s (the client gave up). */
const timed = async (url: string, init: RequestInit = {}): Promise<Timed> => {
  const started = performance.now()
  try {
    const response = await fetch(url, { ...init, signal: AbortSignal.timeout(15_000) })
    const text = await response.text()
    return {
      status: response.status,
      body: text === "" ? null : JSON.parse(text),
      elapsedMs: performance.now() - started
    }
  } catch {
    return { status: 0, body: null, elapsedMs: performance.now() - started }
  }
}

describe("a frozen database", () => {
  it(
    "costs each request at most the deadline plus 1 s and a 503; after the thaw the same keys complete once",
    async () => {
      const merchant = createMerchantWithCli(server.url, "Frozen")
      const receiver = await startReceiver((_, res) => res.writeHead(200).end("ok"))
      const db = new pg.Client({ connectionString: server.url })
      await db.connect()
      try {
        await db.query(`UPDATE merchants SET webhook_url = $1`, [receiver.url])
        service = await startService(server.url, { WEBHOOK_ALLOW_PRIVATE_URLS: "true" })
        const base = service.baseUrl
        const headers = { authorization: `Bearer ${merchant.api_key.key}`, "content-type": "application/json" }
        const body = (amount: number) =>
          JSON.stringify({
            transaction: {
              amount_cents: amount,
              currency: "USD",
              card_token: "tok_visa",
              card_last_four: "4242",
              card_brand: "visa"
            }
          })
        const create = (key: string, amount: number) =>
          timed(`${base}/api/v1/transactions`, {
            method: "POST",
            body: body(amount),
            headers: { ...headers, "x-idempotency-key": key }
          })
        const get = (id: string) => timed(`${base}/api/v1/transactions/${id}`, { headers })
        const ready = () => timed(`${base}/readyz`)
        const before = await create("before-freeze", 1_000)
        expect(before.status).toBe(201)
        const paymentId = before.body.transaction.id as string
        // Its webhooks delivered first: an attempt whose outcome the frozen database could not record
        // is made again after its lease (at least once; test/webhooks/actor.test.ts), not in this test.
        await allDelivered(db)

        freeze()
        const keys: Array<string> = []
        try {
          // Two waves: the first meets the pool's open connections to the frozen server, the second
          // the connections the pool opens afresh (the kernel accepts them; no server answers).
          for (const wave of [1, 2]) {
            const waveKeys = Array.from({ length: 6 }, (_, i) => `frozen-${wave}-${i}`)
            keys.push(...waveKeys)
            // /readyz first alone (in the first wave it meets an open connection: a probe that, given
            // up, waited for the frozen server to cancel it took 5 s and more), then beside the rest.
            const firstReadiness = await ready()
            const [readiness, ...replies] = await Promise.all([
              ready(),
              ...waveKeys.map((key, i) => create(key, 2_000 + i)),
              get(paymentId),
              get(paymentId),
              timed(`${base}/api/v1/transactions?per_page=5`, { headers })
            ])
            for (const reply of replies) {
              expect(reply.elapsedMs, `wave ${wave}: ${JSON.stringify(reply)}`).toBeLessThanOrEqual(requestLimitMs)
              expect(reply.status, JSON.stringify(reply)).toBe(503)
              expect(reply.body.error).toMatchObject({ type: "api_error", code: "service_unavailable" })
            }
            for (const probe of [firstReadiness, readiness!]) {
              expect(probe.elapsedMs, `wave ${wave}: readyz ${JSON.stringify(probe)}`).toBeLessThanOrEqual(
                readinessLimitMs
              )
              expect(probe.status).toBe(503)
            }
          }
          // The process itself is alive all along.
          expect((await timed(`${base}/healthz`)).status).toBe(200)
        } finally {
          thaw()
        }

        // Recovers by itself: ready again, and each create retried with its key completes, once. A
        // statement the frozen server received still runs when it thaws (it may commit the payment
        // its client was told 503 about); the retry then resumes that payment rather than making another.
        await eventually(async () => ((await ready()).status === 200 ? true : undefined), {
          timeoutMs: 10_000,
          what: "/readyz to answer 200"
        })
        for (const [i, key] of keys.entries()) {
          const amount = 2_000 + (i % 6)
          // Retried as a client does: after a 503, or a 409 idempotency_in_progress (Retry-After: 1)
          // in the moment between a late statement's commit and the release of its claim. A claim
          // left for its lease would keep answering 409 for 60 s, past this bound.
          const retried = await eventually(async () => {
            const reply = await create(key, amount)
            return reply.status === 503 || reply.body?.error?.code === "idempotency_in_progress" ? undefined : reply
          }, { timeoutMs: 10_000, intervalMs: 200, what: `the retry of ${key}` })
          expect(retried.status, JSON.stringify(retried)).toBe(201)
          expect(retried.body.transaction.amount_cents).toBe(amount)
        }
        const after = await create("after-thaw", 3_000)
        expect(after.status).toBe(201)
        expect((await get(paymentId)).status).toBe(200)

        const perKey = await db.query(
          `SELECT idempotency_key, count(*)::int AS n FROM payments GROUP BY idempotency_key`
        )
        expect(perKey.rows.filter((r) => r.n !== 1)).toEqual([])
        expect(perKey.rows.map((r) => r.idempotency_key).sort()).toEqual(
          [...keys, "after-thaw", "before-freeze"].sort()
        )
        const entries = await db.query(
          `SELECT group_id, direction, amount_cents::int AS amount_cents, currency FROM ledger_entries`
        )
        expect(entries.rows.length).toBeGreaterThan(0)
        expect(unbalancedGroups(entries.rows)).toEqual([])
        // The webhook dispatcher carried on: every payment's events reach the receiver.
        await allDelivered(db)
      } finally {
        await db.end()
        await receiver.close()
      }
    },
    180_000
  )
})
