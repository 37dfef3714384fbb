import * as fc from "fast-check"
import { describe, expect, it } from "vitest"
import { defaultMix, defaultOptions, formatFaults, type SimOptions } from "../../sim/engine/Options.ts"
import { runSimulation } from "../../sim/engine/Simulator.ts"
import { describeFailure } from "../support/simulation.ts"

/** Small scenarios: a few merchants, a few hours, enough traffic for races, crashes and retries. */
const small = (overrides: Partial<SimOptions>): SimOptions => ({
  ...defaultOptions,
  merchants: 3,
  payments: 80,
  hours: 4,
  ...overrides
})

describe("simulator", () => {
  it("replays a seed exactly (same trace hash twice)", () => {
    const options = small({ seed: 42, faults: { ...defaultOptions.faults, crashesPerHour: 2 } })
    const first = runSimulation(options)
    const second = runSimulation(options)
    expect(describeFailure(first)).toBe("ok")
    expect(second.traceHash).toBe(first.traceHash)
    expect(runSimulation({ ...options, seed: 43 }).traceHash).not.toBe(first.traceHash)
  })

  it("catches the planted bug: a refund above the remainder is accepted", () => {
    // The over-refund rate is raised so that the buggy path is exercised within a small run.
    const result = runSimulation(
      small({ seed: 7, plantedBug: "refund-over-remainder", mix: { ...defaultMix, refund: 0.9, overRefund: 0.5 } })
    )
    expect(result.ok).toBe(false)
    expect(result.violations.map((v) => v.invariant)).toContain("refunds-within-capture")
  })

  it("holds every invariant over generated scenarios (seed, fault rates, workload mix)", () => {
    const scenario = fc.record({
      seed: fc.integer({ min: 0, max: 2 ** 31 - 1 }),
      merchants: fc.integer({ min: 1, max: 4 }),
      payments: fc.integer({ min: 10, max: 60 }),
      faults: fc.record({
        acquirerDecline: fc.double({ min: 0, max: 0.3, noNaN: true }),
        acquirerSlow: fc.double({ min: 0, max: 0.3, noNaN: true }),
        acquirerTimeout: fc.double({ min: 0, max: 0.1, noNaN: true }),
        acquirerTransient: fc.double({ min: 0, max: 0.3, noNaN: true }),
        crashesPerHour: fc.double({ min: 0, max: 2, noNaN: true }),
        webhook4xx: fc.double({ min: 0, max: 0.2, noNaN: true }),
        webhook5xx: fc.double({ min: 0, max: 0.3, noNaN: true }),
        webhookSlow: fc.double({ min: 0, max: 0.1, noNaN: true }),
        webhookLagging: fc.double({ min: 0, max: 0.2, noNaN: true }),
        webhookNoAnswer: fc.double({ min: 0, max: 0.1, noNaN: true }),
        webhookOutagesPerDay: fc.double({ min: 0, max: 4, noNaN: true }),
        storeUnavailable: fc.double({ min: 0, max: 0.03, noNaN: true }),
        storeLostCommit: fc.double({ min: 0, max: 0.05, noNaN: true }),
        storeOutagesPerDay: fc.double({ min: 0, max: 6, noNaN: true }),
        crashAfterCommit: fc.double({ min: 0, max: 0.02, noNaN: true }),
        pausesPerHour: fc.double({ min: 0, max: 2, noNaN: true }),
        storeFreezesPerDay: fc.double({ min: 0, max: 6, noNaN: true }),
        clockSkewMs: fc.integer({ min: 0, max: 500 })
      }),
      mix: fc.record({
        manualCapture: fc.double({ min: 0, max: 1, noNaN: true }),
        refund: fc.double({ min: 0, max: 1, noNaN: true }),
        overRefund: fc.double({ min: 0, max: 0.5, noNaN: true }),
        racingOperations: fc.double({ min: 0, max: 0.5, noNaN: true }),
        duplicateCreate: fc.double({ min: 0, max: 0.3, noNaN: true })
      })
    })
    fc.assert(
      fc.property(scenario, (s) => {
        const options = small({
          seed: s.seed,
          merchants: s.merchants,
          payments: s.payments,
          faults: s.faults,
          mix: { ...defaultMix, ...s.mix }
        })
        const result = runSimulation(options)
        if (!result.ok) {
          throw new Error(`seed ${s.seed} faults ${formatFaults(s.faults)}:\n${describeFailure(result)}`)
        }
      }),
      { numRuns: 15, seed: 20261122 }
    )
  })
})
