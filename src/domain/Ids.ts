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
export const encodeIdBody = (bytes: Uint8Array): string => {
  let out = ""
  for (const byte of bytes) out += alphabet[byte % 62]
  return out
}

export const formatId = (kind: IdKind, bytes: Uint8Array): string => `${idPrefixes[kind]}_${encodeIdBody(bytes)}`
