import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { VirtualClock } from "../../../bench/harness/Clock.ts"
import type { WireRequest } from "../../../bench/harness/Contract.ts"
import { arrivalOffsets, type LoadModel, runLoad, sendTickMs } from "../../../bench/harness/LoadModel.ts"
import { Recorder } from "../../../bench/harness/Recorder.ts"
import { driverLagBoundMs, saturated, saturationOf } from "../../../bench/harness/Saturation.ts"
import { recordingTransport, type WireClient, type WireOutcome } from "../../../bench/harness/Transport.ts"

/**
 * A service on the virtual clock: it works on one request at a time for `serviceMs` (or on
 * `servers` at a time), and answers nothing between `stall.fromMs` and `stall.untilMs`.
 */
const fakeService = (
  clock: VirtualClock,
  options: { serviceMs: number; stall?: { fromMs: number; untilMs: number } }
): WireClient => ({
  send: async (_request: WireRequest): Promise<WireOutcome> => {
    const stall = options.stall
    if (stall !== undefined && clock.now() >= stall.fromMs && clock.now() < stall.untilMs) {
      await clock.sleep(stall.untilMs - clock.now())
    }
    await clock.sleep(options.serviceMs)
    return { _tag: "Answered", response: { status: 200, headers: {}, body: "{}" } }
  },
  close: () => {}
})

/** HDR histograms keep 3 significant digits: a value reads back within 0.1%. */
const near = (actual: number, expected: number) =>
  expect(Math.abs(actual - expected)).toBeLessThanOrEqual(expected * 0.001)

const drive = async (options: {
  model: LoadModel
  durationMs: number
  maxRequests?: number
  serviceMs: number
  stall?: { fromMs: number; untilMs: number }
  maxInFlight?: number
  maxConcurrentScripts?: number
  seed?: number
  /** Requests each script sends, one after the other (default 1), and the plan's estimate of it. */
  requestsEach?: number
  requestsPerScript?: number
}) => {
  const clock = new VirtualClock(1_000)
  const recorder = new Recorder(clock.now())
  const transport = recordingTransport(
    fakeService(clock, options),
    clock,
    { recorder },
    options.maxInFlight ?? 1_000_000
  )
  const intended: Array<number> = []
  const latencies: Array<number> = []
  const outcome = await clock.run(runLoad(
    {
      model: options.model,
      durationMs: options.durationMs,
      maxRequests: options.maxRequests ?? null,
      seed: options.seed ?? 1,
      maxConcurrentScripts: options.maxConcurrentScripts ?? 1_000_000,
      requestsPerScript: options.requestsPerScript ?? 1
    },
    clock,
    async (_index, intendedStartMs) => {
      intended.push(intendedStartMs - 1_000)
      const each = options.requestsEach ?? 1
      for (let i = 0; i < each; i++) {
        await transport.send(
          { method: "GET", path: "/healthz", headers: {}, body: null },
          options.model.kind === "open" && i === 0 ? intendedStartMs : null
        )
        if (i === 0) latencies.push(clock.now() - intendedStartMs)
      }
    },
    () => transport.sent()
  ))
  return { outcome, intended, latencies, figures: recorder.finish(clock.now()), clock, recorder }
}

/** The saturation verdict of a driven run (bench/harness/Saturation.ts). */
const verdictOf = (run: Awaited<ReturnType<typeof drive>>, model: LoadModel) =>
  saturationOf({ model, outcome: run.outcome, times: run.recorder, shiftMs: run.figures.latency_ms.p50 })

