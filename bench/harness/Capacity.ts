/**
 * `--find-capacity`: the highest offered rate at which the service meets every objective. Steps
 * of the open model at a fixed rate, `--step-duration` each, over one set-up:
 * 1. grow: the start rate (`--rate`, 50 by default), then ×`growth` a step, until a step fails
 *    (an `--slo` objective missed, or the step saturated: the service fell behind its offered rate);
 * 2. bisect: between the highest rate that passed (0 when the first step failed) and the lowest
 *    that failed, `bisections` times, or until the two are within 5% of each other;
 * at most `maxSteps` steps in all. A step whose driver fell behind fails as any other (its
 * `driver_bound` says the harness, not the service, was the limit there).
 * Pure: the next rate from the steps so far, and the plot of latency against offered rate.
 */
import { escape, fixed } from "../report.ts"
import type { Objective } from "./Slo.ts"

export interface CapacitySearch {
  readonly startPerS: number
  readonly growth: number
  readonly bisections: number
  readonly maxSteps: number
}

export const defaultSearch = { growth: 1.5, bisections: 3, maxSteps: 12 } as const

/** One step as the result gives it. */
export interface CapacityStep {
  readonly offered_per_s: number
  readonly achieved_per_s: number
  readonly requests: number
  readonly errors: number
  readonly p50_ms: number
  readonly p99_ms: number
  readonly passed: boolean
  /** Why it failed (the objectives missed, the saturation verdict), null when it passed. */
  readonly failed_because: string | null
  /** The driver, not the service, fell behind: the limit there is the harness's. */
  readonly driver_bound: boolean
}

/** The search as the result gives it. */
export interface CapacityFigures {
  readonly start_per_s: number
  readonly growth: number
  readonly bisections: number
  readonly max_steps: number
  readonly step_s: number
  /** The highest offered rate whose step met every objective and kept pace; null: none did. */
  readonly sustained_per_s: number | null
  /** What failed at the lowest rate that failed (null: no step failed, the search ran out of steps). */
  readonly limit: string | null
  readonly steps: ReadonlyArray<CapacityStep>
  /** The SVG plot of latency against offered rate, next to the JSON result. */
  readonly plot: string
}

/** The highest rate that passed (null: none did). */
export const sustainedOf = (steps: ReadonlyArray<CapacityStep>): number | null => {
  const passed = steps.filter((s) => s.passed).map((s) => s.offered_per_s)
  return passed.length === 0 ? null : Math.max(...passed)
}

/** Rates are whole requests a second above 10, tenths below. */
const roundRate = (rate: number) => (rate >= 10 ? Math.round(rate) : Math.max(0.1, Math.round(rate * 10) / 10))

/** The next step's rate, or null when the search is over. */
export const nextRate = (steps: ReadonlyArray<CapacityStep>, search: CapacitySearch): number | null => {
  if (steps.length === 0) return search.startPerS
  if (steps.length >= search.maxSteps) return null
  const failed = steps.filter((s) => !s.passed).map((s) => s.offered_per_s)
  if (failed.length === 0) return roundRate(steps.at(-1)!.offered_per_s * search.growth)
  const high = Math.min(...failed)
  const low = Math.max(0, ...steps.filter((s) => s.passed && s.offered_per_s < high).map((s) => s.offered_per_s))
  const firstFailure = steps.findIndex((s) => !s.passed)
  const bisected = steps.length - 1 - firstFailure
  if (bisected >= search.bisections || high - low <= 0.05 * high) return null
  const next = roundRate((low + high) / 2)
  return next <= low || next >= high ? null : next
}

/** Latency objectives' limits (ms) drawn on the plot, by their text. */
export interface PlotLimit {
  readonly text: string
  readonly limitMs: number
}

/** The whole run's latency objectives (route objectives have their own scale), drawn on the plot. */
export const latencyLimits = (slo: ReadonlyArray<Objective>): Array<PlotLimit> =>
  slo.flatMap((o) => (o.kind === "latency" && o.route === null ? [{ text: o.text, limitMs: o.limitMs }] : []))

/**
 * p50 and p99 against the offered rate, a point a step (a failed one hollow), the objectives'
 * latency limits as dashed lines and the sustained rate as a vertical one: the knee.
 */
