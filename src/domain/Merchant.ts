export interface Merchant {
  readonly id: string
  readonly name: string
  readonly webhookUrl: string | null
  /**
   * The signing secret; null when the stored secret was sealed under an encryption key this
   * service no longer has (it signs nothing until the merchant rotates it).
   */
  readonly webhookSecret: string | null
  readonly createdAt: number
  readonly updatedAt: number
}

/** A merchant whose signing secret is known: one just created, or just rotated. */
export type MerchantWithSecret = Merchant & { readonly webhookSecret: string }

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
  readonly createdAt: number
  readonly lastUsedAt: number | null
  readonly revokedAt: number | null
}

export const apiKeySecretPrefix = "sk_live_"
export const webhookSecretPrefix = "whsec_"
/** Shown prefix of a key: enough to recognise it in a list, far too little to use it. */
export const displayPrefix = (secret: string) => secret.slice(0, apiKeySecretPrefix.length + 4)
