import { createHmac, timingSafeEqual } from "node:crypto"
import { idPrefixes } from "./Ids.ts"
import type { EventType, PaymentEvent, PaymentSnapshot } from "./Payment.ts"
import { isoText } from "./Time.ts"

/**
 * Webhook deliveries: the pure rules. Signatures, the retry schedule and the status a delivery
 * moves to after an attempt. No clock and no I/O here: times come in as arguments, in epoch
 * milliseconds.
 */

export const deliveryStatuses = ["pending", "retrying", "succeeded", "failed"] as const
export type DeliveryStatus = (typeof deliveryStatuses)[number]

export interface Attempt {
  readonly attempt: number
  readonly at: number
  readonly responseStatus: number | null
  readonly durationMs: number
  readonly error: string | null
  /**
   * Cut off: the instance holding the attempt stopped (killed, paused past its liveness, or stopped
   * in the middle) before it recorded an answer. The endpoint may or may not have received it. A cut
   * attempt is no failure: it schedules no retry; the delivery is sent again at once by the instance
   * that takes it over, as the next attempt. Absent on attempts recorded before cuts were.
   */
  readonly cut?: boolean
}

/** The error text of a cut attempt. */
export const cutAttemptError =
  "cut off: the instance sending this attempt stopped before it recorded an answer; sent again"

/**
 * `delivery` with a cut attempt recorded at `at` (see `Attempt.cut`): taken over from an instance
 * that held it and stopped. Its status and next attempt stay as they were: it is due now.
 */
export const cutAttempt = (delivery: Delivery, at: number): Delivery => {
  const attempts = delivery.attempts.slice()
  attempts.push({
    attempt: nextAttemptNumber(delivery),
    at,
    responseStatus: null,
    durationMs: 0,
    error: cutAttemptError,
    cut: true
  })
  return changed(delivery, {
    status: delivery.status,
    attempts,
    nextAttemptAt: delivery.nextAttemptAt,
    firstFailedAt: delivery.firstFailedAt,
    completedAt: delivery.completedAt
  })
}

export interface Delivery {
  readonly id: string
  readonly merchantId: string
  readonly eventId: string
  readonly eventType: EventType
  readonly url: string
  /** The exact body sent on every attempt (the signature covers these bytes). */
  readonly payload: string
  readonly status: DeliveryStatus
  readonly attempts: ReadonlyArray<Attempt>
  readonly nextAttemptAt: number | null
  /** When the first attempt failed: the retry schedule's offsets count from here. */
  readonly firstFailedAt: number | null
  readonly createdAt: number
  readonly completedAt: number | null
  /**
   * The payment whose events this endpoint must receive in order, and this event's place among
   * them: the delivery is attempted only when no earlier one of the same payment to the same URL
   * is still open (pending or retrying). Null for events outside that order (test events).
   */
  readonly order: DeliveryOrder | null
}

export interface DeliveryOrder {
  readonly paymentId: string
  readonly sequence: number
}

type PayloadSource = {
  readonly id: string
  readonly type: EventType
  readonly data: PaymentSnapshot
}

/**
 * The body merchants receive: the event exactly as `GET /transactions/:id/events` shows it, its
 * time (`createdAt`) given as the wire's ISO text.
 */
export const eventPayload = (event: PayloadSource, createdAt: string) =>
  JSON.stringify({ id: event.id, type: event.type, created_at: createdAt, data: event.data })

const eventIdPrefix = `${idPrefixes.event}_`

/**
 * The id of an event's delivery: `whd_` and the event id's random body. An event has one delivery
 * (CONTRACT section 8; a retry of a failed one re-opens it under the same id), so its id can name
 * the event: unique as event ids are, and as hard to guess (95 random bits; and a merchant only
 * ever reads its own deliveries, whose event ids it is sent anyway). A store keyed by delivery id
 * then refuses a second delivery of an event by that key alone, and no id is drawn per delivery.
 */
export const deliveryIdOf = (eventId: string) =>
  // Joined, not concatenated: one flat string, as a minted id is (a `+` leaves V8 a cons-string,
  // one more object and an indirection per delivery kept). An id without the event prefix (only
  // hand-made ids in tests) keeps its whole text.
  [idPrefixes.webhookDelivery, eventId.startsWith(eventIdPrefix) ? eventId.slice(eventIdPrefix.length) : eventId].join(
    "_"
  )

/** A fresh delivery for an event; the first attempt is due at once. */
export const newDelivery = (input: {
  readonly id: string
  readonly merchantId: string
  readonly url: string
  readonly event: Pick<PaymentEvent, "id" | "type">
  /** The body of every attempt (`eventPayload`). */
  readonly payload: string
  readonly now: number
  /** Delivered in order with the payment's other events (absent: unordered). */
  readonly order?: DeliveryOrder | null
}): Delivery => ({
  id: input.id,
  merchantId: input.merchantId,
  eventId: input.event.id,
  eventType: input.event.type,
  url: input.url,
  payload: input.payload,
  status: "pending",
  attempts: [],
  nextAttemptAt: input.now,
  firstFailedAt: null,
  createdAt: input.now,
  completedAt: null,
  order: input.order ?? null
})

