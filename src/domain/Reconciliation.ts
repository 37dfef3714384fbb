import type { Payment } from "./Payment.ts"
import { networkTimeoutCode } from "./Payment.ts"

/**
 * Reconciliation: what our records say the processor must hold for each payment, compared with
 * what it says it holds. Pure: the records come in as arguments.
 */

/** The processor's amounts for one payment, in our terms (the acquirer port's `ProcessorPayment`, without its ids). */
export interface ProcessorAmounts {
  readonly paymentId: string
  /** Authorized and not yet captured or cancelled. */
  readonly authorizedCents: number
  readonly capturedCents: number
  readonly refundedCents: number
  readonly cancelled: boolean
}

export type ReconciledField =
  | "authorized"
  | "captured"
  | "refunded"
  | "cancelled"
  | "missing_at_processor"
  | "unknown_to_us"

/** One difference between the books and the processor: the field, what we expect and what the processor says. */
export interface Difference {
  readonly paymentId: string
  readonly field: ReconciledField
  readonly ours: number | boolean | null
  readonly processor: number | boolean | null
}

/**
 * What the processor must hold for a payment as we booked it; null while we do not know
 * (pending: its authorization is being asked for), or when it must hold nothing at all (a
 * decline), in which case a record there is not a difference unless it holds money.
 */
export const expectedAtProcessor = (payment: Payment): ProcessorAmounts | null => {
  const base = { paymentId: payment.id, authorizedCents: 0, capturedCents: 0, refundedCents: 0, cancelled: false }
  switch (payment.status) {
    case "pending":
      return null
    case "authorized":
      return { ...base, authorizedCents: payment.amountCents }
    case "captured":
    case "settled":
    case "refunded":
      return { ...base, capturedCents: payment.capturedAmountCents, refundedCents: payment.refundedAmountCents }
    case "blocked":
    case "voided":
      return { ...base, cancelled: true }
    case "failed":
      // An authorization never answered in time was cancelled; a decline holds nothing.
      return payment.failureCode === networkTimeoutCode ? { ...base, cancelled: true } : null
  }
}

const holdsMoney = (amounts: ProcessorAmounts) =>
  amounts.authorizedCents > 0 || amounts.capturedCents > 0 || amounts.refundedCents > 0

/**
 * Every difference between our payments and the processor's records of one period, payment by
 * payment, in payment id order. A payment the processor never saw differs when we booked money
 * for it; a processor record we do not know differs when it holds money.
 */
export const reconcile = (
  ours: ReadonlyArray<Payment>,
  processor: ReadonlyArray<ProcessorAmounts>
): Array<Difference> => {
  const theirs = new Map(processor.map((record) => [record.paymentId, record]))
  const differences: Array<Difference> = []
  const seen = new Set<string>()
  for (const payment of ours) {
    seen.add(payment.id)
    const expected = expectedAtProcessor(payment)
    const record = theirs.get(payment.id)
    if (payment.status === "pending") continue
    if (expected === null) {
      if (record !== undefined && holdsMoney(record)) {
        differences.push({
          paymentId: payment.id,
          field: "authorized",
          ours: 0,
          processor: record.authorizedCents + record.capturedCents
        })
      }
      continue
    }
    if (record === undefined) {
      // A cancel of an authorization that never reached the processor leaves nothing there: no difference.
      if (holdsMoney(expected)) {
        differences.push({ paymentId: payment.id, field: "missing_at_processor", ours: true, processor: false })
      }
      continue
    }
    const compare = (field: ReconciledField, a: number | boolean, b: number | boolean) => {
      if (a !== b) differences.push({ paymentId: payment.id, field, ours: a, processor: b })
    }
    compare("authorized", expected.authorizedCents, record.authorizedCents)
    compare("captured", expected.capturedCents, record.capturedCents)
    compare("refunded", expected.refundedCents, record.refundedCents)
    // A cancelled authorization holds nothing: only a cancel we booked and the processor lacks matters.
    if (expected.cancelled && !record.cancelled && holdsMoney(record)) compare("cancelled", true, false)
  }
  for (const record of processor) {
    if (!seen.has(record.paymentId) && holdsMoney(record)) {
      differences.push({
        paymentId: record.paymentId,
        field: "unknown_to_us",
        ours: null,
        processor: record.authorizedCents + record.capturedCents
      })
    }
  }
  return differences.sort((a, b) => (a.paymentId < b.paymentId ? -1 : a.paymentId > b.paymentId ? 1 : 0))
}
