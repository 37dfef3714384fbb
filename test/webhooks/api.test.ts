import { Clock, Effect } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { Webhooks } from "../../src/services/Webhooks.ts"
import { WebhookStore } from "../../src/store/WebhookStore.ts"
import { client, createTransaction, errorOf, startApp, type TestApp } from "../support/app.ts"

/** The API end to end on PostgreSQL (workers off: the test moves the outbox itself). */
describe("webhooks API", () => {
  let app: TestApp
  beforeAll(async () => {
    app = await startApp({ label: "whapi", config: { webhookAllowPrivateUrls: true } })
  })
  afterAll(() => app.close())

  // What the dispatcher's poll drains with: the store's drainOutbox and the service's deliveryBuilder.
  const drainOutbox = () =>
    app.run(
      Effect.gen(function*() {
        const build = (yield* Webhooks).deliveryBuilder(yield* Clock.currentTimeMillis)
        return (yield* (yield* WebhookStore).drainOutbox(500, build)).drained
      }) as Effect.Effect<number>
    )

  it("turns every payment event into one delivery for the webhook_url of the moment", async () => {
    const merchant = await app.createMerchant()
    const api = client(app.baseUrl, merchant.key)
    const before = await createTransaction(api)
    await drainOutbox()
    expect((await api.get("/api/v1/webhooks/deliveries")).body.deliveries).toHaveLength(0)
    expect((await api.patch("/api/v1/merchants/me", { webhook_url: "http://127.0.0.1:9/hooks" })).status).toBe(200)
    const payment = await createTransaction(api)
    await drainOutbox()
    const events = (await api.get(`/api/v1/transactions/${payment.id}/events`)).body.events as Array<any>
    const list = await api.get("/api/v1/webhooks/deliveries?per_page=100")
    expect(list.status).toBe(200)
    const deliveries = list.body.deliveries as Array<any>
    expect(deliveries.map((d) => d.event_id).sort()).toEqual(events.map((e) => e.id).sort())
    expect(
      deliveries.every((d) => d.id.startsWith("whd_") && d.status === "pending" && d.url === "http://127.0.0.1:9/hooks")
    ).toBe(true)
    expect(deliveries.every((d) => d.attempts.length === 0 && d.completed_at === null)).toBe(true)
    expect(list.body.meta).toMatchObject({ page: 1, per_page: 100, total_count: events.length, has_more: false })
    expect(deliveries.some((d) => d.event_id.includes(before.id))).toBe(false)
    const one = await api.get(`/api/v1/webhooks/deliveries/${deliveries[0].id}`)
    expect(one.body.delivery).toEqual(deliveries[0])
    expect((await api.get("/api/v1/webhooks/deliveries?status=failed")).body.deliveries).toHaveLength(0)
    expect((await api.get("/api/v1/webhooks/deliveries?status=nope")).status).toBe(422)
  })

  it("test events: 202 through the pipeline, 422 for an unknown type, 409 without a webhook_url", async () => {
    const merchant = await app.createMerchant()
    const api = client(app.baseUrl, merchant.key)
    const missing = await api.post("/api/v1/webhooks/test", { event_type: "payment.captured" })
    expect(missing.status).toBe(409)
    expect(errorOf(missing).code).toBe("invalid_state")
    await api.patch("/api/v1/merchants/me", { webhook_url: "http://127.0.0.1:9/hooks" })
    const wrong = await api.post("/api/v1/webhooks/test", { event_type: "payment.exploded" })
    expect(wrong.status).toBe(422)
    expect(errorOf(wrong).code).toBe("validation_failed")
    const sent = await api.post("/api/v1/webhooks/test", { event_type: "payment.dispute_opened" })
    expect(sent.status).toBe(202)
    expect(sent.body.delivery).toMatchObject({ event_type: "payment.dispute_opened", status: "pending", attempts: [] })
    const status = await api.get("/api/v1/webhooks/status")
    expect(status.body).toEqual({
      webhook_status: {
        url: "http://127.0.0.1:9/hooks",
        enabled: true,
        success_rate: null,
        counts: { pending: 1, retrying: 0, succeeded: 0, failed: 0 },
        last_success_at: null,
        last_failure_at: null,
        consecutive_failures: 0
      }
    })
    const retry = await api.post(`/api/v1/webhooks/deliveries/${sent.body.delivery.id}/retry`)
    expect(retry.status).toBe(409)
    expect((await api.post("/api/v1/webhooks/deliveries/whd_nope/retry")).status).toBe(404)
  })

  it("rotating the signing secret answers the new secret and when the old one stops signing", async () => {
    const merchant = await app.createMerchant()
    const api = client(app.baseUrl, merchant.key)
    const rotated = await api.post("/api/v1/webhooks/secret/rotate")
    expect(rotated.status).toBe(200)
    expect(rotated.body.merchant.webhook_secret).toMatch(/^whsec_/)
    expect(rotated.body.merchant.webhook_secret).not.toBe(merchant.webhookSecret)
    expect(Date.parse(rotated.body.previous_secret_expires_at) - Date.now()).toBeGreaterThan(23 * 3_600_000)
    expect((await api.get("/api/v1/merchants/me")).body.merchant.webhook_secret).toBe(
      rotated.body.merchant.webhook_secret
    )
  })
})
