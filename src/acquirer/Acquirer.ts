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

/**
 * The request never reached the processor (connection refused, a name that does not resolve, a
 * request refused before it was read): nothing happened there, and asking again is safe.
 */
export class AcquirerUnavailable extends Data.TaggedError("AcquirerUnavailable")<{ readonly reason: string }> {}

/**
 * The request may have reached the processor and its answer was lost (a timeout, a reset after
 * sending, a 5xx): the operation may or may not have happened. It is never a decline. The caller
 * asks again under the same idempotency key, or looks the payment up, until it knows.
 */
export class AcquirerOutcomeUnknown extends Data.TaggedError("AcquirerOutcomeUnknown")<{ readonly reason: string }> {}

/** The processor answered and refused the operation (a capture of an expired authorization, a refund over what was captured): it did not happen. */
export class AcquirerRefused
  extends Data.TaggedError("AcquirerRefused")<{ readonly code: string; readonly message: string }>
{}

export type ProcessorCallError = AcquirerUnavailable | AcquirerOutcomeUnknown

/**
 * The idempotency key of each operation, derived from the payment and the operation alone, so a
 * call repeated after a lost answer, a crash or on another instance carries the same key and the
 * processor does it at most once. A refund is named by the payment's refunded total when it was
 * asked for. A payment has one authorization (one key), so one cancel: it is sent only after the
 * authorization was claimed (Payments' `claimAuthorization`), never while the hold could still be
 * on its way.
 */
export const operationKeys = {
  authorize: (paymentId: string) => `${paymentId}:authorize`,
  capture: (paymentId: string) => `${paymentId}:capture`,
  cancel: (paymentId: string) => `${paymentId}:cancel`,
  /** `failedBefore`: refunds of the payment the processor failed before this one was asked (a failure gives the refunded total back, and the next refund must not reuse the failed one's key). */
  refund: (paymentId: string, refundedBeforeCents: number, failedBefore = 0) =>
    failedBefore === 0
      ? `${paymentId}:refund:${refundedBeforeCents}`
      : `${paymentId}:refund:${refundedBeforeCents}:after-${failedBefore}-failed`
} as const

/** A call on an existing authorization: our payment id, the processor's reference when known, the operation's key. */
export interface OperationRequest {
  readonly paymentId: string
  /** The processor's id for the payment (a Stripe PaymentIntent id), when the authorization's answer gave one. */
  readonly reference: string | null
  readonly idempotencyKey: string
  /** How long to wait for the answer; past it the outcome is unknown. */
  readonly timeoutMs: number
}

export interface CaptureRequest extends OperationRequest {
  readonly amountCents: number
  readonly currency: string
}

export interface RefundRequest extends OperationRequest {
  readonly amountCents: number
  readonly currency: string
}

/** What the processor holds for one of our payments: the look-up's answer and reconciliation's input. */
export interface ProcessorPayment {
  readonly paymentId: string
  readonly reference: string
  readonly currency: string
  /** Authorized and not yet captured or cancelled. */
  readonly authorizedCents: number
  readonly capturedCents: number
  readonly refundedCents: number
  /** The authorization was cancelled (voided, reversed) or expired. */
  readonly cancelled: boolean
  /** The authorization was declined: nothing is held. */
  readonly declined: boolean
}

/**
 * The card network. `authorize` is idempotent on `paymentId` (a remote processor gets
 * `operationKeys.authorize(paymentId)` as the idempotency key), so a flow resumed after a crash,
 * or one whose answer was lost, may ask again safely.
 */
export interface AcquirerShape {
  readonly authorize: (request: AuthorizationRequest) => Effect.Effect<AuthorizationOutcome, ProcessorCallError>
  /**
   * The outcome when the network can give it without waiting (the sandbox does, but for its
   * timeout token), else undefined. With an answer, a create runs its whole flow inline in the
   * request: no fiber, no timer, one commit.
   */
  readonly answerNow?: (request: AuthorizationRequest) => AuthorizationOutcome | undefined
  /**
   * `authorize` with the caller's deadline kept by the transport itself (a request timeout, as an
   * HTTP client's): the outcome, or null when the network has not answered within `timeoutMs`.
   * Without it the flow races `authorize` against a timer, which costs two fibers a call. A remote
   * processor, whose request may have been done when the deadline passes, fails with
   * `AcquirerOutcomeUnknown` instead of answering null.
   */
  readonly authorizeWithin?: (
    request: AuthorizationRequest,
    timeoutMs: number
  ) => Effect.Effect<AuthorizationOutcome | null, ProcessorCallError>
  /**
   * A remote processor's captures, cancels, refunds and look-ups. Without them (the in-process
   * sandbox, the simulated network) captures, voids and refunds are booked locally and cleared
   * with the network at settlement.
   */
  readonly operations?: ProcessorOperations
}

