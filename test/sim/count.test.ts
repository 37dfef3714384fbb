import { describe, expect, it } from "vitest"
import { runNode, traceHashOf } from "../support/node.ts"

const tiny = ["--seed", "5", "--merchants", "2", "--payments", "40", "--hours", "3"]

const run = runNode

/** `npm run sim:count` (sim/commands/count.ts): exact counts of a run that is the plain run, seed for seed. */
describe("the instruction count (sim/commands/count.ts)", () => {
  it("counts the instructions and fibers of a run, by kind and by function, without changing its trace", async () => {
    const [counted, again, plain] = await Promise.all([
      run(["--import", "tsx", "sim/commands/count.ts", ...tiny]),
      run(["--import", "tsx", "sim/commands/count.ts", ...tiny]),
      run(["--import", "tsx", "sim/commands/main.ts", ...tiny])
    ])
    expect(counted.stderr).toBe("")
    expect(counted.code).toBe(0)
    expect(traceHashOf(counted.stdout)).toMatch(/^[0-9a-f]{64}$/)
    expect(traceHashOf(counted.stdout)).toBe(traceHashOf(plain.stdout))
    const totals = /Effect instructions (\d+) \((\d+) a payment\), fibers (\d+)/.exec(counted.stdout)
    expect(totals).not.toBeNull()
    // A payment takes hundreds of instructions (its requests, its flow, its webhooks) and several fibers.
    expect(Number(totals![2])).toBeGreaterThan(100)
    expect(Number(totals![3])).toBeGreaterThan(40)
    for (const kind of ["Sync", "Suspend", "OnSuccess", "Async"]) {
      expect(counted.stdout).toMatch(new RegExp(`^\\s+\\d+  ${kind}$`, "m"))
    }
    expect(counted.stdout).toMatch(/^\s+\d+ {2}OnSuccess .+$/m)
    // Exact: the same run counts the same.
    const body = (stdout: string) => stdout.split("\n").filter((line) => !line.startsWith("virtual time")).join("\n")
    expect(body(again.stdout)).toBe(body(counted.stdout))
  }, 120_000)
})
