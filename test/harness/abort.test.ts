import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { abortWatch, lostReason, plannedRequests } from "../../bench/harness/Abort.ts"
import { parseArguments } from "../../bench/harness/Cli.ts"
import { Recorder } from "../../bench/harness/Recorder.ts"
import { evaluateSlo, measuredOf, type Objective, parseSlo } from "../../bench/harness/Slo.ts"
import { drive } from "./drive.ts"

const objectives = (text: string): ReadonlyArray<Objective> => {
  const parsed = parseSlo(text)
  if ("error" in parsed) throw new Error(parsed.error)
  return parsed.objectives
}

/** The objectives as the run would judge these requests at its end. */
const judge = (slo: ReadonlyArray<Objective>, requests: ReadonlyArray<{ latencyMs: number; status: number }>) => {
  const recorder = new Recorder(0)
  for (const r of requests) recorder.record("GET /healthz", r.status, r.latencyMs, 0)
  const figures = recorder.finish(0)
  return evaluateSlo(slo, { ...figures, rate: 0 })
}

describe("--abort-on-fail: an objective lost for good", () => {
  it("p99 of 1,000 planned allows 10 latencies at or over the limit; the 11th loses it", () => {
    const [p99] = objectives("p99<250ms")
    expect(lostReason(p99!, { requests: 20, errors: 0, slow: 10 }, 1_000)).toBeNull()
    expect(lostReason(p99!, { requests: 20, errors: 0, slow: 11 }, 1_000)).toContain("11 latencies ≥ 250 ms")
    const [max] = objectives("max<1s")
    expect(lostReason(max!, { requests: 1, errors: 0, slow: 1 }, 1_000)).not.toBeNull()
    const [errors] = objectives("errors<1%")
    expect(lostReason(errors!, { requests: 50, errors: 9, slow: 0 }, 1_000)).toBeNull()
    expect(lostReason(errors!, { requests: 50, errors: 10, slow: 0 }, 1_000)).toContain("10 errors")
    const [rate] = objectives("rate>100")
    expect(lostReason(rate!, { requests: 0, errors: 0, slow: 0 }, 1_000)).toBeNull()
  })

  it("is never wrong: once lost, no way of ending the run meets the objective (property)", () => {
    const request = fc.record({
      latencyMs: fc.integer({ min: 1, max: 400 }),
      status: fc.constantFrom(200, 200, 200, 500)
    })
    const text = fc.constantFrom(
      "p50<100ms",
      "p90<200ms",
      "p99<300ms",
      "p999<350ms",
      "max<390ms",
      "errors<5%",
      "errors<30%"
    )
    fc.assert(
      fc.property(
        text,
        fc.array(request, { minLength: 1, maxLength: 300 }),
        fc.integer({ min: 0, max: 300 }),
        (sloText, sent, extra) => {
          const slo = objectives(sloText)
          const planned = sent.length + extra
          const watch = abortWatch(slo, planned)
          let lostAt = -1
          sent.forEach((r, i) => {
            watch.observe("GET /healthz", r.status, r.latencyMs)
            if (lostAt === -1 && watch.lost() !== null) lostAt = i + 1
          })
          if (lostAt === -1) return
          const seen = sent.slice(0, lostAt)
          // Every end in [seen, planned]: the rest of the planned requests all fast and answered, or none of them.
          for (const rest of [0, Math.floor((planned - lostAt) / 2), planned - lostAt]) {
            const ended = [...seen, ...Array.from({ length: rest }, () => ({ latencyMs: 1, status: 200 }))]
            expect(
              judge(slo, ended)[0]!.met,
              `${sloText} lost after ${lostAt} of ${planned}, ended with ${ended.length}`
            ).toBe(false)
          }
        }
      ),
      { numRuns: 400, seed: 38 }
    )
  })

  it("is not too late: p99 of 100 planned is lost at the second slow request, errors<10% at the tenth error", () => {
    const watch = abortWatch(objectives("p99<100ms"), 100)
    watch.observe("GET /healthz", 200, 150)
    expect(watch.lost()).toBeNull()
    watch.observe("GET /healthz", 200, 150)
    expect(watch.lost()?.objective).toBe("p99<100ms")
    const errors = abortWatch(objectives("errors<10%"), 100)
    for (let i = 0; i < 9; i++) errors.observe("GET /healthz", 503, 1)
    expect(errors.lost()).toBeNull()
    errors.observe("GET /healthz", 503, 1)
    expect(errors.lost()?.reason).toContain("10 errors, 10.000% of the 100 planned")
  })

  it("watches a route's objective on that route only", () => {
    const watch = abortWatch(objectives("POST /api/v1/transactions:max<100ms"), 100)
    watch.observe("GET /healthz", 200, 500)
    expect(watch.lost()).toBeNull()
    watch.observe("POST /api/v1/transactions", 200, 500)
    expect(watch.lost()?.objective).toBe("POST /api/v1/transactions:max<100ms")
  })

  it("plans the count from the arrivals after the warm-up, or --max-requests", () => {
    const open = { kind: "open", rate: 100, arrival: "constant" } as const
    expect(
      plannedRequests({
        model: open,
        durationMs: 10_000,
        warmupMs: 0,
        maxRequests: null,
        requestsPerScript: 1,
        seed: 1
      })
    ).toBe(1_000)
    expect(
      plannedRequests({
        model: open,
        durationMs: 10_000,
        warmupMs: 2_000,
        maxRequests: null,
        requestsPerScript: 1,
        seed: 1
      })
    ).toBe(800)
    expect(
      plannedRequests({ model: open, durationMs: 10_000, warmupMs: 0, maxRequests: 300, requestsPerScript: 1, seed: 1 })
    ).toBe(300)
    expect(
      plannedRequests({
        model: open,
        durationMs: 10_000,
        warmupMs: 0,
        maxRequests: null,
        requestsPerScript: 2.4,
        seed: 1
      })
    ).toBe(1_001)
    expect(
      plannedRequests({
        model: { kind: "closed", connections: 4 },
        durationMs: 10_000,
        warmupMs: 0,
        maxRequests: null,
        requestsPerScript: 1,
        seed: 1
      })
    ).toBeNull()
  })

  it("stops the load early on the virtual clock, with every started script drained", async () => {
    // 100 a second for 20 s; from 3 s on, every answer is a 503: errors<1% of 2,000 planned is lost at the 20th error.
    const watch = abortWatch(objectives("errors<1%"), 2_000)
    const run = await drive({
      model: { kind: "open", rate: 100, arrival: "constant" },
      durationMs: 20_000,
      service: { serviceMs: 5, statusAt: (atMs) => (atMs >= 3_000 ? 503 : 200) },
      recorder: (startMs) => new Recorder(startMs, { fromMs: startMs, cap: 2_000, onJudged: watch.observe }),
      shouldStop: () => watch.lost() !== null
    })
    expect(watch.lost()?.objective).toBe("errors<1%")
    expect(run.outcome.scriptsStarted).toBeLessThan(400)
    expect(run.figures.requests).toBe(run.outcome.scriptsStarted)
    expect(run.figures.errors).toBeGreaterThanOrEqual(20)
  })

  it("the command line: needs objectives and a planned count", () => {
    expect(parseArguments(["--abort-on-fail", "--slo", "p99<10ms"])).toMatchObject({
      command: "run",
      abortOnFail: true
    })
    expect(parseArguments(["--abort-on-fail"])).toMatchObject({
      command: "error",
      message: expect.stringContaining("give --slo")
    })
    expect(parseArguments(["--abort-on-fail", "--slo", "p99<10ms", "--connections", "4"])).toMatchObject({
      command: "error",
      message: expect.stringContaining("planned count")
    })
    expect(parseArguments(["--abort-on-fail", "--slo", "p99<10ms", "--connections", "4", "--max-requests", "100"]))
      .toMatchObject({ command: "run", abortOnFail: true })
  })
})

