/**
 * The harness's own metrics in the Prometheus text format (`--prometheus-port N`, on 127.0.0.1),
 * for a dashboard during a long run: the offered and achieved rate, answers by route and status,
 * latency per route (a summary: p50, p90, p99, p99.9 from intended start), requests sent and in
 * flight, and laws violated so far (0 until the laws are checked after the drain).
 */
import { createServer, type Server } from "node:http"
import type { Status } from "./Recorder.ts"

export interface LiveFigures {
  /** Requests a second offered (open model), or null. */
  readonly offeredPerSecond: number | null
  /** Requests a second answered over the last progress interval. */
  readonly achievedPerSecond: number
  readonly routes: ReadonlyArray<{
    readonly route: string
    readonly statusCodes: ReadonlyMap<Status, number>
    readonly count: number
    readonly quantilesMs: ReadonlyArray<readonly [number, number]>
  }>
  readonly requestsSent: number
  readonly inFlight: number
  readonly lawsViolated: number
}

const label = (value: string) => value.replace(/\\/g, "\\\\").replace(/"/g, "\\\"").replace(/\n/g, "\\n")

/** The figures as Prometheus text (format 0.0.4). */
export const prometheusText = (figures: LiveFigures): string => {
  const lines: Array<string> = []
  const gauge = (name: string, help: string, value: number) =>
    lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} gauge`, `${name} ${value}`)
  if (figures.offeredPerSecond !== null) {
    gauge("harness_offered_requests_per_second", "Requests a second the open model offers.", figures.offeredPerSecond)
  }
  gauge(
    "harness_achieved_requests_per_second",
    "Requests a second answered over the last progress interval.",
    figures.achievedPerSecond
  )
  gauge("harness_requests_in_flight", "Requests sent and not answered yet.", figures.inFlight)
  gauge("harness_requests_sent", "Requests sent so far.", figures.requestsSent)
  gauge("harness_laws_violated", "Laws violated so far (checked after the drain).", figures.lawsViolated)
  lines.push(
    "# HELP harness_responses_total Answers by route and status (dropped, refused: no answer).",
    "# TYPE harness_responses_total counter"
  )
  for (const route of figures.routes) {
    for (const [status, count] of route.statusCodes) {
      lines.push(`harness_responses_total{route="${label(route.route)}",status="${label(String(status))}"} ${count}`)
    }
  }
  lines.push(
    "# HELP harness_latency_seconds Latency from each request's intended start, by route.",
    "# TYPE harness_latency_seconds summary"
  )
  for (const route of figures.routes) {
    for (const [quantile, ms] of route.quantilesMs) {
      lines.push(`harness_latency_seconds{route="${label(route.route)}",quantile="${quantile}"} ${ms / 1000}`)
    }
    lines.push(`harness_latency_seconds_count{route="${label(route.route)}"} ${route.count}`)
  }
  return `${lines.join("\n")}\n`
}

/** Serves `figures()` at /metrics on 127.0.0.1:`port`. */
export const servePrometheus = (port: number, figures: () => LiveFigures): Promise<Server> =>
  new Promise((done, fail) => {
    const server = createServer((request, response) => {
      if (request.url !== "/metrics") {
        response.writeHead(404).end()
        return
      }
      response.writeHead(200, { "content-type": "text/plain; version=0.0.4" }).end(prometheusText(figures()))
    })
    server.once("error", fail)
    server.listen(port, "127.0.0.1", () => done(server))
  })
