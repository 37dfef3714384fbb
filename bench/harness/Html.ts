/**
 * The harness's report as one self-contained HTML page (inline SVG, no scripts, no network), in
 * the style of `npm run bench:report`: latency and throughput over time, percentiles per route,
 * status codes, CPU of the harness beside the service's, each law and SLO objective.
 */
import { barChart, escape, fixed } from "../report.ts"
import type { AvailabilityFigures } from "./Availability.ts"
import { capacityPlot, latencyLimits } from "./Capacity.ts"
import { decodeHistogram } from "./Recorder.ts"
import { type HarnessResult, loadText } from "./Result.ts"
import { measuredText, parseSloFlags } from "./Slo.ts"

interface Series {
  readonly name: string
  readonly color: string
  /** One value a second; null: nothing that second (the line breaks there). */
  readonly values: ReadonlyArray<number | null>
  readonly dashed?: boolean
}

/** A span of the run shaded behind a chart's lines: a fault, from its start to its end (seconds). */
interface Band {
  readonly fromSecond: number
  readonly toSecond: number
  readonly label: string
  readonly color: string
}

/** A moment of the run drawn as a vertical line across a chart: a stage's start, the warm-up's end. */
interface Mark {
  readonly atSecond: number
  readonly label: string
}

/** What every chart over time draws behind its lines: the faults shaded, the stages and the warm-up marked. */
interface Timeline {
  readonly bands: ReadonlyArray<Band>
  readonly marks: ReadonlyArray<Mark>
}

const faultColors: Readonly<Record<string, string>> = { "kill": "#feb2b2", "pause": "#fbd38d", "db-pause": "#d6bcfa" }
const routeColors = [
  "#2b6cb0",
  "#c05621",
  "#2f855a",
  "#6b46c1",
  "#b83280",
  "#2c7a7b",
  "#975a16",
  "#4a5568",
  "#c53030",
  "#38a169"
]

const timelineOf = (result: HarnessResult): Timeline => ({
  bands: (result.faults ?? []).map((fault) => ({
    fromSecond: fault.start_s,
    toSecond: fault.end_s,
    label: `${fault.kind} ${fault.instance === null ? "database" : `instance ${fault.instance}`} ${
      fixed(fault.start_s, 1)
    }-${fixed(fault.end_s, 1)} s`,
    color: faultColors[fault.kind] ?? "#e2e8f0"
  })),
  marks: [
    ...(result.stage_spans ?? []).map((span) => ({
      atSecond: span.from_s,
      label: `stage ${span.stage + 1}: ${span.text}`
    })),
    ...((result.config.warmup_s ?? 0) > 0 ? [{ atSecond: result.config.warmup_s!, label: "end of warm-up" }] : [])
  ]
})

