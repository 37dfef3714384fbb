import { Effect, Layer } from "effect"
import type { AuthorizationOutcome } from "../domain/Payment.ts"
import {
  Acquirer,
  AcquirerOutcomeUnknown,
  AcquirerRefused,
  type AcquirerShape,
  type AuthorizationRequest,
  InvalidNotification,
  networkTimeoutToken,
  operationKeys,
  type ProcessorCallError,
  type ProcessorPayment,
  sandboxAnswer
} from "./Acquirer.ts"

/**
 * A remote processor kept in memory, behind the same port as a real one (captures, cancels,
 * refunds and look-ups at the processor, idempotent on each call's key), with faults that a
 * network gives: an answer lost after the processor acted, or a request that never arrives. It
 * answers the sandbox's test tokens as the sandbox does; `tok_network_timeout` is never answered.
 * The service's tests run the payment flow against it; it keeps every call for them to read.
 */

/** What a fault hook is asked: the operation, its idempotency key, and how many calls under that key came before. */
export interface CallInfo {
  readonly operation: "authorize" | "capture" | "cancel" | "refund" | "lookup"
  readonly idempotencyKey: string
  readonly attempt: number
}

/**
 * A fault for one call: `lost` acts and then loses the answer (the caller sees an unknown
 * outcome), `late` acts and answers only after the caller stopped waiting, `unreachable` never
 * arrives (nothing happens); undefined answers normally.
 */
export type Fault = "lost" | "late" | "unreachable" | undefined

interface Held {
  readonly paymentId: string
  readonly reference: string
  readonly currency: string
  readonly createdMs: number
  authorizedCents: number
  capturedCents: number
  refundedCents: number
  cancelled: boolean
  declined: boolean
}

type Answer = { readonly ok: true; readonly value: unknown } | { readonly ok: false; readonly error: AcquirerRefused }

export interface MemoryProcessor {
  readonly acquirer: AcquirerShape
  readonly layer: Layer.Layer<Acquirer>
  /** Every call as it arrived (faults included), in order. */
  readonly calls: ReadonlyArray<CallInfo>
  /** The processor's record of a payment, or undefined. */
  readonly record: (paymentId: string) => ProcessorPayment | undefined
}

