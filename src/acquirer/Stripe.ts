import { Effect, Layer, Redacted } from "effect"
import type { DisputeNotification, DisputeReason } from "../domain/Dispute.ts"
import type { AuthorizationOutcome } from "../domain/Payment.ts"
import { verifyWebhookSignature } from "../domain/Webhook.ts"
import * as Config from "../platform/Config.ts"
import {
  Acquirer,
  AcquirerOutcomeUnknown,
  AcquirerRefused,
  type AcquirerShape,
  AcquirerUnavailable,
  type AuthorizationRequest,
  type CaptureRequest,
  InvalidNotification,
  operationKeys,
  type OperationRequest,
  ordinaryRiskSignal,
  type ProcessorCallError,
  type ProcessorNotification,
  type ProcessorPayment,
  type RefundRequest,
  sandboxDeclines,
  sandboxRiskSignals
} from "./Acquirer.ts"

/**
 * The Stripe connector: the acquirer port over Stripe's PaymentIntents API (docs/processor.md).
 * An authorization is a PaymentIntent created and confirmed at once with `capture_method=manual`;
 * capture, cancel and refund are Stripe's own calls on it, each under the idempotency key of
 * `operationKeys`, and `metadata[payment_id]` names our payment on every object we create. Every
 * failure is classified by whether the request can have been acted on (`AcquirerUnavailable`:
 * certainly not; `AcquirerOutcomeUnknown`: perhaps) or was refused (`AcquirerRefused`, a decline).
 * Bodies are form-encoded as Stripe expects; answers are read as the API version pinned below,
 * the version of the trimmed OpenAPI document the tests check requests and answers against.
 */

/** The API version the connector reads and writes (Stripe-Version header). */
export const stripeApiVersion = "2023-08-16"

export interface StripeOptions {
  readonly secretKey: Redacted.Redacted<string>
  /** Webhook endpoint's signing secret (`whsec_…`); notifications are refused without one. */
  readonly webhookSecret: Redacted.Redacted<string> | null
  /** `https://api.stripe.com`, or a stand-in (the sandbox processor) on a loopback address. */
  readonly apiBase: string
  /** The deadline of calls whose port request carries none: `authorize`, `payments`, a notification's look-up. */
  readonly defaultTimeoutMs: number
  /** How far a notification's signed timestamp may be from now (Stripe's libraries: 300 s). */
  readonly signatureToleranceMs?: number
  /** The authorization's idempotency key (default `operationKeys.authorize`): replaced only to plant a bug that the harness must catch. */
  readonly authorizeKey?: (paymentId: string) => string
}

// Our sandbox tokens as Stripe's test PaymentMethods --------------------------------------------

/**
 * Our test tokens (docs/api.md) as Stripe's test PaymentMethods, so the same payments mean the
 * same thing against Stripe in test mode. Stripe has no test card that declines `do_not_honor`:
 * its generic decline (`generic_decline`) is read back as `do_not_honor`. The two risk tokens are
 * Stripe's elevated- and highest-risk cards: with Radar's default block rule off (the service
 * screens with its own model) Stripe approves them and reports the risk level, which
 * `riskSignalOf` reads as the sandbox's signal for the same token. Stripe's disputes are won or lost on evidence; both dispute tokens open a
 * `fraudulent` dispute, and `metadata[sandbox_dispute_outcome]` tells the sandbox processor which
 * way to close it (Stripe ignores it).
 */
export const stripeTestPaymentMethods: Readonly<Record<string, string>> = {
  tok_visa: "pm_card_visa",
  tok_mastercard: "pm_card_mastercard",
  tok_amex: "pm_card_amex",
  tok_decline_insufficient_funds: "pm_card_chargeDeclinedInsufficientFunds",
  tok_decline_do_not_honor: "pm_card_chargeDeclined",
  tok_decline_expired_card: "pm_card_chargeDeclinedExpiredCard",
  tok_risk_review: "pm_card_riskLevelElevated",
  tok_risk_highest: "pm_card_riskLevelHighest",
  tok_dispute_won: "pm_card_createDispute",
  tok_dispute_lost: "pm_card_createDispute",
  tok_refund_fail: "pm_card_refundFail"
}
const sandboxDisputeOutcomes: Readonly<Record<string, string>> = { tok_dispute_won: "won", tok_dispute_lost: "lost" }

