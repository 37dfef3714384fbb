export interface Merchant {
  readonly id: string
  readonly name: string
  readonly webhookUrl: string | null
  readonly webhookSecret: string
  readonly createdAt: string
  readonly updatedAt: string
}

export type ApiKeyStatus = "active" | "revoked"

/** An API key record; only the SHA-256 hash of the secret is kept. */
export interface ApiKey {
  readonly id: string
  readonly merchantId: string
  readonly name: string
  readonly keyHash: string
  readonly prefix: string
  readonly lastFour: string
  readonly status: ApiKeyStatus
  readonly createdAt: string
  readonly lastUsedAt: string | null
  readonly revokedAt: string | null
}

export const apiKeySecretPrefix = "sk_live_"
export const webhookSecretPrefix = "whsec_"
/** Shown prefix of a key: enough to recognise it in a list, far too little to use it. */
export const displayPrefix = (secret: string) => secret.slice(0, apiKeySecretPrefix.length + 4)
