import { Effect, Layer, Logger, Redacted } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { verifyWebhookSignature } from "../../src/client.ts"
import type { Delivery } from "../../src/domain/Webhook.ts"
import { ApiKeys } from "../../src/services/ApiKeys.ts"
import { Merchants } from "../../src/services/Merchants.ts"
import { Webhooks } from "../../src/services/Webhooks.ts"
import { WebhookStore } from "../../src/store/WebhookStore.ts"
import { client, createTransaction, startApp, type TestApp } from "../support/app.ts"
import { pgStoreLayer, testEncryptionKey } from "../support/database.ts"
import { answer, engineLayer, eventually, startReceiver } from "./support.ts"

/**
 * The webhook signing secret at rest in PostgreSQL: sealed under RESPONSE_ENCRYPTION_KEY (the
 * tests' key, `testEncryptionKey`), opened to sign and to show it to its merchant, and useless to
 * a copy of the database read under any other key.
 */

const otherKey = Redacted.make("cd".repeat(32))

let app: TestApp
let receiver: Awaited<ReturnType<typeof startReceiver>>

beforeAll(async () => {
  app = await startApp({ label: "secrets_at_rest", config: { webhookAllowPrivateUrls: true } })
  receiver = await startReceiver(answer(200))
})

afterAll(async () => {
  await app?.close()
  await receiver?.close()
})

/** Every text of the merchants table, as a dump would hold it. */
const merchantsDump = async () =>
  (await app.query("SELECT row_to_json(m)::text AS row FROM merchants m")).map((r) => String(r.row)).join("\n")

/**
 * Runs a webhook dispatcher over the app's database whose store opens secrets under `key`, until
 * `done` holds for the merchant's deliveries (real I/O: a receiver on 127.0.0.1 and PostgreSQL).
 * Each one its own seed: its ids (a test event's, so its delivery's) are new.
 */
let dispatchers = 0
const dispatchUntil = (
  merchantId: string,
  key: Redacted.Redacted<string>,
  done: (deliveries: ReadonlyArray<Delivery>) => boolean,
  before: Effect.Effect<unknown, unknown, Webhooks> = Effect.void
) => {
  const dispatcher = engineLayer(
    pgStoreLayer(app.databaseUrl, { responseEncryptionKey: key }),
    { webhookAllowPrivateUrls: true },
    { pollIntervalMs: 20 },
    ++dispatchers
  )
  const deliveries = Effect.map(
    Effect.flatMap(WebhookStore, (store) => store.listDeliveries(merchantId, {}, { page: 1, perPage: 100 })),
    (page) => page.items
  )
  return Effect.runPromise(Effect.scoped(Effect.gen(function*() {
    const context = yield* Layer.build(dispatcher)
    yield* Effect.provide(before, context)
    return yield* Effect.provide(eventually(deliveries, done), context)
  })))
}

const signedBy = (secret: string, request: { readonly headers: Record<string, unknown>; readonly body: string }) =>
  verifyWebhookSignature(
    secret,
    String(request.headers["x-service-signature"]),
    request.body,
    Math.floor(Date.now() / 1000)
  )

const succeeded = (count: number) => (deliveries: ReadonlyArray<Delivery>) =>
  deliveries.filter((d) => d.status === "succeeded").length >= count

