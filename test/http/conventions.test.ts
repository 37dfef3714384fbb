import { HttpApi } from "effect/http-api"
import { createHash } from "node:crypto"
import { connect } from "node:net"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { PaymentsApi } from "../../src/http/api/Api.ts"
import { maximumBodyBytes } from "../../src/http/edge/Edge.ts"
import { client, errorOf, rawRequest, request, startApp, type TestApp, transactionBody } from "../support/app.ts"

// CONTRACT sections 1–4: envelopes, errors, status codes, request ids, authentication.

let app: TestApp
let key: string
let api: ReturnType<typeof client>
beforeAll(async () => {
  app = await startApp({ label: "conventions" })
  key = (await app.createMerchant()).key
  api = client(app.baseUrl, key)
})
afterAll(async () => {
  await app?.close()
})

const requestIdPattern = /^req_[A-Za-z0-9_-]+$/

/** Nothing was created: the merchant still has no transactions. */
const transactionCount = async () => (await api.get("/api/v1/transactions")).body.meta.total_count as number

const expectError = (
  reply: { status: number; headers: Headers; body: any; text: string },
  status: number,
  type: string,
  code: string,
  /** A field name, `null` for "no param", or undefined to leave it unchecked. */
  param?: string | null
) => {
  expect(reply.status).toBe(status)
  expect(reply.headers.get("content-type")).toMatch(/^application\/json/)
  const error = errorOf(reply)
  expect(error.type).toBe(type)
  expect(error.code).toBe(code)
  expect(typeof error.message).toBe("string")
  expect(error.message.length).toBeGreaterThan(0)
  expect(error.request_id).toMatch(requestIdPattern)
  expect(error.request_id).toBe(reply.headers.get("x-request-id"))
  if (param === null) expect(error).not.toHaveProperty("param")
  else if (param !== undefined) expect(error.param).toBe(param)
  expect(Object.keys(reply.body)).toEqual(["error"])
  return error
}

describe("request ids", () => {
  it("every response carries a fresh X-Request-Id, successes and failures alike", async () => {
    const other = client(app.baseUrl, (await app.createMerchant()).key)
    const replies = await Promise.all([
      other.get("/api/v1/merchants/me"),
      other.post("/api/v1/transactions", transactionBody()),
      api.get("/api/v1/transactions?per_page=500"),
      api.get("/api/v1/nowhere"),
      request(app.baseUrl, "GET", "/api/v1/merchants/me"),
      api.send("POST", "/api/v1/transactions", { raw: "{", headers: { "content-type": "application/json" } }),
      api.send("POST", "/api/v1/transactions", { raw: "{}", headers: { "content-type": "text/plain" } }),
      request(app.baseUrl, "GET", "/healthz"),
      request(app.baseUrl, "GET", "/api/v1/openapi.json")
    ])
    const ids = replies.map((r) => r.headers.get("x-request-id"))
    for (const id of ids) expect(id).toMatch(requestIdPattern)
    expect(new Set(ids).size).toBe(ids.length)
  })
})

