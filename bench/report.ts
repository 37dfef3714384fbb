/**
 * Renders every run in bench/results/*.json as one self-contained HTML page (inline SVG charts,
 * no scripts, no network): per scenario, requests per second over the runs with the baselines of
 * the same run, latency percentiles, and the per-request counters.
 *
 *   npm run bench:report [-- --out bench/results/report.html] [--json]
 */
import { Command } from "effect/cli"
import { readdirSync, readFileSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import * as Cli from "../src/platform/Cli.ts"

export interface Run {
  readonly scenario: string
  readonly date: string
  readonly connections: number
  readonly duration_s: number
  readonly service: {
    readonly rps: number
    readonly latency: { readonly p50: number; readonly p90: number; readonly p99: number; readonly max: number }
    readonly statusCodes: Record<string, number>
    readonly per_request: {
      readonly service_cpu_ms: number | null
      readonly postgres_cpu_ms: number | null
      readonly statements: number | null
      readonly commits: number | null
    }
    readonly rss_peak_mb: number
  }
  readonly pgbench?: { readonly tps?: number; readonly skipped?: string }
  readonly baseline?: { readonly rps?: number }
  readonly audit: Record<string, number>
}

export const escape = (text: string) =>
  text.replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", "\"": "&quot;" })[c]!)
export const fixed = (
  n: number | null | undefined,
  digits = 1
) => (n === null || n === undefined ? "n/a" : n.toFixed(digits))

/** Grouped bars: one group per run, one bar per series. */
export const barChart = (
  title: string,
  labels: ReadonlyArray<string>,
  series: ReadonlyArray<{ name: string; color: string; values: ReadonlyArray<number | null> }>
) => {
  const width = 760, height = 240, left = 60, bottom = 50, top = 30
  const max = Math.max(1, ...series.flatMap((s) => s.values.map((v) => v ?? 0)))
  const groupWidth = (width - left - 10) / Math.max(1, labels.length)
  const barWidth = Math.max(2, (groupWidth - 8) / series.length)
  const y = (v: number) => top + (height - top - bottom) * (1 - v / max)
  const bars = labels.flatMap((_, i) =>
    series.map((s, j) => {
      const v = s.values[i]
      if (v === null || v === undefined) return ""
      const x = left + i * groupWidth + 4 + j * barWidth
      return `<rect x="${x.toFixed(1)}" y="${y(v).toFixed(1)}" width="${(barWidth - 1).toFixed(1)}" height="${
        (height - bottom - y(v)).toFixed(1)
      }" fill="${s.color}"><title>${escape(s.name)}: ${fixed(v)}</title></rect>`
    })
  )
  const ticks = [0, 0.25, 0.5, 0.75, 1].map((f) =>
    `<line x1="${left}" x2="${width - 10}" y1="${y(max * f)}" y2="${y(max * f)}" stroke="#ddd"/><text x="${
      left - 6
    }" y="${y(max * f) + 4}" text-anchor="end">${fixed(max * f, max < 10 ? 2 : 0)}</text>`
  )
  const xLabels = labels.map((label, i) =>
    `<text x="${left + i * groupWidth + groupWidth / 2}" y="${height - bottom + 16}" text-anchor="middle">${
      escape(label)
    }</text>`
  )
  const legend = series.map((s, j) =>
    `<rect x="${left + j * 190}" y="6" width="12" height="12" fill="${s.color}"/><text x="${
      left + j * 190 + 16
    }" y="16">${escape(s.name)}</text>`
  )
  return `<figure><figcaption>${
    escape(title)
  }</figcaption><svg viewBox="0 0 ${width} ${height}" width="${width}" height="${height}" font-size="11" font-family="sans-serif">${
    [...ticks, ...bars, ...xLabels, ...legend].join("")
  }</svg></figure>`
}

