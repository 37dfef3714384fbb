import type { Payment } from "../../src/domain/Payment.ts"
import type { Auditor } from "./Auditor.ts"

/**
 * The settlement laws' reference model, written from docs/api.md ("Settlement runs at the daily
 * cut-off (`SETTLEMENT_CUTOFF`, UTC) for payments captured before it: a `captured` payment
 * becomes `settled` ... A payment fully refunded before the cut-off stays `refunded`; its
 * remaining pending balance is swept the same way") and docs/operations.md (`SETTLEMENT_CUTOFF`,
 * a time of day in UTC). It decides from the record alone what a sweep must have done; it calls
 * nothing of the service (no `isSettleable`, no `nextCutoff`): a law that asked the code under
 * test what should have been swept would agree with every bug in it.
 */

const dayMs = 86_400_000

/** The first daily cut-off strictly after `ms`: `cutoffMinutes` past midnight UTC (docs/operations.md). */
export const cutoffAfter = (ms: number, cutoffMinutes: number): number => {
  const sameDay = Math.floor(ms / dayMs) * dayMs + cutoffMinutes * 60_000
  return sameDay > ms ? sameDay : sameDay + dayMs
}

/**
 * Must the sweep of a cut-off at `cutoff` (ms) have reached this payment? Every payment whose
 * money was captured before it: whatever happened since (refunded in full, disputed, refunded in
 * part), its pending balance is swept once. Status alone does not say it (a `refunded` payment may
 * be swept or not); the capture time does.
 */
/** A time in a law's message. */
const iso = (ms: number | null) => (ms === null ? "none" : new Date(ms).toISOString())

const owedSweep = (payment: Pick<Payment, "capturedAt">, cutoff: number) =>
  payment.capturedAt !== null && payment.capturedAt < cutoff

/**
 * Law `settled-by-cut-off` over the final records: every payment captured before the last
 * cut-off that passed at least `graceMs` before `nowMs` is settled (`settledAt` set), and every
 * settled one was settled by the run of the first cut-off after its capture (which may retry past
 * faults and crash loops but finishes before the next one), never before it. `check` each
 * payment, then read `unsettled`.
 */
export const settlementLaw = (
  auditor: Auditor,
  options: {
    readonly nowMs: number
    readonly startMs: number
    readonly cutoffMinutes: number
    readonly graceMs: number
  }
) => {
  // The last cut-off at least `graceMs` before now: a sweep may still be retrying right after one.
  const lastCutoffMs = cutoffAfter(options.nowMs - options.graceMs - dayMs, options.cutoffMinutes)
  const anyCutoff = lastCutoffMs > options.startMs
  const law = {
    unsettled: 0,
    check: (payment: Pick<Payment, "id" | "status" | "capturedAt" | "settledAt">) => {
      if (payment.settledAt === null) {
        if (anyCutoff && owedSweep(payment, lastCutoffMs)) {
          law.unsettled++
          auditor.fail(
            "settled-by-cut-off",
            `payment ${payment.id}: captured ${
              iso(payment.capturedAt)
            }, still ${payment.status} and never swept after the ${iso(lastCutoffMs)} cut-off`
          )
        }
        return
      }
      const capturedAt = payment.capturedAt
      auditor.check(
        capturedAt !== null,
        "settled-by-cut-off",
        () => `payment ${payment.id}: settled ${iso(payment.settledAt)} without a capture`
      )
      if (capturedAt === null) return
      const cutoffMs = cutoffAfter(capturedAt, options.cutoffMinutes)
      const settledMs = payment.settledAt
      auditor.check(
        settledMs >= cutoffMs && settledMs < cutoffMs + dayMs,
        "settled-by-cut-off",
        () =>
          `payment ${payment.id}: captured ${iso(capturedAt)}, settled ${iso(settledMs)}, its cut-off ${iso(cutoffMs)}`
      )
    }
  }
  return law
}
