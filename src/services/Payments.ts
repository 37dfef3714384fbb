import { Cause, Clock, Context, Effect, Exit, Fiber, Layer } from "effect"
import * as Metrics from "../platform/Metrics.ts"
import { Webhooks } from "./Webhooks.ts"
import * as Payment from "../domain/Payment.ts"
import * as Dispute from "../domain/Dispute.ts"
import type { Assessment as FraudAssessment, FraudCase, FraudHistory } from "../domain/Fraud.ts"
import type { LedgerEntry } from "../domain/Ledger.ts"
import { Acquirer, AcquirerOutcomeUnknown, type AcquirerRefused, authorizeWithin, operationKeys, type ProcessorCallError } from "../acquirer/Acquirer.ts"
import { AppConfig } from "../platform/Config.ts"
import { Ids } from "../platform/Ids.ts"
import * as Instance from "../platform/Instance.ts"
import { isoAt } from "../platform/Time.ts"
import type { CommandKey, FinishedResponse, IdempotencyClaim, PageOf, PageRequest, PaymentFilter, UpdateOutcome } from "../store/Store.ts"
import { Store, type StoreUnavailable } from "../store/Store.ts"
import { InvalidInput, InvalidState, NotFound, ProcessorUnavailable } from "./Errors.ts"
import { Fraud, historyWindows } from "./Fraud.ts"
import { type FlowEnd, PaymentActors } from "./PaymentActors.ts"

export type CommandError = NotFound | InvalidState | InvalidInput | StoreUnavailable | ProcessorUnavailable

/** Why a change could not go to a remote processor: its outcome is unknown, or the processor refused it. */
export type ProcessorStepError = ProcessorUnavailable | InvalidState

/** A finished response: as sent, and as stored under the request's idempotency key (sealed when it carries a secret). */
export interface Answer {
  readonly status: number
  readonly body: string
  readonly stored: string
}

/** What a create on the fast path needs from its request. */
export interface InlineRequest {
  /** The request's idempotency claim, taken in the create's first commit; null without a key. */
  readonly claim: IdempotencyClaim | null
  /**
   * Called once the claim is committed (the caller must release it if the request then fails),
   * perhaps more than once, and perhaps after the request was interrupted (then before its
   * interruption completes).
   */
  readonly onClaimed: () => void
  /** The response for the payment as committed; stored under the key in the flow's commit. */
  readonly respond: (payment: Payment.Payment) => Answer
}

export type InlineOutcome =
  /** The key is known already (a retry, a replay, a racing request): nothing was done. */
  | { readonly _tag: "KeyTaken"; readonly finished?: FinishedResponse }
  /** `stored`: the answer is stored under the key already; otherwise the caller stores it. */
  | { readonly _tag: "Answered"; readonly answer: Answer; readonly stored: boolean }

export interface PaymentsShape {
  /**
   * The create path (docs/performance.md): one round trip claims the key, inserts the payment
   * and counts the card's attempts; when the acquirer answers at once the whole flow (authorize,
   * screen, capture) is decided inline and committed with the stored response in a second one.
   * Otherwise, or if a racing command moved the payment, the supervised flow takes over.
   */
  readonly createInline: (input: Payment.CreateInput, request: InlineRequest) => Effect.Effect<InlineOutcome, StoreUnavailable>
  /** The general create: also resumes the payment of a claimed key after a crash. */
  readonly create: (
    input: Payment.CreateInput
  ) => Effect.Effect<{ readonly payment: Payment.Payment; readonly created: boolean }, StoreUnavailable>
  readonly get: (merchantId: string, paymentId: string) => Effect.Effect<Payment.Payment, NotFound | StoreUnavailable>
  /** The merchant's payment, or null (`get` without its step that turns null into NotFound: the caller's step does). */
  readonly find: (merchantId: string, paymentId: string) => Effect.Effect<Payment.Payment | null, StoreUnavailable>
  readonly list: (merchantId: string, filter: PaymentFilter, page: PageRequest) => Effect.Effect<PageOf<Payment.Payment>, StoreUnavailable>
  readonly events: (merchantId: string, paymentId: string) => Effect.Effect<ReadonlyArray<Payment.PaymentEvent>, NotFound | StoreUnavailable>
  readonly ledger: (merchantId: string, paymentId: string) => Effect.Effect<ReadonlyArray<LedgerEntry>, NotFound | StoreUnavailable>
  readonly capture: (merchantId: string, paymentId: string, amountCents: number | undefined, key?: CommandKey) => Effect.Effect<Payment.Payment, CommandError>
  readonly refund: (merchantId: string, paymentId: string, amountCents: number | undefined, key?: CommandKey) => Effect.Effect<Payment.Payment, CommandError>
  readonly void: (merchantId: string, paymentId: string, key?: CommandKey) => Effect.Effect<Payment.Payment, CommandError>
  readonly review: (
    merchantId: string,
    caseId: string,
    decision: Payment.ReviewDecision,
    notes: string | null,
    key?: CommandKey
  ) => Effect.Effect<FraudCase, CommandError>
  /**
   * Applies an acquirer's dispute notification (open or resolve) through the one command path.
   * Idempotent on the acquirer's dispute id: a notification already applied changes nothing and
   * answers the record as it is (`applied: false`). Any payment (no merchant scope): the acquirer
   * and the operator's command line speak for the network, not for a merchant.
   */
  readonly applyDisputeNotification: (
    notification: Dispute.DisputeNotification
  ) => Effect.Effect<{ readonly payment: Payment.Payment; readonly applied: boolean }, CommandError>
  /** Settles what was captured before `cutoff`; returns how many payments were swept. */
  readonly settle: (cutoff: string) => Effect.Effect<number, StoreUnavailable>
  /**
   * Restarts (and waits for) the flows of up to one batch of payments left in flight: this
   * instance's own or nobody's untouched since `staleBefore` (a flow that stopped on an error, or
   * was left by a crash of a process without an identity), and with `takeOver` also those no live
   * instance owns (their owner stopped beating, or none is named). They become this instance's first (`Store.claimFlows`), so
   * no other instance resumes them too. Waits for the batch's flows, except those taken over.
   * Returns the batch's size.
   */
  readonly resumeFlows: (options: { readonly staleBefore: string; readonly takeOver: boolean }) => Effect.Effect<number, StoreUnavailable>
}

