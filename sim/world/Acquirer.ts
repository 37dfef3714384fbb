import { Effect } from "effect"
import {
  type AcquirerShape,
  AcquirerUnavailable,
  type AuthorizationRequest,
  networkTimeoutToken,
  ordinaryRiskSignal,
  sandboxDeclines,
  sandboxRiskSignals
} from "../../src/acquirer/Acquirer.ts"
import type { AuthorizationOutcome } from "../../src/domain/Payment.ts"
import type { Prng } from "../engine/Prng.ts"
import type { FaultRates } from "../engine/Rates.ts"

interface Plan {
  readonly outcome: AuthorizationOutcome | null
  readonly latencyMs: number
  readonly transientFailures: number
  /** Answered at once (`answerNow`): an outcome, no transport failure first. */
  readonly instant: boolean
  calls: number
}

export interface AcquirerStats {
  approved: number
  declined: number
  slow: number
  timedOut: number
  transientFailures: number
  /** Authorizations answered at once (`answerNow`). */
  instant: number
  calls: number
}

/**
 * The simulated card network. The sandbox test tokens keep their meaning; other cards draw
 * their fate from the seed: approve, decline, answer slowly, never answer, or fail in transport
 * a few times first; with `acquirerInstant`, some answer at once, as the sandbox does. The plan is fixed per payment on the first call, so the network stays
 * idempotent on the payment id when a resumed flow asks again.
 */
export const makeSimulatedAcquirer = (prng: Prng, faults: FaultRates) => {
  const plans = new Map<string, Plan>()
  const stats: AcquirerStats = {
    approved: 0,
    declined: 0,
    slow: 0,
    timedOut: 0,
    transientFailures: 0,
    instant: 0,
    calls: 0
  }
  const instantRate = faults.acquirerInstant ?? 0

  const planFor = (request: AuthorizationRequest): Plan => {
    const existing = plans.get(request.paymentId)
    if (existing !== undefined) return existing
    const slow = prng.chance(faults.acquirerSlow)
    const latencyMs = slow ? prng.int(5_100, 9_500) : prng.int(40, 1_500)
    const transientFailures = prng.chance(faults.acquirerTransient) ? prng.int(1, 3) : 0
    let outcome: AuthorizationOutcome | null
    const decline = sandboxDeclines[request.cardToken]
    if (request.cardToken === networkTimeoutToken || prng.chance(faults.acquirerTimeout)) outcome = null
    else if (decline !== undefined) outcome = { _tag: "Declined", ...decline }
    else if (prng.chance(faults.acquirerDecline)) {
      outcome = { _tag: "Declined", code: "do_not_honor", message: "The card issuer declined the payment." }
    } else {outcome = {
        _tag: "Approved",
        networkRiskSignal: sandboxRiskSignals[request.cardToken] ?? ordinaryRiskSignal
      }}
    if (slow) stats.slow++
    if (outcome === null) stats.timedOut++
    else if (outcome._tag === "Approved") stats.approved++
    else stats.declined++
    // Drawn last, and only when asked for: a run without it draws what it always drew.
    const instant = instantRate > 0 && prng.chance(instantRate) && outcome !== null && transientFailures === 0
    const plan: Plan = { outcome, latencyMs, transientFailures, instant, calls: 0 }
    plans.set(request.paymentId, plan)
    return plan
  }

  /** The plan's next answer: a transport failure, the outcome, or nothing (never answers), after its latency. */
  const nextCall = (request: AuthorizationRequest) => {
    stats.calls++
    const plan = planFor(request)
    plan.calls++
    if (plan.calls <= plan.transientFailures) {
      stats.transientFailures++
      return { latencyMs: plan.latencyMs >> 2, answer: "transport-failure" as const }
    }
    return { latencyMs: plan.outcome === null ? Number.POSITIVE_INFINITY : plan.latencyMs, answer: plan.outcome }
  }
  const transportFailure = new AcquirerUnavailable({ reason: "simulated connection reset" })

  /** The outcome of a plan drawn to be answered at once, else undefined (the flow asks and waits). */
  const answerNow = (request: AuthorizationRequest): AuthorizationOutcome | undefined => {
    const plan = planFor(request)
    if (!plan.instant || plan.outcome === null) return undefined
    stats.calls++
    stats.instant++
    plan.calls++
    return plan.outcome
  }

  const acquirer: AcquirerShape = {
    ...(instantRate > 0 ? { answerNow } : {}),
    authorize: (request) =>
      Effect.suspend(() => {
        const call = nextCall(request)
        if (call.answer === "transport-failure") {
          return Effect.andThen(Effect.sleep(call.latencyMs), Effect.fail(transportFailure))
        }
        const outcome = call.answer
        return outcome === null ? Effect.never : Effect.as(Effect.sleep(call.latencyMs), outcome)
      }),
    // The caller's deadline kept by the transport, as an HTTP client's request timeout: an answer
    // due at or after it is no answer (one timer, no race).
    authorizeWithin: (request, timeoutMs) =>
      Effect.suspend(() => {
        const call = nextCall(request)
        if (call.latencyMs >= timeoutMs) return Effect.as(Effect.sleep(timeoutMs), null)
        if (call.answer === "transport-failure") {
          return Effect.andThen(Effect.sleep(call.latencyMs), Effect.fail(transportFailure))
        }
        return Effect.as(Effect.sleep(call.latencyMs), call.answer)
      })
  }
  return { acquirer, stats, nextCall }
}

/** One call's fate as the simulated network planned it (sim/world/Processor.ts asks it for an authorization's). */
export type NetworkCall = ReturnType<ReturnType<typeof makeSimulatedAcquirer>["nextCall"]>
