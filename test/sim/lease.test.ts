import { describe, expect, it } from "vitest"
import { defaultOptions, noFaults } from "../../sim/engine/Options.ts"
import { runSimulation } from "../../sim/engine/Simulator.ts"

// Endpoint queues that last longer than a lease, worked by two dispatchers: claims expire while
// they wait, the other dispatcher takes them over, and no endpoint may see one attempt twice
// (the endpoints' `webhook-attempt-numbers` and `webhook-nothing-after-2xx` checks).

/** Long endpoint queues worked by two dispatchers, one attempt at a time per endpoint. */
const backlog = {
  ...defaultOptions,
  seed: 3,
  merchants: 2,
  payments: 300,
  hours: 1,
  faults: { ...noFaults, webhookLagging: 0.7 },
  dispatchers: 2,
  endpointConcurrency: 1
}

describe("simulator: claims that outlive their lease", () => {
  it("two dispatchers, one attempt at a time per endpoint, answers of 10–29 s: takeovers happen and no attempt is sent twice", () => {
    const result = runSimulation(backlog)
    expect(result.violations).toEqual([])
    expect(result.ok).toBe(true)
    expect(result.leaseTakeovers).toBeGreaterThan(0)
    expect(result.endpoints.lagging).toBeGreaterThan(100)
    expect(result.deliveries.succeeded).toBe(result.deliveries.deliveries)
    // One POST per delivery: every attempt reached its endpoint once.
    expect(result.endpoints.posts).toBe(result.deliveries.deliveries)
  })

  it("the same backlog with the refused renewal ignored: the claim that waited sends the attempt the takeover sent", () => {
    const result = runSimulation({
      ...backlog,
      plantedBug: "lease-renewal-ignored"
    })
    expect(result.ok).toBe(false)
    expect(result.violations.map((v) => v.invariant)).toContain("webhook-once-per-attempt")
  })
})
