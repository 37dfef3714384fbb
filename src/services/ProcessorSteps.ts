import type { Clock } from "effect"
import { Effect } from "effect"
import {
  AcquirerOutcomeUnknown,
  type AcquirerRefused,
  operationKeys,
  type ProcessorCallError,
  type ProcessorOperations
} from "../acquirer/Acquirer.ts"
import * as Payment from "../domain/Payment.ts"
import type { AppConfigShape } from "../platform/Config.ts"
import type { StoreShape, StoreUnavailable, UpdateOutcome } from "../store/Store.ts"
import { InvalidState, ProcessorUnavailable } from "./Errors.ts"

/**
 * A payment's operations at a remote processor (`ACQUIRER=stripe`): asked until the answer is
 * known, under one idempotency key per operation, and recorded as flow steps of the Payments
 * service (src/services/Payments.ts), which builds these steps with what they need of it.
 */

export type ProcessorStepError = ProcessorUnavailable | InvalidState

/** How to record the processor's answer to an operation a payment awaits, and its refusal if it refused. */
interface Resolution {
  readonly record: (payment: Payment.Payment, context: Payment.Context) => Payment.Decision
  readonly refusal: InvalidState | null
}

export interface ProcessorStepsOptions {
  /** The processor's operations; undefined when captures, voids and refunds are booked locally. */
  readonly operations: ProcessorOperations | undefined
  readonly store: StoreShape
  readonly config: AppConfigShape
  /** The flows' clock: the steps run apart from any request. */
  readonly flowClock: Clock.Clock
  /** Asks the card network to authorize the payment within `timeoutMs` (null: no answer in time). */
  readonly authorize: (
    payment: Payment.Payment,
    timeoutMs: number
  ) => Effect.Effect<Payment.AuthorizationOutcome | null, ProcessorCallError>
  /** A step of the payment's flow, committed as the Payments service commits one. */
  readonly applyFlowStep: (
    held: Payment.Payment,
    decide: (payment: Payment.Payment, context: Payment.Context) => Payment.Decision
  ) => Effect.Effect<UpdateOutcome, StoreUnavailable>
}

