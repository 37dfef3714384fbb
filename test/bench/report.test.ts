import { describe, expect, it } from "vitest"
import { renderReport, type Run } from "../../bench/report.ts"

const run = (scenario: string, date: string, rps: number, extra: Partial<Run> = {}): Run => ({
  scenario,
  date,
  connections: 64,
  duration_s: 10,
  service: {
    rps,
    latency: { p50: 58, p90: 87, p99: 114, max: 1020 },
    statusCodes: { "201": rps * 10 },
    per_request: { service_cpu_ms: 0.94, postgres_cpu_ms: 0.58, statements: 0.34, commits: 0.31 },
    rss_peak_mb: 263
  },
  audit: { unbalanced_groups: 0, pending_payments: 0 },
  ...extra
})

describe("bench report", () => {
  it("renders every run of every scenario, with a chart per figure and the baselines of the same run", () => {
    const html = renderReport([
      run("create", "2026-11-22T23:20:00.000Z", 1012.3, { pgbench: { tps: 489.7 }, baseline: { rps: 964.1 } }),
      run("create", "2026-11-22T22:30:00.000Z", 133.3),
      run("read", "2026-11-22T23:25:00.000Z", 3099.3)
    ])
    expect(html.startsWith("<!doctype html>")).toBe(true)
    expect(html.match(/<section>/g)?.length).toBe(2)
    expect(html.match(/<svg /g)?.length).toBe(6)
    // Runs in time order within a scenario, figures in the table and in the bars' titles.
    expect(html.indexOf("2026-11-22T22:30:00.000Z")).toBeLessThan(html.indexOf("2026-11-22T23:20:00.000Z"))
    expect(html).toContain("<td>1012.3</td>")
    expect(html).toContain("pgbench, same SQL: 489.7")
    expect(html).toContain("node:http + pg, same SQL: 964.1")
    expect(html).not.toMatch(/<script|https?:\/\//)
  })

  it("escapes what it prints", () => {
    expect(renderReport([run("<create>", "2026-11-22T23:20:00.000Z", 1)])).toContain("&lt;create&gt;")
  })
})
