import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import pg from "pg"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type KeysOptions, parseArguments } from "../../../bench/harness/Cli.ts"
import { parseKeyFile, readKeyFile } from "../../../bench/harness/KeyFile.ts"
import { dealMerchants, makeKeys, webhookUrlOf } from "../../../bench/harness/MakeKeys.ts"
import type { MerchantMaker } from "../../../bench/harness/MerchantMaker.ts"
import { hashSecret } from "../../../src/services/ApiKeys.ts"
import { freshDatabase } from "../../support/database.ts"

const directory = mkdtempSync(join(tmpdir(), "payments-harness-make-keys-"))
afterAll(() => rmSync(directory, { recursive: true, force: true }))

const keysOptions = (argv: Array<string>): KeysOptions => {
  const parsed = parseArguments(["keys", ...argv])
  if (parsed.command !== "keys") throw new Error(JSON.stringify(parsed))
  return parsed
}
const errorOf = (argv: Array<string>) => {
  const parsed = parseArguments(["keys", ...argv])
  return parsed.command === "error" ? parsed.message : `parsed as ${parsed.command}`
}
const captured = () => {
  const lines: Array<string> = []
  return { lines, io: { log: (line: string) => lines.push(line), out: (line: string) => lines.push(line) } }
}
/** A maker the test expects never to be asked for a merchant. */
const unused: MerchantMaker = {
  create: () => Promise.reject(new Error("no merchant should be created")),
  close: async () => {}
}

describe("harness keys: its command line", () => {
  it("reads --merchants, --shards, --out and --webhook-url, and refuses what would leave a shard without a key", () => {
    expect(
      keysOptions([
        "--merchants",
        "5",
        "--shards",
        "3",
        "--out",
        "keys/",
        "--webhook-url",
        "http://hooks-{shard}.example:9000/"
      ])
    ).toEqual({
      command: "keys",
      merchants: 5,
      shards: 3,
      outDirectory: "keys/",
      webhookUrl: "http://hooks-{shard}.example:9000"
    })
    expect(keysOptions(["--merchants", "1", "--out", "k"])).toMatchObject({ shards: 1, webhookUrl: null })
    expect(errorOf(["--merchants", "2", "--shards", "3", "--out", "k"])).toBe(
      "keys: --merchants 2 for --shards 3 would leave shard 2/3 without a merchant: give at least one merchant per shard"
    )
    expect(errorOf(["--out", "k"])).toBe("keys: keys needs --merchants N: how many merchants to create")
    expect(errorOf(["--merchants", "3"])).toBe("keys: keys needs --out DIR: where the keys files go")
    expect(errorOf(["--merchants", "0", "--out", "k"])).toContain("--merchants must be a whole number from 1")
    expect(errorOf(["--merchants", "3", "--shards", "0", "--out", "k"])).toContain(
      "--shards must be a whole number from 1 to 10000"
    )
    expect(errorOf(["--merchants", "3", "--out", "k", "--webhook-url", "hooks.example"])).toContain(
      "--webhook-url must be a URL"
    )
    expect(errorOf(["--merchants", "3", "--out", "k", "--webhook-url", "http://u:p@hooks.example"])).toContain(
      "without query, fragment or credentials"
    )
    expect(errorOf(["--merchants", "3", "--out", "k", "--rate", "5"])).toContain("keys: Unrecognized flag: --rate")
    expect(errorOf(["--merchants", "3", "--out", "k", "--start-at", "2030-01-01T12:00:00Z"])).toContain(
      "keys: Unrecognized flag: --start-at"
    )
    expect(parseArguments(["keys", "--help"])).toMatchObject({ command: "help" })
  })

  it("deals merchant k to shard k mod N, at position floor(k / N) of its file, as sim:sweep deals seeds", () => {
    expect(dealMerchants(5, 3)).toEqual([[0, 3], [1, 4], [2]])
    expect(dealMerchants(20, 20).every((merchants) => merchants.length === 1)).toBe(true)
    expect(webhookUrlOf("http://hooks-{shard}.example:9000", 2, 1)).toBe("http://hooks-2.example:9000/m/1")
    expect(webhookUrlOf(null, 2, 1)).toBeNull()
  })

  it("refuses to run without DATABASE_URL, or over keys files already there, before creating anything", async () => {
    const { lines, io } = captured()
    expect(await makeKeys(keysOptions(["--merchants", "3", "--out", join(directory, "none")]), io, {}, unused)).toBe(2)
    expect(lines).toEqual([
      "harness keys: DATABASE_URL is not set: keys creates merchants in the target's database, as `payments merchant create` does, " +
      "so set DATABASE_URL to it (and RESPONSE_ENCRYPTION_KEY as the deployment has it)"
    ])
    const full = mkdtempSync(join(directory, "full-"))
    writeFileSync(join(full, "shard-1.keys"), "# shard 1/2\nsk_live_old\n")
    lines.length = 0
    expect(
      await makeKeys(keysOptions(["--merchants", "3", "--shards", "2", "--out", full]), io, {
        DATABASE_URL: "postgres://x@127.0.0.1:9/x"
      }, unused)
    ).toBe(2)
    expect(lines).toEqual([
      `harness keys: ${
        join(full, "shard-1.keys")
      } exists (1 of the 2 files): its keys would be lost; choose another --out or remove them`
    ])
    expect(readFileSync(join(full, "shard-1.keys"), "utf8")).toBe("# shard 1/2\nsk_live_old\n")
  })

  it("never shows the database's password", async () => {
    const { lines, io } = captured()
    let n = 0
    const fake: MerchantMaker = {
      create: async () => ({ merchantId: `mer_${n}`, apiKey: `sk_live_${n++}` }),
      close: async () => {}
    }
    const out = join(directory, "fake")
    expect(
      await makeKeys(keysOptions(["--merchants", "2", "--out", out]), io, {
        DATABASE_URL: "postgres://harness:s3cret@db.example:5432/payments"
      }, fake)
    ).toBe(0)
    expect(lines.join("\n")).toContain("2 created in postgres://harness@db.example:5432/payments")
    const text = readFileSync(join(out, "shard-0.keys"), "utf8")
    expect(text).toMatch(
      /^# shard 0\/1\n# 2 merchants made by npm run harness -- keys at .+ in postgres:\/\/harness@db\.example:5432\/payments\nsk_live_0\nsk_live_1\n$/
    )
    expect([...lines, text].join("\n")).not.toContain("s3cret")
  })
})

