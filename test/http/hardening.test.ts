import * as fc from "fast-check"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { client, errorOf, request, startApp, type TestApp, transactionBody } from "../support/app.ts"

// Hostile input through the real service on PostgreSQL (issue: hardening). Each block is a class
// of bug: a client's bytes are never a database outage, deep JSON never crashes, secrets never
// rest in clear, and refusals are idempotent like every other finished response.

let app: TestApp
let key: string
let api: ReturnType<typeof client>
let paymentId: string
beforeAll(async () => {
  app = await startApp({ label: "hardening" })
  key = (await app.createMerchant("Hardened")).key
  api = client(app.baseUrl, key)
  const created = await api.post("/api/v1/transactions", transactionBody({ capture_method: "manual" }))
  paymentId = created.body.transaction.id
})
afterAll(async () => {
  await app?.close()
})

/** What must not move while hostile requests are refused: every table's row count and the merchant rows. */
const snapshot = async () => {
  const tables = [
    "merchants",
    "api_keys",
    "payments",
    "payment_events",
    "ledger_entries",
    "fraud_cases",
    "webhook_deliveries"
  ]
  const counts: Record<string, number> = {}
  for (const table of tables) counts[table] = Number((await app.query(`SELECT count(*) AS n FROM ${table}`))[0]!.n)
  const merchants = await app.query(
    "SELECT id, name, webhook_url, webhook_secret, updated_at FROM merchants ORDER BY id"
  )
  const payments = await app.query("SELECT id, status, version, metadata FROM payments ORDER BY id")
  const keys = await app.query("SELECT id, name, status FROM api_keys ORDER BY id")
  return { counts, merchants, payments, keys }
}

const idRoutes = [
  ["GET", "/api/v1/transactions/ID"],
  ["GET", "/api/v1/transactions/ID/events"],
  ["GET", "/api/v1/transactions/ID/ledger"],
  ["POST", "/api/v1/transactions/ID/capture"],
  ["POST", "/api/v1/transactions/ID/refund"],
  ["POST", "/api/v1/transactions/ID/void"],
  ["POST", "/api/v1/api_keys/ID/rotate"],
  ["POST", "/api/v1/fraud/cases/ID/review"],
  ["GET", "/api/v1/webhooks/deliveries/ID"],
  ["POST", "/api/v1/webhooks/deliveries/ID/retry"]
] as const

describe("a client's bad bytes are never a database outage", () => {
  const badIds = [
    "whd_%00",
    "pay_%00abc",
    "%00",
    "pay_%01",
    "x%C3%A9",
    "pay_" + "a".repeat(300),
    "pay_%E2%80%AE",
    "pay_'%3B--"
  ]
  it.each(idRoutes.flatMap(([method, path]) => badIds.map((id) => [method, path, id] as const)))(
    "%s %s with id %s: 404 not_found, JSON",
    async (method, path, id) => {
      const before = await snapshot()
      const reply = await api.send(
        method,
        path.replace("ID", id),
        method === "POST" ? { json: path.endsWith("review") ? { status: "false_positive" } : {} } : {}
      )
      expect(reply.status).toBe(404)
      expect(errorOf(reply).code).toBe("not_found")
      expect(await snapshot()).toEqual(before)
    }
  )

  const nul = "a\u0000b"
  it.each(
    [
      ["POST", "/api/v1/api_keys", { name: nul }, "name"],
      ["POST", "/api/v1/api_keys", { name: "\u0007bell" }, "name"],
      ["POST", "/api/v1/api_keys", { name: "\ud800 lone surrogate" }, "name"],
      ["PATCH", "/api/v1/merchants/me", { name: nul }, "name"],
      ["PATCH", "/api/v1/merchants/me", { webhook_url: `https://93.184.215.14/${nul}` }, "webhook_url"],
      ["POST", "/api/v1/transactions", transactionBody({ metadata: { order: nul } }), "transaction.metadata"],
      ["POST", "/api/v1/transactions", transactionBody({ metadata: { [nul]: "x" } }), "transaction.metadata"],
      [
        "POST",
        "/api/v1/transactions",
        transactionBody({ metadata: JSON.parse("{\"__proto__\": \"x\"}") }),
        "transaction.metadata"
      ],
      ["POST", "/api/v1/transactions", transactionBody({ idempotency_key: nul }), "transaction.idempotency_key"],
      ["POST", "/api/v1/transactions", transactionBody({ card_token: `tok_${nul}` }), "transaction.card_token"]
    ] as const
  )("%s %s %j: 422 naming %s, nothing changed", async (method, path, body, param) => {
    const before = await snapshot()
    const reply = await api.send(method, path, { json: body })
    expect(reply.status).toBe(422)
    const error = errorOf(reply)
    expect(error.code).toBe("validation_failed")
    expect(error.param?.startsWith(param)).toBe(true)
    expect(await snapshot()).toEqual(before)
  })

  it("fraud review notes with a NUL: 422 naming notes", async () => {
    const reply = await api.post("/api/v1/fraud/cases/fc_nonexistent/review", {
      status: "false_positive",
      notes: "a\u0000"
    })
    expect(reply.status).toBe(422)
    expect(errorOf(reply).param).toBe("notes")
  })
})

