import { Context, Effect, Metric } from "effect"

/*
 * Every metric of the service, from Effect's own `Metric` API, rendered by `prometheusText` for
 * `GET /metrics` (docs/operations.md lists them with example alerts).
 *
 * Labelled metrics are made once per label set (attributes fixed at creation) and updated through
 * the update function of their registry entry, kept when they are made (`record`): no effect, no
 * context read and no registry look-up on the request path.
 */

const noContext = Context.empty()

type Definition = (attributes: Record<string, string> | undefined) => Metric.Metric<number, any>

/**
 * The metric of `define` with `labels` (values in the order of `names`, at most three), made once
 * per label set. The values come as separate arguments (no array of them built per update).
 */
const family = (define: Definition, names: ReadonlyArray<string>) => {
  type Made = Metric.Metric<number, any>
  if (names.length > 3) throw new Error("a metric has at most three labels")
  // One map level per label value, the metric at the leaf: a lookup on the request path builds
  // no key string (joining the values cost a string and its hash on every update).
  const root = new Map<string, unknown>()
  let unlabelled: Made | undefined
  const make = (values: ReadonlyArray<string>): Made => {
    const attributes: Record<string, string> = {}
    names.forEach((name, i) => (attributes[name] = values[i] ?? ""))
    return withUpdate(define(attributes))
  }
  return (v0?: string, v1?: string, v2?: string): Made => {
    if (names.length === 0) return (unlabelled ??= withUpdate(define(undefined)))
    let level = root
    let last = v0 ?? ""
    if (names.length > 1) {
      let next = level.get(last) as Map<string, unknown> | undefined
      if (next === undefined) level.set(last, next = new Map())
      level = next
      last = v1 ?? ""
      if (names.length > 2) {
        next = level.get(last) as Map<string, unknown> | undefined
        if (next === undefined) level.set(last, next = new Map())
        level = next
        last = v2 ?? ""
      }
    }
    let metric = level.get(last) as Made | undefined
    if (metric === undefined) {
      metric = make([v0 ?? "", v1 ?? "", v2 ?? ""])
      level.set(last, metric)
    }
    return metric!
  }
}

/**
 * The update function of each metric this module made, taken from its entry in the process's
 * metric registry when it is made: `updateUnsafe` finds that entry again on every call (the
 * metric's key, two context reads and a map look-up, ~0.5 µs), and the service records a few
 * metrics on every request and webhook attempt.
 */
const updates = new WeakMap<Metric.Metric<number, any>, (value: number, context: Context.Context<never>) => void>()

/** Registers `metric` (at zero) and keeps its update function, when its registry entry is its own. */
const withUpdate = <M extends Metric.Metric<number, any>>(metric: M): M => {
  metric.valueUnsafe(noContext)
  for (const entry of Context.get(noContext, Metric.MetricRegistry).values()) {
    // The entry made for this very metric carries its id, type and attributes object as they are.
    if (entry.id === metric.id && entry.type === metric.type && entry.attributes === metric.attributes) {
      updates.set(metric, entry.hooks.update)
      break
    }
  }
  return metric
}

/** Updates a metric synchronously (no effect allocation): for hot paths inside `Effect.sync`. */
export const record = (metric: Metric.Metric<number, any>, value: number) => {
  const update = updates.get(metric)
  if (update !== undefined) update(value, noContext)
  else metric.updateUnsafe(value, noContext)
}

const counterKey = (name: string, description: string): Definition => (attributes) =>
  Metric.counter(name, { description, incremental: true, ...(attributes === undefined ? {} : { attributes }) })
const gaugeKey = (name: string, description: string): Definition => (attributes) =>
  Metric.gauge(name, { description, ...(attributes === undefined ? {} : { attributes }) })
const histogramKey =
  (name: string, description: string, boundaries: ReadonlyArray<number>): Definition => (attributes) =>
    Metric.histogram(name, { description, boundaries, ...(attributes === undefined ? {} : { attributes }) })

/** Seconds, from 1 ms to 10 s: request latencies. */
const latencyBounds = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]
/** Seconds, from 10 ms to 1 day: how late a webhook attempt starts after it became due. */
const lagBounds = [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 14_400, 86_400]

