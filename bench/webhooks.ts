/**
 * Webhook delivery load: 10,000 events to 100 endpoints on 127.0.0.1, 10 of them dead (nothing
 * listens). Memory store, production HTTP transport and dispatcher; the receivers run in the same
 * process. Runs until every event to a live endpoint is acknowledged (its delivery `succeeded`)
 * or the time limit, then prints what the receivers got, held against what the dispatcher
 * recorded (bench/webhookReceipts.ts): delivered, redelivered after a timed-out attempt (allowed:
 * delivery is at least once), duplicates (bugs), not delivered within the run, and the lag.
 *
 *   npx tsx bench/webhooks.ts [--events 10000] [--endpoints 100] [--dead 10] [--limit 120s]
 *     [--timeout 30s] [--retry-schedule 1m,5m,30m,2h,24h] [--slow-first-answer 0ms] [--receiver-keep-alive 5s]
 *
 * `--timeout` and `--retry-schedule` are WEBHOOK_TIMEOUT and WEBHOOK_RETRY_SCHEDULE;
 * `--slow-first-answer` makes every receiver answer an event's first attempt only after that long
 * (with a shorter `--timeout`, every event then comes twice: the redelivery at-least-once allows);
 * `--receiver-keep-alive` is the receivers' keep-alive timeout (Node's default, 5 s, unless set).
 * Exit status: 1 when a receiver got a duplicate (a bug), else 2 when the limit came before every
 * live event was acknowledged, else 0.
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
import { classifyReceipts, exitStatus, type Receipt } from "./webhookReceipts.ts"

const argument = (name: string, fallback: string) => {
  const index = process.argv.indexOf(`--${name}`)
  return index === -1 ? fallback : process.argv[index + 1] ?? fallback
}
const fail = (message: string): never => {
  console.error(message)
  process.exit(64)
}
const count = (name: string, fallback: number, low: number, high: number) => {
  const value = Number(argument(name, String(fallback)))
  return Number.isInteger(value) && value >= low && value <= high
    ? value
    : fail(`--${name} must be an integer in ${low}..${high}`)
}
const duration = (name: string, fallback: string, highMs: number) => {
  const value = Config.parseDurationMs(argument(name, fallback))
  return value !== null && value <= highMs
    ? value
    : fail(`--${name} must be a duration such as 500ms, 30s or 2m, at most ${highMs / 1000} s`)
}

const endpoints = count("endpoints", 100, 1, 1_000)
const dead = count("dead", 10, 0, Math.min(endpoints - 1, 60))
const events = count("events", 10_000, 1, 100_000)
const limitMs = duration("limit", "120s", 600_000)
const timeoutMs = duration("timeout", "30s", 600_000)
const slowFirstAnswerMs = duration("slow-first-answer", "0ms", 600_000)
/** The receivers' `keepAliveTimeout` (Node's default: 5 s): how long they keep an idle connection open. */
const receiverKeepAliveMs = duration("receiver-keep-alive", "5s", 600_000)
const retryScheduleText = argument("retry-schedule", "1m,5m,30m,2h,24h")
const retrySchedule = retryScheduleText.split(",").map(Config.parseDurationMs)
if (retrySchedule.some((ms) => ms === null || ms <= 0)) {
  fail("--retry-schedule must be durations separated by commas, such as 1m,5m")
}

