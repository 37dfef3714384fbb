/**
 * The load models: when each script starts. Time comes from an injected `Clock`, so the same
 * code runs under real time in the driver and under virtual time in tests.
 *
 * - Open model (`--rate N`): N requests a second. Scripts start at their intended times, a
 *   constant gap apart or with exponential gaps (`--arrival poisson`, seeded), whether or not
 *   earlier scripts have ended; the gap is the number of requests a script sends on average (the
 *   scenario's figure) divided by N. Over 1,000 scripts a second they start on a 4 ms tick
 *   (`sendTickMs`), the tick being their intended start. The gaps never follow the service's answers: an open model
 *   whose arrivals slowed when the service did would hide a stall. A script's first
 *   request is measured from its intended start, so a stalled service cannot hide its tail behind
 *   requests the harness never sent (coordinated omission, as in wrk2 and k6's
 *   constant-arrival-rate executor).
 * - Closed model (`--connections N`): N scripts at a time, each followed at once by the next.
 *
 * Both stop starting scripts at the end of the duration or once `maxRequests` requests were sent,
 * and resolve when every started script has ended (a script that rejects is counted, not fatal).
 */
import type { Clock } from "./Clock.ts"
import { seededRandom } from "./Random.ts"
import { curveOffsets, type Stage } from "./Stages.ts"

export type LoadModel =
  /**
   * `rate`: requests per second; with `stages` (`--stages`, bench/harness/Stages.ts) the curve's
   * peak, the arrivals following the curve.
   */
  | {
    readonly kind: "open"
    readonly rate: number
    readonly arrival: "constant" | "poisson"
    readonly stages?: ReadonlyArray<Stage> | null
  }
  | { readonly kind: "closed"; readonly connections: number }

export interface LoadPlan {
  readonly model: LoadModel
  readonly durationMs: number
  /** No script starts once this many requests were sent (null: the duration alone bounds the run). */
  readonly maxRequests: number | null
  readonly seed: number
  /**
   * Open model: at most this many scripts run at once; a script past it waits for one to end
   * (its latency still counts from its intended start). Bounds the harness's memory when the
   * service stalls.
   */
  readonly maxConcurrentScripts: number
  /** Open model: the requests a script sends on average (1 for one request a script). */
  readonly requestsPerScript: number
  /** Asked before each script starts: true stops the load there (`--abort-on-fail`); absent: never. */
  readonly shouldStop?: () => boolean
}

/** The open model's intended starts, ms from the load's start: along the stages' curve, or `rate`'s gaps. */
export const openOffsets = (
  model: Extract<LoadModel, { kind: "open" }>,
  requestsPerScript: number,
  seed: number
): Generator<number> =>
  model.stages === undefined || model.stages === null
    ? arrivalOffsets(requestsPerScript * 1000 / model.rate, model.arrival, seed)
    : curveOffsets(model.stages, requestsPerScript, model.arrival, seed)

/** A sleep of the open model, in slices short enough that a stop is seen within one. */
const stopSliceMs = 250

/**
 * A script that starts this much after its intended time counts as late: the driver (or the bound
 * on scripts running at once) fell behind. Timers fire a millisecond or two late on a busy host
 * as a matter of course; that is noise, not lateness.
 */
export const lateStartMs = 10

/**
 * Open model, scripts due less than `tickedBelowGapMs` apart on average (over 1,000 a second):
 * they start on a tick of `sendTickMs`, each at the first tick at or after its intended time,
 * the tick's scripts one after the other, and that tick is their intended start (their latency
 * counts from it). One timer wake for several requests and their answers close together: a
 * wake and a turn of the event loop for each request, then another for its answer, cost the
 * driver three times autocannon's CPU a request at 2,000/s (docs/harness.md). Slower schedules
 * keep their exact times.
 */
export const sendTickMs = 4
export const tickedBelowGapMs = 1

export interface LoadOutcome {
  readonly scriptsStarted: number
  /** Open model: scripts that started more than `lateStartMs` after their intended time. */
  readonly scriptsLate: number
  /** Open model: how late scripts started (actual − intended start), ms; zeros for the closed model. */
  readonly startLagMs: { readonly p50: number; readonly p99: number; readonly max: number }
  /**
   * Open model: scripts that waited for a running one to end (`maxConcurrentScripts` were
   * running): the service answered too slowly for the offered rate, whatever the driver did.
   */
  readonly scriptsHeldBack: number
  readonly startedAtMs: number
  /** When the last script started (the open model's load phase), and when the last one ended. */
  readonly loadEndedAtMs: number
  readonly endedAtMs: number
  /** Scripts that rejected (a scenario's bug: a script resolves whatever the service answers), and the first error. */
  readonly scriptFailures: number
  readonly firstFailure: string | null
}

