import type { ApiKey, ApiKeyStatus } from "../../domain/Merchant.ts"
import { ms, msOrNull, type Timestamp, timestamp, timestampOrNull } from "./Timestamps.ts"

/** An `api_keys` row as PostgreSQL returns it. */
export interface ApiKeyRow {
  readonly id: string
  readonly merchant_id: string
  readonly name: string
  readonly key_hash: string
  readonly prefix: string
  readonly last_four: string
  readonly status: ApiKeyStatus
  readonly created_at: Timestamp
  readonly last_used_at: Timestamp | null
  readonly revoked_at: Timestamp | null
}

export const toApiKey = (r: ApiKeyRow): ApiKey => ({
  id: r.id,
  merchantId: r.merchant_id,
  name: r.name,
  keyHash: r.key_hash,
  prefix: r.prefix,
  lastFour: r.last_four,
  status: r.status,
  createdAt: ms(r.created_at),
  lastUsedAt: msOrNull(r.last_used_at),
  revokedAt: msOrNull(r.revoked_at)
})

/** A key as its row's columns. */
export const apiKeyColumns = (k: ApiKey) => ({
  id: k.id,
  merchant_id: k.merchantId,
  name: k.name,
  key_hash: k.keyHash,
  prefix: k.prefix,
  last_four: k.lastFour,
  status: k.status,
  created_at: timestamp(k.createdAt),
  last_used_at: timestampOrNull(k.lastUsedAt),
  revoked_at: timestampOrNull(k.revokedAt)
})
