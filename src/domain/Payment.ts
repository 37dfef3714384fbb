import type { Dispute } from "./DisputeRecord.ts"
import type { Assessment, Explanation, FraudCase, Thresholds, Verdict } from "./Fraud.ts"
import { priority as fraudPriority, topContributions, verdict as fraudVerdict } from "./Fraud.ts"
import type { MintId } from "./Ids.ts"
import * as Ledger from "./Ledger.ts"
import type { Currency } from "./Money.ts"
import { processingFeeCents } from "./Money.ts"
import { isoText } from "./Time.ts"

export const paymentStatuses = [
  "pending",
  "authorized",
  "captured",
  "settled",
  "refunded",
  "voided",
  "blocked",
  "failed"
] as const
export type PaymentStatus = (typeof paymentStatuses)[number]

export const cardBrands = ["visa", "mastercard", "amex", "discover", "jcb", "diners", "unionpay"] as const
export type CardBrand = (typeof cardBrands)[number]
export type CaptureMethod = "automatic" | "manual"

export const eventTypes = [
  "payment.initiated",
  "payment.authorized",
  "payment.authorization_failed",
  "payment.fraud_passed",
  "payment.fraud_blocked",
  "payment.captured",
  "payment.settled",
  "payment.refunded",
  "payment.partially_refunded",
  "payment.voided",
  "payment.dispute_opened",
  "payment.dispute_resolved",
  "payment.processor_outcome_unknown",
  "payment.processor_operation_refused",
  "payment.refund_failed"
] as const
export type EventType = (typeof eventTypes)[number]

export interface Payment {
  readonly id: string
  readonly merchantId: string
  readonly status: PaymentStatus
  readonly amountCents: number
  readonly currency: Currency
  readonly capturedAmountCents: number
  readonly refundedAmountCents: number
  readonly feeCents: number
  readonly cardBrand: CardBrand
  readonly cardLastFour: string
  readonly cardToken: string
  readonly captureMethod: CaptureMethod
  readonly idempotencyKey: string | null
  readonly metadata: Readonly<Record<string, string>>
  readonly fraudScore: number | null
  readonly fraudVerdict: Verdict | null
  readonly fraudCaseId: string | null
  readonly failureCode: string | null
  readonly failureMessage: string | null
  readonly networkRiskSignal: number | null
  /** The processor's id for the payment's authorization (a Stripe PaymentIntent), when a remote processor gave one. */
  readonly processorReference: string | null
  /**
   * An operation the service owes a remote processor, or asked for and got no answer to
   * (`ProcessorPending`); null when the processor knows everything the books say.
   */
  readonly processorPending: ProcessorPending | null
  /**
   * The processor's ids of refunds it accepted and later failed (`refundFailed`), oldest first:
   * a failure it reports twice is applied once.
   */
  readonly failedRefunds: ReadonlyArray<string>
  readonly version: number
  readonly createdAt: number
  readonly updatedAt: number
  readonly capturedAt: number | null
  readonly settledAt: number | null
  /** The payment's dispute (one at most, as with card networks' chargebacks), or null (src/domain/Dispute.ts). */
  readonly dispute: Dispute | null
  /** The fraud model that screened the payment, and its largest contributions (the case keeps them all). */
  readonly fraudModelVersion: string | null
  readonly fraudExplanations: ReadonlyArray<Explanation> | null
}

/**
 * An operation at a remote processor the books wait on (`owingFor`). `owed`: recorded before it
 * is sent: a capture or refund, not booked until the processor answers; or the cancel of an
 * authorization, booked with the change that released it (fraud-blocked, voided, or no answer in
 * time). A change that loses a race to another instance's sends nothing. `unknown`: asked for
 * until ACQUIRER_TIMEOUT without an answer. Either way the payment stays in flight and its flow
 * asks again under the operation's idempotency key (`amountCents` and `refundedBeforeCents` name
 * it) until the processor answers.
 */
export interface ProcessorPending {
  readonly operation: "capture" | "refund" | "cancel"
  readonly outcome: "owed" | "unknown"
  /** The capture's total, the refund's amount; the amount held for a cancel. */
  readonly amountCents: number
  /** A refund's place among the payment's refunds (the refunded total before it, and how many had failed); else 0. */
  readonly refundedBeforeCents: number
  readonly failedRefundsBefore: number
  readonly since: number
}

