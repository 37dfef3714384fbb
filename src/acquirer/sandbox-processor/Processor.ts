import { delay, http, HttpResponse, type RequestHandler } from "msw"
import { randomBytes } from "node:crypto"

/**
 * A stand-in for Stripe, for the parts the Stripe connector uses (src/acquirer/Stripe.ts), as msw
 * request handlers: PaymentIntents created and confirmed with manual or automatic capture,
 * declined per Stripe's test PaymentMethods, captured (whole or in part), cancelled, refunded,
 * retrieved, listed by creation time and searched by metadata; idempotent replays by
 * `Idempotency-Key` (the saved answer again; other parameters under a used key: 400
 * `idempotency_error`; the key's first request still running: 409); disputes of
 * `pm_card_createDispute` payments as events; and faults switched at run time (`Faults`). The
 * same handlers answer the connector's tests in process (msw's `setupServer`) and serve the
 * standalone sandbox processor (./Server.ts). It emulates what the connector relies on, not Stripe:
 * docs/processor.md says what it leaves out.
 */

export interface Faults {
  /** Share of mutating requests answered 500 without doing anything. */
  readonly errorRate: number
  /** Share of mutating requests done, then answered with a network error (the answer is lost; the idempotent result is saved). */
  readonly lostAnswerRate: number
  /** Added before every answer. */
  readonly latencyMs: number
  /** Share of webhook notifications sent twice (the standalone server sends them). */
  readonly duplicateRate: number
  /** A PaymentIntent becomes searchable this long after it was created (Stripe's search lags by up to a minute). */
  readonly searchLagMs: number
}

export const noFaults: Faults = { errorRate: 0, lostAnswerRate: 0, latencyMs: 0, duplicateRate: 0, searchLagMs: 0 }

export interface ProcessorOptions {
  /** The secret key requests must carry; any `sk_…` key when absent. */
  readonly secretKey?: string
  /** Where the handlers answer: an origin (`https://api.stripe.com`), or `*` for any. */
  readonly origin?: string
  readonly now?: () => number
  readonly random?: () => number
  /** After a capture, a dispute payment's dispute opens this much later, and closes this much after it opened (see `advance`). */
  readonly disputeOpenAfterMs?: number
  readonly disputeCloseAfterMs?: number
  /** A refund of a `pm_card_refundFail` payment succeeds, then fails this much later (see `advance`). */
  readonly refundFailAfterMs?: number
}

type Json = Record<string, unknown>

interface Intent {
  readonly id: string
  readonly created: number
  readonly amount: number
  readonly currency: string
  readonly captureMethod: string
  readonly paymentMethod: string
  readonly metadata: Record<string, string>
  status: string
  amountCapturable: number
  amountReceived: number
  lastPaymentError: Json | null
  canceledAt: number | null
  charge: Charge | null
  /** When it was captured, in ms (disputes count from it). */
  capturedAtMs: number | null
}

interface Charge {
  readonly id: string
  readonly created: number
  readonly outcome: Json
  paid: boolean
  status: string
  amountCaptured: number
  amountRefunded: number
  captured: boolean
  disputed: boolean
}

interface Dispute {
  readonly id: string
  readonly intentId: string
  readonly created: number
  readonly openedAtMs: number
  readonly amount: number
  readonly outcome: "won" | "lost"
  status: string
}

/** An event as Stripe sends it to a webhook endpoint. */
export interface StripeEvent {
  readonly id: string
  readonly object: "event"
  readonly api_version: string
  readonly type: string
  readonly created: number
  readonly livemode: false
  readonly pending_webhooks: number
  readonly request: { readonly id: null; readonly idempotency_key: null }
  readonly data: { readonly object: Json }
}

/** A card test PaymentMethod's behaviour: approved with a Radar score, or declined. */
type CardBehaviour =
  | {
    readonly approve: true
    readonly riskScore: number
    readonly riskLevel: string
    readonly dispute?: true
    readonly refundFails?: true
  }
  | {
    readonly approve: false
    readonly code: string
    readonly declineCode: string
    readonly message: string
    readonly riskScore: number
  }

