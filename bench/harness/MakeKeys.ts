/**
 * `npm run harness -- keys --merchants M --shards N --out DIR`: the merchants of a sharded run
 * against a target, made in the target's database as `payments merchant create` makes them
 * (./MerchantMaker.ts, with this process's DATABASE_URL and the service's other variables), and
 * dealt out to one keys file per shard: merchant k goes to shard k mod N (sim/engine/Shard.ts's
 * rule), at position floor(k / N) of its file. Each file is then used whole by its shard (KeyFile.ts).
 */
import { existsSync, mkdirSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { shardOf, shardText } from "../../sim/engine/Shard.ts"
import type { Environment } from "../../src/platform/Config.ts"
import type { KeysOptions } from "./Cli.ts"
import { keyFileName, keyFileText } from "./KeyFile.ts"
import { type MerchantMaker, merchantMaker } from "./MerchantMaker.ts"

export interface KeysIo {
  readonly log: (line: string) => void
  readonly out: (line: string) => void
}

/** The merchants (numbered 0 to merchants - 1) of each shard's file, in their order in it. */
export const dealMerchants = (merchants: number, shards: number): Array<ReadonlyArray<number>> => {
  const all = Array.from({ length: merchants }, (_, k) => k)
  return Array.from({ length: shards }, (_, index) => shardOf(all, { index, count: shards }))
}

/**
 * The webhook URL of merchant `position` of shard `index`'s file: what the scenario registers for
 * it in a run with `--webhook-url base` (its receiver's `/m/<position>`).
 */
export const webhookUrlOf = (base: string | null, index: number, position: number) =>
  base === null ? null : `${base.replaceAll("{shard}", String(index))}/m/${position}`

/** A database URL to show: without its password. */
const shown = (databaseUrl: string) => {
  try {
    const url = new URL(databaseUrl)
    url.password = ""
    return url.toString()
  } catch {
    return "DATABASE_URL"
  }
}

/** Makes the merchants and writes the files; the exit code (2: a bad invocation or environment, 1: the database failed). */
export const makeKeys = async (
  options: KeysOptions,
  io: KeysIo,
  environment: Environment,
  /** Tests may give their own. */
  maker: MerchantMaker = merchantMaker(environment)
): Promise<number> => {
  const databaseUrl = environment.DATABASE_URL ?? ""
  if (databaseUrl === "") {
    io.log(
      "harness keys: DATABASE_URL is not set: keys creates merchants in the target's database, as `payments merchant create` does, " +
        "so set DATABASE_URL to it (and RESPONSE_ENCRYPTION_KEY as the deployment has it)"
    )
    return 2
  }
  const files = dealMerchants(options.merchants, options.shards).map((merchants, index) => ({
    shard: { index, count: options.shards },
    merchants,
    path: join(options.outDirectory, keyFileName(index))
  }))
  const there = files.filter((file) => existsSync(file.path))
  if (there.length > 0) {
    io.log(
      `harness keys: ${
        there[0]!.path
      } exists (${there.length} of the ${files.length} files): its keys would be lost; choose another --out or remove them`
    )
    return 2
  }
  // Made before the merchants: a directory that cannot be, fails before any merchant exists.
  mkdirSync(options.outDirectory, { recursive: true })
  const madeAt = new Date().toISOString()
  const keys: Array<Array<string>> = files.map(() => [])
  let made = 0
  try {
    for (const file of files) {
      for (const [position] of file.merchants.entries()) {
        const label = `harness ${madeAt} shard ${shardText(file.shard)} merchant ${position}`
        const created = await maker.create(label, webhookUrlOf(options.webhookUrl, file.shard.index, position))
        keys[file.shard.index]!.push(created.apiKey)
        made++
      }
    }
  } catch (error) {
    io.log(
      `harness keys: creating merchant ${made + 1} of ${options.merchants} in ${shown(databaseUrl)} failed: ${
        error instanceof Error ? error.message : String(error)
      } (no keys file written)`
    )
    return 1
  } finally {
    await maker.close().catch(() => {})
  }
  for (const file of files) {
    const comments = [
      `${keys[file.shard.index]!.length} merchants made by npm run harness -- keys at ${madeAt} in ${
        shown(databaseUrl)
      }`
    ]
    writeFileSync(file.path, keyFileText(file.shard, keys[file.shard.index]!, comments), { mode: 0o600, flag: "wx" })
  }
  const rows: Array<readonly [string, string]> = [
    ["merchants", `${made} created in ${shown(databaseUrl)}`],
    [
      "webhook URLs",
      options.webhookUrl === null
        ? "none (a run registers its receiver's)"
        : `${webhookUrlOf(options.webhookUrl, 0, 0)} ... (${options.webhookUrl}/m/<j>)`
    ],
    ...files.map((file) => {
      const count = keys[file.shard.index]!.length
      return [`shard ${shardText(file.shard)}`, `${count} key${count === 1 ? "" : "s"} in ${file.path}`] as const
    }),
    ["run shard I with", `npm run harness -- --target URL --keys ${options.outDirectory} --shard I/${options.shards}`]
  ]
  const width = Math.max(...rows.map(([label]) => label.length))
  io.out(rows.map(([label, value]) => `  ${label.padEnd(width)}  ${value}`).join("\n"))
  return 0
}