/** Lines over the run's seconds (consecutive, from the first), over the faults' bands and the stages' marks. */
const lineChart = (
  title: string,
  unit: string,
  seconds: ReadonlyArray<number>,
  series: ReadonlyArray<Series>,
  timeline: Timeline = { bands: [], marks: [] }
) => {
  const width = 760, height = 240, left = 60, bottom = 40, top = 30, right = 10
  const max = Math.max(1e-9, ...series.flatMap((s) => s.values.filter((v): v is number => v !== null)))
  const last = Math.max(1, seconds.length - 1)
  const x = (i: number) => left + ((width - left - right) * i) / last
  const y = (v: number) => top + (height - top - bottom) * (1 - v / max)
  const lines = series.flatMap((s) => {
    // A run of consecutive values is one polyline; a null breaks it.
    const runs: Array<Array<string>> = [[]]
    s.values.forEach((v, i) =>
      v === null ? runs.push([]) : runs[runs.length - 1]!.push(`${x(i).toFixed(1)},${y(v).toFixed(1)}`)
    )
    return runs.filter((run) => run.length > 0).map((run) =>
      run.length === 1
        ? `<circle cx="${run[0]!.split(",")[0]}" cy="${run[0]!.split(",")[1]}" r="1.5" fill="${s.color}"/>`
        : `<polyline fill="none" stroke="${s.color}" stroke-width="1.5"${
          s.dashed ? " stroke-dasharray=\"5 3\"" : ""
        } points="${run.join(" ")}"><title>${escape(s.name)}</title></polyline>`
    )
  })
  const first = seconds[0] ?? 0
  const xAt = (second: number) => Math.min(width - right, Math.max(left, x(second - first)))
  const shaded = timeline.bands.map((b) =>
    `<rect x="${xAt(b.fromSecond).toFixed(1)}" y="${top}" width="${
      Math.max(1, xAt(b.toSecond) - xAt(b.fromSecond)).toFixed(1)
    }" height="${height - top - bottom}" fill="${b.color}" opacity="0.6"><title>${escape(b.label)}</title></rect>`
  )
  const marked = timeline.marks.map((m, j) =>
    `<line x1="${xAt(m.atSecond).toFixed(1)}" x2="${xAt(m.atSecond).toFixed(1)}" y1="${top}" y2="${
      height - bottom
    }" stroke="#4a5568" stroke-dasharray="3 3"><title>${escape(m.label)}</title></line>` +
    `<text x="${(xAt(m.atSecond) + 3).toFixed(1)}" y="${top + 10 + (j % 3) * 11}" fill="#4a5568" font-size="9">${
      escape(m.label)
    }</text>`
  )
  const ticks = [0, 0.25, 0.5, 0.75, 1].map((f) =>
    `<line x1="${left}" x2="${width - right}" y1="${y(max * f)}" y2="${y(max * f)}" stroke="#ddd"/><text x="${
      left - 6
    }" y="${y(max * f) + 4}" text-anchor="end">${fixed(max * f, max < 10 ? 2 : 0)}</text>`
  )
  const step = Math.max(1, Math.ceil(seconds.length / 10))
  const xLabels = seconds.flatMap((
    second,
    i
  ) => (i % step === 0 ? [`<text x="${x(i)}" y="${height - bottom + 16}" text-anchor="middle">${second}s</text>`] : []))
  const legend = series.map((s, j) =>
    `<rect x="${left + j * 150}" y="6" width="12" height="12" fill="${s.color}"/><text x="${
      left + j * 150 + 16
    }" y="16">${escape(s.name)}</text>`
  )
  return `<figure><figcaption>${escape(title)} (${
    escape(unit)
  })</figcaption><svg viewBox="0 0 ${width} ${height}" width="${width}" height="${height}" font-size="11" font-family="sans-serif">${
    [...shaded, ...ticks, ...marked, ...lines, ...xLabels, ...legend].join("")
  }</svg></figure>`
}

/** The percentiles the distribution plot's x axis names: x = log10(1 / (1 - p)). */
const distributionTicks = ["0%", "90%", "99%", "99.9%", "99.99%", "99.999%"]

/**
 * Latency by percentile as HdrHistogram's plotter draws it: x on a log scale of 1/(1-p), so 90%,
 * 99%, 99.9%... sit at equal steps and the tail gets the room; y latency in ms. One line per
 * route, read from its histogram; each line ends at the percentile its count can resolve.
 */