export const makeMemoryProcessor = (options: {
  readonly fault?: (call: CallInfo) => Fault
  /** The processor's clock for `payments(period)`; a counter by default. */
  readonly nowMs?: () => number
} = {}): MemoryProcessor => {
  const held = new Map<string, Held>()
  const answers = new Map<string, { readonly params: string; readonly answer: Answer }>()
  const calls: Array<CallInfo> = []
  let tick = 0
  const nowMs = options.nowMs ?? (() => tick++)

  const snapshot = (h: Held): ProcessorPayment => ({
    paymentId: h.paymentId,
    reference: h.reference,
    currency: h.currency,
    authorizedCents: h.authorizedCents,
    capturedCents: h.capturedCents,
    refundedCents: h.refundedCents,
    cancelled: h.cancelled,
    declined: h.declined
  })

  /**
   * One call under an idempotency key: the stored answer when the key was seen with the same
   * parameters (a key reused with others is refused, as processors do), else `act`'s, stored.
   * The fault decides whether the call arrives and whether its answer comes back.
   */
  const call = <A>(
    info: Omit<CallInfo, "attempt">,
    params: unknown,
    act: () => Answer
  ): Effect.Effect<A, ProcessorCallError | AcquirerRefused> =>
    Effect.suspend((): Effect.Effect<A, ProcessorCallError | AcquirerRefused> => {
      const attempt = calls.filter((c) => c.idempotencyKey === info.idempotencyKey).length
      const full: CallInfo = { ...info, attempt }
      calls.push(full)
      const fault = options.fault?.(full)
      if (fault === "unreachable") {
        return Effect.fail(new AcquirerOutcomeUnknown({ reason: "no answer (the request did not arrive)" }))
      }
      const text = JSON.stringify(params)
      const seen = answers.get(info.idempotencyKey)
      let answer: Answer
      if (seen === undefined) {
        answer = act()
        answers.set(info.idempotencyKey, { params: text, answer })
      } else if (seen.params !== text) {
        answer = {
          ok: false,
          error: new AcquirerRefused({
            code: "idempotency_key_reused",
            message: "The key was used with other parameters."
          })
        }
      } else answer = seen.answer
      if (fault === "lost") {
        return Effect.fail(new AcquirerOutcomeUnknown({ reason: "the answer was lost after the processor acted" }))
      }
      if (fault === "late") return Effect.never
      return answer.ok ? Effect.succeed(answer.value as A) : Effect.fail(answer.error)
    })

  /** An operation's answer within the caller's `timeoutMs`, else an unknown outcome. */
  const within =
    (timeoutMs: number) => <A, E>(effect: Effect.Effect<A, E>): Effect.Effect<A, E | AcquirerOutcomeUnknown> =>
      Effect.timeoutOrElse(effect, {
        duration: timeoutMs,
        orElse: () => Effect.fail(new AcquirerOutcomeUnknown({ reason: "no answer within the deadline" }))
      })

  const refused = (code: string, message: string): Answer => ({
    ok: false,
    error: new AcquirerRefused({ code, message })
  })

  const authorize = (request: AuthorizationRequest): Effect.Effect<AuthorizationOutcome, ProcessorCallError> => {
    if (request.cardToken === networkTimeoutToken) {
      return Effect.fail(new AcquirerOutcomeUnknown({ reason: "no answer" }))
    }
    const key = operationKeys.authorize(request.paymentId)
    return call<AuthorizationOutcome>({ operation: "authorize", idempotencyKey: key }, request, () => {
      const existing = held.get(request.paymentId)
      if (existing !== undefined && existing.cancelled) {
        return {
          ok: true,
          value: { _tag: "Declined", code: "do_not_honor", message: "The authorization was cancelled." }
        }
      }
      const outcome = sandboxAnswer(request)!
      const reference = `mp_${request.paymentId}`
      held.set(request.paymentId, {
        paymentId: request.paymentId,
        reference,
        currency: request.currency,
        createdMs: nowMs(),
        authorizedCents: outcome._tag === "Approved" ? request.amountCents : 0,
        capturedCents: 0,
        refundedCents: 0,
        cancelled: false,
        declined: outcome._tag === "Declined"
      })
      return { ok: true, value: outcome._tag === "Approved" ? { ...outcome, reference } : outcome }
    }).pipe(Effect.catchTag("AcquirerRefused", (error) => Effect.die(error)))
  }

  const acquirer: AcquirerShape = {
    authorize,
    authorizeWithin: (request, timeoutMs) =>
      Effect.timeoutOrElse(authorize(request), { duration: timeoutMs, orElse: () => Effect.succeed(null) }),
    operations: {
      capture: (request) =>
        call<void>(
          { operation: "capture", idempotencyKey: request.idempotencyKey },
          { amount: request.amountCents },
          () => {
            const h = held.get(request.paymentId)
            if (h === undefined || h.declined || h.cancelled || h.authorizedCents === 0) {
              return refused("payment_intent_unexpected_state", "Nothing to capture.")
            }
            if (request.amountCents > h.authorizedCents) {
              return refused("amount_too_large", "More than was authorized.")
            }
            h.capturedCents = request.amountCents
            h.authorizedCents = 0
            return { ok: true, value: undefined }
          }
        ).pipe(within(request.timeoutMs)),
      cancel: (request) =>
        call<void>({ operation: "cancel", idempotencyKey: request.idempotencyKey }, {}, () => {
          const h = held.get(request.paymentId)
          if (h === undefined) {
            // Nothing was authorized (yet): a tombstone, so a late authorization is refused.
            held.set(request.paymentId, {
              paymentId: request.paymentId,
              reference: `mp_${request.paymentId}`,
              currency: "",
              createdMs: nowMs(),
              authorizedCents: 0,
              capturedCents: 0,
              refundedCents: 0,
              cancelled: true,
              declined: false
            })
            return { ok: true, value: undefined }
          }
          if (h.capturedCents > 0) {
            return refused("payment_intent_unexpected_state", "A captured payment cannot be cancelled.")
          }
          h.authorizedCents = 0
          h.cancelled = true
          return { ok: true, value: undefined }
        }).pipe(within(request.timeoutMs)),
      refund: (request) =>
        call<void>(
          { operation: "refund", idempotencyKey: request.idempotencyKey },
          { amount: request.amountCents },
          () => {
            const h = held.get(request.paymentId)
            if (h === undefined || request.amountCents > h.capturedCents - h.refundedCents) {
              return refused("amount_too_large", "More than is left to refund.")
            }
            h.refundedCents += request.amountCents
            return { ok: true, value: undefined }
          }
        ).pipe(within(request.timeoutMs)),
      lookup: (request) =>
        Effect.suspend(() => {
          const h = held.get(request.paymentId)
          return Effect.succeed(h === undefined ? null : snapshot(h))
        }),
      payments: (period) =>
        Effect.sync(() =>
          [...held.values()].filter((h) => h.createdMs >= period.fromMs && h.createdMs < period.toMs).map(snapshot)
        ),
      notification: () =>
        Effect.fail(new InvalidNotification({ reason: "the memory processor sends no notifications" }))
    }
  }
  return {
    acquirer,
    layer: Layer.succeed(Acquirer, acquirer),
    calls,
    record: (paymentId) => {
      const h = held.get(paymentId)
      return h === undefined ? undefined : snapshot(h)
    }
  }
}
