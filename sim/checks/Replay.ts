import { readFileSync, writeFileSync } from "node:fs"
import { resolve } from "node:path"
import { defaultOptions, isPlantedBug, plantedBugNames, type SimOptions } from "../engine/Options.ts"

/**
 * Replay files (`npm run sim -- --replay FILE`): one JSON object holding every option of a run, so
 * that the run replays exactly, plus what it was seen to break. `--shrink` writes them; anyone
 * may write one by hand. Loading is strict: a missing or unknown field or a bad value is refused
 * with a message naming it (the CLI exits 2), never filled in from defaults, since a replay
 * that silently differs from the recorded run would replay something else.
 *
 * ```json
 * { "format": "payments-sim-replay/1",
 *   "firstViolation": "refunds-within-capture",
 *   "options": { "seed": 7, "merchants": 1, "payments": 6, "hours": 1, "faults": {...}, "mix": {...}, ... } }
 * ```
 */
export const replayFormat = "payments-sim-replay/1"

export interface ReplayFile {
  readonly format: typeof replayFormat
  /** The first invariant the run violated when the file was written (null: it passed). */
  readonly firstViolation: string | null
  readonly options: SimOptions
  /** Optional, informative only: the scenario this one was shrunk from. */
  readonly shrunkFrom?: {
    readonly merchants: number
    readonly payments: number
    readonly hours: number
    readonly runs: number
  }
}

/** Options that are whole numbers, with their least value; every other number is a rate ≥ 0. */
const integers: Partial<Record<keyof SimOptions, number>> = {
  seed: 0,
  merchants: 1,
  payments: 0,
  hours: 1,
  dispatchers: 1,
  endpointConcurrency: 1,
  traceTail: 0
}

const describe = (
  value: unknown
) => (value === null
  ? "null"
  : Array.isArray(value)
  ? "an array"
  : typeof value === "object"
  ? "an object"
  : JSON.stringify(value))

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

/** Exactly the keys of `template`, each of the same kind: the errors name every bad field. */
const checkKeys = (where: string, value: Record<string, unknown>, template: object, errors: Array<string>) => {
  for (const key of Object.keys(value)) if (!Object.hasOwn(template, key)) errors.push(`${where}${key}: unknown field`)
  for (const key of Object.keys(template)) if (!Object.hasOwn(value, key)) errors.push(`${where}${key}: missing`)
}

const checkRates = (where: string, value: unknown, template: object, errors: Array<string>) => {
  if (!isObject(value)) {
    errors.push(`${where}: must be an object, got ${describe(value)}`)
    return
  }
  checkKeys(`${where}.`, value, template, errors)
  for (const [key, rate] of Object.entries(value)) {
    if (!Object.hasOwn(template, key)) continue
    if (typeof rate !== "number" || !Number.isFinite(rate) || rate < 0) {
      errors.push(`${where}.${key}: must be a finite number ≥ 0, got ${describe(rate)}`)
    }
  }
}

/** Validates a parsed options object; throws one error listing every problem. */
export const validateOptions = (value: unknown, where = "options"): SimOptions => {
  const errors: Array<string> = []
  if (!isObject(value)) throw new Error(`${where}: must be an object, got ${describe(value)}`)
  checkKeys(`${where}.`, value, defaultOptions, errors)
  for (const [key, field] of Object.entries(value) as Array<[keyof SimOptions, unknown]>) {
    if (!Object.hasOwn(defaultOptions, key)) continue
    const at = `${where}.${key}`
    if (key === "faults" || key === "mix") checkRates(at, field, defaultOptions[key], errors)
    else if (key === "plantedBug") {
      if (typeof field !== "string" || !isPlantedBug(field)) {
        errors.push(`${at}: must be one of ${plantedBugNames.join(", ")}; got ${describe(field)}`)
      }
    } else if (typeof defaultOptions[key] === "boolean") {
      if (typeof field !== "boolean") errors.push(`${at}: must be true or false, got ${describe(field)}`)
    } else if (typeof defaultOptions[key] === "number") {
      const least = integers[key]
      if (least !== undefined) {
        if (typeof field !== "number" || !Number.isSafeInteger(field) || field < least) {
          errors.push(`${at}: must be an integer ≥ ${least}, got ${describe(field)}`)
        }
      } else if (typeof field !== "number" || !Number.isFinite(field) || field < 0) {
        errors.push(`${at}: must be a finite number ≥ 0, got ${describe(field)}`)
      }
    } else if (JSON.stringify(field) !== JSON.stringify(defaultOptions[key])) {
      // A field of a kind this validator does not know yet: only its default value is accepted.
      errors.push(`${at}: unsupported value ${describe(field)}`)
    }
  }
  if (errors.length > 0) throw new Error(errors.join("\n"))
  return value as unknown as SimOptions
}