export const percentileDistributionChart = (
  caption: string,
  curves: ReadonlyArray<{ readonly name: string; readonly histogramUs: string }>
) => {
  const width = 760, height = 300, left = 60, right = 30, top = 30, bottom = 40
  const pointsPerDecade = 20
  const read = curves.map((curve) => {
    const histogram = decodeHistogram(curve.histogramUs)
    const count = histogram.totalCount
    // 1/(1-p) no finer than the count: 1,000 answers resolve p99.9, no further.
    const reach = count === 0 ? 0 : Math.min(distributionTicks.length - 1, Math.log10(count))
    const points: Array<readonly [number, number]> = []
    for (let i = 0; count > 0 && i <= Math.ceil(reach * pointsPerDecade); i++) {
      const decades = Math.min(reach, i / pointsPerDecade)
      points.push([decades, histogram.getValueAtPercentile(100 * (1 - 10 ** -decades)) / 1000])
    }
    histogram.destroy()
    return { name: curve.name, points }
  })
  const maxX = Math.max(1, Math.ceil(Math.max(...read.map((r) => r.points.at(-1)?.[0] ?? 0))))
  const maxMs = Math.max(1e-3, ...read.flatMap((r) => r.points.map(([, ms]) => ms)))
  const x = (decades: number) => left + ((width - left - right) * decades) / maxX
  const y = (ms: number) => top + (height - top - bottom) * (1 - ms / maxMs)
  const lines = read.map((r, j) =>
    `<polyline fill="none" stroke="${routeColors[j % routeColors.length]}" stroke-width="1.5" points="${
      r.points.map(([d, ms]) => `${x(d).toFixed(1)},${y(ms).toFixed(1)}`).join(" ")
    }"><title>${escape(r.name)}</title></polyline>`
  )
  const xTicks = distributionTicks.slice(0, maxX + 1).map((label, d) =>
    `<line x1="${x(d)}" x2="${x(d)}" y1="${top}" y2="${height - bottom}" stroke="#eee"/><text x="${x(d)}" y="${
      height - bottom + 16
    }" text-anchor="middle">${label}</text>`
  )
  const yTicks = [0, 0.25, 0.5, 0.75, 1].map((f) =>
    `<line x1="${left}" x2="${width - right}" y1="${y(maxMs * f)}" y2="${y(maxMs * f)}" stroke="#ddd"/><text x="${
      left - 6
    }" y="${y(maxMs * f) + 4}" text-anchor="end">${fixed(maxMs * f, maxMs < 10 ? 2 : 0)}</text>`
  )
  const legend = read.map((r, j) =>
    `<rect x="${left + (j % 3) * 230}" y="${height - 12 + Math.floor(j / 3) * 14}" width="10" height="10" fill="${
      routeColors[j % routeColors.length]
    }"/><text x="${left + (j % 3) * 230 + 14}" y="${height - 3 + Math.floor(j / 3) * 14}">${escape(r.name)}</text>`
  )
  const legendRows = Math.ceil(read.length / 3)
  return `<figure><figcaption>${
    escape(caption)
  } (ms; x: percentile on a log scale of 1/(1-p))</figcaption><svg viewBox="0 0 ${width} ${
    height + legendRows * 14
  }" width="${width}" height="${height + legendRows * 14}" font-size="11" font-family="sans-serif">${
    [...xTicks, ...yTicks, ...lines, ...legend].join("")
  }</svg></figure>`
}

/** A value per second of the run from a series that skips seconds: null where it has none. */
const bySecond = <A>(
  seconds: ReadonlyArray<number>,
  entries: ReadonlyArray<A & { readonly at_s: number }>,
  value: (entry: A) => number
) => {
  const at = new Map(entries.map((entry) => [entry.at_s, entry]))
  return seconds.map((second) => {
    const entry = at.get(second)
    return entry === undefined ? null : value(entry)
  })
}

/** Each route's p50 and p99 second by second (the busiest routes first, ten at most). */
const routeTimelines = (result: HarnessResult, seconds: ReadonlyArray<number>, timeline: Timeline) =>
  [...result.routes].filter((r) => (r.timeline ?? []).length > 0).sort((a, b) => b.requests - a.requests).slice(0, 10)
    .map((route) =>
      lineChart(`${route.route}: latency over time`, "ms", seconds, [
        { name: "p50", color: "#68d391", values: bySecond(seconds, route.timeline!, (s) => s.p50_ms) },
        { name: "p99", color: "#fc8181", values: bySecond(seconds, route.timeline!, (s) => s.p99_ms) }
      ], timeline)
    ).join("\n")

