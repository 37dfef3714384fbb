import { describe, expect, it } from "vitest"
import { defaultThresholds, type Verdict } from "../../src/domain/Fraud.ts"
import * as Ledger from "../../src/domain/Ledger.ts"
import * as Payment from "../../src/domain/Payment.ts"
import { accepted, assessmentWithScore, createInput, makeWorld } from "./fixtures.ts"

const approved = { _tag: "Approved", networkRiskSignal: 0.05 } as const

/** A payment driven to `authorized` with the given verdict (null: not screened yet). */
const authorizedWith = (verdict: Verdict | null, captureMethod: Payment.CaptureMethod = "automatic") => {
  const world = makeWorld()
  let payment = accepted(Payment.create(createInput("mer_1", { captureMethod }), world.context())).payment
  payment = accepted(Payment.applyAuthorization(payment, approved, world.context())).payment
  const scores: Record<Verdict, number> = { passed: 0.1, review: 0.6, blocked: 0.9 }
  let fraudCase = null
  if (verdict !== null) {
    const change = accepted(
      Payment.applyFraudAssessment(payment, assessmentWithScore(scores[verdict]), defaultThresholds, world.context())
    )
    payment = change.payment
    fraudCase = change.fraudCase
  }
  return { world, payment, fraudCase }
}

describe("nextStep (the automatic flow)", () => {
  const base = accepted(Payment.create(createInput("mer_1"), makeWorld().context())).payment
  it.each<[string, Partial<Payment.Payment>, Payment.Step | null]>([
    ["pending → authorize", { status: "pending" }, "authorize"],
    ["authorized, not screened → screen", { status: "authorized", fraudVerdict: null }, "screen"],
    ["authorized, passed, automatic → capture", {
      status: "authorized",
      fraudVerdict: "passed",
      captureMethod: "automatic"
    }, "capture"],
    ["authorized, passed, manual → done (waits for POST capture)", {
      status: "authorized",
      fraudVerdict: "passed",
      captureMethod: "manual"
    }, null],
    [
      "authorized, held for review → done (waits for the review)",
      { status: "authorized", fraudVerdict: "review" },
      null
    ],
    ["captured → done", { status: "captured", fraudVerdict: "passed" }, null],
    ["settled → done", { status: "settled", fraudVerdict: "passed" }, null],
    ["refunded → done", { status: "refunded", fraudVerdict: "passed" }, null],
    ["voided → done", { status: "voided" }, null],
    ["blocked → done", { status: "blocked", fraudVerdict: "blocked" }, null],
    ["failed → done", { status: "failed" }, null]
  ])("%s", (_, fields, step) => {
    expect(Payment.nextStep({ ...base, ...fields })).toBe(step)
  })
})

