import type { EventType, PaymentEvent, PaymentSnapshot } from "../../domain/Payment.ts"
import { ms, type Timestamp, timestamp } from "./Timestamps.ts"

/** A `payment_events` row as PostgreSQL returns it. */
export interface EventRow {
  readonly id: string
  readonly payment_id: string
  readonly merchant_id: string
  readonly type: EventType
  readonly sequence: number
  /** The payment's snapshot (jsonb): wire text's shape, its times as text. */
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

/** An event as its row's columns (a JSON row of the create path, or an insert). */
export const eventColumns = (e: PaymentEvent) => ({
  payment_id: e.paymentId,
  merchant_id: e.merchantId,
  id: e.id,
  type: e.type,
  sequence: e.sequence,
  data: e.data,
  created_at: timestamp(e.createdAt)
})
