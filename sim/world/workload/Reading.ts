import { type Auditor, passed } from "../../checks/Auditor.ts"
import type { SimResponse } from "../Http.ts"
import type { Transaction } from "./Types.ts"

/**
 * How the merchants read the service's answers: the transaction an answer carries (the fields they
 * use, its amount laws checked as read), the error an answer names, and the check that an answer
 * is the expected one.
 */

/**
 * The last transaction a script parsed and the exact body it came from: an answer with exactly
 * that body is not parsed again (the same text gives the same transaction; the script never
 * changes one), and its amount laws are still checked.
 */
export interface Known {
  body: string
  transaction: Transaction
}

export type Reading = ReturnType<typeof makeReading>

export const makeReading = (auditor: Auditor) => {
  const parseTransaction = (response: SimResponse): Transaction | null => {
    if (response.status < 200 || response.status >= 300) return null
    const parsed = (JSON.parse(response.body) as { transaction: Transaction }).transaction
    // Only the fields the script reads are kept: the script holds its transaction for hours of
    // virtual time, and the whole parsed answer (card, metadata, five fraud explanations, time
    // stamps: some twenty objects and strings) would survive young-generation collections and be
    // copied into the old one; this way it dies young, and one small record is kept.
    return checkedTransaction({
      id: parsed.id,
      status: parsed.status,
      amount_cents: parsed.amount_cents,
      captured_amount_cents: parsed.captured_amount_cents,
      refunded_amount_cents: parsed.refunded_amount_cents,
      fraud_case_id: parsed.fraud_case_id,
      fraud_score: parsed.fraud_score,
      failure_code: parsed.failure_code,
      dispute: parsed.dispute === null || parsed.dispute === undefined
        ? null
        : { status: parsed.dispute.status, amount_cents: parsed.dispute.amount_cents }
    })
  }
  /** The amount laws of a transaction just read (every answer's, whether parsed or known). */
  const checkedTransaction = (transaction: Transaction): Transaction => {
    // The fields the laws read, not a record of the store's names.
    auditor.checkAmountsOf(
      {
        id: transaction.id,
        status: transaction.status,
        amountCents: transaction.amount_cents,
        capturedAmountCents: transaction.captured_amount_cents,
        refundedAmountCents: transaction.refunded_amount_cents,
        failureCode: transaction.failure_code
      },
      // A lost dispute's amount went back to the cardholder without a refund (a refund of the rest then makes it `refunded`).
      transaction.dispute?.status === "lost" ? transaction.dispute.amount_cents : 0
    )
    return transaction
  }

  /** The CONTRACT section 3 error of an answer, or undefined (a success, or a body that is not one). */
  const errorOf = (response: SimResponse | null): { readonly type?: string; readonly code?: string } | undefined => {
    if (response === null || response.status < 400) return undefined
    try {
      return (JSON.parse(response.body) as { error?: { type?: string; code?: string } }).error
    } catch {
      return undefined
    }
  }
  const errorCode = (response: SimResponse | null) => errorOf(response)?.code ?? null

  /** `what` names the request, written out only when the check fails (no text built a passing answer). */
  const expect = (condition: boolean, what: () => string, response: SimResponse | null) =>
    auditor.check(
      condition,
      "expected-answer",
      condition
        ? passed
        : () =>
          `${what()}: got ${response === null ? "no answer" : `${response.status} ${response.body.slice(0, 300)}`}`
    )

  const parseKnown = (response: SimResponse, known: Known): Transaction | null => {
    if (response.status < 200 || response.status >= 300) return null
    if (response.body === known.body) return checkedTransaction(known.transaction)
    const transaction = parseTransaction(response)!
    known.body = response.body
    known.transaction = transaction
    return transaction
  }

  return { parseTransaction, checkedTransaction, errorOf, errorCode, expect, parseKnown }
}
