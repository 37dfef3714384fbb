import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { defaultThresholds, type FraudCase, type Thresholds } from "../../src/domain/Fraud.ts"
import * as Ledger from "../../src/domain/Ledger.ts"
import { maximumAmountCents, processingFeeCents, supportedCurrencies } from "../../src/domain/Money.ts"
import * as Payment from "../../src/domain/Payment.ts"
import type { EventType, PaymentStatus } from "../../src/domain/Payment.ts"
import { assessmentWithScore, createInput, makeWorld } from "./fixtures.ts"

// ---------------------------------------------------------------------------------------------
// The specification, written independently of src/domain (CONTRACT section 6)

type Trigger = Command["_tag"]
type Transition = `${PaymentStatus}->${PaymentStatus}`

/** Every status change a trigger may make; anything else is a bug. */
const allowedTransitions: Record<Trigger, ReadonlyArray<Transition>> = {
  Authorize: ["pending->authorized", "pending->failed"],
  // Passed or held for review (stays authorized), or blocked.
  Assess: ["authorized->authorized", "authorized->blocked"],
  Capture: ["authorized->captured"],
  Void: ["authorized->voided"],
  Refund: ["captured->captured", "captured->refunded", "settled->settled", "settled->refunded"],
  // A payment fully refunded before the cut-off only has its balance swept.
  Settle: ["captured->settled", "refunded->refunded"],
  // Releasing or blocking a held payment; labelling the case of a payment that moved on.
  Review: ["authorized->authorized", "authorized->blocked", "blocked->blocked", "voided->voided"]
}

/** The event each trigger may emit (null: none). */
const allowedEvents: Record<Trigger, ReadonlyArray<EventType | null>> = {
  Authorize: ["payment.authorized", "payment.authorization_failed"],
  Assess: ["payment.fraud_passed", "payment.fraud_blocked", null],
  Capture: ["payment.captured"],
  Void: ["payment.voided"],
  Refund: ["payment.partially_refunded", "payment.refunded"],
  Settle: ["payment.settled", null],
  Review: ["payment.fraud_passed", "payment.fraud_blocked", null]
}

/** The statuses a payment may be in right after each event. */
const statusAfterEvent: Partial<Record<EventType, ReadonlyArray<PaymentStatus>>> = {
  "payment.initiated": ["pending"],
  "payment.authorized": ["authorized"],
  "payment.authorization_failed": ["failed"],
  "payment.fraud_passed": ["authorized"],
  "payment.fraud_blocked": ["blocked"],
  "payment.captured": ["captured"],
  "payment.settled": ["settled"],
  "payment.partially_refunded": ["captured", "settled"],
  "payment.refunded": ["refunded"],
  "payment.voided": ["voided"]
}

const terminal: ReadonlyArray<PaymentStatus> = ["refunded", "voided", "blocked", "failed"]

// ---------------------------------------------------------------------------------------------
// Commands

type AmountChoice =
  | { readonly _tag: "Default" }
  /** A valid amount: this fraction of what is available, at least 1. */
  | { readonly _tag: "Fraction"; readonly fraction: number }
  /** One more than what is available. */
  | { readonly _tag: "Over" }
  /** A literal, mostly invalid, amount. */
  | { readonly _tag: "Raw"; readonly value: number }

type Command =
  | { readonly _tag: "Authorize"; readonly approved: boolean; readonly riskSignal: number }
  | { readonly _tag: "Assess"; readonly score: number; readonly thresholds: Thresholds }
  | { readonly _tag: "Capture"; readonly amount: AmountChoice }
  | { readonly _tag: "Void" }
  | { readonly _tag: "Refund"; readonly amount: AmountChoice }
  | { readonly _tag: "Settle" }
  | { readonly _tag: "Review"; readonly decision: Payment.ReviewDecision }