/** The payment snapshot carried by every event (`data` of the webhook payload). */
export interface PaymentSnapshot {
  readonly id: string
  readonly merchant_id: string
  readonly status: PaymentStatus
  readonly amount_cents: number
  readonly currency: Currency
  readonly captured_amount_cents: number
  readonly refunded_amount_cents: number
  readonly fraud_score: number | null
  readonly failure_code: string | null
  readonly dispute: DisputeSnapshot | null
}

/** A dispute as the API shows it (the transaction record and event data). */
export interface DisputeSnapshot {
  readonly status: Dispute["status"]
  readonly reason: Dispute["reason"]
  readonly amount_cents: number
  readonly opened_at: string
  readonly resolved_at: string | null
}

export const disputeSnapshot = (dispute: Dispute | null): DisputeSnapshot | null =>
  dispute === null ? null : {
    status: dispute.status,
    reason: dispute.reason,
    amount_cents: dispute.amountCents,
    opened_at: isoText(dispute.openedAt),
    resolved_at: dispute.resolvedAt === null ? null : isoText(dispute.resolvedAt)
  }

export interface PaymentEvent {
  readonly id: string
  readonly paymentId: string
  readonly merchantId: string
  readonly type: EventType
  readonly sequence: number
  readonly data: PaymentSnapshot
  readonly createdAt: number
}

/** Everything one decision changes; the store persists it atomically or not at all. */
export interface Change {
  readonly payment: Payment
  readonly events: ReadonlyArray<PaymentEvent>
  readonly ledger: ReadonlyArray<Ledger.LedgerEntry>
  readonly fraudCase: FraudCase | null
}

export type Refusal =
  | { readonly _tag: "InvalidState"; readonly status: PaymentStatus; readonly message: string }
  | { readonly _tag: "InvalidAmount"; readonly param: "amount_cents"; readonly message: string }

export type Decision = { readonly ok: true; readonly change: Change } | {
  readonly ok: false
  readonly refusal: Refusal
}

export interface Context {
  /** The decision's time, in epoch milliseconds. */
  readonly now: number
  readonly mintId: MintId
}

export interface CreateInput {
  readonly merchantId: string
  readonly amountCents: number
  readonly currency: Currency
  readonly cardBrand: CardBrand
  readonly cardLastFour: string
  readonly cardToken: string
  readonly captureMethod: CaptureMethod
  readonly idempotencyKey: string | null
  readonly metadata: Readonly<Record<string, string>>
}

export const snapshot = (payment: Payment): PaymentSnapshot => ({
  id: payment.id,
  merchant_id: payment.merchantId,
  status: payment.status,
  amount_cents: payment.amountCents,
  currency: payment.currency,
  captured_amount_cents: payment.capturedAmountCents,
  refunded_amount_cents: payment.refundedAmountCents,
  fraud_score: payment.fraudScore,
  failure_code: payment.failureCode,
  dispute: disputeSnapshot(payment.dispute)
})

// ---------------------------------------------------------------------------------------------
// Building decisions

export interface Draft {
  readonly payment: Payment
  readonly event: EventType | null
  readonly postings: ReadonlyArray<Ledger.Posting>
  readonly fraudCase?: FraudCase | null
}

/**
 * The payment with its new version and time: every field written out, in the order `create`
 * writes them, so every payment shares one object shape (a spread here met a dozen shapes and
 * took V8's slow copy on every decision).
 */
const stamped = (p: Payment, version: number, updatedAt: number): Payment => ({
  id: p.id,
  merchantId: p.merchantId,
  status: p.status,
  amountCents: p.amountCents,
  currency: p.currency,
  capturedAmountCents: p.capturedAmountCents,
  refundedAmountCents: p.refundedAmountCents,
  feeCents: p.feeCents,
  cardBrand: p.cardBrand,
  cardLastFour: p.cardLastFour,
  cardToken: p.cardToken,
  captureMethod: p.captureMethod,
  idempotencyKey: p.idempotencyKey,
  metadata: p.metadata,
  fraudScore: p.fraudScore,
  fraudVerdict: p.fraudVerdict,
  fraudCaseId: p.fraudCaseId,
  failureCode: p.failureCode,
  failureMessage: p.failureMessage,
  networkRiskSignal: p.networkRiskSignal,
  processorReference: p.processorReference,
  processorPending: p.processorPending,
  failedRefunds: p.failedRefunds,
  version,
  createdAt: p.createdAt,
  updatedAt,
  capturedAt: p.capturedAt,
  settledAt: p.settledAt,
  dispute: p.dispute,
  fraudModelVersion: p.fraudModelVersion,
  fraudExplanations: p.fraudExplanations
})

