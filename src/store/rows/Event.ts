import type { EventType, PaymentEvent, PaymentSnapshot } from "../../domain/Payment.ts"
import { ms, type Timestamp, timestamp } from "./Timestamps.ts"

/** A `payment_events` row as the store's reads return it (`eventSelect`). */
export interface EventRow {
  readonly id: string
  readonly payment_id: string
  /** The payment's merchant (the row does not repeat it). */
  readonly merchant_id: string
  readonly type: EventType
  readonly sequence: number
  /** The payment's snapshot (jsonb, its id and merchant put back): wire text's shape, its times as text. */
  readonly data: PaymentSnapshot
  readonly created_at: Timestamp
}

export const toEvent = (r: EventRow): PaymentEvent => ({
  id: r.id,
  paymentId: r.payment_id,
  merchantId: r.merchant_id,
  type: r.type,
  sequence: r.sequence,
  data: r.data,
  createdAt: ms(r.created_at)
})

/** A snapshot without what an event's row names already. */
export type StoredSnapshot = Omit<PaymentSnapshot, "id" | "merchant_id">

/**
 * A snapshot as an event's row keeps it: without the payment's id and merchant, which the row
 * names already (its key, and its payment's merchant); a read puts them back (`eventSelect`).
 * Every other field is written out, so a field the snapshot gains fails to compile here until it
 * is kept too.
 */
export const storedSnapshot = (s: PaymentSnapshot): StoredSnapshot => ({
  status: s.status,
  amount_cents: s.amount_cents,
  currency: s.currency,
  captured_amount_cents: s.captured_amount_cents,
  refunded_amount_cents: s.refunded_amount_cents,
  fraud_score: s.fraud_score,
  failure_code: s.failure_code,
  dispute: s.dispute
})

/**
 * The columns of an `EventRow` from `payment_events e` and an expression for its merchant. The
 * snapshot's id and merchant go in front of what the row keeps: jsonb orders its keys itself, so
 * the value is the one the snapshot had whole (a row written before carries them already).
 */
export const eventSelect = (merchant: string) =>
  `e.id, e.payment_id, ${merchant} AS merchant_id, e.type, e.sequence,
  jsonb_build_object('id', e.payment_id, 'merchant_id', ${merchant}) || e.data AS data, e.created_at`

/** An event as its row's columns (a JSON row of the create path, or an insert). */
export const eventColumns = (e: PaymentEvent) => ({
  payment_id: e.paymentId,
  id: e.id,
  type: e.type,
  sequence: e.sequence,
  data: storedSnapshot(e.data),
  created_at: timestamp(e.createdAt)
})