describe("deeply nested or oversized JSON is a 400, not a crash", () => {
  for (const depth of [17, 5_000, 30_000]) {
    it(`a body nested ${depth} levels: 400 invalid_json with a short message`, async () => {
      const body = "[".repeat(depth) + "]".repeat(depth)
      const reply = await request(app.baseUrl, "POST", "/api/v1/transactions", {
        key,
        raw: body,
        headers: { "content-type": "application/json" }
      })
      expect(reply.status).toBe(400)
      const error = errorOf(reply)
      expect(error.code).toBe("invalid_json")
      expect(error.message.length).toBeLessThan(200)
    })
  }

  it("an object nested inside a string does not count; an array of 1,001 items does", async () => {
    const many = JSON.stringify({ transaction: { ...transactionBody().transaction, metadata: { a: "[".repeat(400) } } })
    const fine = await request(app.baseUrl, "POST", "/api/v1/transactions", {
      key,
      raw: many,
      headers: { "content-type": "application/json" }
    })
    expect(fine.status).toBe(201)
    const items = `[${Array.from({ length: 1_001 }, () => "1").join(",")}]`
    const refused = await request(app.baseUrl, "POST", "/api/v1/transactions", {
      key,
      raw: items,
      headers: { "content-type": "application/json" }
    })
    expect(refused.status).toBe(400)
    expect(errorOf(refused).code).toBe("invalid_json")
  })

  it("a parse error never echoes the input", async () => {
    const secretish = "SECRET-INPUT-" + "z".repeat(50)
    const reply = await request(app.baseUrl, "POST", "/api/v1/api_keys", {
      key,
      raw: `{"name": ${secretish}}`,
      headers: { "content-type": "application/json" }
    })
    expect(reply.status).toBe(400)
    expect(reply.text).not.toContain("SECRET-INPUT")
  })
})

describe("idempotency covers refusals made at the edge", () => {
  it.each(
    [
      ["422 validation_failed", { transaction: { amount_cents: -1 } }, undefined, 422],
      ["400 invalid_json", undefined, "{not json", 400]
    ] as const
  )(
    "%s sent twice with one key: the second is the stored answer, replayed byte for byte",
    async (_name, json, raw, status) => {
      const idempotencyKey = `refused-${status}-${Math.random()}`
      const send = () =>
        request(app.baseUrl, "POST", "/api/v1/transactions", {
          key,
          idempotencyKey,
          ...(json === undefined ? { raw: raw!, headers: { "content-type": "application/json" } } : { json })
        })
      const first = await send()
      const second = await send()
      expect(first.status).toBe(status)
      expect(first.headers.get("idempotent-replayed")).toBeNull()
      expect(second.status).toBe(status)
      expect(second.text).toBe(first.text)
      expect(second.headers.get("idempotent-replayed")).toBe("true")
      // The same key with another request is a reuse.
      const other = await api.post("/api/v1/transactions", transactionBody(), { idempotencyKey })
      expect(other.status).toBe(422)
      expect(errorOf(other).code).toBe("idempotency_key_reused")
    }
  )
})