export class Payments extends Context.Service<Payments, PaymentsShape>()("payments/Payments") {}

/** The outcome a payment event reports, for `payments_total` (null: not an outcome). */
const outcomeOf: Partial<Record<Payment.PaymentEvent["type"], string>> = {
  "payment.authorized": "authorized",
  "payment.authorization_failed": "failed",
  "payment.fraud_blocked": "fraud_blocked",
  "payment.captured": "captured",
  "payment.voided": "voided",
  "payment.refunded": "refunded",
  "payment.settled": "settled"
}

/** Counts a committed change: its events, the outcomes they report and its ledger groups. */
const countChange = (change: Payment.Change) => {
  for (const event of change.events) {
    Metrics.record(Metrics.paymentEvents(event.type), 1)
    const outcome = outcomeOf[event.type]
    if (outcome !== undefined) {
      Metrics.record(Metrics.paymentOutcomes(outcome, outcome === "failed" ? event.data.failure_code ?? "unknown" : ""), 1)
    }
  }
  let group: string | null = null
  for (const entry of change.ledger) {
    Metrics.record(Metrics.ledgerEntries(entry.currency), 1)
    if (entry.groupId !== group) {
      group = entry.groupId
      Metrics.record(Metrics.ledgerPostings(entry.currency), 1)
    }
  }
}

/**
 * The record a finished flow left (what it committed last, or read after a racing command won):
 * the answer of a request that waited for it, with no read. Null while it runs (the wait timed
 * out) or when it stopped on a failure: then the caller reads the payment.
 */
const flowEnd = (fiber: Fiber.Fiber<FlowEnd>): Payment.Payment | null => {
  const exit = fiber.pollUnsafe()
  return exit !== undefined && Exit.isSuccess(exit) && exit.value !== undefined ? exit.value : null
}

const settlementBatch = 500
export const resumeBatch = 500