const phaseRow = (
  name: string,
  latency: HarnessResult["latency_ms"],
  wait: HarnessResult["latency_ms"] | undefined,
  service: HarnessResult["latency_ms"] | undefined
) =>
  `<tr><td style="text-align:left">${escape(name)}</td>${
    [latency, wait, service].map((p) =>
      p === undefined
        ? "<td>-</td><td>-</td><td>-</td>"
        : `<td>${fixed(p.p50, 2)}</td><td>${fixed(p.p99, 2)}</td><td>${fixed(p.max, 2)}</td>`
    ).join("")
  }</tr>`

/** Where the answered requests' time went: waiting for a socket on the driver's side, then the service's time. */
const phasesSection = (result: HarnessResult) => {
  if (result.socket_wait_histogram_us === undefined || result.service_histogram_us === undefined) return ""
  return `<h2>Socket wait and service time</h2>
<p>Of the answered requests: the <b>socket wait</b> (from the request handed to the transport to a socket ready to write on: its turn among the requests in flight, the client's queue, a new connection's connect) and the <b>service time</b> (from the write to the whole answer read). The latency from the intended start adds the script's start lag to both.</p>
<table><thead><tr><th rowspan="2">route</th><th colspan="3">latency from intended start, ms</th><th colspan="3">socket wait, ms</th><th colspan="3">service time, ms</th></tr>
<tr>${"<th>p50</th><th>p99</th><th>max</th>".repeat(3)}</tr></thead><tbody>
${phaseRow("all", result.latency_ms, result.socket_wait_ms, result.service_ms)}
${result.routes.map((r) => phaseRow(r.route, r.latency_ms, r.socket_wait_ms, r.service_ms)).join("\n")}
</tbody></table>
${
    percentileDistributionChart("latency, socket wait and service time by percentile (all routes)", [
      { name: "latency from intended start", histogramUs: result.histogram_us },
      { name: "socket wait", histogramUs: result.socket_wait_histogram_us },
      { name: "service time", histogramUs: result.service_histogram_us }
    ])
  }`
}

/** Offered (the model's curve, and the requests issued each second) against achieved (answered each second). */
const offeredChart = (result: HarnessResult, seconds: ReadonlyArray<number>, timeline: Timeline) => {
  const offered = result.timeline.map((s) => s.offered_per_s ?? null)
  return lineChart("offered against achieved, per second", "requests/s", seconds, [
    ...(offered.some((o) => o !== null)
      ? [{ name: "offered (the model)", color: "#a0aec0", values: offered, dashed: true }]
      : []),
    ...(result.timeline.some((s) => s.issued !== undefined)
      ? [{ name: "issued (by intended start)", color: "#d69e2e", values: result.timeline.map((s) => s.issued ?? null) }]
      : []),
    { name: "answered", color: "#2b6cb0", values: result.timeline.map((s) => s.requests) },
    { name: "errors", color: "#c53030", values: result.timeline.map((s) => s.errors) }
  ], timeline)
}

const percentileRow = (
  name: string,
  requests: number,
  errors: number,
  p: HarnessResult["latency_ms"],
  codes: Record<string, number>
) =>
  `<tr><td style="text-align:left">${escape(name)}</td><td>${requests}</td><td>${errors}</td><td>${
    fixed(p.p50, 2)
  }</td><td>${fixed(p.p90, 2)}</td>` +
  `<td>${fixed(p.p99, 2)}</td><td>${fixed(p.p999, 2)}</td><td>${fixed(p.max, 2)}</td><td>${
    fixed(p.mean, 2)
  }</td><td style="text-align:left">${escape(JSON.stringify(codes))}</td></tr>`

