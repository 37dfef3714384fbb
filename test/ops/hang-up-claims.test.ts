import pg from "pg"
import { afterAll, describe, expect, it } from "vitest"
import { eventually } from "../support/app.ts"
import { freshDatabase } from "../support/database.ts"
import { createMerchantWithCli, killServices, startService } from "../support/service.ts"

// CONTRACT section 5 and docs/api.md: a request cut off by its client leaves no idempotency claim
// locked, so the client's retry is answered at once instead of 409 `idempotency_in_progress` for
// the whole lease (IDEMPOTENCY_LEASE, 60 s). A single aborted create never showed the defect; a
// storm did: a create whose group-committed statement (src/store/PgHotPath.ts) was on its way when
// its client hung up could have its claim committed after the request was interrupted. The
// sandbox's creates are written once (the key claimed finished, with the answer, in the statement
// that writes the payment), so here a cut-off create has written everything or nothing;
// test/http/hang-up-claim.test.ts takes both paths, that one and the general one that claims
// first, one step at a time.

afterAll(killServices)

const keys = 300
/** Keys retried at once. */
const retryWorkers = 8

describe("idempotency keys of creates abandoned by their clients in a storm", () => {
  it("answer their retry at once once the original requests have ended: no 409, one payment per key", async () => {
    const databaseUrl = await freshDatabase("hangup_claims")
    const key = createMerchantWithCli(databaseUrl, "Hang-up claims").api_key.key
    // One merchant's key sends 900 creates in seconds: the rate limit is not what this test is about.
    const service = await startService(databaseUrl, { RATE_LIMIT_PER_SECOND: "1000000" })
    const db = new pg.Client({ connectionString: databaseUrl })
    await db.connect()
    const body = JSON.stringify({
      transaction: {
        amount_cents: 1_500,
        currency: "EUR",
        card_token: "tok_visa",
        card_last_four: "4242",
        card_brand: "visa"
      }
    })
    const send = (idempotencyKey: string, signal?: AbortSignal) =>
      fetch(`${service.baseUrl}/api/v1/transactions`, {
        method: "POST",
        body,
        ...(signal === undefined ? {} : { signal }),
        headers: {
          authorization: `Bearer ${key}`,
          "content-type": "application/json",
          "x-idempotency-key": idempotencyKey
        }
      })
    const stormKey = (i: number) => `storm-${i}`
    try {
      // The same storm unabandoned first: it warms the service and the pool (a cold service reads
      // the requests too slowly for any abort to reach a statement), and its median latency is
      // how long the aborts below are spread over (from 5 ms, a few ms on an idle machine, seconds
      // on a busy one).
      const latenciesMs = await Promise.all(Array.from({ length: keys }, async (_, i) => {
        const startedMs = performance.now()
        const response = await send(`warm-${i}`)
        await response.arrayBuffer()
        expect(response.status).toBe(201)
        return performance.now() - startedMs
      }))
      latenciesMs.sort((a, b) => a - b)
      const spreadMs = Math.max(30, latenciesMs[keys >> 1]!)

      // The storm: every create at once, request i aborted at its own point of the spread, so that
      // some hang up before their statement goes out, some while it is queued or on its way, some
      // while their flow commits, some after their answer.
      const cut = new Set<string>()
      await Promise.all(Array.from({ length: keys }, async (_, i) => {
        const controller = new AbortController()
        const timer = setTimeout(() => controller.abort(), 5 + (((i * 7) % keys) / keys) * (spreadMs - 5))
        await send(stormKey(i), controller.signal).then((response) => response.arrayBuffer()).catch(() => {
          cut.add(stormKey(i))
        })
        clearTimeout(timer)
      }))

      // The service has ended every request of the storm (cut off and cleaned up after, or
      // answered) when the scrape is the only request in flight.
      await eventually(async () => {
        const text = await (await fetch(`${service.baseUrl}/metrics`)).text()
        return /^http_requests_in_flight 1$/m.test(text) ? true : undefined
      }, { timeoutMs: 60_000, intervalMs: 50, what: "the storm's requests to end" })

      const opened = new Set(
        (await db.query(`SELECT idempotency_key AS key FROM payments WHERE idempotency_key LIKE 'storm-%'`)).rows.map((
          r: { key: string }
        ) => r.key)
      )
      // No claim of an ended request still locked (a claim is `in_progress` until its response is stored).
      const locked = (await db.query(
        `SELECT key FROM idempotency_keys WHERE key LIKE 'storm-%' AND state = 'in_progress' AND locked_until > now() ORDER BY key`
      )).rows.map((r: { key: string }) => r.key)

      // Every key retried once, a few at a time.
      interface Outcome {
        readonly key: string
        readonly status: number
        readonly id: string | null
        readonly replayed: boolean
      }
      const outcomes: Array<Outcome> = []
      let next = 0
      await Promise.all(Array.from({ length: retryWorkers }, async () => {
        while (next < keys) {
          const idempotencyKey = stormKey(next++)
          const response = await send(idempotencyKey)
          const answer = await response.json() as { transaction?: { id: string } }
          outcomes.push({
            key: idempotencyKey,
            status: response.status,
            id: answer.transaction?.id ?? null,
            replayed: response.headers.get("idempotent-replayed") === "true"
          })
        }
      }))
      const conflicts = outcomes.filter((o) => o.status === 409).map((o) => o.key)
      expect(conflicts, `${conflicts.length} of ${keys} retries answered 409 after their original ended`).toEqual([])
      expect(locked, `${locked.length} of ${keys} keys still locked after their request ended`).toEqual([])
      expect(outcomes.filter((o) => o.status !== 201).map((o) => `${o.key}: ${o.status}`)).toEqual([])

      // Not a storm that missed: some originals were cut off before they wrote (their retry creates
      // the payment), and some once their statement was on its way or done (their payment and
      // answer are there: the retry replays it).
      const cutBefore = outcomes.filter((o) => cut.has(o.key) && !opened.has(o.key))
      const cutAfter = outcomes.filter((o) => cut.has(o.key) && opened.has(o.key))
      expect(cutBefore.length, `the storm (aborts over ${Math.round(spreadMs)} ms) cut no create off before it wrote`)
        .toBeGreaterThan(0)
      expect(cutAfter.length, `the storm (aborts over ${Math.round(spreadMs)} ms) cut no create off after it wrote`)
        .toBeGreaterThan(0)
      expect(cutBefore.filter((o) => o.replayed).map((o) => o.key)).toEqual([])
      // Written once: a payment that is there has its answer stored with it.
      expect(outcomes.filter((o) => opened.has(o.key) && !o.replayed).map((o) => o.key)).toEqual([])

      // Money stays safe: one payment per key, the one its retry answered with.
      const rows = (await db.query(
        `SELECT idempotency_key AS key, array_agg(id) AS ids FROM payments WHERE idempotency_key LIKE 'storm-%' GROUP BY idempotency_key`
      )).rows as Array<{ key: string; ids: Array<string> }>
      expect(rows.filter((r) => r.ids.length !== 1)).toEqual([])
      const paymentOf = new Map(rows.map((r) => [r.key, r.ids[0]]))
      expect(outcomes.filter((o) => paymentOf.get(o.key) !== o.id).map((o) => o.key)).toEqual([])
      expect(paymentOf.size).toBe(keys)
    } finally {
      await db.end()
      service.child.kill("SIGTERM")
      await service.exited
    }
  }, 240_000) // a child process: starting it alone takes 12 s on a loaded machine
})
