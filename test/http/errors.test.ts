import { Effect, Result, type SchemaAST as AST } from "effect"
import { HttpApi } from "effect/http-api"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { PaymentsApi } from "../../src/http/api/Api.ts"
import { ruleOf } from "../../src/http/api/Schemas.ts"
import { jsonShapeProblem } from "../../src/http/edge/JsonShape.ts"
import { appConfig } from "../../src/platform/Config.ts"
import { client, errorOf, request, startApp, type TestApp, transactionBody } from "../support/app.ts"

// Issue 12, item 3: every refusal says what is valid, in a merchant's (or an operator's) words.

let app: TestApp
let key: string
let api: ReturnType<typeof client>
beforeAll(async () => {
  app = await startApp({ label: "errors" })
  key = (await app.createMerchant()).key
  api = client(app.baseUrl, key)
})
afterAll(async () => {
  await app?.close()
})

const paymentCount = async () => Number((await app.query("SELECT count(*) AS n FROM payments"))[0]!.n)

const expect422 = (
  reply: { status: number; headers: Headers; body: any; text: string },
  param: string,
  message: string
) => {
  expect(reply.status, reply.text).toBe(422)
  expect(errorOf(reply)).toMatchObject({ type: "invalid_request_error", code: "validation_failed", param, message })
}

describe("422 names the field and its rule, listing the allowed values", () => {
  it.each(
    [
      [
        { capture_method: "later" },
        "transaction.capture_method",
        `transaction.capture_method must be one of "automatic", "manual".`
      ],
      [
        { currency: "usd" },
        "transaction.currency",
        `transaction.currency must be one of "USD", "EUR", "GBP", "CAD", "AUD", "JPY".`
      ],
      [
        { currency: 840 },
        "transaction.currency",
        `transaction.currency must be one of "USD", "EUR", "GBP", "CAD", "AUD", "JPY".`
      ],
      [
        { card_brand: "maestro" },
        "transaction.card_brand",
        `transaction.card_brand must be one of "visa", "mastercard", "amex", "discover", "jcb", "diners", "unionpay".`
      ],
      [
        { amount_cents: "1000" },
        "transaction.amount_cents",
        "transaction.amount_cents must be an integer number of cents between 1 and 99999999."
      ],
      [
        { amount_cents: 10.5 },
        "transaction.amount_cents",
        "transaction.amount_cents must be an integer number of cents between 1 and 99999999."
      ],
      [
        { metadata: { ["k".repeat(41)]: "v" } },
        "transaction.metadata",
        `transaction.metadata keys are at most 40 characters; one has 41 ("${"k".repeat(40)}…").`
      ],
      [
        { metadata: { order: 7 } },
        "transaction.metadata.order",
        "transaction.metadata.order must be a string of at most 500 characters."
      ],
      [{ metadata: { "": "v" } }, "transaction.metadata", "transaction.metadata keys must not be empty."],
      [
        { metadata: "order 7" },
        "transaction.metadata",
        "transaction.metadata must be an object of string keys and string values."
      ],
      [
        { amout_cents: 5 },
        "transaction.amout_cents",
        `transaction.amout_cents is not a recognised field; the fields here are "amount_cents", "currency", "card_token", "card_last_four", "card_brand", "idempotency_key", "metadata", "capture_method".`
      ]
    ] as const
  )("create %j", async (fields, param, message) => {
    const before = await paymentCount()
    expect422(await api.post("/api/v1/transactions", transactionBody(fields as any)), param, message)
    expect(await paymentCount()).toBe(before)
  })

  it.each([
    ["/api/v1/transactions?per_page=abc", "per_page", "per_page must be an integer between 1 and 100."],
    ["/api/v1/transactions?per_page=101", "per_page", "per_page must be an integer between 1 and 100."],
    ["/api/v1/transactions?page=0", "page", "page must be an integer of at least 1."],
    [
      "/api/v1/transactions?status=done",
      "status",
      `status must be one of "pending", "authorized", "captured", "settled", "refunded", "voided", "blocked", "failed".`
    ],
    ["/api/v1/fraud/cases?priority=urgent", "priority", `priority must be one of "low", "medium", "high", "critical".`],
    [
      "/api/v1/webhooks/deliveries?status=done",
      "status",
      `status must be one of "pending", "retrying", "succeeded", "failed".`
    ],
    ["/api/v1/api_keys?per_page=x", "per_page", "per_page must be an integer between 1 and 100."]
  ])("GET %s", async (path, param, message) => {
    expect422(await api.get(path), param, message)
  })

  it("a review status lists the allowed ones; an unknown event type lists them all", async () => {
    expect422(
      await api.post("/api/v1/fraud/cases/fc_x/review", { status: "open" }),
      "status",
      `status must be one of "confirmed_fraud", "false_positive".`
    )
    const reply = await api.post("/api/v1/webhooks/test", { event_type: "payment.done" })
    expect(reply.status).toBe(422)
    expect(errorOf(reply).param).toBe("event_type")
    expect(errorOf(reply).message).toMatch(
      /^event_type must be one of "payment\.initiated", .*"payment\.refund_failed"\.$/
    )
  })

  it("a merchant's name and webhook_url say the type they take", async () => {
    expect422(
      await api.patch("/api/v1/merchants/me", { name: 5 }),
      "name",
      "name must be a string of 1 to 200 characters, without control characters."
    )
    expect422(
      await api.patch("/api/v1/merchants/me", { webhook_url: 5 }),
      "webhook_url",
      "webhook_url must be an absolute http or https URL of at most 2048 characters without control characters, or null."
    )
  })

  it("every field of every payload and query carries its rule (no parser wording can reach a merchant)", () => {
    const missing: Array<string> = []
    const isAbsent = (ast: AST.AST) => ast._tag === "Undefined" || ast._tag === "Null"
    /**
     * The field's schema says its rule itself (the rule annotation), or each of its alternatives
     * does; a declaration words its own, and so does an open value whose own check words each
     * problem (metadata, checked on the object as sent).
     */
    const wordsItsOwn = (ast: AST.AST) =>
      ast._tag === "Declaration" || (ast._tag === "Unknown" && (ast.checks?.length ?? 0) > 0)
    const hasRule = (ast: AST.AST): boolean =>
      ruleOf(ast) !== undefined || wordsItsOwn(ast) ||
      (ast._tag === "Union" &&
        ast.types.filter((member) => !isAbsent(member)).every((member) => hasRule(member) || member._tag === "Objects"))
    const visit = (ast: AST.AST, path: string): void => {
      if (ast._tag === "Union") {
        return ast.types.filter((member) => !isAbsent(member)).forEach((member) => visit(member, path))
      }
      if (ast._tag !== "Objects") return
      for (const property of ast.propertySignatures) {
        const field = `${path}.${String(property.name)}`
        const members = property.type._tag === "Union" && !hasRule(property.type)
          ? property.type.types.filter((member) => !isAbsent(member))
          : [property.type]
        for (const member of members) {
          if (member._tag === "Objects") visit(member, field)
          else if (!hasRule(member)) missing.push(field)
        }
      }
    }
    let endpoints = 0
    HttpApi.reflect(PaymentsApi, {
      onGroup: () => {},
      onEndpoint: ({ endpoint }) => {
        endpoints++
        for (const entry of endpoint.payload.values()) {
          if ("schemas" in entry) {
            for (const schema of entry.schemas) visit(schema.ast, `${endpoint.identifier} payload`)
          }
        }
        if (endpoint.query !== undefined) visit(endpoint.query.ast, `${endpoint.identifier} query`)
      }
    })
    expect(endpoints).toBeGreaterThan(20)
    expect(missing).toEqual([])
  })
})