/** A merged result's shards, each as it ran (nothing for one shard). */
const shardTable = (result: HarnessResult) => {
  const shards = result.per_shard ?? []
  if (shards.length < 2) return ""
  const first = Math.min(...shards.map((s) => s.start_epoch_ms))
  return `<table><thead><tr><th>shard</th><th>target</th><th>offered</th><th>merchants</th><th>seed</th><th>load started</th><th>requests</th><th>requests/s</th><th>errors</th><th>verdict</th></tr></thead><tbody>${
    shards.map((s) =>
      `<tr><td style="text-align:left">${escape(s.shard)}</td><td style="text-align:left">${escape(s.target)}</td>` +
      `<td>${
        s.rate_per_s === null ? `${s.connections} connections` : `${s.rate_per_s}/s`
      }</td><td>${s.merchants}</td><td>${s.seed}</td>` +
      `<td>+${fixed((s.start_epoch_ms - first) / 1000, 3)} s</td><td>${s.requests}</td><td>${
        fixed(s.achieved_per_s, 1)
      }</td><td>${s.errors}</td>` +
      `<td class="${s.passed ? "pass" : "fail"}">${s.passed ? "passed" : "failed"}</td></tr>`
    ).join("")
  }</tbody></table>`
}

const availabilityCells = (a: AvailabilityFigures) =>
  `<td>${a.requests}</td><td>${a.answered}</td><td>${a.refused}</td><td>${a.dropped}</td><td>${a.server_errors}</td><td>${
    a.availability === null ? "-" : `${fixed(a.availability * 100, 2)}%`
  }</td>`

/** The faults on the timeline and the availability in and out of them (nothing for a run without them). */
const faultsSection = (result: HarnessResult) => {
  const faults = result.faults ?? []
  const availability = result.availability
  if (availability === undefined && faults.length === 0) return ""
  const head =
    "<tr><th>window</th><th>from s</th><th>to s</th><th>requests</th><th>answered</th><th>refused</th><th>dropped</th><th>5xx</th><th>availability</th><th>notes</th></tr>"
  const rows = faults.map((f) =>
    `<tr><td style="text-align:left;background:${faultColors[f.kind] ?? "#fff"}">${escape(f.kind)} ${
      f.instance === null ? "database" : `instance ${f.instance}`
    }</td><td>${fixed(f.start_s, 1)}</td><td>${fixed(f.end_s, 1)}</td>${
      availabilityCells(f.availability)
    }<td style="text-align:left">${escape(f.notes.join("; "))}</td></tr>`
  )
  const totals = availability === undefined ? [] : [
    `<tr><td style="text-align:left"><b>overall</b></td><td></td><td></td>${
      availabilityCells(availability.overall)
    }<td style="text-align:left">${availability.moved_on_refusal} request(s) sent on to the next instance after a refused connection</td></tr>`,
    ...(faults.length === 0 ? [] : [
      `<tr><td style="text-align:left">during faults</td><td></td><td></td>${
        availabilityCells(availability.during_faults)
      }<td></td></tr>`,
      `<tr><td style="text-align:left">outside faults</td><td></td><td></td>${
        availabilityCells(availability.outside_faults)
      }<td></td></tr>`
    ])
  ]
  return `<h2>Faults and availability</h2>
<p>${
    faults.length === 0
      ? "No fault injected."
      : `Nemesis: ${escape(result.config.nemesis ?? "")}; each fault is shaded on the charts below.`
  } A request counts in the window it was sent in; answered: any status below 500.</p>
<table><thead>${head}</thead><tbody>${[...rows, ...totals].join("\n")}</tbody></table>`
}

