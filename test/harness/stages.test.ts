import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { parseArguments } from "../../bench/harness/Cli.ts"
import { arrivalOffsets, type LoadModel } from "../../bench/harness/LoadModel.ts"
import { offeredAt, offeredText } from "../../bench/harness/Run.ts"
import { saturationOf } from "../../bench/harness/Saturation.ts"
import { curveOffsets, offeredBetween, parseStages, rateAt, type Stage, stageAt } from "../../bench/harness/Stages.ts"
import { drive } from "./drive.ts"

const stagesOf = (text: string): ReadonlyArray<Stage> => {
  const parsed = parseStages(text, 1_000_000)
  if ("error" in parsed) throw new Error(parsed.error)
  return parsed.stages
}

const take = (offsets: Generator<number>, limit = 1_000_000) => {
  const all: Array<number> = []
  for (const offset of offsets) {
    all.push(offset)
    if (all.length >= limit) break
  }
  return all
}

describe("--stages: the offered rate as a curve", () => {
  it("reads ramps and plateaus, and refuses what it cannot read", () => {
    expect(stagesOf("30s:0-200,60s:200,30s:200-0")).toEqual([
      { durationMs: 30_000, fromPerS: 0, toPerS: 200 },
      { durationMs: 60_000, fromPerS: 200, toPerS: 200 },
      { durationMs: 30_000, fromPerS: 200, toPerS: 0 }
    ])
    expect(parseStages("30:100", 1000)).toMatchObject({ error: expect.stringContaining("cannot read '30:100'") })
    expect(parseStages("10s:100-x", 1000)).toMatchObject({ error: expect.stringContaining("cannot read") })
    expect(parseStages("10s:0,5s:0", 1000)).toMatchObject({ error: expect.stringContaining("every stage offers 0") })
    expect(parseStages("10s:5000", 1000)).toMatchObject({ error: expect.stringContaining("more than 1000") })
  })

  it("gives the rate, the stage and the requests offered at any moment", () => {
    const stages = stagesOf("30s:0-200,60s:200,30s:200-0")
    expect(rateAt(stages, 0)).toBe(0)
    expect(rateAt(stages, 15_000)).toBe(100)
    expect(rateAt(stages, 50_000)).toBe(200)
    expect(rateAt(stages, 105_000)).toBe(100)
    expect(rateAt(stages, 120_000)).toBe(0)
    expect(stageAt(stages, 30_000).index).toBe(1)
    expect(offeredBetween(stages, 0, 120_000)).toBe(3_000 + 12_000 + 3_000)
    expect(offeredBetween(stages, 0, 15_000)).toBe(750)
  })

  it("a plateau lays out the same starts as --rate", () => {
    const plateau = take(curveOffsets(stagesOf("10s:100"), 1, "constant", 1))
    const rate = take(arrivalOffsets(10, "constant", 1), plateau.length + 1)
    expect(plateau).toHaveLength(1_000)
    plateau.forEach((offset, i) => expect(offset).toBeCloseTo(rate[i]!, 9))
  })

  it("a ramp's starts follow its rate: each second holds what the curve offers in it", () => {
    // 0 to 200 over 10 s: second k offers 20k + 10 requests.
    const offsets = take(curveOffsets(stagesOf("10s:0-200"), 1, "constant", 1))
    expect(offsets).toHaveLength(1_000)
    const perSecond = Array.from(
      { length: 10 },
      (_, k) => offsets.filter((o) => o >= k * 1000 && o < (k + 1) * 1000).length
    )
    perSecond.forEach((count, k) => expect(Math.abs(count - (20 * k + 10))).toBeLessThanOrEqual(1))
    for (let i = 1; i < offsets.length; i++) expect(offsets[i]!).toBeGreaterThan(offsets[i - 1]!)
  })

  it("any curve: the starts are increasing, inside the load, and as many as it offers (property)", () => {
    const stage = fc.record({
      seconds: fc.integer({ min: 1, max: 20 }),
      from: fc.integer({ min: 0, max: 300 }),
      to: fc.integer({ min: 0, max: 300 })
    })
    fc.assert(
      fc.property(
        fc.array(stage, { minLength: 1, maxLength: 4 }),
        fc.integer({ min: 1, max: 4 }),
        (parts, perScript) => {
          const stages = parts.map((p) => ({ durationMs: p.seconds * 1000, fromPerS: p.from, toPerS: p.to }))
          const totalMs = stages.reduce((n, s) => n + s.durationMs, 0)
          const offsets = take(curveOffsets(stages, perScript, "constant", 1))
          for (let i = 1; i < offsets.length; i++) expect(offsets[i]!).toBeGreaterThanOrEqual(offsets[i - 1]!)
          expect(offsets.every((o) => o >= 0 && o <= totalMs)).toBe(true)
          const offered = offeredBetween(stages, 0, totalMs) / perScript
          expect(Math.abs(offsets.length - offered)).toBeLessThanOrEqual(stages.length + 1)
        }
      ),
      { numRuns: 200, seed: 38 }
    )
  })

  it("Poisson arrivals along a curve are seeded and average its count", () => {
    const stages = stagesOf("20s:0-300,20s:300")
    const a = take(curveOffsets(stages, 1, "poisson", 7))
    expect(take(curveOffsets(stages, 1, "poisson", 7))).toEqual(a)
    expect(take(curveOffsets(stages, 1, "poisson", 8))).not.toEqual(a)
    // 9,000 offered: a Poisson count's standard deviation is about 95.
    expect(Math.abs(a.length - 9_000)).toBeLessThan(500)
  })

  it("the command line: --stages replaces --rate and --duration", () => {
    const parsed = parseArguments(["--stages", "30s:0-200,60s:200,30s:200-0", "--scenario", "health"])
    expect(parsed).toMatchObject({
      command: "run",
      durationSeconds: 120,
      model: { kind: "open", rate: 200, stages: stagesOf("30s:0-200,60s:200,30s:200-0") },
      merchants: 10
    })
    for (const other of [["--rate", "5"], ["--duration", "5"], ["--connections", "2"]]) {
      expect(parseArguments(["--stages", "10s:5", ...other])).toMatchObject({
        command: "error",
        message: expect.stringContaining("--stages gives the rate and the duration")
      })
    }
    expect(parseArguments(["--stages", "ten"])).toMatchObject({
      command: "error",
      message: expect.stringContaining("--stages: cannot read 'ten'")
    })
  })
})

