import { Effect, Exit, Redacted } from "effect"
import { http } from "msw"
import { setupServer } from "msw/node"
import { createHmac } from "node:crypto"
import { createServer } from "node:net"
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest"
import type { AuthorizationRequest } from "../../src/acquirer/Acquirer.ts"
import { operationKeys, sandboxRiskSignals } from "../../src/acquirer/Acquirer.ts"
import { makeProcessor, type Processor } from "../../src/acquirer/sandbox-processor/Processor.ts"
import { make, type StripeOptions } from "../../src/acquirer/Stripe.ts"
import { checkEvent, checkRequest, checkResponse } from "./openapiCheck.ts"

// The Stripe connector against the sandbox processor's msw handlers in process. Every request the
// connector sends and every answer the handlers give is checked against Stripe's OpenAPI
// document (fixtures/stripe-openapi.json).

const apiBase = "https://api.stripe.test"
const secretKey = "sk_test_connector0123"
const webhookSecret = "whsec_connector0123"

let processor: Processor = makeProcessor({ secretKey, origin: apiBase })
const server = setupServer()
const pending: Array<Promise<Array<string>>> = []

server.events.on("request:start", ({ request }) => {
  const url = new URL(request.url)
  if (url.origin !== apiBase) return
  pending.push(request.clone().text().then((body) => checkRequest(request.method, url, body)))
})
server.events.on("response:mocked", ({ request, response }) => {
  const url = new URL(request.url)
  if (url.origin !== apiBase || response.type === "error") return
  pending.push(response.clone().json().then((body) => checkResponse(request.method, url, response.status, body)))
})

beforeAll(() => server.listen({ onUnhandledRequest: "bypass" }))
beforeEach(() => {
  processor = makeProcessor({ secretKey, origin: apiBase })
  server.resetHandlers(...processor.handlers)
})
afterEach(async () => {
  const problems = (await Promise.all(pending.splice(0))).flat()
  expect(problems, "requests and answers against Stripe's OpenAPI document").toEqual([])
})
afterAll(() => server.close())

const connector = (overrides: Partial<StripeOptions> = {}) =>
  make({
    secretKey: Redacted.make(secretKey),
    webhookSecret: Redacted.make(webhookSecret),
    apiBase,
    defaultTimeoutMs: 5_000,
    ...overrides
  })

let paymentCounter = 0
const authorization = (cardToken: string, amountCents = 2_500): AuthorizationRequest => ({
  paymentId: `pay_test${++paymentCounter}`,
  merchantId: "mer_test",
  amountCents,
  currency: "EUR",
  cardToken,
  cardBrand: "visa"
})

const run = <A, E>(effect: Effect.Effect<A, E>) => Effect.runPromise(effect)
const failure = async <A, E>(effect: Effect.Effect<A, E>): Promise<E> => {
  const exit = await Effect.runPromiseExit(effect)
  if (Exit.isSuccess(exit)) throw new Error(`expected a failure, got ${JSON.stringify(exit.value)}`)
  const error = exit.cause.reasons.find((reason) => reason._tag === "Fail")
  if (error === undefined) throw new Error(`expected a failure, got ${String(exit.cause)}`)
  return (error as unknown as { error: E }).error
}

const operation = (paymentId: string, reference: string | null, idempotencyKey: string) => ({
  paymentId,
  reference,
  idempotencyKey,
  timeoutMs: 5_000
})

