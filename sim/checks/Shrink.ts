import * as fc from "fast-check"
import { type FaultRates, formatFaults, type SimOptions } from "../engine/Options.ts"
import { runSimulation, type SimResult } from "../engine/Simulator.ts"
import { replayFileCommand, replayFormat, writeReplayFile } from "./Replay.ts"

/** The law a run broke first (null when it passed). */
export const firstViolation = (result: SimResult): string | null => result.violations[0]?.invariant ?? null

export interface ShrinkStep {
  readonly run: number
  readonly options: SimOptions
  readonly failsTheSameWay: boolean
  readonly firstViolation: string | null
}

export interface ShrinkResult {
  readonly law: string
  readonly original: SimOptions
  readonly shrunk: SimOptions
  /** The run of the shrunk scenario (it fails with `law` first). */
  readonly result: SimResult
  /** Simulations run while shrinking (the original's included when it was not given). */
  readonly runs: number
  /** True when the run budget ran out before fast-check had tried every smaller candidate. */
  readonly budgetExhausted: boolean
}

/** The parts of a scenario shrinking may reduce; the seed, mix and planted bug stay. */
interface Reducible {
  readonly webhooks: boolean
  readonly payments: number
  readonly hours: number
  readonly merchants: number
  readonly dispatchers: number
  /** The fault rates kept (the others are set to 0). */
  readonly faults: ReadonlyArray<keyof FaultRates>
}

const reducible = (o: SimOptions): Reducible => ({
  webhooks: o.webhooks,
  payments: o.payments,
  hours: o.hours,
  merchants: o.merchants,
  dispatchers: o.dispatchers,
  faults: activeFaults(o.faults)
})

const activeFaults = (faults: FaultRates) =>
  (Object.keys(faults) as Array<keyof FaultRates>).filter((name) => faults[name] !== 0)

/**
 * Values no larger than the failing scenario's: fast-check shrinks each toward its smallest
 * (one payment, one hour, one merchant, no webhooks, one dispatcher, no fault). The faults are a
 * subset of the failing scenario's non-zero rates, each kept at its rate or dropped (set to 0):
 * fast-check shrinks a subset by dropping halves first, in far fewer runs than one rate at a
 * time. fast-check shrinks the fields in order, so the ones that make every later candidate
 * cheaper come first: webhooks off (a run without them is several times faster), then payments.
 */
const reducibleArbitrary = (o: SimOptions): fc.Arbitrary<Reducible> =>
  fc.record({
    webhooks: o.webhooks ? fc.constantFrom(false, true) : fc.constant(false),
    payments: fc.integer({ min: Math.min(1, o.payments), max: o.payments }),
    hours: fc.integer({ min: 1, max: o.hours }),
    merchants: fc.integer({ min: 1, max: o.merchants }),
    dispatchers: fc.integer({ min: 1, max: o.dispatchers }),
    faults: fc.subarray(activeFaults(o.faults))
  })

/**
 * Reduces a failing scenario to a smaller one that breaks the same law first, with fast-check's
 * shrinker: the property "this scenario does not break `law` first" is checked on the failing
 * scenario alone (`examples`, `numRuns: 1`), and fast-check shrinks the counterexample through
 * the arbitrary above. Every step is a full simulation, deterministic per options, and
 * fast-check's own seed is fixed: the same failing scenario always shrinks to the same result.
 * At most `maxRuns` simulations run; after that every candidate counts as passing, which ends
 * the shrinking at the smallest failure found so far.
 */
