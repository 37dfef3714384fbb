import { execFile } from "node:child_process"
import { resolve } from "node:path"
import { describe, expect, it } from "vitest"
import { parseSeeds, parseSweepArguments, runSweep, type SweepProgress } from "../../sim/commands/Sweep.ts"

const root = resolve(import.meta.dirname, "../..")
/** Each test runs a few dozen small simulations, some in child processes: minutes on a busy two-core host. */
const slow = 300_000
const tiny = ["--merchants", "2", "--payments", "40", "--hours", "3"]

describe("seed sweeps", () => {
  it("parses seeds and refuses what is not a sweep option", () => {
    expect(parseSeeds("1..4")).toEqual([1, 2, 3, 4])
    expect(parseSeeds("7")).toEqual([7])
    expect(parseSeeds("3,1..2,3")).toEqual([3, 1, 2])
    expect(() => parseSeeds("5..1")).toThrow("ends before it starts")
    expect(() => parseSeeds("a..3")).toThrow("is not a seed")
    expect(() => parseSweepArguments(["--jobs", "2"])).toThrow("--seeds is required")
    expect(() => parseSweepArguments(["--seeds", "1..3", "--jobs", "0"])).toThrow(
      `--jobs: "0". expected a value greater than or equal to 1`
    )
    expect(() => parseSweepArguments(["--seeds", "1..3", "--seed", "4"])).toThrow("--seed is not a sweep option")
    expect(() => parseSweepArguments(["--seeds", "1..3", "--bogus"])).toThrow("Unrecognized flag: --bogus")
    const defaults = parseSweepArguments(["--seeds", "1..3"])
    expect([defaults.base.payments, defaults.base.hours]).toEqual([1500, 30])
    expect(parseSweepArguments(["--seeds", "1..3", "--jobs", "8"]).jobs).toBe(3)
  }, slow)

  it("gives every seed the same result whatever --jobs is", async () => {
    const progress: Array<SweepProgress> = []
    const [one, two] = await Promise.all([
      runSweep(parseSweepArguments(["--seeds", "1..4", "--jobs", "1", ...tiny]), (p) => progress.push(p)),
      runSweep(parseSweepArguments(["--seeds", "1..4", "--jobs", "2", ...tiny]))
    ])
    const perSeed = (r: typeof one) =>
      r.outcomes.map((o) => ({ seed: o.seed, ok: o.ok, first: o.firstViolation, hash: o.traceHash }))
    expect(perSeed(one).map((o) => o.seed)).toEqual([1, 2, 3, 4])
    for (const o of one.outcomes) expect(o.traceHash).toMatch(/^[0-9a-f]{64}$/)
    expect(new Set(one.outcomes.map((o) => o.traceHash)).size).toBe(4)
    expect(perSeed(two)).toEqual(perSeed(one))
    expect(progress.map((p) => p.done)).toEqual([1, 2, 3, 4])
  }, slow)

  it("reports failed seeds with their law and replay command, and exits 1 (CLI)", async () => {
    const run = await new Promise<{ status: number | null; stdout: string; stderr: string }>((done) => {
      execFile(
        process.execPath,
        [
          "--import",
          "tsx",
          "sim/commands/Sweep.ts",
          "--seeds",
          "7,8",
          "--jobs",
          "2",
          ...tiny,
          "--planted-bug",
          "refund-over-remainder",
          "--mix",
          JSON.stringify({ refund: 0.9, overRefund: 0.5 })
        ],
        { cwd: root, encoding: "utf8" },
        (error, stdout, stderr) =>
          done({ status: error === null ? 0 : typeof error.code === "number" ? error.code : null, stdout, stderr })
      )
    })
    expect(run.status).toBe(1)
    expect(run.stdout).toMatch(
      /\n\s+7 {2}refunds-within-capture\s+npm run sim -- --seed 7 --merchants 2 --payments 40 --hours 3 .*--planted-bug refund-over-remainder/
    )
    expect(run.stdout).toMatch(/seeds 2 {2}ok \d {2}failed \d {2}jobs 2 {2}wall .* payments\/s/)
    // Not a terminal: one progress line per tenth of the seeds, not redrawn in place.
    expect(run.stderr).toContain("2/2 seeds")
    expect(run.stderr).not.toContain("\r")
  }, slow)
})