describe("authorize", () => {
  it("approves with the PaymentIntent as the reference, holding the amount under manual capture", async () => {
    const request = authorization("tok_visa")
    const outcome = await run(connector().authorize(request))
    expect(outcome).toMatchObject({ _tag: "Approved", networkRiskSignal: 0.05 })
    const [intent] = processor.intents()
    expect(outcome._tag === "Approved" && outcome.reference).toBe(intent!.id)
    expect(intent).toMatchObject({
      status: "requires_capture",
      amount: 2_500,
      currency: "eur",
      capture_method: "manual",
      metadata: { payment_id: request.paymentId }
    })
  })

  it("reads Radar's risk level as the sandbox's signal for the token of the same meaning", async () => {
    expect(await run(connector().authorize(authorization("tok_risk_review")))).toMatchObject({
      _tag: "Approved",
      networkRiskSignal: sandboxRiskSignals.tok_risk_review
    })
    expect(await run(connector().authorize(authorization("tok_risk_highest")))).toMatchObject({
      _tag: "Approved",
      networkRiskSignal: sandboxRiskSignals.tok_risk_highest
    })
  })

  it.each([
    ["tok_decline_insufficient_funds", "insufficient_funds"],
    ["tok_decline_expired_card", "expired_card"],
    ["tok_decline_do_not_honor", "do_not_honor"]
  ])("declines %s with %s", async (token, code) => {
    const outcome = await run(connector().authorize(authorization(token)))
    expect(outcome).toMatchObject({ _tag: "Declined", code })
  })

  it("sends the payment's authorize key, and a replay after a lost answer gets the original intent: the processor holds exactly one", async () => {
    const request = authorization("tok_visa")
    processor.setFaults({ lostAnswerRate: 1 })
    const lost = await failure(connector().authorize(request))
    expect(lost._tag).toBe("AcquirerOutcomeUnknown")
    expect(processor.intents()).toHaveLength(1)
    processor.setFaults({ lostAnswerRate: 0 })
    const outcome = await run(connector().authorize(request))
    expect(outcome._tag === "Approved" && outcome.reference).toBe(processor.intents()[0]!.id)
    expect(processor.intents()).toHaveLength(1)
  })

  it("a replay under the same key with other parameters is not read as a decline", async () => {
    const request = authorization("tok_visa")
    await run(connector().authorize(request))
    const error = await failure(connector().authorize({ ...request, amountCents: 9_999 }))
    expect(error._tag).toBe("AcquirerOutcomeUnknown")
    expect(processor.intents()).toHaveLength(1)
  })

  it("a 5xx is an unknown outcome, and nothing was done", async () => {
    processor.setFaults({ errorRate: 1 })
    const error = await failure(connector().authorize(authorization("tok_visa")))
    expect(error._tag).toBe("AcquirerOutcomeUnknown")
    expect(processor.intents()).toEqual([])
  })

  it("a 409 (the key's first request still running) is an unknown outcome", async () => {
    server.use(
      http.post(`${apiBase}/v1/payment_intents`, () =>
        Response.json({
          error: {
            type: "idempotency_error",
            message: "There is currently another in-progress request using this Idempotent Key."
          }
        }, { status: 409 }))
    )
    expect((await failure(connector().authorize(authorization("tok_visa"))))._tag).toBe("AcquirerOutcomeUnknown")
  })

  it("a wrong key (401) is unavailability: Stripe did nothing", async () => {
    const error = await failure(
      connector({ secretKey: Redacted.make("sk_test_wrongwrong") }).authorize(authorization("tok_visa"))
    )
    expect(error._tag).toBe("AcquirerUnavailable")
  })

  it("a refused connection is unavailability", async () => {
    const port = await closedPort()
    const error = await failure(connector({ apiBase: `http://127.0.0.1:${port}` }).authorize(authorization("tok_visa")))
    expect(error).toMatchObject({ _tag: "AcquirerUnavailable" })
  })

  it("no answer within the deadline is an unknown outcome, never null", async () => {
    server.use(http.post(`${apiBase}/v1/payment_intents`, () => new Promise<Response>(() => {})))
    const error = await failure(connector().authorizeWithin!(authorization("tok_visa"), 50))
    expect(error).toMatchObject({ _tag: "AcquirerOutcomeUnknown" })
    expect((error as { reason: string }).reason).toContain("50 ms")
  })

  it("is remote: it has no answer without asking", () => {
    expect(connector().answerNow).toBeUndefined()
  })
})