export { seededRandom }

/** Offsets (ms from the start) of the open model's arrivals, `gapMs` apart on average, in order, without end. */
export function* arrivalOffsets(gapMs: number, arrival: "constant" | "poisson", seed: number): Generator<number> {
  if (arrival === "constant") {
    for (let index = 0;; index++) yield index * gapMs
  }
  const random = seededRandom(seed)
  let offset = 0
  for (;;) {
    yield offset
    offset += -Math.log(1 - random()) * gapMs
  }
}

/** The p50, p99 and max of `values` (zeros for none). */
const lagFigures = (values: Array<number>) => {
  if (values.length === 0) return { p50: 0, p99: 0, max: 0 }
  const sorted = Float64Array.from(values).sort()
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)]!
  return { p50: at(0.5), p99: at(0.99), max: sorted[sorted.length - 1]! }
}

export const runLoad = async (
  plan: LoadPlan,
  clock: Clock,
  runScript: (index: number, intendedStartMs: number) => Promise<void>,
  requestsSent: () => number
): Promise<LoadOutcome> => {
  const startedAtMs = clock.now()
  const endMs = startedAtMs + plan.durationMs
  const stopped = () => plan.shouldStop?.() === true
  const full = () => (plan.maxRequests !== null && requestsSent() >= plan.maxRequests) || stopped()
  let started = 0
  let late = 0
  let heldBack = 0
  const lags: Array<number> = []
  /** Scripts started and not yet ended. */
  let running = 0
  const failures: Array<unknown> = []
  // The open model waits here for a script to end when `maxConcurrentScripts` run (one waiter:
  // a Promise.race over thousands of running scripts would attach a reaction to each, every time).
  let slotFreed: (() => void) | null = null
  /** The end of the load waits here for the last running script. */
  let allEnded: (() => void) | null = null
  const ended = () => {
    running--
    const wake = slotFreed
    slotFreed = null
    wake?.()
    if (running === 0 && allEnded !== null) allEnded()
  }
  // A script never rejects by contract; one that does is a bug of the scenario, reported at the end.
  const failed = (error: unknown) => {
    failures.push(error)
    ended()
  }
  // One reaction a script (not a catch and a finally, two promises more each).
  const launch = (intendedStartMs: number): Promise<void> => {
    running++
    return runScript(started++, intendedStartMs).then(ended, failed)
  }
  const scriptCap = plan.maxRequests ?? Infinity

  if (plan.model.kind === "open") {
    const tickMs = plan.requestsPerScript * 1000 / plan.model.rate < tickedBelowGapMs ? sendTickMs : 0
    for (const offset of openOffsets(plan.model, plan.requestsPerScript, plan.seed)) {
      if (startedAtMs + offset >= endMs || full() || started >= scriptCap) break
      const intendedStartMs = startedAtMs + (tickMs === 0 ? offset : Math.ceil(offset / tickMs) * tickMs)
      // Started within a millisecond of its time (the timers' resolution: Node's may fire a little
      // early): a request sent before its intended start is timed from its send (Transport.ts).
      for (
        let waitMs = intendedStartMs - clock.now();
        waitMs >= 1 && !stopped();
        waitMs = intendedStartMs - clock.now()
      ) {
        await clock.sleep(plan.shouldStop === undefined ? waitMs : Math.min(waitMs, stopSliceMs))
      }
      if (running >= plan.maxConcurrentScripts) heldBack++
      while (running >= plan.maxConcurrentScripts) await new Promise<void>((wake) => (slotFreed = wake))
      if (full()) break
      const lagMs = Math.max(0, clock.now() - intendedStartMs)
      lags.push(lagMs)
      if (lagMs > lateStartMs) late++
      launch(intendedStartMs)
    }
  } else {
    const worker = async () => {
      while (clock.now() < endMs && !full() && started < scriptCap) await launch(clock.now())
    }
    await Promise.all(Array.from({ length: plan.model.connections }, worker))
  }
  const loadEndedAtMs = clock.now()
  if (running > 0) await new Promise<void>((done) => (allEnded = done))
  const first = failures[0]
  return {
    scriptsStarted: started,
    scriptsLate: late,
    startLagMs: lagFigures(lags),
    scriptsHeldBack: heldBack,
    startedAtMs,
    loadEndedAtMs,
    endedAtMs: clock.now(),
    scriptFailures: failures.length,
    firstFailure: first === undefined ? null : first instanceof Error ? first.message : String(first)
  }
}
