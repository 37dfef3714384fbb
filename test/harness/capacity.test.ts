import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { abortWatch } from "../../bench/harness/Abort.ts"
import { capacityPlot, type CapacityStep, defaultSearch, nextRate, sustainedOf } from "../../bench/harness/Capacity.ts"
import { capacityMerchants, parseArguments } from "../../bench/harness/Cli.ts"
import { Recorder } from "../../bench/harness/Recorder.ts"
import { saturated, saturationOf } from "../../bench/harness/Saturation.ts"
import { evaluateSlo, parseSlo } from "../../bench/harness/Slo.ts"
import { drive } from "./drive.ts"

const step = (offered: number, passed: boolean, extra: Partial<CapacityStep> = {}): CapacityStep => ({
  offered_per_s: offered,
  achieved_per_s: offered,
  requests: offered * 10,
  errors: 0,
  p50_ms: 1,
  p99_ms: passed ? 10 : 900,
  passed,
  failed_because: passed ? null : "p99<250ms missed",
  driver_bound: false,
  ...extra
})

/** The whole search against a service whose limit is `capacity`: each step passes below it. */
const searchAgainst = (capacity: number, startPerS = 50) => {
  const search = { startPerS, ...defaultSearch }
  const steps: Array<CapacityStep> = []
  for (let rate = nextRate(steps, search); rate !== null; rate = nextRate(steps, search)) {
    steps.push(step(rate, rate <= capacity))
  }
  return steps
}

describe("--find-capacity: the steps", () => {
  it("grows ×1.5 from the start rate until a step fails, then bisects 3 times", () => {
    const steps = searchAgainst(300)
    expect(steps.map((s) => s.offered_per_s)).toEqual([50, 75, 113, 170, 255, 383, 319, 287, 303])
    expect(sustainedOf(steps)).toBe(287)
  })

  it("bisects down from the start rate when the first step fails", () => {
    const steps = searchAgainst(20)
    expect(steps.map((s) => s.offered_per_s)).toEqual([50, 25, 13, 19])
    expect(sustainedOf(steps)).toBe(19)
  })

  it("stops at 12 steps when nothing fails", () => {
    const steps = searchAgainst(Infinity)
    expect(steps).toHaveLength(12)
    expect(sustainedOf(steps)).toBe(steps.at(-1)!.offered_per_s)
  })

  it("for any capacity: at most 12 steps, the sustained rate at or under it and within an eighth of the bracket of it (property)", () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 20_000 }), fc.integer({ min: 1, max: 500 }), (capacity, start) => {
        const steps = searchAgainst(capacity, start)
        expect(steps.length).toBeLessThanOrEqual(12)
        const sustained = sustainedOf(steps)
        if (sustained !== null) expect(sustained).toBeLessThanOrEqual(capacity)
        // Unless 12 steps ran out first, three halvings close the first bracket to an eighth (and the rounding of rates).
        const first = steps.findIndex((s) => !s.passed)
        if (first !== -1 && steps.length < 12) {
          const bracket = steps[first]!.offered_per_s -
            Math.max(0, ...steps.slice(0, first).map((s) => s.offered_per_s))
          const failed = Math.min(...steps.filter((s) => !s.passed).map((s) => s.offered_per_s))
          expect(failed - (sustained ?? 0)).toBeLessThanOrEqual(bracket / 8 + 1)
        }
      }),
      { numRuns: 300, seed: 38 }
    )
  })

  it("plots p50 and p99 against the offered rate, failed steps hollow, the sustained rate and the objective's limit", () => {
    const svg = capacityPlot(
      [step(50, true), step(75, true), step(113, false)],
      [{ text: "p99<250ms", limitMs: 250 }],
      "health"
    )
    expect(svg.startsWith("<svg xmlns=\"http://www.w3.org/2000/svg\"")).toBe(true)
    expect(svg).toContain("sustained 75/s")
    expect(svg).toContain("p99&lt;250ms")
    expect(svg.match(/<circle/g)).toHaveLength(6)
    expect(svg.match(/fill="#fff"/g)).toHaveLength(2)
  })

  it("a step on the virtual clock: kept pace and met p99 under the service's capacity, lost it above", async () => {
    // One request at a time, 10 ms each: 100 a second at most.
    const judgeStep = async (rate: number) => {
      const slo = parseSlo("p99<250ms")
      if ("error" in slo) throw new Error(slo.error)
      const watch = abortWatch(slo.objectives, rate * 10)
      const model = { kind: "open", rate, arrival: "constant" } as const
      const run = await drive({
        model,
        durationMs: 10_000,
        service: { serviceMs: 10, servers: 1 },
        recorder: (startMs) => new Recorder(startMs, { fromMs: startMs, cap: rate * 10, onJudged: watch.observe }),
        shouldStop: () => watch.lost() !== null
      })
      const verdict = saturationOf({
        model,
        outcome: run.outcome,
        times: run.recorder,
        shiftMs: run.figures.latency_ms.p50
      })
      const met = evaluateSlo(slo.objectives, {
        ...run.recorder.judged!.finish(run.clock.now()),
        rate: verdict.achieved_per_s
      })[0]!.met
      return {
        passed: met && !saturated(verdict),
        stoppedEarly: watch.lost() !== null,
        started: run.outcome.scriptsStarted
      }
    }
    expect(await judgeStep(80)).toEqual({ passed: true, stoppedEarly: false, started: 800 })
    const over = await judgeStep(150)
    expect(over.passed).toBe(false)
    // p99<250ms of 1,500 planned allows 15 slow: lost within the first seconds, not after 10.
    expect(over.stoppedEarly).toBe(true)
    expect(over.started).toBeLessThan(1_000)
  })

  it("the command line", () => {
    expect(parseArguments(["--find-capacity", "--slo", "p99<250ms", "--scenario", "health"])).toMatchObject({
      command: "run",
      findCapacity: { stepMs: 10_000, search: { startPerS: 50, growth: 1.5, bisections: 3, maxSteps: 12 } },
      durationSeconds: 120,
      merchants: 40
    })
    expect(parseArguments(["--find-capacity", "--rate", "10", "--step-duration", "30s"])).toMatchObject({
      findCapacity: { stepMs: 30_000, search: { startPerS: 10 } }
    })
    expect(capacityMerchants({ startPerS: 1, ...defaultSearch })).toBe(5)
    for (
      const other of [["--connections", "3"], ["--duration", "30"], ["--stages", "10s:5"], ["--max-requests", "5"]]
    ) {
      expect(parseArguments(["--find-capacity", ...other])).toMatchObject({
        command: "error",
        message: expect.stringContaining("--find-capacity steps the open model's rate itself")
      })
    }
    expect(parseArguments(["--step-duration", "5s"])).toMatchObject({
      command: "error",
      message: expect.stringContaining("goes with --find-capacity")
    })
    expect(parseArguments(["--find-capacity", "--step-duration", "500ms"])).toMatchObject({
      command: "error",
      message: expect.stringContaining("--step-duration must be")
    })
    expect(parseArguments(["--find-capacity", "--warmup", "10s"])).toMatchObject({
      command: "error",
      message: expect.stringContaining("leaves nothing")
    })
  })
})