const isTestKey = (secretKey: string) => /^(sk|rk)_test_/.test(secretKey)

/**
 * The PaymentMethod for a card token: a test token's test PaymentMethod under a test key (any
 * other token approves, as in our sandbox: `pm_card_visa`); under a live key the token as given.
 */
export const paymentMethodFor = (cardToken: string, secretKey: string): string =>
  stripeTestPaymentMethods[cardToken] ?? (isTestKey(secretKey) ? "pm_card_visa" : cardToken)

// Form encoding ---------------------------------------------------------------------------------

/** A form value as Stripe reads one: nested objects as `a[b]`, arrays as `a[0]`. */
export type FormValue = string | number | boolean | ReadonlyArray<FormValue> | { readonly [key: string]: FormValue }

const appendForm = (params: URLSearchParams, name: string, value: FormValue): void => {
  if (Array.isArray(value)) value.forEach((item, i) => appendForm(params, `${name}[${i}]`, item))
  else if (typeof value === "object") {
    for (const [key, item] of Object.entries(value)) appendForm(params, `${name}[${key}]`, item as FormValue)
  } else params.append(name, String(value))
}

export const encodeForm = (values: { readonly [key: string]: FormValue }): URLSearchParams => {
  const params = new URLSearchParams()
  for (const [key, value] of Object.entries(values)) appendForm(params, key, value)
  return params
}

// What the connector reads of Stripe's objects --------------------------------------------------

interface StripeError {
  readonly type?: string
  readonly code?: string
  readonly decline_code?: string
  readonly message?: string
  readonly payment_intent?: StripePaymentIntent
}
interface StripeCharge {
  readonly amount_refunded?: number
  readonly outcome?: { readonly risk_score?: number | null; readonly risk_level?: string | null } | null
}
export interface StripePaymentIntent {
  readonly id: string
  readonly status: string
  readonly amount: number
  readonly amount_capturable: number
  readonly amount_received: number
  readonly currency: string
  readonly created: number
  readonly metadata?: Readonly<Record<string, string>>
  readonly latest_charge?: string | StripeCharge | null
  readonly last_payment_error?: StripeError | null
}

/** An HTTP answer from Stripe: its status and its body, parsed (null when it was no JSON). */
interface Answer {
  readonly status: number
  readonly body: unknown
}

const errorOf = (answer: Answer): StripeError =>
  (typeof answer.body === "object" && answer.body !== null && "error" in answer.body
    ? (answer.body as { error: StripeError }).error
    : {}) ?? {}

const describe = (answer: Answer) => {
  const error = errorOf(answer)
  return `Stripe answered ${answer.status}${error.code ? ` ${error.code}` : ""}${
    error.message ? `: ${error.message}` : ""
  }`
}

// Classification of failures --------------------------------------------------------------------

/** Failures of the transport that happen before a byte of the request is sent. */
const notSentCodes = new Set([
  "ECONNREFUSED",
  "ENOTFOUND",
  "EAI_AGAIN",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "UND_ERR_CONNECT_TIMEOUT"
])

const causeCode = (error: unknown): string | undefined => {
  for (let at: unknown = error, depth = 0; at !== null && typeof at === "object" && depth < 4; depth++) {
    const code = (at as { code?: unknown }).code
    if (typeof code === "string") return code
    at = (at as { cause?: unknown }).cause
  }
  return undefined
}

/**
 * A transport failure: a connection that was never made is `AcquirerUnavailable`; anything else
 * (a timeout, a reset, an answer cut short, a failure we cannot place) may have followed the
 * request's arrival, so its outcome is unknown.
 */
export const classifyTransportFailure = (error: unknown, timeoutMs: number): ProcessorCallError => {
  const name = error instanceof Error ? error.name : ""
  if (name === "TimeoutError") {
    return new AcquirerOutcomeUnknown({ reason: `no answer from Stripe within ${timeoutMs} ms` })
  }
  const code = causeCode(error)
  if (code !== undefined && notSentCodes.has(code)) {
    return new AcquirerUnavailable({ reason: `cannot reach Stripe (${code})` })
  }
  const message = error instanceof Error ? error.message : String(error)
  return new AcquirerOutcomeUnknown({
    reason: `the request to Stripe failed after it may have been sent (${code ?? message})`
  })
}