/** Parses and validates the text of a replay file. */
export const parseReplay = (text: string, source = "replay file"): ReplayFile => {
  let parsed: unknown
  try {
    parsed = JSON.parse(text)
  } catch (error) {
    throw new Error(`${source}: not JSON (${error instanceof Error ? error.message : String(error)})`, { cause: error })
  }
  if (!isObject(parsed)) {
    throw new Error(
      `${source}: must be a JSON object with "format", "firstViolation" and "options", got ${describe(parsed)}`
    )
  }
  const errors: Array<string> = []
  const known = ["format", "firstViolation", "options", "shrunkFrom"]
  for (const key of Object.keys(parsed)) {
    if (!known.includes(key)) errors.push(`${key}: unknown field (fields: ${known.join(", ")})`)
  }
  if (parsed.format !== replayFormat) errors.push(`format: must be "${replayFormat}", got ${describe(parsed.format)}`)
  if (
    !Object.hasOwn(parsed, "firstViolation") ||
    (parsed.firstViolation !== null && typeof parsed.firstViolation !== "string")
  ) {
    errors.push(`firstViolation: must be an invariant name or null, got ${describe(parsed.firstViolation)}`)
  }
  if (parsed.shrunkFrom !== undefined && !isObject(parsed.shrunkFrom)) {
    errors.push(`shrunkFrom: must be an object, got ${describe(parsed.shrunkFrom)}`)
  }
  let options: SimOptions | undefined
  if (!Object.hasOwn(parsed, "options")) errors.push("options: missing")
  else {
    try {
      options = validateOptions(parsed.options)
    } catch (error) {
      errors.push(...(error instanceof Error ? error.message : String(error)).split("\n"))
    }
  }
  if (errors.length > 0 || options === undefined) {
    throw new Error(`${source}: invalid replay file\n  ${errors.join("\n  ")}`)
  }
  return { ...(parsed as unknown as ReplayFile), options }
}

/**
 * A path as the user typed it: `npm run` starts scripts in the package directory, and records
 * the directory it was run from in `INIT_CWD`.
 */
export const userPath = (path: string): string => resolve(process.env.INIT_CWD ?? process.cwd(), path)

export const readReplayFile = (path: string): ReplayFile => {
  let text: string
  try {
    text = readFileSync(userPath(path), "utf8")
  } catch (error) {
    throw new Error(`--replay ${path}: cannot read (${error instanceof Error ? error.message : String(error)})`, {
      cause: error
    })
  }
  return parseReplay(text, path)
}

/** Writes a replay file (stable key order, so the same run writes the same bytes). */
export const writeReplayFile = (path: string, file: ReplayFile): void => {
  writeFileSync(userPath(path), `${JSON.stringify(file, null, 2)}\n`)
}

/** The command that replays a file. */
export const replayFileCommand = (path: string): string =>
  `npm run sim -- --replay ${/^[\w./-]+$/.test(path) ? path : `'${path.replaceAll("'", "'\\''")}'`}`
