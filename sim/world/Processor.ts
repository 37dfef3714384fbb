import { Effect } from "effect"
import {
  AcquirerOutcomeUnknown,
  AcquirerRefused,
  type AcquirerShape,
  AcquirerUnavailable,
  type AuthorizationRequest,
  InvalidNotification,
  operationKeys,
  type ProcessorCallError,
  type ProcessorPayment
} from "../../src/acquirer/Acquirer.ts"
import type { AuthorizationOutcome } from "../../src/domain/Payment.ts"
import type { Prng } from "../engine/Prng.ts"
import type { FaultRates } from "../engine/Rates.ts"
import type { NetworkCall } from "./Acquirer.ts"

/**
 * The simulated remote processor (`--processor`): the simulated network of ./Acquirer.ts behind
 * the acquirer port's `operations`, kept the way Stripe keeps PaymentIntents. Each authorization
 * under a new idempotency key is a new authorization (a second one for the same payment is a
 * second hold on the cardholder's money: nothing ties them together but our payment id);
 * captures, cancels and refunds act on one of them, found by its reference or, without one, as
 * a search by our payment id would; every mutating call is idempotent on its key (the same
 * answer again; the key with other parameters refused). What the network decides of an
 * authorization (approve, decline, slow, transport failures) is its plan, drawn as without a
 * processor; a plan that never answers is an authorization made whose answer never comes (the
 * same key asked again replays it).
 *
 * Faults, from the run's `processor` stream, drawn per call that arrives: the answer lost after
 * the processor acted (`processorLost`), the request arriving twice (`processorDuplicate`: the
 * duplicate meets the first's key and must change nothing), the answer coming after the caller's
 * deadline (`processorLate`: acted, the caller sees an unknown outcome); and outage windows
 * (`processorOutagesPerDay`, 10 s–3 min each, within the horizon) in which no call arrives.
 *
 * It keeps what happened for the processor laws (sim/checks/ProcessorLaws.ts): every
 * authorization with the times it was captured or cancelled, the amounts, when each payment's
 * authorization was cancelled, and its counters (`stats`).
 */

/** One authorization at the processor (a PaymentIntent), as the laws read it. */
export interface SimAuthorization {
  readonly paymentId: string
  readonly reference: string
  readonly idempotencyKey: string
  readonly currency: string
  readonly amountCents: number
  readonly createdMs: number
  authorizedCents: number
  capturedCents: number
  refundedCents: number
  /** When it was captured / cancelled (null: not yet). */
  capturedMs: number | null
  cancelledMs: number | null
}

export interface ProcessorStats {
  /** Calls that reached the processor (duplicates counted once), and the operations applied (not replayed). */
  arrived: number
  authorizations: number
  declines: number
  captures: number
  cancels: number
  refunds: number
  refusals: number
  /** Calls answered with the key's stored answer (a retry or a duplicate). */
  replays: number
  /** Answers lost after the processor acted. */
  lostAnswers: number
  /** Requests that arrived twice, the second absorbed by the key. */
  duplicates: number
  duplicatesAbsorbed: number
  /** Answers that came after the caller's deadline. */
  lateAnswers: number
  outages: number
  outageRefusals: number
}

/** The processor's records, as the laws read them at the end of a run. */
export interface ProcessorRecords {
  /** Every authorization, in the order made. */
  readonly authorizations: ReadonlyArray<SimAuthorization>
  /** Per payment, when one of its authorizations was first cancelled. */
  readonly cancelsMs: ReadonlyMap<string, number>
  /** Per payment, the times a capture was applied. */
  readonly capturesMs: ReadonlyMap<string, ReadonlyArray<number>>
  /** A payment's authorizations, in the order made. */
  readonly of: (paymentId: string) => ReadonlyArray<SimAuthorization>
}

/** Told as the processor applies an operation (the processor laws judge each as it happens). */
export interface ProcessorObserver {
  readonly authorized?: (made: SimAuthorization) => void
  readonly captured?: (paymentId: string) => void
  readonly refunded?: (paymentId: string, amountCents: number) => void
  /** A refund arrived under a key the processor had not seen. */
  readonly refundAsked?: (paymentId: string) => void
}

type Answer = { readonly ok: true; readonly value: unknown } | { readonly ok: false; readonly error: AcquirerRefused }

/**
 * The processor's side of the port, one call at a time: the keys are the caller's (the port
 * adapter derives them with `operationKeys`, as a connector does; a planted bug may derive them
 * otherwise).
 */