export const makeProcessorSteps = (
  { applyFlowStep, authorize, config, flowClock, operations, store }: ProcessorStepsOptions
) => {
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
              ? Effect.fail(
                new InvalidState({
                  status: "processor_refused",
                  message: `The card processor refused the ${operation}: ${error.message} (${error.code}).`
                })
              )
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
   * Asks the processor for `operation` on `payment` until its answer is known (`untilKnown`),
   * under the operation's key of `operationKeys`: asked again (a retry, a resumed flow, another
   * instance), the processor does it at most once. `reference` is the processor's id for the
   * authorization when known. The cancel of a payment that failed with no answer in time first
   * claims its authorization (`claimAuthorization`), so it cancels the hold that may have been
   * made, found by its reference.
   */
  const askProcessor = (
    processor: NonNullable<typeof operations>,
    payment: Payment.Payment,
    operation: Payment.ProcessorOperation,
    reference: string | null
  ): Effect.Effect<void, ProcessorStepError> => {
    const paymentId = payment.id
    const currency = payment.currency
    switch (operation._tag) {
      case "Capture":
        return untilKnown(
          "capture",
          (timeoutMs) =>
            processor.capture({
              paymentId,
              reference,
              idempotencyKey: operationKeys.capture(paymentId),
              timeoutMs,
              amountCents: operation.amountCents,
              currency
            })
        )
      case "Refund":
        return untilKnown("refund", (timeoutMs) =>
          processor.refund({
            paymentId,
            reference,
            idempotencyKey: operationKeys.refund(paymentId, operation.refundedBeforeCents, operation.failedBefore),
            timeoutMs,
            amountCents: operation.amountCents,
            currency
          }))
      case "Cancel": {
        const cancel = (target: string | null) =>
          untilKnown(
            "cancel",
            (timeoutMs) =>
              processor.cancel({
                paymentId,
                reference: target,
                idempotencyKey: operationKeys.cancel(paymentId),
                timeoutMs
              })
          )
        if (reference !== null || payment.status !== "failed") return cancel(reference)
        return Effect.flatMap(
          claimAuthorization(payment),
          (claimed) => (claimed === "declined" ? Effect.void : cancel(claimed))
        )
      }
    }
  }

  /**
   * What the processor says to the operation a payment awaits (`Payment.ProcessorPending`): asks
   * under the operation's key until known, and answers how to record it (`record`, committed by
   * the caller as a flow step) and, when the processor refused, why (`refusal`). An operation
   * still owed and not answered within ACQUIRER_TIMEOUT is recorded as unknown here; then this
   * fails with ProcessorUnavailable, and the payment's flow, resumed by recovery on any
   * instance, asks again.
   */
  const resolvePending = (
    payment: Payment.Payment
  ): Effect.Effect<Resolution, StoreUnavailable | ProcessorUnavailable> => {
    const pending = payment.processorPending
    if (operations === undefined || pending === null) {
      return Effect.die(new Error(`payment ${payment.id} awaits nothing of a processor`))
    }
    return Effect.matchEffect(
      askProcessor(operations, payment, Payment.operationOf(pending), payment.processorReference),
      {
        onSuccess: () =>
          Effect.succeed({ record: (p, ctx) => Payment.processorAnswered(p, pending, ctx), refusal: null }),
        onFailure: (error): Effect.Effect<Resolution, StoreUnavailable | ProcessorUnavailable> => {
          if (error._tag === "InvalidState") {
            return Effect.as(
              Effect.logWarning(
                `payment ${payment.id}: the processor refused its ${pending.operation}: ${error.message}`
              ),
              { record: (p, ctx) => Payment.processorRefused(p, pending, ctx), refusal: error }
            )
          }
          if (pending.outcome === "unknown") return Effect.fail(error)
          return Effect.andThen(
            applyFlowStep(payment, (p, ctx) => Payment.processorOutcomeUnknown(p, pending, ctx)),
            Effect.fail(error)
          )
        }
      }
    )
  }

  /**
   * A command's operation at the processor, right after the command recorded it as owed: asked
   * and recorded in the command's own request (a request that stops meanwhile leaves it owed, for
   * recovery). The payment as recorded; a refusal is the command's answer. A capture or refund
   * with no answer in time is the command's ProcessorUnavailable; a cancel so left (a void) is
   * the service's to finish: the void is booked, and the record shows the cancel pending.
   */
  const settleOwed = (
    payment: Payment.Payment
  ): Effect.Effect<Payment.Payment, StoreUnavailable | ProcessorStepError> => {
    if (operations === undefined || payment.processorPending?.outcome !== "owed") return Effect.succeed(payment)
    const settle = Effect.flatMap(
      resolvePending(payment),
      ({ record, refusal }) =>
        Effect.flatMap(
          applyFlowStep(payment, record),
          (outcome): Effect.Effect<Payment.Payment, StoreUnavailable | ProcessorStepError> => {
            if (refusal !== null) return Effect.fail(refusal)
            return outcome._tag === "Applied" ? Effect.succeed(outcome.change.payment) : latestOf(payment)
          }
        )
    )
    return payment.processorPending.operation === "cancel"
      ? Effect.catchTag(settle, "ProcessorUnavailable", () => latestOf(payment))
      : settle
  }

  /** The payment as stored now (the record held when it is gone, which it never is). */
  const latestOf = (payment: Payment.Payment) =>
    Effect.map(store.getPayment(null, payment.id), (latest) => latest ?? payment)

  /**
   * Before an authorization never answered in time is cancelled, its key is claimed: asked once
   * more under the same key, the processor either answers what that key did (the authorization
   * to cancel, found by its reference) or, if the first request never arrived, does it now, so a
   * first request still held somewhere on the way, arriving later, is only a replay of this one
   * and makes no hold of its own. When that answer is lost too, the payment is looked up by our
   * id: an authorization found there is the one to cancel. Until one of them answers, nothing is
   * cancelled (a cancel by our id alone could find nothing yet and miss a hold made a moment
   * later): the outcome stays unknown and the flow asks again later. "declined": nothing to
   * cancel; null: approved without a reference (the cancel finds it by our id).
   */
  const claimAuthorization = (
    payment: Payment.Payment
  ): Effect.Effect<string | null | "declined", ProcessorStepError> =>
    untilKnown(
      "authorization",
      (timeoutMs) =>
        Effect.flatMap(authorize(payment, timeoutMs), (outcome) =>
          outcome === null
            ? Effect.fail(new AcquirerOutcomeUnknown({ reason: "no answer within the deadline" }))
            : Effect.succeed(outcome))
    ).pipe(
      Effect.map((outcome) => (outcome._tag === "Declined" ? "declined" as const : outcome.reference ?? null)),
      Effect.catchTag("ProcessorUnavailable", (unknown) =>
        operations === undefined
          ? Effect.fail(unknown)
          : Effect.matchEffect(
            operations.lookup({ paymentId: payment.id, reference: null, timeoutMs: config.acquirerTimeoutMs }),
            {
              onFailure: () => Effect.fail(unknown),
              onSuccess: (record) => (record === null
                ? Effect.fail(unknown)
                : Effect.succeed(record.declined ? "declined" as const : record.reference))
            }
          ))
    )

  return { resolvePending, settleOwed }
}