/** An approved payment: its id and its PaymentIntent's id. */
const approved = async (cardToken = "tok_visa", amountCents = 2_500) => {
  const request = authorization(cardToken, amountCents)
  const outcome = await run(connector().authorize(request))
  if (outcome._tag !== "Approved" || outcome.reference === undefined) throw new Error("not approved")
  return { paymentId: request.paymentId, reference: outcome.reference }
}

describe("operations", () => {
  it("captures the whole amount, and a repeated capture under its key changes nothing", async () => {
    const { paymentId, reference } = await approved()
    const capture = {
      ...operation(paymentId, reference, operationKeys.capture(paymentId)),
      amountCents: 2_500,
      currency: "EUR"
    }
    await run(connector().operations!.capture(capture))
    await run(connector().operations!.capture(capture))
    expect(await run(connector().operations!.lookup({ paymentId, reference, timeoutMs: 5_000 }))).toMatchObject({
      capturedCents: 2_500,
      authorizedCents: 0,
      cancelled: false,
      declined: false,
      currency: "EUR"
    })
  })

  it("captures part, and a capture over what is held is refused", async () => {
    const { paymentId, reference } = await approved()
    const over = await failure(
      connector().operations!.capture({
        ...operation(paymentId, reference, "other-key"),
        amountCents: 9_000,
        currency: "EUR"
      })
    )
    expect(over).toMatchObject({ _tag: "AcquirerRefused", code: "amount_too_large" })
    await run(
      connector().operations!.capture({
        ...operation(paymentId, reference, operationKeys.capture(paymentId)),
        amountCents: 1_000,
        currency: "EUR"
      })
    )
    expect(await run(connector().operations!.lookup({ paymentId, reference, timeoutMs: 5_000 }))).toMatchObject({
      capturedCents: 1_000,
      authorizedCents: 0
    })
  })

  it("cancels an authorization, cancelling it again succeeds, and a captured one is refused", async () => {
    const { paymentId, reference } = await approved()
    await run(connector().operations!.cancel(operation(paymentId, reference, operationKeys.cancel(paymentId))))
    await run(connector().operations!.cancel(operation(paymentId, reference, "another-cancel-key")))
    expect(await run(connector().operations!.lookup({ paymentId, reference, timeoutMs: 5_000 }))).toMatchObject({
      cancelled: true,
      authorizedCents: 0
    })
    const captured = await approved()
    await run(
      connector().operations!.capture({
        ...operation(captured.paymentId, captured.reference, "capture"),
        amountCents: 2_500,
        currency: "EUR"
      })
    )
    const refused = await failure(
      connector().operations!.cancel(operation(captured.paymentId, captured.reference, "cancel"))
    )
    expect(refused).toMatchObject({ _tag: "AcquirerRefused", code: "payment_intent_unexpected_state" })
  })

  it("refunds in parts up to the captured amount, then refuses", async () => {
    const { paymentId, reference } = await approved()
    const ops = connector().operations!
    await run(
      ops.capture({
        ...operation(paymentId, reference, operationKeys.capture(paymentId)),
        amountCents: 2_000,
        currency: "EUR"
      })
    )
    await run(
      ops.refund({
        ...operation(paymentId, reference, operationKeys.refund(paymentId, 1)),
        amountCents: 500,
        currency: "EUR"
      })
    )
    await run(
      ops.refund({
        ...operation(paymentId, reference, operationKeys.refund(paymentId, 1)),
        amountCents: 500,
        currency: "EUR"
      })
    )
    await run(
      ops.refund({
        ...operation(paymentId, reference, operationKeys.refund(paymentId, 2)),
        amountCents: 1_500,
        currency: "EUR"
      })
    )
    const over = await failure(
      ops.refund({
        ...operation(paymentId, reference, operationKeys.refund(paymentId, 3)),
        amountCents: 1,
        currency: "EUR"
      })
    )
    expect(over).toMatchObject({ _tag: "AcquirerRefused", code: "charge_already_refunded" })
    expect(await run(ops.lookup({ paymentId, reference, timeoutMs: 5_000 }))).toMatchObject({
      capturedCents: 2_000,
      refundedCents: 2_000
    })
  })

  it("looks a payment up by our id alone (search), null when the processor never saw it", async () => {
    const { paymentId, reference } = await approved()
    expect(await run(connector().operations!.lookup({ paymentId, timeoutMs: 5_000 }))).toMatchObject({
      paymentId,
      reference,
      authorizedCents: 2_500
    })
    expect(await run(connector().operations!.lookup({ paymentId: "pay_never", timeoutMs: 5_000 }))).toBeNull()
    const declined = authorization("tok_decline_insufficient_funds")
    await run(connector().authorize(declined))
    expect(await run(connector().operations!.lookup({ paymentId: declined.paymentId, timeoutMs: 5_000 })))
      .toMatchObject({ declined: true, authorizedCents: 0 })
  })

  it("without a reference, an operation on a payment search cannot find yet is not sent (unavailable)", async () => {
    const { paymentId } = await approved()
    processor.setFaults({ searchLagMs: 60_000 })
    const error = await failure(
      connector().operations!.capture({ ...operation(paymentId, null, "capture"), amountCents: 100, currency: "EUR" })
    )
    expect(error._tag).toBe("AcquirerUnavailable")
    processor.setFaults({ searchLagMs: 0 })
    await run(
      connector().operations!.capture({ ...operation(paymentId, null, "capture"), amountCents: 100, currency: "EUR" })
    )
  })

  it("lists the period's payments across pages", async () => {
    const created = []
    for (let i = 0; i < 3; i++) created.push(await approved())
    const nowMs = Date.now()
    const found = await run(connector().operations!.payments({ fromMs: nowMs - 3_600_000, toMs: nowMs + 3_600_000 }))
    expect(found.map((p) => p.paymentId).sort()).toEqual(created.map((p) => p.paymentId).sort())
    expect(await run(connector().operations!.payments({ fromMs: nowMs + 3_600_000, toMs: nowMs + 7_200_000 }))).toEqual(
      []
    )
  })
})