describe("bodies", () => {
  it("answers 400 invalid_json, as JSON, when the body does not parse", async () => {
    for (const raw of ["{", "{\"transaction\": }", "nope", "{\"a\":1}}"]) {
      const reply = await api.send("POST", "/api/v1/transactions", {
        raw,
        headers: { "content-type": "application/json" }
      })
      expectError(reply, 400, "invalid_request_error", "invalid_json", null)
    }
    expect(await transactionCount()).toBe(0)
  })

  it("answers 413 body_too_large over 64 KiB, and reads a body of exactly 64 KiB", async () => {
    const padded = (size: number) => {
      const base = JSON.stringify({ ...transactionBody(), padding: "" })
      return base.replace("\"padding\":\"\"", `"padding":"${"x".repeat(size - base.length)}"`)
    }
    const atLimit = padded(maximumBodyBytes)
    expect(Buffer.byteLength(atLimit)).toBe(64 * 1024)
    const accepted = await api.send("POST", "/api/v1/transactions", {
      raw: atLimit,
      headers: { "content-type": "application/json" }
    })
    // Within the limit the body is read and validated: the padding is an unknown field.
    expectError(accepted, 422, "invalid_request_error", "validation_failed", "padding")

    const over = await api.send("POST", "/api/v1/transactions", {
      raw: padded(maximumBodyBytes + 1),
      headers: { "content-type": "application/json" }
    })
    expectError(over, 413, "invalid_request_error", "body_too_large", null)
    const huge = await api.send("POST", "/api/v1/transactions", {
      raw: "x".repeat(1_000_000),
      headers: { "content-type": "application/json" }
    })
    expectError(huge, 413, "invalid_request_error", "body_too_large", null)
    expect(await transactionCount()).toBe(0)
  })

  it("refuses an oversized chunked body (no Content-Length) without creating anything", async () => {
    const reply = await rawRequest(app.baseUrl, {
      method: "POST",
      path: "/api/v1/transactions",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json", "transfer-encoding": "chunked" },
      chunks: Array.from({ length: 20 }, () => "x".repeat(8 * 1024))
    })
    // The read stops at the limit and the answer closes the connection (test/http/edge-input.test.ts).
    if (!("status" in reply)) throw new Error(reply.error)
    expect(reply.status).toBe(413)
    expect(reply.headers["connection"]).toBe("close")
    expect(JSON.parse(reply.text).error.code).toBe("body_too_large")
    expect(await transactionCount()).toBe(0)
  })

  it("answers 415 unsupported_media_type for a body that is not declared JSON", async () => {
    const body = JSON.stringify(transactionBody())
    for (const type of ["text/plain", "application/x-www-form-urlencoded", "application/jsonp"]) {
      const reply = await api.send("POST", "/api/v1/transactions", { raw: body, headers: { "content-type": type } })
      expectError(reply, 415, "invalid_request_error", "unsupported_media_type", null)
    }
    const patch = await api.send("PATCH", "/api/v1/merchants/me", {
      raw: "{\"name\":\"x\"}",
      headers: { "content-type": "text/plain" }
    })
    expectError(patch, 415, "invalid_request_error", "unsupported_media_type", null)
    expect((await api.get("/api/v1/merchants/me")).body.merchant.name).not.toBe("x")

    const untyped = await rawRequest(app.baseUrl, {
      method: "POST",
      path: "/api/v1/transactions",
      headers: { authorization: `Bearer ${key}`, "content-length": String(Buffer.byteLength(body)) },
      chunks: [body]
    })
    if (!("status" in untyped)) throw new Error(untyped.error)
    expect(untyped.status).toBe(415)
    expect(JSON.parse(untyped.text).error.code).toBe("unsupported_media_type")
    expect(await transactionCount()).toBe(0)
  })

  it("every route that takes a body answers 415 with the JSON envelope for another media type, with a body or without one", async () => {
    const routes: Array<readonly [string, string]> = []
    HttpApi.reflect(PaymentsApi, {
      onGroup: () => {},
      onEndpoint: ({ endpoint }) => {
        if (endpoint.method === "POST" || endpoint.method === "PATCH" || endpoint.method === "PUT") {
          routes.push([endpoint.method, endpoint.path])
        }
      }
    })
    expect(routes.length).toBeGreaterThan(8)
    for (const [method, template] of routes) {
      const path = template.replace(/:[a-z_]+/g, "pay_unknown")
      for (const raw of ["", "{}"]) {
        const reply = await api.send(method, path, { raw, headers: { "content-type": "text/plain" } })
        expect([method, path, raw, reply.status]).toEqual([method, path, raw, 415])
        expectError(reply, 415, "invalid_request_error", "unsupported_media_type", null)
      }
    }
    // Without a Content-Type, an empty body is no body (a refund of the whole remainder). (A
    // merchant of its own: the other tests count this one's transactions.)
    const own = client(app.baseUrl, (await app.createMerchant()).key)
    const payment = (await own.post("/api/v1/transactions", transactionBody())).body.transaction
    const refund = await own.send("POST", `/api/v1/transactions/${payment.id}/refund`, {})
    expect(refund.status).toBe(200)
  })

  it("answers 415 naming Content-Encoding for a compressed body (the API takes plain JSON only) and changes nothing", async () => {
    const own = client(app.baseUrl, (await app.createMerchant()).key)
    const count = async () => (await own.get("/api/v1/transactions")).body.meta.total_count as number
    for (const coding of ["gzip", "deflate", "br"]) {
      const reply = await own.send("POST", "/api/v1/transactions", {
        raw: JSON.stringify(transactionBody()),
        headers: { "content-type": "application/json", "content-encoding": coding }
      })
      expectError(reply, 415, "invalid_request_error", "unsupported_media_type", null)
      expect(errorOf(reply).message).toContain("Content-Encoding")
      expect(errorOf(reply).message).toContain(coding)
    }
    expect(await count()).toBe(0)
    const identity = await own.send("POST", "/api/v1/transactions", {
      raw: JSON.stringify(transactionBody()),
      headers: { "content-type": "application/json", "content-encoding": "identity" }
    })
    expect(identity.status).toBe(201)
    expect(await count()).toBe(1)
  })

  it("answers what the HTTP parser refuses (a malformed request line, headers too large) with the JSON envelope and Connection: close", async () => {
    const { port } = new URL(app.baseUrl)
    const exchange = (bytes: string) =>
      new Promise<string>((done, fail) => {
        const socket = connect(Number(port), "127.0.0.1")
        let text = ""
        socket.on("data", (chunk) => (text += chunk.toString()))
        socket.on("error", fail)
        socket.on("close", () => done(text))
        socket.write(bytes)
      })
    const parse = (text: string) => {
      const [head, body] = text.split("\r\n\r\n")
      const lines = head!.split("\r\n")
      return { statusLine: lines[0], headers: lines.slice(1).map((l) => l.toLowerCase()), body: JSON.parse(body!) }
    }
    const malformed = parse(await exchange("GARBAGE\r\n\r\n"))
    expect(malformed.statusLine).toBe("HTTP/1.1 400 Bad Request")
    expect(malformed.headers).toContain("connection: close")
    expect(malformed.headers).toContain("content-type: application/json")
    expect(malformed.body.error).toMatchObject({ type: "invalid_request_error", code: "malformed_request" })
    expect(malformed.body.error.request_id).toMatch(requestIdPattern)
    const huge = parse(await exchange(`GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ${"a".repeat(40_000)}\r\n\r\n`))
    expect(huge.statusLine).toBe("HTTP/1.1 431 Request Header Fields Too Large")
    expect(huge.headers).toContain("connection: close")
    expect(huge.body.error).toMatchObject({ type: "invalid_request_error", code: "headers_too_large" })
  })

  it("accepts a charset parameter on application/json", async () => {
    const reply = await api.send("POST", "/api/v1/transactions", {
      raw: JSON.stringify(transactionBody({ amount_cents: 150 })),
      headers: { "content-type": "application/json; charset=utf-8" }
    })
    expect(reply.status).toBe(201)
    await api.post(`/api/v1/transactions/${reply.body.transaction.id}/refund`)
  })
})

