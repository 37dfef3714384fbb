import { Effect, Result } from "effect"
import { type ChildProcess, execFile, execFileSync, spawn } from "node:child_process"
import { resolve } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { ApiError, layerFetch, makeClient } from "../../src/client.ts"
import { freePort } from "../../src/platform/Database.ts"
import { eventually } from "../support/app.ts"
import { freshShellEnv } from "../support/childEnv.ts"
import { freshDatabase } from "../support/database.ts"

// Issue 12, item 5: the typed client and its example, against the real service run as a user
// runs it (`src/main.ts serve` as a child process on 127.0.0.1, PostgreSQL, webhook dispatcher on).

const root = resolve(import.meta.dirname, "../..")
let service: ChildProcess | undefined
let baseUrl = ""
let apiKey = ""

beforeAll(async () => {
  const databaseUrl = await freshDatabase("client_example")
  const env = freshShellEnv({
    DATABASE_URL: databaseUrl,
    RESPONSE_ENCRYPTION_KEY: "ab".repeat(32),
    // The example's webhook receiver listens on 127.0.0.1.
    WEBHOOK_ALLOW_PRIVATE_URLS: "true"
  })
  const created = JSON.parse(
    execFileSync(process.execPath, ["--import", "tsx", "src/main.ts", "merchant", "create", "--name", "Example"], {
      cwd: root,
      env,
      encoding: "utf8"
    })
  )
  apiKey = created.api_key.key
  const port = await freePort()
  service = spawn(process.execPath, ["--import", "tsx", "src/main.ts", "serve"], {
    cwd: root,
    env: { ...env, PORT: String(port) },
    stdio: ["ignore", "ignore", "pipe"]
  })
  let output = ""
  service.stderr!.on("data", (chunk: Buffer) => (output += chunk.toString()))
  baseUrl = `http://127.0.0.1:${port}`
  await eventually(async () => {
    if (service!.exitCode !== null) throw new Error(`the service exited ${service!.exitCode}: ${output}`)
    const ready = await fetch(`${baseUrl}/readyz`).catch(() => null)
    return ready?.status === 200 ? true : undefined
  }, { timeoutMs: 60_000, intervalMs: 100, what: "the service to be ready" })
})
afterAll(() => {
  service?.kill("SIGKILL")
})

describe("examples/create-and-refund.ts", () => {
  it("creates a payment, refunds part of it and verifies the refund webhook's signature", async () => {
    const run = await new Promise<{ code: number | null; stdout: string; stderr: string }>((done) => {
      execFile(
        process.execPath,
        ["--import", "tsx", "examples/create-and-refund.ts"],
        { cwd: root, env: freshShellEnv({ PAYMENTS_BASE_URL: baseUrl, PAYMENTS_API_KEY: apiKey }), timeout: 60_000 },
        (error, stdout, stderr) =>
          done({ code: error === null ? 0 : typeof error.code === "number" ? error.code : null, stdout, stderr })
      )
    })
    expect(run.code, run.stderr).toBe(0)
    expect(run.stdout).toMatch(/^created pay_\w+: captured, 10000 USD$/m)
    expect(run.stdout).toContain("refunded 2500 of 10000: captured")
    expect(run.stdout).toContain("webhook payment.partially_refunded: signature valid; a tampered body is rejected")
    const result = JSON.parse(run.stdout.trim().split("\n").pop()!)
    expect(result).toMatchObject({ refundedCents: 2500, signatureValid: true })

    // What the example did is what the API holds.
    const reply = await fetch(`${baseUrl}/api/v1/transactions/${result.paymentId}`, {
      headers: { authorization: `Bearer ${apiKey}` }
    })
    const { transaction } = (await reply.json()) as { transaction: Record<string, unknown> }
    expect(transaction).toMatchObject({ status: "captured", amount_cents: 10_000, refunded_amount_cents: 2_500 })
    // And it cleaned up after itself.
    const me =
      (await (await fetch(`${baseUrl}/api/v1/merchants/me`, { headers: { authorization: `Bearer ${apiKey}` } }))
        .json()) as { merchant: { webhook_url: string | null } }
    expect(me.merchant.webhook_url).toBeNull()
  })

  it("the client's failures are the CONTRACT errors, typed", async () => {
    const outcome = await Effect.runPromise(
      Effect.gen(function*() {
        const client = yield* makeClient({ baseUrl, apiKey })
        return yield* Effect.result(client.transactions.get({ params: { id: "pay_doesnotexist" } }))
      }).pipe(Effect.provide(layerFetch))
    )
    expect(Result.isFailure(outcome)).toBe(true)
    if (Result.isFailure(outcome)) {
      expect(outcome.failure).toBeInstanceOf(ApiError)
      expect(outcome.failure).toMatchObject({ status: 404, code: "not_found", type: "invalid_request_error" })
    }
    const wrongKey = await Effect.runPromise(
      Effect.gen(function*() {
        const client = yield* makeClient({ baseUrl, apiKey: `sk_live_${"A".repeat(32)}` })
        return yield* Effect.result(client.merchants.me())
      }).pipe(Effect.provide(layerFetch))
    )
    expect(Result.isFailure(wrongKey) && wrongKey.failure).toMatchObject({ status: 401, code: "invalid_api_key" })
  })
})