// HTTP
export const httpRequests = family(
  counterKey("http_requests_total", "HTTP requests answered, by method, route template and status"),
  ["method", "route", "status"]
)
/** Requests this process has begun and not yet ended: answered, refused, or cut off (a client hung up) and cleaned up after. */
export const httpRequestsInFlight = family(
  gaugeKey(
    "http_requests_in_flight",
    "HTTP requests begun and not yet ended (answered, or cut off and cleaned up after)"
  ),
  []
)()
export const httpRequestDuration = family(
  histogramKey(
    "http_request_duration_seconds",
    "Time from request to response, by method, route template and status",
    latencyBounds
  ),
  ["method", "route", "status"]
)

// Payments and money
export const paymentEvents = family(counterKey("payment_events_total", "Payment events emitted, by type"), ["type"])
export const paymentOutcomes = family(
  counterKey(
    "payments_total",
    "Payments reaching an outcome: authorized, failed (with failure_code), fraud_blocked, captured, voided, refunded, settled"
  ),
  ["outcome", "failure_code"]
)
export const ledgerPostings = family(
  counterKey("ledger_postings_total", "Balanced ledger groups committed, by currency"),
  ["currency"]
)
export const ledgerEntries = family(counterKey("ledger_entries_total", "Ledger entries committed, by currency"), [
  "currency"
])

// Idempotency
export const idempotencyReplays = family(
  counterKey("idempotency_replays_total", "Stored responses replayed for a repeated idempotency key"),
  []
)()
export const idempotencyConflicts = family(
  counterKey(
    "idempotency_conflicts_total",
    "Idempotency keys refused: in_progress (409) or reused with another request (422)"
  ),
  ["reason"]
)

// Webhooks
export const webhookAttempts = family(
  counterKey(
    "webhook_attempts_total",
    "Webhook attempts, by outcome: succeeded (2xx), rejected (other status), error (no answer, timeout, refused address)"
  ),
  ["outcome"]
)
export const webhookDeliveriesFailed = family(
  counterKey("webhook_deliveries_failed_total", "Webhook deliveries that failed for good (retries exhausted)"),
  []
)()
export const webhookDeliveryLag = family(
  histogramKey(
    "webhook_delivery_lag_seconds",
    "Seconds between a webhook attempt becoming due and its start",
    lagBounds
  ),
  []
)()
export const webhookQueueDepth = family(
  gaugeKey("webhook_queue_depth", "Webhook deliveries pending or retrying (all processes)"),
  []
)()
export const webhookDueDeliveries = family(
  gaugeKey("webhook_due_deliveries", "Webhook deliveries due now and not yet attempted"),
  []
)()
export const webhookOldestDueSeconds = family(
  gaugeKey(
    "webhook_oldest_due_age_seconds",
    "Age of the oldest webhook delivery that is due and not yet attempted (0: none)"
  ),
  []
)()

// Database pool (this process)
export const databasePoolConnections = family(
  gaugeKey("db_pool_connections", "Connections of this process's pool, by state (in_use, idle)"),
  ["state"]
)
export const databasePoolWaiting = family(
  gaugeKey("db_pool_waiting", "Queries waiting for a connection of this process's pool"),
  []
)()
export const databasePoolMax = family(gaugeKey("db_pool_max_connections", "Size limit of this process's pool"), [])()

// Workers
export const recoveryRuns = family(counterKey("recovery_runs_total", "Recovery passes, by outcome (ok, failed)"), [
  "outcome"
])
export const recoveredPayments = family(
  counterKey("recovery_resumed_payments_total", "Payment flows resumed by recovery"),
  []
)()
export const settlementRuns = family(
  counterKey("settlement_runs_total", "Settlement sweeps, by outcome (ok, failed)"),
  ["outcome"]
)
export const settledPayments = family(
  counterKey("settlement_settled_payments_total", "Payments moved to settled"),
  []
)()
export const processorNotifications = family(
  counterKey(
    "processor_notifications_total",
    "Verified notifications from the card processor, by outcome (dispute_applied, refund_failure_applied, already_applied, refund_failure_unmatched, ignored)"
  ),
  ["outcome"]
)
export const reconciliationRuns = family(
  counterKey("reconciliation_runs_total", "Reconciliations with the processor, by outcome (ok, failed)"),
  ["outcome"]
)
export const reconciliationDifferences = family(
  gaugeKey(
    "reconciliation_differences",
    "Differences the last reconciliation found between the books and the processor, by field"
  ),
  ["field"]
)

