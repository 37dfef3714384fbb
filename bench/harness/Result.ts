/**
 * The harness's JSON result (for CI and for `harness merge`) and the merge of several shards'
 * results: histograms are decoded and added, then percentiles read from the sum.
 */
import type { CapacityFigures } from "./Capacity.ts"
import type { LawResult, Violation } from "./Contract.ts"
import type { ClusterAvailability, FaultFigures } from "./Nemesis.ts"
import {
  decodeHistogram,
  encodeHistogram,
  mergeEncoded,
  type Percentiles,
  percentilesOf,
  type RouteFigures,
  type SecondFigures
} from "./Recorder.ts"
import type { SaturationFigures } from "./Saturation.ts"
import { evaluateSlo, type ObjectiveResult, parseSloFlags } from "./Slo.ts"

/** At most this many violations of one law are kept in the result (the count is kept whole). */
export const violationsKept = 20

export interface LawFigures {
  readonly law: string
  readonly description: string
  readonly checked: number
  readonly held: boolean
  readonly violation_count: number
  readonly first_violations: ReadonlyArray<Violation>
}

export interface HarnessResult {
  readonly format: "payments-harness/2"
  readonly scenario: string
  readonly started_at: string
  readonly ended_at: string
  /** Wall-clock start of the load (ms since the epoch): merges line up the shards' timelines by it. */
  readonly start_epoch_ms: number
  readonly config: {
    readonly target: string
    readonly embedded: boolean
    /** `mixed`: a merge of open and closed shards (`rate` and `connections` then both total their own). */
    readonly model: "open" | "closed" | "mixed"
    /** The offered rate, requests/s (the stages' peak with `stages`; a merge: the open shards' sum). */
    readonly rate_per_s: number | null
    readonly arrival: string | null
    /** `--stages`: the offered rate's curve, e.g. "30s 0→200/s, 60s 200/s" (null without; absent in older files). */
    readonly stages?: string | null
    readonly connections: number | null
    readonly duration_s: number
    /** `--warmup`: seconds at the load's start whose requests are recorded, not judged (absent in older files). */
    readonly warmup_s?: number
    /** `--abort-on-fail` (absent in older files). */
    readonly abort_on_fail?: boolean
    readonly max_requests: number | null
    readonly merchants: number
    readonly seed: number
    readonly slo: string | null
    readonly shards: ReadonlyArray<string>
    /** `--start-at`: the moment the shards' loads were to start together (absent in older files). */
    readonly start_at?: string | null
    /** Service processes the harness started (absent in a file from before clusters). */
    readonly instances?: number
    /** `--nemesis` and its period, e.g. "kill,pause every 15s"; null without one. */
    readonly nemesis?: string | null
    /** `--planted-bug`: the bug planted in the service the harness started (absent: none). */
    readonly planted_bug?: string
    /** `--processor`: the share of the sandbox processor's answers lost after it acted. */
    readonly processor_lost_answer_share?: number
  }
  /** Seconds of load: from the first script's start to the last one's end. */
  readonly load_s: number
  readonly scripts: number
  /** Scripts the open model started more than 1 ms after their intended time (the harness fell behind). */
  readonly scripts_late: number
  readonly requests: number
  readonly errors: number
  /** The requests the objectives and the verdict judged: all but the warm-up's and, with --abort-on-fail, those past the planned count (`left_out`); absent in older files and merges. */
  readonly judged?: { readonly requests: number; readonly errors: number; readonly left_out: number }
  /**
   * Requests per second answered over the load window (the first intended start to the last; the
   * drain's tail left out), as `saturation.achieved_per_s`. A merged result: the shards' sum.
   */
  readonly rate_per_s: number
  /** The open model's offered rate against the achieved one, the send lag, and who fell behind (absent in older files and merges). */
  readonly saturation?: SaturationFigures
  readonly status_codes: Record<string, number>
  readonly latency_ms: Percentiles
  /** The HDR histogram of every latency in microseconds, encoded (compressed base64). */
  readonly histogram_us: string
  readonly routes: ReadonlyArray<RouteFigures>
  /**
   * Of the answered requests, where the time went on the driver's side of the wire: the wait for a
   * socket (a turn among the requests in flight, the client's queue, a connect) and the service's
   * time from the write to the whole answer, with their HDR histograms (absent in older files).
   */
  readonly socket_wait_ms?: Percentiles
  readonly socket_wait_histogram_us?: string
  readonly service_ms?: Percentiles
  readonly service_histogram_us?: string
  readonly timeline: ReadonlyArray<SecondFigures>
  /** `--stages`: each stage's span on the timeline, seconds from the load's start (absent without stages and in merges). */
  readonly stage_spans?: ReadonlyArray<
    { readonly stage: number; readonly text: string; readonly from_s: number; readonly to_s: number }
  >
  readonly cpu: {
    readonly harness_s: number
    readonly harness_ms_per_request: number | null
    /** The service's CPU over the same span; null when the harness did not start it. */
    readonly service_s: number | null
    readonly service_ms_per_request: number | null
    /** PostgreSQL's CPU during the load, when the harness started the database (null otherwise, or in a file without it). */
    readonly postgres_s?: number | null
    readonly postgres_ms_per_request?: number | null
    readonly harness_rss_mb: {
      readonly start: number
      readonly end: number
      readonly peak: number
      /** Every 10 s of the load: [second, MB], to see that memory stays flat over a long run. */
      readonly samples: ReadonlyArray<readonly [number, number]>
    }
  }
  readonly laws: ReadonlyArray<LawFigures>
  readonly slo: ReadonlyArray<ObjectiveResult>
  /** Every law held and every objective was met. */
  readonly passed: boolean
  /** `--abort-on-fail` stopped the load: the objective lost for good, why, when (s into the load), against how many planned requests; null: it ran to its end. */
  readonly aborted?: {
    readonly objective: string
    readonly reason: string
    readonly at_s: number
    readonly planned_requests: number
  } | null
  /** `--find-capacity`: the search, its steps and the sustained rate; the result's own figures are the sustained step's (absent without it). */
  readonly capacity?: CapacityFigures
  /** A merged result's shards, each as it ran (absent in one shard's result: its `config` says it). */
  readonly per_shard?: ReadonlyArray<ShardFigures>
  // The cluster's figures (absent in a file from before them, and in a merge).
  /** The faults the nemesis injected, on the timeline's seconds. */
  readonly faults?: ReadonlyArray<FaultFigures>
  /** Requests answered against refused or failed, overall and per fault window. */
  readonly availability?: ClusterAvailability
  /** The scenario's own counts (the merchants scenario: webhook `redeliveries`). */
  readonly figures?: Readonly<Record<string, number>>
}