// Signatures ------------------------------------------------------------------------------------

/** HMAC-SHA256 of "t." then the body, in hex. */
export const hmacHex = (secret: string, timestampSeconds: number, body: string) =>
  createHmac("sha256", secret).update(`${timestampSeconds}.`).update(body).digest("hex")

/**
 * `t=<unix seconds>,v1=<hex>[,v1=<hex>]`: one `v1` per active secret, the current one first
 * (during a rotation's grace period the previous secret signs too).
 */
export const signatureHeader = (secrets: ReadonlyArray<string>, timestampSeconds: number, body: string) => {
  let header = `t=${timestampSeconds}`
  for (const secret of secrets) header += `,v1=${hmacHex(secret, timestampSeconds, body)}`
  return header
}

/**
 * What a merchant's endpoint checks on each POST: the header's timestamp is within
 * `toleranceSeconds` of `nowSeconds` (a replayed old delivery fails), and one of its `v1`
 * signatures (any, during a secret rotation) is the HMAC-SHA256 of `t.body` with `secret`,
 * compared in constant time. `body` must be the raw bytes received, before any JSON parsing.
 */
export const verifyWebhookSignature = (
  secret: string,
  header: string | null | undefined,
  body: string,
  nowSeconds: number,
  toleranceSeconds = 300
): boolean => {
  if (typeof header !== "string" || header.length > 4096) return false
  let timestamp: number | null = null
  const signatures: Array<string> = []
  for (const part of header.split(",")) {
    const [name, value] = part.trim().split("=", 2)
    if (name === "t" && value !== undefined && /^\d{1,12}$/.test(value)) timestamp = Number(value)
    else if (name === "v1" && value !== undefined && /^[0-9a-f]{64}$/.test(value)) signatures.push(value)
  }
  if (timestamp === null || Math.abs(nowSeconds - timestamp) > toleranceSeconds) return false
  const expected = Buffer.from(hmacHex(secret, timestamp, body), "hex")
  return signatures.some((signature) => timingSafeEqual(Buffer.from(signature, "hex"), expected))
}

// Schedule --------------------------------------------------------------------------------------

/**
 * When the retry after `failedAttempts` failures is due: the schedule's offsets count from the
 * first failed attempt. `null` when the schedule is exhausted (the delivery has failed).
 */
export const retryAt = (
  firstFailedAt: number,
  failedAttempts: number,
  scheduleMs: ReadonlyArray<number>
): number | null => {
  const offset = scheduleMs[failedAttempts - 1]
  return offset === undefined ? null : firstFailedAt + offset
}

/** Every attempt time of a delivery that never succeeds, first attempt at `firstAttemptAt`. */
export const attemptTimes = (
  firstAttemptAt: number,
  scheduleMs: ReadonlyArray<number>
) => [firstAttemptAt, ...scheduleMs.map((offset) => firstAttemptAt + offset)]

export type AttemptOutcome =
  | { readonly _tag: "Answered"; readonly status: number; readonly durationMs: number; readonly snippet: string }
  | { readonly _tag: "Failed"; readonly error: string; readonly durationMs: number }

export const isSuccess = (outcome: AttemptOutcome) =>
  outcome._tag === "Answered" && outcome.status >= 200 && outcome.status < 300

const maxErrorLength = 200

/** The stored error text: a reason, never an endpoint's whole body. */
export const attemptError = (outcome: AttemptOutcome): string | null => {
  if (isSuccess(outcome)) return null
  if (outcome._tag === "Failed") return outcome.error.slice(0, maxErrorLength)
  const snippet = outcome.snippet.replace(/\s+/g, " ").trim()
  return `HTTP ${outcome.status}${snippet === "" ? "" : `: ${snippet}`}`.slice(0, maxErrorLength)
}

/** The number the next attempt carries (1 for the first). */
export const nextAttemptNumber = (delivery: Delivery) => delivery.attempts.length + 1

/** Does this delivery still have an attempt ahead of it (pending or retrying)? */
export const isOpen = (delivery: Delivery) => delivery.status === "pending" || delivery.status === "retrying"

/**
 * The delivery after an attempt started at `at`. A 2xx ends it (`succeeded`); a failure
 * schedules the next retry (`retrying`) or, with the schedule exhausted, ends it (`failed`).
 */