/**
 * What a processor does besides authorizing. Each call carries its operation's idempotency key
 * (`operationKeys`) and is bounded by its request's `timeoutMs`. An acquirer without them (the
 * in-process sandbox, the simulated network) books captures, voids and refunds locally and
 * clears them at settlement.
 */
export interface ProcessorOperations {
  readonly capture: (request: CaptureRequest) => Effect.Effect<void, ProcessorCallError | AcquirerRefused>
  /**
   * Cancels (voids, reverses) whatever the payment's authorization holds; cancelling nothing or a
   * cancelled one succeeds. Refused when the processor has captured it (nothing left to cancel).
   */
  readonly cancel: (request: OperationRequest) => Effect.Effect<void, ProcessorCallError | AcquirerRefused>
  readonly refund: (request: RefundRequest) => Effect.Effect<void, ProcessorCallError | AcquirerRefused>
  /**
   * The processor's record of a payment by our id (null: it never saw it). With the processor's
   * `reference` the record is read directly; without one it is searched by our id, and a search
   * may lag the processor's writes (Stripe's: up to a minute), so a null soon after an
   * authorization was sent is not proof that none was made.
   */
  readonly lookup: (request: {
    readonly paymentId: string
    readonly reference?: string | null
    readonly timeoutMs: number
  }) => Effect.Effect<ProcessorPayment | null, ProcessorCallError>
  /** Every payment the processor created within `[fromMs, toMs)`, for reconciliation. */
  readonly payments: (
    period: { readonly fromMs: number; readonly toMs: number }
  ) => Effect.Effect<ReadonlyArray<ProcessorPayment>, ProcessorCallError>
  /**
   * An inbound notification (the raw body and the processor's signature header), verified with
   * the processor's signature scheme at `nowMs` and read into our terms.
   */
  readonly notification: (input: {
    readonly body: string
    readonly signature: string | undefined
    readonly nowMs: number
  }) => Effect.Effect<ProcessorNotification, InvalidNotification | ProcessorCallError>
}

/** An inbound notification whose signature, timestamp or body does not hold: answered 400 and ignored. */
export class InvalidNotification extends Data.TaggedError("InvalidNotification")<{ readonly reason: string }> {}

/**
 * A processor's notification in our terms. `eventId` is the processor's own id for it: applying
 * one twice changes nothing.
 */
export type ProcessorNotification =
  | { readonly _tag: "Dispute"; readonly eventId: string; readonly dispute: DisputeNotification }
  | {
    readonly _tag: "RefundFailed"
    readonly eventId: string
    /** The processor's id for the refund: one refund fails once, whichever of its events says so. */
    readonly refundId: string
    readonly paymentId: string
    readonly amountCents: number
    readonly reason: string
  }
  /** A verified notification of a kind the service does not act on. */
  | { readonly _tag: "Ignored"; readonly eventId: string; readonly type: string }

export class Acquirer extends Context.Service<Acquirer, AcquirerShape>()("payments/Acquirer") {}

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
export const sandboxAuthorizeWithin = (
  request: AuthorizationRequest,
  timeoutMs: number
): Effect.Effect<AuthorizationOutcome | null> => {
  const answer = sandboxAnswer(request)
  return answer === undefined ? Effect.as(Effect.sleep(timeoutMs), null) : Effect.succeed(answer)
}

/**
 * Asks the network with the caller's deadline: the acquirer's own `authorizeWithin` when it has
 * one, else `authorize` raced against a timer.
 */
export const authorizeWithin = (
  acquirer: AcquirerShape
): (
  request: AuthorizationRequest,
  timeoutMs: number
) => Effect.Effect<AuthorizationOutcome | null, ProcessorCallError> =>
  acquirer.authorizeWithin ??
    ((request, timeoutMs) =>
      Effect.timeoutOrElse(
        acquirer.authorize(request) as Effect.Effect<AuthorizationOutcome | null, ProcessorCallError>,
        {
          duration: timeoutMs,
          orElse: () => Effect.succeed(null)
        }
      ))

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