export const make = Effect.gen(function*() {
  const store = yield* Store
  const webhooks = yield* Webhooks
  /**
   * A committed change: counted, and the dispatcher told when it wrote events. A plain call, made
   * in the step that saw the commit succeed (every caller runs already): no step of its own.
   */
  const recordCommitted = (change: Payment.Change): void => {
    countChange(change)
    if (change.events.length > 0) webhooks.eventsSignal.notify()
  }
  /** `outcome` once `recordCommitted` when it applied a change: the slow path's (`updatePayment`) answer. */
  const recordIfApplied = (outcome: UpdateOutcome): Effect.Effect<UpdateOutcome> => {
    if (outcome._tag === "Applied") recordCommitted(outcome.change)
    return Effect.succeed(outcome)
  }
  const ids = yield* Ids
  const config = yield* AppConfig
  const acquirer = yield* Acquirer
  const fraud = yield* Fraud
  const actors = yield* PaymentActors
  /** This process's instance: the owner of the flows it starts (null: a process without one). */
  const instanceId = yield* Instance.currentId

  /** The domain's context: the time from Effect's Clock (virtual in tests and the simulator) and the id minter. */
  const contextAt = (clock: Clock.Clock): Payment.Context => ({ now: isoAt(clock.currentTimeMillisUnsafe()), mintId: ids.mint })
  const context = Effect.clockWith((clock) => Effect.succeed(contextAt(clock)))
  /**
   * The clock the service was built with, for the steps of a flow: a flow runs apart from any
   * request, on this clock, and reads it without a step of its own (`Effect.clockWith` is one per
   * call, a few per payment). Commands keep the clock of the fiber that runs them.
   */
  const flowClock = yield* Clock.clockWith(Effect.succeed)

  /** A remote processor's operations (`ACQUIRER=stripe`); undefined when captures, voids and refunds are booked locally. */
  const operations = acquirer.operations

  /**
   * Asks a remote processor until its answer is known: a call whose request never arrived or
   * whose answer was lost is asked again under the same idempotency key, after 200 ms, doubling,
   * until ACQUIRER_TIMEOUT from the first call; then the outcome stays unknown
   * (`ProcessorUnavailable`) and nothing is booked. A refusal is a known outcome.
   */
  const untilKnown = <A>(
    operation: string,
    call: (timeoutMs: number) => Effect.Effect<A, ProcessorCallError | AcquirerRefused>
  ): Effect.Effect<A, ProcessorStepError> =>
    Effect.suspend(() => {
      const deadlineMs = flowClock.currentTimeMillisUnsafe() + config.acquirerTimeoutMs
      const ask = (retryDelayMs: number): Effect.Effect<A, ProcessorStepError> => {
        const remainingMs = deadlineMs - flowClock.currentTimeMillisUnsafe()
        if (remainingMs <= 0) return Effect.fail(new ProcessorUnavailable({ operation }))
        return Effect.matchEffect(call(remainingMs), {
          onFailure: (error) =>
            error._tag === "AcquirerRefused"
              ? Effect.fail(new InvalidState({ status: "processor_refused", message: `The card processor refused the ${operation}: ${error.message} (${error.code}).` }))
              : Effect.andThen(
                Effect.sleep(Math.min(retryDelayMs, Math.max(0, deadlineMs - flowClock.currentTimeMillisUnsafe()))),
                Effect.suspend(() => ask(retryDelayMs * 2))
              ),
          onSuccess: Effect.succeed
        })
      }
      return ask(200)
    })

  /**
   * The processor's part of a change, done before the change commits, so the ledger moves only on
   * a known outcome (`Payment.processorOperation` says what is due). Every operation carries the
   * key of `operationKeys`: asked again (a retry, a resumed flow, another instance), the
   * processor does it at most once. `reference` is the processor's id for the authorization
   * when the flow holds it.
   */
  const processorStep = (before: Payment.Payment, change: Payment.Change, reference: string | null): Effect.Effect<void, ProcessorStepError> => {
    if (operations === undefined) return Effect.void
    const operation = Payment.processorOperation(before, change.payment)
    if (operation === null) return Effect.void
    const paymentId = before.id
    const currency = before.currency
    // The reference the flow holds, else the one stored with the authorization.
    const known = reference ?? change.payment.processorReference
    switch (operation._tag) {
      case "Capture":
        return untilKnown("capture", (timeoutMs) =>
          operations.capture({ paymentId, reference: known, idempotencyKey: operationKeys.capture(paymentId), timeoutMs, amountCents: operation.amountCents, currency }))
      case "Refund":
        return untilKnown("refund", (timeoutMs) =>
          operations.refund({
            paymentId,
            reference: known,
            idempotencyKey: operationKeys.refund(paymentId, operation.refundedBeforeCents),
            timeoutMs,
            amountCents: operation.amountCents,
            currency
          }))
      case "Cancel": {
        const cancel = (target: string | null) =>
          untilKnown("cancel", (timeoutMs) => operations.cancel({ paymentId, reference: target, idempotencyKey: operationKeys.cancel(paymentId), timeoutMs }))
        if (known !== null || before.status !== "pending") return cancel(known)
        return Effect.flatMap(claimAuthorization(before), (claimed) => (claimed === "declined" ? Effect.void : cancel(claimed)))
      }
    }
  }

  /**
   * Before an authorization never answered in time is cancelled, its key is claimed: asked once
   * more under the same key, the processor either answers what that key did (the authorization
   * to cancel, found by its reference) or, if the first request never arrived, does it now, so a
   * first request still held somewhere on the way, arriving later, is only a replay of this one
   * and makes no hold of its own. When the processor stays silent for ACQUIRER_TIMEOUT more, the
   * payment's cancel goes without a reference (it cancels whatever the processor finds by our id)
   * and a request still on the way is left to reconciliation. "declined": nothing to cancel.
   */
  const claimAuthorization = (payment: Payment.Payment): Effect.Effect<string | null | "declined"> =>
    untilKnown("authorization", (timeoutMs) =>
      Effect.flatMap(askNetwork(authorizationRequest(payment), timeoutMs), (outcome) =>
        outcome === null ? Effect.fail(new AcquirerOutcomeUnknown({ reason: "no answer within the deadline" })) : Effect.succeed(outcome))
    ).pipe(
      Effect.map((outcome) => (outcome._tag === "Declined" ? "declined" as const : outcome.reference ?? null)),
      Effect.orElseSucceed(() => null)
    )

  /**
   * One command on one payment, serialized per payment in this process. It reads the payment,
   * its fraud case and its key in one round trip, lets the domain decide, and commits the change
   * version-checked in another (docs/performance.md); when another process moved the payment in
   * between, it decides again on the row locked by `updatePayment`.
   */
  const decideThen = <A, E>(
    merchantId: string | null,
    paymentId: string,
    decide: (payment: Payment.Payment, fraudCase: FraudCase | null, context: Payment.Context) => Payment.Decision,
    commandKey: CommandKey | undefined,
    // The caller's answer to the outcome, made in the outcome's own step (still under the lock:
    // it must not wait).
    finish: (outcome: UpdateOutcome) => Effect.Effect<A, E>
  ): Effect.Effect<A, E | StoreUnavailable | ProcessorStepError> =>
    actors.serialize(
      paymentId,
      // Plain steps rather than a generator: every capture, refund and void runs this. (A
      // change is recorded (`recordCommitted`) in the step that saw its commit: no step after the lock's.)
      () => Effect.clockWith((clock): Effect.Effect<A, E | StoreUnavailable | ProcessorStepError> => {
        const ctx = contextAt(clock)
        // Built only when needed (a racing process moved the payment): the common path commits without it.
        const locked = () =>
          Effect.flatMap(store.updatePayment({ merchantId, paymentId, commandKey }, (payment, fraudCase) => decide(payment, fraudCase, ctx)), (outcome) => {
            if (outcome._tag === "Applied") recordCommitted(outcome.change)
            return finish(outcome)
          })
        const readForCommand = store.readForCommand
        if (readForCommand === undefined) {
          return operations === undefined ? locked() : Effect.die(new Error("a remote processor needs a store with readForCommand"))
        }
        // With a remote processor the processor acts first and the change commits on its known
        // outcome; a change that then loses a race is decided again on a fresh read (never under
        // the row lock, which must not wait on the network), each time under the same keys.
        const attempt = (races: number): Effect.Effect<A, E | StoreUnavailable | ProcessorStepError> =>
          Effect.flatMap(readForCommand({ merchantId, paymentId, commandKey }), (read) => {
            if (read === null) return finish({ _tag: "NotFound" })
            if (read.alreadyApplied) return finish({ _tag: "AlreadyApplied", payment: read.payment })
            const decision = decide(read.payment, read.fraudCase, ctx)
            if (!decision.ok) return finish({ _tag: "Refused", decision, payment: read.payment })
            const commit = Effect.flatMap(
              store.commitChange({ before: read.payment, change: decision.change, response: null, commandKey }),
              (done): Effect.Effect<A, E | StoreUnavailable | ProcessorStepError> => {
                if (!done) return operations === undefined ? locked() : races < 5 ? attempt(races + 1) : Effect.fail(new ProcessorUnavailable({ operation: "a command that kept losing races" }))
                recordCommitted(decision.change)
                return finish({ _tag: "Applied", change: decision.change })
              }
            )
            return operations === undefined ? commit : Effect.andThen(processorStep(read.payment, decision.change, null), commit)
          })
        return attempt(0)
      })
    )

  /** `decideThen` answering the outcome itself. */
  const apply = (
    merchantId: string | null,
    paymentId: string,
    decide: (payment: Payment.Payment, fraudCase: FraudCase | null, context: Payment.Context) => Payment.Decision,
    commandKey?: CommandKey
  ): Effect.Effect<UpdateOutcome, StoreUnavailable | ProcessorStepError> => decideThen(merchantId, paymentId, decide, commandKey, Effect.succeed)

  /** A command's answer: the payment as it left it (counted and announced when it changed), or why not. */
  const command = (
    merchantId: string,
    paymentId: string,
    decide: (payment: Payment.Payment, fraudCase: FraudCase | null, context: Payment.Context) => Payment.Decision,
    commandKey?: CommandKey
  ): Effect.Effect<Payment.Payment, CommandError> =>
    decideThen(merchantId, paymentId, decide, commandKey, (outcome) => toResult(paymentId, outcome))

  /**
   * A step of a payment's flow, decided on the record the flow holds (the one it created or last
   * committed) and committed version-checked against it: no read first. When another command
   * moved the payment meanwhile, the commit finds a newer version and the step is decided again
   * on the row locked by `updatePayment`, as `apply` does.
   */
  const applyFlowStep = (
    held: Payment.Payment,
    decide: (payment: Payment.Payment, context: Payment.Context) => Payment.Decision,
    reference: string | null
  ): Effect.Effect<UpdateOutcome, StoreUnavailable | ProcessorStepError> =>
    actors.serialize(
      held.id,
      // Plain steps rather than a generator: every payment's flow commits here.
      (): Effect.Effect<UpdateOutcome, StoreUnavailable | ProcessorStepError> => {
        const ctx = contextAt(flowClock)
        const decision = decide(held, ctx)
        // With a remote processor a step refused on the held record, or one that loses a race,
        // is not decided again under the row lock (which must not wait on the network): the flow
        // reads the payment again and takes its next round.
        const moved: UpdateOutcome = {
          _tag: "Refused",
          decision: { ok: false, refusal: { _tag: "InvalidState", status: held.status, message: "The payment moved while its flow decided." } },
          payment: held
        }
        // Built only when needed (a racing command moved the payment, or the step was refused on the held record).
        const locked = () =>
          operations === undefined
            ? Effect.flatMap(store.updatePayment({ merchantId: null, paymentId: held.id }, (payment) => decide(payment, ctx)), recordIfApplied)
            : Effect.succeed(moved)
        if (!decision.ok) return locked()
        const commit = Effect.flatMap(store.commitChange({ before: held, change: decision.change, response: null }), (done) => {
          if (!done) return locked()
          recordCommitted(decision.change)
          return Effect.succeed({ _tag: "Applied", change: decision.change } as const)
        })
        return operations === undefined ? commit : Effect.andThen(processorStep(held, decision.change, reference), commit)
      }
    )

  const toResult = (paymentId: string, outcome: UpdateOutcome): Effect.Effect<Payment.Payment, CommandError> => {
    switch (outcome._tag) {
      case "Applied":
        return Effect.succeed(outcome.change.payment)
      case "AlreadyApplied":
        return Effect.succeed(outcome.payment)
      case "NotFound":
        return Effect.fail(new NotFound({ resource: "transaction", id: paymentId }))
      case "Refused": {
        const refusal = outcome.decision.refusal
        return refusal._tag === "InvalidState"
          ? Effect.fail(new InvalidState({ status: refusal.status, message: refusal.message }))
          : Effect.fail(new InvalidInput({ param: refusal.param, message: refusal.message }))
      }
    }
  }

  const authorizationRequest = (payment: Payment.Payment) => ({
    paymentId: payment.id,
    merchantId: payment.merchantId,
    amountCents: payment.amountCents,
    currency: payment.currency,
    cardToken: payment.cardToken,
    cardBrand: payment.cardBrand
  })

  const flowSteps = (
    payment: Payment.Payment,
    authorization: Payment.AuthorizationOutcome | null,
    screening: FraudAssessment | null,
    ctx: Payment.Context
  ) => Payment.advanceFlow(payment, authorization, screening, config.fraudThresholds, ctx)

  const askNetwork = authorizeWithin(acquirer)
  /** The processor's id for an authorization it just approved, when it gave one. */
  const reference = (authorization: Payment.AuthorizationOutcome | null): string | null =>
    authorization?._tag === "Approved" ? authorization.reference ?? null : null
  const timedOut: Payment.AuthorizationOutcome = {
    _tag: "Declined",
    code: Payment.networkTimeoutCode,
    message: "The card network did not answer in time."
  }

  /**
   * Asks the network until ACQUIRER_TIMEOUT from now. Transport failures are retried (the
   * acquirer is idempotent on the payment id) after 200 ms, doubling; every call and every wait
   * is cut at the deadline, which the transport keeps itself (no timer fibers), and passing it
   * declines the payment with `network_timeout`. Called when the flow's step runs (the deadline
   * is read from the flow's clock then, without a step of its own).
   */
  const authorizeNow = <A, E>(
    payment: Payment.Payment,
    // What the flow does with the answer, run as the answer's own step (no flatMap after it).
    then: (outcome: Payment.AuthorizationOutcome) => Effect.Effect<A, E>
  ): Effect.Effect<A, E> => {
    const request = authorizationRequest(payment)
    const deadlineMs = flowClock.currentTimeMillisUnsafe() + config.acquirerTimeoutMs
    const retryAfterFailure = (retryDelayMs: number): Effect.Effect<A, E> => {
      const remainingMs = deadlineMs - flowClock.currentTimeMillisUnsafe()
      return remainingMs <= 0
        ? then(timedOut)
        : Effect.andThen(Effect.sleep(Math.min(retryDelayMs, remainingMs)), Effect.suspend(() => ask(retryDelayMs * 2)))
    }
    const ask = (retryDelayMs: number): Effect.Effect<A, E> => {
      const remainingMs = deadlineMs - flowClock.currentTimeMillisUnsafe()
      if (remainingMs <= 0) return then(timedOut)
      return Effect.matchEffect(askNetwork(request, remainingMs), {
        onFailure: () => retryAfterFailure(retryDelayMs),
        onSuccess: (outcome) => then(outcome ?? timedOut)
      })
    }
    return ask(200)
  }

  /**
   * An approval that may be a remote processor's stored answer to an authorization it has since
   * cancelled: a flow whose authorization was never answered in time cancels it before it commits
   * `network_timeout`, and when that cancel's own outcome stays unknown the flow stops with the
   * payment still pending; resumed, it asks again under the same key and the processor replays its
   * approval. So a flow older than half of ACQUIRER_TIMEOUT (only such a flow can have sent that
   * cancel) looks the authorization up first, and a cancelled one is read as unanswered in time
   * (the cancel is asked again, idempotently, before the failure commits).
   */
  const unlessCancelled = <A, E>(
    payment: Payment.Payment,
    outcome: Payment.AuthorizationOutcome,
    then: (outcome: Payment.AuthorizationOutcome) => Effect.Effect<A, E>
  ): Effect.Effect<A, E | ProcessorStepError> => {
    if (operations === undefined || outcome._tag !== "Approved") return then(outcome)
    if (flowClock.currentTimeMillisUnsafe() - Date.parse(payment.createdAt) < config.acquirerTimeoutMs / 2) return then(outcome)
    return Effect.matchEffect(operations.lookup({ paymentId: payment.id, reference: outcome.reference ?? null, timeoutMs: config.acquirerTimeoutMs }), {
      onFailure: () => Effect.fail(new ProcessorUnavailable({ operation: "lookup" })),
      onSuccess: (record) => then(record !== null && record.cancelled ? timedOut : outcome)
    })
  }

  /**
   * An approval this flow holds that the books will never hold: another instance ended the payment
   * meanwhile (it timed the authorization out, its cancel finding nothing yet, while this
   * instance's request was held). The processor's authorization is cancelled, under a key naming
   * it (`operationKeys.cancel`'s `late`), so the cardholder's money is not held for nothing.
   */
  const cancelStranded = (latest: Payment.Payment | null, authorization: Payment.AuthorizationOutcome | null): Effect.Effect<void, ProcessorStepError> => {
    if (operations === undefined || authorization?._tag !== "Approved" || latest === null || latest.status === "pending") return Effect.void
    const late = authorization.reference
    if (late === undefined || latest.processorReference === late) return Effect.void
    return Effect.andThen(
      Effect.logWarning(`payment ${latest.id} ended ${latest.status} before its authorization ${late} arrived: cancelling it at the processor`),
      untilKnown("cancel", (timeoutMs) =>
        operations.cancel({ paymentId: latest.id, reference: late, idempotencyKey: operationKeys.cancel(latest.id, late), timeoutMs }))
    )
  }

  /**
   * The other side of that race: this flow gave up on an authorization (no answer in time), and
   * its cancel reached the processor, while another instance, its request answered, booked the
   * authorization as `authorized`. The processor holds nothing for it any more: the payment is
   * voided (through the command path, whose own cancel replays this one's), so the books say
   * what the processor does.
   */
  const voidCancelled = (latest: Payment.Payment | null, authorization: Payment.AuthorizationOutcome | null): Effect.Effect<void, StoreUnavailable | ProcessorStepError> => {
    if (operations === undefined || latest === null || latest.status !== "authorized") return Effect.void
    if (authorization?._tag !== "Declined" || authorization.code !== Payment.networkTimeoutCode) return Effect.void
    return Effect.andThen(
      Effect.logWarning(`payment ${latest.id}: its authorization was cancelled at the processor after no answer in time, as another instance booked it: voiding it`),
      apply(null, latest.id, (p, _, ctx) => Payment.voidAuthorization(p, ctx))
    )
  }

  /**
   * Drives a payment through authorize → screen → capture until the domain says it is done.
   * What the network and the fraud model say is gathered first; then everything up to the next
   * wait commits as one unit of work: authorization, screening and an automatic capture are
   * one transaction with the events and ledger groups of each step.
   */
  const runFlow = (
    paymentId: string,
    initial: Payment.Payment | null,
    createdHistory: FraudHistory | null
  ): Effect.Effect<Payment.Payment | undefined, StoreUnavailable | ProcessorStepError> => {
    // Plain steps rather than a generator (every payment runs this), one round per call:
    // `history` is the history the create read with its insert, which scores the first screening,
    // as on the inline path (docs/fraud-model.md); a flow resumed later, or a second screening,
    // reads it again.
    const round = (
      payment: Payment.Payment | null,
      history: FraudHistory | null,
      rounds: number
    ): Effect.Effect<Payment.Payment | undefined, StoreUnavailable | ProcessorStepError> => {
      if (rounds >= 10) return Effect.die(new Error(`payment ${paymentId}: flow did not finish within 10 rounds`))
      if (payment === null) return Effect.succeed(undefined)
      const step = Payment.nextStep(payment)
      if (step === null) return Effect.succeed(payment)
      const commitStep = (authorization: Payment.AuthorizationOutcome | null, screening: FraudAssessment | null, next: FraudHistory | null) =>
        Effect.flatMap(applyFlowStep(payment, (locked, ctx) => flowSteps(locked, authorization, screening, ctx), reference(authorization)), (outcome) =>
          // The committed record is the next starting point; after a refusal (a racing command won), read it again.
          outcome._tag === "Applied"
            ? round(outcome.change.payment, next, rounds + 1)
            : Effect.flatMap(store.getPayment(null, paymentId), (latest) =>
              Effect.andThen(
                Effect.andThen(cancelStranded(latest, authorization), voidCancelled(latest, authorization)),
                Effect.flatMap(store.getPayment(null, paymentId), (now) => round(now, next, rounds + 1))
              )))
      const screenAndCommit = (authorization: Payment.AuthorizationOutcome | null) => {
        if (step === "capture" || authorization?._tag === "Declined") return commitStep(authorization, null, history)
        const screened = authorization?._tag === "Approved" ? { ...payment, networkRiskSignal: authorization.networkRiskSignal } : payment
        return history === null
          ? Effect.flatMap(fraud.assess(screened), (screening) => commitStep(authorization, screening, null))
          : commitStep(authorization, fraud.score(screened, history), null)
      }
      return step === "authorize" ? authorizeNow(payment, (outcome) => unlessCancelled(payment, outcome, screenAndCommit)) : screenAndCommit(null)
    }
    // Built when it runs: a flow started while another runs is dropped before it does anything.
    return Effect.suspend(() =>
      initial !== null
        ? round(initial, createdHistory, 0)
        : Effect.flatMap(store.getPayment(null, paymentId), (payment) => round(payment, createdHistory, 0))
    )
  }

  /** A supervised flow: failures are logged and the payment stays in flight for the recovery worker. */
  const startFlow = (paymentId: string, initial: Payment.Payment | null = null, history: FraudHistory | null = null) =>
    actors.startFlow(
      paymentId,
      runFlow(paymentId, initial, history).pipe(
        // The annotation on the one line the flow logs, not around the whole flow (a FiberRef
        // set and restored, ~10 steps, for every payment).
        Effect.catchCause((cause) =>
          Effect.logWarning(`flow of ${paymentId} stopped; recovery will resume it`, cause).pipe(Effect.annotateLogs("payment_id", paymentId))
        )
      )
    )

  const mustGet = (merchantId: string, paymentId: string) =>
    Effect.flatMap(store.getPayment(merchantId, paymentId), (payment) =>
      payment === null ? Effect.fail(new NotFound({ resource: "transaction", id: paymentId })) : Effect.succeed(payment))

  /** The flow in the request itself, when the acquirer answers at once; false when it cannot (or lost a race). */
  const finishInline = (payment: Payment.Payment, history: FraudHistory, request: InlineRequest) =>
    Effect.gen(function*() {
      const authorization = acquirer.answerNow?.(authorizationRequest(payment))
      if (authorization === undefined) return null
      const screening = authorization._tag === "Approved"
        ? fraud.score({ ...payment, networkRiskSignal: authorization.networkRiskSignal }, history)
        : null
      const decision = flowSteps(payment, authorization, screening, yield* context)
      if (!decision.ok) return null
      const answer = request.respond(decision.change.payment)
      const claim = request.claim
      const done = yield* store.commitChange({
        before: payment,
        change: decision.change,
        response: claim === null ? null : { merchantId: claim.merchantId, key: claim.key, status: answer.status, body: answer.stored }
      })
      if (!done) return null
      recordCommitted(decision.change)
      return answer
    })

  const service: PaymentsShape = {
    // Plain steps rather than generators: every payment is created here.
    createInline: (input, request) =>
      // One mask around the whole create (plain steps: every payment is created here). Its body
      // runs when the create does, so the time is read there (from the flows' clock, with no step
      // of its own); its failure side is `Effect.onInterrupt`'s without that combinator's steps.
      Effect.uninterruptibleMask((restore) => {
        const decision = Payment.create(input, contextAt(flowClock))
        if (!decision.ok) return Effect.die(new Error("create cannot be refused"))
        const payment = decision.change.payment
        // The network will answer later (or a racing command moved the payment): the supervised
        // flow goes on, scoring on the history just read, and the answer waits for it up to the
        // request deadline.
        const answerLater = (history: FraudHistory) =>
          Effect.flatMap(startFlow(payment.id, payment, history), (fiber) =>
            actors.awaitFlow(fiber, config.requestDeadlineMs, () => {
              const answered = (latest: Payment.Payment): InlineOutcome => ({ _tag: "Answered", answer: request.respond(latest), stored: false })
              const end = flowEnd(fiber)
              return end !== null ? Effect.succeed(answered(end)) : Effect.map(store.getPayment(null, payment.id), (latest) => answered(latest ?? payment))
            }))
        const inline = Effect.flatMap(
          // `onClaimed` goes with the unit too: a request interrupted while its statement runs
          // never gets here, yet must release the claim the statement committed (Store.OpenPayment).
          store.openPayment({
            change: decision.change,
            claim: request.claim,
            history: historyWindows(payment.createdAt),
            onClaimed: request.onClaimed,
            flowOwner: instanceId
          }),
          (opened): Effect.Effect<InlineOutcome, StoreUnavailable> => {
            if (opened._tag === "KeyTaken") return Effect.succeed(opened)
            request.onClaimed()
            recordCommitted(decision.change)
            // An acquirer that never answers at once (the simulated network) skips the attempt.
            if (acquirer.answerNow === undefined) return answerLater(opened.history)
            return Effect.flatMap(finishInline(payment, opened.history, request), (answer) =>
              answer === null ? answerLater(opened.history) : Effect.succeed({ _tag: "Answered", answer, stored: request.claim !== null } as const))
          }
        )
        // A client that hangs up (or a stop) once the payment may exist does not leave it pending
        // until the recovery worker finds it: the supervised flow takes over at once (it reads the
        // payment first, and stops if the insert never happened; when it runs already, that one
        // goes on).
        return Effect.matchCauseEffect(restore(inline), {
          onFailure: (cause) => Cause.hasInterruptsOnly(cause) ? Effect.andThen(startFlow(payment.id), Effect.failCause(cause)) : Effect.failCause(cause),
          onSuccess: Effect.succeed
        })
      }),
    create: (input) =>
      Effect.gen(function*() {
        const decision = Payment.create(input, yield* context)
        if (!decision.ok) return yield* Effect.die(new Error("create cannot be refused"))
        const inserted = yield* store.insertPayment(decision.change, instanceId)
        if (inserted._tag === "Inserted") recordCommitted(decision.change)
        const payment = inserted._tag === "Inserted" ? decision.change.payment : inserted.payment
        const fiber = yield* startFlow(payment.id, payment)
        // Answer with the record as the flow left it; past the deadline the flow goes on alone.
        const latest = yield* actors.awaitFlow(fiber, config.requestDeadlineMs, () => {
          const end = flowEnd(fiber)
          return end !== null ? Effect.succeed(end) : store.getPayment(null, payment.id)
        })
        return { payment: latest ?? payment, created: inserted._tag === "Inserted" }
      }),
    get: mustGet,
    find: (merchantId, paymentId) => store.getPayment(merchantId, paymentId),
    list: (merchantId, filter, page) => store.listPayments(merchantId, filter, page),
    events: (merchantId, paymentId) =>
      Effect.andThen(mustGet(merchantId, paymentId), store.listEvents(merchantId, paymentId)),
    ledger: (merchantId, paymentId) =>
      Effect.andThen(mustGet(merchantId, paymentId), store.listLedger(merchantId, paymentId)),
    capture: (merchantId, paymentId, amountCents, key) =>
      command(merchantId, paymentId, (p, _, ctx) => Payment.capture(p, amountCents, ctx), key),
    refund: (merchantId, paymentId, amountCents, key) =>
      command(merchantId, paymentId, (p, _, ctx) => Payment.refund(p, amountCents, ctx), key),
    void: (merchantId, paymentId, key) =>
      command(merchantId, paymentId, (p, _, ctx) => Payment.voidAuthorization(p, ctx), key),
    review: (merchantId, caseId, decision, notes, key) =>
      Effect.gen(function*() {
        const fraudCase = yield* store.getFraudCase(merchantId, caseId)
        if (fraudCase === null) return yield* Effect.fail(new NotFound({ resource: "fraud_case", id: caseId }))
        const outcome = yield* apply(merchantId, fraudCase.paymentId, (p, current, ctx) => {
          if (current === null || current.id !== caseId) {
            return { ok: false, refusal: { _tag: "InvalidState", status: p.status, message: "The fraud case no longer belongs to its payment." } }
          }
          return Payment.review(p, current, decision, notes, ctx)
        }, key)
        if (outcome._tag === "Refused") {
          const refusal = outcome.decision.refusal
          return yield* Effect.fail(new InvalidState({ status: fraudCase.status, message: refusal.message }))
        }
        const payment = yield* toResult(fraudCase.paymentId, outcome)
        // A released payment continues its flow (capture when automatic); like create, the answer
        // waits for it up to the request deadline.
        if (Payment.nextStep(payment) !== null) {
          const fiber = yield* startFlow(payment.id, payment)
          yield* actors.awaitFlow(fiber, config.requestDeadlineMs, () => Effect.void)
        }
        const reviewed = yield* store.getFraudCase(merchantId, caseId)
        return reviewed ?? fraudCase
      }),
    applyDisputeNotification: (notification) =>
      Effect.gen(function*() {
        const outcome = yield* apply(null, notification.paymentId, (p, _, ctx) => Dispute.apply(p, notification, ctx))
        if (outcome._tag === "Refused" && Dispute.alreadyApplied(outcome.payment, notification)) {
          return { payment: outcome.payment, applied: false }
        }
        return { payment: yield* toResult(notification.paymentId, outcome), applied: outcome._tag === "Applied" }
      }),
    settle: (cutoff) =>
      Effect.gen(function*() {
        let settled = 0
        while (true) {
          const batch = yield* store.settleablePayments(cutoff, settlementBatch)
          let progressed = 0
          for (const paymentId of batch) {
            // Settlement asks nothing of a processor (Payment.processorOperation): its errors cannot happen here.
            const outcome = yield* Effect.catchTags(apply(null, paymentId, (p, _, ctx) => Payment.settle(p, ctx)), {
              ProcessorUnavailable: Effect.die,
              InvalidState: Effect.die
            })
            if (outcome._tag === "Applied") progressed++
          }
          settled += progressed
          if (batch.length < settlementBatch || progressed === 0) return settled
        }
      }),
    resumeFlows: ({ staleBefore, takeOver }) =>
      Effect.flatMap(
        store.claimFlows({ owner: instanceId, now: isoAt(flowClock.currentTimeMillisUnsafe()), staleBefore, takeOver, limit: resumeBatch }),
        (inFlight) =>
        inFlight.length === 0
          ? Effect.succeed(0)
          : Effect.gen(function*() {
            const flows = yield* Effect.forEach(inFlight, (paymentId) => startFlow(paymentId))
            // A stale pass goes one batch at a time: its next query must not find this batch's
            // flows still running. Flows taken over are this instance's now (no later pass
            // claims them again), and a pass that waited for them (up to ACQUIRER_TIMEOUT) would
            // hold back the flows of another instance that died meanwhile.
            if (!takeOver) yield* Effect.forEach(flows, Fiber.await, { discard: true })
            return inFlight.length
          })
      )
  }
  return service
})

export const layer = Layer.effect(Payments, make)