const receipts: Array<Receipt> = []
const firstArrivalMs = new Map<string, number>()
const answers = new Set<ReturnType<typeof setTimeout>>()
const servers = await Promise.all(
  Array.from({ length: endpoints - dead }, () =>
    new Promise<ReturnType<typeof createServer>>((done) => {
      const server = createServer((req, res) => {
        const eventId = String(req.headers["x-service-event-id"])
        const receipt = {
          eventId,
          deliveryId: String(req.headers["x-service-delivery-id"]),
          attempt: Number(req.headers["x-service-delivery-attempt"]),
          receivedMs: Date.now(),
          answeredMs: null as number | null
        }
        receipts.push(receipt)
        if (!firstArrivalMs.has(eventId)) firstArrivalMs.set(eventId, receipt.receivedMs)
        req.resume()
        req.on("end", () => {
          const answer = () => {
            receipt.answeredMs = Date.now()
            res.writeHead(200).end()
          }
          if (slowFirstAnswerMs === 0 || receipt.attempt !== 1) return answer()
          const timer = setTimeout(() => {
            answers.delete(timer)
            answer()
          }, slowFirstAnswerMs)
          answers.add(timer)
        })
      })
      // A late answer's connection may be gone already (the client timed out): nothing to do about it.
      server.on("clientError", (_error, socket) => socket.destroy())
      server.keepAliveTimeout = receiverKeepAliveMs
      server.listen(0, "127.0.0.1", () => done(server))
    }))
)
const urls = [
  ...servers.map((s) => `http://127.0.0.1:${(s.address() as AddressInfo).port}/hook`),
  ...Array.from({ length: dead }, (_, i) => `http://127.0.0.1:${1 + i}/dead`)
]
const isLive = (url: string) => !url.endsWith("/dead")

const state = emptyState()
urls.forEach((url, i) =>
  state.merchants.set(`mer_${i}`, {
    id: `mer_${i}`,
    name: `m${i}`,
    webhookUrl: url,
    webhookSecret: `whsec_${i}`,
    createdAt: Date.UTC(2026, 0, 1),
    updatedAt: Date.UTC(2026, 0, 1)
  })
)
const createdMs = new Map<string, number>()
const liveEventIds = new Set<string>()

const engine = WebhookDispatcher.layerWith({ pollIntervalMs: 20, batchSize: 500 }).pipe(
  Layer.provideMerge(Webhooks.layer),
  Layer.provideMerge(Layer.mergeAll(WebhookTransport.layer, Ids.layerSeeded(7), layerMemoryFrom(state))),
  Layer.provideMerge(Config.layerWith(Config.defaultsWith({
    webhookAllowPrivateUrls: true,
    webhookTimeoutMs: timeoutMs,
    webhookRetryScheduleMs: retrySchedule as Array<number>
  })))
)

/** Live deliveries the store holds as `succeeded` (a look at each row's status only). */
const acknowledgedNow = () => {
  let n = 0
  for (const row of state.webhooks.deliveries.values()) if (row.status === "succeeded" && isLive(row.url)) n++
  return n
}

let startMs = 0
const program = Effect.gen(function*() {
  const start = startMs = yield* Clock.currentTimeMillis
  for (let i = 0; i < events; i++) {
    const merchantId = `mer_${i % endpoints}`
    const now = start
    state.outbox.push({
      id: `evt_${i}`,
      paymentId: `pay_${i}`,
      merchantId,
      type: "payment.captured",
      sequence: 1,
      createdAt: now,
      data: {
        id: `pay_${i}`,
        merchant_id: merchantId,
        status: "captured",
        amount_cents: 100,
        currency: "USD",
        captured_amount_cents: 100,
        refunded_amount_cents: 0,
        fraud_score: null,
        failure_code: null,
        dispute: null
      }
    })
    createdMs.set(`evt_${i}`, Date.now())
    if (isLive(urls[i % endpoints]!)) liveEventIds.add(`evt_${i}`)
  }
  while (
    Date.now() - start < limitMs && (firstArrivalMs.size < liveEventIds.size || acknowledgedNow() < liveEventIds.size)
  ) {
    yield* Effect.promise(() => new Promise((r) => setTimeout(r, 100)))
  }
  return Date.now() - start
})

// The dispatcher stops with the scope: the store is still from here on.
const elapsedMs = await Effect.runPromise(Effect.provide(program, engine).pipe(Effect.scoped))
for (const timer of answers) clearTimeout(timer)
const deliveries = [...state.webhooks.deliveries.values()].map((row) => row.delivery)
const counts = classifyReceipts(receipts, deliveries, liveEventIds)
const lags = [...firstArrivalMs].map(([id, at]) => at - createdMs.get(id)!).sort((a, b) => a - b)
const percentile = (sorted: ReadonlyArray<number>, p: number) =>
  sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? null