describe("payment decisions (examples)", () => {
  it("create: pending, version 1, one payment.initiated event, no ledger entries", () => {
    const change = accepted(
      Payment.create(createInput("mer_1", { amountCents: 2_500, idempotencyKey: "k1" }), makeWorld().context())
    )
    expect(change.payment).toMatchObject({
      status: "pending",
      version: 1,
      amountCents: 2_500,
      capturedAmountCents: 0,
      idempotencyKey: "k1"
    })
    expect(change.events.map((e) => [e.type, e.sequence])).toEqual([["payment.initiated", 1]])
    expect(change.ledger).toEqual([])
  })

  it("authorization holds the amount; a decline fails with its code and holds nothing", () => {
    const world = makeWorld()
    const pending = accepted(Payment.create(createInput("mer_1", { amountCents: 700 }), world.context())).payment
    const authorized = accepted(Payment.applyAuthorization(pending, approved, world.context()))
    expect(Ledger.balanceOf(authorized.ledger, "authorization_holds")).toBe(700)
    const failed = accepted(Payment.applyAuthorization(
      pending,
      { _tag: "Declined", code: "insufficient_funds", message: "The card has insufficient funds." },
      world.context()
    ))
    expect(failed.payment).toMatchObject({ status: "failed", failureCode: "insufficient_funds" })
    expect(failed.events.map((e) => e.type)).toEqual(["payment.authorization_failed"])
    expect(failed.ledger).toEqual([])
  })

  it("a score in the review band opens a case and emits no event; capture is refused until the review", () => {
    const { world, payment, fraudCase } = authorizedWith("review")
    expect(payment).toMatchObject({ status: "authorized", fraudVerdict: "review", fraudCaseId: fraudCase!.id })
    expect(fraudCase).toMatchObject({ status: "open", riskScore: 0.6, priority: "low", paymentId: payment.id })
    const refused = Payment.capture(payment, undefined, world.context())
    expect(refused.ok).toBe(false)
    expect(!refused.ok && refused.refusal).toMatchObject({ _tag: "InvalidState", status: "authorized" })
  })

  it("review false_positive releases the payment to capture; confirmed_fraud blocks it and releases the hold", () => {
    const held = authorizedWith("review")
    const released = accepted(
      Payment.review(held.payment, held.fraudCase!, "false_positive", "known customer", held.world.context())
    )
    expect(released.payment.fraudVerdict).toBe("passed")
    expect(released.events.map((e) => e.type)).toEqual(["payment.fraud_passed"])
    expect(released.fraudCase).toMatchObject({ status: "false_positive", notes: "known customer" })
    expect(Payment.nextStep(released.payment)).toBe("capture")

    const blocked = accepted(
      Payment.review(held.payment, held.fraudCase!, "confirmed_fraud", null, held.world.context())
    )
    expect(blocked.payment.status).toBe("blocked")
    expect(blocked.events.map((e) => e.type)).toEqual(["payment.fraud_blocked"])
    expect(Ledger.balanceOf(blocked.ledger, "authorization_holds")).toBe(-held.payment.amountCents)

    const again = Payment.review(blocked.payment, blocked.fraudCase!, "false_positive", null, held.world.context())
    expect(again.ok).toBe(false)
  })

  it("reviewing the case of an already blocked payment only labels it", () => {
    const { world, payment, fraudCase } = authorizedWith("blocked")
    expect(payment.status).toBe("blocked")
    const labelled = accepted(
      Payment.review(payment, fraudCase!, "false_positive", "not fraud after all", world.context())
    )
    expect(labelled.payment.status).toBe("blocked")
    expect(labelled.events).toEqual([])
    expect(labelled.ledger).toEqual([])
    expect(labelled.fraudCase?.status).toBe("false_positive")
  })

  it("partial capture books the captured amount and its fee, and releases the whole hold", () => {
    const { world, payment } = authorizedWith("passed", "manual")
    const change = accepted(Payment.capture(payment, 4_000, world.context()))
    expect(change.payment).toMatchObject({ status: "captured", capturedAmountCents: 4_000, feeCents: 116 + 30 })
    expect(Ledger.balanceOf(change.ledger, "authorization_holds")).toBe(-10_000)
    expect(Ledger.balanceOf(change.ledger, "merchant_pending")).toBe(4_000 - 146)
    expect(Ledger.balanceOf(change.ledger, "fee_revenue")).toBe(146)
  })

  it.each([0, -1, 10_001, 1.5, Number.NaN, Number.POSITIVE_INFINITY])(
    "capture of %s is refused as an invalid amount",
    (amount) => {
      const { world, payment } = authorizedWith("passed", "manual")
      const decision = Payment.capture(payment, amount, world.context())
      expect(decision).toEqual({
        ok: false,
        refusal: expect.objectContaining({ _tag: "InvalidAmount", param: "amount_cents" })
      })
    }
  )

  it("refunds: partial keeps the status, the remainder refunds in full, more than the remainder is refused", () => {
    const { world, payment } = authorizedWith("passed")
    const captured = accepted(Payment.capture(payment, undefined, world.context())).payment
    const partial = accepted(Payment.refund(captured, 2_500, world.context()))
    expect(partial.payment).toMatchObject({ status: "captured", refundedAmountCents: 2_500 })
    expect(partial.events.map((e) => e.type)).toEqual(["payment.partially_refunded"])
    const over = Payment.refund(partial.payment, 7_501, world.context())
    expect(!over.ok && over.refusal._tag).toBe("InvalidAmount")
    for (const bad of [1.5, Number.NaN]) expect(Payment.refund(partial.payment, bad, world.context()).ok).toBe(false)
    const rest = accepted(Payment.refund(partial.payment, undefined, world.context()))
    expect(rest.payment).toMatchObject({ status: "refunded", refundedAmountCents: 10_000 })
    expect(rest.events.map((e) => e.type)).toEqual(["payment.refunded"])
  })

  it("settling a payment refunded before the cut-off sweeps its balance without an event", () => {
    const { world, payment } = authorizedWith("passed")
    const captured = accepted(Payment.capture(payment, undefined, world.context())).payment
    const refunded = accepted(Payment.refund(captured, undefined, world.context())).payment
    expect(Payment.isSettleable(refunded)).toBe(true)
    const swept = accepted(Payment.settle(refunded, world.context()))
    expect(swept.payment.status).toBe("refunded")
    expect(swept.events).toEqual([])
    // Captured 10,000, fee 320, refunded 10,000: the merchant owes the fee.
    expect(Ledger.balanceOf(swept.ledger, "merchant_available")).toBe(-320)
    expect(Payment.isSettleable(swept.payment)).toBe(false)
  })
})