/** The one place that stamps version, time, events and ledger entries onto a decision. */
export const decide = (before: Payment | null, draft: Draft, context: Context): Decision => {
  const payment = stamped(draft.payment, before === null ? 1 : before.version + 1, context.now)
  // A decision emits at most one event, so the new version doubles as its sequence number.
  const events: ReadonlyArray<PaymentEvent> = draft.event === null ? [] : [{
    id: context.mintId("event"),
    paymentId: payment.id,
    merchantId: payment.merchantId,
    type: draft.event,
    sequence: payment.version,
    data: snapshot(payment),
    createdAt: context.now
  }]
  const ledger = draft.postings.length === 0 ? [] : Ledger.group({
    paymentId: payment.id,
    merchantId: payment.merchantId,
    currency: payment.currency,
    now: context.now,
    mintId: context.mintId
  }, draft.postings)
  return { ok: true, change: { payment, events, ledger, fraudCase: draft.fraudCase ?? null } }
}

export const invalidState = (payment: Payment, action: string, detail?: string): Decision => ({
  ok: false,
  refusal: {
    _tag: "InvalidState",
    status: payment.status,
    message: `Cannot ${action} a payment in status '${payment.status}'${detail === undefined ? "" : `: ${detail}`}.`
  }
})

/** An amount is a whole number of minor units from 1 to `maximum`; NaN, fractions and infinities are refused. */
export const isAmountWithin = (amountCents: number, maximum: number) =>
  Number.isSafeInteger(amountCents) && amountCents >= 1 && amountCents <= maximum

export const invalidAmount = (message: string): Decision => ({
  ok: false,
  refusal: { _tag: "InvalidAmount", param: "amount_cents", message }
})

// ---------------------------------------------------------------------------------------------
// Transitions (CONTRACT section 6)

export const create = (input: CreateInput, context: Context): Decision =>
  decide(null, {
    payment: {
      id: context.mintId("payment"),
      merchantId: input.merchantId,
      status: "pending",
      amountCents: input.amountCents,
      currency: input.currency,
      capturedAmountCents: 0,
      refundedAmountCents: 0,
      feeCents: 0,
      cardBrand: input.cardBrand,
      cardLastFour: input.cardLastFour,
      cardToken: input.cardToken,
      captureMethod: input.captureMethod,
      idempotencyKey: input.idempotencyKey,
      metadata: input.metadata,
      fraudScore: null,
      fraudVerdict: null,
      fraudCaseId: null,
      failureCode: null,
      failureMessage: null,
      networkRiskSignal: null,
      processorReference: null,
      processorPending: null,
      failedRefunds: [],
      version: 0,
      createdAt: context.now,
      updatedAt: context.now,
      capturedAt: null,
      settledAt: null,
      dispute: null,
      fraudModelVersion: null,
      fraudExplanations: null
    },
    event: "payment.initiated",
    postings: []
  }, context)

export type AuthorizationOutcome =
  /** `reference`: the processor's id for the authorization, when a remote processor gave one. */
  | { readonly _tag: "Approved"; readonly networkRiskSignal: number; readonly reference?: string }
  | { readonly _tag: "Declined"; readonly code: string; readonly message: string }

/** The failure code of a payment whose authorization got no answer within ACQUIRER_TIMEOUT. */
export const networkTimeoutCode = "network_timeout"

/**
 * What a remote processor must have done before a change may commit (the ledger moves only on a
 * known outcome): capture what the change captures, refund what it refunds, cancel the
 * authorization it releases (fraud-blocked, voided) or may have left behind (no answer in time).
 * A decline holds nothing. `refundedBeforeCents` names the refund among the payment's refunds:
 * asked again after a lost answer, the same refund starts from the same refunded total.
 */