describe("saturation as a verdict", () => {
  const open = (rate: number): LoadModel => ({ kind: "open", rate, arrival: "constant" })
  it("a service that keeps up reads the offered rate over the load window, short runs included", async () => {
    for (const durationMs of [1_000, 10_000]) {
      const run = await drive({ model: open(100), durationMs, serviceMs: 5 })
      const figures = verdictOf(run, open(100))
      expect(figures.verdict).toBe("kept pace")
      expect(figures.achieved_per_s).toBeCloseTo(100, 0)
      expect(saturated(figures)).toBe(false)
    }
  })

  it("a service slower than the offered rate: the service fell behind, and the achieved rate is what it answered", async () => {
    // One request at a time, 20 ms each: 50 a second answered of 100 offered.
    const run = await drive({ model: open(100), durationMs: 5_000, serviceMs: 20, maxInFlight: 1 })
    const figures = verdictOf(run, open(100))
    expect(figures.verdict).toBe("the service fell behind")
    expect(figures.achieved_per_s).toBeGreaterThan(45)
    expect(figures.achieved_per_s).toBeLessThan(55)
    expect(saturated(figures)).toBe(true)
  })

  it("a stall the service catches up from within the load is latency, not lost pace; one it does not is", async () => {
    // Frozen from 4 s to 5 s (virtual times start at 1,000 ms): every answer owed comes at 5 s,
    // inside the window; the latency objectives see the stall.
    const caughtUp = await drive({
      model: open(100),
      durationMs: 10_000,
      serviceMs: 5,
      stall: { fromMs: 5_000, untilMs: 6_000 }
    })
    expect(verdictOf(caughtUp, open(100)).verdict).toBe("kept pace")
    expect(caughtUp.figures.latency_ms.max).toBeGreaterThanOrEqual(1_000)
    // Frozen for the last 1.5 s and past the end: 15% of the load's answers come after its window.
    const behind = await drive({
      model: open(100),
      durationMs: 10_000,
      serviceMs: 5,
      stall: { fromMs: 9_500, untilMs: 14_000 }
    })
    expect(verdictOf(behind, open(100)).verdict).toBe("the service fell behind")
  })

  it("scripts held back by slow answers: the service, not the driver", async () => {
    const run = await drive({ model: open(100), durationMs: 1_000, serviceMs: 100, maxConcurrentScripts: 5 })
    expect(run.outcome.scriptsHeldBack).toBe(95)
    expect(verdictOf(run, open(100)).verdict).toBe("the service fell behind")
  })

  it("the closed model offers no rate", async () => {
    const run = await drive({ model: { kind: "closed", connections: 2 }, durationMs: 1_000, serviceMs: 10 })
    expect(verdictOf(run, { kind: "closed", connections: 2 }).verdict).toBe("closed model")
  })

  it("a driver that starts scripts late (its start lag p99 over the bound): the driver fell behind", () => {
    const outcome = {
      scriptsStarted: 1000,
      scriptsLate: 900,
      startLagMs: { p50: 120, p99: 400, max: 600 },
      scriptsHeldBack: 0,
      startedAtMs: 0,
      loadEndedAtMs: 10_000,
      endedAtMs: 10_050,
      scriptFailures: 0,
      firstFailure: null
    }
    const all = { answeredBetween: () => 1000, issuedBetween: () => 1000 }
    const half = { answeredBetween: () => 500, issuedBetween: () => 1000 }
    const figures = saturationOf({ model: open(100), outcome, times: all, shiftMs: 5 })
    expect(figures.verdict).toBe("the driver fell behind")
    expect(figures.send_lag_ms.p99).toBeGreaterThan(driverLagBoundMs)
    // Behind with scripts held back, but the driver's process busy all the load: the driver.
    const busy = { ...outcome, startLagMs: { p50: 1, p99: 2, max: 3 }, scriptsHeldBack: 50 }
    expect(saturationOf({ model: open(100), outcome: busy, times: half, shiftMs: 5, driverCpuSeconds: 9.9 }).verdict)
      .toBe("the driver fell behind")
    expect(saturationOf({ model: open(100), outcome: busy, times: half, shiftMs: 5, driverCpuSeconds: 2 }).verdict)
      .toBe("the service fell behind")
  })
})