describe("validation (422 validation_failed with param)", () => {
  const cases: ReadonlyArray<readonly [string, Record<string, unknown>, string]> = [
    ["amount_cents zero", { amount_cents: 0 }, "transaction.amount_cents"],
    ["amount_cents above the maximum", { amount_cents: 100_000_000 }, "transaction.amount_cents"],
    ["amount_cents fractional", { amount_cents: 10.5 }, "transaction.amount_cents"],
    ["amount_cents as a string", { amount_cents: "1000" }, "transaction.amount_cents"],
    ["currency lower-case", { currency: "usd" }, "transaction.currency"],
    ["currency unsupported", { currency: "XYZ" }, "transaction.currency"],
    ["card_token without prefix", { card_token: "visa" }, "transaction.card_token"],
    ["card_token empty body", { card_token: "tok_" }, "transaction.card_token"],
    ["card_token too long", { card_token: `tok_${"a".repeat(65)}` }, "transaction.card_token"],
    ["card_token with a dash", { card_token: "tok_vi-sa" }, "transaction.card_token"],
    ["card_last_four short", { card_last_four: "424" }, "transaction.card_last_four"],
    ["card_last_four letters", { card_last_four: "42a2" }, "transaction.card_last_four"],
    ["card_brand upper-case", { card_brand: "VISA" }, "transaction.card_brand"],
    ["card_brand unknown", { card_brand: "maestro" }, "transaction.card_brand"],
    ["capture_method unknown", { capture_method: "later" }, "transaction.capture_method"],
    ["idempotency_key empty", { idempotency_key: "" }, "transaction.idempotency_key"],
    ["metadata value not a string", { metadata: { n: 1 } }, "transaction.metadata.n"],
    ["metadata value too long", { metadata: { note: "x".repeat(501) } }, "transaction.metadata.note"],
    ["metadata key too long", { metadata: { ["k".repeat(41)]: "v" } }, "transaction.metadata"],
    [
      "metadata with 51 keys",
      { metadata: Object.fromEntries(Array.from({ length: 51 }, (_, i) => [`k${i}`, "v"])) },
      "transaction.metadata"
    ],
    ["an unknown field", { amount: 100 }, "transaction.amount"]
  ]

  it.each(cases)("refuses %s", async (_, fields, param) => {
    const reply = await api.post("/api/v1/transactions", transactionBody(fields as any))
    const error = expectError(reply, 422, "invalid_request_error", "validation_failed")
    expect(error.param?.startsWith(param)).toBe(true)
    expect(error.message).toContain(param.split(".").slice(0, 2).join("."))
  })

  it.each(["amount_cents", "currency", "card_token", "card_last_four", "card_brand"])(
    "requires transaction.%s",
    async (field) => {
      const body = transactionBody()
      delete (body.transaction as Record<string, unknown>)[field]
      const reply = await api.post("/api/v1/transactions", body)
      expectError(reply, 422, "invalid_request_error", "validation_failed", `transaction.${field}`)
    }
  )

  it("accepts the limits themselves: 1 and 99,999,999 cents, 50 metadata keys, 500-character values", async () => {
    const metadata = Object.fromEntries(
      Array.from({ length: 50 }, (_, i) => [`${"k".repeat(38)}${String(i).padStart(2, "0")}`, "v".repeat(500)])
    )
    for (
      const fields of [{ amount_cents: 1 }, { amount_cents: 99_999_999, capture_method: "manual" as const }, {
        metadata
      }]
    ) {
      const reply = await api.post("/api/v1/transactions", transactionBody(fields))
      expect(reply.status).toBe(201)
      expect(reply.body.transaction.amount_cents).toBe(fields.amount_cents ?? 10_000)
      if ("metadata" in fields) expect(reply.body.transaction.metadata).toEqual(metadata)
      if (reply.body.transaction.status === "captured") {
        await api.post(`/api/v1/transactions/${reply.body.transaction.id}/refund`)
      } else await api.post(`/api/v1/transactions/${reply.body.transaction.id}/void`)
    }
  })

  it("refuses an unknown top-level field, a missing transaction and a body that is not an object", async () => {
    expectError(
      await api.post("/api/v1/transactions", { ...transactionBody(), extra: true }),
      422,
      "invalid_request_error",
      "validation_failed",
      "extra"
    )
    expectError(
      await api.post("/api/v1/transactions", {}),
      422,
      "invalid_request_error",
      "validation_failed",
      "transaction"
    )
    const array = await api.post("/api/v1/transactions", [transactionBody()])
    expect(array.status).toBe(422)
    expect(errorOf(array).code).toBe("validation_failed")
    expect(errorOf(array).message).toBe("The request body is missing or is not a JSON object of the documented shape.")
    const missing = await api.post("/api/v1/transactions", undefined)
    expect(missing.status).toBe(422)
    expect(errorOf(missing).message).toBe(
      "The request body is missing or is not a JSON object of the documented shape."
    )
  })

  it("refuses a header key that differs from transaction.idempotency_key, and a malformed header key", async () => {
    const before = await transactionCount()
    const mismatch = await api.post("/api/v1/transactions", transactionBody({ idempotency_key: "idem_a" }), {
      idempotencyKey: "idem_b"
    })
    expectError(mismatch, 422, "invalid_request_error", "validation_failed", "transaction.idempotency_key")
    const tooLong = await api.post("/api/v1/transactions", transactionBody(), { idempotencyKey: "k".repeat(256) })
    expect(tooLong.status).toBe(422)
    expect(errorOf(tooLong).code).toBe("validation_failed")
    expect(errorOf(tooLong).param).toMatch(/idempotency/i)
    expect(await transactionCount()).toBe(before)
  })

  it("none of the refused requests created anything", async () => {
    const all = (await api.get("/api/v1/transactions?per_page=100")).body.transactions as Array<
      { amount_cents: number }
    >
    // Only the accepted ones of this file exist (charset test and the limits test).
    expect(all.map((t) => t.amount_cents).sort((a, b) => a - b)).toEqual([1, 150, 10_000, 99_999_999])
  })
})