export type ProcessorOperation =
  | { readonly _tag: "Capture"; readonly amountCents: number }
  | {
    readonly _tag: "Refund"
    readonly amountCents: number
    readonly refundedBeforeCents: number
    readonly failedBefore: number
  }
  | { readonly _tag: "Cancel" }

export const processorOperation = (before: Payment, after: Payment): ProcessorOperation | null => {
  if (after.capturedAmountCents > before.capturedAmountCents) {
    return { _tag: "Capture", amountCents: after.capturedAmountCents }
  }
  if (after.refundedAmountCents > before.refundedAmountCents) {
    return {
      _tag: "Refund",
      amountCents: after.refundedAmountCents - before.refundedAmountCents,
      refundedBeforeCents: before.refundedAmountCents,
      failedBefore: before.failedRefunds.length
    }
  }
  if (after.status === before.status) return null
  const released = after.status === "blocked" || after.status === "voided"
  const unanswered = after.status === "failed" && after.failureCode === networkTimeoutCode
  return released || unanswered ? { _tag: "Cancel" } : null
}

/**
 * The change with the cancel it owes a remote processor (`ProcessorPending`, `owed`): the release
 * is booked first and the cancel sent once it committed, so a change that loses a race to another
 * instance's sends nothing, and a crash in between leaves the cancel owed in the record.
 */
export const owingCancel = (change: Change): Change => ({
  ...change,
  payment: {
    ...change.payment,
    processorPending: pendingOf({ _tag: "Cancel" }, change.payment, "owed", change.payment.updatedAt)
  }
})

/** The record of `operation` awaiting the processor; `operationOf` reads it back. */
const pendingOf = (
  operation: ProcessorOperation,
  payment: Payment,
  outcome: ProcessorPending["outcome"],
  since: number
): ProcessorPending => {
  switch (operation._tag) {
    case "Capture":
      return {
        operation: "capture",
        outcome,
        amountCents: operation.amountCents,
        refundedBeforeCents: 0,
        failedRefundsBefore: 0,
        since
      }
    case "Refund":
      return {
        operation: "refund",
        outcome,
        amountCents: operation.amountCents,
        refundedBeforeCents: operation.refundedBeforeCents,
        failedRefundsBefore: operation.failedBefore,
        since
      }
    case "Cancel":
      return {
        operation: "cancel",
        outcome,
        amountCents: payment.amountCents,
        refundedBeforeCents: 0,
        failedRefundsBefore: 0,
        since
      }
  }
}

/** The operation a payment awaits, to ask the processor for again under its key. */
export const operationOf = (pending: ProcessorPending): ProcessorOperation => {
  switch (pending.operation) {
    case "capture":
      return { _tag: "Capture", amountCents: pending.amountCents }
    case "refund":
      return {
        _tag: "Refund",
        amountCents: pending.amountCents,
        refundedBeforeCents: pending.refundedBeforeCents,
        failedBefore: pending.failedRefundsBefore
      }
    case "cancel":
      return { _tag: "Cancel" }
  }
}

/**
 * What commits first when `change` needs a remote processor (`processorOperation`): a capture or
 * refund is not booked yet; the record says it is owed (no event, no ledger), and once the
 * processor answers, `processorAnswered` books it (or `processorRefused` says it did not happen).
 * A release is booked at once with the cancel it owes (`owingCancel`). So whatever stops the
 * service between the processor's act and our books (a lost answer, a crash, an interrupted
 * request), the record says what to ask again, and the payment stays in flight until it is asked.
 */
export const owingFor = (before: Payment, change: Change, context: Context): Change => {
  // A change made while the payment awaits the processor records its answer (or is none of its business).
  if (before.processorPending !== null) return change
  const operation = processorOperation(before, change.payment)
  if (operation === null) return change
  if (operation._tag === "Cancel") return owingCancel(change)
  const owed = decide(before, {
    payment: { ...before, processorPending: pendingOf(operation, before, "owed", context.now) },
    event: null,
    postings: []
  }, context)
  return owed.ok ? owed.change : change
}

