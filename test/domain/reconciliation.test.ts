import { describe, expect, it } from "vitest"
import * as Payment from "../../src/domain/Payment.ts"
import { type ProcessorAmounts, reconcile } from "../../src/domain/Reconciliation.ts"
import { accepted, createInput, makeWorld } from "./fixtures.ts"

// Reconciliation compares what the books say the processor holds with what it says, payment by payment.

const world = makeWorld()
const created = accepted(Payment.create(createInput("mer_1", { amountCents: 5_000 }), world.context())).payment
const authorized =
  accepted(Payment.applyAuthorization(created, { _tag: "Approved", networkRiskSignal: 0.05 }, world.context())).payment
const withStatus = (overrides: Partial<Payment.Payment>): Payment.Payment => ({ ...authorized, ...overrides })
const at = (overrides: Partial<ProcessorAmounts>): ProcessorAmounts => ({
  paymentId: authorized.id,
  authorizedCents: 0,
  capturedCents: 0,
  refundedCents: 0,
  cancelled: false,
  ...overrides
})

describe("reconcile", () => {
  it("finds nothing when every amount agrees", () => {
    expect(reconcile([withStatus({})], [at({ authorizedCents: 5_000 })])).toEqual([])
    const refunded = withStatus({ status: "refunded", capturedAmountCents: 5_000, refundedAmountCents: 5_000 })
    expect(reconcile([refunded], [at({ capturedCents: 5_000, refundedCents: 5_000 })])).toEqual([])
    expect(reconcile([withStatus({ status: "blocked" })], [at({ cancelled: true })])).toEqual([])
    // A decline holds nothing, with or without a record there; a payment still pending is not judged.
    expect(reconcile([withStatus({ status: "failed", failureCode: "insufficient_funds" })], [])).toEqual([])
    expect(reconcile([withStatus({ status: "pending" })], [at({ authorizedCents: 5_000 })])).toEqual([])
    // A cancel of an authorization that never reached the processor leaves nothing there.
    expect(reconcile([withStatus({ status: "failed", failureCode: "network_timeout" })], [])).toEqual([])
  })

  it("names each amount that differs, with both sides", () => {
    const captured = withStatus({ status: "captured", capturedAmountCents: 5_000 })
    expect(reconcile([captured], [at({ capturedCents: 4_000 })])).toEqual([
      { paymentId: authorized.id, field: "captured", ours: 5_000, processor: 4_000 }
    ])
    const refunded = withStatus({ status: "captured", capturedAmountCents: 5_000, refundedAmountCents: 1_000 })
    expect(reconcile([refunded], [at({ capturedCents: 5_000, refundedCents: 2_000 })])).toEqual([
      { paymentId: authorized.id, field: "refunded", ours: 1_000, processor: 2_000 }
    ])
  })

  it("a cancel the processor never did, money it holds for a payment we do not know, and money we booked it never saw", () => {
    expect(reconcile([withStatus({ status: "voided" })], [at({ authorizedCents: 5_000 })])).toEqual([
      { paymentId: authorized.id, field: "authorized", ours: 0, processor: 5_000 },
      { paymentId: authorized.id, field: "cancelled", ours: true, processor: false }
    ])
    expect(reconcile([], [at({ paymentId: "pay_stranger", capturedCents: 700 })])).toEqual([
      { paymentId: "pay_stranger", field: "unknown_to_us", ours: null, processor: 700 }
    ])
    expect(reconcile([withStatus({ status: "captured", capturedAmountCents: 5_000 })], [])).toEqual([
      { paymentId: authorized.id, field: "missing_at_processor", ours: true, processor: false }
    ])
    // A decline the processor holds money for.
    expect(reconcile([withStatus({ status: "failed", failureCode: "do_not_honor" })], [at({ authorizedCents: 5_000 })]))
      .toEqual([
        { paymentId: authorized.id, field: "authorized", ours: 0, processor: 5_000 }
      ])
  })
})