/** One shard of a merged result: what it was told to do and what it did. */
export interface ShardFigures {
  readonly shard: string
  readonly target: string
  readonly model: HarnessResult["config"]["model"]
  /** The rate it offered (open model), requests per second. */
  readonly rate_per_s: number | null
  readonly connections: number | null
  readonly merchants: number
  readonly seed: number
  readonly start_epoch_ms: number
  readonly load_s: number
  readonly requests: number
  readonly errors: number
  /** Requests per second it sent and had answered (`rate_per_s` of its result). */
  readonly achieved_per_s: number
  readonly passed: boolean
}

/** A result's shards: a merged result's list, or the one shard a run's result is. */
export const shardFiguresOf = (result: HarnessResult): ReadonlyArray<ShardFigures> =>
  result.per_shard ?? result.config.shards.map((shard) => ({
    shard,
    target: result.config.target,
    model: result.config.model,
    rate_per_s: result.config.rate_per_s,
    connections: result.config.connections,
    merchants: result.config.merchants,
    seed: result.config.seed,
    start_epoch_ms: result.start_epoch_ms,
    load_s: result.load_s,
    requests: result.requests,
    errors: result.errors,
    achieved_per_s: result.rate_per_s,
    passed: result.passed
  }))

export const lawFigures = (laws: ReadonlyArray<LawResult>): Array<LawFigures> =>
  laws.map((law) => ({
    law: law.law,
    description: law.description,
    checked: law.checked,
    held: law.violations.length === 0,
    violation_count: law.violations.length,
    first_violations: law.violations.slice(0, violationsKept)
  }))

export const passedOf = (laws: ReadonlyArray<LawFigures>, slo: ReadonlyArray<ObjectiveResult>) =>
  laws.every((law) => law.held) && slo.every((objective) => objective.met)

const sumCounts = (parts: ReadonlyArray<Record<string, number>>) => {
  const total: Record<string, number> = {}
  for (const part of parts) for (const [key, count] of Object.entries(part)) total[key] = (total[key] ?? 0) + count
  return total
}

const mergedFigures = (histograms: ReadonlyArray<string>) => {
  const histogram = mergeEncoded(histograms)
  const figures = {
    latency_ms: percentilesOf(histogram),
    histogram_us: encodeHistogram(histogram),
    count: histogram.totalCount
  }
  histogram.destroy()
  return figures
}

const sum = (values: ReadonlyArray<number>) => values.reduce((n, v) => n + v, 0)
const distinct = <A>(values: ReadonlyArray<A>) => [...new Set(values)]