/** Whether the payment still awaits the very operation `asked` (a record decided again under a lock may have moved on). */
const stillAwaits = (payment: Payment, asked: ProcessorPending): boolean => {
  const pending = payment.processorPending
  return pending !== null && pending.operation === asked.operation && pending.amountCents === asked.amountCents &&
    pending.refundedBeforeCents === asked.refundedBeforeCents &&
    pending.failedRefundsBefore === asked.failedRefundsBefore &&
    pending.since === asked.since
}

const notAwaiting = (payment: Payment, asked: ProcessorPending): Decision =>
  invalidState(payment, "record the processor's answer for", `it no longer awaits that ${asked.operation}`)

/**
 * No answer came within ACQUIRER_TIMEOUT to the operation the payment owes (`asked`): the record
 * says so and the books do not move; the flow asks again under the same key until the processor
 * answers (`processorAnswered`, `processorRefused`).
 */
export const processorOutcomeUnknown = (payment: Payment, asked: ProcessorPending, context: Context): Decision => {
  if (!stillAwaits(payment, asked)) return notAwaiting(payment, asked)
  if (payment.processorPending!.outcome === "unknown") {
    return invalidState(payment, "record an unknown outcome for", "it is recorded already")
  }
  return decide(payment, {
    payment: { ...payment, processorPending: { ...asked, outcome: "unknown" } },
    event: "payment.processor_outcome_unknown",
    postings: []
  }, context)
}

/**
 * The processor did the operation the payment awaits (`asked`): a capture or refund is booked
 * now, with its usual event and ledger groups; a cancel's release was booked already, and only
 * the record changes.
 */
export const processorAnswered = (payment: Payment, asked: ProcessorPending, context: Context): Decision => {
  if (!stillAwaits(payment, asked)) return notAwaiting(payment, asked)
  const cleared: Payment = { ...payment, processorPending: null }
  switch (asked.operation) {
    case "capture":
      return capture(cleared, asked.amountCents, context)
    case "refund":
      return refund(cleared, asked.amountCents, context)
    case "cancel":
      return decide(payment, { payment: cleared, event: null, postings: [] }, context)
  }
}

/** The processor refused the operation the payment awaits (`asked`): it did not happen, and the books stay as they were. */
export const processorRefused = (payment: Payment, asked: ProcessorPending, context: Context): Decision => {
  if (!stillAwaits(payment, asked)) return notAwaiting(payment, asked)
  return decide(payment, {
    payment: { ...payment, processorPending: null },
    event: "payment.processor_operation_refused",
    postings: []
  }, context)
}

/** Refuses a merchant's command while an operation at the processor awaits its answer. */
const awaitingProcessor = (payment: Payment, action: string): Decision | null =>
  payment.processorPending === null ? null : invalidState(
    payment,
    action,
    `its ${payment.processorPending.operation} awaits the card processor's answer (processor_pending); try again once it has cleared`
  )

export const applyAuthorization = (payment: Payment, outcome: AuthorizationOutcome, context: Context): Decision => {
  if (payment.status !== "pending") return invalidState(payment, "record an authorization for")
  if (outcome._tag === "Declined") {
    return decide(payment, {
      payment: { ...payment, status: "failed", failureCode: outcome.code, failureMessage: outcome.message },
      event: "payment.authorization_failed",
      postings: []
    }, context)
  }
  return decide(payment, {
    payment: {
      ...payment,
      status: "authorized",
      networkRiskSignal: outcome.networkRiskSignal,
      processorReference: outcome.reference ?? null
    },
    event: "payment.authorized",
    postings: [Ledger.postings.hold(payment.amountCents)]
  }, context)
}