describe("no secret at rest in clear", () => {
  it("after creating and rotating keys and the webhook secret (with idempotency keys), no secret is in any table; replays still answer it", async () => {
    const owner = await app.createMerchant("Secrets")
    const mine = client(app.baseUrl, owner.key)
    const created = await mine.post("/api/v1/api_keys", { name: "ci" }, { idempotencyKey: "key-create-1" })
    expect(created.status).toBe(201)
    const rotated = await mine.post(`/api/v1/api_keys/${created.body.api_key.id}/rotate`, {}, {
      idempotencyKey: "key-rotate-1"
    })
    expect(rotated.status).toBe(201)
    const secret = await mine.post("/api/v1/webhooks/secret/rotate", {}, { idempotencyKey: "secret-rotate-1" })
    expect(secret.status).toBe(200)
    const secrets = [created.body.api_key.key, rotated.body.api_key.key, secret.body.merchant.webhook_secret] as Array<
      string
    >
    expect(secrets.every((s) => typeof s === "string" && s.length > 20)).toBe(true)

    // A dump: every row of every table of ours, as text.
    const tables = await app.query<{ table_name: string }>(
      "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
    )
    let dump = ""
    for (const { table_name } of tables) {
      for (const row of await app.query(`SELECT row_to_json(t)::text AS row FROM "${table_name}" t`)) {
        dump += `${row.row}\n`
      }
    }
    expect(dump).toContain("sealed:v1:")
    // The webhook secret too: the merchant's row holds it sealed (docs/operations.md).
    for (const s of secrets) expect(dump).not.toContain(s)
    expect(dump).not.toContain("whsec_")
    const storedResponses = (await app.query("SELECT response_body::text AS body FROM idempotency_keys")).map((r) =>
      String(r.body)
    ).join("\n")
    for (const s of secrets) expect(storedResponses).not.toContain(s)

    // Replays answer the first responses byte for byte.
    const again = await mine.post("/api/v1/api_keys", { name: "ci" }, { idempotencyKey: "key-create-1" })
    expect(again.text).toBe(created.text)
    expect(again.headers.get("idempotent-replayed")).toBe("true")
    const secretAgain = await mine.post("/api/v1/webhooks/secret/rotate", {}, { idempotencyKey: "secret-rotate-1" })
    expect(secretAgain.text).toBe(secret.text)
  })
})

/** Every UTF-8 byte percent-encoded (lone surrogates included, as U+FFFD): any string fits a URL. */
const percentEncoded = (text: string) =>
  [...Buffer.from(text, "utf8")].map((b) => `%${b.toString(16).padStart(2, "0")}`).join("")