export const afterAttempt = (
  delivery: Delivery,
  at: number,
  outcome: AttemptOutcome,
  scheduleMs: ReadonlyArray<number>,
  completedAt: number
): { readonly delivery: Delivery; readonly attempt: Attempt } => {
  const attempt: Attempt = {
    attempt: nextAttemptNumber(delivery),
    at,
    responseStatus: outcome._tag === "Answered" ? outcome.status : null,
    durationMs: outcome.durationMs,
    error: attemptError(outcome)
  }
  // A copy with the attempt appended, as `concat(attempt)` makes it (which takes V8's slow path
  // for a non-array argument: ~10x the cost of a copy and a push).
  const attempts = delivery.attempts.slice()
  attempts.push(attempt)
  if (isSuccess(outcome)) {
    return {
      attempt,
      delivery: changed(delivery, {
        status: "succeeded",
        attempts,
        nextAttemptAt: null,
        firstFailedAt: delivery.firstFailedAt,
        completedAt
      })
    }
  }
  const firstFailedAt = delivery.firstFailedAt ?? at
  let failures = 0
  for (const a of attempts) if (a.error !== null && a.cut !== true && a.at >= firstFailedAt) failures++
  const next = retryAt(firstFailedAt, failures, scheduleMs)
  return {
    attempt,
    delivery: next === null
      ? changed(delivery, { status: "failed", attempts, nextAttemptAt: null, firstFailedAt, completedAt })
      : changed(delivery, { status: "retrying", attempts, nextAttemptAt: next, firstFailedAt, completedAt: null })
  }
}

/**
 * `delivery` with a new state: every field written out in `newDelivery`'s order (a spread with
 * overrides costs more, and gives objects of another shape to the code that reads them).
 */
const changed = (
  delivery: Delivery,
  { attempts, completedAt, firstFailedAt, nextAttemptAt, status }: Pick<
    Delivery,
    "status" | "attempts" | "nextAttemptAt" | "firstFailedAt" | "completedAt"
  >
): Delivery => ({
  id: delivery.id,
  merchantId: delivery.merchantId,
  eventId: delivery.eventId,
  eventType: delivery.eventType,
  url: delivery.url,
  payload: delivery.payload,
  status,
  attempts,
  nextAttemptAt,
  firstFailedAt,
  createdAt: delivery.createdAt,
  completedAt,
  order: delivery.order
})

/**
 * A manual resend of a finished delivery: one more attempt now. Its failure ends the delivery
 * `failed` again (the schedule is not restarted); a success ends it `succeeded`.
 */
export const resend = (delivery: Delivery, now: number): Delivery | null =>
  delivery.status !== "failed"
    ? null
    : { ...delivery, status: "retrying", nextAttemptAt: now, completedAt: null }

// Test events -----------------------------------------------------------------------------------

const sampleStatus: Record<EventType, PaymentSnapshot["status"]> = {
  "payment.initiated": "pending",
  "payment.authorized": "authorized",
  "payment.authorization_failed": "failed",
  "payment.fraud_passed": "authorized",
  "payment.fraud_blocked": "blocked",
  "payment.captured": "captured",
  "payment.settled": "settled",
  "payment.refunded": "refunded",
  "payment.partially_refunded": "captured",
  "payment.voided": "voided",
  "payment.dispute_opened": "settled",
  "payment.dispute_resolved": "settled",
  "payment.processor_outcome_unknown": "authorized",
  "payment.processor_operation_refused": "authorized",
  "payment.refund_failed": "captured"
}

/** A sample event of a type, for `POST /webhooks/test`; its payment id says it is a test. */
export const sampleEvent = (input: {
  readonly eventId: string
  readonly paymentId: string
  readonly merchantId: string
  readonly type: EventType
  readonly now: number
}) => {
  const status = sampleStatus[input.type]
  const amountCents = 1000
  const captured = ["captured", "settled", "refunded"].includes(status) ? amountCents : 0
  return {
    id: input.eventId,
    type: input.type,
    createdAt: input.now,
    data: {
      id: input.paymentId,
      merchant_id: input.merchantId,
      status,
      amount_cents: amountCents,
      currency: "USD",
      captured_amount_cents: captured,
      refunded_amount_cents: input.type === "payment.refunded"
        ? amountCents
        : input.type === "payment.partially_refunded"
        ? 250
        : 0,
      fraud_score: input.type === "payment.fraud_blocked" ? 0.93 : input.type === "payment.initiated" ? null : 0.12,
      failure_code: input.type === "payment.authorization_failed" ? "do_not_honor" : null,
      dispute: input.type === "payment.dispute_opened" || input.type === "payment.dispute_resolved"
        ? {
          status: input.type === "payment.dispute_opened" ? "open" : "won",
          reason: "product_not_received",
          amount_cents: amountCents,
          opened_at: isoText(input.now),
          resolved_at: input.type === "payment.dispute_opened" ? null : isoText(input.now)
        }
        : null
    } satisfies PaymentSnapshot
  }
}

// Status ----------------------------------------------------------------------------------------

export interface DeliveryStats {
  readonly counts: Readonly<Record<DeliveryStatus, number>>
  readonly attemptsLastDay: number
  readonly successfulAttemptsLastDay: number
  readonly lastSuccessAt: number | null
  readonly lastFailureAt: number | null
  /** Failed attempts since the last successful one. */
  readonly consecutiveFailures: number
}

export const successRate = (stats: DeliveryStats) =>
  stats.attemptsLastDay === 0 ? null : Math.round((stats.successfulAttemptsLastDay / stats.attemptsLastDay) * 1e6) / 1e6
