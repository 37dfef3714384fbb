import type { Dispute, DisputeReason } from "./DisputeRecord.ts"
import * as Ledger from "./Ledger.ts"
import { disputeFeeCents } from "./Money.ts"
import type { Context, Decision, Payment } from "./Payment.ts"
import { decide, invalidAmount, invalidState, isAmountWithin, refundableCents } from "./Payment.ts"
export { type Dispute, type DisputeReason, disputeReasons, type DisputeStatus } from "./DisputeRecord.ts"

/**
 * Disputes (chargebacks) come from the acquirer, never from the API (CONTRACT section 6): the
 * network tells us that a cardholder disputes a captured payment, and later how the dispute
 * ended. Each notification names the acquirer's dispute id; applying one is idempotent on it.
 *
 * A payment has at most one dispute. Opening it moves the disputed amount from the merchant's
 * money (available once settled, else pending) to `merchant_reserved`; `won` returns it to where
 * the payment's money is then; `lost` gives it to the network (`card_network`) and charges the
 * dispute fee of the currency (`disputeFeeCents`).
 */
export type DisputeOutcome = "won" | "lost"

export type DisputeAction =
  | { readonly _tag: "Open"; readonly reason: DisputeReason; readonly amountCents?: number | undefined }
  | { readonly _tag: "Resolve"; readonly outcome: DisputeOutcome }

/** What the acquirer tells us about one dispute of one payment. */
export interface DisputeNotification {
  readonly acquirerDisputeId: string
  readonly paymentId: string
  readonly action: DisputeAction
}

/** A payment's money lives in `merchant_available` once settled, else in `merchant_pending`. */
const isSettled = (payment: Payment) => payment.settledAt !== null

/**
 * True when the payment already reflects this notification (it was applied before): the caller
 * answers with the record as it is, and nothing changes. An `Open` whose dispute was since
 * resolved counts as applied too (a late duplicate).
 */
export const alreadyApplied = (payment: Payment, notification: DisputeNotification): boolean => {
  const dispute = payment.dispute
  if (dispute === null || dispute.acquirerDisputeId !== notification.acquirerDisputeId) return false
  return notification.action._tag === "Open" || dispute.status === notification.action.outcome
}

/** Captured money that a new dispute may cover: the refundable remainder. */
export const disputableCents = (payment: Payment): number => refundableCents(payment)

const open = (
  payment: Payment,
  notification: DisputeNotification,
  reason: DisputeReason,
  amountCents: number | undefined,
  context: Context
): Decision => {
  const existing = payment.dispute
  if (existing !== null) {
    return existing.acquirerDisputeId === notification.acquirerDisputeId
      ? invalidState(payment, "open a dispute on", `dispute ${notification.acquirerDisputeId} was already opened`)
      : invalidState(
        payment,
        "open a dispute on",
        `it already has dispute ${existing.acquirerDisputeId} (${existing.status})`
      )
  }
  if (payment.status !== "captured" && payment.status !== "settled") return invalidState(payment, "open a dispute on")
  const disputable = disputableCents(payment)
  const amount = amountCents ?? disputable
  if (!isAmountWithin(amount, disputable)) {
    return invalidAmount(`amount_cents must be between 1 and the captured amount not refunded (${disputable}).`)
  }
  const dispute: Dispute = {
    acquirerDisputeId: notification.acquirerDisputeId,
    status: "open",
    reason,
    amountCents: amount,
    feeCents: 0,
    openedAt: context.now,
    resolvedAt: null
  }
  return decide(payment, {
    payment: { ...payment, dispute },
    event: "payment.dispute_opened",
    postings: [Ledger.postings.disputeHold(amount, isSettled(payment))]
  }, context)
}

const resolve = (
  payment: Payment,
  notification: DisputeNotification,
  outcome: DisputeOutcome,
  context: Context
): Decision => {
  const dispute = payment.dispute
  if (dispute === null || dispute.acquirerDisputeId !== notification.acquirerDisputeId) {
    return invalidState(payment, "resolve a dispute of", `it has no dispute ${notification.acquirerDisputeId}`)
  }
  if (dispute.status !== "open") {
    return invalidState(
      payment,
      "resolve a dispute of",
      `dispute ${dispute.acquirerDisputeId} was already resolved as '${dispute.status}'`
    )
  }
  const settled = isSettled(payment)
  const feeCents = outcome === "lost" ? disputeFeeCents[payment.currency] : 0
  return decide(payment, {
    payment: { ...payment, dispute: { ...dispute, status: outcome, feeCents, resolvedAt: context.now } },
    event: "payment.dispute_resolved",
    postings: outcome === "won"
      ? [Ledger.postings.disputeRelease(dispute.amountCents, settled)]
      : [Ledger.postings.chargeback(dispute.amountCents), Ledger.postings.disputeFee(feeCents, settled)]
  }, context)
}

/**
 * Applies an acquirer notification to the payment it names. A notification already applied is
 * refused like any other that does not fit (see `alreadyApplied` to tell them apart).
 */
export const apply = (payment: Payment, notification: DisputeNotification, context: Context): Decision => {
  if (payment.id !== notification.paymentId) {
    return invalidState(payment, "apply a dispute notification to", "it names another payment")
  }
  const action = notification.action
  return action._tag === "Open"
    ? open(payment, notification, action.reason, action.amountCents, context)
    : resolve(payment, notification, action.outcome, context)
}

/**
 * The fraud label of a payment for the model's training data: a lost dispute is fraud whatever
 * the review said (the network has decided); otherwise a reviewed case's verdict; else unknown.
 */
export const fraudLabel = (
  payment: Payment,
  fraudCaseStatus: "open" | "confirmed_fraud" | "false_positive" | null
): "fraud" | "legitimate" | null => {
  if (payment.dispute?.status === "lost") return "fraud"
  if (fraudCaseStatus === "confirmed_fraud") return "fraud"
  if (fraudCaseStatus === "false_positive") return "legitimate"
  return null
}
