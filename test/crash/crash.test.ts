import { type ChildProcess, execFile, spawn } from "node:child_process"
import { resolve } from "node:path"
import pg from "pg"
import { afterAll, expect, it } from "vitest"
import { freePort } from "../../src/platform/Database.ts"
import { type Client, client, type Reply, transactionBody } from "../support/app.ts"
import { freshDatabase } from "../support/database.ts"

/**
 * Crash safety (CONTRACT sections 5 and 6): the real service runs as a child process, is killed
 * with SIGKILL in the middle of a burst of payments, and is started again. Every client then
 * retries every request with its idempotency key; nothing may be lost, duplicated or left half done.
 */

const root = resolve(import.meta.dirname, "../..")
const tsx = resolve(root, "node_modules/.bin/tsx")
const jobCount = 300
const manualEvery = 3
const refundCents = 100

const children = new Set<ChildProcess>()
const killGroup = (child: ChildProcess) => {
  try {
    if (child.pid !== undefined) process.kill(-child.pid, "SIGKILL")
  } catch {
    // Already gone.
  }
}
afterAll(() => {
  for (const child of children) killGroup(child)
})

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** Polls every 100 ms, at most `timeoutMs`: waiting for a real process, not for time. */
const poll = async <A>(what: string, timeoutMs: number, check: () => Promise<A | undefined>): Promise<A> => {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const value = await check().catch(() => undefined)
    if (value !== undefined) return value
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`)
    await pause(100)
  }
}

/** HH:MM (UTC) twelve hours from now. */
const cutoffFarFromNow = () => new Date(Date.now() + 12 * 3_600_000).toISOString().slice(11, 16)

const serviceEnv = (databaseUrl: string, port: number) => ({
  ...process.env,
  DATABASE_URL: databaseUrl,
  PORT: String(port),
  HOST: "127.0.0.1",
  // One key fires the whole burst; the rate limit is not under test here.
  RATE_LIMIT_PER_SECOND: "100000",
  // A claim of the killed process is taken over 2 s after it was made, not after the default minute.
  IDEMPOTENCY_LEASE: "2s",
  // The daily settlement must not run during the test (the checks expect captured payments).
  SETTLEMENT_CUTOFF: cutoffFarFromNow()
})

const startService = async (databaseUrl: string) => {
  const port = await freePort()
  const child = spawn(tsx, ["src/main.ts", "serve"], {
    cwd: root,
    env: serviceEnv(databaseUrl, port),
    detached: true,
    stdio: ["ignore", "ignore", "pipe"]
  })
  children.add(child)
  let stderr = ""
  child.stderr!.on("data", (chunk) => {
    if (stderr.length < 20_000) stderr += String(chunk)
  })
  const exited = new Promise<number | null>((done) => child.once("exit", (code) => done(code)))
  const baseUrl = `http://127.0.0.1:${port}`
  const outcome = await poll("the service to become ready", 30_000, async () => {
    if (child.exitCode !== null) return "exited"
    const reply = await fetch(`${baseUrl}/readyz`)
    return reply.status === 200 ? "ready" : undefined
  }).catch((error: Error) => error.message)
  if (outcome !== "ready") throw new Error(`the service did not start (${outcome}):\n${stderr}`)
  return {
    baseUrl,
    /** SIGKILL to the whole process group: no shutdown hooks, no flushing. */
    kill: async () => {
      killGroup(child)
      await exited
      children.delete(child)
    }
  }
}

const createMerchantViaCli = (databaseUrl: string) =>
  new Promise<{ merchant: { id: string }; api_key: { key: string } }>((done, fail) => {
    execFile(
      tsx,
      ["src/main.ts", "merchant", "create", "--name", "Crash Test Shop"],
      {
        cwd: root,
        env: { ...process.env, DATABASE_URL: databaseUrl },
        timeout: 60_000
      },
      (
        error,
        stdout,
        stderr
      ) => (error === null ? done(JSON.parse(stdout)) : fail(new Error(`${error.message}\n${stderr}`)))
    )
  })

interface Job {
  readonly index: number
  readonly manual: boolean
  readonly amountCents: number
  /** The create answer received before the crash, if any. */
  created?: Reply
}

