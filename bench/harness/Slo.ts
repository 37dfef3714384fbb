/**
 * `--slo "p99<250ms,errors<0.1%,rate>100"`: objectives checked against the run's figures; a missed
 * one makes the harness exit non-zero.
 */
export type Objective =
  | { readonly text: string; readonly kind: "latency"; readonly percentile: "p50" | "p90" | "p99" | "p999" | "max"; readonly limitMs: number }
  | { readonly text: string; readonly kind: "errors"; readonly limitPercent: number }
  | { readonly text: string; readonly kind: "rate"; readonly minimum: number }

export interface ObjectiveResult {
  readonly objective: string
  readonly actual: number
  readonly met: boolean
}

const number = "(\\d+(?:\\.\\d+)?)"
const latencyPattern = new RegExp(`^(p50|p90|p99|p999|max)<${number}(ms|s)$`)
const errorsPattern = new RegExp(`^errors<${number}%$`)
const ratePattern = new RegExp(`^rate>${number}$`)

/** The objectives of an `--slo` text, or the first part it cannot read. */
export const parseSlo = (text: string): { readonly objectives: ReadonlyArray<Objective> } | { readonly error: string } => {
  const objectives: Array<Objective> = []
  for (const raw of text.split(",")) {
    const part = raw.replace(/\s+/g, "")
    if (part === "") continue
    const latency = latencyPattern.exec(part)
    const errors = errorsPattern.exec(part)
    const rate = ratePattern.exec(part)
    if (latency !== null) {
      const limitMs = Number(latency[2]) * (latency[3] === "s" ? 1000 : 1)
      objectives.push({ text: part, kind: "latency", percentile: latency[1] as "p50", limitMs })
    } else if (errors !== null) {
      objectives.push({ text: part, kind: "errors", limitPercent: Number(errors[1]) })
    } else if (rate !== null) {
      objectives.push({ text: part, kind: "rate", minimum: Number(rate[1]) })
    } else {
      return { error: `--slo: cannot read '${raw.trim()}'; write objectives such as p50<20ms, p99<250ms, p999<1s, max<2s, errors<0.1%, rate>100, separated by commas` }
    }
  }
  if (objectives.length === 0) return { error: "--slo: no objective given" }
  return { objectives }
}

export interface RunFigures {
  readonly requests: number
  readonly errors: number
  /** Requests per second over the load phase. */
  readonly rate: number
  readonly latency_ms: { readonly p50: number; readonly p90: number; readonly p99: number; readonly p999: number; readonly max: number }
}

export const evaluateSlo = (objectives: ReadonlyArray<Objective>, figures: RunFigures): ReadonlyArray<ObjectiveResult> =>
  objectives.map((objective) => {
    switch (objective.kind) {
      case "latency": {
        const actual = figures.latency_ms[objective.percentile]
        return { objective: objective.text, actual, met: figures.requests > 0 && actual < objective.limitMs }
      }
      case "errors": {
        const actual = figures.requests === 0 ? 0 : (figures.errors / figures.requests) * 100
        return { objective: objective.text, actual, met: figures.requests > 0 && actual < objective.limitPercent }
      }
      case "rate":
        return { objective: objective.text, actual: figures.rate, met: figures.rate > objective.minimum }
    }
  })
