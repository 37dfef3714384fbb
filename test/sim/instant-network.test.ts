import { describe, expect, it } from "vitest"
import { defaultOptions, formatFaults, parseFaults, type SimOptions } from "../../sim/engine/Options.ts"
import { runSimulation } from "../../sim/engine/Simulator.ts"
import { describeFailure } from "../support/simulation.ts"

// A network that answers some authorizations at once, as the sandbox does: those creates decide
// their whole flow in the request and write the payment once (src/services/Payments.ts
// `makeCreateOnce`, Store.readForCreate and Store.insertCreated), under the simulator's crashes,
// crashes right after a commit, lost acknowledgements and store outages.

const run = (overrides: Partial<SimOptions>) =>
  runSimulation({ ...defaultOptions, merchants: 4, payments: 300, hours: 6, ...overrides })

describe("a network that answers at once", () => {
  it("`instant=` is a fault option that round-trips through the replay command", () => {
    const faults = parseFaults("none,instant=0.5")
    expect(faults.acquirerInstant).toBe(0.5)
    expect(parseFaults(formatFaults(faults))).toEqual(faults)
    expect(parseFaults("default").acquirerInstant ?? 0).toBe(0)
  })

  it("holds every law with creates written once among crashes, commit crashes, lost acknowledgements and outages, and replays exactly", () => {
    const options: SimOptions = {
      ...defaultOptions,
      merchants: 4,
      payments: 300,
      hours: 6,
      seed: 3,
      faults: {
        ...defaultOptions.faults,
        acquirerInstant: 0.6,
        crashesPerHour: 3,
        crashAfterCommit: 0.02,
        storeLostCommit: 0.03,
        storeUnavailable: 0.01
      }
    }
    const result = run(options)
    expect(describeFailure(result)).toBe("ok")
    // Most creates took the path; some met a fault on it.
    expect(result.acquirer.instant).toBeGreaterThan(100)
    expect(run(options).traceHash).toBe(result.traceHash)
  })

  it("draws nothing for it when it is off: a run without it is the run it always was", () => {
    const off = run({ seed: 5 })
    expect(off.acquirer.instant).toBe(0)
    expect(run({ seed: 5, faults: { ...defaultOptions.faults, acquirerInstant: 0 } }).traceHash).toBe(off.traceHash)
  })
})