const amountChoice: fc.Arbitrary<AmountChoice> = fc.oneof(
  { weight: 3, arbitrary: fc.constant({ _tag: "Default" as const }) },
  {
    weight: 5,
    arbitrary: fc.double({ min: 0, max: 1, noNaN: true }).map((fraction) => ({ _tag: "Fraction" as const, fraction }))
  },
  { weight: 1, arbitrary: fc.constant({ _tag: "Over" as const }) },
  {
    weight: 1,
    arbitrary: fc.constantFrom(
      0,
      -1,
      -250,
      0.5,
      1.5,
      99.99,
      Number.NaN,
      Number.POSITIVE_INFINITY,
      maximumAmountCents + 1
    )
      .map((value) => ({ _tag: "Raw" as const, value }))
  }
)

const thresholds: fc.Arbitrary<Thresholds> = fc.oneof(
  fc.constant(defaultThresholds),
  fc.tuple(fc.double({ min: 0.05, max: 0.95, noNaN: true }), fc.double({ min: 0.05, max: 1, noNaN: true }))
    .map(([a, b]) => ({ review: Math.min(a, b), block: Math.max(a, b) }))
)

/** Scores near the default thresholds come up often, to exercise the boundaries. */
const score = fc.oneof(
  fc.double({ min: 0, max: 1, noNaN: true }),
  fc.constantFrom(0, 0.4999999, 0.5, 0.79999, 0.8, 1)
)

const allTriggers: ReadonlyArray<Trigger> = ["Authorize", "Assess", "Capture", "Void", "Refund", "Settle", "Review"]

/**
 * Triggers that fit a payment's state, so runs reach deep states (captured, settled, refunded)
 * instead of being refused at `pending`. This only steers the choice; acceptance is judged by
 * `expectation` below.
 */
const fittingTriggers = (p: Payment.Payment): ReadonlyArray<Trigger> => {
  switch (p.status) {
    case "pending":
      return ["Authorize"]
    case "authorized":
      return p.fraudVerdict === null ? ["Assess", "Assess", "Void"] : p.fraudVerdict === "passed"
        ? ["Capture", "Capture", "Capture", "Void"]
        : ["Review", "Review", "Void", "Capture"]
    case "captured":
      return ["Refund", "Refund", "Settle"]
    case "settled":
      return ["Refund"]
    case "refunded":
      return ["Settle", "Refund"]
    default:
      return allTriggers
  }
}

/** One step of a run: the parameters of every kind of command; the trigger is chosen at run time. */
const step = fc.record({
  /** Pick among the triggers that fit the current state (else among all of them). */
  fitting: fc.oneof({ weight: 4, arbitrary: fc.constant(true) }, { weight: 1, arbitrary: fc.constant(false) }),
  pick: fc.nat(),
  approved: fc.oneof({ weight: 4, arbitrary: fc.constant(true) }, { weight: 1, arbitrary: fc.constant(false) }),
  riskSignal: fc.double({ min: 0, max: 1, noNaN: true }),
  score,
  thresholds,
  amount: amountChoice,
  decision: fc.constantFrom<Payment.ReviewDecision>("false_positive", "confirmed_fraud"),
  /** Time between this decision and the one before (up to about a day). */
  advanceMs: fc.integer({ min: 1, max: 90_000_000 })
})
type Step = typeof step extends fc.Arbitrary<infer A> ? A : never

const commandFor = (p: Payment.Payment, s: Step): Command => {
  const triggers = s.fitting ? fittingTriggers(p) : allTriggers
  const trigger = triggers[s.pick % triggers.length]!
  switch (trigger) {
    case "Authorize":
      return { _tag: "Authorize", approved: s.approved, riskSignal: s.riskSignal }
    case "Assess":
      return { _tag: "Assess", score: s.score, thresholds: s.thresholds }
    case "Capture":
      return { _tag: "Capture", amount: s.amount }
    case "Void":
      return { _tag: "Void" }
    case "Refund":
      return { _tag: "Refund", amount: s.amount }
    case "Settle":
      return { _tag: "Settle" }
    case "Review":
      return { _tag: "Review", decision: s.decision }
  }
}

