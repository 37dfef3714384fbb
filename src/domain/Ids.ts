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

/** Encodes random bytes as an URL-safe base62 body; 16 bytes give about 95 bits of entropy in 22 characters. */
const alphabetCodes = Array.from(alphabet, (c) => c.charCodeAt(0))

/**
 * Encodes random bytes as an URL-safe base62 body; 16 bytes give about 95 bits of entropy in 22 characters.
 * Built from character codes in one call, so the id is one flat string: appending a character at
 * a time leaves a chain of V8 cons-strings (about 200 bytes an id) on every id never hashed.
 */
const encodeCodes = (bytes: Uint8Array, codes: Array<number>) => {
  for (const byte of bytes) codes.push(alphabetCodes[byte % 62]!)
  return String.fromCharCode.apply(null, codes)
}

export const encodeIdBody = (bytes: Uint8Array): string => encodeCodes(bytes, [])

/** Per kind, the character codes of `prefix_`. */
const prefixCodes = {} as Record<IdKind, ReadonlyArray<number>>
for (const [kind, prefix] of Object.entries(idPrefixes)) {
  prefixCodes[kind as IdKind] = [...Array.from(prefix, (c) => c.charCodeAt(0)), 95]
}

export const formatId = (kind: IdKind, bytes: Uint8Array): string => encodeCodes(bytes, prefixCodes[kind].slice())
