import type { MintId } from "./Ids.ts"
import type { Currency } from "./Money.ts"

/**
 * Chart of accounts, kept per merchant and currency.
 * - `card_network`: what the card network owes us for captured funds (asset).
 * - `merchant_pending`: owed to the merchant, captured but not settled (liability).
 * - `merchant_available`: owed to the merchant, settled (liability).
 * - `merchant_reserved`: held back for disputes (liability).
 * - `fee_revenue`: our processing fees (revenue).
 * - `authorization_holds` / `cardholder_authorizations`: memo pair for open authorizations;
 *   a hold is posted at authorization and released at capture, void or block.
 */
export const accounts = [
  "card_network",
  "merchant_pending",
  "merchant_available",
  "merchant_reserved",
  "fee_revenue",
  "authorization_holds",
  "cardholder_authorizations"
] as const
export type Account = (typeof accounts)[number]
export type Direction = "debit" | "credit"

export interface LedgerEntry {
  readonly id: string
  readonly groupId: string
  readonly paymentId: string
  readonly merchantId: string
  readonly account: Account
  readonly direction: Direction
  readonly amountCents: number
  readonly currency: Currency
  readonly createdAt: number
}

export interface Posting {
  readonly debit: Account
  readonly credit: Account
  readonly amountCents: number
}

export interface PostingContext {
  readonly paymentId: string
  readonly merchantId: string
  readonly currency: Currency
  readonly now: number
  readonly mintId: MintId
}

/**
 * One entry, with an id minted for it, written out as a literal: spreading a shared base
 * (`{ ...base, id }`) gave V8 a hidden class per entry (about 300 bytes each, the largest part of
 * a stored ledger).
 */
const entry = (
  groupId: string,
  context: PostingContext,
  amountCents: number,
  account: Account,
  direction: Direction
): LedgerEntry => ({
  groupId,
  paymentId: context.paymentId,
  merchantId: context.merchantId,
  amountCents,
  currency: context.currency,
  createdAt: context.now,
  id: context.mintId("ledgerEntry"),
  account,
  direction
})

/**
 * Turns postings into one balanced group of entries. A zero posting is dropped; a negative one
 * swaps its sides, so every entry carries a positive amount.
 */
export const group = (context: PostingContext, postings: ReadonlyArray<Posting>): ReadonlyArray<LedgerEntry> => {
  const groupId = context.mintId("ledgerGroup")
  const entries: Array<LedgerEntry> = []
  for (const posting of postings) {
    if (!Number.isSafeInteger(posting.amountCents)) throw new Error(`ledger: non-integer amount ${posting.amountCents}`)
    if (posting.amountCents === 0) continue
    const positive = posting.amountCents > 0
    const debit = positive ? posting.debit : posting.credit
    const credit = positive ? posting.credit : posting.debit
    const amountCents = positive ? posting.amountCents : -posting.amountCents
    entries.push(entry(groupId, context, amountCents, debit, "debit"))
    entries.push(entry(groupId, context, amountCents, credit, "credit"))
  }
  return entries
}

export const postings = {
  hold: (amountCents: number): Posting => ({
    debit: "cardholder_authorizations",
    credit: "authorization_holds",
    amountCents
  }),
  release: (amountCents: number): Posting => ({
    debit: "authorization_holds",
    credit: "cardholder_authorizations",
    amountCents
  }),
  capture: (amountCents: number): Posting => ({ debit: "card_network", credit: "merchant_pending", amountCents }),
  fee: (feeCents: number): Posting => ({ debit: "merchant_pending", credit: "fee_revenue", amountCents: feeCents }),
  refund: (amountCents: number, settled: boolean): Posting => ({
    debit: settled ? "merchant_available" : "merchant_pending",
    credit: "card_network",
    amountCents
  }),
  /** A refund the network failed after accepting it: the money comes back to where the payment's money is now. */
  refundFailed: (amountCents: number, settled: boolean): Posting => ({
    debit: "card_network",
    credit: settled ? "merchant_available" : "merchant_pending",
    amountCents
  }),
  settle: (netCents: number): Posting => ({
    debit: "merchant_pending",
    credit: "merchant_available",
    amountCents: netCents
  }),
  /** Disputed money moves from where the payment's money is (available once settled, else pending) to reserved. */
  disputeHold: (amountCents: number, settled: boolean): Posting => ({
    debit: settled ? "merchant_available" : "merchant_pending",
    credit: "merchant_reserved",
    amountCents
  }),
  /** A won dispute returns it to where the payment's money is now (settlement may have run meanwhile). */
  disputeRelease: (amountCents: number, settled: boolean): Posting => ({
    debit: "merchant_reserved",
    credit: settled ? "merchant_available" : "merchant_pending",
    amountCents
  }),
  /** A lost dispute: the network takes the reserved money back for the cardholder... */
  chargeback: (amountCents: number): Posting => ({ debit: "merchant_reserved", credit: "card_network", amountCents }),
  /** ...and charges the dispute fee, from where the payment's money is. */
  disputeFee: (feeCents: number, settled: boolean): Posting => ({
    debit: settled ? "merchant_available" : "merchant_pending",
    credit: "fee_revenue",
    amountCents: feeCents
  })
} as const

/** Signed balance of an account in its natural direction: credit-normal for liabilities and revenue. */
const creditNormal: ReadonlySet<Account> = new Set<Account>([
  "merchant_pending",
  "merchant_available",
  "merchant_reserved",
  "fee_revenue",
  "authorization_holds"
])

export const balanceOf = (entries: ReadonlyArray<LedgerEntry>, account: Account): number => {
  let total = 0
  for (const entry of entries) {
    if (entry.account !== account) continue
    const sign = (entry.direction === "credit") === creditNormal.has(account) ? 1 : -1
    total += sign * entry.amountCents
  }
  return total
}

/** True when every group's debits equal its credits, per currency. */
export const isBalanced = (entries: ReadonlyArray<LedgerEntry>): boolean => {
  const sums = new Map<string, number>()
  for (const entry of entries) {
    const key = `${entry.groupId}:${entry.currency}`
    sums.set(key, (sums.get(key) ?? 0) + (entry.direction === "debit" ? entry.amountCents : -entry.amountCents))
  }
  for (const sum of sums.values()) if (sum !== 0) return false
  return true
}

export interface Balance {
  readonly currency: Currency
  readonly pending: number
  readonly available: number
  readonly reserved: number
}