describe("the open model along stages, on the virtual clock", () => {
  const model = (text: string): LoadModel => ({ kind: "open", rate: 0, arrival: "constant", stages: stagesOf(text) })

  it("starts each script at its intended time on the curve and measures from it", async () => {
    const shape = model("2s:0-100,2s:100,1s:100-0")
    const run = await drive({ model: shape, durationMs: 5_000, service: { serviceMs: 4 } })
    expect(run.outcome.scriptsStarted).toBe(run.intended.length)
    expect(Math.abs(run.intended.length - (100 + 200 + 50))).toBeLessThanOrEqual(2)
    const expected = take(curveOffsets(stagesOf("2s:0-100,2s:100,1s:100-0"), 1, "constant", 1))
    expect(run.intended).toHaveLength(expected.length)
    run.intended.forEach((at, i) => expect(at).toBeCloseTo(expected[i]!, 6))
    expect(run.outcome.scriptsLate).toBe(0)
    expect(run.figures.latency_ms.max).toBeCloseTo(4, 1)
  })

  it("judges saturation window by window: kept pace on the ramp, behind on a plateau above the service's capacity", async () => {
    // One request at a time, 10 ms each: 100 a second at most.
    const service = { serviceMs: 10, servers: 1 }
    const within = model("10s:0-90")
    const kept = await drive({ model: within, durationMs: 10_000, service })
    const keptFigures = saturationOf({
      model: within,
      outcome: kept.outcome,
      times: kept.recorder,
      shiftMs: kept.figures.latency_ms.p50
    })
    expect(keptFigures.verdict).toBe("kept pace")
    expect(keptFigures.windows!.map((w) => Math.round(w.offered_per_s))).toEqual([45])
    const over = model("20s:60,10s:150")
    const behind = await drive({ model: over, durationMs: 30_000, service })
    const figures = saturationOf({
      model: over,
      outcome: behind.outcome,
      times: behind.recorder,
      shiftMs: behind.figures.latency_ms.p50
    })
    expect(figures.verdict).toBe("the service fell behind")
    expect(figures.windows!.map((w) => [w.stage, w.from_s, Math.round(w.to_s), Math.round(w.offered_per_s)])).toEqual([
      [0, 0, 10, 60],
      [0, 10, 20, 60],
      [1, 20, 30, 150]
    ])
    expect(figures.windows![0]!.share).toBeGreaterThan(0.97)
    expect(figures.windows![2]!.share).toBeLessThan(0.97)
  })
})

describe("the live figures along stages", () => {
  it("the progress line and the metrics give the rate offered at that moment and the stage under way", () => {
    const model: LoadModel = {
      kind: "open",
      rate: 200,
      arrival: "constant",
      stages: stagesOf("30s:0-200,60s:200,30s:200-0")
    }
    expect(offeredText(model, 15_000)).toBe(" of 100 offered (stage 1/3, 30s 0→200/s)")
    expect(offeredText(model, 45_000)).toBe(" of 200 offered (stage 2/3, 60s 200/s)")
    expect(offeredAt(model, 105_000)).toBe(100)
    expect(offeredText({ kind: "open", rate: 50, arrival: "constant" }, 1_000)).toBe(" of 50 offered")
    expect(offeredAt({ kind: "closed", connections: 2 }, 0)).toBeNull()
  })
})