describe("routes", () => {
  it("answers unknown routes with a JSON 404, with or without credentials", async () => {
    for (
      const [method, path, withKey] of [
        ["GET", "/api/v1/nothing", true],
        ["GET", "/api/v2/transactions", true],
        ["DELETE", "/api/v1/transaction", true],
        ["GET", "/nothing", false],
        ["POST", "/api/v1/unknown", false]
      ] as const
    ) {
      const reply = await request(app.baseUrl, method, path, withKey ? { key } : {})
      expectError(reply, 404, "invalid_request_error", "not_found", null)
    }
  })

  it("serves health, readiness, metrics, the OpenAPI document and the docs page", async () => {
    const health = await request(app.baseUrl, "GET", "/healthz")
    expect(health.status).toBe(200)
    expect(health.body).toEqual({ status: "ok" })
    const ready = await request(app.baseUrl, "GET", "/readyz")
    expect(ready.status).toBe(200)
    const metrics = await request(app.baseUrl, "GET", "/metrics")
    expect(metrics.status).toBe(200)
    expect(metrics.headers.get("content-type")).toMatch(/^text\/plain/)
    const openapi = await request(app.baseUrl, "GET", "/api/v1/openapi.json")
    expect(openapi.status).toBe(200)
    expect(openapi.body.openapi).toMatch(/^3\.1/)
    for (
      const path of [
        "/api/v1/transactions",
        "/api/v1/transactions/{id}",
        "/api/v1/transactions/{id}/capture",
        "/api/v1/transactions/{id}/refund",
        "/api/v1/transactions/{id}/void",
        "/api/v1/transactions/{id}/events",
        "/api/v1/transactions/{id}/ledger",
        "/api/v1/merchants/me",
        "/api/v1/merchants/me/analytics",
        "/api/v1/merchants/me/balance",
        "/api/v1/api_keys",
        "/api/v1/api_keys/{id}/rotate",
        "/api/v1/fraud/cases",
        "/api/v1/fraud/cases/{id}/review"
      ]
    ) expect(Object.keys(openapi.body.paths)).toContain(path)
    const docs = await request(app.baseUrl, "GET", "/docs")
    expect(docs.status).toBe(200)
    expect(docs.headers.get("content-type")).toMatch(/^text\/html/)
  })

  it("GET / points to the docs: a redirect to /docs, and a body naming both documents", async () => {
    const root = await fetch(`${app.baseUrl}/`, { redirect: "manual" })
    expect(root.status).toBe(302)
    expect(root.headers.get("location")).toBe("/docs")
    expect(root.headers.get("x-request-id")).toMatch(requestIdPattern)
    expect(await root.json()).toMatchObject({ docs: "/docs", openapi: "/api/v1/openapi.json" })
    // A client that follows it lands on the docs page.
    const followed = await request(app.baseUrl, "GET", "/")
    expect(followed.status).toBe(200)
    expect(followed.headers.get("content-type")).toMatch(/^text\/html/)
    // `/` is a GET route like the docs: another method is 405 with Allow.
    const posted = await request(app.baseUrl, "POST", "/", { json: {} })
    expect(posted.status).toBe(405)
    expect(posted.headers.get("allow")).toBe("GET")
  })
})