describe("fuzz: malformed requests to every route", () => {
  const writeRoutes = [
    ["POST", "/api/v1/transactions"],
    ["POST", `/api/v1/transactions/PAY/capture`],
    ["POST", `/api/v1/transactions/PAY/refund`],
    ["POST", `/api/v1/transactions/PAY/void`],
    ["PATCH", "/api/v1/merchants/me"],
    ["POST", "/api/v1/api_keys"],
    ["POST", "/api/v1/webhooks/test"],
    ["POST", "/api/v1/fraud/cases/fc_x/review"]
  ] as const
  const readRoutes = [
    "/api/v1/transactions",
    "/api/v1/fraud/cases",
    "/api/v1/webhooks/deliveries",
    "/api/v1/api_keys",
    "/api/v1/merchants/me/analytics"
  ]
  const nasty = fc.oneof(
    fc.constantFrom(
      "\u0000",
      "\u0001",
      "\u001f",
      "\u007f",
      "\ud800",
      "\udfff",
      "%00",
      "'; DROP TABLE payments; --",
      "__proto__",
      "constructor"
    ),
    fc.string({ maxLength: 20 }),
    fc.fullUnicodeString({ maxLength: 10 })
  )
  const hugeNumber = fc.constantFrom(
    "1e309",
    "-1e309",
    "9007199254740993",
    "1e-400",
    "-0",
    "1.5",
    "99999999999999999999999999"
  )
  const body = fc.oneof(
    nasty.map((text) =>
      JSON.stringify({
        transaction: { ...transactionBody().transaction, metadata: { [text]: text }, card_token: `tok_${text}` }
      })
    ),
    hugeNumber.map((n) =>
      `{"transaction":{"amount_cents":${n},"currency":"USD","card_token":"tok_visa","card_last_four":"4242","card_brand":"visa","bogus":1}}`
    ),
    fc.integer({ min: 17, max: 3_000 }).map((depth) => "{\"a\":".repeat(depth) + "1" + "}".repeat(depth)),
    nasty.map((text) => JSON.stringify({ name: text, __proto__x: 1, [`${text}x`]: text })),
    nasty.map((text) => `{"__proto__": {"polluted": ${JSON.stringify(text)}}, "name": 5}`),
    nasty.map((text) => JSON.stringify({ status: text, notes: `${text}\u0000` })),
    nasty.map((text) => JSON.stringify({ event_type: text })),
    nasty.map((text) => JSON.stringify({ amount_cents: text })),
    fc.string({ maxLength: 50 }).map((text) => `{${text}`)
  )
  const query = fc.tuple(
    fc.constantFrom("page", "per_page", "status", "from", "to", "min_amount", "max_amount", "bogus"),
    nasty
  )
    .map(([name, value]) => `${name}=${percentEncoded(value)}`)

  it("2,000 seeded malformed requests: never a 5xx, always a JSON error, nothing changed", async () => {
    const before = await snapshot()
    const statuses = new Map<number, number>()
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(
          fc.tuple(
            fc.constantFrom(...writeRoutes),
            body,
            fc.option(nasty.filter((k) => /^[\x20-\x7e]{1,255}$/.test(k)))
          ).map(([[method, path], text, idem]) => ({ method, path, text, idem, query: "" })),
          fc.tuple(fc.constantFrom(...readRoutes), query).map(([path, q]) => ({
            method: "GET",
            path,
            text: undefined,
            idem: null,
            query: q
          })),
          fc.tuple(fc.constantFrom(...idRoutes), nasty).map(([[method, path], id]) => ({
            method,
            path: path.replace("ID", percentEncoded(id) || "%00"),
            text: method === "POST" ? "{}" : undefined,
            idem: null,
            query: ""
          }))
        ),
        async ({ method, path, text, idem, query: q }) => {
          const reply = await request(
            app.baseUrl,
            method,
            `${path.replace("PAY", paymentId)}${q === "" ? "" : `?${q}`}`,
            {
              key,
              ...(text === undefined ? {} : { raw: text, headers: { "content-type": "application/json" } }),
              ...(idem === null ? {} : { idempotencyKey: `fuzz-${idem}` })
            }
          )
          statuses.set(reply.status, (statuses.get(reply.status) ?? 0) + 1)
          if (reply.status >= 500) throw new Error(`${method} ${path} ${q} ${text}: ${reply.status} ${reply.text}`)
          if (reply.status >= 400) expect(errorOf(reply).request_id).toMatch(/^req_/)
        }
      ),
      { numRuns: 2_000, seed: 20261122 }
    )
    const after = await snapshot()
    expect(after).toEqual(before)
    expect([...statuses.keys()].every((s) => s < 500)).toBe(true)
    expect(({} as Record<string, unknown>).polluted).toBeUndefined()
  }, 120_000)
})
