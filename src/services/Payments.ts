import { Cause, Clock, Context, Effect, Exit, Fiber, Layer, Result } from "effect"
import { Acquirer, type AcquirerShape, type AuthorizationRequest, authorizeWithin } from "../acquirer/Acquirer.ts"
import * as Dispute from "../domain/Dispute.ts"
import type { Assessment as FraudAssessment, FraudCase, FraudHistory } from "../domain/Fraud.ts"
import type { LedgerEntry } from "../domain/Ledger.ts"
import * as Payment from "../domain/Payment.ts"
import { AppConfig } from "../platform/Config.ts"
import { Ids } from "../platform/Ids.ts"
import * as Instance from "../platform/Instance.ts"
import * as Metrics from "../platform/Metrics.ts"
import type {
  CommandKey,
  FinishedResponse,
  IdempotencyClaim,
  PageOf,
  PageRequest,
  PaymentFilter,
  StoredResponse,
  UpdateOutcome
} from "../store/Store.ts"
import { Store, type StoreShape, type StoreUnavailable } from "../store/Store.ts"
import { InvalidInput, InvalidState, NotFound, ProcessorUnavailable } from "./Errors.ts"
import { Fraud, type FraudShape, historyWindows } from "./Fraud.ts"
import { type FlowEnd, PaymentActors } from "./PaymentActors.ts"
import { makeProcessorSteps, type ProcessorStepError } from "./ProcessorSteps.ts"
import { Webhooks } from "./Webhooks.ts"

export type CommandError = NotFound | InvalidState | InvalidInput | StoreUnavailable | ProcessorUnavailable

/** Why a change could not go to a remote processor: its outcome is unknown, or the processor refused it. */
export type { ProcessorStepError } from "./ProcessorSteps.ts"

/**
 * A create's response, made by the caller from the payment as committed: `reply` as sent, and
 * `stored` under the request's idempotency key in the flow's commit (null: no key).
 */
export interface CreateResponse<R> {
  readonly reply: R
  readonly stored: StoredResponse | null
}

/** What a create on the fast path needs from its request. */
export interface InlineRequest<R> {
  /** The request's idempotency claim, taken with the payment; null without a key. */
  readonly claim: IdempotencyClaim | null
  /** The response to the payment as committed. */
  readonly respond: (payment: Payment.Payment) => CreateResponse<R>
}

export type InlineOutcome<R> =
  /** The key is known already (a retry, a replay, a racing request): nothing was written. */
  | { readonly _tag: "KeyTaken"; readonly finished?: FinishedResponse }
  /** `stored`: the response is stored under the key already (with the payment, or in the flow's commit). */
  | { readonly _tag: "Created"; readonly reply: R; readonly stored: boolean }

