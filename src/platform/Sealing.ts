import { Redacted } from "effect"
import { createCipheriv, createDecipheriv, randomBytes } from "node:crypto"

/**
 * Stored idempotent responses that carry a secret (an API key's `sk_live_...`, a webhook signing
 * secret `whsec_...`) are sealed with AES-256-GCM before they reach the database, so a dump or a
 * backup never holds a live secret in clear while a replay still answers the first response
 * byte for byte. The same key seals the merchants' webhook signing secrets (`SecretColumn`
 * below). The key comes from `RESPONSE_ENCRYPTION_KEY` (or `.data/` for the embedded database);
 * see docs/api.md, "Secrets at rest", and docs/operations.md.
 */

export const sealedPrefix = "sealed:v1:"
const secretPattern = /sk_live_|whsec_/

export const carriesSecret = (body: string) => secretPattern.test(body)
export const isSealed = (stored: string) => stored.startsWith(sealedPrefix)

/** 32 bytes from 64 hex characters, or null. */
export const parseKey = (hex: string): Buffer | null => (/^[0-9a-fA-F]{64}$/.test(hex) ? Buffer.from(hex, "hex") : null)

/** The durable key a configuration holds (RESPONSE_ENCRYPTION_KEY, or the embedded mode's key in `.data/`); null without one. */
export const configuredKey = (
  config: { readonly responseEncryptionKey: Redacted.Redacted<string> | null }
): Buffer | null =>
  config.responseEncryptionKey === null ? null : parseKey(Redacted.value(config.responseEncryptionKey))

export const newKeyHex = () => randomBytes(32).toString("hex")

/**
 * `context`, when given, is authenticated with the text (GCM associated data): the sealed value
 * opens only under the same context, so it cannot be moved to another record and opened there.
 */
export const seal = (key: Buffer, text: string, context?: string): string => {
  const iv = randomBytes(12)
  const cipher = createCipheriv("aes-256-gcm", key, iv)
  if (context !== undefined) cipher.setAAD(Buffer.from(context, "utf8"))
  const sealed = Buffer.concat([cipher.update(text, "utf8"), cipher.final()])
  return sealedPrefix + Buffer.concat([iv, cipher.getAuthTag(), sealed]).toString("base64")
}

/** The text, or null when it cannot be opened with this key and context (another key or record, or tampered). */
export const unseal = (key: Buffer, stored: string, context?: string): string | null => {
  try {
    const bytes = Buffer.from(stored.slice(sealedPrefix.length), "base64")
    const decipher = createDecipheriv("aes-256-gcm", key, bytes.subarray(0, 12))
    if (context !== undefined) decipher.setAAD(Buffer.from(context, "utf8"))
    decipher.setAuthTag(bytes.subarray(12, 28))
    return Buffer.concat([decipher.update(bytes.subarray(28)), decipher.final()]).toString("utf8")
  } catch {
    return null
  }
}

/** Used when no key is configured and none is kept in `.data/`: this process only. */
let processKey: Buffer | null = null
export const processLocalKey = () => (processKey ??= randomBytes(32))

/**
 * A merchant's webhook signing secret as PostgreSQL keeps it (`merchants.webhook_secret` and
 * `previous_webhook_secret`): sealed under the response encryption key and bound to the
 * merchant's id, so a copy of the database alone holds no secret that signs, and a sealed secret
 * copied into another merchant's row does not open there. Reads accept plaintext too (rows written
 * before sealing, or by a process without a durable key), and the store seals those at start.
 *
 * Opened secrets are cached (each delivery attempt and each authenticated request reads its
 * merchant's secret): keyed by the sealed text, so a rotation, which writes a new sealed text, is
 * never answered with the old secret; bounded, the oldest entry leaving first.
 */
export interface SecretColumn {
  /** False without a durable key: secrets are then written readable (docs/operations.md). */
  readonly sealing: boolean
  readonly toStored: (merchantId: string, secret: string) => string
  /** The secret, or null when it was sealed under another key (or for another merchant). */
  readonly fromStored: (merchantId: string, stored: string) => string | null
  /** How many opened secrets the cache holds (at most its capacity). */
  readonly cachedCount: () => number
}

const secretContext = (merchantId: string) => `merchants.webhook_secret:${merchantId}`

export const makeSecretColumn = (key: Buffer | null, capacity = 10_000): SecretColumn => {
  const opened = new Map<string, { readonly merchantId: string; readonly secret: string }>()
  const remember = (stored: string, merchantId: string, secret: string) => {
    if (opened.size >= capacity) opened.delete(opened.keys().next().value!)
    opened.set(stored, { merchantId, secret })
  }
  return {
    sealing: key !== null,
    toStored: (merchantId, secret) => {
      if (key === null) return secret
      const stored = seal(key, secret, secretContext(merchantId))
      remember(stored, merchantId, secret)
      return stored
    },
    fromStored: (merchantId, stored) => {
      if (!isSealed(stored)) return stored
      const hit = opened.get(stored)
      if (hit !== undefined) return hit.merchantId === merchantId ? hit.secret : null
      if (key === null) return null
      const secret = unseal(key, stored, secretContext(merchantId))
      if (secret !== null) remember(stored, merchantId, secret)
      return secret
    },
    cachedCount: () => opened.size
  }
}