describe("harness keys against a database", () => {
  let databaseUrl: string
  let client: pg.Client
  beforeAll(async () => {
    databaseUrl = await freshDatabase("keys")
  })
  afterAll(() => client?.end())

  it(
    "creates the merchants through the service's Merchants service and writes one keys file per shard, each used whole by its shard",
    async () => {
      const out = join(directory, "made")
      const { lines, io } = captured()
      const code = await makeKeys(
        keysOptions([
          "--merchants",
          "5",
          "--shards",
          "3",
          "--out",
          out,
          "--webhook-url",
          "http://hooks-{shard}.example:9000"
        ]),
        io,
        { DATABASE_URL: databaseUrl, RESPONSE_ENCRYPTION_KEY: "ab".repeat(32) }
      )
      expect(code, lines.join("\n")).toBe(0)
      expect(readdirSync(out).sort()).toEqual(["shard-0.keys", "shard-1.keys", "shard-2.keys"])
      const files = [0, 1, 2].map((index) => parseKeyFile(readFileSync(join(out, `shard-${index}.keys`), "utf8"), "f"))
      expect(files.map((f) => [f.shard, f.keys.length])).toEqual([[{ index: 0, count: 3 }, 2], [
        { index: 1, count: 3 },
        2
      ], [{ index: 2, count: 3 }, 1]])
      // Secrets: readable by their owner only.
      expect(statSync(join(out, "shard-0.keys")).mode & 0o777).toBe(0o600)
      // Each shard takes its own file, whole, from the directory.
      expect(readKeyFile(out, { index: 1, count: 3 }).keys).toEqual(files[1]!.keys)
      expect(() => readKeyFile(join(out, "shard-1.keys"), { index: 0, count: 3 })).toThrow(
        "is the keys file of shard 1/3"
      )

      // Every key is a merchant's first key, with the webhook URL its shard's run registers for it.
      client = new pg.Client({ connectionString: databaseUrl })
      await client.connect()
      const owner = async (key: string) =>
        (await client.query<{ name: string; webhook_url: string | null }>(
          "SELECT m.name, m.webhook_url FROM api_keys k JOIN merchants m ON m.id = k.merchant_id WHERE k.key_hash = $1 AND k.status = 'active'",
          [hashSecret(key)]
        )).rows
      const owners = await Promise.all(files.map((f) => Promise.all(f.keys.map(owner))))
      expect(owners.map((shard) => shard.map((rows) => rows.map((row) => row.webhook_url)))).toEqual([
        [["http://hooks-0.example:9000/m/0"], ["http://hooks-0.example:9000/m/1"]],
        [["http://hooks-1.example:9000/m/0"], ["http://hooks-1.example:9000/m/1"]],
        [["http://hooks-2.example:9000/m/0"]]
      ])
      expect(owners[2]![0]![0]!.name).toMatch(/^harness .+ shard 2\/3 merchant 0$/)
      expect(Number((await client.query("SELECT count(*) AS n FROM merchants")).rows[0].n)).toBe(5)

      const summary = lines.join("\n")
      expect(summary).toMatch(/merchants\s+5 created in postgres:\/\//)
      expect(summary).toMatch(/shard 2\/3\s+1 key in .*shard-2\.keys/)
      expect(summary).toContain(`npm run harness -- --target URL --keys ${out} --shard I/3`)

      // Run again into the same directory: refused, the keys already there kept.
      const again = captured()
      expect(
        await makeKeys(keysOptions(["--merchants", "3", "--out", out]), again.io, { DATABASE_URL: databaseUrl }, unused)
      ).toBe(2)
    },
    120_000
  )
})
