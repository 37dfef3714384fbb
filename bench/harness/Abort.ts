/**
 * `--abort-on-fail`: stop the load as soon as an objective is lost for good, that is, missed
 * whatever the requests still to come do.
 *
 * What bounds "still to come" is the planned count P: the requests the plan offers after the
 * warm-up (its arrivals × the scenario's requests a script, or `--max-requests` when smaller).
 * Under `--abort-on-fail` the objectives judge at most P requests (the first P issued after the
 * warm-up: `JudgeRules.cap`), so the judged count T ends somewhere in [N, P], N the judged
 * answers so far. An objective is lost once it is missed for every such T even if every later
 * request were fast and answered:
 * - `pX<L` (p50, p90, p99, p999): the percentile is the r-th smallest latency, r(T) = max(1,
 *   ⌊q·T + 0.5⌋) (as the HDR histogram reads it); it is at least L when fewer than r(T) latencies
 *   are under L. With S latencies ≥ L so far, T − S fast ones at best; T − r(T) grows with T, so
 *   the objective is lost once S > P − r(P).
 * - `max<L`: lost at the first latency ≥ L.
 * - `errors<Y%`: lost once E·100/P ≥ Y (E errors so far: the ratio only falls as T grows to P).
 * - `rate>N`: never lost early (it is read over the whole load).
 * An objective on a route is judged against P as well (a route's share of P is not planned), so
 * it is lost later than it could be, never sooner.
 */
import { type LoadModel, openOffsets } from "./LoadModel.ts"
import { isError, type Status } from "./Recorder.ts"
import type { Objective } from "./Slo.ts"

const quantiles = { p50: 0.5, p90: 0.9, p99: 0.99, p999: 0.999, max: 1 } as const

/** The rank the HDR histogram reads a quantile at, of `count` values. */
export const rankOf = (quantile: number, count: number) => Math.max(1, Math.floor(quantile * count + 0.5))

export interface AbortWatch {
  /** Sees one judged request. */
  readonly observe: (route: string, status: Status, latencyMs: number) => void
  /** The first objective lost for good, and its figures then; null while none is. */
  readonly lost: () => LostObjective | null
}

export interface LostObjective {
  readonly objective: string
  /** Why: `12 latencies ≥ 250 ms of at most 10 allowed in 1,000 planned`. */
  readonly reason: string
}

interface Tally {
  requests: number
  errors: number
  /** Latencies at or over the objective's limit (latency objectives). */
  slow: number
}

/** Whether `objective` is lost for good, given its tally and the planned count. */
export const lostReason = (objective: Objective, tally: Tally, planned: number): string | null => {
  switch (objective.kind) {
    case "latency": {
      const allowed = planned - rankOf(quantiles[objective.percentile], planned)
      return tally.slow > allowed
        ? `${tally.slow} latencies ≥ ${objective.limitMs} ms, more than the ${allowed} that ${planned} planned requests allow`
        : null
    }
    case "errors":
      return (tally.errors / planned) * 100 >= objective.limitPercent
        ? `${tally.errors} errors, ${((tally.errors / planned) * 100).toFixed(3)}% of the ${planned} planned requests`
        : null
    case "rate":
      return null
  }
}

/** Watches the judged requests against `objectives` and a planned count. */
export const abortWatch = (objectives: ReadonlyArray<Objective>, planned: number): AbortWatch => {
  const tallies = objectives.map(() => ({ requests: 0, errors: 0, slow: 0 }))
  let lost: LostObjective | null = null
  return {
    lost: () => lost,
    observe: (route, status, latencyMs) => {
      if (lost !== null) return
      const micros = Math.max(1, Math.round(latencyMs * 1000))
      objectives.forEach((objective, i) => {
        if (objective.route !== null && objective.route !== route) return
        const tally = tallies[i]!
        tally.requests++
        if (isError(status)) tally.errors++
        // In µs as the histogram records it: a latency it reads at or over the limit counts.
        if (objective.kind === "latency" && micros >= Math.round(objective.limitMs * 1000)) tally.slow++
        const reason = lost === null ? lostReason(objective, tally, planned) : null
        if (reason !== null) lost = { objective: objective.text, reason }
      })
    }
  }
}

/**
 * The planned count P: the requests the plan offers after the warm-up (its arrivals × the
 * scenario's requests a script, rounded up; `--max-requests` when smaller). Null for the closed
 * model without `--max-requests`: it plans no count.
 */
export const plannedRequests = (plan: {
  readonly model: LoadModel
  readonly durationMs: number
  readonly warmupMs: number
  readonly maxRequests: number | null
  readonly requestsPerScript: number
  readonly seed: number
}): number | null => {
  if (plan.model.kind === "closed") return plan.maxRequests
  let scripts = 0
  for (const offset of openOffsets(plan.model, plan.requestsPerScript, plan.seed)) {
    if (offset >= plan.durationMs) break
    if (offset >= plan.warmupMs) scripts++
    if (plan.maxRequests !== null && scripts * plan.requestsPerScript >= plan.maxRequests) break
  }
  const offered = Math.ceil(scripts * plan.requestsPerScript)
  return Math.max(1, plan.maxRequests === null ? offered : Math.min(offered, plan.maxRequests))
}
