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
 *
 * Under `--stages` the offered rate moves, so the load is also judged window by window (each
 * stage cut into windows of at most `windowMs`): each window's offered rate is the curve's mean
 * over it, its achieved rate what was answered over it (shifted as below), and a window whose
 * share falls under `achievedShare` makes the run fall behind even when the whole load's share
 * does not (a service that kept up on the ramp and lost pace on the plateau).
 */
import type { LoadModel, LoadOutcome } from "./LoadModel.ts"
import { offeredBetween, type Stage, stageAt, stageText } from "./Stages.ts"

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
  /** `--stages`: the load window by window, the offered rate from the curve (absent without stages). */
  readonly windows?: ReadonlyArray<SaturationWindow>
}

export interface SaturationWindow {
  /** The stage's index (from 0) and its text (`30s 0→200/s`). */
  readonly stage: number
  readonly stage_text: string
  /** Seconds from the load's start. */
  readonly from_s: number
  readonly to_s: number
  readonly offered_per_s: number
  readonly achieved_per_s: number
  readonly issued: number
  readonly answered: number
  /** answered ÷ issued (null: too few issued to judge, under `windowMinimumRequests`). */
  readonly share: number | null
}

/** A stage is judged in windows of at most this long. */
export const windowMs = 10_000
/** A window with fewer requests issued is shown, not judged: a few requests more or less would swing its share. */
export const windowMinimumRequests = 50

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
export interface SaturationInput {
  readonly model: LoadModel
  readonly outcome: LoadOutcome
  readonly times: RequestTimes
  /** The median latency, ms: the answers' window is the load's, this much later. */
  readonly shiftMs: number
  /** The driver's CPU seconds over the load, for its busy share (null or absent: not known). */
  readonly driverCpuSeconds?: number | null
  /** Requests issued in the first `warmupMs` of the load are left out of the figures (`--warmup`). */
  readonly warmupMs?: number
}

export const saturationOf = (input: SaturationInput): SaturationFigures => {
  const { model, outcome, times, shiftMs } = input
  const fromMs = Math.min(outcome.loadEndedAtMs, outcome.startedAtMs + (input.warmupMs ?? 0))
  const spanMs = Math.max(1, outcome.loadEndedAtMs - fromMs)
  const answered = times.answeredBetween(fromMs + shiftMs, outcome.loadEndedAtMs + shiftMs)
  const issued = times.issuedBetween(fromMs, outcome.loadEndedAtMs)
  const achieved = answered / (spanMs / 1000)
  const common = {
    achieved_per_s: achieved,
    send_lag_ms: outcome.startLagMs,
    scripts_held_back: outcome.scriptsHeldBack
  }
  if (model.kind === "closed") return { verdict: "closed model", offered_per_s: null, achieved_share: null, ...common }
  const windows = model.stages === undefined || model.stages === null
    ? undefined
    : stageWindows(model.stages, { ...input, fromMs })
  const share = issued === 0 ? 0 : Math.min(1, answered / issued)
  const windowBehind = (windows ?? []).some((w) => w.share !== null && w.share < achievedShare)
  const behind = share < achievedShare || windowBehind || outcome.scriptsHeldBack > 0 ||
    outcome.startLagMs.p99 > driverLagBoundMs
  const cpu = input.driverCpuSeconds ?? null
  const driverBusy = cpu !== null &&
    cpu / Math.max(0.001, (outcome.endedAtMs - outcome.startedAtMs) / 1000) >= driverBusyShare
  const verdict: SaturationVerdict = !behind
    ? "kept pace"
    : driverBusy || (outcome.scriptsHeldBack === 0 && outcome.startLagMs.p99 > driverLagBoundMs)
    ? "the driver fell behind"
    : "the service fell behind"
  const offered = windows === undefined
    ? model.rate
    : offeredBetween(model.stages!, fromMs - outcome.startedAtMs, outcome.loadEndedAtMs - outcome.startedAtMs) /
      (spanMs / 1000)
  return {
    verdict,
    offered_per_s: offered,
    achieved_share: share,
    ...common,
    ...(windows === undefined ? {} : { windows })
  }
}

/** The load window by window along the curve, from `fromMs` (after the warm-up) to the last script's start. */
const stageWindows = (
  stages: ReadonlyArray<Stage>,
  input: SaturationInput & { readonly fromMs: number }
): Array<SaturationWindow> => {
  const { outcome, times, shiftMs } = input
  const windows: Array<SaturationWindow> = []
  const endMs = outcome.loadEndedAtMs - outcome.startedAtMs
  for (let from = input.fromMs - outcome.startedAtMs; from < endMs;) {
    const { index, stage, startMs } = stageAt(stages, from)
    const to = Math.min(endMs, startMs + stage.durationMs, from + windowMs)
    if (to <= from) break
    const issued = times.issuedBetween(outcome.startedAtMs + from, outcome.startedAtMs + to)
    const answered = times.answeredBetween(outcome.startedAtMs + from + shiftMs, outcome.startedAtMs + to + shiftMs)
    windows.push({
      stage: index,
      stage_text: stageText(stage),
      from_s: from / 1000,
      to_s: to / 1000,
      offered_per_s: offeredBetween(stages, from, to) / ((to - from) / 1000),
      achieved_per_s: answered / ((to - from) / 1000),
      issued,
      answered,
      share: issued < windowMinimumRequests ? null : Math.min(1, answered / issued)
    })
    from = to
  }
  return windows
}

/** Whether the verdict fails the run. */
export const saturated = (figures: SaturationFigures) =>
  figures.verdict === "the service fell behind" || figures.verdict === "the driver fell behind"

/** The verdict as a line of the summary. */
export const saturationLine = (figures: SaturationFigures) =>
  figures.offered_per_s === null
    ? `closed model: ${figures.achieved_per_s.toFixed(1)} requests/s answered`
    : `${figures.verdict}: ${figures.achieved_per_s.toFixed(1)} requests/s answered over the load window, ${
      figures.offered_per_s.toFixed(1)
    } offered; ` +
      `${
        ((figures.achieved_share ?? 0) * 100).toFixed(1)
      }% of the load's requests answered in it; send lag p50/p99/max ${figures.send_lag_ms.p50.toFixed(1)} / ` +
      `${figures.send_lag_ms.p99.toFixed(1)} / ${figures.send_lag_ms.max.toFixed(1)} ms` +
      (figures.scripts_held_back > 0 ? `, ${figures.scripts_held_back} scripts held back by slow answers` : "") +
      behindWindows(figures)

/** The stages' windows that fell behind, for the summary line. */
const behindWindows = (figures: SaturationFigures) => {
  const behind = (figures.windows ?? []).filter((w) => w.share !== null && w.share < achievedShare)
  return behind.length === 0 ?
    "" :
    `; behind in ${behind.length} window(s), first ${behind[0]!.from_s}-${behind[0]!.to_s} s (${
      behind[0]!.stage_text
    }): ` +
    `${behind[0]!.achieved_per_s.toFixed(1)} of ${behind[0]!.offered_per_s.toFixed(1)}/s`
}
