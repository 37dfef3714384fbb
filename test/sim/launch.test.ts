import { describe, expect, it } from "vitest"
import { runNode, traceHashOf } from "../support/node.ts"

/** A bundle build (a few seconds) plus small simulations in child processes, on a busy two-core host. */
const slow = 300_000
const tiny = ["--merchants", "2", "--payments", "40", "--hours", "3"]

const run = runNode

/**
 * `npm run sim`, `npm run sim:sweep` and `npm run sim:bench` run a bundle of the simulator (sim/commands/launch.mjs), the tests
 * run its TypeScript: both must be the same program, seed for seed.
 */
describe("the bundled simulator (sim/commands/launch.mjs)", () => {
  it("gives a seed the trace the TypeScript gives, and fails a planted bug the same way", async () => {
    const bundled = await run(["sim/commands/launch.mjs", "main", "--seed", "5", ...tiny])
    const source = await run(["--import", "tsx", "sim/commands/main.ts", "--seed", "5", ...tiny])
    expect(bundled.code).toBe(0)
    expect(source.code).toBe(0)
    expect(traceHashOf(bundled.stdout)).toMatch(/^[0-9a-f]{64}$/)
    expect(traceHashOf(bundled.stdout)).toBe(traceHashOf(source.stdout))
    expect(bundled.stdout).toMatch(/^seed 5\nPASS {2}seed 5: every law held/)

    // `npm run sim:bench` runs the same bundle: same scenario, same trace.
    const bench = await run(["--expose-gc", "sim/commands/launch.mjs", "bench", "--seed", "5", ...tiny, "--json"])
    expect(bench.code).toBe(0)
    const measured = JSON.parse(bench.stdout) as {
      ok: boolean
      traceHash: string
      payments: number
      liveHeapMBAtEnd: number | null
    }
    expect(measured).toMatchObject({ ok: true, payments: 40, traceHash: traceHashOf(source.stdout) })
    expect(measured.liveHeapMBAtEnd).toBeGreaterThan(0)
    // Without --json, a table for a person: the verdict first (heap FAIL here: this node runs without the
    // npm script's heap cap, so the limit itself is above the cap), the same trace.
    const table = await run(["--expose-gc", "sim/commands/launch.mjs", "bench", "--seed", "5", ...tiny])
    expect(table.code).toBe(0)
    expect(table.stdout).toMatch(/^FAIL {2}laws held, heap FAIL \(peak ≤ 1536 MB, limit ≤ 2048 MB\), speed n\/a/)
    expect(table.stdout).toMatch(new RegExp(`^trace hash\\s+${measured.traceHash}$`, "m"))

    const planted = await run([
      "sim/commands/launch.mjs",
      "main",
      "--seed",
      "7",
      ...tiny,
      "--planted-bug",
      "refund-over-remainder",
      "--mix",
      JSON.stringify({ refund: 0.9, overRefund: 0.5 })
    ])
    expect(planted.code).toBe(1)
    expect(planted.stdout).toContain("refunds-within-capture")
    expect(planted.stdout).toContain("replay: npm run sim -- --seed 7")
    expect(planted.stdout).toMatch(/^seed 7\nFAIL {2}seed 7: refunds-within-capture broken first/)
  }, slow)

  it("sweeps seeds in bundled worker threads", async () => {
    const sweep = await run(["sim/commands/launch.mjs", "sweep", "--seeds", "5,6", "--jobs", "2", ...tiny])
    expect(sweep.stderr).not.toContain("Error")
    expect(sweep.code).toBe(0)
    expect(sweep.stdout).toMatch(/seeds 2 {2}ok 2 {2}failed 0 {2}jobs 2/)
  }, slow)

  it("refuses an unknown command", async () => {
    const wrong = await run(["sim/commands/launch.mjs", "simulate"])
    expect(wrong.code).toBe(2)
    expect(wrong.stderr).toContain("usage: node sim/commands/launch.mjs main|sweep")
  }, slow)
})
