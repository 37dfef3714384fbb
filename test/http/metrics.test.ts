import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { client, createTransaction, request, startApp, type TestApp, transactionBody } from "../support/app.ts"

// Issue 12 item 1: metrics an operator can alert on, through the real service (HTTP, PostgreSQL).

let app: TestApp
let api: ReturnType<typeof client>
beforeAll(async () => {
  app = await startApp({ label: "metrics" })
  api = client(app.baseUrl, (await app.createMerchant()).key)
})
afterAll(async () => {
  await app?.close()
})

/** The samples of a Prometheus text: `name{labels}` → value. */
const scrape = async () => {
  const reply = await request(app.baseUrl, "GET", "/metrics")
  expect(reply.status).toBe(200)
  const samples = new Map<string, number>()
  const types = new Map<string, string>()
  for (const line of reply.text.split("\n")) {
    const type = /^# TYPE (\S+) (\S+)$/.exec(line)
    if (type !== null) types.set(type[1]!, type[2]!)
    if (line === "" || line.startsWith("#")) continue
    const at = line.lastIndexOf(" ")
    samples.set(line.slice(0, at), Number(line.slice(at + 1)))
  }
  return { samples, types, text: reply.text }
}

const createRoute = "method=\"POST\",route=\"/api/v1/transactions\",status=\"201\""

describe("GET /metrics", () => {
  it("moves the latency histogram, the request, payment, ledger and idempotency counters after traffic", async () => {
    const before = await scrape()
    const count = (s: Map<string, number>, name: string) => s.get(name) ?? 0
    await createTransaction(api)
    await createTransaction(api, { card_token: "tok_decline_insufficient_funds" })
    const keyed = transactionBody({ amount_cents: 777 })
    expect((await api.post("/api/v1/transactions", keyed, { idempotencyKey: "metrics-1" })).status).toBe(201)
    expect(
      (await api.post("/api/v1/transactions", keyed, { idempotencyKey: "metrics-1" })).headers.get(
        "idempotent-replayed"
      )
    ).toBe("true")
    expect(
      (await api.post("/api/v1/transactions", transactionBody({ amount_cents: 778 }), { idempotencyKey: "metrics-1" }))
        .status
    ).toBe(422)
    const missing = await api.get("/api/v1/transactions/pay_doesnotexist000")
    expect(missing.status).toBe(404)
    const after = await scrape()
    const s0 = before.samples
    const s1 = after.samples

    // Histogram by route template and status: count, +Inf bucket and sum move together.
    const created = count(s1, `http_request_duration_seconds_count{${createRoute}}`) -
      count(s0, `http_request_duration_seconds_count{${createRoute}}`)
    expect(created).toBe(4) // two creates, the keyed one and its replay (the 422 is another series)
    expect(count(s1, `http_request_duration_seconds_bucket{${createRoute},le="+Inf"}`)).toBe(
      count(s1, `http_request_duration_seconds_count{${createRoute}}`)
    )
    expect(count(s1, `http_request_duration_seconds_sum{${createRoute}}`)).toBeGreaterThan(
      count(s0, `http_request_duration_seconds_sum{${createRoute}}`)
    )
    expect(count(s1, `http_requests_total{${createRoute}}`) - count(s0, `http_requests_total{${createRoute}}`)).toBe(4)
    // The route template, never the raw path (a label value per payment would grow without bound).
    expect(s1.get("http_requests_total{method=\"GET\",route=\"/api/v1/transactions/:id\",status=\"404\"}"))
      .toBeGreaterThanOrEqual(1)
    expect(after.text).not.toContain("pay_doesnotexist000")

    expect(
      count(s1, "payments_total{outcome=\"failed\",failure_code=\"insufficient_funds\"}") -
        count(s0, "payments_total{outcome=\"failed\",failure_code=\"insufficient_funds\"}")
    ).toBe(1)
    expect(
      count(s1, "payments_total{outcome=\"captured\",failure_code=\"\"}") -
        count(s0, "payments_total{outcome=\"captured\",failure_code=\"\"}")
    ).toBe(2)
    expect(count(s1, "ledger_postings_total{currency=\"USD\"}")).toBeGreaterThan(
      count(s0, "ledger_postings_total{currency=\"USD\"}")
    )
    expect(count(s1, "idempotency_replays_total") - count(s0, "idempotency_replays_total")).toBe(1)
    expect(
      count(s1, "idempotency_conflicts_total{reason=\"key_reused\"}") -
        count(s0, "idempotency_conflicts_total{reason=\"key_reused\"}")
    ).toBe(1)
    // The pool of this process (10 connections in tests), none waiting once the traffic is over.
    expect(s1.get("db_pool_max_connections")).toBe(10)
    expect(s1.get("db_pool_waiting")).toBe(0)
    expect(count(s1, "db_pool_connections{state=\"in_use\"}") + count(s1, "db_pool_connections{state=\"idle\"}"))
      .toBeGreaterThan(0)
    expect(s1.get("webhook_queue_depth")).toBe(0)
  })
})