/** The load a configuration describes: `open, 175 requests/s constant`, `closed, 8 connections`, or both joined by `+`. */
export const loadText = (config: HarnessResult["config"]) =>
  [
    ...(config.rate_per_s === null
      ? []
      : [
        `open, ${(config.stages ?? null) === null ? `${config.rate_per_s} requests/s` : `stages ${config.stages}`}${
          config.arrival === null ? "" : ` ${config.arrival}`
        }`
      ]),
    ...(config.connections === null ? [] : [`closed, ${config.connections} connections`])
  ].join(" + ")

/**
 * The configuration of several shards run side by side, as totals: the offered rate of the open
 * shards and the connections of the closed ones add up, and so do the merchants (each shard
 * drives its own: its own keys file, or its own embedded service) and the request limits; the
 * targets are listed, the longest duration kept.
 */
const mergedConfig = (results: ReadonlyArray<HarnessResult>, sloText: string | null): HarnessResult["config"] => {
  const shards = results.flatMap(shardFiguresOf)
  const open = shards.filter((s) => s.rate_per_s !== null)
  const closed = shards.filter((s) => s.connections !== null)
  const configs = results.map((r) => r.config)
  const limits = configs.map((c) => c.max_requests)
  const starts = distinct(configs.map((c) => c.start_at ?? null))
  return {
    ...configs[0]!,
    target: distinct(shards.map((s) => s.target)).join(", "),
    embedded: configs.every((c) => c.embedded),
    model: closed.length === 0 ? "open" : open.length === 0 ? "closed" : "mixed",
    rate_per_s: open.length === 0 ? null : sum(open.map((s) => s.rate_per_s!)),
    arrival: open.length === 0 ? null : distinct(configs.flatMap((c) => c.arrival ?? [])).join("+"),
    connections: closed.length === 0 ? null : sum(closed.map((s) => s.connections!)),
    duration_s: Math.max(...configs.map((c) => c.duration_s)),
    max_requests: limits.every((l) => l !== null) ? sum(limits as Array<number>) : null,
    merchants: sum(shards.map((s) => s.merchants)),
    slo: sloText,
    shards: shards.map((s) => s.shard),
    start_at: starts.length === 1 ? starts[0]! : null
  }
}

/** RSS of several processes: the largest of each, and every 10 s sample as the largest shard's then. */
const mergedRss = (results: ReadonlyArray<HarnessResult>) => {
  const rss = results.map((r) => r.cpu.harness_rss_mb)
  const samples = new Map<number, number>()
  for (const [second, mb] of rss.flatMap((r) => r.samples)) samples.set(second, Math.max(samples.get(second) ?? 0, mb))
  return {
    start: Math.max(...rss.map((r) => r.start)),
    end: Math.max(...rss.map((r) => r.end)),
    peak: Math.max(...rss.map((r) => r.peak)),
    samples: [...samples].sort(([a], [b]) => a - b)
  }
}

