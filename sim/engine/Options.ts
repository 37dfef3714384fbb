/** Everything one simulation run depends on: the same options and seed replay the same run. */

import type { FaultRates, WorkloadMix } from "./Rates.ts"
export type { FaultRates, WorkloadMix } from "./Rates.ts"
import type { PlantedBug } from "../checks/PlantedBugs.ts"
export { isPlantedBug, type PlantedBug, plantedBugNames, plantedBugs } from "../checks/PlantedBugs.ts"

export interface SimOptions {
  readonly seed: number
  readonly merchants: number
  readonly payments: number
  readonly hours: number
  readonly faults: FaultRates
  readonly mix: WorkloadMix
  readonly webhooks: boolean
  /**
   * Webhook dispatchers sharing the store (as several processes would): they claim under leases,
   * and one takes over a claim that waited past its lease in another's backed-up endpoint queue.
   */
  readonly dispatchers: number
  /** Attempts in flight per endpoint and dispatcher (the production default is 8). */
  readonly endpointConcurrency: number
  readonly plantedBug: PlantedBug
  /** Lines of the trace kept for a failure report. */
  readonly traceTail: number
  /**
   * The simulated network is a remote processor (sim/world/Processor.ts): captures, cancels and
   * refunds go to it under their idempotency keys, with the faults `processorLost`,
   * `processorDuplicate`, `processorLate` and `processorOutagesPerDay`, and the processor laws
   * (sim/checks/ProcessorLaws.ts) judge the run. Off, nothing is drawn for it.
   */
  readonly processor: boolean
}

export const noFaults: FaultRates = {
  acquirerDecline: 0,
  acquirerSlow: 0,
  acquirerTimeout: 0,
  acquirerTransient: 0,
  acquirerInstant: 0,
  crashesPerHour: 0,
  webhook4xx: 0,
  webhook5xx: 0,
  webhookSlow: 0,
  webhookLagging: 0,
  webhookNoAnswer: 0,
  webhookOutagesPerDay: 0,
  storeUnavailable: 0,
  storeLostCommit: 0,
  storeOutagesPerDay: 0,
  rotationLost: 0,
  crashAfterCommit: 0,
  disputes: 0,
  pausesPerHour: 0,
  storeFreezesPerDay: 0,
  clockSkewMs: 0,
  processorLost: 0,
  processorDuplicate: 0,
  processorLate: 0,
  processorOutagesPerDay: 0
}

export const defaultFaults: FaultRates = {
  acquirerDecline: 0.03,
  acquirerSlow: 0.03,
  acquirerTimeout: 0.01,
  acquirerTransient: 0.03,
  crashesPerHour: 0.5,
  webhook4xx: 0.02,
  webhook5xx: 0.05,
  webhookSlow: 0.01,
  webhookLagging: 0,
  webhookNoAnswer: 0.01,
  webhookOutagesPerDay: 0.5,
  storeUnavailable: 0.002,
  storeLostCommit: 0.002,
  storeOutagesPerDay: 0.5,
  rotationLost: 0.1,
  crashAfterCommit: 0.0005,
  disputes: 0.01,
  pausesPerHour: 0.1,
  storeFreezesPerDay: 0.5,
  clockSkewMs: 500,
  processorLost: 0.02,
  processorDuplicate: 0.02,
  processorLate: 0.01,
  processorOutagesPerDay: 0.5
}

export const heavyFaults: FaultRates = {
  acquirerDecline: 0.1,
  acquirerSlow: 0.15,
  acquirerTimeout: 0.05,
  acquirerTransient: 0.15,
  crashesPerHour: 4,
  webhook4xx: 0.1,
  webhook5xx: 0.2,
  webhookSlow: 0.05,
  webhookLagging: 0,
  webhookNoAnswer: 0.05,
  webhookOutagesPerDay: 3,
  storeUnavailable: 0.01,
  storeLostCommit: 0.01,
  storeOutagesPerDay: 3,
  rotationLost: 0.3,
  crashAfterCommit: 0.003,
  disputes: 0.05,
  pausesPerHour: 1,
  storeFreezesPerDay: 3,
  clockSkewMs: 500,
  processorLost: 0.1,
  processorDuplicate: 0.1,
  processorLate: 0.05,
  processorOutagesPerDay: 3
}

export const defaultMix: WorkloadMix = {
  manualCapture: 0.3,
  idempotencyKey: 0.9,
  duplicateCreate: 0.05,
  keyReuseMismatch: 0.02,
  refund: 0.3,
  overRefund: 0.15,
  racingOperations: 0.1,
  review: 0.7,
  keyRotationsPerMerchantDay: 1,
  riskyTokens: 0.06,
  declineTokens: 0.06,
  bodyKey: 0.2,
  bothKeys: 0.2,
  differentKeys: 0.03,
  disputeDuringScript: 0.05,
  refundAfterDispute: 0.5,
  boundaryScores: 0.03,
  endpointBacklogsPerDay: 1,
  rateLimitPushesPerDay: 1
}

