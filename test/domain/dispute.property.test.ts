import fc from "fast-check"
import { describe, expect, it } from "vitest"
import * as Dispute from "../../src/domain/Dispute.ts"
import * as Ledger from "../../src/domain/Ledger.ts"
import { type Currency, disputeFeeCents, processingFeeCents, supportedCurrencies } from "../../src/domain/Money.ts"
import * as Payment from "../../src/domain/Payment.ts"
import { accepted, assessmentWithScore, createInput, makeWorld } from "./fixtures.ts"

// The dispute state machine (src/domain/Dispute.ts) against a reference model written from the
// issue's rules, over random sequences of refunds, settlement and acquirer notifications
// (duplicates, unknown ids and late ones included) on a captured payment.

type Choice = { readonly _tag: "Default" } | { readonly _tag: "Fraction"; readonly fraction: number } | {
  readonly _tag: "Raw"
  readonly value: number
}

type Command =
  | { readonly _tag: "Refund"; readonly amount: Choice }
  | { readonly _tag: "Settle" }
  | { readonly _tag: "Open"; readonly id: string; readonly reason: Dispute.DisputeReason; readonly amount: Choice }
  | { readonly _tag: "Resolve"; readonly id: string; readonly outcome: Dispute.DisputeOutcome }

const choice: fc.Arbitrary<Choice> = fc.oneof(
  { weight: 2, arbitrary: fc.constant({ _tag: "Default" as const }) },
  {
    weight: 5,
    arbitrary: fc.double({ min: 0, max: 1, noNaN: true }).map((fraction) => ({ _tag: "Fraction" as const, fraction }))
  },
  { weight: 1, arbitrary: fc.integer({ min: -5, max: 200_000 }).map((value) => ({ _tag: "Raw" as const, value })) }
)
const disputeId = fc.constantFrom("dp_a", "dp_b")
const command: fc.Arbitrary<Command> = fc.oneof(
  { weight: 2, arbitrary: choice.map((amount) => ({ _tag: "Refund" as const, amount })) },
  { weight: 1, arbitrary: fc.constant({ _tag: "Settle" as const }) },
  {
    weight: 3,
    arbitrary: fc.record({ id: disputeId, reason: fc.constantFrom(...Dispute.disputeReasons), amount: choice })
      .map((c) => ({ _tag: "Open" as const, ...c }))
  },
  {
    weight: 3,
    arbitrary: fc.record({ id: disputeId, outcome: fc.constantFrom<Dispute.DisputeOutcome>("won", "lost") })
      .map((c) => ({ _tag: "Resolve" as const, ...c }))
  }
)

/** What the issue says, kept by hand: the payment's figures and its share of each account. */
interface Model {
  captured: number
  refunded: number
  status: Payment.PaymentStatus
  settled: boolean
  dispute: { id: string; status: Dispute.DisputeStatus; amount: number } | null
  accounts: {
    merchant_pending: number
    merchant_available: number
    merchant_reserved: number
    card_network: number
    fee_revenue: number
  }
}

type Expected =
  | { readonly ok: true; readonly event: Payment.EventType | null }
  | { readonly ok: false; readonly tag: "InvalidState" | "InvalidAmount"; readonly alreadyApplied: boolean }

const resolveAmount = (amount: Choice, available: number): number | undefined =>
  amount._tag === "Default"
    ? undefined
    : amount._tag === "Raw"
    ? amount.value
    : Math.max(1, Math.floor(amount.fraction * available))

const refused = (tag: "InvalidState" | "InvalidAmount", alreadyApplied = false): Expected => ({
  ok: false,
  tag,
  alreadyApplied
})