export interface PaymentsShape {
  /**
   * The create path (docs/performance.md). When the acquirer answers at once, one round trip
   * reads the request's key and the card's history for the fraud model, the whole flow
   * (authorize, screen, capture) is decided here, and a second writes the payment once, as the
   * flow left it, with the key claimed finished under its response (`makeCreateOnce`).
   * Otherwise one round trip inserts the payment, claims the key and reads the history, and the
   * supervised flow goes on; the response is the record it left by the request deadline. That
   * claim, once committed, is the request's: a failure, a hang-up or a stop after that releases
   * it (before, the store does: `OpenPayment.claim`), and the payment's flow takes over at once.
   */
  readonly createInline: <R>(
    input: Payment.CreateInput,
    request: InlineRequest<R>
  ) => Effect.Effect<InlineOutcome<R>, StoreUnavailable>
  /** The general create: also resumes the payment of a claimed key after a crash. */
  readonly create: (
    input: Payment.CreateInput
  ) => Effect.Effect<{ readonly payment: Payment.Payment; readonly created: boolean }, StoreUnavailable>
  readonly get: (merchantId: string, paymentId: string) => Effect.Effect<Payment.Payment, NotFound | StoreUnavailable>
  /** The merchant's payment, or null (`get` without its step that turns null into NotFound: the caller's step does). */
  readonly find: (merchantId: string, paymentId: string) => Effect.Effect<Payment.Payment | null, StoreUnavailable>
  readonly list: (
    merchantId: string,
    filter: PaymentFilter,
    page: PageRequest
  ) => Effect.Effect<PageOf<Payment.Payment>, StoreUnavailable>
  readonly events: (
    merchantId: string,
    paymentId: string
  ) => Effect.Effect<ReadonlyArray<Payment.PaymentEvent>, NotFound | StoreUnavailable>
  readonly ledger: (
    merchantId: string,
    paymentId: string
  ) => Effect.Effect<ReadonlyArray<LedgerEntry>, NotFound | StoreUnavailable>
  readonly capture: (
    merchantId: string,
    paymentId: string,
    amountCents: number | undefined,
    key?: CommandKey
  ) => Effect.Effect<Payment.Payment, CommandError>
  readonly refund: (
    merchantId: string,
    paymentId: string,
    amountCents: number | undefined,
    key?: CommandKey
  ) => Effect.Effect<Payment.Payment, CommandError>
  readonly void: (
    merchantId: string,
    paymentId: string,
    key?: CommandKey
  ) => Effect.Effect<Payment.Payment, CommandError>
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
  /**
   * Takes back a refund the processor accepted and later failed (`Payment.refundFailed`), once
   * per refund: one applied already changes nothing and answers the record as it is
   * (`applied: false`).
   */
  readonly applyRefundFailure: (
    failure: { readonly paymentId: string; readonly refundId: string; readonly amountCents: number }
  ) => Effect.Effect<{ readonly payment: Payment.Payment; readonly applied: boolean }, CommandError>
  /** Settles what was captured before `cutoff`; returns how many payments were swept. */
  readonly settle: (cutoff: number) => Effect.Effect<number, StoreUnavailable>
  /**
   * Restarts (and waits for) the flows of up to one batch of payments left in flight: this
   * instance's own or nobody's untouched since `staleBefore` (a flow that stopped on an error, or
   * was left by a crash of a process without an identity), and with `takeOver` also those no live
   * instance owns (their owner stopped beating, or none is named). They become this instance's first (`Store.claimFlows`), so
   * no other instance resumes them too. Waits for the batch's flows, except those taken over.
   * Returns the batch's size.
   */
  readonly resumeFlows: (
    options: { readonly staleBefore: number; readonly takeOver: boolean }
  ) => Effect.Effect<number, StoreUnavailable>
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
      Metrics.record(
        Metrics.paymentOutcomes(outcome, outcome === "failed" ? event.data.failure_code ?? "unknown" : ""),
        1
      )
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

/**
 * A decision as it commits with a remote processor (`Payment.owingFor`): a capture or refund is
 * recorded as owed, to be booked once the processor answers; a release is booked with the
 * cancel it owes. Without one (`remote` false), the decision itself.
 */
const owingAtProcessor = (remote: boolean) =>
<Args extends ReadonlyArray<unknown>>(
  decide: (payment: Payment.Payment, ...rest: Args) => Payment.Decision
): (payment: Payment.Payment, ...rest: Args) => Payment.Decision =>
  !remote ? decide : (payment, ...rest) => {
    const decision = decide(payment, ...rest)
    const ctx = rest[rest.length - 1] as Payment.Context
    return decision.ok ? { ok: true, change: Payment.owingFor(payment, decision.change, ctx) } : decision
  }

/** A command's outcome as its answer: the payment, or why not. */
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

const settlementBatch = 500

/** What a payment asks of the card network. */
const authorizationRequest = (payment: Payment.Payment): AuthorizationRequest => ({
  paymentId: payment.id,
  merchantId: payment.merchantId,
  amountCents: payment.amountCents,
  currency: payment.currency,
  cardToken: payment.cardToken,
  cardBrand: payment.cardBrand
})

const timedOut: Payment.AuthorizationOutcome = {
  _tag: "Declined",
  code: Payment.networkTimeoutCode,
  message: "The card network did not answer in time."
}
export const resumeBatch = 500

/**
 * A create whose authorization is known before anything is written (the acquirer answers at
 * once): one round trip reads the key's state and the history, the whole flow is decided here,
 * and the payment is written once, as the flow left it, with every event, its ledger and the
 * response stored under the key it claims in that same commit. Null when the acquirer cannot
 * answer at once, or the flow cannot be decided on the new payment here: the general path runs.
 */
const makeCreateOnce = (deps: {
  readonly acquirer: AcquirerShape
  readonly store: StoreShape
  readonly fraud: FraudShape
  readonly flowSteps: (
    payment: Payment.Payment,
    authorization: Payment.AuthorizationOutcome,
    screening: FraudAssessment | null,
    ctx: Payment.Context
  ) => Payment.Decision
  readonly recordCommitted: (change: Payment.Change) => void
  readonly instanceId: string | null
  /** The flow's context, taken once the history is read. */
  readonly context: Effect.Effect<Payment.Context>
}) =>
  Effect.fnUntraced(function*<R>(
    created: Payment.Change,
    request: InlineRequest<R>
  ): Effect.fn.Return<InlineOutcome<R> | null, StoreUnavailable> {
    const { fraud, store } = deps
    const payment = created.payment
    const authorization = deps.acquirer.answerNow?.(authorizationRequest(payment))
    if (authorization === undefined) return null
    const read = yield* store.readForCreate({
      payment,
      claim: request.claim,
      history: historyWindows(payment.createdAt)
    })
    if (read._tag === "KeyTaken") return read
    const screening = authorization._tag === "Approved"
      ? fraud.score({ ...payment, networkRiskSignal: authorization.networkRiskSignal }, read.history)
      : null
    const flow = deps.flowSteps(payment, authorization, screening, yield* deps.context)
    if (!flow.ok) return null
    const change = Payment.followedBy(created, flow.change)
    const response = request.respond(change.payment)
    const written = yield* store.insertCreated({
      change,
      claim: request.claim,
      response: response.stored,
      flowOwner: deps.instanceId
    })
    // The key was claimed meanwhile by a racing request with it: nothing was written.
    if (!written) return { _tag: "KeyTaken" }
    deps.recordCommitted(change)
    return { _tag: "Created", reply: response.reply, stored: response.stored !== null }
  })

export const make = Effect.gen(function*() {
  const store = yield* Store
  const webhooks = yield* Webhooks
  /**
   * A committed change: counted, and the dispatcher told when it wrote events. A plain call, made
   * where the commit was seen to succeed.
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
  const contextAt = (clock: Clock.Clock): Payment.Context => ({
    now: clock.currentTimeMillisUnsafe(),
    mintId: ids.mint
  })
  const context = Effect.clockWith((clock) => Effect.succeed(contextAt(clock)))
  /**
   * The clock the service was built with, for the steps of a flow: a flow runs apart from any
   * request, on this clock. Commands keep the clock of the fiber that runs them.
   */
  const flowClock = yield* Clock.clockWith(Effect.succeed)

  /** A remote processor's operations (`ACQUIRER=stripe`); undefined when captures, voids and refunds are booked locally. */
  const operations = acquirer.operations

  const { resolvePending, settleOwed } = makeProcessorSteps({
    operations,
    store,
    config,
    flowClock,
    authorize: (payment, timeoutMs) => askNetwork(authorizationRequest(payment), timeoutMs),
    applyFlowStep: (held, decide) => applyFlowStep(held, decide)
  })

  /**
   * One command on one payment, serialized per payment in this process. It reads the payment,
   * its fraud case and its key in one round trip, lets the domain decide, and commits the change
   * version-checked in another (docs/performance.md); when another process moved the payment in
   * between, it decides again on the row locked by `updatePayment`.
   */
  const decideCommand = (
    merchantId: string | null,
    paymentId: string,
    decide: (payment: Payment.Payment, fraudCase: FraudCase | null, context: Payment.Context) => Payment.Decision,
    commandKey: CommandKey | undefined
  ): Effect.Effect<UpdateOutcome, StoreUnavailable> =>
    actors.serialize(paymentId, decideLocked(merchantId, paymentId, withProcessor(decide), commandKey))

  /** `decideCommand` under the payment's lock. */
  const decideLocked = Effect.fnUntraced(function*(
    merchantId: string | null,
    paymentId: string,
    decide: (payment: Payment.Payment, fraudCase: FraudCase | null, context: Payment.Context) => Payment.Decision,
    commandKey: CommandKey | undefined
  ): Effect.fn.Return<UpdateOutcome, StoreUnavailable> {
    const ctx = yield* context
    if (store.readForCommand !== undefined) {
      const read = yield* store.readForCommand({ merchantId, paymentId, commandKey })
      if (read === null) return { _tag: "NotFound" }
      if (read.alreadyApplied) return { _tag: "AlreadyApplied", payment: read.payment }
      const decision = decide(read.payment, read.fraudCase, ctx)
      if (!decision.ok) return { _tag: "Refused", decision, payment: read.payment }
      const committed = yield* store.commitChange({
        before: read.payment,
        change: decision.change,
        response: null,
        commandKey
      })
      if (committed) {
        recordCommitted(decision.change)
        return { _tag: "Applied", change: decision.change }
      }
    }
    // No one-round-trip read in this store, or a racing process moved the payment: decide on the locked row.
    return yield* recordIfApplied(
      yield* store.updatePayment(
        { merchantId, paymentId, commandKey },
        (payment, fraudCase) => decide(payment, fraudCase, ctx)
      )
    )
  })

  const withProcessor = owingAtProcessor(operations !== undefined)

  /** A command's outcome, after asking the processor what the change owes it (`settleOwed`). */
  const apply = Effect.fnUntraced(function*(
    merchantId: string | null,
    paymentId: string,
    decide: (payment: Payment.Payment, fraudCase: FraudCase | null, context: Payment.Context) => Payment.Decision,
    commandKey?: CommandKey
  ): Effect.fn.Return<UpdateOutcome, StoreUnavailable | ProcessorStepError> {
    const outcome = yield* decideCommand(merchantId, paymentId, decide, commandKey)
    if (outcome._tag !== "Applied" || outcome.change.payment.processorPending?.outcome !== "owed") return outcome
    const payment = yield* settleOwed(outcome.change.payment)
    return { _tag: "Applied", change: { ...outcome.change, payment } }
  })

  /**
   * A command's answer: the payment as it left it (counted and announced when it changed), or why
   * not. With a remote processor, after what the processor said to the operation it owed.
   */
  const command = Effect.fnUntraced(function*(
    merchantId: string,
    paymentId: string,
    decide: (payment: Payment.Payment, fraudCase: FraudCase | null, context: Payment.Context) => Payment.Decision,
    commandKey?: CommandKey
  ): Effect.fn.Return<Payment.Payment, CommandError> {
    const outcome = yield* decideCommand(merchantId, paymentId, decide, commandKey)
    return yield* settleOwed(yield* toResult(paymentId, outcome))
  })

  /**
   * A step of a payment's flow, decided on the record the flow holds (the one it created or last
   * committed) and committed version-checked against it: no read first. When another command
   * moved the payment meanwhile, the commit finds a newer version and the step is decided again
   * on the row locked by `updatePayment`, as `apply` does.
   */
  const applyFlowStep = (
    held: Payment.Payment,
    decide: (payment: Payment.Payment, context: Payment.Context) => Payment.Decision
  ): Effect.Effect<UpdateOutcome, StoreUnavailable> =>
    actors.serialize(held.id, flowStepLocked(held, withProcessor(decide)))

  /** `applyFlowStep` under the payment's lock. */
  const flowStepLocked = Effect.fnUntraced(function*(
    held: Payment.Payment,
    decide: (payment: Payment.Payment, context: Payment.Context) => Payment.Decision
  ): Effect.fn.Return<UpdateOutcome, StoreUnavailable> {
    const ctx = contextAt(flowClock)
    const decision = decide(held, ctx)
    if (decision.ok && (yield* store.commitChange({ before: held, change: decision.change, response: null }))) {
      recordCommitted(decision.change)
      return { _tag: "Applied", change: decision.change }
    }
    // A racing command moved the payment, or the step was refused on the held record: decide on the locked row.
    return yield* recordIfApplied(
      yield* store.updatePayment({ merchantId: null, paymentId: held.id }, (payment) => decide(payment, ctx))
    )
  })

  const flowSteps = (
    payment: Payment.Payment,
    authorization: Payment.AuthorizationOutcome | null,
    screening: FraudAssessment | null,
    ctx: Payment.Context
  ) =>
    // With a remote processor the authorization and screening are booked before the capture is
    // asked of it (the flow's next round): a capture whose answer is lost leaves them booked.
    Payment.advanceFlow(payment, {
      authorization,
      screening,
      thresholds: config.fraudThresholds,
      captureApart: operations !== undefined
    }, ctx)

  const createOnce = makeCreateOnce({ acquirer, store, fraud, flowSteps, recordCommitted, instanceId, context })

  const askNetwork = authorizeWithin(acquirer)

  /**
   * Asks the network until ACQUIRER_TIMEOUT from now. Transport failures are retried (the
   * acquirer is idempotent on the payment id) after 200 ms, doubling; every call and every wait
   * is cut at the deadline, which the transport keeps itself (no timer fibers), and passing it
   * declines the payment with `network_timeout`.
   */
  const authorizeNow = Effect.fnUntraced(function*(
    payment: Payment.Payment
  ): Effect.fn.Return<Payment.AuthorizationOutcome> {
    const request = authorizationRequest(payment)
    const deadlineMs = flowClock.currentTimeMillisUnsafe() + config.acquirerTimeoutMs
    for (let retryDelayMs = 200;; retryDelayMs *= 2) {
      const remainingMs = deadlineMs - flowClock.currentTimeMillisUnsafe()
      if (remainingMs <= 0) return timedOut
      const answer = yield* Effect.result(askNetwork(request, remainingMs))
      if (Result.isSuccess(answer)) return answer.success ?? timedOut
      const leftMs = deadlineMs - flowClock.currentTimeMillisUnsafe()
      if (leftMs <= 0) return timedOut
      yield* Effect.sleep(Math.min(retryDelayMs, leftMs))
    }
  })

  /**
   * Drives a payment through authorize → screen → capture until the domain says it is done.
   * What the network and the fraud model say is gathered first; then everything up to the next
   * wait commits as one unit of work: authorization, screening and an automatic capture are
   * one transaction with the events and ledger groups of each step. `createdHistory` is the
   * history the create read with its insert, which scores the first screening, as on the inline
   * path (docs/fraud-model.md); a flow resumed later, or a second screening, reads it again.
   */
  const runFlow = Effect.fnUntraced(function*(
    paymentId: string,
    initial: Payment.Payment | null,
    createdHistory: FraudHistory | null
  ): Effect.fn.Return<Payment.Payment | undefined, StoreUnavailable | ProcessorStepError> {
    let payment = initial ?? (yield* store.getPayment(null, paymentId))
    let history = createdHistory
    for (let rounds = 0;; rounds++) {
      if (rounds >= 10) {
        return yield* Effect.die(new Error(`payment ${paymentId}: flow did not finish within 10 rounds`))
      }
      if (payment === null) return undefined
      const step = Payment.nextStep(payment)
      if (step === null) return payment
      let outcome: UpdateOutcome
      if (step === "processor") {
        const { record, refusal } = yield* resolvePending(payment)
        outcome = yield* applyFlowStep(payment, record)
        // A refusal ends the flow here: the processor will not do it, and the next round would
        // only ask for it again (an automatic capture it refused stays to the merchant and to
        // reconciliation).
        if (refusal !== null) return outcome._tag === "Applied" ? outcome.change.payment : payment
      } else {
        const authorization = step === "authorize" ? yield* authorizeNow(payment) : null
        let screening: FraudAssessment | null = null
        if (step !== "capture" && authorization?._tag !== "Declined") {
          const screened = authorization?._tag === "Approved"
            ? { ...payment, networkRiskSignal: authorization.networkRiskSignal }
            : payment
          screening = history === null ? yield* fraud.assess(screened) : fraud.score(screened, history)
          history = null
        }
        outcome = yield* applyFlowStep(payment, (locked, ctx) => flowSteps(locked, authorization, screening, ctx))
      }
      // The committed record is the next starting point; after a refusal (a racing command won,
      // perhaps another instance's flow), read it again. (An approval this flow holds for a
      // payment that ended meanwhile is the one authorization of the payment's key, which the
      // cancel the payment owes claims and cancels.)
      payment = outcome._tag === "Applied" ? outcome.change.payment : yield* store.getPayment(null, paymentId)
    }
  })

  /** A supervised flow: failures are logged and the payment stays in flight for the recovery worker. */
  const startFlow = (paymentId: string, initial: Payment.Payment | null = null, history: FraudHistory | null = null) =>
    actors.startFlow(
      paymentId,
      runFlow(paymentId, initial, history).pipe(
        // The annotation on the one line the flow logs, not around the whole flow.
        Effect.catchCause((cause) =>
          Effect.logWarning(`flow of ${paymentId} stopped; recovery will resume it`, cause).pipe(
            Effect.annotateLogs("payment_id", paymentId)
          )
        )
      )
    )

  /**
   * A processor's notification applied through the one command path (any merchant's payment),
   * once: refused because `alreadyApplied` says the payment has it, it changes nothing and
   * answers the record as it is (`applied: false`).
   */
  const applyOnce = (
    paymentId: string,
    decide: (payment: Payment.Payment, context: Payment.Context) => Payment.Decision,
    alreadyApplied: (payment: Payment.Payment) => boolean
  ): Effect.Effect<{ readonly payment: Payment.Payment; readonly applied: boolean }, CommandError> =>
    Effect.flatMap(
      apply(null, paymentId, (p, _, ctx) => decide(p, ctx)),
      (outcome) =>
        outcome._tag === "Refused" && alreadyApplied(outcome.payment)
          ? Effect.succeed({ payment: outcome.payment, applied: false })
          : Effect.map(toResult(paymentId, outcome), (payment) => ({ payment, applied: outcome._tag === "Applied" }))
    )

  const mustGet = (merchantId: string, paymentId: string) =>
    Effect.flatMap(
      store.getPayment(merchantId, paymentId),
      (payment) =>
        payment === null
          ? Effect.fail(new NotFound({ resource: "transaction", id: paymentId }))
          : Effect.succeed(payment)
    )

  const release = (claim: IdempotencyClaim) =>
    store.releaseIdempotencyKey(claim.merchantId, claim.key).pipe(Effect.ignore)

  /** A create opened to be answered later: its flow goes on (scoring on the history read), awaited up to the deadline. */
  const finishCreate = <R>(payment: Payment.Payment, history: FraudHistory, request: InlineRequest<R>) =>
    Effect.gen(function*() {
      const fiber = yield* startFlow(payment.id, payment, history)
      yield* actors.awaitFlow(fiber, config.requestDeadlineMs)
      const latest = flowEnd(fiber) ?? (yield* store.getPayment(null, payment.id)) ?? payment
      return { _tag: "Created", reply: request.respond(latest).reply, stored: false } as InlineOutcome<R>
    })

  const service: PaymentsShape = {
    createInline: <R>(input: Payment.CreateInput, request: InlineRequest<R>) =>
      Effect.uninterruptibleMask((restore) =>
        Effect.gen(function*() {
          const decision = Payment.create(input, contextAt(flowClock))
          if (!decision.ok) return yield* Effect.die(new Error("create cannot be refused"))
          const payment = decision.change.payment
          const claim = request.claim
          let claimed = false
          const inline = Effect.gen(function*() {
            const once = yield* createOnce(decision.change, request)
            if (once !== null) return once
            const opened = yield* store.openPayment({
              change: decision.change,
              claim,
              history: historyWindows(payment.createdAt),
              flowOwner: instanceId
            })
            if (opened._tag === "KeyTaken") return opened as InlineOutcome<R>
            claimed = claim !== null
            recordCommitted(decision.change)
            return yield* finishCreate(payment, opened.history, request)
          })
          // A client that hangs up (or a stop) once the payment may exist does not leave it pending
          // until the recovery worker finds it: the supervised flow takes over at once (it reads the
          // payment first, and stops if the insert never happened; when it runs already, that one
          // goes on). A claim committed is released, so the client's retry resumes the payment.
          return yield* Effect.onError(restore(inline), (cause) =>
            Effect.gen(function*() {
              if (Cause.hasInterruptsOnly(cause)) yield* startFlow(payment.id)
              if (claimed && claim !== null) yield* release(claim)
            }))
        })
      ),
    create: (input) =>
      Effect.gen(function*() {
        const decision = Payment.create(input, yield* context)
        if (!decision.ok) return yield* Effect.die(new Error("create cannot be refused"))
        const inserted = yield* store.insertPayment(decision.change, instanceId)
        if (inserted._tag === "Inserted") recordCommitted(decision.change)
        const payment = inserted._tag === "Inserted" ? decision.change.payment : inserted.payment
        const fiber = yield* startFlow(payment.id, payment)
        // Answer with the record as the flow left it; past the deadline the flow goes on alone.
        yield* actors.awaitFlow(fiber, config.requestDeadlineMs)
        const latest = flowEnd(fiber) ?? (yield* store.getPayment(null, payment.id))
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
            return {
              ok: false,
              refusal: {
                _tag: "InvalidState",
                status: p.status,
                message: "The fraud case no longer belongs to its payment."
              }
            }
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
          yield* actors.awaitFlow(fiber, config.requestDeadlineMs)
        }
        const reviewed = yield* store.getFraudCase(merchantId, caseId)
        return reviewed ?? fraudCase
      }),
    applyDisputeNotification: (notification) =>
      applyOnce(
        notification.paymentId,
        (p, ctx) => Dispute.apply(p, notification, ctx),
        (p) => Dispute.alreadyApplied(p, notification)
      ),
    applyRefundFailure: (failure) =>
      applyOnce(
        failure.paymentId,
        (p, ctx) => Payment.refundFailed(p, failure, ctx),
        (p) => p.failedRefunds.includes(failure.refundId)
      ),
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
        store.claimFlows({
          owner: instanceId,
          now: flowClock.currentTimeMillisUnsafe(),
          staleBefore,
          takeOver,
          limit: resumeBatch
        }),
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