/** Sends a request; a transport failure (the server died) is `undefined`. */
const attempt = (send: () => Promise<Reply>) => send().catch(() => undefined)

/**
 * One client's work: create; for manual capture, wait until authorized, capture, refund part.
 * Idempotency keys are fixed per job, so running a job again is a retry of the same requests.
 * After the restart `patient` retries a 409 in progress (the dead process's claim) until its lease ends.
 */
const runJob = async (
  api: Client,
  job: Job,
  options: { readonly patient: boolean; readonly onCreate?: (reply: Reply) => void }
) => {
  const send = async (go: () => Promise<Reply>): Promise<Reply | undefined> => {
    for (let tries = 0;; tries++) {
      const reply = await attempt(go)
      if (!options.patient || tries >= 100) return reply
      if (reply !== undefined && reply.status === 409 && reply.body?.error?.code === "idempotency_in_progress") {
        await pause(200)
        continue
      }
      if (reply === undefined || reply.status >= 500) {
        await pause(200)
        continue
      }
      return reply
    }
  }
  const body = transactionBody({
    amount_cents: job.amountCents,
    capture_method: job.manual ? "manual" : "automatic",
    metadata: { job: String(job.index) }
  })
  const created = await send(() => api.post("/api/v1/transactions", body, { idempotencyKey: `create-${job.index}` }))
  if (created === undefined) return { created }
  options.onCreate?.(created)
  if (!job.manual || created.status !== 201) return { created }
  const id = created.body.transaction.id as string
  const authorized = options.patient
    ? await poll(`payment ${id} to be authorized`, 20_000, async () => {
      const reply = await api.get(`/api/v1/transactions/${id}`)
      return reply.body.transaction.status === "pending" ? undefined : reply.body.transaction.status as string
    })
    : (created.body.transaction.status as string)
  if (authorized !== "authorized" && !options.patient) return { created }
  const captured = await send(() =>
    api.post(`/api/v1/transactions/${id}/capture`, undefined, { idempotencyKey: `capture-${job.index}` })
  )
  if (captured === undefined || captured.status !== 200) return { created, captured }
  const refunded = await send(() =>
    api.post(`/api/v1/transactions/${id}/refund`, { amount_cents: refundCents }, {
      idempotencyKey: `refund-${job.index}`
    })
  )
  return { created, captured, refunded }
}

