import { describe, expect, it } from "vitest"
import { parseArguments } from "../../bench/harness/Cli.ts"
import type { LoadModel } from "../../bench/harness/LoadModel.ts"
import { Recorder } from "../../bench/harness/Recorder.ts"
import { saturationOf } from "../../bench/harness/Saturation.ts"
import { drive } from "./drive.ts"

const open = (rate: number): LoadModel => ({ kind: "open", rate, arrival: "constant" })

describe("--warmup: recorded, not judged", () => {
  it("judges only after the warm-up: a cold start shows in the run's figures, not in the objectives' or the verdict's", async () => {
    // 100 a second for 10 s; the service answers nothing for the first 1.5 s, then catches up.
    const run = await drive({
      model: open(100),
      durationMs: 10_000,
      service: { serviceMs: 2, freeFromMs: 1_500 },
      recorder: (startMs) => new Recorder(startMs, { fromMs: startMs + 2_000, cap: null })
    })
    expect(run.figures.requests).toBe(1_000)
    expect(run.figures.latency_ms.max).toBeGreaterThanOrEqual(1_500)
    const judged = run.recorder.judged!.finish(run.clock.now())
    expect(judged.requests).toBe(800)
    expect(judged.latency_ms.max).toBeCloseTo(2, 1)
    const verdict = saturationOf({
      model: open(100),
      outcome: run.outcome,
      times: run.recorder,
      shiftMs: judged.latency_ms.p50,
      warmupMs: 2_000
    })
    expect(verdict.verdict).toBe("kept pace")
    expect(verdict.achieved_per_s).toBeCloseTo(100, 0)
  })

  it("caps the judged requests at the first N issued", async () => {
    const run = await drive({
      model: open(100),
      durationMs: 3_000,
      service: { serviceMs: 2 },
      recorder: (startMs) => new Recorder(startMs, { fromMs: startMs, cap: 120 })
    })
    expect(run.figures.requests).toBe(300)
    expect(run.recorder.judged!.finish(run.clock.now()).requests).toBe(120)
  })

  it("the command line: a duration shorter than the load", () => {
    expect(parseArguments(["--warmup", "10s", "--duration", "60"])).toMatchObject({ command: "run", warmupMs: 10_000 })
    expect(parseArguments(["--warmup", "10s", "--stages", "5s:10,10s:20"])).toMatchObject({
      command: "run",
      warmupMs: 10_000,
      durationSeconds: 15
    })
    expect(parseArguments([])).toMatchObject({ warmupMs: 0 })
    expect(parseArguments(["--warmup", "60s", "--duration", "60"])).toMatchObject({
      command: "error",
      message: expect.stringContaining("leaves nothing")
    })
    expect(parseArguments(["--warmup", "ten"])).toMatchObject({
      command: "error",
      message: expect.stringContaining("--warmup must be a duration")
    })
  })
})