export const applyFraudAssessment = (
  payment: Payment,
  assessment: Assessment,
  thresholds: Thresholds,
  context: Context
): Decision => {
  if (payment.status !== "authorized" || payment.fraudVerdict !== null) {
    return invalidState(payment, "score", "it was already screened")
  }
  const verdict = fraudVerdict(assessment.score, thresholds)
  const scored: Payment = {
    ...payment,
    fraudScore: assessment.score,
    fraudVerdict: verdict,
    fraudModelVersion: assessment.modelVersion,
    fraudExplanations: assessment.explanations.slice(0, topContributions)
  }
  if (verdict === "passed") {
    return decide(payment, { payment: scored, event: "payment.fraud_passed", postings: [] }, context)
  }
  const fraudCase: FraudCase = {
    id: context.mintId("fraudCase"),
    paymentId: payment.id,
    merchantId: payment.merchantId,
    status: "open",
    priority: fraudPriority(assessment.score, payment.amountCents),
    riskScore: assessment.score,
    modelVersion: assessment.modelVersion,
    baseValue: assessment.baseValue,
    explanations: assessment.explanations,
    notes: null,
    reviewedAt: null,
    createdAt: context.now,
    updatedAt: context.now
  }
  if (verdict === "review") {
    return decide(
      payment,
      { payment: { ...scored, fraudCaseId: fraudCase.id }, event: null, postings: [], fraudCase },
      context
    )
  }
  return decide(payment, {
    payment: { ...scored, status: "blocked", fraudCaseId: fraudCase.id },
    event: "payment.fraud_blocked",
    postings: [Ledger.postings.release(payment.amountCents)],
    fraudCase
  }, context)
}

/** Captures `amountCents` (default: the whole authorization); the rest of the hold is released. */
export const capture = (payment: Payment, amountCents: number | undefined, context: Context): Decision => {
  if (payment.status !== "authorized") return invalidState(payment, "capture")
  const awaiting = awaitingProcessor(payment, "capture")
  if (awaiting !== null) return awaiting
  if (payment.fraudVerdict === null) return invalidState(payment, "capture", "fraud screening has not finished")
  if (payment.fraudVerdict === "review") return invalidState(payment, "capture", "it is held for fraud review")
  const captured = amountCents ?? payment.amountCents
  if (!isAmountWithin(captured, payment.amountCents)) {
    return invalidAmount(`amount_cents must be between 1 and the authorized amount (${payment.amountCents}).`)
  }
  const feeCents = processingFeeCents(captured, payment.currency)
  return decide(payment, {
    payment: { ...payment, status: "captured", capturedAmountCents: captured, feeCents, capturedAt: context.now },
    event: "payment.captured",
    postings: [
      Ledger.postings.release(payment.amountCents),
      Ledger.postings.capture(captured),
      Ledger.postings.fee(feeCents)
    ]
  }, context)
}

export const voidAuthorization = (payment: Payment, context: Context): Decision => {
  if (payment.status !== "authorized") return invalidState(payment, "void")
  const awaiting = awaitingProcessor(payment, "void")
  if (awaiting !== null) return awaiting
  return decide(payment, {
    payment: { ...payment, status: "voided" },
    event: "payment.voided",
    postings: [Ledger.postings.release(payment.amountCents)]
  }, context)
}

/**
 * Captured money still the merchant's to refund: not yet refunded, and not taken back by a lost
 * dispute (a chargeback already returned it to the cardholder).
 */
export const refundableCents = (payment: Payment): number =>
  payment.capturedAmountCents - payment.refundedAmountCents -
  (payment.dispute?.status === "lost" ? payment.dispute.amountCents : 0)

/** Refunds `amountCents` (default: the whole remainder). Fees are not returned. */
export const refund = (payment: Payment, amountCents: number | undefined, context: Context): Decision => {
  if (payment.status !== "captured" && payment.status !== "settled") return invalidState(payment, "refund")
  const awaiting = awaitingProcessor(payment, "refund")
  if (awaiting !== null) return awaiting
  const remainder = refundableCents(payment)
  const refunded = amountCents ?? remainder
  if (!isAmountWithin(refunded, remainder)) {
    return invalidAmount(`amount_cents must be between 1 and the refundable remainder (${remainder}).`)
  }
  // Money held for an open dispute is the network's to decide on: a refund may take only the rest.
  const disputed = payment.dispute?.status === "open" ? payment.dispute.amountCents : 0
  if (disputed > 0 && refunded > remainder - disputed) {
    return invalidState(
      payment,
      "refund",
      `${disputed} of its ${remainder} refundable are held for an open dispute; at most ${
        remainder - disputed
      } can be refunded until it is resolved`
    )
  }
  const full = refunded === remainder
  return decide(payment, {
    payment: {
      ...payment,
      status: full ? "refunded" : payment.status,
      refundedAmountCents: payment.refundedAmountCents + refunded
    },
    event: full ? "payment.refunded" : "payment.partially_refunded",
    postings: [Ledger.postings.refund(refunded, payment.settledAt !== null)]
  }, context)
}