it("survives SIGKILL in the middle of a burst: nothing lost, nothing doubled, nothing left pending", async () => {
  const databaseUrl = await freshDatabase("crash")
  const { api_key } = await createMerchantViaCli(databaseUrl)
  const jobs: Array<Job> = Array.from({ length: jobCount }, (_, index) => ({
    index,
    manual: index % manualEvery === 0,
    amountCents: 1_000 + index
  }))

  // 1. The burst: clients work through the jobs, 40 at a time, so creates, captures and refunds
  //    are all in flight when the service is killed, once 40% of the requests were answered.
  const first = await startService(databaseUrl)
  const api = client(first.baseUrl, api_key.key)
  const totalRequests = jobs.reduce((n, j) => n + (j.manual ? 3 : 1), 0)
  let answered = 0
  let killing: Promise<void> | undefined
  const counted = (send: () => Promise<Reply>) => async () => {
    const reply = await send()
    if (++answered === Math.floor(totalRequests * 0.4)) killing = first.kill()
    return reply
  }
  const countingApi: Client = {
    ...api,
    send: (method, path, options) => counted(() => api.send(method, path, options))(),
    get: (path, options) => counted(() => api.get(path, options))(),
    post: (path, json, options) => counted(() => api.post(path, json, options))()
  }
  const queue = [...jobs]
  await Promise.all(Array.from({ length: 40 }, async () => {
    for (let job = queue.shift(); job !== undefined; job = queue.shift()) {
      const current = job
      await runJob(countingApi, current, {
        patient: false,
        onCreate: (reply) => void (reply.status === 201 && (current.created = reply))
      })
    }
  }))
  await (killing ?? first.kill())
  const answeredBeforeCrash = jobs.filter((j) => j.created !== undefined)
  expect(answeredBeforeCrash.length).toBeGreaterThan(0)
  expect(answeredBeforeCrash.length).toBeLessThan(jobCount)

  // 2. Restart; every client retries everything with the same keys.
  const second = await startService(databaseUrl)
  try {
    const retryApi = client(second.baseUrl, api_key.key)
    const results = await Promise.all(jobs.map((job) => runJob(retryApi, job, { patient: true })))

    for (const [index, result] of results.entries()) {
      const job = jobs[index]!
      expect(result.created?.status, `create of job ${index}: ${result.created?.text}`).toBe(201)
      if (job.created !== undefined) {
        // An answered request is replayed byte for byte: same id, same body.
        expect(result.created!.body.transaction.id).toBe(job.created.body.transaction.id)
        expect(result.created!.text).toBe(job.created.text)
        expect(result.created!.headers.get("idempotent-replayed")).toBe("true")
      }
      if (job.manual) {
        expect(result.captured?.status, `capture of job ${index}: ${result.captured?.text}`).toBe(200)
        expect(result.refunded?.status, `refund of job ${index}: ${result.refunded?.text}`).toBe(200)
      }
    }

    // 3. No payment stays pending once the recovered flows have run.
    await poll("no pending payments", 20_000, async () => {
      const reply = await retryApi.get("/api/v1/transactions?status=pending")
      return reply.body.meta.total_count === 0 ? true : undefined
    })

    // 4. The database, checked directly.
    const db = new pg.Client({ connectionString: databaseUrl })
    await db.connect()
    try {
      const perKey = await db.query(`SELECT idempotency_key, count(*)::int AS n FROM payments GROUP BY idempotency_key`)
      expect(perKey.rows.filter((r) => r.n !== 1)).toEqual([])
      expect(perKey.rows.map((r) => r.idempotency_key).sort()).toEqual(jobs.map((j) => `create-${j.index}`).sort())

      const unbalanced = await db.query(`
        SELECT group_id, currency FROM ledger_entries GROUP BY group_id, currency
        HAVING sum(CASE direction WHEN 'debit' THEN amount_cents ELSE -amount_cents END) <> 0`)
      expect(unbalanced.rows).toEqual([])

      const doubleCaptureEvents = await db.query(`
        SELECT payment_id FROM payment_events WHERE type = 'payment.captured' GROUP BY payment_id HAVING count(*) > 1`)
      expect(doubleCaptureEvents.rows).toEqual([])
      const doubleCaptureGroups = await db.query(`
        SELECT payment_id FROM ledger_entries WHERE account = 'card_network' AND direction = 'debit'
        GROUP BY payment_id HAVING count(DISTINCT group_id) > 1`)
      expect(doubleCaptureGroups.rows).toEqual([])
      const doubleInitiated = await db.query(`
        SELECT payment_id FROM payment_events WHERE type = 'payment.initiated' GROUP BY payment_id HAVING count(*) <> 1`)
      expect(doubleInitiated.rows).toEqual([])

      const payments = (await db.query(`SELECT * FROM payments ORDER BY idempotency_key`)).rows
      for (const payment of payments) {
        const job = jobs[Number(String(payment.idempotency_key).slice("create-".length))]!
        expect(payment.amount_cents).toBe(job.amountCents)
        expect(payment.status).toBe("captured")
        expect(payment.captured_amount_cents).toBe(job.amountCents)
        // A refund retried across the crash is applied once.
        expect(payment.refunded_amount_cents).toBe(job.manual ? refundCents : 0)
      }
      const refundEvents = await db.query(`
        SELECT payment_id, count(*)::int AS n FROM payment_events WHERE type = 'payment.partially_refunded' GROUP BY payment_id`)
      expect(refundEvents.rows.length).toBe(jobs.filter((j) => j.manual).length)
      expect(refundEvents.rows.filter((r) => r.n !== 1)).toEqual([])

      // Balances agree with the payments: pending = Σ (captured − fee − refunded).
      const expectedPending = payments.reduce(
        (sum, p) => sum + p.captured_amount_cents - p.fee_cents - p.refunded_amount_cents,
        0
      )
      const balance = await retryApi.get("/api/v1/merchants/me/balance")
      expect(balance.body.balances).toEqual([{ currency: "USD", pending: expectedPending, available: 0, reserved: 0 }])
    } finally {
      await db.end()
    }
  } finally {
    await second.kill()
  }
}, 120_000)