describe("the open model under a virtual clock", () => {
  it("starts scripts at their intended times, a constant gap apart, for the duration", async () => {
    const run = await drive({
      model: { kind: "open", rate: 100, arrival: "constant" },
      durationMs: 2_000,
      serviceMs: 5
    })
    expect(run.outcome.scriptsStarted).toBe(200)
    expect(run.outcome.scriptsLate).toBe(0)
    expect(run.intended).toEqual(Array.from({ length: 200 }, (_, i) => i * 10))
    expect(run.figures.requests).toBe(200)
    near(run.figures.latency_ms.max, 5)
    near(run.figures.latency_ms.p50, 5)
    // One histogram per second of answers (the last came at 1,995 ms).
    expect(run.figures.timeline.map((s) => s.requests)).toEqual([100, 100])
  })

  it("over 1,000 scripts a second, starts each on the first send tick at or after its time, timed from that tick", async () => {
    const run = await drive({
      model: { kind: "open", rate: 2_000, arrival: "constant" },
      durationMs: 100,
      serviceMs: 1
    })
    expect(run.outcome.scriptsStarted).toBe(200)
    expect(run.outcome.scriptsLate).toBe(0)
    // Offsets i / 2 ms, each started at the tick after it: never early, at most a tick late.
    expect(run.intended).toEqual(Array.from({ length: 200 }, (_, i) => Math.ceil(i / 2 / sendTickMs) * sendTickMs))
    // 25 ticks of 8 (the first, at 0, takes only the script due at 0), timed from the tick.
    expect(new Set(run.intended).size).toBe(26)
    near(run.figures.latency_ms.max, 1)
    // 1,000 scripts a second keep their exact times.
    const exact = await drive({
      model: { kind: "open", rate: 1_000, arrival: "constant" },
      durationMs: 50,
      serviceMs: 1
    })
    expect(exact.intended).toEqual(Array.from({ length: 50 }, (_, i) => i))
  })

  it("counts a stall of the service in the latencies of every request meant to start during it", async () => {
    // 100 scripts per second for 3 s; the service answers nothing from 1 s to 2 s.
    const run = await drive({
      model: { kind: "open", rate: 100, arrival: "constant" },
      durationMs: 3_000,
      serviceMs: 2,
      stall: { fromMs: 2_000, untilMs: 3_000 }
    })
    expect(run.figures.requests).toBe(300)
    const stalled = run.intended.map((at, i) => ({ at, latency: run.latencies[i]! })).filter(({ at }) =>
      at >= 1_000 && at < 2_000
    )
    expect(stalled).toHaveLength(100)
    // Each waited from its intended start until the stall ended.
    for (const { at, latency } of stalled) expect(latency).toBe(2_000 - at + 2)
    // The tail shows the stall: 1% of requests waited 900 ms or more, the max almost the whole second.
    expect(run.figures.latency_ms.p99).toBeGreaterThanOrEqual(900)
    expect(run.figures.latency_ms.max).toBeGreaterThanOrEqual(1_000)
    expect(run.figures.latency_ms.p50).toBeLessThan(10)
  })

  it("measures from the intended start when the harness cannot send in time (coordinated omission)", async () => {
    // One request on the wire at a time, 20 ms each, but one meant to start every 10 ms: the
    // queue grows, and so do the latencies, though the service takes 20 ms for every request.
    const run = await drive({
      model: { kind: "open", rate: 100, arrival: "constant" },
      durationMs: 1_000,
      serviceMs: 20,
      maxInFlight: 1
    })
    expect(run.figures.requests).toBe(100)
    // The last request was meant to start at 990 ms and answered at 100 × 20 = 2,000 ms.
    near(run.figures.latency_ms.max, 1_010)
    expect(run.figures.latency_ms.p50).toBeGreaterThanOrEqual(480)
    // The same load measured from each send would have read 20 ms throughout.
    const closed = await drive({ model: { kind: "closed", connections: 1 }, durationMs: 1_000, serviceMs: 20 })
    near(closed.figures.latency_ms.max, 20)
  })

  it("holds back scripts past the concurrency bound and still measures them from their intended start", async () => {
    // 5 scripts at most, 100 ms each, one meant every 10 ms: the first 5 start on time, each
    // later one when the script 5 before it ends.
    const run = await drive({
      model: { kind: "open", rate: 100, arrival: "constant" },
      durationMs: 1_000,
      serviceMs: 100,
      maxConcurrentScripts: 5
    })
    expect(run.outcome.scriptsStarted).toBe(100)
    expect(run.figures.requests).toBe(100)
    // Script i ends at 100 × (floor(i / 5) + 1) + 10 × (i mod 5) ms; it was meant to start at 10 × i.
    run.latencies.forEach((latency, i) => expect(latency).toBe(100 * (Math.floor(i / 5) + 1) + 10 * (i % 5) - 10 * i))
    expect(run.outcome.scriptsLate).toBe(95)
    // The recorded figures count the wait too: the last script, meant for 990 ms, ended at 2,040 ms.
    near(run.figures.latency_ms.max, 1_050)
    near(run.figures.latency_ms.p50, 100 * (Math.floor(49 / 5) + 1) + 10 * (49 % 5) - 490)
  })

  it("counts a script that rejects and goes on with the others", async () => {
    const clock = new VirtualClock()
    const outcome = await clock.run(runLoad(
      {
        model: { kind: "open", rate: 10, arrival: "constant" },
        durationMs: 1_000,
        maxRequests: null,
        seed: 1,
        maxConcurrentScripts: 100,
        requestsPerScript: 1
      },
      clock,
      async (index) => {
        await clock.sleep(5)
        if (index % 4 === 1) throw new Error(`script ${index} broke`)
      },
      () => 0
    ))
    expect(outcome).toMatchObject({ scriptsStarted: 10, scriptFailures: 3, firstFailure: "script 1 broke" })
  })

  it("paces scripts so that requests, not scripts, arrive at the rate", async () => {
    // 100 requests a second; each script sends 4, one after the other: a script every 40 ms.
    const run = await drive({
      model: { kind: "open", rate: 100, arrival: "constant" },
      durationMs: 2_000,
      serviceMs: 1,
      requestsEach: 4,
      requestsPerScript: 4
    })
    expect(run.intended).toEqual(Array.from({ length: 50 }, (_, i) => i * 40))
    expect(run.figures.requests).toBe(200)
    // The same starts when the service stalls: arrivals never follow the answers.
    const stalled = await drive({
      model: { kind: "open", rate: 100, arrival: "constant" },
      durationMs: 2_000,
      serviceMs: 1,
      requestsEach: 4,
      requestsPerScript: 4,
      stall: { fromMs: 1_200, untilMs: 2_500 }
    })
    expect(stalled.intended).toEqual(run.intended)
  })

  it("stops starting scripts at --max-requests", async () => {
    const run = await drive({
      model: { kind: "open", rate: 1_000, arrival: "constant" },
      durationMs: 60_000,
      maxRequests: 50,
      serviceMs: 3
    })
    expect(run.outcome.scriptsStarted).toBe(50)
    expect(run.figures.requests).toBe(50)
  })

  it("starts ceil(rate × duration) scripts on time for any rate and duration", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 1, max: 400 }),
        fc.integer({ min: 1, max: 3_000 }),
        async (rate, durationMs) => {
          const run = await drive({ model: { kind: "open", rate, arrival: "constant" }, durationMs, serviceMs: 1 })
          // Offsets i × 1000 / rate below the duration (floating point as the model computes them).
          let expected = 0
          while (expected * (1000 / rate) < durationMs) expected++
          expect(run.outcome.scriptsStarted).toBe(expected)
          expect(run.outcome.scriptsLate).toBe(0)
          expect(run.figures.requests).toBe(expected)
        }
      ),
      { numRuns: 40, seed: 26 }
    )
  })
})

