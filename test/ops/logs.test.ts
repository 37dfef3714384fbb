import { Effect, Logger, References } from "effect"
import { createServer, type Server } from "node:http"
import { afterAll, describe, expect, it } from "vitest"
import type { StoreShape } from "../../src/store/Store.ts"
import { client, eventually, request, startApp, transactionBody } from "../support/app.ts"
import { freshDatabase } from "../support/database.ts"
import { createMerchantWithCli, killServices, startService } from "../support/service.ts"

// Issue 12 item 2: one log stream, structured; a request line with its id; no secret, ever.

const servers: Array<Server> = []
afterAll(() => {
  killServices()
  for (const server of servers) server.close()
})

/** A webhook endpoint on loopback that answers 200 and counts what it received. */
const receiver = async () => {
  const received: Array<string> = []
  const server = createServer((req, res) => {
    let body = ""
    req.on("data", (c: Buffer) => (body += c.toString()))
    req.on("end", () => {
      received.push(body)
      res.writeHead(200).end("ok")
    })
  })
  servers.push(server)
  await new Promise<void>((done) => server.listen(0, "127.0.0.1", done))
  const address = server.address()
  if (typeof address !== "object" || address === null) throw new Error("no address")
  return { url: `http://127.0.0.1:${address.port}/hooks`, received }
}

