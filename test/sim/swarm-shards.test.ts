import { describe, expect, it } from "vitest"
import { parseArguments as parseHarnessArguments } from "../../bench/harness/Cli.ts"
import { validateOptions } from "../../sim/checks/Replay.ts"
import { parseArguments } from "../../sim/commands/main.ts"
import { formatSweep, mergeShards, parseSweepArguments, runSweep, sweepJson } from "../../sim/commands/Sweep.ts"
import { defaultOptions } from "../../sim/engine/Options.ts"
import { parseShard, shardOf } from "../../sim/engine/Shard.ts"
import { drawSwarm, swarmOptions } from "../../sim/engine/Swarm.ts"

const slow = 300_000
const tiny = ["--merchants", "2", "--payments", "30", "--hours", "2"]

describe("swarm sweeps", () => {
  it("draws a fault and workload mix per seed, from the seed alone", () => {
    expect(drawSwarm(17)).toEqual(drawSwarm(17))
    const draws = Array.from({ length: 60 }, (_, i) => drawSwarm(i + 1))
    // Mixes one profile never reaches: no crash and many disputes; pauses without crashes; nothing at all.
    expect(draws.some((d) => !d.classes.includes("crashes") && (d.faults.disputes ?? 0) > 0.1)).toBe(true)
    expect(
      draws.some((d) =>
        d.classes.includes("pauses") && !d.classes.includes("crashes") && !d.classes.includes("commit-crashes")
      )
    ).toBe(true)
    expect(new Set(draws.map((d) => d.classes.join(" "))).size).toBeGreaterThan(30)
    expect(new Set(draws.map((d) => d.mix.refund)).size).toBe(60)
    // The workload's corners are drawn too: some seeds aim far more at them than the default mix.
    expect(draws.some((d) => (d.mix.disputeDuringScript ?? 0) > 0.15 && (d.mix.boundaryScores ?? 0) > 0.05)).toBe(true)
    expect(new Set(draws.map((d) => d.mix.bodyKey)).size).toBe(60)
    for (const d of draws) expect(d.faults.clockSkewMs).toBeLessThanOrEqual(500)
  })

  it("replays a swarm seed from --seed N --swarm, and its drawn options make a valid replay file", () => {
    const { options } = parseArguments(["--seed", "23", "--swarm", "--payments", "40"])
    expect(options).toEqual(swarmOptions({ ...defaultOptions, payments: 40 }, 23))
    expect(validateOptions(JSON.parse(JSON.stringify(options)))).toEqual(options)
    expect(() => parseArguments(["--seed", "1", "--swarm", "--faults", "heavy"])).toThrow("--swarm draws")
  })
})

describe("sharded sweeps", () => {
  it("splits a seed list deterministically into disjoint shards that cover it, numbered from 0 as the harness's", () => {
    const seeds = [5, 1, 9, 2, 7, 3, 8]
    const shards = [0, 1, 2].map((index) => shardOf(seeds, { index, count: 3 }))
    expect(shards).toEqual([[5, 2, 8], [1, 7], [9, 3]])
    expect(shards.flat().sort((a, b) => a - b)).toEqual([...seeds].sort((a, b) => a - b))
    expect(parseShard("0/3")).toEqual({ index: 0, count: 3 })
    expect(() => parseShard("3/3")).toThrow("--shard must be I/N with 0 <= I < N")
    expect(() => parseShard("4/3")).toThrow("--shard must be I/N")
    expect(() => parseShard("1/0")).toThrow("--shard must be I/N")
    expect(() => parseShard("-1/3")).toThrow("--shard must be I/N")
    expect(parseSweepArguments(["--seeds", "1..10", "--shard", "1/3"]).seeds).toEqual([2, 5, 8])
    expect(parseSweepArguments(["--seeds", "1..10", "--shard", "0/3"]).seeds).toEqual([1, 4, 7, 10])
    expect(() => parseSweepArguments(["--seeds", "1..10", "--shard", "3/3"])).toThrow("--shard must be I/N")
    // The harness reads --shard with the same rule and the same words.
    const harness = parseHarnessArguments(["--shard", "3/3"])
    expect(harness).toEqual({
      command: "error",
      message: "--shard must be I/N with 0 <= I < N <= 10000 (the shards of 4 are 0/4, 1/4, 2/4 and 3/4), not '3/3'"
    })
    expect(parseHarnessArguments(["--shard", "0/3"])).toMatchObject({ shard: { index: 0, count: 3 } })
  })

  it("merges shards' JSON results into the table one unsharded sweep prints", async () => {
    const args = ["--seeds", "1..6", "--swarm", "--jobs", "1", ...tiny, "--planted-bug", "refund-over-remainder"]
    const [whole, first, second] = await Promise.all([
      runSweep(parseSweepArguments(args)),
      runSweep(parseSweepArguments([...args, "--shard", "0/2"])),
      runSweep(parseSweepArguments([...args, "--shard", "1/2"]))
    ])
    expect(first.outcomes.map((o) => o.seed)).toEqual([1, 3, 5])
    const shardFiles = [second, first].map((r) =>
      JSON.parse(JSON.stringify(sweepJson(r))) as ReturnType<typeof sweepJson>
    )
    const merged = mergeShards(shardFiles)
    const seedsOf = (json: ReturnType<typeof sweepJson>) => json.seeds.map(({ wallMs: _wallMs, ...rest }) => rest)
    expect(seedsOf(sweepJson(merged))).toEqual(seedsOf(sweepJson(whole)))
    const table = (text: string) => text.split("\n").slice(0, -1).join("\n")
    expect(table(formatSweep(merged))).toBe(table(formatSweep(whole)))
    expect(() => mergeShards([shardFiles[0]!])).toThrow("expected shards")
    expect(() => mergeShards([shardFiles[0]!, shardFiles[0]!])).toThrow("given twice")
    // A shard numbered from 1 (n/n) is refused, not read as another shard.
    expect(() => mergeShards([shardFiles[1]!, { ...shardFiles[0]!, shard: "2/2" }])).toThrow(
      "a file's shard (numbered from 0) must be I/N"
    )
  }, slow)
})
