/**
 * Keys files, for a run against a target the harness did not start (`--keys`). The rule: **one
 * file per shard, used whole.** A shard drives every merchant of its own file and no other, so no
 * merchant is driven by two shards (their laws would read each other's payments, and each would
 * point the merchant's webhooks at its own receiver). A keys file is split once, when it is made
 * (`harness keys` deals the merchants out to the shards' files), never again when it is read.
 *
 * The format: one API key a line; `#` starts a comment; a line `# shard I/N` says which shard the
 * file is for (`harness keys` writes it). A shard of several (N > 1) refuses a file that names
 * another shard or names none (the same file given to every shard is the mistake this catches);
 * a single run (`--shard 0/1`, the default) takes a file without that line.
 */
import { readFileSync, statSync } from "node:fs"
import { join } from "node:path"
import { parseShard, type Shard, shardText } from "../../sim/engine/Shard.ts"

/** A keys file the harness cannot use; its message says why and what to do. */
export class KeyFileProblem extends Error {}

/** The name of shard `index`'s file in a directory of keys files (`harness keys --out DIR`, `--keys DIR`). */
export const keyFileName = (index: number) => `shard-${index}.keys`

const shardLine = /^#\s*shard\s+(\S+)\s*$/

/** The text of shard `shard`'s keys file: its shard line, comments, then its keys. */
export const keyFileText = (shard: Shard, keys: ReadonlyArray<string>, comments: ReadonlyArray<string> = []) =>
  [`# shard ${shardText(shard)}`, ...comments.map((line) => `# ${line}`), ...keys].join("\n") + "\n"

/** The keys of a file's text, and the shard it names (null: none). */
export const parseKeyFile = (
  text: string,
  path: string
): { readonly keys: ReadonlyArray<string>; readonly shard: Shard | null } => {
  const keys: Array<string> = []
  const lineOf = new Map<string, number>()
  let shard: Shard | null = null
  for (const [index, raw] of text.split("\n").entries()) {
    const line = raw.trim()
    if (line === "") continue
    if (line.startsWith("#")) {
      const named = shardLine.exec(line)
      if (named === null) continue
      if (shard !== null) {
        throw new KeyFileProblem(`${path}: line ${index + 1} names a shard again (one '# shard I/N' line a file)`)
      }
      try {
        shard = parseShard(named[1]!, `${path}: line ${index + 1}'s shard`)
      } catch (error) {
        throw new KeyFileProblem(error instanceof Error ? error.message : String(error))
      }
      continue
    }
    if (/\s/.test(line)) {
      throw new KeyFileProblem(`${path}: line ${index + 1} is not one API key (one sk_live_... a line, # for comments)`)
    }
    const first = lineOf.get(line)
    if (first !== undefined) {
      throw new KeyFileProblem(
        `${path}: line ${index + 1} repeats the key of line ${first} (one merchant, driven once)`
      )
    }
    lineOf.set(line, index + 1)
    keys.push(line)
  }
  return { keys, shard }
}

/** `--keys PATH` for shard `shard`: PATH itself, or PATH/shard-I.keys when PATH is a directory. */
export const keyFilePath = (path: string, shard: Shard) => {
  let directory = false
  try {
    directory = statSync(path).isDirectory()
  } catch {
    // Not there: reading it says so.
  }
  return directory ? join(path, keyFileName(shard.index)) : path
}

/**
 * The keys shard `shard` drives: every key of its file (`--keys`, a file or a directory of
 * `harness keys`'s files), after checking the file is this shard's and holds a key.
 */
export const readKeyFile = (
  path: string,
  shard: Shard
): { readonly path: string; readonly keys: ReadonlyArray<string> } => {
  const file = keyFilePath(path, shard)
  const me = shardText(shard)
  let text: string
  try {
    text = readFileSync(file, "utf8")
  } catch (error) {
    const why = (error as NodeJS.ErrnoException).code === "ENOENT"
      ? "does not exist"
      : `cannot be read (${error instanceof Error ? error.message : String(error)})`
    throw new KeyFileProblem(
      `--keys: ${file}, the keys file of shard ${me}, ${why} (npm run harness -- keys --shards ${shard.count} --out DIR makes one per shard)`
    )
  }
  const { keys, shard: named } = parseKeyFile(text, file)
  if (named !== null && (named.index !== shard.index || named.count !== shard.count)) {
    throw new KeyFileProblem(
      `--keys: ${file} is the keys file of shard ${shardText(named)} (its line '# shard ${
        shardText(named)
      }'), not of --shard ${me}: each shard drives the merchants of its own file`
    )
  }
  if (named === null && shard.count > 1) {
    throw new KeyFileProblem(
      `--keys: ${file} names no shard, and --shard ${me} is one of ${shard.count}: each shard drives every merchant of its own file, so the file says which shard it is for ` +
        `(a line '# shard ${me}'; npm run harness -- keys --shards ${shard.count} writes them)`
    )
  }
  if (keys.length === 0) {
    throw new KeyFileProblem(
      `--keys: ${file} holds no API key for shard ${me} (one sk_live_... a line): this shard would drive no merchant`
    )
  }
  return { path: file, keys }
}