/** `--find-capacity`: the plot of latency against offered rate, and each step. */
const capacitySection = (result: HarnessResult) => {
  const capacity = result.capacity
  if (capacity === undefined) return ""
  const parsed = result.config.slo === null ? null : parseSloFlags([result.config.slo])
  const limits = parsed === null || "error" in parsed ? [] : latencyLimits(parsed.objectives)
  const rows = capacity.steps.map((s, i) =>
    `<tr><td>${i + 1}</td><td>${s.offered_per_s}</td><td>${
      fixed(s.achieved_per_s, 1)
    }</td><td>${s.requests}</td><td>${s.errors}</td><td>${fixed(s.p50_ms, 2)}</td><td>${fixed(s.p99_ms, 2)}</td>` +
    `<td class="${s.passed ? "pass" : "fail"}">${s.passed ? "passed" : "failed"}</td><td style="text-align:left">${
      escape(s.failed_because ?? "")
    }</td></tr>`
  )
  return `<h2>Capacity</h2><p>${
    capacity.sustained_per_s === null
      ? "<b>No step met every objective.</b>"
      : `<b>Sustained: ${capacity.sustained_per_s} requests/s offered</b> met every objective and kept pace; the figures below are that step's.`
  }
Steps of ${capacity.step_s} s from ${capacity.start_per_s}/s, ×${capacity.growth} until one failed, then ${capacity.bisections} bisections at most (${capacity.max_steps} steps at most). Limit: ${
    escape(capacity.limit ?? "none found")
  }.</p>
${capacityPlot(capacity.steps, limits, "latency against offered rate")}
<table><thead><tr><th>step</th><th>offered/s</th><th>achieved/s</th><th>requests</th><th>errors</th><th>p50 ms</th><th>p99 ms</th><th>verdict</th><th>why</th></tr></thead><tbody>${
    rows.join("")
  }</tbody></table>`
}

/** `--stages`: the load window by window, offered (from the curve) against achieved. */
const stagesSection = (result: HarnessResult) => {
  const windows = result.saturation?.windows ?? []
  if (windows.length === 0) return ""
  const rows = windows.map((w) =>
    `<tr><td>${w.stage + 1}</td><td style="text-align:left">${escape(w.stage_text)}</td><td>${
      fixed(w.from_s, 1)
    }</td><td>${fixed(w.to_s, 1)}</td>` +
    `<td>${fixed(w.offered_per_s, 1)}</td><td>${
      fixed(w.achieved_per_s, 1)
    }</td><td>${w.issued}</td><td>${w.answered}</td>` +
    `<td>${w.share === null ? "too few to judge" : `${fixed(w.share * 100, 1)}%`}</td></tr>`
  )
  return `<h2>Stages</h2><p>Offered rate along ${
    escape(result.config.stages ?? "")
  }; each window's offered rate is the curve's mean over it, its achieved rate the answers over it (shifted by the median latency).</p>
<table><thead><tr><th>stage</th><th>shape</th><th>from s</th><th>to s</th><th>offered/s</th><th>achieved/s</th><th>issued</th><th>answered</th><th>answered share</th></tr></thead><tbody>${
    rows.join("")
  }</tbody></table>`
}

/** The run's span, load and verdict, and whether it was aborted or warmed up. */
const introSection = (result: HarnessResult) => {
  const config = result.config
  const load = loadText(config)
  const verdict = result.passed
    ? `<p class="pass">PASSED: every law held${result.slo.length > 0 ? " and every objective was met" : ""}.</p>`
    : `<p class="fail">FAILED: ${result.laws.filter((l) => !l.held).length} law(s) violated, ${
      result.slo.filter((s) => !s.met).length
    } objective(s) missed.</p>`
  return `<p>${escape(result.started_at)} to ${escape(result.ended_at)}; target ${escape(config.target)}${
    config.embedded ? " (started by the harness)" : ""
  }; ${escape(load)} for ${config.duration_s} s${
    config.max_requests === null ? "" : ` or ${config.max_requests} requests`
  }; ${config.merchants} merchants, seed ${config.seed}; shards ${escape(config.shards.join(", "))}.</p>
