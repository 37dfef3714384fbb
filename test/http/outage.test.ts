import pg from "pg"
import { afterAll, beforeAll, expect, inject, it } from "vitest"
import { client, errorOf, request, startApp, type TestApp, transactionBody } from "../support/app.ts"

// CONTRACT section 3: the database unreachable is 503 service_unavailable, safe to retry with
// the same idempotency key.

let app: TestApp
beforeAll(async () => {
  app = await startApp({ label: "outage" })
})
afterAll(async () => {
  await setConnections(true).catch(() => undefined)
  await app?.close()
})

/** Cuts the app off its database (or lets it back) from the server's side. */
const setConnections = async (allowed: boolean) => {
  const admin = new pg.Client({ connectionString: inject("databaseUrl") })
  await admin.connect()
  try {
    const name = new URL(app.databaseUrl).pathname.slice(1)
    await admin.query(`ALTER DATABASE ${name} ALLOW_CONNECTIONS ${allowed}`)
    if (!allowed) {
      await admin.query(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
        [name]
      )
    }
  } finally {
    await admin.end()
  }
}

it("answers 503 service_unavailable while the database is unreachable; a retry with the same key then succeeds once", async () => {
  const { key } = await app.createMerchant()
  const api = client(app.baseUrl, key)
  const body = transactionBody({ amount_cents: 4_200 })
  await setConnections(false)
  try {
    const reply = await api.post("/api/v1/transactions", body, { idempotencyKey: "during-outage" })
    expect(reply.status).toBe(503)
    expect(errorOf(reply)).toMatchObject({ type: "api_error", code: "service_unavailable" })
    expect(errorOf(reply).request_id).toBe(reply.headers.get("x-request-id"))
    expect(reply.text).not.toMatch(/SqlError|ECONNREFUSED|postgres|at .*\.ts/i)
    const ready = await request(app.baseUrl, "GET", "/readyz")
    expect(ready.status).toBe(503)
    expect((await request(app.baseUrl, "GET", "/healthz")).status).toBe(200)
  } finally {
    await setConnections(true)
  }
  const retried = await api.post("/api/v1/transactions", body, { idempotencyKey: "during-outage" })
  expect(retried.status).toBe(201)
  expect(retried.headers.get("idempotent-replayed")).toBeNull()
  expect(retried.body.transaction.amount_cents).toBe(4_200)
  expect(await app.query("SELECT id FROM payments WHERE idempotency_key = 'during-outage'")).toHaveLength(1)
  expect((await request(app.baseUrl, "GET", "/readyz")).status).toBe(200)
})