describe("operations awaiting a remote processor", () => {
  it("a capture is owed before it is booked: the answer books it, a refusal says so, an answer for another operation is refused", () => {
    const { payment, world } = authorizedWith("passed", "manual")
    const owed = Payment.owingFor(payment, accepted(Payment.capture(payment, 1_000, world.context())), world.context())
    expect(owed.payment).toMatchObject({
      status: "authorized",
      capturedAmountCents: 0,
      processorPending: { operation: "capture", outcome: "owed", amountCents: 1_000 }
    })
    expect([owed.events, owed.ledger]).toEqual([[], []])
    expect(Payment.nextStep(owed.payment)).toBe("processor")
    // Commands wait for the processor's answer.
    expect(Payment.voidAuthorization(owed.payment, world.context())).toMatchObject({
      ok: false,
      refusal: { _tag: "InvalidState" }
    })
    const asked = owed.payment.processorPending!
    const unknown = accepted(Payment.processorOutcomeUnknown(owed.payment, asked, world.context()))
    expect(unknown.events.map((e) => e.type)).toEqual(["payment.processor_outcome_unknown"])
    expect(Payment.processorOutcomeUnknown(unknown.payment, asked, world.context()).ok).toBe(false)
    const booked = accepted(Payment.processorAnswered(unknown.payment, asked, world.context()))
    expect(booked.payment).toMatchObject({ status: "captured", capturedAmountCents: 1_000, processorPending: null })
    expect(booked.events.map((e) => e.type)).toEqual(["payment.captured"])
    expect(Payment.processorAnswered(booked.payment, asked, world.context()).ok).toBe(false)
    const refused = accepted(Payment.processorRefused(unknown.payment, asked, world.context()))
    expect(refused.payment).toMatchObject({ status: "authorized", capturedAmountCents: 0, processorPending: null })
    expect(refused.events.map((e) => e.type)).toEqual(["payment.processor_operation_refused"])
    expect(
      Payment.processorAnswered(unknown.payment, { ...asked, since: Date.UTC(2000, 0, 1) }, world.context()).ok
    ).toBe(false)
  })

  it("a release is booked at once with the cancel it owes", () => {
    const { payment, world } = authorizedWith("passed", "manual")
    const voided = Payment.owingFor(
      payment,
      accepted(Payment.voidAuthorization(payment, world.context())),
      world.context()
    )
    expect(voided.payment).toMatchObject({
      status: "voided",
      processorPending: { operation: "cancel", outcome: "owed" }
    })
    expect(voided.events.map((e) => e.type)).toEqual(["payment.voided"])
    expect(Ledger.balanceOf(voided.ledger, "authorization_holds")).toBe(-payment.amountCents)
  })

  it("a refund the processor failed later is taken back once, to where the payment's money is", () => {
    const { payment: authorized, world } = authorizedWith("passed")
    const captured = accepted(Payment.capture(authorized, undefined, world.context())).payment
    const refunded = accepted(Payment.refund(captured, undefined, world.context())).payment
    expect(refunded.status).toBe("refunded")
    const failure = { refundId: "re_1", amountCents: refunded.refundedAmountCents }
    const back = accepted(Payment.refundFailed(refunded, failure, world.context()))
    expect(back.payment).toMatchObject({ status: "captured", refundedAmountCents: 0, failedRefunds: ["re_1"] })
    expect(back.events.map((e) => e.type)).toEqual(["payment.refund_failed"])
    expect(Ledger.isBalanced(back.ledger)).toBe(true)
    expect(Ledger.balanceOf(back.ledger, "merchant_pending")).toBe(refunded.refundedAmountCents)
    expect(Payment.refundFailed(back.payment, failure, world.context()).ok).toBe(false)
    expect(Payment.refundFailed(back.payment, { refundId: "re_2", amountCents: 1 }, world.context()).ok).toBe(false)
    // After settlement the money returns to available, and the payment is settled again.
    const settled = accepted(Payment.settle(captured, world.context())).payment
    const refundedLater = accepted(Payment.refund(settled, 500, world.context())).payment
    const backLater = accepted(
      Payment.refundFailed(refundedLater, { refundId: "re_3", amountCents: 500 }, world.context())
    )
    expect(backLater.payment).toMatchObject({ status: "settled", refundedAmountCents: 0 })
    expect(Ledger.balanceOf(backLater.ledger, "merchant_available")).toBe(500)
  })
})