${verdict}
${
    (result.aborted ?? null) === null
      ? ""
      : `<p class="fail">Aborted (--abort-on-fail) at ${fixed(result.aborted!.at_s, 1)} s of load: ${
        escape(result.aborted!.objective)
      } was lost for good (${
        escape(result.aborted!.reason)
      }); the load stopped, drained, and the laws were checked.</p>`
  }
${
    (config.warmup_s ?? 0) === 0
      ? ""
      : `<p>Warm-up: the first ${config.warmup_s} s of the load; its ${
        result.judged?.left_out ?? 0
      } requests are in the latency and throughput figures below but left out of the objectives and the saturation verdict.</p>`
  }`
}

/** Each law, its verdict and its first violations. */
const lawsTable = (result: HarnessResult) => {
  return result.laws.length === 0
    ? "<p>This scenario checks no laws.</p>"
    : `<table><thead><tr><th>law</th><th>promise</th><th>checked</th><th>verdict</th><th>first violations</th></tr></thead><tbody>${
      result.laws.map((law) =>
        `<tr><td style="text-align:left">${escape(law.law)}</td><td style="text-align:left">${
          escape(law.description)
        }</td><td>${law.checked}</td>` +
        `<td class="${law.held ? "pass" : "fail"}">${
          law.held ? "held" : `${law.violation_count} violation(s)`
        }</td><td style="text-align:left">${
          law.first_violations.map((v) =>
            `<div><b>${escape(v.paymentId ?? "-")}</b>: ${escape(v.message)}${
              v.requests.length > 0 ? `<br><code>${v.requests.map(escape).join("<br>")}</code>` : ""
            }</div>`
          ).join("")
        }</td></tr>`
      ).join("\n")
    }</tbody></table>`
}

/** Each objective (--slo), what was measured and its verdict. */
const objectivesTable = (result: HarnessResult) => {
  return result.slo.length === 0
    ? "<p>No objectives given (--slo).</p>"
    : `<table><thead><tr><th>objective</th><th>actual</th><th>verdict</th></tr></thead><tbody>${
      result.slo.map((s) =>
        `<tr><td style="text-align:left">${escape(s.objective)}</td><td>${escape(measuredText(s))}</td><td class="${
          s.met ? "pass" : "fail"
        }">${s.met ? "met" : "missed"}</td></tr>`
      ).join("")
    }</tbody></table>`
}

/** Latency over time, by percentile, by route. */
const latencySection = (result: HarnessResult, seconds: ReadonlyArray<number>, timeline: Timeline) =>
  `<h2>Latency</h2>
${
    lineChart("latency over time, per second of answers", "ms", seconds, [
      { name: "p50", color: "#68d391", values: result.timeline.map((s) => s.latency_ms.p50) },
      { name: "p99", color: "#fc8181", values: result.timeline.map((s) => s.latency_ms.p99) },
      { name: "max", color: "#a0aec0", values: result.timeline.map((s) => s.latency_ms.max) }
    ], timeline)
  }
${
    result.requests === 0
      ? ""
      : percentileDistributionChart("latency by percentile", [
        { name: "all", histogramUs: result.histogram_us },
        ...result.routes.map((r) => ({ name: r.route, histogramUs: r.histogram_us }))
      ])
  }
<table><thead><tr><th>route</th><th>requests</th><th>errors</th><th>p50 ms</th><th>p90 ms</th><th>p99 ms</th><th>p99.9 ms</th><th>max ms</th><th>mean ms</th><th>status codes</th></tr></thead><tbody>
${percentileRow("all", result.requests, result.errors, result.latency_ms, result.status_codes)}
${result.routes.map((r) => percentileRow(r.route, r.requests, r.errors, r.latency_ms, r.status_codes)).join("\n")}
</tbody></table>
${routeTimelines(result, seconds, timeline)}`

/** The CPU of the harness, the service and PostgreSQL, and the harness's memory. */
const cpuSection = (result: HarnessResult) => {
  const cpu = result.cpu
  return `<h2>CPU and memory</h2>