const scenario = fc.record({
  amountCents: fc.oneof(fc.integer({ min: 1, max: 500 }), fc.integer({ min: 1, max: maximumAmountCents })),
  currency: fc.constantFrom(...supportedCurrencies),
  captureMethod: fc.constantFrom<Payment.CaptureMethod>("automatic", "manual"),
  steps: fc.array(step, { maxLength: 16 })
})

// ---------------------------------------------------------------------------------------------
// The reference model: which commands must be accepted

const resolveAmount = (choice: AmountChoice, available: number): number | undefined => {
  switch (choice._tag) {
    case "Default":
      return undefined
    case "Fraction":
      return Math.max(1, Math.ceil(choice.fraction * available))
    case "Over":
      return available + 1
    case "Raw":
      return choice.value
  }
}

const validAmount = (amount: number | undefined, available: number) =>
  available >= 1 && (amount === undefined || (Number.isSafeInteger(amount) && amount >= 1 && amount <= available))

interface State {
  readonly payment: Payment.Payment
  readonly fraudCase: FraudCase | null
  readonly events: ReadonlyArray<Payment.PaymentEvent>
  readonly ledger: ReadonlyArray<Ledger.LedgerEntry>
  /** Refunded amount when the settlement run swept the payment (null: not settled). */
  readonly refundedAtSettlement: number | null
}

type Expected = {
  /** null: accepted; else the kind of refusal. */
  readonly refusal: Payment.Refusal["_tag"] | null
  readonly amount?: number | undefined
}

const stateRule = (fits: boolean): Expected => ({ refusal: fits ? null : "InvalidState" })
/** The state is checked first (409), then the amount (422). */
const amountRule = (fits: boolean, amount: number | undefined, available: number): Expected => ({
  refusal: !fits ? "InvalidState" : validAmount(amount, available) ? null : "InvalidAmount",
  amount
})

/** What CONTRACT section 6 says about `command` in `state`: accepted, or refused and why. */
const expectation = (state: State, command: Command): Expected => {
  const p = state.payment
  switch (command._tag) {
    case "Authorize":
      return stateRule(p.status === "pending")
    case "Assess":
      return stateRule(p.status === "authorized" && p.fraudVerdict === null)
    case "Capture":
      return amountRule(
        p.status === "authorized" && p.fraudVerdict === "passed",
        resolveAmount(command.amount, p.amountCents),
        p.amountCents
      )
    case "Void":
      return stateRule(p.status === "authorized")
    case "Refund": {
      const remainder = p.capturedAmountCents - p.refundedAmountCents
      return amountRule(
        p.status === "captured" || p.status === "settled",
        resolveAmount(command.amount, remainder),
        remainder
      )
    }
    case "Settle":
      return stateRule(
        p.settledAt === null && (p.status === "captured" || (p.status === "refunded" && p.capturedAt !== null))
      )
    case "Review":
      return stateRule(state.fraudCase !== null && state.fraudCase.status === "open")
  }
}

const decideCommand = (
  state: State,
  command: Command,
  amount: number | undefined,
  context: Payment.Context
): Payment.Decision => {
  const p = state.payment
  switch (command._tag) {
    case "Authorize":
      return Payment.applyAuthorization(
        p,
        command.approved
          ? { _tag: "Approved", networkRiskSignal: command.riskSignal }
          : { _tag: "Declined", code: "do_not_honor", message: "The card issuer declined the payment." },
        context
      )
    case "Assess":
      return Payment.applyFraudAssessment(p, assessmentWithScore(command.score), command.thresholds, context)
    case "Capture":
      return Payment.capture(p, amount, context)
    case "Void":
      return Payment.voidAuthorization(p, context)
    case "Refund":
      return Payment.refund(p, amount, context)
    case "Settle":
      return Payment.settle(p, context)
    case "Review":
      return Payment.review(p, state.fraudCase!, command.decision, "reviewed by a property test", context)
  }
}

