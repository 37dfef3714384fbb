import { describe, expect, it } from "vitest"
import { type PlantedBug, plantedBugs } from "../../sim/checks/PlantedBugs.ts"
import { defaultMix, defaultOptions, type FaultRates, type SimOptions } from "../../sim/engine/Options.ts"
import { runSimulation } from "../../sim/engine/Simulator.ts"

/**
 * The faults of an instance pause, a database freeze and clock skew, and the liveness law: each
 * has a planted bug (sim/checks/PlantedBugs.ts) that the simulator catches within five seeds of its
 * scenario, and that only that fault reveals: the same seed with the fault off passes.
 */
const scenario = (name: PlantedBug, seed: number, off: Partial<FaultRates> = {}): SimOptions => {
  const spec = plantedBugs[name].scenario as {
    merchants?: number
    payments?: number
    hours?: number
    mix?: Partial<typeof defaultMix>
    faults?: Partial<FaultRates>
  }
  return {
    ...defaultOptions,
    seed,
    merchants: spec.merchants ?? 3,
    payments: spec.payments ?? 80,
    hours: spec.hours ?? 4,
    faults: { ...defaultOptions.faults, ...spec.faults, ...off },
    mix: { ...defaultMix, ...spec.mix },
    plantedBug: name
  }
}

/** Lets the worker answer vitest between two runs (each run is one synchronous loop). */
const turn = () => new Promise<void>((resolve) => setImmediate(resolve))

const cases: ReadonlyArray<readonly [PlantedBug, string, Partial<FaultRates>]> = [
  ["unversioned-commit", "an instance pause", { pausesPerHour: 0 }],
  ["freeze-waits-for-thaw", "a database freeze", { storeFreezesPerDay: 0 }],
  ["attempt-time-from-receiver", "clock skew", { clockSkewMs: 0 }],
  // Recovery resumes every flow stopped mid-way: by a crash or a pause, and by a store error,
  // outage or freeze that failed one of its steps. With all of those off the bug stays hidden.
  ["recovery-misses-payments", "the faults that stop a flow mid-way (liveness)", {
    crashesPerHour: 0,
    crashAfterCommit: 0,
    pausesPerHour: 0,
    storeUnavailable: 0,
    storeLostCommit: 0,
    storeOutagesPerDay: 0,
    storeFreezesPerDay: 0
  }]
]

describe("new faults: each reveals its planted bug within five seeds, and only it does", () => {
  for (const [name, fault, off] of cases) {
    const law = plantedBugs[name].law
    it(`${name} → ${law}, revealed by ${fault}`, async () => {
      let caught: number | null = null
      for (let seed = 1; seed <= 5 && caught === null; seed++) {
        await turn()
        const result = runSimulation(scenario(name, seed))
        if (!result.ok) {
          expect(result.violations[0]!.invariant).toBe(law)
          caught = seed
        }
      }
      expect(caught).not.toBeNull()
      // The same seed without the fault: the bug stays hidden.
      await turn()
      const without = runSimulation(scenario(name, caught!, off))
      expect(without.violations).toEqual([])
    }, 300_000)
  }

  it("a stuck run names what is stuck", () => {
    const result = runSimulation(
      scenario("recovery-misses-payments", plantedBugs["recovery-misses-payments"].scenario.seed)
    )
    expect(result.violations[0]!.invariant).toBe("liveness")
    expect(result.violations[0]!.message).toMatch(/payment pay_\w+ pending mid-flow/)
  }, 120_000)

  it(
    "clock skew at the edge of the tolerance breaks no retry schedule: the endpoints see a retry up to 1 s early, the recorded times never",
    async () => {
      // Each instance up to 500 ms off: a retry made by another instance than its first attempt
      // reaches the endpoint early (or late) by their disagreement, never by more than 1 s.
      for (let seed = 1; seed <= 3; seed++) {
        await turn()
        const result = runSimulation({
          ...defaultOptions,
          seed,
          merchants: 3,
          payments: 80,
          hours: 12,
          faults: { ...defaultOptions.faults, webhook5xx: 0.3, pausesPerHour: 1, crashesPerHour: 2, clockSkewMs: 500 }
        })
        expect(result.violations).toEqual([])
        expect(new Set(result.clockOffsetsMs.map(Math.sign)).size).toBeGreaterThan(1)
      }
    },
    300_000
  )

  it("a run with every new fault is deterministic and passes", async () => {
    const options: SimOptions = {
      ...defaultOptions,
      seed: 11,
      merchants: 3,
      payments: 150,
      hours: 4,
      faults: { ...defaultOptions.faults, pausesPerHour: 3, storeFreezesPerDay: 12, clockSkewMs: 500 }
    }
    const first = runSimulation(options)
    await turn()
    const second = runSimulation(options)
    expect(first.violations).toEqual([])
    expect(first.pauses).toBeGreaterThan(0)
    expect(first.store.frozenCalls).toBeGreaterThan(0)
    expect(new Set(first.clockOffsetsMs.map(Math.sign)).size).toBeGreaterThan(1)
    expect(second.traceHash).toBe(first.traceHash)
  }, 120_000)
})