<table><thead><tr><th></th><th>CPU s</th><th>CPU ms per request</th></tr></thead><tbody>
<tr><td style="text-align:left">harness</td><td>${fixed(cpu.harness_s, 2)}</td><td>${
    fixed(cpu.harness_ms_per_request, 3)
  }</td></tr>
<tr><td style="text-align:left">service</td><td>${
    cpu.service_s === null ? "n/a (not started by the harness)" : fixed(cpu.service_s, 2)
  }</td><td>${fixed(cpu.service_ms_per_request, 3)}</td></tr>
<tr><td style="text-align:left">PostgreSQL</td><td>${
    (cpu.postgres_s ?? null) === null ? "n/a (not started by the harness)" : fixed(cpu.postgres_s, 2)
  }</td><td>${fixed(cpu.postgres_ms_per_request ?? null, 3)}</td></tr>
</tbody></table>
${
    barChart("CPU ms per request", ["harness", "service", "PostgreSQL"], [{
      name: "CPU ms per request",
      color: "#805ad5",
      values: [cpu.harness_ms_per_request, cpu.service_ms_per_request, cpu.postgres_ms_per_request ?? null]
    }])
  }
<p>Harness RSS: ${fixed(cpu.harness_rss_mb.start, 0)} MB at the start, ${
    fixed(cpu.harness_rss_mb.end, 0)
  } MB at the end, ${fixed(cpu.harness_rss_mb.peak, 0)} MB peak.</p>
${
    cpu.harness_rss_mb.samples.length > 2
      ? lineChart("harness RSS, every 10 s", "MB", cpu.harness_rss_mb.samples.map(([second]) => second), [{
        name: "RSS",
        color: "#805ad5",
        values: cpu.harness_rss_mb.samples.map(([, mb]) => mb)
      }])
      : ""
  }`
}

export const renderHarnessReport = (result: HarnessResult) => {
  const timeline = timelineOf(result)
  const seconds = result.timeline.map((s) => s.at_s)
  const codes = Object.entries(result.status_codes).sort(([a], [b]) => a.localeCompare(b))
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>payments harness: ${
    escape(result.scenario)
  }</title>
<style>body{font-family:sans-serif;margin:2em;color:#1a202c}table{border-collapse:collapse;font-size:12px;margin:0.5em 0}td,th{border:1px solid #ddd;padding:3px 6px;text-align:right;vertical-align:top}figure{margin:1em 0}figcaption{font-weight:bold;margin-bottom:4px}.pass{color:#276749;font-weight:bold}.fail{color:#c53030;font-weight:bold}code{font-size:11px}</style>
</head><body><h1>Harness: ${escape(result.scenario)}</h1>
${introSection(result)}
${shardTable(result)}
<p>${result.requests} requests in ${fixed(result.load_s, 1)} s of load: ${
    fixed(result.rate_per_s, 1)
  } requests/s; ${result.errors} errors (no answer or 5xx); ${result.scripts} scripts, ${result.scripts_late} started late.</p>
<h2>Laws</h2>${lawsTable(result)}
${
    Object.keys(result.figures ?? {}).length === 0
      ? ""
      : `<p>The scenario's figures: ${
        Object.entries(result.figures!).map(([name, count]) => `${escape(name)} ${count}`).join(", ")
      }.</p>`
  }
${faultsSection(result)}
${capacitySection(result)}
${stagesSection(result)}
<h2>Objectives</h2>${objectivesTable(result)}
${latencySection(result, seconds, timeline)}
${phasesSection(result)}
<h2>Throughput</h2>
${offeredChart(result, seconds, timeline)}
<h2>Status codes</h2>
${
    barChart("requests by status", codes.map(([code]) => code), [{
      name: "requests",
      color: "#2b6cb0",
      values: codes.map(([, n]) => n)
    }])
  }
${cpuSection(result)}
</body></html>
`
}