export const capacityPlot = (
  steps: ReadonlyArray<CapacityStep>,
  limits: ReadonlyArray<PlotLimit>,
  title: string
): string => {
  const width = 760, height = 360, left = 64, right = 16, top = 40, bottom = 48
  const sorted = [...steps].sort((a, b) => a.offered_per_s - b.offered_per_s)
  const maxRate = Math.max(1, ...sorted.map((s) => s.offered_per_s)) * 1.05
  const maxMs = Math.max(1e-3, ...sorted.map((s) => s.p99_ms), ...limits.map((l) => l.limitMs)) * 1.1
  const x = (rate: number) => left + ((width - left - right) * rate) / maxRate
  const y = (ms: number) => top + (height - top - bottom) * (1 - ms / maxMs)
  const series = [{ name: "p50", color: "#2f855a", of: (s: CapacityStep) => s.p50_ms }, {
    name: "p99",
    color: "#c53030",
    of: (s: CapacityStep) => s.p99_ms
  }]
  const lines = series.map((line) => {
    const points = sorted.map((s) => `${x(s.offered_per_s).toFixed(1)},${y(line.of(s)).toFixed(1)}`).join(" ")
    const dots = sorted.map((s) =>
      `<circle cx="${x(s.offered_per_s).toFixed(1)}" cy="${y(line.of(s)).toFixed(1)}" r="4" fill="${
        s.passed ? line.color : "#fff"
      }" stroke="${line.color}" stroke-width="1.5">` +
      `<title>${
        escape(
          `${line.name} ${fixed(line.of(s), 2)} ms at ${s.offered_per_s}/s offered (${
            fixed(s.achieved_per_s, 1)
          } achieved)${s.passed ? "" : `: ${s.failed_because ?? "failed"}`}`
        )
      }</title></circle>`
    ).join("")
    return `<polyline fill="none" stroke="${line.color}" stroke-width="1.5" points="${points}"/>${dots}`
  })
  const limitLines = limits.map((l) =>
    `<line x1="${left}" x2="${width - right}" y1="${y(l.limitMs).toFixed(1)}" y2="${
      y(l.limitMs).toFixed(1)
    }" stroke="#718096" stroke-dasharray="6 4"/>` +
    `<text x="${width - right - 4}" y="${(y(l.limitMs) - 4).toFixed(1)}" text-anchor="end">${escape(l.text)}</text>`
  )
  const sustained = sustainedOf(steps)
  const knee = sustained === null ? [] : [
    `<line x1="${x(sustained).toFixed(1)}" x2="${x(sustained).toFixed(1)}" y1="${top}" y2="${
      height - bottom
    }" stroke="#2b6cb0" stroke-width="1.5"/>` +
    `<text x="${(x(sustained) + 4).toFixed(1)}" y="${top + 12}">sustained ${sustained}/s</text>`
  ]
  const ticks = [0, 0.25, 0.5, 0.75, 1].flatMap((f) => [
    `<line x1="${left}" x2="${width - right}" y1="${y(maxMs * f)}" y2="${y(maxMs * f)}" stroke="#eee"/><text x="${
      left - 6
    }" y="${y(maxMs * f) + 4}" text-anchor="end">${fixed(maxMs * f, maxMs < 10 ? 2 : 0)}</text>`,
    `<text x="${x(maxRate * f)}" y="${height - bottom + 16}" text-anchor="middle">${fixed(maxRate * f, 0)}</text>`
  ])
  const labels = [
    `<text x="${width / 2}" y="${height - 8}" text-anchor="middle">offered requests/s</text>`,
    `<text x="14" y="${height / 2}" transform="rotate(-90 14 ${height / 2})" text-anchor="middle">latency ms</text>`,
    `<text x="${left}" y="18" font-weight="bold">${escape(title)}</text>`,
    ...series.map((s, i) =>
      `<rect x="${left + 300 + i * 70}" y="8" width="12" height="12" fill="${s.color}"/><text x="${
        left + 316 + i * 70
      }" y="18">${s.name}</text>`
    ),
    `<text x="${left + 450}" y="18">hollow: step failed</text>`
  ]
  return `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${width} ${height}" width="${width}" height="${height}" font-size="11" font-family="sans-serif">` +
    `${[...ticks, ...limitLines, ...knee, ...lines, ...labels].join("")}</svg>\n`
}