describe("per-route objectives", () => {
  it("reads a route prefix for every objective of its flag, and several flags", () => {
    expect(objectives("POST /api/v1/transactions/:id/refund:p99<300ms,errors<0.1%").map((o) => [o.route, o.text]))
      .toEqual([
        ["POST /api/v1/transactions/:id/refund", "POST /api/v1/transactions/:id/refund:p99<300ms"],
        ["POST /api/v1/transactions/:id/refund", "POST /api/v1/transactions/:id/refund:errors<0.1%"]
      ])
    const parsed = parseArguments(["--slo", "p99<250ms", "--slo", "GET /healthz:p50<5ms"])
    expect(parsed).toMatchObject({ command: "run", sloText: "p99<250ms ; GET /healthz:p50<5ms" })
    expect(parsed.command === "run" && parsed.slo.map((o) => o.route)).toEqual([null, "GET /healthz"])
    expect(parseArguments(["--slo", ":p99<5ms"])).toMatchObject({
      command: "error",
      message: expect.stringContaining("names no route")
    })
  })

  it("judges each route by its own figures; a route without requests meets nothing", () => {
    const recorder = new Recorder(0)
    for (let i = 0; i < 100; i++) recorder.record("GET /healthz", 200, 1, 0)
    for (let i = 0; i < 100; i++) recorder.record("POST /api/v1/transactions", i < 5 ? 500 : 201, 400, 0)
    const figures = recorder.finish(0)
    const results = evaluateSlo(
      [
        ...objectives("GET /healthz:p99<10ms,errors<1%"),
        ...objectives("POST /api/v1/transactions:p99<300ms,errors<1%,rate>10"),
        ...objectives("GET /nothing:p99<1s")
      ],
      { ...figures, rate: 20, windowSeconds: 5 }
    )
    expect(results.map((r) => [r.objective, r.met, measuredOf(r).value])).toEqual([
      ["GET /healthz:p99<10ms", true, 1],
      ["GET /healthz:errors<1%", true, 0],
      ["POST /api/v1/transactions:p99<300ms", false, 400.127],
      ["POST /api/v1/transactions:errors<1%", false, 5],
      ["POST /api/v1/transactions:rate>10", true, 20],
      ["GET /nothing:p99<1s", false, 0]
    ])
  })
})