// Notifications -----------------------------------------------------------------------------------

const sign = (body: string, timestampSeconds: number, secret = webhookSecret) =>
  `t=${timestampSeconds},v1=${createHmac("sha256", secret).update(`${timestampSeconds}.${body}`).digest("hex")}`

const notify = (body: string, signature: string | undefined, nowMs = Date.now()) =>
  connector().operations!.notification({ body, signature, nowMs })

const eventBody = (type: string, object: Record<string, unknown>) =>
  JSON.stringify({
    id: `evt_${type.replace(/\W/g, "")}`,
    object: "event",
    api_version: "2023-08-16",
    created: 1,
    livemode: false,
    pending_webhooks: 1,
    request: { id: null, idempotency_key: null },
    type,
    data: { object }
  })

describe("notifications", () => {
  const body = eventBody("payment_intent.created", { id: "pi_1" })
  const now = Date.now()
  const seconds = Math.floor(now / 1000)

  it("are verified: a good signature passes, a bad one, a stale one, another secret's and none fail", async () => {
    expect(await run(notify(body, sign(body, seconds), now))).toEqual({
      _tag: "Ignored",
      eventId: "evt_payment_intentcreated",
      type: "payment_intent.created"
    })
    expect(await run(notify(body, `${sign(body, seconds)},v1=${"0".repeat(64)}`, now))).toMatchObject({
      _tag: "Ignored"
    })
    const cases = [
      sign(`${body} `, seconds),
      sign(body, seconds - 301),
      sign(body, seconds + 301),
      sign(body, seconds, "whsec_someoneelse"),
      `t=${seconds}`,
      "v1=abc",
      undefined
    ]
    for (const signature of cases) {
      expect((await failure(notify(body, signature, now)))._tag, String(signature)).toBe("InvalidNotification")
    }
  })

  it("within the tolerance, an old signature still passes", async () => {
    expect(await run(notify(body, sign(body, seconds - 299), now))).toMatchObject({ _tag: "Ignored" })
  })

  it("map a dispute's opening and its end to our dispute notifications, naming our payment", async () => {
    for (const [token, outcome] of [["tok_dispute_lost", "lost"], ["tok_dispute_won", "won"]] as const) {
      const { paymentId, reference } = await approved(token)
      await run(
        connector().operations!.capture({
          ...operation(paymentId, reference, operationKeys.capture(paymentId)),
          amountCents: 2_500,
          currency: "EUR"
        })
      )
      processor.advance()
      const events = processor.events().filter((event) =>
        (event.data.object as { payment_intent?: string }).payment_intent === reference
      )
      expect(events.map((event) => event.type)).toEqual(["charge.dispute.created", "charge.dispute.closed"])
      const [opened, closed] = await Promise.all(events.map((event) => {
        expect(checkEvent(event)).toEqual([])
        const text = JSON.stringify(event)
        return run(notify(text, sign(text, seconds), now))
      }))
      const disputeId = (events[0]!.data.object as { id: string }).id
      expect(opened).toEqual({
        _tag: "Dispute",
        eventId: events[0]!.id,
        dispute: {
          acquirerDisputeId: disputeId,
          paymentId,
          action: { _tag: "Open", reason: "fraudulent", amountCents: 2_500 }
        }
      })
      expect(closed).toEqual({
        _tag: "Dispute",
        eventId: events[1]!.id,
        dispute: { acquirerDisputeId: disputeId, paymentId, action: { _tag: "Resolve", outcome } }
      })
    }
  })

  it("map Stripe's dispute reasons onto ours, and an inquiry to nothing", async () => {
    const { paymentId, reference } = await approved()
    const dispute = (reason: string, status = "needs_response") => ({
      id: "dp_1",
      object: "dispute",
      amount: 100,
      payment_intent: reference,
      reason,
      status
    })
    for (
      const [reason, ours] of [
        ["fraudulent", "fraudulent"],
        ["product_not_received", "product_not_received"],
        ["duplicate", "duplicate"],
        ["credit_not_processed", "other"],
        ["unrecognized", "other"]
      ]
    ) {
      const text = eventBody("charge.dispute.created", dispute(reason!))
      expect(await run(notify(text, sign(text, seconds), now))).toMatchObject({
        dispute: { paymentId, action: { reason: ours } }
      })
    }
    const inquiry = eventBody("charge.dispute.created", dispute("fraudulent", "warning_needs_response"))
    expect(await run(notify(inquiry, sign(inquiry, seconds), now))).toMatchObject({ _tag: "Ignored" })
  })

  it("map a failed refund (refund.failed, or charge.refund.updated to failed) and ignore one that succeeded", async () => {
    const refund = {
      id: "re_1",
      object: "refund",
      amount: 700,
      currency: "eur",
      created: 1,
      payment_intent: "pi_x",
      metadata: { payment_id: "pay_r" },
      status: "failed",
      failure_reason: "expired_or_canceled_card"
    }
    for (const type of ["refund.failed", "charge.refund.updated"]) {
      const text = eventBody(type, refund)
      expect(checkEvent(JSON.parse(text))).toEqual([])
      expect(await run(notify(text, sign(text, seconds), now))).toEqual({
        _tag: "RefundFailed",
        eventId: JSON.parse(text).id,
        refundId: "re_1",
        paymentId: "pay_r",
        amountCents: 700,
        reason: "expired_or_canceled_card"
      })
    }
    const succeeded = eventBody("charge.refund.updated", { ...refund, status: "succeeded" })
    expect(await run(notify(succeeded, sign(succeeded, seconds), now))).toMatchObject({
      _tag: "Ignored",
      type: "charge.refund.updated"
    })
  })

  it("a body that is no event fails", async () => {
    const text = "not json"
    expect((await failure(notify(text, sign(text, seconds), now)))._tag).toBe("InvalidNotification")
  })
})

/** A port on 127.0.0.1 with nothing listening (bound, then released). */
const closedPort = () =>
  new Promise<number>((resolve) => {
    const probe = createServer()
    probe.listen(0, "127.0.0.1", () => {
      const port = (probe.address() as { port: number }).port
      probe.close(() => resolve(port))
    })
  })