describe("authentication", () => {
  const protectedRoutes = [
    ["GET", "/api/v1/transactions"],
    ["POST", "/api/v1/transactions"],
    ["GET", "/api/v1/transactions/pay_x"],
    ["POST", "/api/v1/transactions/pay_x/capture"],
    ["POST", "/api/v1/transactions/pay_x/refund"],
    ["POST", "/api/v1/transactions/pay_x/void"],
    ["GET", "/api/v1/transactions/pay_x/events"],
    ["GET", "/api/v1/transactions/pay_x/ledger"],
    ["GET", "/api/v1/merchants/me"],
    ["PATCH", "/api/v1/merchants/me"],
    ["GET", "/api/v1/merchants/me/analytics"],
    ["GET", "/api/v1/merchants/me/balance"],
    ["GET", "/api/v1/api_keys"],
    ["POST", "/api/v1/api_keys"],
    ["POST", "/api/v1/api_keys/key_x/rotate"],
    ["GET", "/api/v1/fraud/cases"],
    ["POST", "/api/v1/fraud/cases/fc_x/review"]
  ] as const

  it.each(protectedRoutes)("%s %s without a key is 401 authentication_required", async (method, path) => {
    const reply = await request(app.baseUrl, method, path, method === "GET" ? {} : { json: {} })
    expectError(reply, 401, "authentication_error", "authentication_required", null)
    // Nothing was sent: the answer asks for a key.
    expect(errorOf(reply).message).toBe("Send an API key as 'Authorization: Bearer sk_live_...'.")
  })

  it("a malformed Authorization header is authentication_required; a well-formed unknown key is invalid_api_key; both say the key is not valid", async () => {
    for (const header of ["Basic dXNlcjpwYXNz", "Bearer", "Bearer not-a-key", `Token ${key}`, "sk_live_abc"]) {
      const reply = await request(app.baseUrl, "GET", "/api/v1/merchants/me", { headers: { authorization: header } })
      expectError(reply, 401, "authentication_error", "authentication_required", null)
      expect(errorOf(reply).message).toMatch(/^The API key is not valid/)
      expect(errorOf(reply).message).not.toMatch(/^Send an API key/)
    }
    const unknown = `sk_live_${"A".repeat(32)}`
    const reply = await client(app.baseUrl, unknown).get("/api/v1/merchants/me")
    expectError(reply, 401, "authentication_error", "invalid_api_key", null)
    expect(errorOf(reply).message).toBe("The API key is not valid: it is unknown or has been revoked.")
    // A one-character change of a real key is just as unknown.
    const altered = key.slice(0, -1) + (key.endsWith("A") ? "B" : "A")
    expectError(
      await client(app.baseUrl, altered).get("/api/v1/merchants/me"),
      401,
      "authentication_error",
      "invalid_api_key",
      null
    )
  })

  it("stores only a SHA-256 hash of each key, never the secret", async () => {
    const rows = await app.query("SELECT * FROM api_keys")
    expect(rows.length).toBeGreaterThan(0)
    const dump = JSON.stringify(await app.query("SELECT * FROM api_keys"))
    expect(dump).not.toContain(key)
    expect(dump).not.toContain(key.slice(8))
    const hash = createHash("sha256").update(key).digest("hex")
    expect(rows.map((r) => r.key_hash)).toContain(hash)
  })
})

