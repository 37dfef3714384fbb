import { Effect, Metric, MetricKeyType, MetricState } from "effect"

export const httpRequests = Metric.counter("http_requests_total", { description: "HTTP requests answered", incremental: true })
export const paymentEvents = Metric.counter("payment_events_total", { description: "Payment events emitted", incremental: true })

/**
 * A counter tagged with one label value, made once per value: `Metric.tagged` builds (and hashes)
 * a new metric key each time, which cost more than the increment on every request.
 */
export const taggedOnce = (counter: Metric.Metric.Counter<number>, key: string) => {
  const made = new Map<string, Metric.Metric.Counter<number>>()
  return (value: string) => {
    let tagged = made.get(value)
    if (tagged === undefined) {
      tagged = Metric.tagged(counter, key, value)
      made.set(value, tagged)
    }
    return tagged
  }
}
export const httpRequestsByStatus = taggedOnce(httpRequests, "status")
export const paymentEventsByType = taggedOnce(paymentEvents, "type")

const name = (key: { readonly name: string }) => key.name.replace(/[^a-zA-Z0-9_:]/g, "_")
const labels = (tags: ReadonlyArray<{ readonly key: string; readonly value: string }>) =>
  tags.length === 0 ? "" : `{${tags.map((t) => `${t.key}="${t.value.replace(/["\\\n]/g, "_")}"`).join(",")}}`

/** Every Effect metric of the process in the Prometheus text exposition format. */
export const prometheusText: Effect.Effect<string> = Effect.sync(() => {
  const lines: Array<string> = []
  const seen = new Set<string>()
  for (const pair of Metric.unsafeSnapshot()) {
    const metricName = name(pair.metricKey)
    const tagText = labels(pair.metricKey.tags)
    const state = pair.metricState
    const header = (type: string) => {
      if (seen.has(metricName)) return
      seen.add(metricName)
      const description = pair.metricKey.description
      if (description._tag === "Some") lines.push(`# HELP ${metricName} ${description.value}`)
      lines.push(`# TYPE ${metricName} ${type}`)
    }
    if (MetricState.isCounterState(state)) {
      header("counter")
      lines.push(`${metricName}${tagText} ${Number(state.count)}`)
    } else if (MetricState.isGaugeState(state)) {
      header("gauge")
      lines.push(`${metricName}${tagText} ${Number(state.value)}`)
    } else if (MetricState.isHistogramState(state) && MetricKeyType.isHistogramKey(pair.metricKey.keyType)) {
      header("histogram")
      for (const [bound, count] of state.buckets) {
        const le = Number.isFinite(bound) ? String(bound) : "+Inf"
        lines.push(`${metricName}_bucket${labels([...pair.metricKey.tags, { key: "le", value: le }])} ${count}`)
      }
      lines.push(`${metricName}_sum${tagText} ${state.sum}`)
      lines.push(`${metricName}_count${tagText} ${state.count}`)
    }
  }
  return lines.join("\n") + "\n"
})