/**
 * A refund the processor accepted and later failed (its notification, `failure.refundId`): the
 * money stays the merchant's. The refunded amount goes down by the refund's, the ledger takes it
 * back from the network to where the payment's money is now (available once settled, else
 * pending), and a fully refunded payment is `captured` (or `settled`) again. Refused when the
 * failure names more than the books have refunded, or was applied already.
 */
export const refundFailed = (
  payment: Payment,
  failure: { readonly refundId: string; readonly amountCents: number },
  context: Context
): Decision => {
  if (payment.failedRefunds.includes(failure.refundId)) {
    return invalidState(payment, "fail the refund of", `refund ${failure.refundId} has failed already`)
  }
  if (!isAmountWithin(failure.amountCents, payment.refundedAmountCents)) {
    return invalidAmount(
      `the failed refund's ${failure.amountCents} is more than the ${payment.refundedAmountCents} refunded.`
    )
  }
  const settled = payment.settledAt !== null
  const status: PaymentStatus = payment.status === "refunded" ? (settled ? "settled" : "captured") : payment.status
  return decide(payment, {
    payment: {
      ...payment,
      status,
      refundedAmountCents: payment.refundedAmountCents - failure.amountCents,
      failedRefunds: [...payment.failedRefunds, failure.refundId]
    },
    event: "payment.refund_failed",
    postings: [Ledger.postings.refundFailed(failure.amountCents, settled)]
  }, context)
}

/** True when the settlement run has something to do for this payment. */
export const isSettleable = (payment: Payment): boolean =>
  payment.settledAt === null &&
  (payment.status === "captured" || (payment.status === "refunded" && payment.capturedAt !== null))

/**
 * What the payment still has in `merchant_pending` before its settlement: captured − fee −
 * refunded, less a dispute's money that left pending (held in `merchant_reserved` while open,
 * gone to the network and the dispute fee when lost; a dispute won before settlement returned
 * it to pending). A dispute opened before settlement always took its money from pending, so
 * settlement never moves reserved money (docs/architecture.md, ledger).
 */
export const settlementNetCents = (payment: Payment): number => {
  const dispute = payment.dispute
  const disputed = dispute === null || dispute.status === "won" ? 0 : dispute.amountCents + dispute.feeCents
  return payment.capturedAmountCents - payment.feeCents - payment.refundedAmountCents - disputed
}

/**
 * Settlement moves what is still pending for the payment (`settlementNetCents`) to available.
 * A captured payment becomes `settled`; a payment fully refunded before the cut-off stays
 * `refunded` and only has its balance swept.
 */
export const settle = (payment: Payment, context: Context): Decision => {
  if (!isSettleable(payment)) return invalidState(payment, "settle")
  const netCents = settlementNetCents(payment)
  const becomesSettled = payment.status === "captured"
  return decide(payment, {
    payment: { ...payment, status: becomesSettled ? "settled" : payment.status, settledAt: context.now },
    event: becomesSettled ? "payment.settled" : null,
    postings: [Ledger.postings.settle(netCents)]
  }, context)
}

export type ReviewDecision = "confirmed_fraud" | "false_positive"

/**
 * Reviewing a case. A payment still held for review is released (`false_positive`) or blocked
 * (`confirmed_fraud`); a case whose payment has moved on (blocked, voided) is only labelled.
 */
export const review = (
  payment: Payment,
  fraudCase: FraudCase,
  decision: ReviewDecision,
  notes: string | null,
  context: Context
): Decision => {
  if (fraudCase.status !== "open") {
    return {
      ok: false,
      refusal: {
        _tag: "InvalidState",
        status: payment.status,
        message: `Cannot review a fraud case in status '${fraudCase.status}'.`
      }
    }
  }
  const labelled: FraudCase = { ...fraudCase, status: decision, notes, reviewedAt: context.now, updatedAt: context.now }
  const held = payment.status === "authorized" && payment.fraudVerdict === "review"
  if (!held) return decide(payment, { payment, event: null, postings: [], fraudCase: labelled }, context)
  if (decision === "false_positive") {
    return decide(payment, {
      payment: { ...payment, fraudVerdict: "passed" },
      event: "payment.fraud_passed",
      postings: [],
      fraudCase: labelled
    }, context)
  }
  return decide(payment, {
    payment: { ...payment, status: "blocked", fraudVerdict: "blocked" },
    event: "payment.fraud_blocked",
    postings: [Ledger.postings.release(payment.amountCents)],
    fraudCase: labelled
  }, context)
}