const deepFreeze = <A>(value: A): A => {
  if (typeof value === "object" && value !== null && !Object.isFrozen(value)) {
    Object.freeze(value)
    for (const inner of Object.values(value)) deepFreeze(inner)
  }
  return value
}

// ---------------------------------------------------------------------------------------------
// Checks

const isPositiveInteger = (n: number) => Number.isSafeInteger(n) && n > 0

/** What one accepted decision must look like. */
const checkChange = (trigger: Trigger, before: State, change: Payment.Change) => {
  const { payment: after, events, ledger } = change
  expect(after.id).toBe(before.payment.id)
  expect(after.version).toBe(before.payment.version + 1)
  expect(allowedTransitions[trigger]).toContain(`${before.payment.status}->${after.status}`)
  if (terminal.includes(before.payment.status)) expect(after.status).toBe(before.payment.status)

  // At most one event per decision, numbered by the new version, carrying the new snapshot.
  expect(events.length).toBeLessThanOrEqual(1)
  expect(allowedEvents[trigger]).toContain(events[0]?.type ?? null)
  for (const event of events) {
    expect(event.sequence).toBe(after.version)
    expect(event.data).toEqual(Payment.snapshot(after))
    expect(statusAfterEvent[event.type]).toContain(after.status)
  }

  // One balanced group of positive integer entries, all about this payment.
  expect(Ledger.isBalanced(ledger)).toBe(true)
  expect(new Set(ledger.map((e) => e.groupId)).size).toBeLessThanOrEqual(1)
  for (const entry of ledger) {
    expect(isPositiveInteger(entry.amountCents)).toBe(true)
    expect(entry.paymentId).toBe(after.id)
    expect(entry.merchantId).toBe(after.merchantId)
    expect(entry.currency).toBe(after.currency)
  }

  if (change.fraudCase !== null) {
    expect(change.fraudCase.paymentId).toBe(after.id)
    expect(after.fraudCaseId).toBe(change.fraudCase.id)
  }
}

/** What must hold of the payment and everything recorded about it, after any number of commands. */
const checkState = (state: State) => {
  const { payment: p, events, ledger } = state
  expect(
    0 <= p.refundedAmountCents && p.refundedAmountCents <= p.capturedAmountCents &&
      p.capturedAmountCents <= p.amountCents
  )
    .toBe(true)
  expect(p.feeCents).toBe(p.capturedAmountCents > 0 ? processingFeeCents(p.capturedAmountCents, p.currency) : 0)
  // `refunded` exactly when everything captured went back; money moves only after a capture.
  if (p.status === "refunded") expect(p.refundedAmountCents).toBe(p.capturedAmountCents)
  if (p.status === "captured" || p.status === "settled") {
    expect(p.refundedAmountCents).toBeLessThan(p.capturedAmountCents)
  }
  if (p.capturedAt === null) expect(p.capturedAmountCents).toBe(0)

  // Events: strictly increasing sequences; the last one tells the current status.
  const sequences = events.map((e) => e.sequence)
  expect(sequences).toEqual([...sequences].sort((a, b) => a - b))
  expect(new Set(sequences).size).toBe(sequences.length)
  expect(events[0]?.type).toBe("payment.initiated")
  expect(statusAfterEvent[events.at(-1)!.type]).toContain(p.status)

  // Ledger: balanced groups of positive integers; balances follow from the amounts.
  expect(Ledger.isBalanced(ledger)).toBe(true)
  expect(ledger.every((e) => isPositiveInteger(e.amountCents))).toBe(true)
  const balance = (account: Ledger.Account) => Ledger.balanceOf(ledger, account)
  const held = p.status === "authorized" ? p.amountCents : 0
  expect(balance("authorization_holds")).toBe(held)
  expect(balance("cardholder_authorizations")).toBe(held)
  expect(balance("card_network")).toBe(p.capturedAmountCents - p.refundedAmountCents)
  expect(balance("fee_revenue")).toBe(p.feeCents)
  expect(balance("merchant_reserved")).toBe(0)
  if (state.refundedAtSettlement === null) {
    expect(p.settledAt).toBeNull()
    expect(balance("merchant_pending")).toBe(p.capturedAmountCents - p.feeCents - p.refundedAmountCents)
    expect(balance("merchant_available")).toBe(0)
  } else {
    const refundedAfterSettlement = p.refundedAmountCents - state.refundedAtSettlement
    expect(balance("merchant_pending")).toBe(0)
    expect(balance("merchant_available"))
      .toBe(p.capturedAmountCents - p.feeCents - state.refundedAtSettlement - refundedAfterSettlement)
  }
  if (
    p.status === "captured" || p.status === "voided" || p.status === "blocked" || p.status === "settled" ||
    p.status === "refunded"
  ) {
    expect(balance("authorization_holds")).toBe(0)
  }
}

