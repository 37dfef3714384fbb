import type { SqlError } from "@effect/sql/SqlError"
import { Effect } from "effect"
import type { Merchant } from "../domain/Merchant.ts"
import type { PaymentEvent } from "../domain/Payment.ts"
import { StoreUnavailable } from "./Store.ts"

/** Row mapping and error handling shared by the PostgreSQL adapters. */
export type Row = Record<string, any>

export const iso = (value: unknown): string => (value instanceof Date ? value.toISOString() : new Date(String(value)).toISOString())
export const isoOrNull = (value: unknown): string | null => (value === null || value === undefined ? null : iso(value))

/** Infrastructure failures leave the store as StoreUnavailable (503); broken invariants stay defects. */
export const run = <A>(effect: Effect.Effect<A, SqlError>): Effect.Effect<A, StoreUnavailable> =>
  Effect.catchTag(effect, "SqlError", (error) => {
    const code = (error.cause as { code?: string } | undefined)?.code
    // Constraint and trigger violations (class 23, P0001) are bugs, not outages.
    if (code !== undefined && (code.startsWith("23") || code === "P0001")) return Effect.die(error)
    return Effect.fail(new StoreUnavailable({ cause: error }))
  })

export const toMerchant = (r: Row): Merchant => ({
  id: r.id,
  name: r.name,
  webhookUrl: r.webhook_url,
  webhookSecret: r.webhook_secret,
  createdAt: iso(r.created_at),
  updatedAt: iso(r.updated_at)
})

export const toEvent = (r: Row): PaymentEvent => ({
  id: r.id,
  paymentId: r.payment_id,
  merchantId: r.merchant_id,
  type: r.type,
  sequence: r.sequence,
  data: r.data,
  createdAt: iso(r.created_at)
})
