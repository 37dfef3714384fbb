/** Identifier prefixes (CONTRACT section 1). Ids are minted outside the domain and passed in. */
export const idPrefixes = {
  payment: "pay",
  event: "evt",
  merchant: "mer",
  apiKey: "key",
  fraudCase: "fc",
  ledgerEntry: "le",
  ledgerGroup: "lg",
  webhookDelivery: "whd",
  request: "req"
} as const
export type IdKind = keyof typeof idPrefixes

/** Mints a fresh identifier of a kind; supplied by the caller (random in production, seeded in simulation). */
export type MintId = (kind: IdKind) => string

const alphabet = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
const alphabetCodes = Array.from(alphabet, (c) => c.charCodeAt(0))

/**
 * An id's body begins with the millisecond it was minted, in this many lower-case base-36
 * characters (zero-padded: 36^9 ms reach the year 5138). Digits and lower-case letters compare in
 * the same order under PostgreSQL's "C" collation and the usual linguistic ones, so ids sort by
 * the time they were minted in every index, and the rows a create inserts land on the rightmost
 * leaves of each index keyed by an id (or by a payment's id first) whatever the table's size.
 */
export const idTimeChars = 9
/** Random characters after the time: one per byte (`byte % 62`, about 5.95 bits each), 83 bits in all. */
export const idRandomChars = 14

/**
 * Encodes bytes as URL-safe base62 characters, one a byte, appended to `codes`. Built from
 * character codes in one call, so the id is one flat string: appending a character at a time
 * leaves a chain of V8 cons-strings (about 200 bytes an id) on every id never hashed.
 */
const encodeCodes = (bytes: Uint8Array, codes: Array<number>) => {
  for (const byte of bytes) codes.push(alphabetCodes[byte % 62]!)
  return String.fromCharCode.apply(null, codes)
}

/** A random URL-safe body (secrets): one base62 character a byte, no time in it. */
export const encodeIdBody = (bytes: Uint8Array): string => encodeCodes(bytes, [])

/** Per kind, the character codes of `prefix_`. */
const prefixCodes = {} as Record<IdKind, ReadonlyArray<number>>
for (const [kind, prefix] of Object.entries(idPrefixes)) {
  prefixCodes[kind as IdKind] = [...Array.from(prefix, (c) => c.charCodeAt(0)), 95]
}

/** Appends `ms` (an integer, clamped to 0 … 36^9 - 1) as `idTimeChars` base-36 characters. */
const pushTime = (codes: Array<number>, ms: number) => {
  let rest = Math.min(Math.max(0, Math.floor(ms)), 36 ** idTimeChars - 1)
  const start = codes.length
  for (let i = 0; i < idTimeChars; i++) codes.push(0)
  for (let i = idTimeChars - 1; i >= 0; i--) {
    codes[start + i] = alphabetCodes[rest % 36]!
    rest = Math.floor(rest / 36)
  }
}

/**
 * `prefix_`, the time `now` in epoch ms (`idTimeChars` characters), then one random character per byte of
 * `bytes` (`idRandomChars` of them for the service's ids).
 */
export const formatId = (kind: IdKind, now: number, bytes: Uint8Array): string => {
  const codes = prefixCodes[kind].slice()
  pushTime(codes, now)
  return encodeCodes(bytes, codes)
}

/** The millisecond an id minted by `formatId` carries (NaN for any other string). */
export const idTimeMs = (id: string): number => {
  const body = id.slice(id.indexOf("_") + 1, id.indexOf("_") + 1 + idTimeChars)
  return /^[0-9a-z]+$/.test(body) && body.length === idTimeChars ? parseInt(body, 36) : Number.NaN
}