describe("405 for a known path with another method", () => {
  it.each([
    ["DELETE", "/api/v1/transactions", "GET, POST"],
    ["PUT", "/api/v1/merchants/me", "GET, PATCH"],
    ["GET", "/api/v1/transactions/pay_x/refund", "POST"],
    ["POST", "/api/v1/transactions/pay_x", "GET"],
    ["POST", "/healthz", "GET"],
    ["DELETE", "/api/v1/openapi.json", "GET"]
  ])("%s %s answers 405 with Allow: %s and the error envelope", async (method, path, allow) => {
    const reply = await request(app.baseUrl, method, path, {
      key,
      ...(method === "GET" || method === "DELETE" ? {} : { json: {} })
    })
    expect(reply.status).toBe(405)
    expect(reply.headers.get("allow")).toBe(allow)
    expect(reply.headers.get("content-type")).toMatch(/^application\/json/)
    const error = errorOf(reply)
    expect(error).toMatchObject({
      type: "invalid_request_error",
      code: "method_not_allowed",
      message: `${method} is not allowed on ${path}; it accepts ${allow}.`
    })
    expect(error.request_id).toBe(reply.headers.get("x-request-id"))
  })

  it("an unknown path stays 404", async () => {
    const reply = await request(app.baseUrl, "DELETE", "/api/v1/nothing", { key })
    expect(reply.status).toBe(404)
    expect(reply.headers.get("allow")).toBeNull()
    expect(errorOf(reply).code).toBe("not_found")
  })
})