describe("the service's log (a child process, as an operator runs it)", () => {
  it("is one JSON object per line, one line per request with its request id, and never holds a key, a secret or a card token", async () => {
    const databaseUrl = await freshDatabase("logs")
    const created = createMerchantWithCli(databaseUrl, "Logs")
    const firstKey = created.api_key.key
    const hooks = await receiver()
    const service = await startService(databaseUrl, { WEBHOOK_ALLOW_PRIVATE_URLS: "true" })
    const secrets = new Set<string>([firstKey, created.merchant.webhook_secret])
    const requestIds: Array<string> = []
    const send = async (
      method: string,
      path: string,
      key: string | null,
      json?: unknown,
      headers: Record<string, string> = {}
    ) => {
      const reply = await request(service.baseUrl, method, path, {
        key,
        ...(json === undefined ? {} : { json }),
        headers
      })
      requestIds.push(reply.headers.get("x-request-id")!)
      return reply
    }

    // A full scenario: every kind of secret goes through the service.
    expect((await send("PATCH", "/api/v1/merchants/me", firstKey, { webhook_url: hooks.url })).status).toBe(200)
    const me = await send("GET", "/api/v1/merchants/me", firstKey)
    secrets.add(me.body.merchant.webhook_secret)
    const tokens = [
      "tok_visa",
      "tok_decline_do_not_honor",
      "tok_risk_review",
      "tok_risk_highest",
      "tok_customer_4242abcd"
    ]
    const paymentIds: Array<string> = []
    for (const card_token of tokens) {
      const reply = await send("POST", "/api/v1/transactions", firstKey, transactionBody({ card_token }), {
        "x-idempotency-key": `logs-${card_token}`
      })
      expect(reply.status).toBe(201)
      paymentIds.push(reply.body.transaction.id)
      // The replay, from the stored response.
      expect(
        (await send("POST", "/api/v1/transactions", firstKey, transactionBody({ card_token }), {
          "x-idempotency-key": `logs-${card_token}`
        })).status
      ).toBe(201)
    }
    const manual = await send(
      "POST",
      "/api/v1/transactions",
      firstKey,
      transactionBody({ card_token: "tok_manual_secret", capture_method: "manual" })
    )
    expect((await send("POST", `/api/v1/transactions/${manual.body.transaction.id}/void`, firstKey)).status).toBe(200)
    expect((await send("POST", `/api/v1/transactions/${paymentIds[0]}/refund`, firstKey, { amount_cents: 100 })).status)
      .toBe(200)
    // Bad input carrying secrets: malformed JSON, a token that breaks the rules, an unknown key.
    expect(
      (await request(service.baseUrl, "POST", "/api/v1/transactions", {
        key: firstKey,
        raw: `{"transaction": {"card_token": "tok_broken_json_value", `,
        headers: { "content-type": "application/json" }
      }).then((r) => (requestIds.push(r.headers.get("x-request-id")!), r))).status
    ).toBe(400)
    expect(
      (await send("POST", "/api/v1/transactions", firstKey, transactionBody({ card_token: `tok_${"x".repeat(80)}` })))
        .status
    ).toBe(422)
    expect((await send("GET", "/api/v1/merchants/me", `sk_live_${"Z".repeat(40)}`)).status).toBe(401)
    // A new key, then a rotation: the old one is refused from then on.
    const newKey = await send("POST", "/api/v1/api_keys", firstKey, { name: "second" })
    expect(newKey.status).toBe(201)
    secrets.add(newKey.body.api_key.key)
    const rotated = await send("POST", `/api/v1/api_keys/${newKey.body.api_key.id}/rotate`, firstKey)
    expect(rotated.status).toBe(201)
    secrets.add(rotated.body.api_key.key)
    expect((await send("GET", "/api/v1/merchants/me", newKey.body.api_key.key)).status).toBe(401)
    const rotatedSecret = await send("POST", "/api/v1/webhooks/secret/rotate", firstKey)
    expect(rotatedSecret.status).toBe(200)
    secrets.add(JSON.stringify(rotatedSecret.body).match(/whsec_[A-Za-z0-9_-]+/)![0])
    // Webhooks go out (signed with those secrets) before the service stops.
    await eventually(async () => (hooks.received.length >= 5 ? true : undefined), {
      timeoutMs: 30_000,
      what: "webhooks"
    })
    service.child.kill("SIGTERM")
    expect(await service.exited).toBe(0)

    const lines = service.stderr().split("\n").filter((line) => line !== "")
    const entries = lines.map((line) => {
      try {
        return JSON.parse(line) as {
          message: string
          logLevel: string
          timestamp: string
          annotations: Record<string, unknown>
        }
      } catch {
        throw new Error(`not a JSON line: ${line}`)
      }
    })
    for (const entry of entries) {
      expect(typeof entry.message).toBe("string")
      expect(entry.timestamp).toMatch(/^\d{4}-\d\d-\d\dT/)
    }
    // One request line per request, carrying the id the client got, with method, route, status, latency.
    const requestLines = entries.filter((e) => typeof e.annotations.route === "string")
    expect(requestLines.map((e) => e.annotations.request_id)).toEqual(expect.arrayContaining(requestIds))
    for (const id of requestIds) expect(requestLines.filter((e) => e.annotations.request_id === id)).toHaveLength(1)
    const create = requestLines.find((e) => e.annotations.request_id === requestIds[2])!
    expect(create.annotations).toMatchObject({ method: "POST", route: "/api/v1/transactions", status: 201 })
    expect(typeof create.annotations.latency_ms).toBe("number")
    expect(requestLines.find((e) => e.annotations.request_id === requestIds[requestIds.length - 1])!.annotations.route)
      .toBe("/api/v1/webhooks/secret/rotate")
    // The stop is logged.
    expect(entries.some((e) => /shut/i.test(e.message))).toBe(true)

    // No secret, token or key in any line: neither the values used nor anything shaped like one.
    const text = lines.join("\n")
    for (const secret of [...secrets, ...tokens, "tok_manual_secret", "tok_broken_json_value"]) {
      expect(text).not.toContain(secret)
    }
    expect(text).not.toMatch(/sk_live_(?!\[redacted\])/)
    expect(text).not.toMatch(/whsec_(?!\[redacted\])/)
    expect(text).not.toMatch(/(?<![A-Za-z0-9])tok_(?!\[redacted\])/)
  })
})

describe("lines logged within a request (in-process, logger captured)", () => {
  it("carry the request's id", async () => {
    const lines: Array<{ message: unknown; annotations: Record<string, unknown> }> = []
    const capture = Logger.make(({ fiber, message }) => {
      lines.push({ message, annotations: { ...fiber.getRef(References.CurrentLogAnnotations) } })
    })
    // A defect in the store while serving: the edge logs it (500) within the request.
    const failingList = (store: StoreShape): StoreShape => ({
      ...store,
      listPayments: () => Effect.die(new Error("boom with tok_leaky_token"))
    })
    const app = await startApp({ label: "log_context", logger: capture, wrapStore: failingList })
    try {
      const api = client(app.baseUrl, (await app.createMerchant()).key)
      const reply = await api.get("/api/v1/transactions")
      expect(reply.status).toBe(500)
      const requestId = reply.headers.get("x-request-id")
      const ofRequest = lines.filter((l) => l.annotations.request_id === requestId)
      expect(ofRequest.map((l) => String(l.message))).toEqual([
        "request failed with a defect",
        "GET /api/v1/transactions 500"
      ])
    } finally {
      await app.close()
    }
  })
})
