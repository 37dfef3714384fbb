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
  readonly keys: Set<string> | null
  /** Inside an object, the next string is a key (after `{` or `,`). */
  expectingKey: boolean
  /** The last key of an object: the path to what is nested in it. */
  key: string | null
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
const pathOf = (levels: ReadonlyArray<Level>) =>
  levels.slice(0, -1).map((level) => (level.keys === null ? String(level.members - 1) : level.key ?? "")).join(".")

const quoteKey = (key: string) => JSON.stringify(key.length > 100 ? `${key.slice(0, 100)}…` : key)

/** Why `text` is outside the limits or repeats a key, or null. Strings are skipped (brackets in them do not count). */
export const jsonShapeProblem = (text: string, limits: { readonly maxDepth: number; readonly maxMembers: number } = jsonLimits): string | null => {
  const levels: Array<Level> = []
  let inString = false
  let keyStart = -1
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (inString) {
      if (c === 0x5c) i++ // backslash: skip the escaped character
      else if (c === 0x22) {
        inString = false
        if (keyStart !== -1) {
          const level = levels[levels.length - 1]!
          const key = decodeKey(text.slice(keyStart, i))
          keyStart = -1
          if (level.keys!.has(key)) {
            const path = pathOf(levels)
            return `the key ${quoteKey(key)} appears more than once in ${path === "" ? "the same object" : `the object at ${path}`}.`
          }
          level.keys!.add(key)
          level.key = key
          level.expectingKey = false
        }
      }
      continue
    }
    if (c === 0x22) {
      inString = true
      const level = levels[levels.length - 1]
      if (level !== undefined && level.expectingKey) keyStart = i + 1
    } else if (c === 0x7b || c === 0x5b) {
      const isObject = c === 0x7b
      levels.push({ members: 1, keys: isObject ? new Set() : null, expectingKey: isObject, key: null })
      if (levels.length > limits.maxDepth) return `it is nested deeper than ${limits.maxDepth} levels.`
    } else if (c === 0x7d || c === 0x5d) levels.pop()
    else if (c === 0x2c && levels.length > 0) {
      const level = levels[levels.length - 1]!
      level.members++
      if (level.members > limits.maxMembers) return `an object or array has more than ${limits.maxMembers} members.`
      if (level.keys !== null) level.expectingKey = true
    }
  }
  return null
}

/** A parse error as a short sentence: where, never the input itself. */
export const describeParseError = (error: unknown): string => {
  const position = /position (\d+)/.exec(error instanceof Error ? error.message : "")?.[1]
  return position === undefined ? "it could not be parsed." : `it could not be parsed (error at character ${position}).`
}