describe("rate limit", () => {
  it("answers 429 rate_limited with Retry-After and X-RateLimit headers past the burst, and does not store it as an idempotent answer", async () => {
    const limited = await startApp({ label: "ratelimit", config: { rateLimitPerSecond: 1 } })
    try {
      const merchant = await limited.createMerchant()
      const limitedApi = client(limited.baseUrl, merchant.key)
      // Burst: twice the per-second rate.
      expect((await limitedApi.get("/api/v1/merchants/me")).status).toBe(200)
      expect((await limitedApi.get("/api/v1/merchants/me")).status).toBe(200)
      const reply = await limitedApi.post("/api/v1/transactions", transactionBody(), { idempotencyKey: "limited-1" })
      expectError(reply, 429, "rate_limit_error", "rate_limited", null)
      expect(Number(reply.headers.get("retry-after"))).toBeGreaterThanOrEqual(1)
      expect(reply.headers.get("x-ratelimit-limit")).toBe("1")
      expect(reply.headers.get("x-ratelimit-remaining")).toBe("0")
      expect(await limited.query("SELECT * FROM idempotency_keys")).toEqual([])
      expect(await limited.query("SELECT * FROM payments")).toEqual([])
    } finally {
      await limited.close()
    }
  })

  it("is per instance: behind two instances one key gets each instance's burst (docs/operations.md, Running several instances)", async () => {
    const first = await startApp({ label: "ratelimit_two", config: { rateLimitPerSecond: 1 } })
    const second = await startApp({ databaseUrl: first.databaseUrl, config: { rateLimitPerSecond: 1 } })
    try {
      const merchant = await first.createMerchant()
      const statuses = async (baseUrl: string) => {
        const api = client(baseUrl, merchant.key)
        const answered: Array<number> = []
        for (let i = 0; i < 3; i++) answered.push((await api.get("/api/v1/merchants/me")).status)
        return answered
      }
      // A burst of twice the per-second rate on each: 2 × 2 for the key in all, then 429.
      expect(await statuses(first.baseUrl)).toEqual([200, 200, 429])
      expect(await statuses(second.baseUrl)).toEqual([200, 200, 429])
    } finally {
      await second.close()
      await first.close()
    }
  })
})
