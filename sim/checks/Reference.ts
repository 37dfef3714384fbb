/**
 * The laws' own reading of the documented rules, written apart from the code they check: a law
 * that asked the implementation what should have happened (the domain's `isSettleable`, the
 * workers' `nextCutoffMs`) would agree with every bug in it. Each rule here is restated from
 * CONTRACT.md and docs/, not imported; test/guard/independent-laws.test.ts keeps the laws from
 * importing rules from `src/domain`, `src/services` or `src/workers`.
 */

const dayMs = 86_400_000

/**
 * The first daily settlement cut-off strictly after `ms` (CONTRACT section 6: "settlement run
 * (daily cut-off, configurable)"; `SETTLEMENT_CUTOFF` is minutes past midnight UTC).
 */
export const cutoffAfterMs = (ms: number, cutoffMinutes: number): number => {
  const startOfDayMs = ms - (((ms % dayMs) + dayMs) % dayMs)
  const todayMs = startOfDayMs + cutoffMinutes * 60_000
  return todayMs > ms ? todayMs : todayMs + dayMs
}

/** What a settlement run must sweep of a payment, by the transaction table of CONTRACT section 6. */
export interface SettlementView {
  readonly status: string
  readonly capturedAt: string | null
  readonly settledAt: string | null
}

/**
 * Whether a settlement run at a cut-off after the capture owes the payment its sweep: money was
 * captured, it is not settled yet, and it is still the merchant's to settle, whether or not it
 * has been refunded since (a refund, partial or whole, does not take a captured payment out of
 * settlement: "captured, settled → refund" in the table, and `refunded` is reached from both).
 */
export const owesSettlement = (payment: SettlementView): boolean =>
  payment.capturedAt !== null && payment.settledAt === null && (payment.status === "captured" || payment.status === "refunded")
