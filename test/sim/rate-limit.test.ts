import { Layer } from "effect"
import { describe, expect, it } from "vitest"
import { defaultMix, defaultOptions, noFaults, type SimOptions } from "../../sim/engine/Options.ts"
import { runSimulation } from "../../sim/engine/Simulator.ts"
import * as RateLimiter from "../../src/http/edge/RateLimiter.ts"

// The rate limiter's law (sim/checks/RateLimitLaw.ts) in runs that push keys past their limit on
// purpose (mix `rateLimitPushesPerDay`: a new key's burst of 1.2 buckets, then twice the refill
// for half a second). A planted limiter goes through `apiWithLimiter` (sim/world/Service.ts), the
// service's API with another limiter: given the service's own, that path answers as ApiLive does.

const pushing: SimOptions = {
  ...defaultOptions,
  seed: 7,
  merchants: 3,
  payments: 40,
  hours: 4,
  faults: noFaults,
  mix: { ...defaultMix, rateLimitPushesPerDay: 12 }
}

describe("rate limit: the token bucket, in virtual time", () => {
  it("the service's limiter holds the law: pushes go past a full bucket and their refusals are judged", () => {
    const result = runSimulation(pushing)
    expect(result.violations).toEqual([])
    expect(result.workload.rateLimitPushes).toBeGreaterThan(0)
    expect(result.rateLimit.keysPastBurst).toBe(result.workload.rateLimitPushes)
    expect(result.rateLimit.refusedJudged).toBeGreaterThan(0)
  })

  it("the API with another limiter, given the service's own, answers as ApiLive (same trace, default faults)", () => {
    const options: SimOptions = { ...pushing, faults: defaultOptions.faults }
    expect(runSimulation(options, { rateLimiter: RateLimiter.layer }).traceHash).toBe(runSimulation(options).traceHash)
  })

  it("sees a limiter that refuses too soon (a burst of RATE_LIMIT_PER_SECOND, not twice it)", () => {
    const result = runSimulation(pushing, { rateLimiter: Layer.effect(RateLimiter.RateLimiter, RateLimiter.make(50)) })
    expect(result.ok).toBe(false)
    expect(result.violations[0]!.invariant).toBe("rate-limit")
    expect(result.violations[0]!.message).toMatch(
      /refused at .* fewer than the token bucket \(200 \+ 100\/s\) needs to run dry/
    )
  })

  it("sees a limiter that lets too much through (refills counted twice after a refusal: rate-limit-refusal-keeps-clock)", () => {
    const result = runSimulation({ ...pushing, plantedBug: "rate-limit-refusal-keeps-clock" })
    expect(new Set(result.violations.map((v) => v.invariant))).toEqual(new Set(["rate-limit"]))
    expect(result.violations[0]!.message).toMatch(
      /requests got through from .* the token bucket lets through at most 200 \+ 100\/s/
    )
  })
})
