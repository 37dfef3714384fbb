/**
 * The harness's report as one self-contained HTML page (inline SVG, no scripts, no network), in
 * the style of `npm run bench:report`: latency and throughput over time, percentiles per route,
 * status codes, CPU of the harness beside the service's, each law and SLO objective.
 */
import { barChart, escape, fixed } from "../report.ts"
import type { AvailabilityFigures } from "./Availability.ts"
import { capacityPlot, latencyLimits } from "./Capacity.ts"
import { type HarnessResult, loadText } from "./Result.ts"
import { measuredText, parseSloFlags } from "./Slo.ts"

interface Series {
  readonly name: string
  readonly color: string
  readonly values: ReadonlyArray<number>
}

/** A span of the run shaded behind a chart's lines: a fault, from its start to its end (seconds). */
interface Band {
  readonly fromSecond: number
  readonly toSecond: number
  readonly label: string
  readonly color: string
}

const faultColors: Readonly<Record<string, string>> = { "kill": "#feb2b2", "pause": "#fbd38d", "db-pause": "#d6bcfa" }

const bandsOf = (result: HarnessResult): Array<Band> =>
  (result.faults ?? []).map((fault) => ({
    fromSecond: fault.start_s,
    toSecond: fault.end_s,
    label: `${fault.kind} ${fault.instance === null ? "database" : `instance ${fault.instance}`} ${fixed(fault.start_s, 1)}-${fixed(fault.end_s, 1)} s`,
    color: faultColors[fault.kind] ?? "#e2e8f0"
  }))

/** Lines over the run's seconds (consecutive, from the first), over the faults' bands. */
const lineChart = (title: string, unit: string, seconds: ReadonlyArray<number>, series: ReadonlyArray<Series>, bands: ReadonlyArray<Band> = []) => {
  const width = 760, height = 240, left = 60, bottom = 40, top = 30, right = 10
  const max = Math.max(1e-9, ...series.flatMap((s) => s.values))
  const last = Math.max(1, seconds.length - 1)
  const x = (i: number) => left + ((width - left - right) * i) / last
  const y = (v: number) => top + (height - top - bottom) * (1 - v / max)
  const lines = series.map((s) => {
    const points = s.values.map((v, i) => `${x(i).toFixed(1)},${y(v).toFixed(1)}`).join(" ")
    return `<polyline fill="none" stroke="${s.color}" stroke-width="1.5" points="${points}"><title>${escape(s.name)}</title></polyline>`
  })
  const first = seconds[0] ?? 0
  const xAt = (second: number) => Math.min(width - right, Math.max(left, x(second - first)))
  const shaded = bands.map((b) =>
    `<rect x="${xAt(b.fromSecond).toFixed(1)}" y="${top}" width="${Math.max(1, xAt(b.toSecond) - xAt(b.fromSecond)).toFixed(1)}" height="${height - top - bottom}" fill="${b.color}" opacity="0.6"><title>${escape(b.label)}</title></rect>`
  )
  const ticks = [0, 0.25, 0.5, 0.75, 1].map((f) =>
    `<line x1="${left}" x2="${width - right}" y1="${y(max * f)}" y2="${y(max * f)}" stroke="#ddd"/><text x="${left - 6}" y="${y(max * f) + 4}" text-anchor="end">${fixed(max * f, max < 10 ? 2 : 0)}</text>`
  )
  const step = Math.max(1, Math.ceil(seconds.length / 10))
  const xLabels = seconds.flatMap((second, i) => (i % step === 0 ? [`<text x="${x(i)}" y="${height - bottom + 16}" text-anchor="middle">${second}s</text>`] : []))
  const legend = series.map((s, j) => `<rect x="${left + j * 150}" y="6" width="12" height="12" fill="${s.color}"/><text x="${left + j * 150 + 16}" y="16">${escape(s.name)}</text>`)
  return `<figure><figcaption>${escape(title)} (${escape(unit)})</figcaption><svg viewBox="0 0 ${width} ${height}" width="${width}" height="${height}" font-size="11" font-family="sans-serif">${[...shaded, ...ticks, ...lines, ...xLabels, ...legend].join("")}</svg></figure>`
}

const percentileRow = (name: string, requests: number, errors: number, p: HarnessResult["latency_ms"], codes: Record<string, number>) =>
  `<tr><td style="text-align:left">${escape(name)}</td><td>${requests}</td><td>${errors}</td><td>${fixed(p.p50, 2)}</td><td>${fixed(p.p90, 2)}</td>` +
  `<td>${fixed(p.p99, 2)}</td><td>${fixed(p.p999, 2)}</td><td>${fixed(p.max, 2)}</td><td>${fixed(p.mean, 2)}</td><td style="text-align:left">${escape(JSON.stringify(codes))}</td></tr>`