export const defaultOptions: SimOptions = {
  seed: 42,
  merchants: 20,
  payments: 10_000,
  hours: 48,
  faults: defaultFaults,
  mix: defaultMix,
  webhooks: true,
  dispatchers: 1,
  endpointConcurrency: 8,
  plantedBug: "none",
  traceTail: 40,
  processor: false
}

/**
 * The clock tolerance docs/operations.md states is 1 s between any two service processes: each
 * instance is at most half of it from true time.
 */
export const maximumClockSkewMs = 500

const faultNames: Record<string, keyof FaultRates> = {
  decline: "acquirerDecline",
  slow: "acquirerSlow",
  timeout: "acquirerTimeout",
  transient: "acquirerTransient",
  instant: "acquirerInstant",
  crash: "crashesPerHour",
  wh4xx: "webhook4xx",
  wh5xx: "webhook5xx",
  whslow: "webhookSlow",
  whlag: "webhookLagging",
  whnoanswer: "webhookNoAnswer",
  whoutage: "webhookOutagesPerDay",
  storedown: "storeUnavailable",
  storelost: "storeLostCommit",
  storeoutage: "storeOutagesPerDay",
  rotationlost: "rotationLost",
  crashcommit: "crashAfterCommit",
  dispute: "disputes",
  pause: "pausesPerHour",
  storefreeze: "storeFreezesPerDay",
  skew: "clockSkewMs",
  plost: "processorLost",
  pdup: "processorDuplicate",
  plate: "processorLate",
  poutage: "processorOutagesPerDay"
}

/**
 * `--faults` takes a preset (`none`, `default`, `heavy`) and/or overrides:
 * `heavy,crash=2,timeout=0.1`. Names: decline, slow, timeout, transient, instant (fractions of
 * authorizations; instant: answered at once, so the create is written once), crash (per hour), wh4xx, wh5xx, whslow, whlag, whnoanswer (fractions of webhook
 * attempts), whoutage (outages per endpoint per day), storedown (fraction of store operations
 * failing before they run), storelost (fraction of payment commits answered as failures),
 * storeoutage (store outages per day), rotationlost (fraction of API key rotations committed but
 * answered as failures), crashcommit (fraction of commits followed by a crash),
 * dispute (fraction of captured payments the network disputes, sim/world/Disputes.ts), pause (instance
 * pauses per hour), storefreeze (database freezes per day), skew (largest clock offset of an
 * instance, ms; at most 500, the documented tolerance being 1 s between two processes), and,
 * drawn only with `--processor`, plost, pdup, plate (fractions of processor calls answered lost,
 * arriving twice, answered past the caller's deadline) and poutage (processor outages per day).
 */
export const parseFaults = (text: string): FaultRates => {
  let faults: { -readonly [K in keyof FaultRates]: FaultRates[K] } = { ...defaultFaults }
  for (const part of text.split(",").map((p) => p.trim()).filter((p) => p !== "")) {
    if (part === "none") faults = { ...noFaults }
    else if (part === "default") faults = { ...defaultFaults }
    else if (part === "heavy") faults = { ...heavyFaults }
    else {
      const [name, value] = part.split("=")
      const key = faultNames[name ?? ""]
      const rate = Number(value)
      if (key === undefined || value === undefined || !Number.isFinite(rate) || rate < 0) {
        throw new Error(
          `--faults: unknown or invalid '${part}' (names: ${
            Object.keys(faultNames).join(", ")
          }; presets: none, default, heavy)`
        )
      }
      if (key === "clockSkewMs" && rate > maximumClockSkewMs) {
        throw new Error(
          `--faults: skew=${rate} is beyond the documented clock tolerance (at most ${maximumClockSkewMs} ms an instance, ${
            2 * maximumClockSkewMs
          } ms between two)`
        )
      }
      faults[key] = rate
    }
  }
  return faults
}

/** The `--faults` text that reproduces these rates exactly (for replay commands). */
export const formatFaults = (faults: FaultRates): string =>
  [
    "none",
    ...Object.entries(faultNames).filter(([, key]) => (faults[key] ?? 0) !== 0).map(([name, key]) =>
      `${name}=${faults[key]}`
    )
  ].join(",")

/** The exact command that replays a run. */
export const replayCommand = (options: SimOptions): string =>
  [
    "npm run sim --",
    `--seed ${options.seed}`,
    `--merchants ${options.merchants}`,
    `--payments ${options.payments}`,
    `--hours ${options.hours}`,
    `--faults ${formatFaults(options.faults)}`,
    options.webhooks ? "" : "--no-webhooks",
    options.dispatchers === defaultOptions.dispatchers ? "" : `--dispatchers ${options.dispatchers}`,
    options.endpointConcurrency === defaultOptions.endpointConcurrency
      ? ""
      : `--endpoint-concurrency ${options.endpointConcurrency}`,
    options.plantedBug === "none" ? "" : `--planted-bug ${options.plantedBug}`,
    options.processor ? "--processor" : "",
    JSON.stringify(options.mix) === JSON.stringify(defaultMix) ? "" : `--mix '${JSON.stringify(options.mix)}'`
  ].filter((part) => part !== "").join(" ")