/**
 * What every change must satisfy against the record it was decided on: the version advances,
 * and each event's sequence lies in the new range. Stores assert it before committing.
 */
export const followsFrom = (before: Payment, change: Change): boolean =>
  change.payment.version > before.version &&
  change.payment.id === before.id &&
  change.events.every((e) => e.sequence > before.version && e.sequence <= change.payment.version)

// ---------------------------------------------------------------------------------------------
// Composition

/**
 * Applies transitions one after another, each to the payment the previous one left, and
 * merges them into one change (versions, events and ledger groups stay those of each step).
 * A step returns null when it does not apply; the first refusal refuses the whole.
 */
export const sequence = (
  payment: Payment,
  steps: ReadonlyArray<(current: Payment) => Decision | null>
): Decision => {
  let current = payment
  const events: Array<PaymentEvent> = []
  const ledger: Array<Ledger.LedgerEntry> = []
  let fraudCase: FraudCase | null = null
  let applied = 0
  for (const step of steps) {
    const decision = step(current)
    if (decision === null) continue
    if (!decision.ok) return decision
    current = decision.change.payment
    events.push(...decision.change.events)
    ledger.push(...decision.change.ledger)
    fraudCase = decision.change.fraudCase ?? fraudCase
    applied++
  }
  if (applied === 0) return invalidState(payment, "advance", "no step applies")
  return { ok: true, change: { payment: current, events, ledger, fraudCase } }
}

/** `first`'s change followed by `next`'s, made on the payment `first` left: one change, as `sequence` merges steps. */
export const followedBy = (first: Change, next: Change): Change => ({
  payment: next.payment,
  events: [...first.events, ...next.events],
  ledger: [...first.ledger, ...next.ledger],
  fraudCase: next.fraudCase ?? first.fraudCase
})

// ---------------------------------------------------------------------------------------------
// The automatic flow

/** `processor`: an operation at a remote processor awaits its answer (`ProcessorPending`), asked before anything else. */
export type Step = "processor" | "authorize" | "screen" | "capture"

/** What the orchestrator must do next for this payment, or null when the flow is finished. */
export const nextStep = (payment: Payment): Step | null => {
  if (payment.processorPending !== null) return "processor"
  if (payment.status === "pending") return "authorize"
  if (payment.status !== "authorized") return null
  if (payment.fraudVerdict === null) return "screen"
  if (payment.fraudVerdict === "passed" && payment.captureMethod === "automatic") return "capture"
  return null
}

/** What the flow's next decision is made from. */
export interface FlowInput {
  /** The network's answer, when it was asked. */
  readonly authorization: AuthorizationOutcome | null
  /** The fraud screening, when the payment was scored. */
  readonly screening: Assessment | null
  readonly thresholds: Thresholds
  /** A remote processor: the capture is a decision of its own (absent: false). */
  readonly captureApart?: boolean
}

/**
 * Everything of the flow up to its next wait, as one decision: the network's answer (if asked),
 * the fraud screening (if scored) and an automatic capture, each applied only where it is due.
 * With `captureApart` (a remote processor) a capture is not in the same decision as the
 * authorization or screening: those are booked first, and the capture, asked of the processor,
 * is the flow's next step (a capture whose answer is lost then leaves the authorization in the
 * books).
 */
export const advanceFlow = (payment: Payment, flow: FlowInput, context: Context): Decision => {
  const { authorization, screening, thresholds } = flow
  const captureNow = flow.captureApart !== true || (authorization === null && screening === null)
  return sequence(payment, [
    (p) => (authorization === null ? null : applyAuthorization(p, authorization, context)),
    (
      p
    ) => (screening === null || nextStep(p) !== "screen"
      ? null
      : applyFraudAssessment(p, screening, thresholds, context)),
    (p) => (!captureNow || nextStep(p) !== "capture" ? null : capture(p, undefined, context))
  ])
}
