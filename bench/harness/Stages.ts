/**
 * Load shapes (`--stages "30s:0-200,60s:200,30s:200-0"`): the open model's offered rate as a
 * curve of stages, each a ramp (the rate moves linearly from `fromPerS` to `toPerS` over the
 * stage) or a plateau (both the same). Pure functions of the curve: the rate at a moment, the
 * requests it offers over a span, the stage under way, and the arrivals' intended starts.
 *
 * Arrivals are laid out in "count space": the n-th script starts when the curve has offered n
 * scripts (constant arrivals), or at a Poisson process's n-th event in that space (exponential
 * gaps of mean 1, seeded): the inverse of the curve's cumulative count maps each to a time. A
 * plateau gives exactly the gaps `--rate` gives; a ramp's gaps shrink or grow with the rate.
 */
import { parseDurationMs } from "../../src/platform/Config.ts"
import { seededRandom } from "./Random.ts"

export interface Stage {
  readonly durationMs: number
  /** Requests a second at the stage's start and at its end. */
  readonly fromPerS: number
  readonly toPerS: number
}

/** At most this many stages (a shape, not a trace to replay). */
export const maxStages = 100

const ratePattern = /^(\d+(?:\.\d+)?)(?:-(\d+(?:\.\d+)?))?$/

/** The stages of a `--stages` text, or why it cannot be read. */
export const parseStages = (
  text: string,
  maxRatePerS: number
): { readonly stages: ReadonlyArray<Stage> } | { readonly error: string } => {
  const parts = text.split(",").map((part) => part.trim()).filter((part) => part !== "")
  const hint =
    "write stages as DURATION:RATE (a plateau) or DURATION:FROM-TO (a ramp), separated by commas, e.g. 30s:0-200,60s:200,30s:200-0"
  if (parts.length === 0) return { error: `--stages: no stage given; ${hint}` }
  if (parts.length > maxStages) return { error: `--stages: at most ${maxStages} stages, not ${parts.length}` }
  const stages: Array<Stage> = []
  for (const part of parts) {
    const colon = part.indexOf(":")
    const durationMs = colon === -1 ? null : parseDurationMs(part.slice(0, colon))
    const rate = colon === -1 ? null : ratePattern.exec(part.slice(colon + 1))
    if (durationMs === null || rate === null || durationMs <= 0 || durationMs > 86_400_000) {
      return { error: `--stages: cannot read '${part}'; ${hint}` }
    }
    const fromPerS = Number(rate[1])
    const toPerS = rate[2] === undefined ? fromPerS : Number(rate[2])
    if (fromPerS > maxRatePerS || toPerS > maxRatePerS) {
      return { error: `--stages: '${part}' offers more than ${maxRatePerS} requests/s` }
    }
    stages.push({ durationMs, fromPerS, toPerS })
  }
  if (stages.every((stage) => stage.fromPerS === 0 && stage.toPerS === 0)) {
    return { error: "--stages: every stage offers 0 requests/s" }
  }
  return { stages }
}

export const totalDurationMs = (stages: ReadonlyArray<Stage>) =>
  stages.reduce((sum, stage) => sum + stage.durationMs, 0)

/** The highest rate of the curve, requests/s. */
export const peakPerS = (stages: ReadonlyArray<Stage>) =>
  Math.max(...stages.map((stage) => Math.max(stage.fromPerS, stage.toPerS)))

/** A stage as text: `30s 0→200/s` or `60s 200/s`. */
export const stageText = (stage: Stage) =>
  `${stage.durationMs / 1000}s ${
    stage.fromPerS === stage.toPerS ? `${stage.fromPerS}/s` : `${stage.fromPerS}→${stage.toPerS}/s`
  }`

/** Requests a stage offers from its start to `ms` into it. */
const offeredWithin = (stage: Stage, ms: number) => {
  const s = Math.min(Math.max(0, ms), stage.durationMs) / 1000
  const slope = (stage.toPerS - stage.fromPerS) / (stage.durationMs / 1000)
  return stage.fromPerS * s + (slope * s * s) / 2
}

/** The stage under way `atMs` after the load's start (the last one at or past its end), its index and its start. */
export const stageAt = (stages: ReadonlyArray<Stage>, atMs: number) => {
  let startMs = 0
  for (let index = 0; index < stages.length; index++) {
    const stage = stages[index]!
    if (atMs < startMs + stage.durationMs || index === stages.length - 1) return { index, stage, startMs }
    startMs += stage.durationMs
  }
  throw new Error("stageAt: no stage")
}

/** The offered rate `atMs` after the load's start, requests/s (0 past the end). */
export const rateAt = (stages: ReadonlyArray<Stage>, atMs: number) => {
  if (atMs < 0 || atMs >= totalDurationMs(stages)) return 0
  const { stage, startMs } = stageAt(stages, atMs)
  return stage.fromPerS + (stage.toPerS - stage.fromPerS) * ((atMs - startMs) / stage.durationMs)
}

/** Requests the curve offers from `fromMs` to `toMs` after the load's start. */
export const offeredBetween = (stages: ReadonlyArray<Stage>, fromMs: number, toMs: number) => {
  let startMs = 0
  let total = 0
  for (const stage of stages) {
    total += offeredWithin(stage, toMs - startMs) - offeredWithin(stage, fromMs - startMs)
    startMs += stage.durationMs
  }
  return total
}

/**
 * When, ms into the stage, the stage has offered `count` requests (0 ≤ count ≤ its total):
 * the root of fromPerS·t + slope·t²/2 = count, written so that it holds for a flat stage, a ramp
 * from 0 and a ramp down alike.
 */
const timeOfCount = (stage: Stage, count: number) => {
  const a = stage.fromPerS
  const half = (stage.toPerS - stage.fromPerS) / (stage.durationMs / 1000) / 2
  const root = Math.sqrt(Math.max(0, a * a + 4 * half * count))
  const seconds = a + root === 0 ? 0 : (2 * count) / (a + root)
  return Math.min(stage.durationMs, seconds * 1000)
}

/**
 * Offsets (ms from the load's start) of the scripts' intended starts along the curve, in order,
 * until its end: a script every `requestsPerScript` requests the curve offers.
 */
export function* curveOffsets(
  stages: ReadonlyArray<Stage>,
  requestsPerScript: number,
  arrival: "constant" | "poisson",
  seed: number
): Generator<number> {
  const random = seededRandom(seed)
  let count = 0
  let stageStartMs = 0
  let countBefore = 0
  for (const stage of stages) {
    const stageCount = offeredWithin(stage, stage.durationMs) / requestsPerScript
    while (count < countBefore + stageCount) {
      yield stageStartMs + timeOfCount(stage, (count - countBefore) * requestsPerScript)
      count = arrival === "constant" ? count + 1 : count - Math.log(1 - random())
    }
    countBefore += stageCount
    stageStartMs += stage.durationMs
  }
}
