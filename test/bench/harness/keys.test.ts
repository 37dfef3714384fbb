import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { parseArguments, type RunOptions } from "../../../bench/harness/Cli.ts"
import type { Scenario, SetupContext } from "../../../bench/harness/Contract.ts"
import { keyFileText, parseKeyFile, readKeyFile } from "../../../bench/harness/KeyFile.ts"
import { type Io, main, runHarness } from "../../../bench/harness/main.ts"

const directory = mkdtempSync(join(tmpdir(), "payments-harness-keys-"))
afterAll(() => rmSync(directory, { recursive: true, force: true }))

const fiveKeys = ["sk_live_a", "sk_live_b", "sk_live_c", "sk_live_d", "sk_live_e"]
const file = (name: string, text: string) => {
  const path = join(directory, name)
  writeFileSync(path, text)
  return path
}
const problem = (run: () => unknown) => {
  try {
    run()
  } catch (error) {
    return error instanceof Error ? error.message : String(error)
  }
  return "no problem"
}

describe("keys files: one per shard, used whole", () => {
  it("reads keys, comments and the shard line", () => {
    expect(parseKeyFile("# shard 2/3\n# made by hand\n\n  sk_live_a  \nsk_live_b\n", "f")).toEqual({
      keys: ["sk_live_a", "sk_live_b"],
      shard: { index: 2, count: 3 }
    })
    expect(parseKeyFile("sk_live_a\n", "f")).toEqual({ keys: ["sk_live_a"], shard: null })
    expect(keyFileText({ index: 1, count: 4 }, ["sk_live_x", "sk_live_y"], ["2 merchants"])).toBe(
      "# shard 1/4\n# 2 merchants\nsk_live_x\nsk_live_y\n"
    )
    expect(parseKeyFile(keyFileText({ index: 1, count: 4 }, ["sk_live_x"]), "f")).toEqual({
      keys: ["sk_live_x"],
      shard: { index: 1, count: 4 }
    })
    expect(problem(() => parseKeyFile("sk_live_a\nsk_live_a\n", "f"))).toBe(
      "f: line 2 repeats the key of line 1 (one merchant, driven once)"
    )
    expect(problem(() => parseKeyFile("sk_live_a sk_live_b\n", "f"))).toContain("f: line 1 is not one API key")
    expect(problem(() => parseKeyFile("# shard 0/2\n# shard 1/2\nsk_live_a\n", "f"))).toContain(
      "line 2 names a shard again"
    )
    expect(problem(() => parseKeyFile("# shard 3/3\nsk_live_a\n", "f"))).toContain("must be I/N with 0 <= I < N")
  })

  it("three shards and one 5-key file: no shard splits it again; a file that names no shard is refused by each", () => {
    const shared = file("shared.keys", `${fiveKeys.join("\n")}\n`)
    for (const index of [0, 1, 2]) {
      expect(problem(() => readKeyFile(shared, { index, count: 3 }))).toBe(
        `--keys: ${shared} names no shard, and --shard ${index}/3 is one of 3: each shard drives every merchant of its own file, so the file says which shard it is for ` +
          `(a line '# shard ${index}/3'; npm run harness -- keys --shards 3 writes them)`
      )
    }
    // A single run takes a file without a shard line, whole.
    expect(readKeyFile(shared, { index: 0, count: 1 }).keys).toEqual(fiveKeys)
    // Named for shard 1/3: that shard drives all five merchants, the others refuse it.
    const mine = file("one-of-three.keys", keyFileText({ index: 1, count: 3 }, fiveKeys))
    expect(readKeyFile(mine, { index: 1, count: 3 })).toEqual({ path: mine, keys: fiveKeys })
    expect(problem(() => readKeyFile(mine, { index: 0, count: 3 }))).toBe(
      `--keys: ${mine} is the keys file of shard 1/3 (its line '# shard 1/3'), not of --shard 0/3: each shard drives the merchants of its own file`
    )
    expect(problem(() => readKeyFile(mine, { index: 0, count: 1 }))).toContain("not of --shard 0/1")
  })

  it("shard 7/20 with a 5-key file of its own drives its five merchants (a split would have left it none)", () => {
    const seventh = file("seventh.keys", keyFileText({ index: 7, count: 20 }, fiveKeys))
    expect(readKeyFile(seventh, { index: 7, count: 20 }).keys).toEqual(fiveKeys)
    // A directory of `harness keys`'s files: the shard takes DIR/shard-7.keys.
    const dir = join(directory, "dir")
    mkdirSync(dir)
    writeFileSync(join(dir, "shard-7.keys"), keyFileText({ index: 7, count: 20 }, fiveKeys.slice(0, 2)))
    expect(readKeyFile(dir, { index: 7, count: 20 })).toEqual({
      path: join(dir, "shard-7.keys"),
      keys: fiveKeys.slice(0, 2)
    })
    expect(problem(() => readKeyFile(dir, { index: 8, count: 20 }))).toBe(
      `--keys: ${
        join(dir, "shard-8.keys")
      }, the keys file of shard 8/20, does not exist (npm run harness -- keys --shards 20 --out DIR makes one per shard)`
    )
    // A shard with no key is refused, not run without merchants.
    const empty = file("empty.keys", keyFileText({ index: 7, count: 20 }, []))
    expect(problem(() => readKeyFile(empty, { index: 7, count: 20 }))).toBe(
      `--keys: ${empty} holds no API key for shard 7/20 (one sk_live_... a line): this shard would drive no merchant`
    )
  })

  it("a shard that would get no key of its file exits 2 with the reason, before any request", async () => {
    const lines: Array<string> = []
    const io: Io = { log: (line) => lines.push(line), out: (line) => lines.push(line), progress: null }
    const shared = file("refused.keys", `${fiveKeys.join("\n")}\n`)
    expect(await main(["--target", "http://127.0.0.1:9", "--keys", shared, "--shard", "7/20"], io)).toBe(2)
    expect(lines).toEqual([
      `harness: --keys: ${shared} names no shard, and --shard 7/20 is one of 20: each shard drives every merchant of its own file, so the file says which shard it is for (a line '# shard 7/20'; npm run harness -- keys --shards 20 writes them)`
    ])
  })

  it("gives the scenario every key of the shard's file and records that many merchants", async () => {
    const seventh = file("scenario.keys", keyFileText({ index: 7, count: 20 }, fiveKeys))
    const parsed = parseArguments([
      "--target",
      "http://127.0.0.1:9",
      "--keys",
      seventh,
      "--shard",
      "7/20",
      "--merchants",
      "2",
      "--report",
      join(directory, "report")
    ])
    if (parsed.command !== "run") throw new Error(JSON.stringify(parsed))
    let given: SetupContext | null = null
    // Set-up ends the run (a failed set-up runs no load): what the scenario was given is all this checks.
    const scenario: Scenario = {
      name: "keys-seen",
      requestsPerScript: 1,
      setup: async (context) => {
        given = context
        throw new Error("seen")
      },
      runScript: async () => {},
      drain: async () => {},
      checkLaws: async () => [],
      close: async () => {}
    }
    const { result } = await runHarness(parsed as RunOptions, { log: () => {}, out: () => {}, progress: null }, {
      scenario
    })
    expect(given!.apiKeys).toEqual(fiveKeys)
    expect(given!.merchants).toBe(5)
    expect(result.config.merchants).toBe(5)
    expect(result.config.shards).toEqual(["7/20"])
  })
})