describe("Poisson arrivals", () => {
  it("are seeded, increasing, and average the rate", () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 2 ** 31 }), fc.integer({ min: 10, max: 1_000 }), (seed, rate) => {
        const take = (n: number) => {
          const offsets: Array<number> = []
          for (const offset of arrivalOffsets(1000 / rate, "poisson", seed)) {
            offsets.push(offset)
            if (offsets.length === n) break
          }
          return offsets
        }
        const offsets = take(1_000)
        expect(take(1_000)).toEqual(offsets)
        for (let i = 1; i < offsets.length; i++) expect(offsets[i]!).toBeGreaterThanOrEqual(offsets[i - 1]!)
        // 1,000 exponential gaps of mean 1000/rate: their mean is within 15% (about 4.7 standard deviations).
        const meanGap = offsets.at(-1)! / (offsets.length - 1)
        expect(Math.abs(meanGap - 1000 / rate) / (1000 / rate)).toBeLessThan(0.15)
      }),
      { numRuns: 25, seed: 26 }
    )
  })

  it("drive the open model from the same seed to the same schedule", async () => {
    const a = await drive({
      model: { kind: "open", rate: 200, arrival: "poisson" },
      durationMs: 1_000,
      serviceMs: 1,
      seed: 7
    })
    const b = await drive({
      model: { kind: "open", rate: 200, arrival: "poisson" },
      durationMs: 1_000,
      serviceMs: 1,
      seed: 7
    })
    const c = await drive({
      model: { kind: "open", rate: 200, arrival: "poisson" },
      durationMs: 1_000,
      serviceMs: 1,
      seed: 8
    })
    expect(a.intended).toEqual(b.intended)
    expect(a.intended).not.toEqual(c.intended)
    expect(a.outcome.scriptsStarted).toBeGreaterThan(150)
    expect(a.outcome.scriptsStarted).toBeLessThan(250)
  })
})

describe("the closed model under a virtual clock", () => {
  it("keeps N scripts going, each followed at once by the next, for the duration", async () => {
    const run = await drive({ model: { kind: "closed", connections: 4 }, durationMs: 1_000, serviceMs: 10 })
    expect(run.outcome.scriptsStarted).toBe(400)
    expect(run.figures.requests).toBe(400)
    near(run.figures.latency_ms.max, 10)
  })

  it("slows down with the service instead of queueing (what the open model exists to avoid)", async () => {
    const run = await drive({
      model: { kind: "closed", connections: 2 },
      durationMs: 3_000,
      serviceMs: 10,
      stall: { fromMs: 2_000, untilMs: 3_000 }
    })
    // 2 × 100 before the stall, 2 that wait it out, 2 × 99 after: 2 requests in the stalled
    // second instead of 200, and only those 2 show it in their latency.
    expect(run.figures.requests).toBe(400)
    near(run.figures.latency_ms.max, 1_010)
    expect(run.figures.latency_ms.p99).toBeLessThan(11)
  })
})