const normal = { approve: true, riskScore: 5, riskLevel: "normal" } as const
export const testPaymentMethods: Readonly<Record<string, CardBehaviour>> = {
  pm_card_visa: normal,
  pm_card_mastercard: normal,
  pm_card_amex: normal,
  pm_card_createDispute: { ...normal, dispute: true },
  // Stripe's: the charge succeeds, a refund of it succeeds and fails some time later (refund.failed).
  pm_card_refundFail: { ...normal, refundFails: true },
  pm_card_riskLevelElevated: { approve: true, riskScore: 75, riskLevel: "elevated" },
  // Approved with Radar's verdict, as Stripe does with its default block rule turned off: the
  // service screens with its own model (src/acquirer/Stripe.ts, riskSignalOf).
  pm_card_riskLevelHighest: { approve: true, riskScore: 95, riskLevel: "highest" },
  pm_card_chargeDeclined: {
    approve: false,
    code: "card_declined",
    declineCode: "generic_decline",
    message: "Your card was declined.",
    riskScore: 20
  },
  pm_card_chargeDeclinedInsufficientFunds: {
    approve: false,
    code: "card_declined",
    declineCode: "insufficient_funds",
    message: "Your card has insufficient funds.",
    riskScore: 20
  },
  pm_card_chargeDeclinedExpiredCard: {
    approve: false,
    code: "expired_card",
    declineCode: "expired_card",
    message: "Your card has expired.",
    riskScore: 20
  }
}

// Form bodies -----------------------------------------------------------------------------------

/** A form body as Stripe reads it: `a[b]=1` nests, `a[0]=x` and `a[]=x` make an array; values stay text. */
export const decodeForm = (text: string): Json => {
  const root: Json = {}
  for (const [name, value] of new URLSearchParams(text)) {
    const keys = name.replace(/\]/g, "").split("[")
    let at: Record<string, unknown> = root
    keys.forEach((given, i) => {
      const key = given === "" && Array.isArray(at) ? String(at.length) : given
      if (i === keys.length - 1) at[key] = value
      else at = (at[key] ??= /^\d*$/.test(keys[i + 1]!) ? [] : {}) as Record<string, unknown>
    })
  }
  return root
}

const stripeError = (status: number, error: Json) => HttpResponse.json({ error }, { status })