/** Applies a command to the model; returns what the domain must answer. */
const step = (m: Model, c: Command, currency: Currency): Expected => {
  const lost = m.dispute?.status === "lost" ? m.dispute.amount : 0
  const home = m.settled ? "merchant_available" : "merchant_pending"
  switch (c._tag) {
    case "Refund": {
      if (m.status !== "captured" && m.status !== "settled") return refused("InvalidState")
      const remainder = m.captured - m.refunded - lost
      const amount = resolveAmount(c.amount, remainder) ?? remainder
      if (!Number.isInteger(amount) || amount < 1 || amount > remainder) return refused("InvalidAmount")
      if (m.dispute?.status === "open" && amount > remainder - m.dispute.amount) return refused("InvalidState")
      m.refunded += amount
      m.accounts[home] -= amount
      m.accounts.card_network -= amount
      if (amount === remainder) m.status = "refunded"
      return { ok: true, event: amount === remainder ? "payment.refunded" : "payment.partially_refunded" }
    }
    case "Settle": {
      if (m.settled || (m.status !== "captured" && m.status !== "refunded")) return refused("InvalidState")
      // Whatever the payment still has in pending, and nothing else, becomes available.
      m.accounts.merchant_available += m.accounts.merchant_pending
      m.accounts.merchant_pending = 0
      m.settled = true
      const event = m.status === "captured" ? "payment.settled" as const : null
      if (m.status === "captured") m.status = "settled"
      return { ok: true, event }
    }
    case "Open": {
      if (m.dispute !== null) return refused("InvalidState", m.dispute.id === c.id)
      if (m.status !== "captured" && m.status !== "settled") return refused("InvalidState")
      const disputable = m.captured - m.refunded
      const amount = resolveAmount(c.amount, disputable) ?? disputable
      if (!Number.isInteger(amount) || amount < 1 || amount > disputable) return refused("InvalidAmount")
      m.dispute = { id: c.id, status: "open", amount }
      m.accounts[home] -= amount
      m.accounts.merchant_reserved += amount
      return { ok: true, event: "payment.dispute_opened" }
    }
    case "Resolve": {
      if (m.dispute === null || m.dispute.id !== c.id) return refused("InvalidState")
      if (m.dispute.status !== "open") return refused("InvalidState", m.dispute.status === c.outcome)
      m.accounts.merchant_reserved -= m.dispute.amount
      if (c.outcome === "won") {
        m.accounts[home] += m.dispute.amount
      } else {
        m.accounts.card_network -= m.dispute.amount
        m.accounts[home] -= disputeFeeCents[currency]
        m.accounts.fee_revenue += disputeFeeCents[currency]
      }
      m.dispute.status = c.outcome
      return { ok: true, event: "payment.dispute_resolved" }
    }
  }
}

const decideOn = (payment: Payment.Payment, c: Command, context: Payment.Context): Payment.Decision => {
  switch (c._tag) {
    case "Refund":
      return Payment.refund(payment, resolveAmount(c.amount, Payment.refundableCents(payment)), context)
    case "Settle":
      return Payment.settle(payment, context)
    case "Open":
      return Dispute.apply(payment, {
        acquirerDisputeId: c.id,
        paymentId: payment.id,
        action: {
          _tag: "Open",
          reason: c.reason,
          amountCents: resolveAmount(c.amount, payment.capturedAmountCents - payment.refundedAmountCents)
        }
      }, context)
    case "Resolve":
      return Dispute.apply(payment, {
        acquirerDisputeId: c.id,
        paymentId: payment.id,
        action: { _tag: "Resolve", outcome: c.outcome }
      }, context)
  }
}

const trackedAccounts = [
  "merchant_pending",
  "merchant_available",
  "merchant_reserved",
  "card_network",
  "fee_revenue"
] as const