/** A merged result's shards, each as it ran (nothing for one shard). */
const shardTable = (result: HarnessResult) => {
  const shards = result.per_shard ?? []
  if (shards.length < 2) return ""
  const first = Math.min(...shards.map((s) => s.start_epoch_ms))
  return `<table><thead><tr><th>shard</th><th>target</th><th>offered</th><th>merchants</th><th>seed</th><th>load started</th><th>requests</th><th>requests/s</th><th>errors</th><th>verdict</th></tr></thead><tbody>${
    shards.map((s) =>
      `<tr><td style="text-align:left">${escape(s.shard)}</td><td style="text-align:left">${escape(s.target)}</td>` +
      `<td>${s.rate_per_s === null ? `${s.connections} connections` : `${s.rate_per_s}/s`}</td><td>${s.merchants}</td><td>${s.seed}</td>` +
      `<td>+${fixed((s.start_epoch_ms - first) / 1000, 3)} s</td><td>${s.requests}</td><td>${fixed(s.achieved_per_s, 1)}</td><td>${s.errors}</td>` +
      `<td class="${s.passed ? "pass" : "fail"}">${s.passed ? "passed" : "failed"}</td></tr>`
    ).join("")
  }</tbody></table>`
}

const availabilityCells = (a: AvailabilityFigures) =>
  `<td>${a.requests}</td><td>${a.answered}</td><td>${a.refused}</td><td>${a.dropped}</td><td>${a.server_errors}</td><td>${a.availability === null ? "-" : `${fixed(a.availability * 100, 2)}%`}</td>`

/** The faults on the timeline and the availability in and out of them (nothing for a run without them). */
const faultsSection = (result: HarnessResult) => {
  const faults = result.faults ?? []
  const availability = result.availability
  if (availability === undefined && faults.length === 0) return ""
  const head = "<tr><th>window</th><th>from s</th><th>to s</th><th>requests</th><th>answered</th><th>refused</th><th>dropped</th><th>5xx</th><th>availability</th><th>notes</th></tr>"
  const rows = faults.map((f) =>
    `<tr><td style="text-align:left;background:${faultColors[f.kind] ?? "#fff"}">${escape(f.kind)} ${f.instance === null ? "database" : `instance ${f.instance}`}</td><td>${fixed(f.start_s, 1)}</td><td>${fixed(f.end_s, 1)}</td>${availabilityCells(f.availability)}<td style="text-align:left">${escape(f.notes.join("; "))}</td></tr>`
  )
  const totals = availability === undefined ? [] : [
    `<tr><td style="text-align:left"><b>overall</b></td><td></td><td></td>${availabilityCells(availability.overall)}<td style="text-align:left">${availability.moved_on_refusal} request(s) sent on to the next instance after a refused connection</td></tr>`,
    ...(faults.length === 0 ? [] : [
      `<tr><td style="text-align:left">during faults</td><td></td><td></td>${availabilityCells(availability.during_faults)}<td></td></tr>`,
      `<tr><td style="text-align:left">outside faults</td><td></td><td></td>${availabilityCells(availability.outside_faults)}<td></td></tr>`
    ])
  ]
  return `<h2>Faults and availability</h2>
<p>${faults.length === 0 ? "No fault injected." : `Nemesis: ${escape(result.config.nemesis ?? "")}; each fault is shaded on the charts below.`} A request counts in the window it was sent in; answered: any status below 500.</p>
<table><thead>${head}</thead><tbody>${[...rows, ...totals].join("\n")}</tbody></table>`
}

