import { createCipheriv, createDecipheriv, randomBytes } from "node:crypto"

/**
 * Stored idempotent responses that carry a secret (an API key's `sk_live_...`, a webhook signing
 * secret `whsec_...`) are sealed with AES-256-GCM before they reach the database, so a dump or a
 * backup never holds a live secret in clear while a replay still answers the first response
 * byte for byte. The key comes from `RESPONSE_ENCRYPTION_KEY` (or `.data/` for the embedded
 * database); see docs/api.md, "Secrets at rest".
 */

const prefix = "sealed:v1:"
const secretPattern = /sk_live_|whsec_/

export const carriesSecret = (body: string) => secretPattern.test(body)
export const isSealed = (stored: string) => stored.startsWith(prefix)

/** 32 bytes from 64 hex characters, or null. */
export const parseKey = (hex: string): Buffer | null => (/^[0-9a-fA-F]{64}$/.test(hex) ? Buffer.from(hex, "hex") : null)

export const newKeyHex = () => randomBytes(32).toString("hex")

export const seal = (key: Buffer, text: string): string => {
  const iv = randomBytes(12)
  const cipher = createCipheriv("aes-256-gcm", key, iv)
  const sealed = Buffer.concat([cipher.update(text, "utf8"), cipher.final()])
  return prefix + Buffer.concat([iv, cipher.getAuthTag(), sealed]).toString("base64")
}

/** The text, or null when it cannot be opened with this key (another key, or tampered). */
export const unseal = (key: Buffer, stored: string): string | null => {
  try {
    const bytes = Buffer.from(stored.slice(prefix.length), "base64")
    const decipher = createDecipheriv("aes-256-gcm", key, bytes.subarray(0, 12))
    decipher.setAuthTag(bytes.subarray(12, 28))
    return Buffer.concat([decipher.update(bytes.subarray(28)), decipher.final()]).toString("utf8")
  } catch {
    return null
  }
}

/** Used when no key is configured and none is kept in `.data/`: this process only. */
let processKey: Buffer | null = null
export const processLocalKey = () => (processKey ??= randomBytes(32))