describe("disputes: the state machine against a reference model", () => {
  it("money, events, refusals and idempotency agree with the model after every step", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 100_000 }),
        fc.constantFrom(...supportedCurrencies),
        fc.array(command, { minLength: 1, maxLength: 14 }),
        (amountCents, currency, commands) => {
          const world = makeWorld()
          let payment =
            accepted(Payment.create(createInput("mer_1", { amountCents, currency }), world.context())).payment
          const ledger: Array<Ledger.LedgerEntry> = []
          const start = accepted(Payment.advanceFlow(
            payment,
            {
              authorization: { _tag: "Approved", networkRiskSignal: 0.05 },
              screening: assessmentWithScore(0.1),
              thresholds: { review: 0.5, block: 0.8 }
            },
            world.context()
          ))
          payment = start.payment
          ledger.push(...start.ledger)
          const fee = processingFeeCents(amountCents, currency)
          const model: Model = {
            captured: amountCents,
            refunded: 0,
            status: "captured",
            settled: false,
            dispute: null,
            accounts: {
              merchant_pending: amountCents - fee,
              merchant_available: 0,
              merchant_reserved: 0,
              card_network: amountCents,
              fee_revenue: fee
            }
          }
          for (const c of commands) {
            const expected = step(model, c, currency)
            const decision = decideOn(payment, c, world.context())
            expect(decision.ok, JSON.stringify({ c, expected, decision: decision.ok ? null : decision.refusal })).toBe(
              expected.ok
            )
            if (!decision.ok) {
              if (expected.ok) continue
              expect(decision.refusal._tag).toBe(expected.tag)
              if (c._tag === "Open" || c._tag === "Resolve") {
                const notification = {
                  acquirerDisputeId: c.id,
                  paymentId: payment.id,
                  action: c._tag === "Open"
                    ? { _tag: "Open" as const, reason: c.reason }
                    : { _tag: "Resolve" as const, outcome: c.outcome }
                }
                expect(Dispute.alreadyApplied(payment, notification)).toBe(expected.alreadyApplied)
              }
              continue
            }
            if (!expected.ok) continue
            const change = decision.change
            expect(Payment.followsFrom(payment, change)).toBe(true)
            expect(change.events.map((e) => e.type)).toEqual(expected.event === null ? [] : [expected.event])
            expect(Ledger.isBalanced(change.ledger)).toBe(true)
            for (const e of change.events) expect(e.data).toEqual(Payment.snapshot(change.payment))
            payment = change.payment
            ledger.push(...change.ledger)
            // Every account's share of this payment is the model's.
            for (const account of trackedAccounts) {
              const signed = Ledger.balanceOf(ledger, account)
              expect(signed, `${account} after ${JSON.stringify(c)}`).toBe(model.accounts[account])
            }
            expect(payment.status).toBe(model.status)
            expect(payment.refundedAmountCents).toBe(model.refunded)
            expect(payment.dispute?.status ?? null).toBe(model.dispute?.status ?? null)
            expect(payment.dispute?.amountCents ?? null).toBe(model.dispute?.amount ?? null)
          }
          // Laws: reserved holds exactly an open dispute's money; once settled nothing is left pending.
          expect(Ledger.balanceOf(ledger, "merchant_reserved")).toBe(
            model.dispute?.status === "open" ? model.dispute.amount : 0
          )
          if (payment.settledAt !== null) expect(Ledger.balanceOf(ledger, "merchant_pending")).toBe(0)
          expect(Ledger.isBalanced(ledger)).toBe(true)
        }
      ),
      { numRuns: 400, seed: 13 }
    )
  })

  it("a notification for another payment is refused", () => {
    const world = makeWorld()
    const payment = accepted(Payment.create(createInput("mer_1"), world.context())).payment
    const decision = Dispute.apply(payment, {
      acquirerDisputeId: "dp_x",
      paymentId: "pay_other",
      action: { _tag: "Resolve", outcome: "won" }
    }, world.context())
    expect(decision.ok).toBe(false)
  })

  it("the fraud label: a lost dispute is fraud whatever the review said", () => {
    const world = makeWorld()
    const payment = accepted(Payment.create(createInput("mer_1"), world.context())).payment
    const lost = {
      ...payment,
      dispute: {
        acquirerDisputeId: "dp",
        status: "lost" as const,
        reason: "fraudulent" as const,
        amountCents: 1,
        feeCents: 1500,
        openedAt: payment.createdAt,
        resolvedAt: payment.createdAt
      }
    }
    expect(Dispute.fraudLabel(lost, "false_positive")).toBe("fraud")
    expect(Dispute.fraudLabel(lost, null)).toBe("fraud")
    expect(Dispute.fraudLabel(payment, "false_positive")).toBe("legitimate")
    expect(Dispute.fraudLabel(payment, null)).toBeNull()
    expect(Dispute.fraudLabel({ ...lost, dispute: { ...lost.dispute, status: "won" } }, null)).toBeNull()
  })
})
