/**
 * Webhook delivery load: 10,000 events to 100 endpoints on 127.0.0.1, 10 of them dead (nothing
 * listens). Prints the lag from event to successful delivery (percentiles) and checks that every
 * event to a live endpoint arrived exactly once. Memory store, production HTTP transport and
 * dispatcher; bounded to 120 s. Run: npx tsx bench/webhooks.ts
 */
import { Clock, Effect, Layer } from "effect"
import { createServer } from "node:http"
import type { AddressInfo } from "node:net"
import * as Config from "../src/platform/Config.ts"
import * as Ids from "../src/platform/Ids.ts"
import * as WebhookTransport from "../src/platform/WebhookTransport.ts"
import * as Webhooks from "../src/services/Webhooks.ts"
import { emptyState, layerMemoryFrom } from "../src/store/MemoryStore.ts"
import * as WebhookDispatcher from "../src/workers/WebhookDispatcher.ts"

const endpoints = 100, dead = 10, events = 10_000, limitMs = 120_000
const received = new Map<string, number>()
const arrivalMs = new Map<string, number>()
const servers = await Promise.all(Array.from({ length: endpoints - dead }, () => new Promise<ReturnType<typeof createServer>>((done) => {
  const server = createServer((req, res) => {
    const id = String(req.headers["x-service-event-id"])
    req.resume()
    req.on("end", () => {
      received.set(id, (received.get(id) ?? 0) + 1)
      if (!arrivalMs.has(id)) arrivalMs.set(id, Date.now())
      res.writeHead(200).end()
    })
  })
  server.listen(0, "127.0.0.1", () => done(server))
})))
const urls = [
  ...servers.map((s) => `http://127.0.0.1:${(s.address() as AddressInfo).port}/hook`),
  ...Array.from({ length: dead }, (_, i) => `http://127.0.0.1:${1 + i}/dead`)
]

const state = emptyState()
urls.forEach((url, i) => state.merchants.set(`mer_${i}`, { id: `mer_${i}`, name: `m${i}`, webhookUrl: url, webhookSecret: `whsec_${i}`, createdAt: "2026-01-01T00:00:00.000Z", updatedAt: "2026-01-01T00:00:00.000Z" }))
const createdMs = new Map<string, number>()

const engine = WebhookDispatcher.layerWith({ pollIntervalMs: 20, batchSize: 500 }).pipe(
  Layer.provideMerge(Webhooks.layer),
  Layer.provideMerge(Layer.mergeAll(WebhookTransport.layer, Ids.layerSeeded(7), layerMemoryFrom(state))),
  Layer.provideMerge(Config.layerWith(Config.defaultsWith({ webhookAllowPrivateUrls: true })))
)

const program = Effect.gen(function*() {
  const start = yield* Clock.currentTimeMillis
  for (let i = 0; i < events; i++) {
    const merchantId = `mer_${i % endpoints}`
    const now = new Date(start).toISOString()
    state.outbox.push({ id: `evt_${i}`, paymentId: `pay_${i}`, merchantId, type: "payment.captured", sequence: 1, createdAt: now,
      data: { id: `pay_${i}`, merchant_id: merchantId, status: "captured", amount_cents: 100, currency: "USD", captured_amount_cents: 100, refunded_amount_cents: 0, fraud_score: null, failure_code: null, dispute: null } })
    createdMs.set(`evt_${i}`, Date.now())
  }
  const live = events - events * dead / endpoints
  while (arrivalMs.size < live && Date.now() - start < limitMs) yield* Effect.promise(() => new Promise((r) => setTimeout(r, 50)))
  return Date.now() - start
})

const elapsedMs = await Effect.runPromise(Effect.provide(program, engine).pipe(Effect.scoped))
const lags = [...arrivalMs].map(([id, at]) => at - createdMs.get(id)!).sort((a, b) => a - b)
const pct = (p: number) => lags[Math.min(lags.length - 1, Math.floor((p / 100) * lags.length))] ?? NaN
const duplicates = [...received.values()].filter((n) => n > 1).length
const live = events - events * dead / endpoints
const deadRetrying = [...state.webhooks.deliveries.values()].filter((r) => r.delivery.url.endsWith("/dead") && r.delivery.status === "retrying").length
console.log(JSON.stringify({
  events, endpoints, dead_endpoints: dead, elapsed_ms: elapsedMs,
  delivered_live: arrivalMs.size, expected_live: live, lost: live - arrivalMs.size, duplicates,
  dead_deliveries_retrying: deadRetrying,
  lag_ms: { p50: pct(50), p90: pct(90), p99: pct(99), max: lags.at(-1) }
}, null, 2))
for (const s of servers) s.close()
process.exit(arrivalMs.size === live && duplicates === 0 ? 0 : 1)
