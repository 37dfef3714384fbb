import { Context, Data, Effect, Layer } from "effect"
import type { DisputeNotification, DisputeOutcome } from "../domain/Dispute.ts"
import type { AuthorizationOutcome, Payment, PaymentStatus } from "../domain/Payment.ts"

export interface AuthorizationRequest {
  readonly paymentId: string
  readonly merchantId: string
  readonly amountCents: number
  readonly currency: string
  readonly cardToken: string
  readonly cardBrand: string
}

/** A transport failure talking to the network: worth retrying within the flow's deadline. */
export class AcquirerUnavailable extends Data.TaggedError("AcquirerUnavailable")<{ readonly reason: string }> {}

/**
 * The card network. `authorize` is idempotent on `paymentId` (a real acquirer gets it as the
 * idempotency key), so a flow resumed after a crash may ask again safely. Captures, voids and
 * refunds are booked locally and cleared with the network at settlement.
 */
export interface AcquirerShape {
  readonly authorize: (request: AuthorizationRequest) => Effect.Effect<AuthorizationOutcome, AcquirerUnavailable>
  /**
   * The outcome when the network can give it without waiting (the sandbox does, but for its
   * timeout token), else undefined. With an answer, a create runs its whole flow inline in the
   * request: no fiber, no timer, one commit.
   */
  readonly answerNow?: (request: AuthorizationRequest) => AuthorizationOutcome | undefined
  /**
   * `authorize` with the caller's deadline kept by the transport itself (a request timeout, as an
   * HTTP client's): the outcome, or null when the network has not answered within `timeoutMs`.
   * Without it the flow races `authorize` against a timer, which costs two fibers a call.
   */
  readonly authorizeWithin?: (
    request: AuthorizationRequest,
    timeoutMs: number
  ) => Effect.Effect<AuthorizationOutcome | null, AcquirerUnavailable>
}

export class Acquirer extends Context.Tag("payments/Acquirer")<Acquirer, AcquirerShape>() {}

/** Test tokens of the sandbox acquirer (CONTRACT section 6, docs/api.md). */
export const sandboxDeclines: Record<string, { readonly code: string; readonly message: string }> = {
  tok_decline_insufficient_funds: { code: "insufficient_funds", message: "The card has insufficient funds." },
  tok_decline_do_not_honor: { code: "do_not_honor", message: "The card issuer declined the payment." },
  tok_decline_expired_card: { code: "expired_card", message: "The card has expired." }
}
export const sandboxRiskSignals: Record<string, number> = {
  tok_risk_review: 0.9976,
  tok_risk_highest: 0.9999
}
export const ordinaryRiskSignal = 0.05
/**
 * Up to this amount, in major units of its currency, `tok_risk_review` never passes, whatever
 * the card's history, brand, currency or hour: its signal outweighs the lowest contribution
 * every other feature can make (test/domain/fraud.test.ts proves the bound). Above it the model
 * weighs a very large amount slightly down, and such a payment can score under 0.50.
 * `tok_risk_highest` is blocked at any amount.
 */
export const sandboxReviewMaximumMajor = 1_000
export const networkTimeoutToken = "tok_network_timeout"

export const sandboxAnswer = (request: AuthorizationRequest): AuthorizationOutcome | undefined => {
  if (request.cardToken === networkTimeoutToken) return undefined
  const decline = sandboxDeclines[request.cardToken]
  if (decline !== undefined) return { _tag: "Declined", ...decline }
  return { _tag: "Approved", networkRiskSignal: sandboxRiskSignals[request.cardToken] ?? ordinaryRiskSignal }
}

export const sandboxAuthorize = (request: AuthorizationRequest): Effect.Effect<AuthorizationOutcome> => {
  const answer = sandboxAnswer(request)
  return answer === undefined ? Effect.never : Effect.succeed(answer)
}

/** The sandbox's answer, or (its timeout token) no answer once `timeoutMs` has passed. */
export const sandboxAuthorizeWithin = (request: AuthorizationRequest, timeoutMs: number): Effect.Effect<AuthorizationOutcome | null> => {
  const answer = sandboxAnswer(request)
  return answer === undefined ? Effect.as(Effect.sleep(timeoutMs), null) : Effect.succeed(answer)
}

/**
 * Asks the network with the caller's deadline: the acquirer's own `authorizeWithin` when it has
 * one, else `authorize` raced against a timer.
 */
export const authorizeWithin = (
  acquirer: AcquirerShape
): (request: AuthorizationRequest, timeoutMs: number) => Effect.Effect<AuthorizationOutcome | null, AcquirerUnavailable> =>
  acquirer.authorizeWithin ??
    ((request, timeoutMs) =>
      Effect.timeoutTo(acquirer.authorize(request), {
        duration: timeoutMs,
        onSuccess: (outcome): AuthorizationOutcome | null => outcome,
        onTimeout: (): AuthorizationOutcome | null => null
      }))

export const layerSandbox = Layer.succeed(Acquirer, {
  authorize: sandboxAuthorize,
  answerNow: sandboxAnswer,
  authorizeWithin: sandboxAuthorizeWithin
})

/**
 * Sandbox disputes (docs/api.md): a payment made with one of these tokens is disputed by the
 * sandbox network `SANDBOX_DISPUTE_OPEN_AFTER` after its capture (reason `fraudulent`, the
 * whole undisputed remainder), and the dispute ends with the token's outcome
 * `SANDBOX_DISPUTE_RESOLVE_AFTER` after it opened. Its worker (src/workers/SandboxDisputes.ts)
 * finds them with the store's neutral `paymentsByCardTokenAndDispute`.
 */
export const sandboxDisputeTokens: Readonly<Record<string, DisputeOutcome>> = {
  tok_dispute_won: "won",
  tok_dispute_lost: "lost"
}

/** The statuses in which the sandbox network disputes a payment of its tokens (a fully refunded one has nothing left). */
export const sandboxDisputableStatuses: ReadonlyArray<PaymentStatus> = ["captured", "settled"]

/** The sandbox network's id for the dispute of a payment (one dispute per payment). */
export const sandboxDisputeId = (paymentId: string) => `dp_sandbox_${paymentId}`

/**
 * The notification the sandbox network sends next for a payment of a dispute token: open it when
 * it has none, resolve it with the token's outcome when it is open; null when nothing is left.
 * When each is due is the worker's business (src/workers/SandboxDisputes.ts).
 */
export const sandboxDisputeNotification = (payment: Payment): DisputeNotification | null => {
  const outcome = sandboxDisputeTokens[payment.cardToken]
  if (outcome === undefined) return null
  const acquirerDisputeId = sandboxDisputeId(payment.id)
  if (payment.dispute === null) {
    return { acquirerDisputeId, paymentId: payment.id, action: { _tag: "Open", reason: "fraudulent" } }
  }
  if (payment.dispute.status !== "open" || payment.dispute.acquirerDisputeId !== acquirerDisputeId) return null
  return { acquirerDisputeId, paymentId: payment.id, action: { _tag: "Resolve", outcome } }
}