/**
 * An answer that is not a success and not the operation's own refusal: 401/403 (a wrong key) and
 * 429 (rate limited) were not acted on; a 409 is another request under the same key still
 * running; a 5xx may have been done (Stripe replays a saved 500 under the same key, so the
 * caller's way out is a look-up).
 */
const classifyAnswer = (answer: Answer): ProcessorCallError => {
  if (answer.status === 401 || answer.status === 403 || answer.status === 429) {
    return new AcquirerUnavailable({ reason: describe(answer) })
  }
  return new AcquirerOutcomeUnknown({ reason: describe(answer) })
}

/** Stripe's decline codes in our terms (CONTRACT section 6): the two we name, else do_not_honor. */
export const declineOf = (error: StripeError): Extract<AuthorizationOutcome, { _tag: "Declined" }> => {
  const code = error.decline_code ?? error.code ?? "card_declined"
  if (code === "insufficient_funds" || code === "expired_card") {
    return { _tag: "Declined", ...sandboxDeclines[`tok_decline_${code}`]! }
  }
  return {
    _tag: "Declined",
    code: "do_not_honor",
    message: `${sandboxDeclines.tok_decline_do_not_honor!.message} (Stripe: ${code})`
  }
}

/**
 * The network's risk signal of an approval, from Radar's verdict on the intent's latest charge:
 * a risk level of `highest` or `elevated` is the signal the sandbox gives its tokens of the same
 * meaning (`tok_risk_highest`, `tok_risk_review`: docs/api.md), so a payment Stripe rates highest
 * risk is blocked by our model and an elevated one held for review, as in the sandbox. A normal
 * level reads Radar's `risk_score` (0–100, only with Radar for Fraud Teams) over 100; without
 * one, the ordinary signal, and our fraud model weighs the payment on its own features.
 */
export const riskSignalOf = (intent: StripePaymentIntent): number => {
  const charge = intent.latest_charge
  const outcome = typeof charge === "object" && charge !== null ? charge.outcome : undefined
  if (outcome?.risk_level === "highest") return sandboxRiskSignals.tok_risk_highest!
  if (outcome?.risk_level === "elevated") return sandboxRiskSignals.tok_risk_review!
  const score = outcome?.risk_score
  return typeof score === "number" && Number.isFinite(score)
    ? Math.min(1, Math.max(0, score / 100))
    : ordinaryRiskSignal
}

/** A PaymentIntent in the look-up's terms. */
export const processorPaymentOf = (intent: StripePaymentIntent, paymentId: string): ProcessorPayment => {
  const charge = typeof intent.latest_charge === "object" && intent.latest_charge !== null ? intent.latest_charge : null
  const declined = intent.status === "requires_payment_method" && intent.last_payment_error != null
  return {
    paymentId,
    reference: intent.id,
    currency: intent.currency.toUpperCase(),
    authorizedCents: intent.status === "requires_capture" ? intent.amount_capturable : 0,
    capturedCents: intent.amount_received,
    refundedCents: charge?.amount_refunded ?? 0,
    cancelled: intent.status === "canceled",
    declined
  }
}

/** An authorization's answer: an intent holding the amount is approved; one needing the cardholder (3-D Secure) cannot be, here. */
const authorizationOf = (intent: StripePaymentIntent): AuthorizationOutcome | ProcessorCallError => {
  if (intent.status === "requires_capture" || intent.status === "succeeded") {
    return { _tag: "Approved", reference: intent.id, networkRiskSignal: riskSignalOf(intent) }
  }
  if (intent.status === "requires_payment_method" && intent.last_payment_error != null) {
    return declineOf(intent.last_payment_error)
  }
  if (intent.status === "requires_action") {
    return {
      _tag: "Declined",
      code: "do_not_honor",
      message: "The card requires the cardholder's authentication (3-D Secure), which this service cannot ask for."
    }
  }
  return new AcquirerOutcomeUnknown({ reason: `Stripe left PaymentIntent ${intent.id} in status ${intent.status}` })
}

