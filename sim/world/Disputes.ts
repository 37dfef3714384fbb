import { Cause, Effect, Exit, Fiber, Option } from "effect"
import type { DisputeNotification, DisputeOutcome } from "../../src/domain/Dispute.ts"
import { disputeReasons } from "../../src/domain/Dispute.ts"
import type { Payment } from "../../src/domain/Payment.ts"
import { Payments } from "../../src/services/Payments.ts"
import type { MemoryState } from "../../src/store/MemoryStore.ts"
import type { Auditor } from "../checks/Auditor.ts"
import type { Prng } from "../engine/Prng.ts"
import type { Trace } from "../engine/Trace.ts"
import type { SimulatedService } from "./Service.ts"

/**
 * Runs `effect` on a fiber of its own and waits for it; interrupted, the wait ends at once and the
 * effect runs on (Effect 3's `Effect.disconnect`).
 */
const disconnect = <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.flatMap(Effect.forkDetach(effect), Fiber.join)

/**
 * Disputes in the simulation: the simulated card network disputes a fraction
 * (`--faults dispute=0.02`) of the payments whose merchant script has finished (so merchants'
 * own refunds never race a dispute they cannot see coming), resolves each later, and re-sends
 * notifications as an acquirer does when it gets no acknowledgement: after a crash, a store
 * failure, or for no reason (a duplicate). Crashes around them come from the run's crash options
 * (`crash=`, `crashcommit=`, `storelost=`): the notifications go through the service's one
 * command path, so every commit they make is one the store faults and the auditor see.
 *
 * The auditor's side: the dispute transitions and each payment's dispute share of the ledger
 * (sim/checks/DisputeLaws.ts), and at the end the injector's `audit`: reserved money is conserved
 * and every dispute opens and resolves exactly once.
 */

interface Planned {
  readonly paymentId: string
  readonly acquirerDisputeId: string
  readonly outcome: DisputeOutcome
  /** What the service answered the open (after retries): applied (now or before), or refused. */
  open: "pending" | "accepted" | "refused"
  resolve: "pending" | "accepted" | "refused" | "skipped"
  /** A notification with the other outcome, sent after the resolve: must be refused. */
  conflicting: "none" | "pending" | "refused" | "accepted"
}

export interface DisputeStats {
  planned: number
  notifications: number
  duplicates: number
  retries: number
  refusedOpens: number
}

/** Attempts per notification before the simulated network gives up (never reached in a sane run). */
const maximumAttempts = 500
/** How long the network waits for an acknowledgement before it sends again. */
const acknowledgementTimeoutMs = 60_000