/** One result from several shards' results: counts and histograms added, laws side by side. */
export const mergeResults = (results: ReadonlyArray<HarnessResult>): HarnessResult => {
  if (results.length === 0) throw new Error("nothing to merge")
  for (const result of results) {
    if (result.format !== "payments-harness/2") {
      throw new Error(
        `not a harness result of this version (format ${
          String(result.format)
        }; payments-harness/1 files, from before the units in keys, are not merged)`
      )
    }
  }
  const overall = mergedFigures(results.map((r) => r.histogram_us))
  const routeNames = [...new Set(results.flatMap((r) => r.routes.map((route) => route.route)))].sort()
  const routes: Array<RouteFigures> = routeNames.map((route) => {
    const parts = results.flatMap((r) => r.routes.filter((x) => x.route === route))
    const merged = mergedFigures(parts.map((p) => p.histogram_us))
    return {
      route,
      requests: parts.reduce((n, p) => n + p.requests, 0),
      errors: parts.reduce((n, p) => n + p.errors, 0),
      status_codes: sumCounts(parts.map((p) => p.status_codes)),
      latency_ms: merged.latency_ms,
      histogram_us: merged.histogram_us
    }
  })
  // Timelines line up by wall-clock second from the earliest shard's start.
  const startEpochMs = Math.min(...results.map((r) => r.start_epoch_ms))
  const bySecond = new Map<number, Array<SecondFigures>>()
  for (const result of results) {
    const shift = Math.round((result.start_epoch_ms - startEpochMs) / 1000)
    for (const second of result.timeline) {
      const at = second.at_s + shift
      bySecond.set(at, [...(bySecond.get(at) ?? []), second])
    }
  }
  const timeline: Array<SecondFigures> = [...bySecond].sort(([a], [b]) => a - b).map(([second, parts]) => {
    const merged = mergedFigures(parts.map((p) => p.histogram_us))
    const offered = parts.map((p) => p.offered_per_s ?? null)
    return {
      at_s: second,
      requests: parts.reduce((n, p) => n + p.requests, 0),
      errors: parts.reduce((n, p) => n + p.errors, 0),
      latency_ms: merged.latency_ms,
      histogram_us: merged.histogram_us,
      // Shards that ran this second side by side: what they issued and offered adds up.
      ...(parts.every((p) => p.issued !== undefined) ? { issued: parts.reduce((n, p) => n + p.issued!, 0) } : {}),
      ...(offered.some((o) => o !== null) ? { offered_per_s: offered.reduce<number>((n, o) => n + (o ?? 0), 0) } : {})
    }
  })
  const lawNames = [...new Set(results.flatMap((r) => r.laws.map((law) => law.law)))]
  const laws: Array<LawFigures> = lawNames.map((name) => {
    const parts = results.flatMap((r) => r.laws.filter((law) => law.law === name))
    const violations = parts.reduce((n, p) => n + p.violation_count, 0)
    return {
      law: name,
      description: parts[0]!.description,
      checked: parts.reduce((n, p) => n + p.checked, 0),
      held: violations === 0,
      violation_count: violations,
      first_violations: parts.flatMap((p) => p.first_violations).slice(0, violationsKept)
    }
  })
  const phases = results.every((r) => r.socket_wait_histogram_us !== undefined && r.service_histogram_us !== undefined)
    ? {
      wait: mergedFigures(results.map((r) => r.socket_wait_histogram_us!)),
      service: mergedFigures(results.map((r) => r.service_histogram_us!))
    }
    : null
  const requests = results.reduce((n, r) => n + r.requests, 0)
  const errors = results.reduce((n, r) => n + r.errors, 0)
  // Shards run side by side: their rates add up.
  const rate = results.reduce((n, r) => n + r.rate_per_s, 0)
  const harnessCpu = results.reduce((n, r) => n + r.cpu.harness_s, 0)
  const serviceCpus = results.map((r) => r.cpu.service_s)
  const serviceCpu = serviceCpus.every((s) => s === null) ? null : serviceCpus.reduce<number>((n, s) => n + (s ?? 0), 0)
  const postgresCpus = results.map((r) => r.cpu.postgres_s ?? null)
  const postgresCpu = postgresCpus.every((s) => s === null)
    ? null
    : postgresCpus.reduce<number>((n, s) => n + (s ?? 0), 0)
  const sloText = results.find((r) => r.config.slo !== null)?.config.slo ?? null
  const parsedSlo = sloText === null ? null : parseSloFlags([sloText])
  const slo = parsedSlo === null || "error" in parsedSlo
    ? []
    : evaluateSlo(parsedSlo.objectives, { requests, errors, rate, latency_ms: overall.latency_ms, routes })
  // From the first shard's start to the last one's end.
  const endEpochMs = Math.max(...results.map((r) => r.start_epoch_ms + r.load_s * 1000))
  return {
    format: "payments-harness/2",
    scenario: [...new Set(results.map((r) => r.scenario))].join("+"),
    started_at: results.map((r) => r.started_at).sort()[0]!,
    ended_at: results.map((r) => r.ended_at).sort().at(-1)!,
    start_epoch_ms: startEpochMs,
    config: mergedConfig(results, sloText),
    load_s: (endEpochMs - startEpochMs) / 1000,
    scripts: results.reduce((n, r) => n + r.scripts, 0),
    scripts_late: results.reduce((n, r) => n + r.scripts_late, 0),
    requests,
    errors,
    rate_per_s: rate,
    status_codes: sumCounts(results.map((r) => r.status_codes)),
    latency_ms: overall.latency_ms,
    histogram_us: overall.histogram_us,
    routes,
    ...(phases === null ? {} : {
      socket_wait_ms: phases.wait.latency_ms,
      socket_wait_histogram_us: phases.wait.histogram_us,
      service_ms: phases.service.latency_ms,
      service_histogram_us: phases.service.histogram_us
    }),
    timeline,
    cpu: {
      harness_s: harnessCpu,
      harness_ms_per_request: requests === 0 ? null : (harnessCpu * 1000) / requests,
      service_s: serviceCpu,
      service_ms_per_request: serviceCpu === null || requests === 0 ? null : (serviceCpu * 1000) / requests,
      postgres_s: postgresCpu,
      postgres_ms_per_request: postgresCpu === null || requests === 0 ? null : (postgresCpu * 1000) / requests,
      harness_rss_mb: mergedRss(results)
    },
    laws,
    slo,
    passed: passedOf(laws, slo),
    per_shard: results.flatMap(shardFiguresOf)
  }
}

/** Checks an encoded histogram decodes (a result file that was cut or edited fails here, not in the sum). */
export const checkResult = (result: HarnessResult) => {
  if (result.format !== "payments-harness/2") throw new Error(`format ${String(result.format)}, not payments-harness/2`)
  decodeHistogram(result.histogram_us).destroy()
  return result
}