export const shrinkFailure = (
  original: SimOptions,
  options: {
    /** The original's result, if already run (saves one run). */
    readonly originalResult?: SimResult
    readonly maxRuns?: number
    readonly onStep?: (step: ShrinkStep) => void
  } = {}
): ShrinkResult => {
  const maxRuns = options.maxRuns ?? 200
  const results = new Map<string, SimResult>()
  const keyOf = (o: SimOptions) => JSON.stringify(o)
  if (options.originalResult !== undefined) results.set(keyOf(original), options.originalResult)
  let runs = 0
  let budgetExhausted = false
  const run = (o: SimOptions): SimResult | undefined => {
    const key = keyOf(o)
    const known = results.get(key)
    if (known !== undefined) return known
    if (runs >= maxRuns) {
      budgetExhausted = true
      return undefined
    }
    runs++
    const result = runSimulation(o)
    results.set(key, result)
    return result
  }
  const originalResult = run(original)
  const law = originalResult === undefined ? null : firstViolation(originalResult)
  if (originalResult === undefined || law === null) {
    throw new Error(`seed ${original.seed}: the scenario passes, nothing to shrink`)
  }

  const scenario = (r: Reducible): SimOptions => ({
    ...original,
    ...r,
    faults: Object.fromEntries(
      Object.entries(original.faults).map((
        [name, rate]
      ) => [name, r.faults.includes(name as keyof FaultRates) ? rate : 0])
    ) as unknown as FaultRates
  })
  const start = reducible(original)
  let smallest: SimOptions = original
  const property = fc.property(reducibleArbitrary(original), (r) => {
    const candidate = scenario(r)
    const result = run(candidate)
    if (result === undefined) return true
    const first = firstViolation(result)
    const same = first === law
    if (same) smallest = candidate
    if (candidate !== original && keyOf(candidate) !== keyOf(original)) {
      options.onStep?.({ run: runs, options: candidate, failsTheSameWay: same, firstViolation: first })
    }
    return !same
  })
  const details = fc.check(property, { examples: [[start]], numRuns: 1, seed: 20_261_123, endOnFailure: false })
  if (!details.failed) {
    throw new Error(
      `seed ${original.seed}: the scenario did not fail again while shrinking (is the run deterministic?)`
    )
  }
  // fast-check's counterexample is the last failing candidate, the same as the smallest kept above.
  const counterexample = details.counterexample?.[0]
  const shrunk = counterexample === undefined ? smallest : scenario(counterexample)
  return { law, original, shrunk, result: results.get(keyOf(shrunk))!, runs, budgetExhausted }
}

/**
 * `npm run sim -- ... --shrink`: shrinks a failed run, writes the result as a replay file and
 * prints the command that replays it. Returns the file's path.
 */
export const shrinkToFile = (
  failed: SimResult,
  io: {
    readonly out?: string | undefined
    readonly maxRuns?: number
    readonly log: (line: string) => void
    readonly print: (line: string) => void
  }
): { path: string; shrink: ShrinkResult } => {
  const o = failed.options
  const path = io.out ?? `sim-failure-${o.seed}.json`
  io.log(
    `shrink: reducing seed ${o.seed} (${o.merchants} merchants, ${o.payments} payments, ${o.hours} h) while it breaks [${
      firstViolation(failed)
    }] first, at most ${io.maxRuns ?? 200} runs`
  )
  const shrink = shrinkFailure(o, {
    originalResult: failed,
    ...(io.maxRuns === undefined ? {} : { maxRuns: io.maxRuns }),
    onStep: (step) => {
      if (step.failsTheSameWay) {
        io.log(`shrink: run ${step.run}: ${describeScenario(step.options)} still breaks [${step.firstViolation}]`)
      }
    }
  })
  const s = shrink.shrunk
  writeReplayFile(path, {
    format: replayFormat,
    firstViolation: shrink.law,
    options: s,
    shrunkFrom: { merchants: o.merchants, payments: o.payments, hours: o.hours, runs: shrink.runs }
  })
  io.print("")
  io.print(
    `shrunk in ${shrink.runs} runs${
      shrink.budgetExhausted ? " (run budget reached: smaller may exist, raise --shrink-runs)" : ""
    }: ${describeScenario(s)} breaks [${shrink.law}] first`
  )
  for (const v of shrink.result.violations.slice(0, 3)) io.print(`  [${v.invariant}] ${v.message}`)
  io.print(`written ${path}`)
  io.print(`replay: ${replayFileCommand(path)}`)
  return { path, shrink }
}

const describeScenario = (o: SimOptions) =>
  `${o.merchants} merchant(s), ${o.payments} payment(s), ${o.hours} h, webhooks ${o.webhooks ? "on" : "off"}, ` +
  `${o.dispatchers} dispatcher(s), faults ${formatFaults(o.faults)}`
