import { describe, expect, it } from "vitest"
import { defaultOptions, heavyFaults } from "../../sim/engine/Options.ts"
import { runSimulation } from "../../sim/engine/Simulator.ts"

// A small run against the simulated remote processor (sim/world/Processor.ts) with its heavy
// faults: every law holds, the processor's own among them (sim/checks/ProcessorLaws.ts), and the
// run reached what they are about: answers lost after the processor acted, requests that arrived
// twice and were absorbed by their key, answers past the deadline. The service's own
// reconciliation agrees with the books at the end.
describe("the simulated processor", () => {
  it("holds every law under lost, duplicated and late answers and outages, and reconciles clean", () => {
    const result = runSimulation({
      ...defaultOptions,
      seed: 1,
      merchants: 4,
      payments: 300,
      hours: 6,
      faults: heavyFaults,
      processor: true
    })
    expect(result.violations).toEqual([])
    const processor = result.processor!
    expect(processor.stats.lostAnswers).toBeGreaterThan(0)
    expect(processor.stats.duplicates).toBeGreaterThan(0)
    expect(processor.stats.duplicatesAbsorbed).toBe(processor.stats.duplicates)
    expect(processor.stats.lateAnswers).toBeGreaterThan(0)
    expect(processor.stats.cancels).toBeGreaterThan(0)
    expect(processor.serviceReconciliation).toMatchObject({ differences: 0 })
  })

  it("draws nothing without the option: the run is the one made before the processor existed", () => {
    const options = { ...defaultOptions, seed: 3, merchants: 2, payments: 40, hours: 2 }
    const plain = runSimulation(options)
    expect(plain.processor).toBeNull()
    // The processor's rates are inert without the option.
    const withRates = runSimulation({
      ...options,
      faults: { ...options.faults, processorLost: 0.5, processorOutagesPerDay: 10 }
    })
    expect(withRates.traceHash).toBe(plain.traceHash)
  })
})
