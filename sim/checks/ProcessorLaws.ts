import type { Payment } from "../../src/domain/Payment.ts"
import type { ProcessorObserver, ProcessorRecords, SimAuthorization } from "../world/Processor.ts"
import type { Auditor } from "./Auditor.ts"

/**
 * The laws of a run against a remote processor (`--processor`), judged from what the simulated
 * processor did (sim/world/Processor.ts: every authorization, capture and cancel it applied, with
 * its time) and the books (the store's payments, and every change the auditor saw committed).
 * Written out from docs/processor.md and docs/api.md, never asked of src/domain or src/services:
 *
 * - `processor-one-authorization`: every call on a payment carries the key of its operation
 *   (`<payment>:authorize`), so a flow retried, resumed or run on another instance asks for the
 *   same authorization: the processor holds at most one authorization per payment.
 * - `processor-authorization-ends`: an authorization ends captured or cancelled (a fraud-blocked,
 *   voided or unanswered payment cancels it) within `boundMs` of the later of its making and the
 *   moment our books stopped holding the payment authorized (manual capture, a review); one our
 *   books still hold authorized at the end may stay open. The bound: the flow's first asks
 *   (ACQUIRER_TIMEOUT), then rounds of a stopped flow found stale and resumed by recovery
 *   (stale flow age + recovery interval + ACQUIRER_TIMEOUT again), and the run's longest stretch
 *   of downtime (crash restart, pause, database freeze and outage, processor outage).
 * - `processor-money-matches-books`: per payment, what the processor captured and refunded is
 *   what the books say was captured and refunded (the processor acts first and the change
 *   commits on its known outcome; an unknown one is asked again under the same key).
 * - `processor-no-capture-after-cancel`: once an authorization of a payment was cancelled at the
 *   processor, nothing of that payment is captured there afterwards (a cancel that found nothing
 *   to cancel is no cancel of its money: an authorization made later is a new hold).
 * - `processor-reconciled`: what reconciliation compares (docs/processor.md): per payment, the
 *   processor holds what our books say it must (authorized: the amount held, nothing captured;
 *   captured, settled, refunded: the captured and refunded amounts, nothing still held; voided,
 *   blocked, failed: nothing held), and holds no money for a payment we do not know.
 */

export interface ProcessorLawConfig {
  readonly nowMs: () => number
  /** ACQUIRER_TIMEOUT of the simulated service. */
  readonly acquirerTimeoutMs: number
  /** How old an untouched flow is when recovery resumes it, and how often recovery looks. */
  readonly staleFlowMs: number
  readonly recoveryIntervalMs: number
  /** The run's longest stretch in which a flow can make no progress (downtime of every kind, added up). */
  readonly disruptionMs: number
}

export interface ProcessorLawStats {
  authorizations: number
  /** Authorizations still open at the end because our books hold the payment authorized. */
  heldOpen: number
  /** The longest an authorization took to end, from when it was due to (ms). */
  slowestEndMs: number
  boundMs: number
}

/** Stopped-and-resumed rounds a flow may take before its authorization ends. */
const resumeRounds = 5

interface Amounts {
  authorized: number
  captured: number
  refunded: number
}