export const renderReport = (runs: ReadonlyArray<Run>) => {
  const byScenario = new Map<string, Array<Run>>()
  for (const run of [...runs].sort((a, b) => a.date.localeCompare(b.date))) {
    byScenario.set(run.scenario, [...(byScenario.get(run.scenario) ?? []), run])
  }
  const sections = [...byScenario].map(([scenario, list]) => {
    const labels = list.map((r) => r.date.slice(5, 16).replace("T", " "))
    const rows = list.map((r) =>
      `<tr><td>${escape(r.date)}</td><td>${r.connections}</td><td>${fixed(r.service.rps)}</td>` +
      `<td>${r.service.latency.p50} / ${r.service.latency.p90} / ${r.service.latency.p99} / ${r.service.latency.max}</td>` +
      `<td>${fixed(r.service.per_request.service_cpu_ms, 2)}</td><td>${
        fixed(r.service.per_request.postgres_cpu_ms, 2)
      }</td>` +
      `<td>${fixed(r.service.per_request.statements, 2)}</td><td>${fixed(r.service.per_request.commits, 2)}</td>` +
      `<td>${r.service.rss_peak_mb}</td><td>${fixed(r.pgbench?.tps)}</td><td>${fixed(r.baseline?.rps)}</td>` +
      `<td>${escape(JSON.stringify(r.service.statusCodes))}</td><td>${escape(JSON.stringify(r.audit))}</td></tr>`
    )
    return `<section><h2>${escape(scenario)}</h2>
${
      barChart(
        "requests per second (service, and for create the same SQL under pgbench and behind node:http + pg)",
        labels,
        [
          {
            name: "service",
            color: "#2b6cb0",
            values: list.map((r) => r.service.rps)
          },
          { name: "pgbench, same SQL", color: "#a0aec0", values: list.map((r) => r.pgbench?.tps ?? null) },
          { name: "node:http + pg, same SQL", color: "#ed8936", values: list.map((r) => r.baseline?.rps ?? null) }
        ]
      )
    }
${
      barChart("latency, ms", labels, [
        { name: "p50", color: "#68d391", values: list.map((r) => r.service.latency.p50) },
        { name: "p90", color: "#f6ad55", values: list.map((r) => r.service.latency.p90) },
        { name: "p99", color: "#fc8181", values: list.map((r) => r.service.latency.p99) }
      ])
    }
${
      barChart("CPU ms per request", labels, [
        { name: "service", color: "#2b6cb0", values: list.map((r) => r.service.per_request.service_cpu_ms) },
        { name: "PostgreSQL", color: "#805ad5", values: list.map((r) => r.service.per_request.postgres_cpu_ms) }
      ])
    }
<table><thead><tr><th>run</th><th>conn.</th><th>req/s</th><th>p50/p90/p99/max ms</th><th>service CPU ms</th><th>PG CPU ms</th><th>statements</th><th>commits</th><th>RSS MB</th><th>pgbench tps</th><th>node:http+pg req/s</th><th>status codes</th><th>audit</th></tr></thead>
<tbody>${rows.join("\n")}</tbody></table></section>`
  })
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>payments benchmarks</title>
<style>body{font-family:sans-serif;margin:2em;color:#1a202c}table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ddd;padding:3px 6px;text-align:right}figure{margin:1em 0}figcaption{font-weight:bold;margin-bottom:4px}</style>
</head><body><h1>Benchmarks</h1><p>${runs.length} runs from bench/results (npm run bench). Figures are per machine: compare runs of one machine.</p>
${sections.join("\n")}</body></html>
`
}

const reportCommand = Command.make("bench:report", {
  out: Cli.text("out", "the HTML page to write", { default: "bench/results/report.html" }),
  json: Cli.toggle("json", "print the runs' summary as JSON instead of the table")
}).pipe(Command.withDescription(
  "Render every run in bench/results/*.json (npm run bench) as one self-contained HTML page, and list the runs. Exits 2 on bad arguments."
))

const main = () => {
  const { json, out } = Cli.parseOrExit(reportCommand, process.argv.slice(2))
  const directory = "bench/results"
  const runs = readdirSync(directory)
    .filter((name) => name.endsWith(".json"))
    .map((name) => JSON.parse(readFileSync(join(directory, name), "utf8")) as Run)
    .filter((run) => run.service?.per_request !== undefined)
  writeFileSync(out, renderReport(runs))
  const summary = runs.map((run) => ({
    scenario: run.scenario,
    date: run.date,
    connections: run.connections,
    requestsPerSecond: Number.isFinite(run.service.rps) ? Number(run.service.rps.toFixed(1)) : null,
    p99Ms: Number.isFinite(run.service.latency.p99) ? run.service.latency.p99 : null
  }))
  if (json) {
    console.log(JSON.stringify({ out, runs: summary }, null, 2))
    return
  }
  if (runs.length > 0) {
    console.log(
      Cli.table(
        ["scenario", "date", "connections", "requests/s", "p99 ms"],
        summary.map((run) => [run.scenario, run.date, run.connections, run.requestsPerSecond, run.p99Ms])
      )
    )
    console.log("")
  }
  console.log(`${runs.length} runs -> ${out}`)
}

if (process.argv[1]?.endsWith("report.ts")) main()
