import type { Merchant } from "../../domain/Merchant.ts"
import type { SecretColumn } from "../../platform/Sealing.ts"
import { ms, type Timestamp, timestamp } from "./Timestamps.ts"

/** A `merchants` row as PostgreSQL returns it (its webhook secret as stored: sealed, or readable). */
export interface MerchantRow {
  readonly id: string
  readonly name: string
  readonly webhook_url: string | null
  readonly webhook_secret: string
  readonly created_at: Timestamp
  readonly updated_at: Timestamp
}

export const toMerchant = (r: MerchantRow, secrets: SecretColumn): Merchant => ({
  id: r.id,
  name: r.name,
  webhookUrl: r.webhook_url,
  webhookSecret: secrets.fromStored(r.id, r.webhook_secret),
  createdAt: ms(r.created_at),
  updatedAt: ms(r.updated_at)
})

/** A merchant as its row's columns, its secret stored as `secrets` keeps it. */
export const merchantColumns = (m: Merchant & { readonly webhookSecret: string }, secrets: SecretColumn) => ({
  id: m.id,
  name: m.name,
  webhook_url: m.webhookUrl,
  webhook_secret: secrets.toStored(m.id, m.webhookSecret),
  created_at: timestamp(m.createdAt),
  updated_at: timestamp(m.updatedAt)
})
