/**
 * What a payment records of its dispute (the `dispute` of a `Payment`, ./Payment.ts). The rules
 * that open and resolve one are in ./Dispute.ts, which depends on the payment; the record is
 * apart so the payment can name it without depending on those rules.
 */
export const disputeReasons = ["fraudulent", "product_not_received", "duplicate", "other"] as const
export type DisputeReason = (typeof disputeReasons)[number]
export type DisputeStatus = "open" | "won" | "lost"

export interface Dispute {
  /** The acquirer's id of the dispute: notifications are idempotent on it. */
  readonly acquirerDisputeId: string
  readonly status: DisputeStatus
  readonly reason: DisputeReason
  readonly amountCents: number
  /** The dispute fee charged when the dispute was lost; 0 otherwise. */
  readonly feeCents: number
  readonly openedAt: number
  readonly resolvedAt: number | null
}