/**
 * Metrics an operator alerts on exist from the first scrape, at zero, so an alert on their rate
 * or absence works before the first event (labelled ones with their known label values).
 */
const alwaysPresent = () => [
  httpRequestsInFlight,
  idempotencyReplays,
  idempotencyConflicts("in_progress"),
  idempotencyConflicts("key_reused"),
  webhookAttempts("succeeded"),
  webhookAttempts("rejected"),
  webhookAttempts("error"),
  webhookDeliveriesFailed,
  webhookDeliveryLag,
  webhookQueueDepth,
  webhookDueDeliveries,
  webhookOldestDueSeconds,
  databasePoolConnections("in_use"),
  databasePoolConnections("idle"),
  databasePoolWaiting,
  databasePoolMax,
  recoveryRuns("ok"),
  recoveryRuns("failed"),
  recoveredPayments,
  settlementRuns("ok"),
  settlementRuns("failed"),
  settledPayments
]
let registered = false

const name = (id: string) => id.replace(/[^a-zA-Z0-9_:]/g, "_")
const labels = (tags: ReadonlyArray<readonly [string, string]>) =>
  tags.length === 0 ? "" : `{${tags.map(([key, value]) => `${key}="${value.replace(/["\\\n]/g, "_")}"`).join(",")}}`
const tagsOf = (attributes: Metric.Metric.AttributeSet | undefined): ReadonlyArray<readonly [string, string]> =>
  attributes === undefined ? [] : Object.entries(attributes).map(([key, value]) => [key, String(value)] as const)

/** Every Effect metric of the process in the Prometheus text exposition format, grouped by name. */
export const prometheusText: Effect.Effect<string> = Effect.sync(() => {
  if (!registered) {
    registered = true
    for (const metric of alwaysPresent()) metric.valueUnsafe(noContext)
  }
  const byName = new Map<string, { header: Array<string>; lines: Array<string> }>()
  for (const snapshot of Metric.snapshotUnsafe(noContext)) {
    const metricName = name(snapshot.id)
    const tags = tagsOf(snapshot.attributes)
    const tagText = labels(tags)
    const groupOf = (type: string) => {
      let group = byName.get(metricName)
      if (group === undefined) {
        group = { header: [], lines: [] }
        if (snapshot.description !== undefined) group.header.push(`# HELP ${metricName} ${snapshot.description}`)
        group.header.push(`# TYPE ${metricName} ${type}`)
        byName.set(metricName, group)
      }
      return group.lines
    }
    if (snapshot.type === "Counter") {
      groupOf(snapshot.state.incremental ? "counter" : "gauge").push(
        `${metricName}${tagText} ${Number(snapshot.state.count)}`
      )
    } else if (snapshot.type === "Gauge") {
      groupOf("gauge").push(`${metricName}${tagText} ${Number(snapshot.state.value)}`)
    } else if (snapshot.type === "Histogram") {
      const lines = groupOf("histogram")
      let infinite = false
      for (const [bound, count] of snapshot.state.buckets) {
        infinite ||= !Number.isFinite(bound)
        const le = Number.isFinite(bound) ? String(bound) : "+Inf"
        lines.push(`${metricName}_bucket${labels([...tags, ["le", le]])} ${count}`)
      }
      // Prometheus requires the +Inf bucket; Effect 4's histograms stop at their last boundary.
      if (!infinite) lines.push(`${metricName}_bucket${labels([...tags, ["le", "+Inf"]])} ${snapshot.state.count}`)
      lines.push(`${metricName}_sum${tagText} ${snapshot.state.sum}`)
      lines.push(`${metricName}_count${tagText} ${snapshot.state.count}`)
    }
  }
  const out: Array<string> = []
  for (const group of byName.values()) out.push(...group.header, ...group.lines)
  return out.join("\n") + "\n"
})
