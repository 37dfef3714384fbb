/**
 * Bounds on a JSON body's shape, checked on the raw text in one linear pass before anything
 * parses, decodes or formats it: no request of ours nests deeper than 4 levels or has more
 * than 50 members in one object (metadata), so the limits leave room and still keep a hostile
 * body (5,000 levels deep, a million array items) away from recursive code and error rendering.
 */
export const jsonLimits = { maxDepth: 16, maxMembers: 1_000 } as const

/** Why `text` is outside the limits, or null. Strings are skipped (brackets in them do not count). */
export const jsonShapeProblem = (text: string, limits: { readonly maxDepth: number; readonly maxMembers: number } = jsonLimits): string | null => {
  const members: Array<number> = []
  let inString = false
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (inString) {
      if (c === 0x5c) i++ // backslash: skip the escaped character
      else if (c === 0x22) inString = false
      continue
    }
    if (c === 0x22) inString = true
    else if (c === 0x7b || c === 0x5b) {
      members.push(1)
      if (members.length > limits.maxDepth) return `it is nested deeper than ${limits.maxDepth} levels.`
    } else if (c === 0x7d || c === 0x5d) members.pop()
    else if (c === 0x2c && members.length > 0) {
      const count = members[members.length - 1]! + 1
      members[members.length - 1] = count
      if (count > limits.maxMembers) return `an object or array has more than ${limits.maxMembers} members.`
    }
  }
  return null
}

/** A parse error as a short sentence: where, never the input itself. */
export const describeParseError = (error: unknown): string => {
  const position = /position (\d+)/.exec(error instanceof Error ? error.message : "")?.[1]
  return position === undefined ? "it could not be parsed." : `it could not be parsed (error at character ${position}).`
}