export const processorLaws = (auditor: Auditor, config: ProcessorLawConfig, records: ProcessorRecords) => {
  const boundMs = config.acquirerTimeoutMs +
    resumeRounds * (config.staleFlowMs + config.recoveryIntervalMs + config.acquirerTimeoutMs) + config.disruptionMs
  const stats: ProcessorLawStats = { authorizations: 0, heldOpen: 0, slowestEndMs: 0, boundMs }
  /** When our books last stopped holding each payment authorized. */
  const heldUntilMs = new Map<string, number>()

  /** The books as last committed, per payment (what a refund at the processor is judged against). */
  const booked = new Map<string, Payment>()
  const sumOf = (paymentId: string) => {
    const sum: Amounts = { authorized: 0, captured: 0, refunded: 0 }
    for (const a of records.of(paymentId)) {
      sum.authorized += a.authorizedCents
      sum.captured += a.capturedCents
      sum.refunded += a.refundedCents
    }
    return sum
  }

  /**
   * Every committed change (Auditor.onCommitted). The processor acts before the change commits,
   * so a commit never books more captured or refunded money than the processor holds as such.
   */
  const committed = (before: Payment | null, after: Payment) => {
    booked.set(after.id, after)
    if (before?.status === "authorized" && after.status !== "authorized") heldUntilMs.set(after.id, config.nowMs())
    if (
      after.capturedAmountCents === (before?.capturedAmountCents ?? 0) &&
      after.refundedAmountCents === (before?.refundedAmountCents ?? 0)
    ) return
    const theirs = sumOf(after.id)
    auditor.check(
      after.capturedAmountCents <= theirs.captured && after.refundedAmountCents <= theirs.refunded,
      "processor-money-matches-books",
      () =>
        `payment ${after.id}: a commit books captured ${after.capturedAmountCents} and refunded ${after.refundedAmountCents}; the processor holds ${theirs.captured} and ${theirs.refunded}`
    )
  }

  /** As the processor acts: a second authorization, a capture after a cancel, a refund beyond what is booked and asked. */
  const observer: ProcessorObserver = {
    // Two holds at once as it happens (the end of the run counts every authorization ever made).
    authorized: (made: SimAuthorization) => {
      const open = records.of(made.paymentId).filter((a) => a.cancelledMs === null)
      auditor.check(
        open.length <= 1,
        "processor-one-authorization",
        () =>
          `payment ${made.paymentId}: ${open.length} authorizations open at once at the processor (keys ${
            open.map((a) => a.idempotencyKey).join(", ")
          })`
      )
    },
    captured: (paymentId: string) => {
      const cancelMs = records.cancelsMs.get(paymentId)
      auditor.check(
        cancelMs === undefined,
        "processor-no-capture-after-cancel",
        () =>
          `payment ${paymentId}: captured at the processor after one of its authorizations was cancelled there at ${
            new Date(cancelMs!).toISOString()
          }`
      )
    },
    // One refund is asked at a time under the key of what was refunded before it: the processor
    // never holds more refunded than the books plus the refund being asked.
    // A new refund is asked under the key of what the books refunded: the processor then holds no
    // refund the books lack (one asked again after a lost answer carries its old key).
    refundAsked: (paymentId: string) => {
      const refunded = sumOf(paymentId).refunded
      const books = booked.get(paymentId)?.refundedAmountCents ?? 0
      auditor.check(
        refunded <= books,
        "processor-money-matches-books",
        () =>
          `payment ${paymentId}: a refund under a new key arrives while the processor has refunded ${refunded} and the books ${books}`
      )
    },
    refunded: (paymentId: string, amountCents: number) => {
      const refunded = sumOf(paymentId).refunded
      const books = booked.get(paymentId)?.refundedAmountCents ?? 0
      auditor.check(
        refunded <= books + amountCents,
        "processor-money-matches-books",
        () =>
          `payment ${paymentId}: the processor has refunded ${refunded} after a refund of ${amountCents}; the books ${books}`
      )
    }
  }

  /** The laws over the whole run, once it has quiesced. */
  const audit = (payments: Iterable<Payment>, records: ProcessorRecords) => {
    const books = new Map<string, Payment>()
    for (const payment of payments) books.set(payment.id, payment)
    const atProcessor = new Map<string, Amounts>()
    const count = new Map<string, number>()
    for (const a of records.authorizations) {
      stats.authorizations++
      count.set(a.paymentId, (count.get(a.paymentId) ?? 0) + 1)
      const sum = atProcessor.get(a.paymentId) ?? { authorized: 0, captured: 0, refunded: 0 }
      sum.authorized += a.authorizedCents
      sum.captured += a.capturedCents
      sum.refunded += a.refundedCents
      atProcessor.set(a.paymentId, sum)
    }

    // (a) At most one authorization per payment.
    for (const [paymentId, n] of count) {
      auditor.check(
        n <= 1,
        "processor-one-authorization",
        () =>
          `payment ${paymentId}: ${n} authorizations at the processor (keys ${
            records.authorizations.filter((a) => a.paymentId === paymentId).map((a) => a.idempotencyKey).join(", ")
          })`
      )
    }

    // (b) Every authorization ends within the bound, unless our books hold it.
    for (const a of records.authorizations) {
      const endedMs = a.capturedMs ?? a.cancelledMs
      const payment = books.get(a.paymentId)
      if (endedMs === null) {
        if (payment?.status === "authorized") {
          stats.heldOpen++
          continue
        }
        auditor.fail(
          "processor-authorization-ends",
          `payment ${a.paymentId}: authorization ${a.reference} made at ${
            new Date(a.createdMs).toISOString()
          } is still open (neither captured nor cancelled) at the end; our books say ${payment?.status ?? "nothing"}`
        )
        continue
      }
      const dueMs = Math.max(a.createdMs, heldUntilMs.get(a.paymentId) ?? Number.NEGATIVE_INFINITY)
      const tookMs = endedMs - dueMs
      if (tookMs > stats.slowestEndMs) stats.slowestEndMs = tookMs
      auditor.check(
        tookMs <= boundMs,
        "processor-authorization-ends",
        () =>
          `payment ${a.paymentId}: authorization ${a.reference} ended ${tookMs} ms after it was due to (at most ${boundMs} ms)`
      )
    }

    // (c) Captured and refunded amounts at the processor are the books'.
    const ids = new Set([...books.keys(), ...atProcessor.keys()])
    for (const id of ids) {
      const payment = books.get(id)
      const theirs = atProcessor.get(id) ?? { authorized: 0, captured: 0, refunded: 0 }
      const captured = payment?.capturedAmountCents ?? 0
      const refunded = payment?.refundedAmountCents ?? 0
      auditor.check(
        theirs.captured === captured && theirs.refunded === refunded,
        "processor-money-matches-books",
        () =>
          `payment ${id}: the processor captured ${theirs.captured} and refunded ${theirs.refunded}; the books ${captured} and ${refunded} (${
            payment?.status ?? "unknown to the books"
          })`
      )
    }

    // (d) Nothing captured after a cancel.
    for (const [paymentId, cancelMs] of records.cancelsMs) {
      const late = (records.capturesMs.get(paymentId) ?? []).filter((ms) => ms > cancelMs)
      auditor.check(
        late.length === 0,
        "processor-no-capture-after-cancel",
        () =>
          `payment ${paymentId}: cancelled at the processor at ${
            new Date(cancelMs).toISOString()
          }, captured there after it at ${late.map((ms) => new Date(ms).toISOString()).join(", ")}`
      )
    }

    // (e) Reconciliation finds no difference.
    for (const difference of reconcile(books, atProcessor)) auditor.fail("processor-reconciled", difference)
  }

  return { committed, observer, audit, stats }
}