const answeredAfter = counts.timedOutReceived.flatMap((
  t
) => (t.answeredMs === null ? [] : [t.answeredMs - t.startedMs])).sort((a, b) => a - b)
const startedAt = counts.timedOutReceived.map((t) => t.startedMs - startMs).sort((a, b) => a - b)
const limitReached = counts.acknowledged < counts.expected
/** The failed attempts to live endpoints, by error, and whether the receiver got them. */
const receivedAttempts = new Set(receipts.map((r) => `${r.deliveryId}#${r.attempt}`))
const failedAttempts = new Map<string, number>()
for (const d of deliveries) {
  if (!isLive(d.url)) continue
  for (const a of d.attempts) {
    if (a.error === null && a.responseStatus !== null && a.responseStatus < 300) continue
    const key = `${(a.error ?? `HTTP ${a.responseStatus}`).replace(/ within \d+ ms$/, "")}, ${
      receivedAttempts.has(`${d.id}#${a.attempt}`) ? "received" : "not received"
    }`
    failedAttempts.set(key, (failedAttempts.get(key) ?? 0) + 1)
  }
}
/** Where the live events never received, and those received but not acknowledged, stood at the end. */
const notDeliveredStates = new Map<string, number>()
const notAcknowledgedStates = new Map<string, number>()
const received = new Set(receipts.map((r) => r.eventId))
const deliveryOfEvent = new Map(deliveries.map((d) => [d.eventId, d]))
for (const eventId of liveEventIds) {
  const d = deliveryOfEvent.get(eventId)
  if (d?.status === "succeeded") continue
  const last = d?.attempts.at(-1)
  const key = d === undefined
    ? "no delivery yet"
    : `${d.status}, ${
      last === undefined ? "no attempt recorded" : `attempt ${last.attempt}: ${last.error ?? last.responseStatus}`
    }`
  const states = received.has(eventId) ? notAcknowledgedStates : notDeliveredStates
  states.set(key, (states.get(key) ?? 0) + 1)
}
console.log(JSON.stringify(
  {
    events,
    endpoints,
    dead_endpoints: dead,
    webhook_timeout_ms: timeoutMs,
    retry_schedule: retryScheduleText,
    slow_first_answer_ms: slowFirstAnswerMs,
    elapsed_ms: elapsedMs,
    limit_ms: limitMs,
    limit_reached: limitReached,
    live_events: counts.expected,
    delivered: counts.delivered,
    acknowledged: counts.acknowledged,
    redelivered_after_timeout: counts.redeliveredAfterTimeout,
    redelivered_after_other_failure: counts.redeliveredAfterOtherFailure,
    duplicates: counts.duplicates,
    not_delivered_within_run: counts.notDeliveredWithinRun,
    not_delivered_stood: Object.fromEntries(notDeliveredStates),
    receipts: receipts.length,
    failed_attempts_to_live_endpoints: Object.fromEntries(failedAttempts),
    received_not_acknowledged_stood: Object.fromEntries(notAcknowledgedStates),
    timed_out_attempts_received: {
      count: counts.timedOutReceived.length,
      answered_after_ms: {
        min: answeredAfter[0] ?? null,
        p50: percentile(answeredAfter, 50),
        max: answeredAfter.at(-1) ?? null
      },
      started_after_run_start_ms: {
        min: startedAt[0] ?? null,
        p50: percentile(startedAt, 50),
        max: startedAt.at(-1) ?? null
      }
    },
    dead_deliveries_retrying: deliveries.filter((d) => !isLive(d.url) && d.status === "retrying").length,
    lag_ms: {
      p50: percentile(lags, 50),
      p90: percentile(lags, 90),
      p99: percentile(lags, 99),
      max: lags.at(-1) ?? null
    }
  },
  null,
  2
))
for (const example of counts.examples) console.error(`duplicate (bug) ${example}`)
for (const s of servers) s.close()
process.exit(exitStatus(counts))