/** `--find-capacity`: the plot of latency against offered rate, and each step. */
const capacitySection = (result: HarnessResult) => {
  const capacity = result.capacity
  if (capacity === undefined) return ""
  const parsed = result.config.slo === null ? null : parseSloFlags([result.config.slo])
  const limits = parsed === null || "error" in parsed ? [] : latencyLimits(parsed.objectives)
  const rows = capacity.steps.map((s, i) =>
    `<tr><td>${i + 1}</td><td>${s.offered_per_s}</td><td>${fixed(s.achieved_per_s, 1)}</td><td>${s.requests}</td><td>${s.errors}</td><td>${fixed(s.p50_ms, 2)}</td><td>${fixed(s.p99_ms, 2)}</td>` +
    `<td class="${s.passed ? "pass" : "fail"}">${s.passed ? "passed" : "failed"}</td><td style="text-align:left">${escape(s.failed_because ?? "")}</td></tr>`
  )
  return `<h2>Capacity</h2><p>${capacity.sustained_per_s === null ? "<b>No step met every objective.</b>" : `<b>Sustained: ${capacity.sustained_per_s} requests/s offered</b> met every objective and kept pace; the figures below are that step's.`}
Steps of ${capacity.step_s} s from ${capacity.start_per_s}/s, ×${capacity.growth} until one failed, then ${capacity.bisections} bisections at most (${capacity.max_steps} steps at most). Limit: ${escape(capacity.limit ?? "none found")}.</p>
${capacityPlot(capacity.steps, limits, "latency against offered rate")}
<table><thead><tr><th>step</th><th>offered/s</th><th>achieved/s</th><th>requests</th><th>errors</th><th>p50 ms</th><th>p99 ms</th><th>verdict</th><th>why</th></tr></thead><tbody>${rows.join("")}</tbody></table>`
}

/** `--stages`: the load window by window, offered (from the curve) against achieved. */
const stagesSection = (result: HarnessResult) => {
  const windows = result.saturation?.windows ?? []
  if (windows.length === 0) return ""
  const rows = windows.map((w) =>
    `<tr><td>${w.stage + 1}</td><td style="text-align:left">${escape(w.stage_text)}</td><td>${fixed(w.from_s, 1)}</td><td>${fixed(w.to_s, 1)}</td>` +
    `<td>${fixed(w.offered_per_s, 1)}</td><td>${fixed(w.achieved_per_s, 1)}</td><td>${w.issued}</td><td>${w.answered}</td>` +
    `<td>${w.share === null ? "too few to judge" : `${fixed(w.share * 100, 1)}%`}</td></tr>`
  )
  return `<h2>Stages</h2><p>Offered rate along ${escape(result.config.stages ?? "")}; each window's offered rate is the curve's mean over it, its achieved rate the answers over it (shifted by the median latency).</p>
<table><thead><tr><th>stage</th><th>shape</th><th>from s</th><th>to s</th><th>offered/s</th><th>achieved/s</th><th>issued</th><th>answered</th><th>answered share</th></tr></thead><tbody>${rows.join("")}</tbody></table>`
}

export const renderHarnessReport = (result: HarnessResult) => {
  const bands = bandsOf(result)
  const seconds = result.timeline.map((s) => s.at_s)
  const config = result.config
  const load = loadText(config)
  const verdict = result.passed ? `<p class="pass">PASSED: every law held${result.slo.length > 0 ? " and every objective was met" : ""}.</p>` : `<p class="fail">FAILED: ${result.laws.filter((l) => !l.held).length} law(s) violated, ${result.slo.filter((s) => !s.met).length} objective(s) missed.</p>`
  const codes = Object.entries(result.status_codes).sort(([a], [b]) => a.localeCompare(b))
  const laws = result.laws.length === 0
    ? "<p>This scenario checks no laws.</p>"
    : `<table><thead><tr><th>law</th><th>promise</th><th>checked</th><th>verdict</th><th>first violations</th></tr></thead><tbody>${
      result.laws.map((law) =>
        `<tr><td style="text-align:left">${escape(law.law)}</td><td style="text-align:left">${escape(law.description)}</td><td>${law.checked}</td>` +
        `<td class="${law.held ? "pass" : "fail"}">${law.held ? "held" : `${law.violation_count} violation(s)`}</td><td style="text-align:left">${
          law.first_violations.map((v) => `<div><b>${escape(v.paymentId ?? "-")}</b>: ${escape(v.message)}${v.requests.length > 0 ? `<br><code>${v.requests.map(escape).join("<br>")}</code>` : ""}</div>`).join("")
        }</td></tr>`
      ).join("\n")
    }</tbody></table>`
  const slo = result.slo.length === 0
    ? "<p>No objectives given (--slo).</p>"
    : `<table><thead><tr><th>objective</th><th>actual</th><th>verdict</th></tr></thead><tbody>${
      result.slo.map((s) => `<tr><td style="text-align:left">${escape(s.objective)}</td><td>${escape(measuredText(s))}</td><td class="${s.met ? "pass" : "fail"}">${s.met ? "met" : "missed"}</td></tr>`).join("")
    }</tbody></table>`
  const cpu = result.cpu
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>payments harness: ${escape(result.scenario)}</title>
<style>body{font-family:sans-serif;margin:2em;color:#1a202c}table{border-collapse:collapse;font-size:12px;margin:0.5em 0}td,th{border:1px solid #ddd;padding:3px 6px;text-align:right;vertical-align:top}figure{margin:1em 0}figcaption{font-weight:bold;margin-bottom:4px}.pass{color:#276749;font-weight:bold}.fail{color:#c53030;font-weight:bold}code{font-size:11px}</style>
</head><body><h1>Harness: ${escape(result.scenario)}</h1>
<p>${escape(result.started_at)} to ${escape(result.ended_at)}; target ${escape(config.target)}${config.embedded ? " (started by the harness)" : ""}; ${escape(load)} for ${config.duration_s} s${config.max_requests === null ? "" : ` or ${config.max_requests} requests`}; ${config.merchants} merchants, seed ${config.seed}; shards ${escape(config.shards.join(", "))}.</p>
${verdict}
${(result.aborted ?? null) === null ? "" : `<p class="fail">Aborted (--abort-on-fail) at ${fixed(result.aborted!.at_s, 1)} s of load: ${escape(result.aborted!.objective)} was lost for good (${escape(result.aborted!.reason)}); the load stopped, drained, and the laws were checked.</p>`}
${(config.warmup_s ?? 0) === 0 ? "" : `<p>Warm-up: the first ${config.warmup_s} s of the load; its ${result.judged?.left_out ?? 0} requests are in the latency and throughput figures below but left out of the objectives and the saturation verdict.</p>`}
${shardTable(result)}
<p>${result.requests} requests in ${fixed(result.load_s, 1)} s of load: ${fixed(result.rate_per_s, 1)} requests/s; ${result.errors} errors (no answer or 5xx); ${result.scripts} scripts, ${result.scripts_late} started late.</p>
<h2>Laws</h2>${laws}
${Object.keys(result.figures ?? {}).length === 0 ? "" : `<p>The scenario's figures: ${Object.entries(result.figures!).map(([name, count]) => `${escape(name)} ${count}`).join(", ")}.</p>`}
${faultsSection(result)}
${capacitySection(result)}
${stagesSection(result)}
<h2>Objectives</h2>${slo}
<h2>Latency</h2>
${lineChart("latency over time, per second of answers", "ms", seconds, [
    { name: "p50", color: "#68d391", values: result.timeline.map((s) => s.latency_ms.p50) },
    { name: "p99", color: "#fc8181", values: result.timeline.map((s) => s.latency_ms.p99) },
    { name: "max", color: "#a0aec0", values: result.timeline.map((s) => s.latency_ms.max) }
  ], bands)}
<table><thead><tr><th>route</th><th>requests</th><th>errors</th><th>p50 ms</th><th>p90 ms</th><th>p99 ms</th><th>p99.9 ms</th><th>max ms</th><th>mean ms</th><th>status codes</th></tr></thead><tbody>
${percentileRow("all", result.requests, result.errors, result.latency_ms, result.status_codes)}
${result.routes.map((r) => percentileRow(r.route, r.requests, r.errors, r.latency_ms, r.status_codes)).join("\n")}
</tbody></table>
<h2>Throughput</h2>
${lineChart("answers per second", "requests/s", seconds, [
    { name: "answers", color: "#2b6cb0", values: result.timeline.map((s) => s.requests) },
    { name: "errors", color: "#c53030", values: result.timeline.map((s) => s.errors) }
  ], bands)}
<h2>Status codes</h2>
${barChart("requests by status", codes.map(([code]) => code), [{ name: "requests", color: "#2b6cb0", values: codes.map(([, n]) => n) }])}
<h2>CPU and memory</h2>
<table><thead><tr><th></th><th>CPU s</th><th>CPU ms per request</th></tr></thead><tbody>
<tr><td style="text-align:left">harness</td><td>${fixed(cpu.harness_s, 2)}</td><td>${fixed(cpu.harness_ms_per_request, 3)}</td></tr>
<tr><td style="text-align:left">service</td><td>${cpu.service_s === null ? "n/a (not started by the harness)" : fixed(cpu.service_s, 2)}</td><td>${fixed(cpu.service_ms_per_request, 3)}</td></tr>
<tr><td style="text-align:left">PostgreSQL</td><td>${(cpu.postgres_s ?? null) === null ? "n/a (not started by the harness)" : fixed(cpu.postgres_s, 2)}</td><td>${fixed(cpu.postgres_ms_per_request ?? null, 3)}</td></tr>
</tbody></table>
${barChart("CPU ms per request", ["harness", "service", "PostgreSQL"], [{ name: "CPU ms per request", color: "#805ad5", values: [cpu.harness_ms_per_request, cpu.service_ms_per_request, cpu.postgres_ms_per_request ?? null] }])}
<p>Harness RSS: ${fixed(cpu.harness_rss_mb.start, 0)} MB at the start, ${fixed(cpu.harness_rss_mb.end, 0)} MB at the end, ${fixed(cpu.harness_rss_mb.peak, 0)} MB peak.</p>
${cpu.harness_rss_mb.samples.length > 2
    ? lineChart("harness RSS, every 10 s", "MB", cpu.harness_rss_mb.samples.map(([second]) => second), [{ name: "RSS", color: "#805ad5", values: cpu.harness_rss_mb.samples.map(([, mb]) => mb) }])
    : ""}
</body></html>
`
}