export interface ProcessorCalls {
  readonly authorize: (
    request: AuthorizationRequest,
    idempotencyKey: string,
    timeoutMs: number
  ) => Effect.Effect<AuthorizationOutcome | null, ProcessorCallError>
}

export const makeSimulatedProcessor = (options: {
  readonly prng: Prng
  readonly faults: FaultRates
  /** The network's plan for one more authorization call of a payment (./Acquirer.ts). */
  readonly networkCall: (request: AuthorizationRequest) => NetworkCall
  readonly window: { readonly startMs: number; readonly endMs: number }
  readonly nowMs: () => number
  /** The longest wait for an answer when the caller names none (the port's `authorize`). */
  readonly acquirerTimeoutMs: number
}) => {
  const { prng, faults, nowMs } = options
  // Outage windows first, so the per-call draws that follow do not move them.
  const outages: Array<readonly [number, number]> = []
  const days = (options.window.endMs - options.window.startMs) / 86_400_000
  const outagesPerDay = faults.processorOutagesPerDay ?? 0
  const count = outagesPerDay > 0 ? Math.floor(outagesPerDay * days + prng.float()) : 0
  for (let i = 0; i < count; i++) {
    const start = options.window.startMs + Math.floor(prng.float() * (options.window.endMs - options.window.startMs))
    outages.push([start, start + prng.int(10_000, 180_000)])
  }
  const stats: ProcessorStats = {
    arrived: 0,
    authorizations: 0,
    declines: 0,
    captures: 0,
    cancels: 0,
    refunds: 0,
    refusals: 0,
    replays: 0,
    lostAnswers: 0,
    duplicates: 0,
    duplicatesAbsorbed: 0,
    lateAnswers: 0,
    outages: count,
    outageRefusals: 0
  }
  const authorizations: Array<SimAuthorization> = []
  const byReference = new Map<string, SimAuthorization>()
  const byPayment = new Map<string, Array<SimAuthorization>>()
  const answers = new Map<string, { readonly params: string; readonly answer: Answer }>()
  const cancelsMs = new Map<string, number>()
  const capturesMs = new Map<string, Array<number>>()
  const observer: { current: ProcessorObserver } = { current: {} }

  const inOutage = () => {
    const now = nowMs()
    for (const [from, to] of outages) if (now >= from && now < to) return true
    return false
  }
  const unreachable = new AcquirerUnavailable({ reason: "simulated processor outage: connection refused" })
  const refused = (code: string, message: string): Answer => {
    stats.refusals++
    return { ok: false, error: new AcquirerRefused({ code, message }) }
  }

  /** The authorization a call on a payment acts on: by reference, else the payment's latest one (a search by our id). */
  const target = (paymentId: string, reference: string | null): SimAuthorization | undefined => {
    if (reference !== null) return byReference.get(reference)
    const all = byPayment.get(paymentId)
    return all === undefined ? undefined : all[all.length - 1]
  }

  /**
   * A call that arrived: the key's stored answer when it was seen with the same parameters (a
   * key reused with others is refused, as processors do), else `act`'s, stored. A duplicate of
   * the request arrives right behind it and meets the stored answer.
   */
  const arrive = (key: string, params: unknown, act: () => Answer): Answer => {
    stats.arrived++
    const text = JSON.stringify(params)
    const once = (): Answer => {
      const seen = answers.get(key)
      if (seen === undefined) {
        const answer = act()
        answers.set(key, { params: text, answer })
        return answer
      }
      stats.replays++
      return seen.params === text
        ? seen.answer
        : refused("idempotency_error", "The key was used with other parameters.")
    }
    const answer = once()
    if (prng.chance(faults.processorDuplicate ?? 0)) {
      stats.duplicates++
      const again = once()
      if (again === answer) stats.duplicatesAbsorbed++
    }
    return answer
  }

  /** How the answer of a call that arrived comes back: in time, lost, or after the deadline. */
  const fate = (): "answered" | "lost" | "late" => {
    if (prng.chance(faults.processorLost ?? 0)) return (stats.lostAnswers++, "lost")
    if (prng.chance(faults.processorLate ?? 0)) return (stats.lateAnswers++, "late")
    return "answered"
  }
  const unknown = (reason: string) => new AcquirerOutcomeUnknown({ reason })

  const authorize: ProcessorCalls["authorize"] = (request, idempotencyKey, timeoutMs) =>
    Effect.suspend((): Effect.Effect<AuthorizationOutcome | null, ProcessorCallError> => {
      if (inOutage()) {
        stats.outageRefusals++
        return Effect.andThen(Effect.sleep(Math.min(50, timeoutMs)), Effect.fail(unreachable))
      }
      const call = options.networkCall(request)
      if (call.answer === "transport-failure") {
        return call.latencyMs >= timeoutMs
          ? Effect.as(Effect.sleep(timeoutMs), null)
          : Effect.andThen(
            Effect.sleep(call.latencyMs),
            Effect.fail(new AcquirerUnavailable({ reason: "simulated connection reset" }))
          )
      }
      // A plan that never answers: the processor approves, and this call's answer never comes. (A
      // slow plan past the deadline arrives and acts too; its answer comes too late.)
      const neverAnswers = call.answer === null
      const planned: AuthorizationOutcome = call.answer ?? { _tag: "Approved", networkRiskSignal: 0.05 }
      const answer = arrive(idempotencyKey, {
        amount: request.amountCents,
        currency: request.currency,
        token: request.cardToken
      }, () => {
        if (planned._tag === "Declined") {
          stats.declines++
          return { ok: true, value: planned }
        }
        stats.authorizations++
        const reference = `pi_sim${authorizations.length}`
        const made: SimAuthorization = {
          paymentId: request.paymentId,
          reference,
          idempotencyKey,
          currency: request.currency,
          amountCents: request.amountCents,
          createdMs: nowMs(),
          authorizedCents: request.amountCents,
          capturedCents: 0,
          refundedCents: 0,
          capturedMs: null,
          cancelledMs: null
        }
        authorizations.push(made)
        byReference.set(reference, made)
        const all = byPayment.get(request.paymentId)
        if (all === undefined) byPayment.set(request.paymentId, [made])
        else all.push(made)
        observer.current.authorized?.(made)
        return { ok: true, value: { ...planned, reference } }
      })
      const how = fate()
      const latencyMs = neverAnswers || how === "late" ? Number.POSITIVE_INFINITY : call.latencyMs
      if (latencyMs >= timeoutMs) return Effect.as(Effect.sleep(timeoutMs), null)
      if (how === "lost") {
        return Effect.andThen(
          Effect.sleep(latencyMs),
          Effect.fail(unknown("simulated: the answer was lost after the processor acted"))
        )
      }
      // An authorization's key is never refused here: its parameters do not change.
      return Effect.as(Effect.sleep(latencyMs), answer.ok ? answer.value as AuthorizationOutcome : null)
    })

  /** A capture, cancel or refund: it arrives (or not, in an outage), acts or replays, and its answer comes back (or not). */
  const operation = (
    timeoutMs: number,
    key: string,
    params: unknown,
    act: () => Answer
  ): Effect.Effect<void, ProcessorCallError | AcquirerRefused> =>
    Effect.suspend((): Effect.Effect<void, ProcessorCallError | AcquirerRefused> => {
      if (inOutage()) {
        stats.outageRefusals++
        return Effect.andThen(Effect.sleep(Math.min(50, timeoutMs)), Effect.fail(unreachable))
      }
      const answer = arrive(key, params, act)
      const how = fate()
      const latencyMs = how === "late" ? Number.POSITIVE_INFINITY : prng.int(20, 400)
      if (latencyMs >= timeoutMs) {
        return Effect.andThen(Effect.sleep(timeoutMs), Effect.fail(unknown("simulated: no answer within the deadline")))
      }
      if (how === "lost") {
        return Effect.andThen(
          Effect.sleep(latencyMs),
          Effect.fail(unknown("simulated: the answer was lost after the processor acted"))
        )
      }
      return Effect.andThen(Effect.sleep(latencyMs), answer.ok ? Effect.void : Effect.fail(answer.error))
    })

  const cancelled = (paymentId: string) => {
    if (!cancelsMs.has(paymentId)) cancelsMs.set(paymentId, nowMs())
  }

  const snapshot = (a: SimAuthorization): ProcessorPayment => ({
    paymentId: a.paymentId,
    reference: a.reference,
    currency: a.currency,
    authorizedCents: a.authorizedCents,
    capturedCents: a.capturedCents,
    refundedCents: a.refundedCents,
    cancelled: a.cancelledMs !== null,
    declined: false
  })

  const refund = (
    request: { readonly paymentId: string; readonly reference: string | null; readonly amountCents: number }
  ): Answer => {
    const a = target(request.paymentId, request.reference)
    if (a === undefined || request.amountCents > a.capturedCents - a.refundedCents) {
      return refused("amount_too_large", "More than is left to refund.")
    }
    stats.refunds++
    a.refundedCents += request.amountCents
    observer.current.refunded?.(a.paymentId, request.amountCents)
    return { ok: true, value: undefined }
  }

  const operations: NonNullable<AcquirerShape["operations"]> = {
    capture: (request) =>
      operation(request.timeoutMs, request.idempotencyKey, { op: "capture", amount: request.amountCents }, () => {
        const a = target(request.paymentId, request.reference)
        if (a === undefined) return refused("resource_missing", "No such payment.")
        if (a.cancelledMs !== null || a.capturedMs !== null) {
          return refused("payment_intent_unexpected_state", "The payment is not awaiting capture.")
        }
        if (request.amountCents > a.authorizedCents) return refused("amount_too_large", "More than was authorized.")
        stats.captures++
        a.capturedCents = request.amountCents
        a.authorizedCents = 0
        a.capturedMs = nowMs()
        const times = capturesMs.get(a.paymentId)
        if (times === undefined) capturesMs.set(a.paymentId, [a.capturedMs])
        else times.push(a.capturedMs)
        observer.current.captured?.(a.paymentId)
        return { ok: true, value: undefined }
      }),
    cancel: (request) =>
      operation(request.timeoutMs, request.idempotencyKey, { op: "cancel" }, () => {
        const a = target(request.paymentId, request.reference)
        // Nothing there (the authorization never arrived): nothing to cancel.
        // (Not a cancel of the payment's money: an authorization made later is a new hold.)
        if (a === undefined) return { ok: true, value: undefined }
        if (a.capturedMs !== null) {
          return refused("payment_intent_unexpected_state", "A captured payment cannot be cancelled.")
        }
        if (a.cancelledMs === null) {
          stats.cancels++
          a.cancelledMs = nowMs()
          a.authorizedCents = 0
          cancelled(request.paymentId)
        }
        return { ok: true, value: undefined }
      }),
    refund: (request) =>
      operation(request.timeoutMs, request.idempotencyKey, { op: "refund", amount: request.amountCents }, () => {
        // `act` runs for a key the processor has not seen.
        observer.current.refundAsked?.(request.paymentId)
        return refund(request)
      }),
    lookup: (request) =>
      Effect.suspend(() => {
        if (inOutage()) return Effect.fail(unreachable)
        const a = target(request.paymentId, request.reference ?? null)
        return Effect.succeed(a === undefined ? null : snapshot(a))
      }),
    payments: (period) =>
      Effect.suspend(() =>
        inOutage()
          ? Effect.fail(unreachable)
          : Effect.succeed(
            authorizations.filter((a) => a.createdMs >= period.fromMs && a.createdMs < period.toMs).map(snapshot)
          )
      ),
    notification: () =>
      Effect.fail(new InvalidNotification({ reason: "the simulated processor sends no notifications" }))
  }

  const calls: ProcessorCalls = { authorize }
  const records: ProcessorRecords = {
    authorizations,
    cancelsMs,
    capturesMs,
    of: (paymentId) => byPayment.get(paymentId) ?? []
  }
  const observe = (o: ProcessorObserver) => void (observer.current = o)
  return { calls, operations, records, stats, observe, acquirerTimeoutMs: options.acquirerTimeoutMs }
}

export type SimulatedProcessor = ReturnType<typeof makeSimulatedProcessor>

/**
 * The port as a connector presents the processor to the service: each authorization under
 * `operationKeys.authorize`, the caller's deadline kept by the transport (an answer past it is no
 * answer), no answer at once (the processor is remote), and the operations.
 */
export const processorPort = (processor: SimulatedProcessor): AcquirerShape => {
  const authorizeWithin = (request: AuthorizationRequest, timeoutMs: number) =>
    processor.calls.authorize(request, operationKeys.authorize(request.paymentId), timeoutMs)
  return {
    authorize: (request) =>
      Effect.flatMap(
        authorizeWithin(request, processor.acquirerTimeoutMs),
        (outcome) =>
          outcome === null
            ? Effect.fail(new AcquirerOutcomeUnknown({ reason: "no answer within the deadline" }))
            : Effect.succeed(outcome)
      ),
    authorizeWithin,
    operations: processor.operations
  }
}