describe("ledger postings", () => {
  const context: Ledger.PostingContext = {
    paymentId: "pay_1",
    merchantId: "mer_1",
    currency: "USD",
    now: Date.UTC(2026, 0, 1),
    mintId: makeWorld().mintId
  }

  it("drops zero postings, swaps the sides of negative ones, and keeps one group", () => {
    const entries = Ledger.group(context, [
      Ledger.postings.settle(-30),
      Ledger.postings.fee(0),
      Ledger.postings.capture(100)
    ])
    expect(entries.map((e) => [e.account, e.direction, e.amountCents])).toEqual([
      ["merchant_available", "debit", 30],
      ["merchant_pending", "credit", 30],
      ["card_network", "debit", 100],
      ["merchant_pending", "credit", 100]
    ])
    expect(new Set(entries.map((e) => e.groupId)).size).toBe(1)
    expect(Ledger.isBalanced(entries)).toBe(true)
  })

  it("refuses non-integer amounts loudly", () => {
    expect(() => Ledger.group(context, [Ledger.postings.capture(1.5)])).toThrow(/non-integer/)
  })

  it("detects an unbalanced group", () => {
    const [debit] = Ledger.group(context, [Ledger.postings.capture(100)])
    expect(Ledger.isBalanced([debit!])).toBe(false)
  })
})

describe("sequence (one unit of work for several steps)", () => {
  const steps = (world: ReturnType<typeof makeWorld>, score: number) => {
    const context = world.context()
    return [
      (p: Payment.Payment) => Payment.applyAuthorization(p, approved, context),
      (
        p: Payment.Payment
      ) => (Payment.nextStep(p) === "screen"
        ? Payment.applyFraudAssessment(p, assessmentWithScore(score), defaultThresholds, context)
        : null),
      (p: Payment.Payment) => (Payment.nextStep(p) === "capture" ? Payment.capture(p, undefined, context) : null)
    ]
  }

  it("authorize, screen and capture make one change with each step's event and ledger group", () => {
    const world = makeWorld()
    const created = accepted(Payment.create(createInput("mer_1", { amountCents: 10_000 }), world.context())).payment
    const change = accepted(Payment.sequence(created, steps(world, 0.1)))
    expect(change.payment.status).toBe("captured")
    expect(change.payment.version).toBe(created.version + 3)
    expect(change.events.map((e) => [e.type, e.sequence])).toEqual([
      ["payment.authorized", 2],
      ["payment.fraud_passed", 3],
      ["payment.captured", 4]
    ])
    expect(new Set(change.ledger.map((e) => e.groupId)).size).toBe(2)
    expect(Ledger.isBalanced(change.ledger)).toBe(true)
    expect(Ledger.balanceOf(change.ledger, "authorization_holds")).toBe(0)
    expect(Payment.followsFrom(created, change)).toBe(true)
  })

  it("skips steps that do not apply: a held payment stops after screening, with its case", () => {
    const world = makeWorld()
    const created = accepted(Payment.create(createInput("mer_1"), world.context())).payment
    const change = accepted(Payment.sequence(created, steps(world, 0.6)))
    expect(change.payment).toMatchObject({ status: "authorized", fraudVerdict: "review" })
    expect(change.events.map((e) => e.type)).toEqual(["payment.authorized"])
    expect(change.fraudCase?.status).toBe("open")
  })

  it("the first refusal refuses the whole, and nothing applicable is a refusal too", () => {
    const world = makeWorld()
    const created = accepted(Payment.create(createInput("mer_1"), world.context())).payment
    const refused = Payment.sequence(created, [(p) => Payment.capture(p, undefined, world.context())])
    expect(refused.ok).toBe(false)
    expect(Payment.sequence(created, [() => null]).ok).toBe(false)
  })

  it("followsFrom refuses a change that does not advance the version or reuses a sequence", () => {
    const world = makeWorld()
    const created = accepted(Payment.create(createInput("mer_1"), world.context())).payment
    const change = accepted(Payment.applyAuthorization(created, approved, world.context()))
    expect(Payment.followsFrom(created, change)).toBe(true)
    expect(Payment.followsFrom(created, { ...change, payment: { ...change.payment, version: created.version } })).toBe(
      false
    )
    expect(
      Payment.followsFrom(created, {
        ...change,
        events: change.events.map((e) => ({ ...e, sequence: created.version }))
      })
    ).toBe(false)
  })
})