/**
 * Every family the service exports, with the Prometheus type its behaviour needs: a counter only
 * for a total that never goes down, a gauge for a value that goes down too, a histogram for
 * distributions. A family missing here fails the test: a new metric is typed on purpose.
 */
const expectedTypes: Record<string, "counter" | "gauge" | "histogram"> = {
  http_requests_total: "counter",
  http_requests_in_flight: "gauge",
  http_request_duration_seconds: "histogram",
  payments_total: "counter",
  payment_events_total: "counter",
  ledger_postings_total: "counter",
  ledger_entries_total: "counter",
  idempotency_replays_total: "counter",
  idempotency_conflicts_total: "counter",
  webhook_attempts_total: "counter",
  webhook_deliveries_failed_total: "counter",
  webhook_delivery_lag_seconds: "histogram",
  webhook_queue_depth: "gauge",
  webhook_due_deliveries: "gauge",
  webhook_oldest_due_age_seconds: "gauge",
  db_pool_connections: "gauge",
  db_pool_waiting: "gauge",
  db_pool_max_connections: "gauge",
  recovery_runs_total: "counter",
  recovery_resumed_payments_total: "counter",
  settlement_runs_total: "counter",
  settlement_settled_payments_total: "counter"
}

/** The series of a family as they appear in samples (a histogram's `_bucket`, `_sum` and `_count` included). */
const seriesOf = (samples: Map<string, number>, family: string) =>
  [...samples].filter(([series]) =>
    series === family || series.startsWith(`${family}{`) ||
    /^(.+)_(bucket|sum|count)($|\{)/.exec(series)?.[1] === family
  )

describe("every family's type matches its behaviour", () => {
  it("each family on /metrics has the type of the table, and every family is in the table", async () => {
    await createTransaction(api)
    const { types, samples } = await scrape()
    expect(Object.fromEntries([...types].sort())).toEqual(Object.fromEntries(Object.entries(expectedTypes).sort()))

    // Histograms as Prometheus reads them: per series, cumulative buckets in order of `le`, the last
    // one (+Inf) equal to `_count`.
    for (const [family, type] of types) {
      if (type !== "histogram") continue
      const bySeries = new Map<string, Array<number>>()
      for (const [series, value] of samples) {
        const bucket = new RegExp(`^${family}_bucket\\{(.*?),?le="([^"]+)"\\}$`).exec(series)
        if (bucket === null) continue
        const buckets = bySeries.get(bucket[1]!) ?? []
        buckets.push(value)
        bySeries.set(bucket[1]!, buckets)
        if (bucket[2] === "+Inf") {
          expect(value, series).toBe(samples.get(`${family}_count${bucket[1] === "" ? "" : `{${bucket[1]}}`}`))
        }
      }
      expect(bySeries.size, family).toBeGreaterThan(0)
      for (const [labels, buckets] of bySeries) {
        for (let i = 1; i < buckets.length; i++) {
          expect(buckets[i]!, `${family}{${labels}}`).toBeGreaterThanOrEqual(buckets[i - 1]!)
        }
      }
    }
  })

  it("no counter series ever goes down between scrapes; whatever decreased is a gauge", async () => {
    const before = await scrape()
    await createTransaction(api)
    await createTransaction(api, { card_token: "tok_decline_insufficient_funds" })
    const after = await scrape()
    // The direction each family moved in agrees with its type: a counter (and a histogram's
    // buckets, sum and count) never decreases; whatever decreased is a gauge.
    let compared = 0
    for (const [family, type] of after.types) {
      for (const [series, value] of seriesOf(after.samples, family)) {
        const earlier = before.samples.get(series)
        if (earlier === undefined) continue
        compared++
        if (value < earlier) expect(type, `${series} went from ${earlier} to ${value}`).toBe("gauge")
      }
    }
    expect(compared).toBeGreaterThan(50)
  })

  it("the families that hold a current level are gauges", async () => {
    const { types } = await scrape()
    for (
      const family of [
        "http_requests_in_flight",
        "db_pool_connections",
        "db_pool_waiting",
        "db_pool_max_connections",
        "webhook_queue_depth",
        "webhook_due_deliveries",
        "webhook_oldest_due_age_seconds"
      ]
    ) {
      expect(types.get(family), family).toBe("gauge")
    }
  })
})