export const makeDisputeInjector = (input: {
  readonly prng: Prng
  readonly rate: number
  readonly service: SimulatedService
  readonly auditor: Auditor
  readonly trace: Trace
  readonly state: MemoryState
  readonly horizonEndMs: number
  readonly nowMs: () => number
}) => {
  const { prng, rate, service, auditor, trace, state } = input
  const planned: Array<Planned> = []
  const stats: DisputeStats = { planned: 0, notifications: 0, duplicates: 0, retries: 0, refusedOpens: 0 }
  let running = 0

  /** Sends a notification until the service acknowledges it (applied, already applied) or refuses it. */
  const deliver = (notification: DisputeNotification, what: string) =>
    Effect.gen(function*() {
      for (let attempt = 1; attempt <= maximumAttempts; attempt++) {
        stats.notifications++
        const exit = yield* service.withServices(
          Effect.flatMap(Payments, (p) => p.applyDisputeNotification(notification))
        ).pipe(
          // A crash right after the commit never answers: the network times out and sends again,
          // without waiting for the dead call to unwind (it may be inside an uninterruptible region).
          disconnect,
          Effect.timeout(acknowledgementTimeoutMs),
          Effect.exit
        )
        if (Exit.isSuccess(exit)) {
          trace.record(
            `dispute ${what} ${notification.paymentId} ${notification.acquirerDisputeId} ${
              exit.value.applied ? "applied" : "already applied"
            }`
          )
          return "accepted" as const
        }
        const failure = Option.getOrNull(Cause.findErrorOption(exit.cause))
        if (
          failure !== null && typeof failure === "object" && "_tag" in failure &&
          (failure._tag === "InvalidState" || failure._tag === "InvalidInput" || failure._tag === "NotFound")
        ) {
          trace.record(
            `dispute ${what} ${notification.paymentId} ${notification.acquirerDisputeId} refused (${failure._tag})`
          )
          return "refused" as const
        }
        // Down, crashed, store unavailable or no answer in time: the network retries.
        stats.retries++
        yield* Effect.sleep(prng.int(5_000, 120_000))
      }
      auditor.fail(
        "dispute-delivery",
        `${what} of ${notification.acquirerDisputeId} never acknowledged in ${maximumAttempts} attempts`
      )
      return "refused" as const
    })

  /** Plans a dispute of the payment: its entry and the open notification. */
  const plan = (payment: Payment) => {
    const disputable = payment.capturedAmountCents - payment.refundedAmountCents
    const entry: Planned = {
      paymentId: payment.id,
      acquirerDisputeId: `dp_sim_${planned.length + 1}`,
      outcome: prng.chance(0.5) ? "won" : "lost",
      open: "pending",
      resolve: "pending",
      conflicting: "none"
    }
    planned.push(entry)
    stats.planned++
    const amountCents = prng.chance(0.5) ? undefined : prng.int(1, disputable)
    const reason = prng.pick(disputeReasons)
    const open: DisputeNotification = {
      acquirerDisputeId: entry.acquirerDisputeId,
      paymentId: payment.id,
      action: { _tag: "Open", reason, amountCents }
    }
    return { entry, open }
  }

  /** After an accepted open: maybe a duplicate, then the resolve (maybe twice, maybe a conflicting one) some hours later. */
  const resolveLater = (entry: Planned, open: DisputeNotification) =>
    Effect.gen(function*() {
      if (prng.chance(0.2)) {
        stats.duplicates++
        auditor.check((yield* deliver(open, "open (duplicate)")) === "accepted", "dispute-idempotent", () =>
          `a repeated open of ${entry.acquirerDisputeId} was refused`)
      }
      yield* Effect.sleep(prng.int(10 * 60_000, 12 * 3_600_000))
      yield* resolve(entry)
      yield* afterResolve(entry)
    })

  /** The resolve notification of a planned dispute, delivered until acknowledged or refused. */
  const resolve = (entry: Planned) =>
    Effect.map(
      deliver(resolveOf(entry, entry.outcome), `resolve ${entry.outcome}`),
      (answer) => void (entry.resolve = answer)
    )
  const resolveOf = (entry: Planned, outcome: DisputeOutcome): DisputeNotification => ({
    acquirerDisputeId: entry.acquirerDisputeId,
    paymentId: entry.paymentId,
    action: { _tag: "Resolve", outcome }
  })

  /** After the resolve: maybe a duplicate of it, maybe a conflicting one (which must be refused). */
  const afterResolve = (entry: Planned) =>
    Effect.gen(function*() {
      const resolved = resolveOf(entry, entry.outcome)
      if (prng.chance(0.2)) {
        stats.duplicates++
        auditor.check(
          (yield* deliver(resolved, `resolve ${entry.outcome} (duplicate)`)) === "accepted",
          "dispute-idempotent",
          () => `a repeated resolve of ${entry.acquirerDisputeId} was refused`
        )
      }
      if (prng.chance(0.1)) {
        entry.conflicting = "pending"
        const other: DisputeOutcome = entry.outcome === "won" ? "lost" : "won"
        entry.conflicting = yield* deliver(resolveOf(entry, other), `resolve ${other} (conflicting)`)
      }
    })

  /** Disputes opened by `openNow` whose resolve the merchant's script waits for (`resolveNow`), by payment. */
  const awaitingScript = new Map<string, Planned>()

  /** Forks `effect` as a dispute in progress (interruptible: see `consider`). */
  const inBackground = (effect: Effect.Effect<void>) => {
    running++
    return Effect.asVoid(
      Effect.forkDetach(Effect.interruptible(Effect.ensuring(effect, Effect.sync(() => void running--))))
    )
  }

  const script = (payment: Payment) =>
    Effect.gen(function*() {
      const { entry, open } = plan(payment)
      yield* Effect.sleep(prng.int(60_000, 6 * 3_600_000))
      entry.open = yield* deliver(open, "open")
      if (entry.open === "refused") {
        stats.refusedOpens++
        entry.resolve = "skipped"
        return
      }
      yield* resolveLater(entry, open)
    })

  return {
    stats,
    /** True when no dispute is waiting to be opened or resolved. */
    idle: () => running === 0,
    /**
     * A payment whose merchant script finished: disputed with probability `rate` when it has
     * captured money not refunded and the horizon has not passed (so crashes may still come).
     */
    consider: (paymentId: string): Effect.Effect<void> =>
      Effect.suspend(() => {
        const payment = state.payments.get(paymentId)
        // A payment disputed while its script ran (`openNow`) has its one dispute already.
        if (
          payment === undefined || payment.dispute !== null || input.nowMs() >= input.horizonEndMs || !prng.chance(rate)
        ) return Effect.void
        if (
          (payment.status !== "captured" && payment.status !== "settled") ||
          payment.capturedAmountCents - payment.refundedAmountCents <= 0
        ) return Effect.void
        // Called from a finalizer (uninterruptible), whose flags a fork inherits: the script must be
        // interruptible, or its acknowledgement timeout can never cut a call a crash left hanging.
        return inBackground(script(payment))
      }),
    /**
     * Disputes the payment now, while its merchant's script still runs (so its refunds, captures
     * and voids meet an open dispute): the open is sent at once and acknowledged before this
     * returns (true: opened); the resolve follows in the background, 10 min to 12 h later, or,
     * with `resolveInScript`, when the script asks for it (`resolveNow`). False when there is
     * nothing to dispute, the horizon passed, or the open was refused.
     */
    openNow: (paymentId: string, resolveInScript = false): Effect.Effect<boolean> =>
      Effect.suspend(() => {
        const payment = state.payments.get(paymentId)
        if (payment === undefined || payment.dispute !== null || input.nowMs() >= input.horizonEndMs) {
          return Effect.succeed(false)
        }
        if (
          (payment.status !== "captured" && payment.status !== "settled") ||
          payment.capturedAmountCents - payment.refundedAmountCents <= 0
        ) return Effect.succeed(false)
        const { entry, open } = plan(payment)
        running++
        return Effect.ensuring(deliver(open, "open"), Effect.sync(() => void running--)).pipe(
          Effect.flatMap((answer) => {
            entry.open = answer
            if (answer === "refused") {
              stats.refusedOpens++
              entry.resolve = "skipped"
              return Effect.succeed(false)
            }
            if (resolveInScript) {
              awaitingScript.set(paymentId, entry)
              return Effect.succeed(true)
            }
            return Effect.as(inBackground(resolveLater(entry, open)), true)
          })
        )
      }),
    /**
     * Resolves now, with its planned outcome, the dispute `openNow(paymentId, true)` opened, and
     * waits for the acknowledgement (so the script's next request meets the outcome); a duplicate
     * or a conflicting resolve may follow in the background. The outcome once acknowledged (null:
     * no such dispute, or the resolve was refused).
     */
    resolveNow: (paymentId: string): Effect.Effect<DisputeOutcome | null> =>
      Effect.suspend(() => {
        const entry = awaitingScript.get(paymentId)
        if (entry === undefined) return Effect.succeed(null)
        awaitingScript.delete(paymentId)
        running++
        return Effect.ensuring(resolve(entry), Effect.sync(() => void running--)).pipe(
          Effect.flatMap(() =>
            Effect.as(inBackground(afterResolve(entry)), entry.resolve === "accepted" ? entry.outcome : null)
          )
        )
      }),
    /** At the end: every dispute opened and resolved exactly once, as notified; reserved money conserved. */
    audit: () => {
      for (const entry of planned) {
        const payment = state.payments.get(entry.paymentId)!
        const dispute = payment.dispute
        if (entry.open === "accepted") {
          auditor.check(
            dispute?.acquirerDisputeId === entry.acquirerDisputeId,
            "dispute-recorded",
            () =>
              `payment ${payment.id}: dispute ${entry.acquirerDisputeId} was acknowledged, the record has ${
                JSON.stringify(dispute)
              }`
          )
        } else {
          auditor.check(
            dispute === null,
            "dispute-recorded",
            () => `payment ${payment.id}: a refused dispute was recorded`
          )
        }
        if (entry.resolve === "accepted") {
          auditor.check(
            dispute?.status === entry.outcome,
            "dispute-resolved-as-notified",
            () =>
              `payment ${payment.id}: resolved ${entry.outcome} was acknowledged, the record says ${dispute?.status}`
          )
        } else if (entry.open === "accepted") {
          auditor.fail(
            "dispute-resolved-once",
            `payment ${payment.id}: dispute ${entry.acquirerDisputeId} was never resolved (${entry.resolve})`
          )
        }
        auditor.check(
          entry.conflicting !== "accepted",
          "dispute-resolved-once",
          () => `payment ${payment.id}: dispute ${entry.acquirerDisputeId} accepted a second, different outcome`
        )
      }
      const reservedByBook = new Map<string, number>()
      for (const payment of state.payments.values()) {
        // One pass over the events: how many of each dispute event, and where each first is
        // (as `indexOf` over their types; no array of types a payment).
        const events = state.events.get(payment.id)
        let opened = 0
        let resolved = 0
        let firstOpened = -1
        let firstResolved = -1
        if (events !== undefined) {
          for (let i = 0; i < events.length; i++) {
            const type = events[i]!.type
            if (type === "payment.dispute_opened") {
              if (opened++ === 0) firstOpened = i
            } else if (type === "payment.dispute_resolved") {
              if (resolved++ === 0) firstResolved = i
            }
          }
        }
        const dispute = payment.dispute
        auditor.check(
          opened === (dispute === null ? 0 : 1) &&
            resolved === (dispute === null || dispute.status === "open" ? 0 : 1) &&
            (resolved === 0 || firstOpened < firstResolved),
          "dispute-resolved-once",
          () =>
            `payment ${payment.id}: ${opened} dispute_opened and ${resolved} dispute_resolved events for dispute ${
              JSON.stringify(dispute)
            }`
        )
        const book = `${payment.merchantId} ${payment.currency}`
        if (dispute?.status === "open") reservedByBook.set(book, (reservedByBook.get(book) ?? 0) + dispute.amountCents)
      }
      // Reserved money is conserved: whatever went in is still held for an open dispute, or came out once.
      const reservedInLedger = new Map<string, number>()
      for (const entries of state.ledger.values()) {
        for (const entry of entries) {
          if (entry.account !== "merchant_reserved") continue
          const book = `${entry.merchantId} ${entry.currency}`
          reservedInLedger.set(
            book,
            (reservedInLedger.get(book) ?? 0) + (entry.direction === "credit" ? entry.amountCents : -entry.amountCents)
          )
        }
      }
      for (const book of new Set([...reservedByBook.keys(), ...reservedInLedger.keys()])) {
        auditor.check(
          (reservedInLedger.get(book) ?? 0) === (reservedByBook.get(book) ?? 0),
          "reserved-conserved",
          () =>
            `${book}: reserved ${reservedInLedger.get(book) ?? 0} in the ledger, open disputes hold ${
              reservedByBook.get(book) ?? 0
            }`
        )
      }
    }
  }
}

export type DisputeInjector = ReturnType<typeof makeDisputeInjector>
