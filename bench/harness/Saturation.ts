/**
 * Saturation as a verdict: an open-model run whose achieved rate fell short of the offered one
 * measured a queue, not the service at that rate, and fails unless `--allow-saturation` says the
 * shortfall is what was meant. The verdict says who fell behind:
 * - the driver: its process was busy for `driverBusyShare` of the load or more (one core: it could
 *   not send faster), or scripts started late (send lag p99 over `driverLagBoundMs`) with none
 *   held back by slow answers;
 * - the service: under `achievedShare` of the load's requests were answered over the load window
 *   (`saturationOf`, the drain's tail left out), or scripts waited for running ones to end.
 * The closed model offers no rate: nothing to fall behind.
 */
import type { LoadModel, LoadOutcome } from "./LoadModel.ts"

/** The achieved share of the offered rate below which a run is saturated. */
export const achievedShare = 0.97
/** Send lag p99 (ms) above which the driver itself fell behind its arrival schedule. */
export const driverLagBoundMs = 50
/** The share of one core the driver's process used over the load above which it was the bottleneck. */
export const driverBusyShare = 0.9

export type SaturationVerdict = "kept pace" | "the service fell behind" | "the driver fell behind" | "closed model"

export interface SaturationFigures {
  readonly verdict: SaturationVerdict
  /** Requests a second offered (open model; null for the closed model). */
  readonly offered_per_s: number | null
  /** Requests a second answered over the load window (first intended start to last). */
  readonly achieved_per_s: number
  /** The load phase's requests answered within its (shifted) window (null for the closed model). */
  readonly achieved_share: number | null
  /** How late scripts started against their intended start, ms. */
  readonly send_lag_ms: { readonly p50: number; readonly p99: number; readonly max: number }
  readonly scripts_held_back: number
}

/** How a run's requests fell in time: counts of those answered, and those issued, in a window. */
export interface RequestTimes {
  readonly answeredBetween: (fromMs: number, toMs: number) => number
  readonly issuedBetween: (fromMs: number, toMs: number) => number
}

/**
 * The verdict of a run. The achieved rate counts the answers over a window as long as the load
 * phase, shifted by the median latency (`shiftMs`): in a steady state that window holds the
 * answers to the load phase's requests (the first ones come a latency after the start, the last a
 * latency after the end), so a run that kept pace reads what it issued, short runs included, and
 * one whose service answered slower reads what it answered. The share compares those answers with
 * the requests issued in the load phase itself (a scenario's scripts send on average about, not
 * exactly, what its estimate says, so the offered rate is not the measure of what was asked).
 */
export const saturationOf = (
  model: LoadModel,
  outcome: LoadOutcome,
  times: RequestTimes,
  shiftMs: number,
  /** The driver's CPU seconds over the load, for its busy share (null: not known). */
  driverCpuSeconds: number | null = null
): SaturationFigures => {
  const windowMs = Math.max(1, outcome.loadEndedAtMs - outcome.startedAtMs)
  const answered = times.answeredBetween(outcome.startedAtMs + shiftMs, outcome.loadEndedAtMs + shiftMs)
  const issued = times.issuedBetween(outcome.startedAtMs, outcome.loadEndedAtMs)
  const achieved = answered / (windowMs / 1000)
  const common = { achieved_per_s: achieved, send_lag_ms: outcome.startLagMs, scripts_held_back: outcome.scriptsHeldBack }
  if (model.kind === "closed") return { verdict: "closed model", offered_per_s: null, achieved_share: null, ...common }
  const share = issued === 0 ? 0 : Math.min(1, answered / issued)
  const behind = share < achievedShare || outcome.scriptsHeldBack > 0 || outcome.startLagMs.p99 > driverLagBoundMs
  const driverBusy = driverCpuSeconds !== null && driverCpuSeconds / Math.max(0.001, (outcome.endedAtMs - outcome.startedAtMs) / 1000) >= driverBusyShare
  const verdict: SaturationVerdict = !behind
    ? "kept pace"
    : driverBusy || (outcome.scriptsHeldBack === 0 && outcome.startLagMs.p99 > driverLagBoundMs)
    ? "the driver fell behind"
    : "the service fell behind"
  return { verdict, offered_per_s: model.rate, achieved_share: share, ...common }
}

/** Whether the verdict fails the run. */
export const saturated = (figures: SaturationFigures) =>
  figures.verdict === "the service fell behind" || figures.verdict === "the driver fell behind"

/** The verdict as a line of the summary. */
export const saturationLine = (figures: SaturationFigures) =>
  figures.offered_per_s === null
    ? `closed model: ${figures.achieved_per_s.toFixed(1)} requests/s answered`
    : `${figures.verdict}: ${figures.achieved_per_s.toFixed(1)} requests/s answered over the load window, ${figures.offered_per_s} offered; ` +
      `${((figures.achieved_share ?? 0) * 100).toFixed(1)}% of the load's requests answered in it; send lag p50/p99/max ${figures.send_lag_ms.p50.toFixed(1)} / ` +
      `${figures.send_lag_ms.p99.toFixed(1)} / ${figures.send_lag_ms.max.toFixed(1)} ms` +
      (figures.scripts_held_back > 0 ? `, ${figures.scripts_held_back} scripts held back by slow answers` : "")