type Scenario = typeof scenario extends fc.Arbitrary<infer A> ? A : never
type AppliedStep = { readonly trigger: Trigger; readonly from: PaymentStatus; readonly to: PaymentStatus }

/**
 * Creates a payment and applies one command per step (each step picks its command from the
 * state it finds), checking every decision and every state on the way.
 */
const run = (
  payment: Pick<Scenario, "amountCents" | "currency" | "captureMethod">,
  steps: ReadonlyArray<(state: State) => readonly [Command, number]>
) => {
  const world = makeWorld()
  const created = Payment.create(
    createInput("mer_property", {
      amountCents: payment.amountCents,
      currency: payment.currency,
      captureMethod: payment.captureMethod
    }),
    world.context()
  )
  if (!created.ok) throw new Error("create was refused")
  let state: State = deepFreeze({
    payment: created.change.payment,
    fraudCase: null,
    events: created.change.events,
    ledger: created.change.ledger,
    refundedAtSettlement: null
  })
  checkState(state)
  const applied: Array<AppliedStep> = []
  for (const nextCommand of steps) {
    const [cmd, advanceMs] = nextCommand(state)
    if (cmd._tag === "Review" && state.fraudCase === null) continue // no case to review
    const expected = expectation(state, cmd)
    const decision = decideCommand(state, cmd, expected.amount, world.context(advanceMs))
    const refusal = decision.ok ? null : decision.refusal._tag
    expect({ command: cmd, amount: expected.amount, status: state.payment.status, refusal })
      .toEqual({ command: cmd, amount: expected.amount, status: state.payment.status, refusal: expected.refusal })
    if (!decision.ok) {
      // A refusal names the state it refused in and carries no change; `deepFreeze` guarantees the input is untouched.
      if (decision.refusal._tag === "InvalidState") expect(decision.refusal.status).toBe(state.payment.status)
      else expect(decision.refusal.param).toBe("amount_cents")
      expect(decision).not.toHaveProperty("change")
      continue
    }
    const change = decision.change
    checkChange(cmd._tag, state, change)
    if (cmd._tag === "Settle") {
      // The sweep moves exactly what was still pending: captured − fee − refunded before the cut-off.
      expect(Ledger.balanceOf(change.ledger, "merchant_available"))
        .toBe(state.payment.capturedAmountCents - state.payment.feeCents - state.payment.refundedAmountCents)
    }
    applied.push({ trigger: cmd._tag, from: state.payment.status, to: change.payment.status })
    state = deepFreeze({
      payment: change.payment,
      fraudCase: change.fraudCase ?? state.fraudCase,
      events: [...state.events, ...change.events],
      ledger: [...state.ledger, ...change.ledger],
      refundedAtSettlement: cmd._tag === "Settle" ? state.payment.refundedAmountCents : state.refundedAtSettlement
    })
    checkState(state)
  }
  return { state, applied }
}

