import type { EventType } from "../../domain/Payment.ts"
import type { Attempt, Delivery, DeliveryStatus } from "../../domain/Webhook.ts"
import { isoAt } from "../../platform/IsoTime.ts"
import { ms, msOrNull, type Timestamp, timestamp, timestampOrNull } from "./Timestamps.ts"

/** A delivery's attempt as its `attempts` jsonb column keeps it: its `at` as ISO text. */
export type AttemptJson = Omit<Attempt, "at"> & { readonly at: string }

/** A `webhook_deliveries` row as PostgreSQL returns it (`row_to_json`, `json_agg` give the same, times as text). */
export interface DeliveryRow {
  readonly id: string
  readonly merchant_id: string
  readonly event_id: string
  readonly event_type: EventType
  readonly url: string
  readonly payload: string
  readonly status: DeliveryStatus
  readonly attempts: ReadonlyArray<AttemptJson>
  readonly next_attempt_at: Timestamp | null
  readonly first_failed_at: Timestamp | null
  readonly created_at: Timestamp
  readonly completed_at: Timestamp | null
  /** The order the delivery is in (null: unordered); `event_sequence` is a bigint (text) or int. */
  readonly payment_id: string | null
  readonly event_sequence: string | number | null
}

export const attemptsColumn = (attempts: ReadonlyArray<Attempt>): Array<AttemptJson> =>
  attempts.map((a) => ({ ...a, at: isoAt(a.at) }))
export const toAttempts = (attempts: ReadonlyArray<AttemptJson>): ReadonlyArray<Attempt> =>
  attempts.map((a) => ({ ...a, at: Date.parse(a.at) }))

export const toDelivery = (r: DeliveryRow): Delivery => ({
  id: r.id,
  merchantId: r.merchant_id,
  eventId: r.event_id,
  eventType: r.event_type,
  url: r.url,
  payload: r.payload,
  status: r.status,
  attempts: toAttempts(r.attempts),
  nextAttemptAt: msOrNull(r.next_attempt_at),
  firstFailedAt: msOrNull(r.first_failed_at),
  createdAt: ms(r.created_at),
  completedAt: msOrNull(r.completed_at),
  order: r.payment_id === null || r.payment_id === undefined
    ? null
    : { paymentId: r.payment_id, sequence: Number(r.event_sequence) }
})

/** A delivery as its row's columns (`attempts` as a value: the caller encodes it for its statement). */
export const deliveryColumns = (d: Delivery) => ({
  id: d.id,
  merchant_id: d.merchantId,
  event_id: d.eventId,
  event_type: d.eventType,
  url: d.url,
  payload: d.payload,
  status: d.status,
  attempts: attemptsColumn(d.attempts),
  next_attempt_at: timestampOrNull(d.nextAttemptAt),
  first_failed_at: timestampOrNull(d.firstFailedAt),
  created_at: timestamp(d.createdAt),
  completed_at: timestampOrNull(d.completedAt),
  payment_id: d.order?.paymentId ?? null,
  event_sequence: d.order?.sequence ?? null
})
