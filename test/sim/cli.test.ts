import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { describe, expect, it } from "vitest"
import { parseArguments } from "../../sim/commands/main.ts"
import { runNode } from "../support/node.ts"

// The simulator's commands as a person meets them: --help, one line and exit 2 for a bad
// invocation, --json for scripts. Run through the bundle (sim/commands/launch.mjs), as npm runs them.

const slow = 180_000
const tiny = ["--merchants", "2", "--payments", "30", "--hours", "2"]

const run = (args: ReadonlyArray<string>) => runNode(["sim/commands/launch.mjs", ...args])

/** stderr without the bundler's line (the first run after a change builds the bundle). */
const complaint = (stderr: string) =>
  stderr.split("\n").filter((line) => line !== "" && !line.includes("bundled in")).join("\n")

describe("sim, sim:sweep and sim:bench on the command line", () => {
  it("--help says what each command does and names its flags with their defaults", async () => {
    const [sim, sweep, merge, bench] = await Promise.all([
      run(["main", "--help"]),
      run(["sweep", "--help"]),
      run(["sweep", "merge", "--help"]),
      run(["bench", "--help"])
    ])
    for (const help of [sim, sweep, merge, bench]) {
      expect(help.code, help.stderr).toBe(0)
      expect(help.stdout).toContain("DESCRIPTION")
    }
    expect(sim.stdout).toMatch(/--payments integer\s+.*\(default: 10000\)/)
    expect(sim.stdout).toMatch(/--shrink-runs integer\s+.*\(default: 200\)/)
    for (const flag of ["--seed", "--faults", "--planted-bug", "--replay", "--check-determinism", "--json"]) {
      expect(sim.stdout).toContain(flag)
    }
    expect(sweep.stdout).toMatch(/--payments integer\s+.*\(default: 1500\)/)
    expect(sweep.stdout).toMatch(/^\s+merge\s/m)
    expect(merge.stdout).toContain("<file...>")
    expect(bench.stdout).toMatch(/--payments integer\s+.*\(default: 100000\)/)
  }, slow)

  it("refuses a bad invocation with one line naming the problem and exit code 2", async () => {
    const cases: ReadonlyArray<readonly [ReadonlyArray<string>, string]> = [
      [["main", "--seed", "-1"], `--seed: "-1". expected a value greater than or equal to 0`],
      [["main", "--payments", "abc"], `--payments: "abc". expected a number`],
      [["main", "--bogus"], "Unrecognized flag: --bogus"],
      [["main", "--planted-bug", "nope"], "--planted-bug"],
      [["main", "--seed", "1", "--replay", "x.json"], "--replay takes every option from its file; remove --seed"],
      [["main", "--mix", "{nope"], "--mix must be a JSON object"],
      [["sweep", "--jobs", "2"], "--seeds is required"],
      [["sweep", "--seeds", "1..2", "--shrink"], "--shrink is not a sweep option"],
      [["sweep", "merge"], "Missing required argument: file"],
      [["bench", "--hours", "0"], `--hours: "0". expected a value greater than or equal to 1`]
    ]
    const runs = await Promise.all(cases.map(([args]) => run(args)))
    for (const [index, result] of runs.entries()) {
      const [args, message] = cases[index]!
      expect(result.code, JSON.stringify(args)).toBe(2)
      expect(result.stdout).toBe("")
      expect(complaint(result.stderr).split("\n"), result.stderr).toHaveLength(1)
      expect(result.stderr).toContain(message)
    }
  }, slow)

  it("prints PASS first for a person and parseable JSON with --json; merge reads shards' JSON", async () => {
    const directory = mkdtempSync(join(tmpdir(), "sim-cli-"))
    try {
      const [table, json, shard0, shard1] = await Promise.all([
        run(["main", "--seed", "3", ...tiny]),
        run(["main", "--seed", "3", ...tiny, "--json"]),
        run(["sweep", "--seeds", "1..4", "--shard", "0/2", "--jobs", "1", ...tiny, "--json"]),
        run(["sweep", "--seeds", "1..4", "--shard", "1/2", "--jobs", "1", ...tiny, "--json"])
      ])
      expect(table.code, table.stderr).toBe(0)
      expect(table.stdout).toMatch(/^seed 3\nPASS {2}seed 3: every law held/)
      expect(json.code, json.stderr).toBe(0)
      const parsed = JSON.parse(json.stdout)
      expect(parsed).toMatchObject({ ok: true, seed: 3, violations: [], replay: null })
      expect(table.stdout).toContain(`hash ${parsed.traceHash}`)
      const files = [shard0, shard1].map((shard, index) => {
        expect(shard.code, shard.stderr).toBe(0)
        const path = join(directory, `shard-${index}.json`)
        writeFileSync(path, shard.stdout)
        return path
      })
      const [merged, mergedJson] = await Promise.all([
        run(["sweep", "merge", ...files]),
        run(["sweep", "merge", "--json", ...files])
      ])
      expect(merged.code, merged.stderr).toBe(0)
      expect(merged.stdout).toMatch(/^PASS {2}4 seeds: every law held/)
      expect(JSON.parse(mergedJson.stdout).seeds.map((s: { seed: number }) => s.seed)).toEqual([1, 2, 3, 4])
    } finally {
      rmSync(directory, { recursive: true, force: true })
    }
  }, slow)

  it("sim:count --json prints the counts as JSON; a bad flag exits 2", async () => {
    const count = (args: ReadonlyArray<string>) => runNode(["--import", "tsx", "sim/commands/count.ts", ...args])
    const [json, bad] = await Promise.all([count(["--seed", "3", ...tiny, "--json"]), count(["--seed", "x"])])
    expect(json.code, json.stderr).toBe(0)
    const parsed = JSON.parse(json.stdout)
    expect(parsed).toMatchObject({ ok: true, seed: 3, traceHash: expect.stringMatching(/^[0-9a-f]{64}$/) })
    expect(parsed.instructions).toBeGreaterThan(0)
    expect(bad.code).toBe(2)
    expect(bad.stdout).toBe("")
    expect(bad.stderr.trim()).toMatch(/^sim:count: Invalid value for flag --seed: "x"/)
  }, slow)

  it("parseArguments keeps every flag's meaning", () => {
    const parsed = parseArguments([
      "--seed",
      "9",
      "--merchants",
      "3",
      "--payments",
      "10",
      "--hours",
      "2",
      "--no-webhooks",
      "--dispatchers",
      "2",
      "--faults",
      "none",
      "--shrink",
      "--out",
      "f.json"
    ])
    expect(parsed.options).toMatchObject({
      seed: 9,
      merchants: 3,
      payments: 10,
      hours: 2,
      webhooks: false,
      dispatchers: 2
    })
    expect(parsed).toMatchObject({ shrink: true, out: "f.json", json: false, replay: undefined })
    expect(parsed.scenarioFlags).toEqual([
      "--seed",
      "--merchants",
      "--payments",
      "--hours",
      "--faults",
      "--no-webhooks",
      "--dispatchers"
    ])
    expect(() => parseArguments(["--out", "f.json"])).toThrow("add --shrink")
  })
})
