/**
 * `--slo "p99<250ms,errors<0.1%,rate>100"`: objectives checked against the run's judged figures;
 * a missed one makes the harness exit non-zero. `--slo "ROUTE:p99<300ms,errors<0.1%"` sets them
 * on one route, named as the result's `routes` name it (`POST /api/v1/transactions`,
 * `POST /api/v1/transactions/:id/refund`, `GET /healthz`); several `--slo` flags add up.
 */
export type Objective = ObjectiveRule & {
  /** As written, with its route: `POST /api/v1/transactions:p99<300ms`. */
  readonly text: string
  /** The route it is set on; null: the whole run. */
  readonly route: string | null
}

export type ObjectiveRule =
  | { readonly kind: "latency"; readonly percentile: "p50" | "p90" | "p99" | "p999" | "max"; readonly limitMs: number }
  | { readonly kind: "errors"; readonly limitPercent: number }
  | { readonly kind: "rate"; readonly minimum: number }

/**
 * An objective as judged: what it measured, in the key of its unit (exactly one of them): a
 * latency in ms, an error rate in percent, a rate in requests/s, a share of requests (0 to 1).
 */
export interface ObjectiveResult {
  readonly objective: string
  /** The route it was set on; null: the whole run. */
  readonly route: string | null
  readonly measured_ms?: number
  readonly measured_percent?: number
  readonly measured_per_s?: number
  readonly measured_share?: number
  readonly met: boolean
}

/** The measured value of a judged objective and its unit, whichever key holds it. */
export const measuredOf = (
  result: ObjectiveResult
): { readonly value: number; readonly unit: "ms" | "%" | "/s" | "share" } =>
  result.measured_ms !== undefined ?
    { value: result.measured_ms, unit: "ms" }
    : result.measured_percent !== undefined ?
    { value: result.measured_percent, unit: "%" }
    : result.measured_per_s !== undefined ?
    { value: result.measured_per_s, unit: "/s" }
    : { value: result.measured_share ?? 0, unit: "share" }

/** `12.5 ms`, `0.05 %`, `120.0/s`, `0.998 share`. */
export const measuredText = (result: ObjectiveResult) => {
  const { value, unit } = measuredOf(result)
  return unit === "/s"
    ? `${value.toFixed(1)}/s`
    : unit === "ms"
    ? `${value.toFixed(2)} ms`
    : unit === "%"
    ? `${value.toFixed(3)}%`
    : `${value.toFixed(3)} of requests`
}

/** Objectives of several `--slo` flags, kept in one text (the result's `config.slo`), and read back. */
export const sloSeparator = " ; "

const number = "(\\d+(?:\\.\\d+)?)"
const latencyPattern = new RegExp(`^(p50|p90|p99|p999|max)<${number}(ms|s)$`)
const errorsPattern = new RegExp(`^errors<${number}%$`)
const ratePattern = new RegExp(`^rate>${number}$`)

/** The objectives of every `--slo` text (or of a `config.slo` joined by `sloSeparator`), or the first part one cannot read. */
export const parseSloFlags = (
  texts: ReadonlyArray<string>
): { readonly objectives: ReadonlyArray<Objective> } | { readonly error: string } => {
  const objectives: Array<Objective> = []
  for (const text of texts.flatMap((t) => t.split(sloSeparator.trim()))) {
    if (text.trim() === "") continue
    const parsed = parseSlo(text)
    if ("error" in parsed) return parsed
    objectives.push(...parsed.objectives)
  }
  if (objectives.length === 0) return { error: "--slo: no objective given" }
  return { objectives }
}

/**
 * The objectives of one `--slo` text, or the first part it cannot read. A route prefix ends at
 * the text's last colon (route names hold colons of their own: `/:id/`), and applies to every
 * objective of the text.
 */
export const parseSlo = (
  text: string
): { readonly objectives: ReadonlyArray<Objective> } | { readonly error: string } => {
  const colon = text.lastIndexOf(":")
  const route = colon === -1 ? null : text.slice(0, colon).trim().replace(/\s+/g, " ")
  if (route === "") return { error: `--slo: '${text.trim()}' names no route before its colon` }
  const objectives: Array<Objective> = []
  for (const raw of text.slice(colon + 1).split(",")) {
    const part = raw.replace(/\s+/g, "")
    if (part === "") continue
    const latency = latencyPattern.exec(part)
    const errors = errorsPattern.exec(part)
    const rate = ratePattern.exec(part)
    const common = { text: route === null ? part : `${route}:${part}`, route }
    if (latency !== null) {
      const limitMs = Number(latency[2]) * (latency[3] === "s" ? 1000 : 1)
      objectives.push({ ...common, kind: "latency", percentile: latency[1] as "p50", limitMs })
    } else if (errors !== null) {
      objectives.push({ ...common, kind: "errors", limitPercent: Number(errors[1]) })
    } else if (rate !== null) {
      objectives.push({ ...common, kind: "rate", minimum: Number(rate[1]) })
    } else {
      return {
        error:
          `--slo: cannot read '${raw.trim()}'; write objectives such as p50<20ms, p99<250ms, p999<1s, max<2s, errors<0.1%, rate>100, separated by commas, ` +
          "after ROUTE: to set them on one route (\"POST /api/v1/transactions:p99<300ms\")"
      }
    }
  }
  if (objectives.length === 0) return { error: "--slo: no objective given" }
  return { objectives }
}

export interface Figures {
  readonly requests: number
  readonly errors: number
  readonly latency_ms: {
    readonly p50: number
    readonly p90: number
    readonly p99: number
    readonly p999: number
    readonly max: number
  }
}

export interface RunFigures extends Figures {
  /** Requests per second over the load phase. */
  readonly rate: number
  /** Each route's figures (absent: no route objective can be met). */
  readonly routes?: ReadonlyArray<Figures & { readonly route: string }>
  /** Seconds of the judged load window, for a route's rate (absent: the rate's own span). */
  readonly windowSeconds?: number
}

const noRequests: Figures = { requests: 0, errors: 0, latency_ms: { p50: 0, p90: 0, p99: 0, p999: 0, max: 0 } }

export const evaluateSlo = (objectives: ReadonlyArray<Objective>, run: RunFigures): ReadonlyArray<ObjectiveResult> =>
  objectives.map((objective) => {
    const figures = objective.route === null ? run : run.routes?.find((r) => r.route === objective.route) ?? noRequests
    const common = { objective: objective.text, route: objective.route }
    switch (objective.kind) {
      case "latency": {
        const actual = figures.latency_ms[objective.percentile]
        return { ...common, measured_ms: actual, met: figures.requests > 0 && actual < objective.limitMs }
      }
      case "errors": {
        const actual = figures.requests === 0 ? 0 : (figures.errors / figures.requests) * 100
        return { ...common, measured_percent: actual, met: figures.requests > 0 && actual < objective.limitPercent }
      }
      case "rate": {
        const actual = objective.route === null ? run.rate : figures.requests / Math.max(0.001, run.windowSeconds ?? 1)
        return { ...common, measured_per_s: actual, met: actual > objective.minimum }
      }
    }
  })
