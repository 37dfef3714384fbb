import {
  defaultFaults,
  defaultMix,
  type FaultRates,
  maximumClockSkewMs,
  type SimOptions,
  type WorkloadMix
} from "./Options.ts"
import { Prng } from "./Prng.ts"

/**
 * Swarm testing (as FoundationDB's and TigerBeetle's simulators do): instead of one fault profile
 * for every seed, each seed draws its own mix of faults and workload from its own stream
 * (`Prng.derive(seed, "swarm")`). Each class of fault is on or off by a coin toss, and when on
 * its rates are the default ones scaled by 0.5–4×; the workload's proportions are drawn anew,
 * the corners it aims at too (keys sent in the body, in both places, two different ones; disputes
 * during merchants' scripts; scores on a threshold). So
 * some seeds run with no crash and many disputes, some with only pauses, some with every fault at
 * once: combinations one profile never reaches. The draw depends on the seed alone, so
 * `npm run sim -- --seed N --swarm` replays seed N of a swarm sweep, and a replay file holds the
 * drawn options in full.
 */
export interface SwarmDraw {
  readonly faults: FaultRates
  readonly mix: WorkloadMix
  /** The classes of fault switched on, for the trace and the sweep's table. */
  readonly classes: ReadonlyArray<string>
  /** The network is a remote processor (sim/world/Processor.ts), with its faults scaled as a class. */
  readonly processor: boolean
}

/** The share of swarm seeds run against the simulated remote processor. */
export const processorWeight = 0.3

/** Classes of fault, each switched on or off as a whole, and the rates each covers. */
const faultClasses: ReadonlyArray<readonly [string, ReadonlyArray<keyof FaultRates>]> = [
  ["acquirer", ["acquirerDecline", "acquirerSlow", "acquirerTimeout", "acquirerTransient"]],
  ["crashes", ["crashesPerHour"]],
  ["commit-crashes", ["crashAfterCommit"]],
  ["pauses", ["pausesPerHour"]],
  ["webhook-errors", ["webhook4xx", "webhook5xx", "webhookSlow", "webhookNoAnswer"]],
  ["webhook-outages", ["webhookOutagesPerDay"]],
  ["store-errors", ["storeUnavailable", "storeLostCommit", "rotationLost"]],
  ["store-outages", ["storeOutagesPerDay"]],
  ["store-freezes", ["storeFreezesPerDay"]],
  ["disputes", ["disputes"]]
]

export const drawSwarm = (seed: number): SwarmDraw => {
  const prng = Prng.derive(seed >>> 0, "swarm")
  const faults: { -readonly [K in keyof FaultRates]: FaultRates[K] } = { ...defaultFaults }
  const classes: Array<string> = []
  for (const [name, rates] of faultClasses) {
    const on = prng.chance(0.5)
    const scale = 0.5 + prng.float() * 3.5
    for (const rate of rates) faults[rate] = on ? (defaultFaults[rate] ?? 0) * scale : 0
    if (on) classes.push(name)
  }
  // Disputes, when on, anywhere up to a third of the captured payments.
  if (faults.disputes !== 0) faults.disputes = prng.float() * 0.3
  // Clock skew: off, or anywhere within the tolerance.
  faults.clockSkewMs = prng.chance(0.5) ? prng.int(1, maximumClockSkewMs) : 0
  if (faults.clockSkewMs > 0) classes.push("skew")
  const mix: WorkloadMix = {
    ...defaultMix,
    manualCapture: prng.float() * 0.9,
    idempotencyKey: 0.5 + prng.float() * 0.5,
    duplicateCreate: prng.float() * 0.3,
    keyReuseMismatch: prng.float() * 0.1,
    refund: prng.float() * 0.9,
    overRefund: prng.float() * 0.5,
    racingOperations: prng.float() * 0.5,
    review: prng.float(),
    keyRotationsPerMerchantDay: prng.float() * 4,
    riskyTokens: prng.float() * 0.3,
    declineTokens: prng.float() * 0.3,
    // The corners the workload aims at (drawn after the rest: a seed's other draws stay as they were).
    bodyKey: prng.float() * 0.4,
    bothKeys: prng.float() * 0.4,
    differentKeys: prng.float() * 0.1,
    disputeDuringScript: prng.float() * 0.2,
    boundaryScores: prng.float() * 0.1,
    // The corners added later, drawn after those (a seed's earlier draws stay as they were).
    refundAfterDispute: prng.float(),
    endpointBacklogsPerDay: prng.float() * 3,
    rateLimitPushesPerDay: prng.float() * 2
  }
  // The remote processor, drawn after everything else (a seed's earlier draws stay as they were):
  // on for a share of the seeds, its faults at the default rates scaled by 0.5–4×.
  const processor = prng.chance(processorWeight)
  const processorScale = 0.5 + prng.float() * 3.5
  for (const rate of ["processorLost", "processorDuplicate", "processorLate", "processorOutagesPerDay"] as const) {
    faults[rate] = (defaultFaults[rate] ?? 0) * processorScale
  }
  if (processor) classes.push("processor")
  return { faults, mix, classes, processor }
}

/** `base` with the faults and the workload mix the swarm draws for `seed`. */
export const swarmOptions = (base: SimOptions, seed: number): SimOptions => {
  const { faults, mix, processor } = drawSwarm(seed)
  return { ...base, seed, faults, mix, processor: base.processor || processor }
}
