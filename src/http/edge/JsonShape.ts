/**
 * Bounds on a JSON body's shape, checked on the raw text in one linear pass before anything
 * parses, decodes or formats it: no request of ours nests deeper than 4 levels or has more
 * than 50 members in one object (metadata), so the limits leave room and still keep a hostile
 * body (5,000 levels deep, a million array items) away from recursive code and error rendering.
 * The same pass refuses a key repeated in one object at any depth: JSON.parse would keep the
 * last one silently, and in a payments API ambiguous input is an error, not a guess.
 */
export const jsonLimits = { maxDepth: 16, maxMembers: 1_000 } as const

/** One open object or array of the scan: its member count, and for an object its keys so far. */
interface Level {
  members: number
  /** Whether this level is an object (its keys are checked for repeats). */
  isObject: boolean
  /** An object's keys so far: few in every request of ours, so a list scanned for repeats (a set from `manyKeys` on). */
  readonly keys: Array<string>
  /** The same keys once there are many of them. */
  keySet: Set<string> | null
  /** Inside an object, the next string is a key (after `{` or `,`). */
  expectingKey: boolean
  /** The last key of an object: the path to what is nested in it. */
  key: string | null
}

/** From this many keys in one object on, they are looked up in a set rather than scanned. */
const manyKeys = 16

/**
 * The scan's levels, kept from one scan to the next (a scan runs to its end synchronously, so
 * one stack serves them all): opening an object allocates nothing but its keys' text.
 */
const pool: Array<Level> = []

const open = (depth: number, isObject: boolean): Level => {
  let level = pool[depth]
  if (level === undefined) {
    level = { members: 1, isObject, keys: [], keySet: null, expectingKey: isObject, key: null }
    pool[depth] = level
    return level
  }
  level.members = 1
  level.isObject = isObject
  level.keys.length = 0
  level.keySet = null
  level.expectingKey = isObject
  level.key = null
  return level
}

/** Records `key` in the object `level`; false when the object has it already. */
const addKey = (level: Level, key: string): boolean => {
  const keySet = level.keySet
  if (keySet !== null) {
    if (keySet.has(key)) return false
    keySet.add(key)
    return true
  }
  const keys = level.keys
  for (let i = 0; i < keys.length; i++) if (keys[i] === key) return false
  keys.push(key)
  if (keys.length >= manyKeys) level.keySet = new Set(keys)
  return true
}

/** A key as the client meant it: escapes decoded (`"\u0061"` is `"a"`); the raw text when it does not decode. */
const decodeKey = (raw: string): string => {
  if (!raw.includes("\\")) return raw
  try {
    return JSON.parse(`"${raw}"`) as string
  } catch {
    return raw
  }
}

/** Where the object with a repeated key sits, as the 422 `param` would name it (`transaction`, `items.2`). */
const pathOf = (levels: ReadonlyArray<Level>, depth: number) =>
  levels.slice(0, depth - 1).map((level) => (!level.isObject ? String(level.members - 1) : level.key ?? "")).join(".")

const quoteKey = (key: string) => JSON.stringify(key.length > 100 ? `${key.slice(0, 100)}…` : key)

/** Why `text` is outside the limits or repeats a key, or null. Strings are skipped (brackets in them do not count). */
export const jsonShapeProblem = (
  text: string,
  limits: { readonly maxDepth: number; readonly maxMembers: number } = jsonLimits
): string | null => {
  // The open levels are pool[0 .. depth - 1].
  const levels = pool
  let depth = 0
  let inString = false
  let keyStart = -1
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (inString) {
      if (c === 0x5c) i++ // backslash: skip the escaped character
      else if (c === 0x22) {
        inString = false
        if (keyStart !== -1) {
          const level = levels[depth - 1]!
          const key = decodeKey(text.slice(keyStart, i))
          keyStart = -1
          if (!addKey(level, key)) {
            const path = pathOf(levels, depth)
            return `the key ${quoteKey(key)} appears more than once in ${
              path === "" ? "the same object" : `the object at ${path}`
            }.`
          }
          level.key = key
          level.expectingKey = false
        }
      }
      continue
    }
    if (c === 0x22) {
      inString = true
      if (depth > 0 && levels[depth - 1]!.expectingKey) keyStart = i + 1
    } else if (c === 0x7b || c === 0x5b) {
      if (depth >= limits.maxDepth) return `it is nested deeper than ${limits.maxDepth} levels.`
      open(depth++, c === 0x7b)
    } else if (c === 0x7d || c === 0x5d) {
      if (depth > 0) depth--
    } else if (c === 0x2c && depth > 0) {
      const level = levels[depth - 1]!
      level.members++
      if (level.members > limits.maxMembers) return `an object or array has more than ${limits.maxMembers} members.`
      if (level.isObject) level.expectingKey = true
    }
  }
  return null
}

/** A parse error as a short sentence: where, never the input itself. */
export const describeParseError = (error: unknown): string => {
  const position = /position (\d+)/.exec(error instanceof Error ? error.message : "")?.[1]
  return position === undefined ? "it could not be parsed." : `it could not be parsed (error at character ${position}).`
}