const runScenario = (input: Scenario) =>
  run(input, input.steps.map((s) => (state: State) => [commandFor(state.payment, s), s.advanceMs] as const))

const settings = { seed: 42, numRuns: 400 } as const

describe("payment state machine (property)", () => {
  it("accepts exactly the commands of CONTRACT section 6 and keeps every invariant", () => {
    fc.assert(fc.property(scenario, (input) => void runScenario(input)), settings)
  })

  it("exercises every allowed transition (the generator reaches deep states)", () => {
    const seen = new Set<string>()
    fc.assert(
      fc.property(scenario, (input) => {
        for (const step of runScenario(input).applied) seen.add(`${step.trigger}:${step.from}->${step.to}`)
      }),
      settings
    )
    const everyAllowed = Object.entries(allowedTransitions).flatMap(([trigger, transitions]) =>
      transitions.map((t) => `${trigger}:${t}`)
    )
    expect([...seen].sort()).toEqual(everyAllowed.sort())
  })

  it("never changes the status of a payment once it is terminal", () => {
    fc.assert(
      fc.property(scenario, (input) => {
        for (const step of runScenario(input).applied) if (terminal.includes(step.from)) expect(step.to).toBe(step.from)
      }),
      settings
    )
  })

  it("releases the authorization hold in full once a payment is captured, voided or blocked", () => {
    fc.assert(
      fc.property(scenario, (input) => {
        const { state, applied } = runScenario(input)
        if (applied.some((s) => s.from === "authorized" && s.to !== "authorized")) {
          expect(Ledger.balanceOf(state.ledger, "authorization_holds")).toBe(0)
          expect(Ledger.balanceOf(state.ledger, "cardholder_authorizations")).toBe(0)
        }
      }),
      settings
    )
  })

  it("settles captured − fee − refunded-before-settlement, and later refunds come out of available", () => {
    // Every run is captured and settled, with refunds on both sides of the cut-off.
    const flow = fc.record({
      amountCents: fc.integer({ min: 1, max: maximumAmountCents }),
      currency: fc.constantFrom(...supportedCurrencies),
      captureFraction: fc.double({ min: 0, max: 1, noNaN: true }),
      refundsBefore: fc.array(fc.double({ min: 0, max: 1, noNaN: true }), { maxLength: 3 }),
      refundsAfter: fc.array(fc.double({ min: 0, max: 1, noNaN: true }), { maxLength: 3 })
    })
    const refund = (fraction: number): Command => ({ _tag: "Refund", amount: { _tag: "Fraction", fraction } })
    fc.assert(
      fc.property(flow, (f) => {
        const commands: ReadonlyArray<readonly [Command, number]> = [
          [{ _tag: "Authorize", approved: true, riskSignal: 0.05 }, 1_000],
          [{ _tag: "Assess", score: 0.1, thresholds: defaultThresholds }, 1_000],
          [{ _tag: "Capture", amount: { _tag: "Fraction", fraction: f.captureFraction } }, 1_000],
          ...f.refundsBefore.map((fraction) => [refund(fraction), 1_000] as const),
          [{ _tag: "Settle" }, 86_400_000],
          ...f.refundsAfter.map((fraction) => [refund(fraction), 1_000] as const)
        ]
        const { state } = run({ ...f, captureMethod: "manual" }, commands.map((c) => () => c))
        const p = state.payment
        expect(p.settledAt).not.toBeNull()
        expect(state.refundedAtSettlement).not.toBeNull()
        expect(Ledger.balanceOf(state.ledger, "merchant_pending")).toBe(0)
        expect(Ledger.balanceOf(state.ledger, "merchant_available")).toBe(
          p.capturedAmountCents - p.feeCents - p.refundedAmountCents
        )
      }),
      settings
    )
  })
})
