import type { Payment } from "../../src/domain/Payment.ts"

/**
 * The laws of disputes, as the auditor checks them (written from the contract, not from
 * src/domain): the transitions a dispute adds, and what a payment's dispute adds to its ledger.
 * The simulated card network that sends the notifications is sim/world/Disputes.ts.
 */

/** (from, to, event) triples a dispute adds to the auditor's transition table: the status stays. */
export const disputeTransitions: ReadonlyArray<string> = ["captured", "settled"].flatMap((status) => [
  `${status}>${status}:payment.dispute_opened`,
  `${status}>${status}:payment.dispute_resolved`
])

/** The network's dispute fee per currency, as docs/api.md states it. */
const disputeFee: Readonly<Record<string, number>> = {
  USD: 1500,
  EUR: 1500,
  GBP: 1500,
  CAD: 1500,
  AUD: 2500,
  JPY: 2000
}

/**
 * What a payment's dispute adds to its ledger equations: reserved holds an open dispute's
 * amount; a lost one went to the network (the card network owes us that much less) with the
 * fee taken from the merchant; a won one left no trace but its round trip.
 */
const noDispute = Object.freeze({ reserved: 0, cardNetwork: 0, merchant: 0, feeRevenue: 0 })
export const disputeLedger = (
  payment: Payment
): {
  readonly reserved: number
  readonly cardNetwork: number
  readonly merchant: number
  readonly feeRevenue: number
} => {
  const dispute = payment.dispute
  if (dispute === null) return noDispute
  const fee = dispute.status === "lost" ? disputeFee[payment.currency]! : 0
  return {
    reserved: dispute.status === "open" ? dispute.amountCents : 0,
    cardNetwork: dispute.status === "lost" ? -dispute.amountCents : 0,
    merchant: dispute.status === "won" ? 0 : -dispute.amountCents - fee,
    feeRevenue: fee
  }
}

/** Captured money a lost dispute charged back: no longer the merchant's to refund. */
export const chargedBackCents = (payment: { readonly dispute?: Payment["dispute"] }) =>
  payment.dispute?.status === "lost" ? payment.dispute.amountCents : 0