describe("a JSON body with a repeated key is 400 invalid_json naming the key", () => {
  const raw = (text: string) =>
    api.send("POST", "/api/v1/transactions", { raw: text, headers: { "content-type": "application/json" } })
  const fields = `"currency":"USD","card_token":"tok_visa","card_last_four":"4242","card_brand":"visa"`

  it.each([
    [
      `{"transaction":{"amount_cents":1,"amount_cents":2,${fields}}}`,
      `the key "amount_cents" appears more than once in the object at transaction.`
    ],
    [
      `{"transaction":{"amount_cents":1,${fields}},"transaction":{}}`,
      `the key "transaction" appears more than once in the same object.`
    ],
    [
      `{"transaction":{"amount_cents":1,"\\u0061mount_cents":2,${fields}}}`,
      `the key "amount_cents" appears more than once in the object at transaction.`
    ],
    [
      `{"transaction":{"amount_cents":1,${fields},"metadata":{"a":"x","b":"y","a":"z"}}}`,
      `the key "a" appears more than once in the object at transaction.metadata.`
    ]
  ])("%s", async (text, detail) => {
    const before = await paymentCount()
    const reply = await raw(text)
    expect(reply.status).toBe(400)
    expect(errorOf(reply)).toMatchObject({
      type: "invalid_request_error",
      code: "invalid_json",
      message: `The request body is not valid JSON: ${detail}`
    })
    expect(await paymentCount()).toBe(before)
  })

  it("the same key in different objects, or as a string value, is no repetition", async () => {
    const reply = await raw(
      `{"transaction":{"amount_cents":150,${fields},"metadata":{"currency":"amount_cents","card_brand":"x"}}}`
    )
    expect(reply.status, reply.text).toBe(201)
    await api.post(`/api/v1/transactions/${reply.body.transaction.id}/refund`)
  })

  it("the scan: keys inside strings, arrays of objects, escapes", () => {
    expect(jsonShapeProblem(`{"a":"{\\"a\\":1,\\"a\\":2}"}`)).toBeNull()
    expect(jsonShapeProblem(`[{"a":1},{"a":1}]`)).toBeNull()
    expect(jsonShapeProblem(`[{"a":1},{"a":1,"a":2}]`)).toBe(`the key "a" appears more than once in the object at 1.`)
    expect(jsonShapeProblem(`{"x":[[{"k":1}],{"k":1,"k":1}]}`)).toBe(
      `the key "k" appears more than once in the object at x.1.`
    )
    expect(jsonShapeProblem(`{"a\\"b":1,"a\\"b":2}`)).toBe(`the key "a\\"b" appears more than once in the same object.`)
    expect(jsonShapeProblem(`{"a":{"b":1},"b":2}`)).toBeNull()
  })
})

describe("configuration errors name the variable and its rule", () => {
  const configFrom = (env: Record<string, string>) => Effect.runSync(Effect.result(appConfig(env)))

  it.each([
    [
      { FRAUD_REVIEW_THRESHOLD: "abc" },
      "FRAUD_REVIEW_THRESHOLD must be a number between 0 and 1, such as 0.5, got 'abc'"
    ],
    [{ FRAUD_REVIEW_THRESHOLD: "2" }, "FRAUD_REVIEW_THRESHOLD must be a number between 0 and 1, such as 0.5, got '2'"],
    [{ FRAUD_REVIEW_THRESHOLD: "0.9" }, "FRAUD_REVIEW_THRESHOLD (0.9) must be below FRAUD_BLOCK_THRESHOLD (0.8)"],
    [{ PORT: "http" }, "PORT must be an integer between 1 and 65535, got 'http'"],
    [{ RATE_LIMIT_PER_SECOND: "0" }, "RATE_LIMIT_PER_SECOND must be an integer between 1 and 1000000000, got '0'"],
    [{ WEBHOOK_ALLOW_PRIVATE_URLS: "maybe" }, "WEBHOOK_ALLOW_PRIVATE_URLS must be true or false, got 'maybe'"],
    [{ WEBHOOK_TIMEOUT: "30 seconds" }, "WEBHOOK_TIMEOUT must be a duration such as 30s, 5m or 24h, got '30 seconds'"],
    [
      { DATABASE_STATEMENT_TIMEOUT: "0s" },
      "DATABASE_STATEMENT_TIMEOUT must be a duration from 100ms to 1h, such as 3s, got '0s'"
    ],
    [
      { DATABASE_CONNECT_TIMEOUT: "2 seconds" },
      "DATABASE_CONNECT_TIMEOUT must be a duration from 100ms to 10m, such as 2s, got '2 seconds'"
    ],
    [{ SETTLEMENT_CUTOFF: "24:00" }, "SETTLEMENT_CUTOFF must be a time of day HH:MM (UTC), such as 00:00, got '24:00'"],
    [
      { RESPONSE_ENCRYPTION_KEY: "secret-ish" },
      "RESPONSE_ENCRYPTION_KEY must be 64 hexadecimal characters (32 bytes; e.g. openssl rand -hex 32)"
    ]
  ])("%j", (env, rule) => {
    const result = configFrom(env)
    expect(Result.isFailure(result)).toBe(true)
    if (Result.isFailure(result)) {
      expect(result.failure._tag).toBe("ConfigurationError")
      expect(result.failure.message).toBe(`invalid configuration: ${rule}`)
      expect(result.failure.message).not.toContain("Invalid data at")
    }
  })

  it("a secret is never echoed; several problems are all named", () => {
    const secret = configFrom({ RESPONSE_ENCRYPTION_KEY: "secret-ish" })
    expect(Result.isFailure(secret) && secret.failure.message.includes("secret-ish")).toBe(false)
    const both = configFrom({ FRAUD_REVIEW_THRESHOLD: "x", PORT: "0" })
    expect(Result.isFailure(both) && both.failure.message).toContain("FRAUD_REVIEW_THRESHOLD must be")
    expect(Result.isFailure(both) && both.failure.message).toContain("PORT must be")
  })
})