// Notifications ---------------------------------------------------------------------------------

const disputeReasonOf = (reason: unknown): DisputeReason =>
  reason === "fraudulent" || reason === "product_not_received" || reason === "duplicate" ? reason : "other"

interface StripeEvent {
  readonly id: string
  readonly type: string
  readonly data: { readonly object: Record<string, unknown> }
}

const parseEvent = (body: string): StripeEvent | null => {
  try {
    const event = JSON.parse(body) as Partial<StripeEvent>
    const valid = typeof event.id === "string" && typeof event.type === "string" &&
      typeof event.data?.object === "object" && event.data.object !== null
    return valid ? (event as StripeEvent) : null
  } catch {
    return null
  }
}

/** The signature header's timestamp, in seconds (null when there is none). */
const signedAtSeconds = (header: string): number | null => {
  const match = /(?:^|,)\s*t=(\d{1,12})(?:,|$)/.exec(header)
  return match === null ? null : Number(match[1])
}

// The connector ---------------------------------------------------------------------------------

export const make = (options: StripeOptions): AcquirerShape => {
  const base = options.apiBase.replace(/\/+$/, "")
  const toleranceMs = options.signatureToleranceMs ?? 300_000

  const request = (
    method: "GET" | "POST",
    path: string,
    call: { readonly form?: URLSearchParams; readonly idempotencyKey?: string; readonly timeoutMs: number }
  ): Effect.Effect<Answer, ProcessorCallError> =>
    Effect.tryPromise({
      try: async (interrupted) => {
        const headers: Record<string, string> = {
          authorization: `Bearer ${Redacted.value(options.secretKey)}`,
          "stripe-version": stripeApiVersion
        }
        if (call.form !== undefined) headers["content-type"] = "application/x-www-form-urlencoded"
        if (call.idempotencyKey !== undefined) headers["idempotency-key"] = call.idempotencyKey
        const response = await fetch(`${base}${path}`, {
          method,
          headers,
          ...(call.form === undefined ? {} : { body: call.form.toString() }),
          signal: AbortSignal.any([interrupted, AbortSignal.timeout(call.timeoutMs)])
        })
        const text = await response.text()
        let body: unknown
        try {
          body = JSON.parse(text)
        } catch {
          body = null
        }
        return { status: response.status, body }
      },
      catch: (error) => classifyTransportFailure(error, call.timeoutMs)
    }).pipe(Effect.flatMap((answer) =>
      answer.status >= 200 && answer.status < 300 && (typeof answer.body !== "object" || answer.body === null)
        ? Effect.fail(new AcquirerOutcomeUnknown({ reason: `Stripe answered ${answer.status} without a JSON body` }))
        : Effect.succeed(answer)
    ))

  const ok = (answer: Answer) => answer.status >= 200 && answer.status < 300

  const authorizeCall = (authorization: AuthorizationRequest, timeoutMs: number) =>
    Effect.gen(function*() {
      const secret = Redacted.value(options.secretKey)
      const disputeOutcome = sandboxDisputeOutcomes[authorization.cardToken]
      const form = encodeForm({
        amount: authorization.amountCents,
        currency: authorization.currency.toLowerCase(),
        payment_method: paymentMethodFor(authorization.cardToken, secret),
        payment_method_types: ["card"],
        confirm: true,
        capture_method: "manual",
        metadata: {
          payment_id: authorization.paymentId,
          merchant_id: authorization.merchantId,
          ...(disputeOutcome !== undefined && isTestKey(secret) ? { sandbox_dispute_outcome: disputeOutcome } : {})
        },
        expand: ["latest_charge"]
      })
      const answer = yield* request("POST", "/v1/payment_intents", {
        form,
        idempotencyKey: (options.authorizeKey ?? operationKeys.authorize)(authorization.paymentId),
        timeoutMs
      })
      if (ok(answer)) {
        const outcome = authorizationOf(answer.body as StripePaymentIntent)
        return "_tag" in outcome && (outcome._tag === "Approved" || outcome._tag === "Declined")
          ? outcome as AuthorizationOutcome
          : yield* Effect.fail(outcome as ProcessorCallError)
      }
      const error = errorOf(answer)
      if (answer.status === 402) return declineOf(error)
      if (answer.status === 400 && error.type === "card_error") return declineOf(error)
      if ((answer.status === 400 || answer.status === 404) && error.type === "invalid_request_error") {
        return {
          _tag: "Declined",
          code: "do_not_honor",
          message: `Stripe refused the authorization: ${error.message ?? error.code ?? "invalid request"}`
        } as const
      }
      return yield* Effect.fail(classifyAnswer(answer))
    })

  /** The intent of a payment: the reference when the authorization gave one, else Stripe's search. */
  const intentId = (operation: OperationRequest): Effect.Effect<string | null, ProcessorCallError> =>
    operation.reference !== null
      ? Effect.succeed(operation.reference)
      : Effect.map(searchIntent(operation.paymentId, operation.timeoutMs), (intent) => intent?.id ?? null)

  const searchIntent = (paymentId: string, timeoutMs: number) =>
    Effect.gen(function*() {
      const query = new URLSearchParams({
        query: `metadata['payment_id']:'${paymentId.replace(/['\\]/g, "")}'`,
        limit: "10"
      })
      query.append("expand[]", "data.latest_charge")
      const answer = yield* request("GET", `/v1/payment_intents/search?${query}`, { timeoutMs })
      if (!ok(answer)) return yield* Effect.fail(classifyAnswer(answer))
      const intents = ((answer.body as { data?: Array<StripePaymentIntent> }).data ?? [])
        .filter((intent) => intent.metadata?.payment_id === paymentId)
      // One key per authorization makes one intent per payment; should there be more, the one
      // that holds or moved money speaks for the payment.
      return intents.find((intent) => intent.status === "requires_capture" || intent.status === "succeeded") ??
        intents[0] ?? null
    })

  /** The operation could not be sent: Stripe does not (yet) list an intent for the payment. */
  const notFound = (operation: OperationRequest) =>
    new AcquirerUnavailable({
      reason: `Stripe's search finds no PaymentIntent for ${operation.paymentId} (search lags writes by up to a minute)`
    })

  const refusedOrUnknown = (answer: Answer): AcquirerRefused | ProcessorCallError => {
    const error = errorOf(answer)
    if (answer.status === 400 || answer.status === 402 || answer.status === 404) {
      return new AcquirerRefused({
        code: error.code ?? error.type ?? `http_${answer.status}`,
        message: error.message ?? describe(answer)
      })
    }
    return classifyAnswer(answer)
  }

  const capture = (capture: CaptureRequest) =>
    Effect.gen(function*() {
      const id = yield* intentId(capture)
      if (id === null) return yield* Effect.fail(notFound(capture))
      const answer = yield* request("POST", `/v1/payment_intents/${encodeURIComponent(id)}/capture`, {
        form: encodeForm({ amount_to_capture: capture.amountCents }),
        idempotencyKey: capture.idempotencyKey,
        timeoutMs: capture.timeoutMs
      })
      if (!ok(answer)) return yield* Effect.fail(refusedOrUnknown(answer))
    })

  const cancel = (cancel: OperationRequest) =>
    Effect.gen(function*() {
      const id = yield* intentId(cancel)
      // Nothing to cancel (see docs/processor.md on search's lag when there is no reference).
      if (id === null) return
      const answer = yield* request("POST", `/v1/payment_intents/${encodeURIComponent(id)}/cancel`, {
        form: encodeForm({}),
        idempotencyKey: cancel.idempotencyKey,
        timeoutMs: cancel.timeoutMs
      })
      if (ok(answer)) return
      const error = errorOf(answer)
      if (error.code === "payment_intent_unexpected_state" && error.payment_intent?.status === "canceled") return
      return yield* Effect.fail(refusedOrUnknown(answer))
    })

  const refund = (refund: RefundRequest) =>
    Effect.gen(function*() {
      const id = yield* intentId(refund)
      if (id === null) return yield* Effect.fail(notFound(refund))
      const answer = yield* request("POST", "/v1/refunds", {
        form: encodeForm({
          payment_intent: id,
          amount: refund.amountCents,
          metadata: { payment_id: refund.paymentId }
        }),
        idempotencyKey: refund.idempotencyKey,
        timeoutMs: refund.timeoutMs
      })
      if (!ok(answer)) return yield* Effect.fail(refusedOrUnknown(answer))
      const status = (answer.body as { status?: string }).status
      if (status === "failed" || status === "canceled") {
        return yield* Effect.fail(
          new AcquirerRefused({ code: `refund_${status}`, message: `Stripe's refund ended ${status}` })
        )
      }
    })

  const retrieve = (id: string, timeoutMs: number) =>
    Effect.gen(function*() {
      const answer = yield* request("GET", `/v1/payment_intents/${encodeURIComponent(id)}?expand%5B%5D=latest_charge`, {
        timeoutMs
      })
      if (answer.status === 404) return null
      if (!ok(answer)) return yield* Effect.fail(classifyAnswer(answer))
      return answer.body as StripePaymentIntent
    })

  const lookup = (
    query: { readonly paymentId: string; readonly reference?: string | null; readonly timeoutMs: number }
  ) =>
    Effect.gen(function*() {
      const intent = query.reference != null
        ? yield* retrieve(query.reference, query.timeoutMs)
        : yield* searchIntent(query.paymentId, query.timeoutMs)
      return intent === null ||
          (intent.metadata?.payment_id !== undefined && intent.metadata.payment_id !== query.paymentId)
        ? null
        : processorPaymentOf(intent, query.paymentId)
    })

  /** Stripe's `created` is in seconds: the period's bounds rounded up, so consecutive periods share no second. */
  const payments = (period: { readonly fromMs: number; readonly toMs: number }) =>
    Effect.gen(function*() {
      const found: Array<ProcessorPayment> = []
      let after: string | null = null
      for (let page = 0; page < 10_000; page++) {
        const query = new URLSearchParams({
          "created[gte]": String(Math.ceil(period.fromMs / 1000)),
          "created[lt]": String(Math.ceil(period.toMs / 1000)),
          limit: "100"
        })
        query.append("expand[]", "data.latest_charge")
        if (after !== null) query.set("starting_after", after)
        const answer = yield* request("GET", `/v1/payment_intents?${query}`, { timeoutMs: options.defaultTimeoutMs })
        if (!ok(answer)) return yield* Effect.fail(classifyAnswer(answer))
        const list = answer.body as { data: Array<StripePaymentIntent>; has_more: boolean }
        for (const intent of list.data) {
          const paymentId = intent.metadata?.payment_id
          if (paymentId !== undefined) found.push(processorPaymentOf(intent, paymentId))
        }
        if (!list.has_more || list.data.length === 0) break
        after = list.data[list.data.length - 1]!.id
      }
      return found
    })

  /** Our payment id of an intent, read from the intent itself (disputes carry the intent's id, not its metadata). */
  const paymentIdOfIntent = (intentId: unknown) =>
    Effect.gen(function*() {
      if (typeof intentId !== "string") {
        return yield* Effect.fail(new InvalidNotification({ reason: "the event names no payment_intent" }))
      }
      const intent = yield* retrieve(intentId, options.defaultTimeoutMs)
      const paymentId = intent?.metadata?.payment_id
      if (paymentId === undefined) {
        return yield* Effect.fail(
          new InvalidNotification({ reason: `PaymentIntent ${intentId} is not one of ours (no metadata.payment_id)` })
        )
      }
      return paymentId
    })

  const disputeNotification = (event: StripeEvent) =>
    Effect.gen(function*() {
      const dispute = event.data.object
      const status = String(dispute.status)
      // An inquiry (`warning_*`) moves no money: it is not a dispute in our terms.
      if (status.startsWith("warning_")) return { _tag: "Ignored", eventId: event.id, type: event.type } as const
      if (event.type === "charge.dispute.closed" && status !== "won" && status !== "lost") {
        return { _tag: "Ignored", eventId: event.id, type: event.type } as const
      }
      const paymentId = yield* paymentIdOfIntent(dispute.payment_intent)
      const notification: DisputeNotification = {
        acquirerDisputeId: String(dispute.id),
        paymentId,
        action: event.type === "charge.dispute.created"
          ? { _tag: "Open", reason: disputeReasonOf(dispute.reason), amountCents: Number(dispute.amount) }
          : { _tag: "Resolve", outcome: status as "won" | "lost" }
      }
      return { _tag: "Dispute", eventId: event.id, dispute: notification } as const
    })

  const refundNotification = (event: StripeEvent) =>
    Effect.gen(function*() {
      const refund = event.data.object
      if (refund.status !== "failed") return { _tag: "Ignored", eventId: event.id, type: event.type } as const
      const metadata = refund.metadata as Record<string, string> | undefined
      const paymentId = metadata?.payment_id ?? (yield* paymentIdOfIntent(refund.payment_intent))
      return {
        _tag: "RefundFailed",
        eventId: event.id,
        refundId: String(refund.id),
        paymentId,
        amountCents: Number(refund.amount),
        reason: typeof refund.failure_reason === "string" ? refund.failure_reason : "failed"
      } as const
    })

  const notification = (
    input: { readonly body: string; readonly signature: string | undefined; readonly nowMs: number }
  ) =>
    Effect.gen(function*() {
      if (options.webhookSecret === null) {
        return yield* Effect.fail(new InvalidNotification({ reason: "no STRIPE_WEBHOOK_SECRET is configured" }))
      }
      if (input.signature === undefined) {
        return yield* Effect.fail(new InvalidNotification({ reason: "no Stripe-Signature header" }))
      }
      const signedAt = signedAtSeconds(input.signature)
      if (signedAt === null) {
        return yield* Effect.fail(new InvalidNotification({ reason: "the Stripe-Signature header has no timestamp" }))
      }
      if (Math.abs(input.nowMs - signedAt * 1000) > toleranceMs) {
        return yield* Effect.fail(
          new InvalidNotification({ reason: `the signature's timestamp is more than ${toleranceMs / 1000} s from now` })
        )
      }
      const nowSeconds = Math.floor(input.nowMs / 1000)
      if (
        !verifyWebhookSignature(
          Redacted.value(options.webhookSecret),
          input.signature,
          input.body,
          nowSeconds,
          Math.ceil(toleranceMs / 1000) + 1
        )
      ) {
        return yield* Effect.fail(
          new InvalidNotification({ reason: "no v1 signature of the body matches the endpoint's secret" })
        )
      }
      const event = parseEvent(input.body)
      if (event === null) {
        return yield* Effect.fail(new InvalidNotification({ reason: "the body is not a Stripe event" }))
      }
      switch (event.type) {
        case "charge.dispute.created":
        case "charge.dispute.closed":
          return yield* disputeNotification(event)
        case "refund.failed":
        case "charge.refund.updated":
          return yield* refundNotification(event)
        default:
          return { _tag: "Ignored", eventId: event.id, type: event.type } as const
      }
    })

  return {
    authorize: (authorization) => authorizeCall(authorization, options.defaultTimeoutMs),
    // A timeout is an unknown outcome here, never null: null would read as the network's
    // silence (`network_timeout`), and the intent may exist.
    authorizeWithin: (authorization, timeoutMs) => authorizeCall(authorization, timeoutMs),
    operations: {
      capture,
      cancel,
      refund,
      lookup,
      payments,
      notification: (input) =>
        notification(input) as Effect.Effect<ProcessorNotification, InvalidNotification | ProcessorCallError>
    }
  }
}

/** The Stripe connector as the Acquirer, configured by `STRIPE_*` (src/platform/Config.ts). */
export const layerStripe = Layer.effect(
  Acquirer,
  Effect.gen(function*() {
    const config = yield* Config.AppConfig
    const stripe = config.stripe
    if (stripe === null) {
      return yield* Effect.die(
        new Error("layerStripe needs STRIPE_SECRET_KEY (ACQUIRER=stripe): the configuration check should have said so")
      )
    }
    return make({ ...stripe, defaultTimeoutMs: config.acquirerTimeoutMs })
  })
)