export const makeProcessor = (options: ProcessorOptions = {}) => {
  const now = options.now ?? Date.now
  const random = options.random ?? Math.random
  const origin = options.origin ?? "*"
  let faults: Faults = noFaults
  const intents = new Map<string, Intent>()
  const disputes = new Map<string, Dispute>()
  /** Refunds of `pm_card_refundFail` payments that have not failed yet, with when they were made. */
  const failingRefunds: Array<{ readonly refund: Json; readonly intent: Intent; readonly createdMs: number }> = []
  const idempotency = new Map<string, { readonly fingerprint: string; readonly status: number; readonly body: Json }>()
  const running = new Set<string>()
  const events: Array<StripeEvent> = []
  const listeners: Array<(event: StripeEvent) => void> = []
  const id = (prefix: string) => `${prefix}_${randomBytes(12).toString("base64url").replace(/[-_]/g, "x")}`
  const seconds = () => Math.floor(now() / 1000)

  const emit = (type: string, object: Json) => {
    const event: StripeEvent = {
      id: id("evt"),
      object: "event",
      api_version: "2023-08-16",
      type,
      created: seconds(),
      livemode: false,
      pending_webhooks: 1,
      request: { id: null, idempotency_key: null },
      data: { object }
    }
    events.push(event)
    for (const listener of listeners) listener(event)
  }

  // Objects as Stripe shows them ----------------------------------------------------------------

  const chargeJson = (intent: Intent, charge: Charge): Json => ({
    id: charge.id,
    object: "charge",
    amount: intent.amount,
    amount_captured: charge.amountCaptured,
    amount_refunded: charge.amountRefunded,
    billing_details: { address: null, email: null, name: null, phone: null },
    captured: charge.captured,
    created: charge.created,
    currency: intent.currency,
    disputed: charge.disputed,
    livemode: false,
    metadata: {},
    outcome: charge.outcome,
    paid: charge.paid,
    payment_intent: intent.id,
    refunded: charge.amountRefunded > 0 && charge.amountRefunded === charge.amountCaptured,
    status: charge.status
  })

  const intentJson = (intent: Intent, expandCharge: boolean): Json => ({
    id: intent.id,
    object: "payment_intent",
    amount: intent.amount,
    amount_capturable: intent.amountCapturable,
    amount_received: intent.amountReceived,
    canceled_at: intent.canceledAt,
    cancellation_reason: null,
    capture_method: intent.captureMethod,
    confirmation_method: "automatic",
    created: intent.created,
    currency: intent.currency,
    last_payment_error: intent.lastPaymentError,
    latest_charge: intent.charge === null ? null : expandCharge ? chargeJson(intent, intent.charge) : intent.charge.id,
    livemode: false,
    metadata: intent.metadata,
    payment_method: intent.paymentMethod,
    payment_method_types: ["card"],
    status: intent.status
  })

  const disputeJson = (dispute: Dispute): Json => ({
    id: dispute.id,
    object: "dispute",
    amount: dispute.amount,
    balance_transactions: [],
    charge: intents.get(dispute.intentId)?.charge?.id ?? "",
    created: dispute.created,
    currency: intents.get(dispute.intentId)?.currency ?? "usd",
    evidence: {},
    evidence_details: {
      due_by: dispute.created + 7 * 86_400,
      has_evidence: false,
      past_due: false,
      submission_count: 0
    },
    is_charge_refundable: false,
    livemode: false,
    metadata: {},
    payment_intent: dispute.intentId,
    reason: "fraudulent",
    status: dispute.status
  })

  // Operations ----------------------------------------------------------------------------------

  /** A create's amount, currency and test payment method, or the answer that refuses it. */
  const checkCreate = (form: Json):
    | { status: number; body: Json }
    | { amount: number; currency: string; paymentMethod: string; behaviour: CardBehaviour } =>
  {
    const amount = Number(form.amount)
    const currency = typeof form.currency === "string" ? form.currency : ""
    if (!Number.isSafeInteger(amount) || amount < 1) {
      return {
        status: 400,
        body: {
          error: {
            type: "invalid_request_error",
            code: "parameter_invalid_integer",
            param: "amount",
            message: "Invalid integer"
          }
        }
      }
    }
    if (!/^[a-z]{3}$/.test(currency)) {
      return {
        status: 400,
        body: { error: { type: "invalid_request_error", param: "currency", message: "Invalid currency" } }
      }
    }
    const paymentMethod = String(form.payment_method ?? "")
    const behaviour = testPaymentMethods[paymentMethod]
    if (behaviour === undefined) {
      return {
        status: 400,
        body: {
          error: {
            type: "invalid_request_error",
            code: "resource_missing",
            param: "payment_method",
            message: `No such PaymentMethod: '${paymentMethod}'`
          }
        }
      }
    }
    return { amount, currency, paymentMethod, behaviour }
  }

  /** The charge of a confirmed intent, as the test card decides it. */
  const chargeOf = (behaviour: CardBehaviour): Charge => {
    return {
      id: id("ch"),
      created: seconds(),
      outcome: {
        type: behaviour.approve ? "authorized" : behaviour.declineCode === "fraudulent" ? "blocked" : "issuer_declined",
        network_status: behaviour.approve
          ? "approved_by_network"
          : behaviour.declineCode === "fraudulent"
          ? "not_sent_to_network"
          : "declined_by_network",
        reason: behaviour.approve
          ? null
          : behaviour.declineCode === "fraudulent"
          ? "highest_risk_level"
          : behaviour.declineCode,
        risk_level: behaviour.approve ? behaviour.riskLevel : "highest",
        risk_score: behaviour.riskScore,
        seller_message: behaviour.approve ? "Payment complete." : "The bank declined the payment."
      },
      paid: behaviour.approve,
      status: behaviour.approve ? "succeeded" : "failed",
      amountCaptured: 0,
      amountRefunded: 0,
      captured: false,
      disputed: false
    }
  }

  const create = (form: Json): { status: number; body: Json } => {
    const checked = checkCreate(form)
    if ("status" in checked) return checked
    const { amount, currency, paymentMethod, behaviour } = checked
    const captureMethod = String(form.capture_method ?? "automatic")
    const intent: Intent = {
      id: id("pi"),
      created: seconds(),
      amount,
      currency,
      captureMethod,
      paymentMethod,
      metadata: (form.metadata ?? {}) as Record<string, string>,
      status: "requires_confirmation",
      amountCapturable: 0,
      amountReceived: 0,
      lastPaymentError: null,
      canceledAt: null,
      charge: null,
      capturedAtMs: null
    }
    intents.set(intent.id, intent)
    if (form.confirm !== "true") return { status: 200, body: intentJson(intent, false) }
    const charge = chargeOf(behaviour)
    intent.charge = charge
    const expand = Array.isArray(form.expand) && form.expand.includes("latest_charge")
    if (!behaviour.approve) {
      intent.status = "requires_payment_method"
      intent.lastPaymentError = {
        type: "card_error",
        code: behaviour.code,
        decline_code: behaviour.declineCode,
        message: behaviour.message,
        charge: charge.id
      }
      return {
        status: 402,
        body: { error: { ...intent.lastPaymentError, payment_intent: intentJson(intent, expand) } }
      }
    }
    if (captureMethod === "manual") {
      intent.status = "requires_capture"
      intent.amountCapturable = amount
    } else {
      settleCapture(intent, amount)
    }
    return { status: 200, body: intentJson(intent, expand) }
  }

  const settleCapture = (intent: Intent, amount: number) => {
    intent.status = "succeeded"
    intent.amountCapturable = 0
    intent.amountReceived = amount
    intent.capturedAtMs = now()
    intent.charge!.captured = true
    intent.charge!.amountCaptured = amount
  }

  const unexpectedState = (intent: Intent, action: string) => ({
    status: 400,
    body: {
      error: {
        type: "invalid_request_error",
        code: "payment_intent_unexpected_state",
        message: `This PaymentIntent could not be ${action} because it has a status of ${intent.status}.`,
        payment_intent: intentJson(intent, false)
      }
    }
  })
  const missing = (what: string, id: string) => ({
    status: 404,
    body: { error: { type: "invalid_request_error", code: "resource_missing", message: `No such ${what}: '${id}'` } }
  })

  const capture = (intentId: string, form: Json) => {
    const intent = intents.get(intentId)
    if (intent === undefined) return missing("payment_intent", intentId)
    if (intent.status !== "requires_capture") return unexpectedState(intent, "captured")
    const amount = form.amount_to_capture === undefined ? intent.amountCapturable : Number(form.amount_to_capture)
    if (!Number.isSafeInteger(amount) || amount < 1 || amount > intent.amountCapturable) {
      return {
        status: 400,
        body: {
          error: {
            type: "invalid_request_error",
            code: "amount_too_large",
            param: "amount_to_capture",
            message: `The amount to capture must be at most ${intent.amountCapturable}.`
          }
        }
      }
    }
    settleCapture(intent, amount)
    return {
      status: 200,
      body: intentJson(intent, Array.isArray(form.expand) && form.expand.includes("latest_charge"))
    }
  }

  const cancel = (intentId: string) => {
    const intent = intents.get(intentId)
    if (intent === undefined) return missing("payment_intent", intentId)
    if (
      !["requires_capture", "requires_payment_method", "requires_confirmation", "requires_action"].includes(
        intent.status
      )
    ) {
      return unexpectedState(intent, "canceled")
    }
    intent.status = "canceled"
    intent.amountCapturable = 0
    intent.canceledAt = seconds()
    return { status: 200, body: intentJson(intent, false) }
  }

  const refund = (form: Json) => {
    const intentId = String(form.payment_intent ?? "")
    const intent = intents.get(intentId)
    if (intent === undefined) return missing("payment_intent", intentId)
    if (intent.status !== "succeeded" || intent.charge === null) {
      return {
        status: 400,
        body: {
          error: {
            type: "invalid_request_error",
            code: "charge_not_captured",
            message: "This PaymentIntent has no captured charge to refund."
          }
        }
      }
    }
    const remaining = intent.charge.amountCaptured - intent.charge.amountRefunded
    const amount = form.amount === undefined ? remaining : Number(form.amount)
    if (remaining === 0) {
      return {
        status: 400,
        body: {
          error: {
            type: "invalid_request_error",
            code: "charge_already_refunded",
            message: "Charge has already been refunded."
          }
        }
      }
    }
    if (!Number.isSafeInteger(amount) || amount < 1 || amount > remaining) {
      return {
        status: 400,
        body: {
          error: {
            type: "invalid_request_error",
            code: "amount_too_large",
            param: "amount",
            message: `Refund amount must be at most ${remaining}.`
          }
        }
      }
    }
    intent.charge.amountRefunded += amount
    const body = {
      id: id("re"),
      object: "refund",
      amount,
      charge: intent.charge.id,
      created: seconds(),
      currency: intent.currency,
      metadata: (form.metadata ?? {}) as Json,
      payment_intent: intent.id,
      status: "succeeded"
    }
    const card = testPaymentMethods[intent.paymentMethod]
    if (card?.approve === true && card.refundFails === true) {
      failingRefunds.push({ refund: body, intent, createdMs: now() })
    }
    return { status: 200, body }
  }

  // Reads ---------------------------------------------------------------------------------------

  const retrieve = (intentId: string, url: URL) => {
    const intent = intents.get(intentId)
    if (intent === undefined) return HttpResponse.json(missing("payment_intent", intentId).body, { status: 404 })
    return HttpResponse.json(intentJson(intent, url.searchParams.getAll("expand[]").includes("latest_charge")))
  }

  const list = (url: URL) => {
    const gte = Number(url.searchParams.get("created[gte]") ?? 0)
    const lt = Number(url.searchParams.get("created[lt]") ?? Number.MAX_SAFE_INTEGER)
    const limit = Math.min(100, Math.max(1, Number(url.searchParams.get("limit") ?? 10)))
    const after = url.searchParams.get("starting_after")
    const expand = url.searchParams.getAll("expand[]").includes("data.latest_charge")
    // Newest first, as Stripe lists.
    let all = [...intents.values()].filter((intent) => intent.created >= gte && intent.created < lt).reverse()
    if (after !== null) all = all.slice(all.findIndex((intent) => intent.id === after) + 1)
    const page = all.slice(0, limit)
    return HttpResponse.json({
      object: "list",
      url: "/v1/payment_intents",
      has_more: all.length > limit,
      data: page.map((intent) => intentJson(intent, expand))
    })
  }

  /** Only `metadata['key']:'value'`, the one query the connector asks. */
  const search = (url: URL) => {
    const match = /^metadata\['([^']+)'\]:'([^']*)'$/.exec(url.searchParams.get("query") ?? "")
    if (match === null) {
      return HttpResponse.json({ error: { type: "invalid_request_error", message: "Unsupported search query" } }, {
        status: 400
      })
    }
    const [, key, value] = match
    const visibleBefore = (now() - faults.searchLagMs) / 1000
    const expand = url.searchParams.getAll("expand[]").includes("data.latest_charge")
    const found = [...intents.values()].filter((intent) =>
      intent.metadata[key!] === value && intent.created <= visibleBefore
    )
    return HttpResponse.json({
      object: "search_result",
      url: "/v1/payment_intents/search",
      has_more: false,
      next_page: null,
      data: found.map((intent) => intentJson(intent, expand))
    })
  }

  // Disputes --------------------------------------------------------------------------------------

  /**
   * Opens the disputes due at `nowMs` (a dispute payment captured `disputeOpenAfterMs` ago) and
   * closes those due (open `disputeCloseAfterMs`), and fails the refunds of `pm_card_refundFail`
   * payments made `refundFailAfterMs` ago, with events. The standalone server calls it on
   * a timer; tests call it when they want time to have passed.
   */
  const advance = (nowMs: number = now()) => {
    const openAfter = options.disputeOpenAfterMs ?? 0
    const closeAfter = options.disputeCloseAfterMs ?? 0
    for (const intent of intents.values()) {
      const disputeCard = testPaymentMethods[intent.paymentMethod]
      if (disputeCard?.approve !== true || disputeCard.dispute !== true || intent.capturedAtMs === null) continue
      if (intent.charge!.disputed || nowMs < intent.capturedAtMs + openAfter) continue
      intent.charge!.disputed = true
      const dispute: Dispute = {
        id: id("dp"),
        intentId: intent.id,
        created: Math.floor(nowMs / 1000),
        openedAtMs: nowMs,
        amount: intent.charge!.amountCaptured - intent.charge!.amountRefunded,
        outcome: intent.metadata.sandbox_dispute_outcome === "won" ? "won" : "lost",
        status: "needs_response"
      }
      disputes.set(dispute.id, dispute)
      emit("charge.dispute.created", disputeJson(dispute))
    }
    for (const dispute of disputes.values()) {
      if (dispute.status !== "needs_response" || nowMs < dispute.openedAtMs + closeAfter) continue
      dispute.status = dispute.outcome
      emit("charge.dispute.closed", disputeJson(dispute))
    }
    // Refunds of pm_card_refundFail payments fail: the money goes back to the charge.
    const failAfter = options.refundFailAfterMs ?? 0
    for (let i = 0; i < failingRefunds.length;) {
      const { createdMs, intent, refund } = failingRefunds[i]!
      if (nowMs < createdMs + failAfter) {
        i++
        continue
      }
      failingRefunds.splice(i, 1)
      intent.charge!.amountRefunded -= Number(refund.amount)
      emit("refund.failed", { ...refund, status: "failed", failure_reason: "expired_or_canceled_card" })
    }
  }

  // The HTTP surface ----------------------------------------------------------------------------

  const authorized = (request: Request) => {
    const match = /^Bearer (\S+)$/.exec(request.headers.get("authorization") ?? "")
    return match !== null &&
      (options.secretKey === undefined ? match[1]!.startsWith("sk_") : match[1] === options.secretKey)
  }
  const unauthorized = () => stripeError(401, { type: "invalid_request_error", message: "Invalid API Key provided." })

  /**
   * A mutating request under Stripe's idempotency: a saved answer is replayed, other parameters
   * under a used key are refused, a key whose first request is running is a 409; then the
   * faults: a 500 before anything is done, or the answer lost after it was done.
   */
  const mutation = (request: Request, operation: (form: Json) => { status: number; body: Json }) => async () => {
    if (!authorized(request)) return unauthorized()
    const text = await request.text()
    const key = request.headers.get("idempotency-key")
    const fingerprint = `${request.method} ${new URL(request.url).pathname} ${
      [...new URLSearchParams(text)].map(([k, v]) => `${k}=${v}`).sort().join("&")
    }`
    if (key !== null) {
      const saved = idempotency.get(key)
      if (saved !== undefined && saved.fingerprint !== fingerprint) {
        return stripeError(400, {
          type: "idempotency_error",
          message:
            `Keys for idempotent requests can only be used with the same parameters they were first used with. Try using a key other than '${key}' if you meant to execute a different request.`
        })
      }
      if (saved !== undefined) {
        return HttpResponse.json(saved.body, { status: saved.status, headers: { "idempotent-replayed": "true" } })
      }
      if (running.has(key)) {
        return stripeError(409, {
          type: "idempotency_error",
          message: "There is currently another in-progress request using this Idempotent Key."
        })
      }
    }
    if (key !== null) running.add(key)
    try {
      if (faults.latencyMs > 0) await delay(faults.latencyMs)
      if (random() < faults.errorRate) {
        return stripeError(500, { type: "api_error", message: "An unknown error occurred (sandbox processor fault)." })
      }
      const answer = operation(decodeForm(text))
      if (key !== null) idempotency.set(key, { fingerprint, ...answer })
      if (random() < faults.lostAnswerRate) return HttpResponse.error()
      return HttpResponse.json(answer.body, { status: answer.status })
    } finally {
      if (key !== null) running.delete(key)
    }
  }

  const read = (request: Request, answer: () => Response) => async () => {
    if (!authorized(request)) return unauthorized()
    if (faults.latencyMs > 0) await delay(faults.latencyMs)
    return answer()
  }

  const handlers: Array<RequestHandler> = [
    http.post(`${origin}/v1/payment_intents`, ({ request }) => mutation(request, create)()),
    http.get(`${origin}/v1/payment_intents`, ({ request }) => read(request, () => list(new URL(request.url)))()),
    http.get(
      `${origin}/v1/payment_intents/search`,
      ({ request }) => read(request, () => search(new URL(request.url)))()
    ),
    http.get(
      `${origin}/v1/payment_intents/:intent`,
      ({ request, params }) => read(request, () => retrieve(String(params.intent), new URL(request.url)))()
    ),
    http.post(
      `${origin}/v1/payment_intents/:intent/capture`,
      ({ request, params }) => mutation(request, (form) => capture(String(params.intent), form))()
    ),
    http.post(
      `${origin}/v1/payment_intents/:intent/cancel`,
      ({ request, params }) => mutation(request, () => cancel(String(params.intent)))()
    ),
    http.post(`${origin}/v1/refunds`, ({ request }) => mutation(request, refund)())
  ]

  return {
    handlers,
    faults: () => faults,
    setFaults: (changes: Partial<Faults>) => {
      faults = { ...faults, ...changes }
      return faults
    },
    /** What the processor holds (a copy): PaymentIntents as Stripe shows them, charges expanded. */
    intents: () => [...intents.values()].map((intent) => intentJson(intent, true)),
    events: () => [...events],
    onEvent: (listener: (event: StripeEvent) => void) => {
      listeners.push(listener)
    },
    advance
  }
}

export type Processor = ReturnType<typeof makeProcessor>