describe("webhook signing secrets at rest", () => {
  let merchant: { merchantId: string; key: string; webhookSecret: string }
  let rotated: string

  it("after a create and a rotation no secret is readable in merchants; deliveries are signed with both; /merchants/me shows the current one", async () => {
    merchant = await app.createMerchant("Sealed Shop")
    const api = client(app.baseUrl, merchant.key)
    expect((await api.patch("/api/v1/merchants/me", { webhook_url: receiver.url })).status).toBe(200)
    const rotation = await api.post("/api/v1/webhooks/secret/rotate")
    expect(rotation.status).toBe(200)
    rotated = rotation.body.merchant.webhook_secret
    expect(rotated).toMatch(/^whsec_/)
    expect(rotated).not.toBe(merchant.webhookSecret)

    const [row] = await app.query("SELECT webhook_secret, previous_webhook_secret FROM merchants WHERE id = $1", [
      merchant.merchantId
    ])
    expect(row!.webhook_secret).toMatch(/^sealed:v1:/)
    expect(row!.previous_webhook_secret).toMatch(/^sealed:v1:/)
    const dump = await merchantsDump()
    expect(dump).not.toContain("whsec_")
    expect(dump).not.toContain(rotated)
    expect(dump).not.toContain(merchant.webhookSecret)

    const me = await api.get("/api/v1/merchants/me")
    expect(me.status).toBe(200)
    expect(me.body.merchant.webhook_secret).toBe(rotated)

    const payment = await createTransaction(api, { amount_cents: 1_500 })
    const events = (await api.get(`/api/v1/transactions/${payment.id}/events`)).body.events.length as number
    // All of them, so that no attempt is left in flight for the next test's receiver count.
    await dispatchUntil(
      merchant.merchantId,
      testEncryptionKey,
      (deliveries) => deliveries.length === events && succeeded(events)(deliveries)
    )
    const mine = receiver.received.filter((r) => JSON.parse(r.body).data?.merchant_id === merchant.merchantId)
    expect(mine.length).toBeGreaterThan(0)
    for (const request of mine) {
      // The rotated-out secret keeps signing beside the new one for its grace period.
      expect(signedBy(rotated, request)).toBe(true)
      expect(signedBy(merchant.webhookSecret, request)).toBe(true)
      expect(signedBy("whsec_not_the_secret", request)).toBe(false)
    }
  })

  it("a copy of the database read under another key shows no secret and signs nothing, until the merchant rotates it", async () => {
    const logged: Array<string> = []
    const capture = Logger.make(({ message }) => void logged.push(String(message)))
    const copy = await startApp({
      label: "secrets_copy",
      databaseUrl: app.databaseUrl,
      config: { responseEncryptionKey: otherKey, webhookAllowPrivateUrls: true },
      logger: capture
    })
    try {
      // The operator is told at start.
      expect(logged.some((line) => line.includes("sealed under another RESPONSE_ENCRYPTION_KEY"))).toBe(true)
      const api = client(copy.baseUrl, merchant.key)
      const me = await api.get("/api/v1/merchants/me")
      expect(me.status).toBe(200)
      expect(me.body.merchant.webhook_secret).toBeNull()
      expect(me.text).not.toContain("whsec_")

      // A delivery attempted under the other key is not sent (never unsigned, never with a wrong
      // secret): the attempt fails, saying why, and is retried on schedule.
      const sentBefore = receiver.received.length
      const failedAttempt = (deliveries: ReadonlyArray<Delivery>) =>
        deliveries.some((d) => d.eventType === "payment.refunded" && d.attempts.length > 0)
      const attempted = await dispatchUntil(
        merchant.merchantId,
        otherKey,
        failedAttempt,
        Effect.flatMap(Webhooks, (webhooks) => webhooks.sendTest(merchant.merchantId, "payment.refunded"))
      )
      const test = attempted.find((d) => d.eventType === "payment.refunded")!
      expect(test.status).toBe("retrying")
      expect(test.attempts[0]!.error).toContain("cannot be opened")
      expect(receiver.received.length).toBe(sentBefore)

      // What the merchant does: rotate. The new secret is sealed under the key this service has.
      const rotation = await api.post("/api/v1/webhooks/secret/rotate")
      expect(rotation.status).toBe(200)
      const fresh = rotation.body.merchant.webhook_secret as string
      expect(fresh).toMatch(/^whsec_/)
      expect((await api.get("/api/v1/merchants/me")).body.merchant.webhook_secret).toBe(fresh)
      expect(await merchantsDump()).not.toContain(fresh)
      await dispatchUntil(
        merchant.merchantId,
        otherKey,
        (deliveries) => deliveries.some((d) => d.eventType === "payment.refunded" && d.status === "succeeded"),
        Effect.flatMap(Webhooks, (webhooks) => webhooks.sendTest(merchant.merchantId, "payment.refunded"))
      )
      const after = receiver.received.slice(sentBefore)
      expect(after.length).toBeGreaterThan(0)
      // Only the fresh secret signs: the previous one was sealed under a key this service lacks.
      for (const request of after) {
        expect(signedBy(fresh, request)).toBe(true)
        expect(String(request.headers["x-service-signature"]).split(",").filter((p) => p.startsWith("v1=")))
          .toHaveLength(1)
      }
    } finally {
      await copy.close()
    }
  })

  it("a sealed secret copied into another merchant's row does not open there", async () => {
    const thief = await app.createMerchant("Other Shop")
    await app.query(
      "UPDATE merchants SET webhook_secret = (SELECT webhook_secret FROM merchants WHERE id = $1) WHERE id = $2",
      [merchant.merchantId, thief.merchantId]
    )
    // Refused by this process's cache of opened secrets, and by a process that opens it afresh.
    expect((await client(app.baseUrl, thief.key).get("/api/v1/merchants/me")).body.merchant.webhook_secret).toBeNull()
    const fresh = await startApp({ label: "secrets_moved", databaseUrl: app.databaseUrl })
    try {
      const me = await client(fresh.baseUrl, thief.key).get("/api/v1/merchants/me")
      expect(me.status).toBe(200)
      expect(me.body.merchant.webhook_secret).toBeNull()
    } finally {
      await fresh.close()
    }
  })

  it("a secret stored readable (from before sealing, or by a process without a key) is sealed at start and still signs", async () => {
    const legacy = "whsec_legacyPlaintextSecret0001"
    const legacyPrevious = "whsec_legacyPlaintextSecret0000"
    const id = "mer_legacy_plaintext"
    await app.query(
      `INSERT INTO merchants (id, name, webhook_url, webhook_secret, previous_webhook_secret, previous_webhook_secret_expires_at, created_at, updated_at)
       VALUES ($1, 'Legacy Shop', $2, $3, $4, now() + interval '1 hour', now(), now())`,
      [id, receiver.url, legacy, legacyPrevious]
    )
    const restarted = await startApp({ label: "secrets_legacy", databaseUrl: app.databaseUrl })
    try {
      const [row] = await app.query("SELECT webhook_secret, previous_webhook_secret FROM merchants WHERE id = $1", [id])
      expect(row!.webhook_secret).toMatch(/^sealed:v1:/)
      expect(row!.previous_webhook_secret).toMatch(/^sealed:v1:/)
      expect(await merchantsDump()).not.toContain("whsec_")

      const issued = await restarted.run(Effect.flatMap(ApiKeys, (keys) => keys.create(id, "legacy")))
      const me = await client(restarted.baseUrl, issued.secret).get("/api/v1/merchants/me")
      expect(me.body.merchant.webhook_secret).toBe(legacy)
      expect((await restarted.run(Effect.flatMap(Merchants, (merchants) => merchants.get(id)))).webhookSecret).toBe(
        legacy
      )

      const sentBefore = receiver.received.length
      await dispatchUntil(
        id,
        testEncryptionKey,
        succeeded(1),
        Effect.flatMap(Webhooks, (webhooks) => webhooks.sendTest(id, "payment.captured"))
      )
      const sent = receiver.received.slice(sentBefore)
      expect(sent.length).toBeGreaterThan(0)
      for (const request of sent) {
        expect(signedBy(legacy, request)).toBe(true)
        expect(signedBy(legacyPrevious, request)).toBe(true)
      }
    } finally {
      await restarted.close()
    }
  })
})
