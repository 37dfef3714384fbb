import pg from "pg"
import { afterAll, describe, expect, it } from "vitest"
import { freshDatabase } from "../support/database.ts"
import { createMerchantWithCli, killServices, startService } from "../support/service.ts"

// A client that hangs up in the middle of a create must not leave the payment pending until the
// recovery worker's next pass (a minute and more): the supervised flow takes over at once. Before
// an interrupted caller of the group commit waited for a statement already sent
// (src/store/PgHotPath.ts), a hang-up while the create's batch was in flight let the flow look for
// the payment before the batch committed it; it found nothing and stopped, and the payment stayed
// pending (35–45 of 1,280 abandoned creates by hand; 3 in this test).

afterAll(killServices)

describe("creates abandoned by their clients", () => {
  it("leave no payment pending once every request has been answered or dropped", async () => {
    const databaseUrl = await freshDatabase("hangup")
    const key = createMerchantWithCli(databaseUrl, "Hang-up").api_key.key
    const service = await startService(databaseUrl)
    const body = JSON.stringify({
      transaction: {
        amount_cents: 1_000,
        currency: "USD",
        card_token: "tok_visa",
        card_last_four: "4242",
        card_brand: "visa"
      }
    })
    // Aborts spread over the first milliseconds of each request: some before it is read, some while
    // its insert or its flow's commit is in a batch, some after the answer. Which is which does not
    // matter; only that the outcome below holds for all of them. Every eighth request is never
    // aborted, so some payments exist however slow a loaded machine answers.
    const create = async (i: number) => {
      const controller = new AbortController()
      const timer = i % 8 === 7 ? undefined : setTimeout(() => controller.abort(), i % 16)
      await fetch(`${service.baseUrl}/api/v1/transactions`, {
        method: "POST",
        body,
        signal: controller.signal,
        headers: {
          authorization: `Bearer ${key}`,
          "content-type": "application/json",
          "x-idempotency-key": `hang-up-${i}`
        }
      }).then((response) => response.arrayBuffer()).catch(() => null)
      clearTimeout(timer)
    }
    for (let round = 0; round < 12; round++) {
      await Promise.all(Array.from({ length: 64 }, (_, i) => create(round * 64 + i)))
    }
    const db = new pg.Client({ connectionString: databaseUrl })
    await db.connect()
    try {
      // The flows that took over finish within a few statements; the recovery worker would need a minute.
      let pending = -1
      for (let polls = 0; polls < 50 && pending !== 0; polls++) {
        if (polls > 0) await new Promise((done) => setTimeout(done, 100))
        pending = Number((await db.query(`SELECT count(*)::int AS n FROM payments WHERE status = 'pending'`)).rows[0].n)
      }
      expect(pending).toBe(0)
      const total = Number((await db.query(`SELECT count(*)::int AS n FROM payments`)).rows[0].n)
      expect(total).toBeGreaterThan(0)
    } finally {
      await db.end()
      service.child.kill("SIGTERM")
      await service.exited
      // Every request ended, answered or dropped: none was left in flight for the stop to cut off
      // (one whose client hung up as it was answered waited for ever, src/http/NodeResponse.ts).
      const stop = service.stderr().split("\n").filter((line) => line.includes("shutting down")).join("\n")
      expect(stop, stop).not.toContain("still in flight after SHUTDOWN_GRACE")
      expect(stop, stop).toContain("every request in flight was answered")
    }
  }, 180_000) // a child process: starting it alone takes 12 s on a loaded machine (CI runs files in parallel)
})
