import type { Account, Direction, LedgerEntry } from "../../domain/Ledger.ts"
import type { Currency } from "../../domain/Money.ts"
import { ms, type Timestamp, timestamp } from "./Timestamps.ts"

/** A `ledger_entries` row as PostgreSQL returns it (`amount_cents` is a bigint: text). */
export interface LedgerEntryRow {
  readonly id: string
  readonly group_id: string
  readonly payment_id: string
  readonly merchant_id: string
  readonly account: Account
  readonly direction: Direction
  readonly amount_cents: string | number
  readonly currency: Currency
  readonly created_at: Timestamp
}

export const toLedgerEntry = (r: LedgerEntryRow): LedgerEntry => ({
  id: r.id,
  groupId: r.group_id,
  paymentId: r.payment_id,
  merchantId: r.merchant_id,
  account: r.account,
  direction: r.direction,
  amountCents: Number(r.amount_cents),
  currency: r.currency,
  createdAt: ms(r.created_at)
})

/** An entry as its row's columns. */
export const ledgerEntryColumns = (e: LedgerEntry) => ({
  payment_id: e.paymentId,
  merchant_id: e.merchantId,
  id: e.id,
  group_id: e.groupId,
  account: e.account,
  direction: e.direction,
  amount_cents: e.amountCents,
  currency: e.currency,
  created_at: timestamp(e.createdAt)
})