/**
 * The differences reconciliation would report, computed here from the documented rules: what the
 * processor must hold for each payment as our books have it.
 */
const reconcile = (books: ReadonlyMap<string, Payment>, atProcessor: ReadonlyMap<string, Amounts>): Array<string> => {
  const differences: Array<string> = []
  const none: Amounts = { authorized: 0, captured: 0, refunded: 0 }
  for (const [id, payment] of books) {
    const theirs = atProcessor.get(id) ?? none
    let expected: Amounts | null
    switch (payment.status) {
      case "pending":
        expected = null // still being asked for: nothing is known yet
        break
      case "authorized":
        expected = { authorized: payment.amountCents, captured: 0, refunded: 0 }
        break
      case "captured":
      case "settled":
      case "refunded":
        expected = { authorized: 0, captured: payment.capturedAmountCents, refunded: payment.refundedAmountCents }
        break
      default: // voided, blocked, failed: released, cancelled or never made
        expected = none
    }
    if (expected === null) continue
    for (const field of ["authorized", "captured", "refunded"] as const) {
      if (expected[field] !== theirs[field]) {
        differences.push(
          `payment ${id} (${payment.status}): ${field} ours ${expected[field]}, processor ${theirs[field]}`
        )
      }
    }
  }
  for (const [id, theirs] of atProcessor) {
    if (!books.has(id) && theirs.authorized + theirs.captured > 0) {
      differences.push(`payment ${id}: unknown to us, the processor holds ${theirs.authorized + theirs.captured}`)
    }
  }
  return differences
}
