import type { Auditor } from "./Auditor.ts"
import { cutoffAfterMs, owesSettlement, type SettlementView } from "./Reference.ts"

/**
 * The law `settled-by-cut-off`, read from the final record of every payment: a payment that owed
 * a settlement by the last cut-off that passed (an hour's grace before the end: a sweep may still
 * be retrying past store faults) is settled; and a settled payment was settled by the run of the
 * first cut-off after its capture, never before it and before the next. The rules are the laws'
 * own (./Reference.ts). Returns how many payments were left unsettled.
 */
export const checkSettledByCutoff = (input: {
  readonly auditor: Auditor
  readonly payments: Iterable<SettlementView & { readonly id: string }>
  readonly cutoffMinutes: number
  readonly startMs: number
  readonly endMs: number
}): number => {
  const { auditor } = input
  const lastCutoffMs = cutoffAfterMs(input.endMs - 3_600_000 - 86_400_000, input.cutoffMinutes)
  const lastCutoff = new Date(lastCutoffMs).toISOString()
  let unsettled = 0
  for (const payment of input.payments) {
    if (lastCutoffMs > input.startMs && owesSettlement(payment) && payment.capturedAt !== null && payment.capturedAt < lastCutoff) {
      unsettled++
      auditor.check(false, "settled-by-cut-off", () =>
        `payment ${payment.id}: captured ${payment.capturedAt}, still ${payment.status} after the ${lastCutoff} cut-off`)
    } else if (payment.capturedAt !== null && payment.settledAt !== null) {
      const cutoffMs = cutoffAfterMs(Date.parse(payment.capturedAt), input.cutoffMinutes)
      const settledMs = Date.parse(payment.settledAt)
      auditor.check(settledMs >= cutoffMs && settledMs < cutoffMs + 86_400_000, "settled-by-cut-off", () =>
        `payment ${payment.id}: captured ${payment.capturedAt}, settled ${payment.settledAt}, its cut-off ${new Date(cutoffMs).toISOString()}`)
    }
  }
  return unsettled
}
