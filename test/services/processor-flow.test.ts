import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Fiber, Layer } from "effect"
import * as TestClock from "effect/testing/TestClock"
import { operationKeys } from "../../src/acquirer/Acquirer.ts"
import { type CallInfo, type Fault, makeMemoryProcessor, type MemoryProcessor } from "../../src/acquirer/MemoryProcessor.ts"
import { ServicesLive } from "../../src/App.ts"
import type * as Payment from "../../src/domain/Payment.ts"
import * as Config from "../../src/platform/Config.ts"
import * as Ids from "../../src/platform/Ids.ts"
import { Merchants } from "../../src/services/Merchants.ts"
import { Payments } from "../../src/services/Payments.ts"
import { Reconciliation } from "../../src/services/Reconciliation.ts"
import { emptyState, layerMemoryFrom } from "../../src/store/MemoryStore.ts"
import { createInput } from "../domain/fixtures.ts"

// The payment flow against a remote processor (captures, cancels and refunds at the processor,
// answers lost after it acted), over the memory store, on Effect's TestClock.

const config = Config.defaultsWith({ requestDeadlineMs: 5_000, acquirerTimeoutMs: 10_000 })

const withProcessor = (processor: MemoryProcessor) =>
  ServicesLive.pipe(
    Layer.provideMerge(layerMemoryFrom(emptyState())),
    Layer.provideMerge(Layer.mergeAll(Ids.layerSeeded(11), processor.layer, Config.layerWith(config)))
  )

const newMerchant = Effect.flatMap(Merchants, (m) => m.create({ name: "Processor Shop", webhookUrl: null })).pipe(
  Effect.map((created) => created.merchant.id)
)

/** Creates a payment and lets its flow run `waitMs` of virtual time; the payment as it then is. */
const createAndWait = (overrides: Partial<Payment.CreateInput>, waitMs = config.requestDeadlineMs) =>
  Effect.gen(function*() {
    const payments = yield* Payments
    const merchantId = yield* newMerchant
    const creating = yield* Effect.forkChild(payments.create(createInput(merchantId, { amountCents: 2_000, ...overrides })))
    yield* TestClock.adjust(Duration.millis(Math.min(waitMs, config.requestDeadlineMs)))
    const { payment } = yield* Fiber.join(creating)
    if (waitMs > config.requestDeadlineMs) yield* TestClock.adjust(Duration.millis(waitMs - config.requestDeadlineMs))
    return { payments, merchantId, payment: yield* payments.get(merchantId, payment.id) }
  })

const callsOf = (processor: MemoryProcessor, operation: CallInfo["operation"]) => processor.calls.filter((c) => c.operation === operation)

/** Loses the answer to the first call of `operation` (after the processor acted). */
const loseFirst = (operation: CallInfo["operation"]) => (call: CallInfo): Fault => (call.operation === operation && call.attempt === 0 ? "lost" : undefined)

describe("the flow against a remote processor", () => {
  it.effect("an approved payment is captured at the processor before it is booked captured", () => {
    const processor = makeMemoryProcessor()
    return Effect.gen(function*() {
      const { payment } = yield* createAndWait({})
      expect(payment.status).toBe("captured")
      expect(payment.processorReference).toBe(processor.record(payment.id)!.reference)
      expect(processor.record(payment.id)).toMatchObject({ capturedCents: 2_000, authorizedCents: 0, cancelled: false })
      expect(callsOf(processor, "capture").map((c) => c.idempotencyKey)).toEqual([operationKeys.capture(payment.id)])
    }).pipe(Effect.provide(withProcessor(processor)))
  })

  it.effect("a capture whose answer was lost is asked again under the same key and happens once", () => {
    const processor = makeMemoryProcessor({ fault: loseFirst("capture") })
    return Effect.gen(function*() {
      const { payment } = yield* createAndWait({})
      expect(payment.status).toBe("captured")
      const captures = callsOf(processor, "capture")
      expect(captures.length).toBe(2)
      expect(new Set(captures.map((c) => c.idempotencyKey))).toEqual(new Set([operationKeys.capture(payment.id)]))
      expect(processor.record(payment.id)).toMatchObject({ capturedCents: 2_000 })
    }).pipe(Effect.provide(withProcessor(processor)))
  })

  it.effect("an authorization whose answer was lost is asked again under the same key: one authorization, not a decline", () => {
    const processor = makeMemoryProcessor({ fault: loseFirst("authorize") })
    return Effect.gen(function*() {
      const { payment } = yield* createAndWait({})
      expect(payment.status).toBe("captured")
      expect(callsOf(processor, "authorize").map((c) => c.idempotencyKey)).toEqual([
        operationKeys.authorize(payment.id),
        operationKeys.authorize(payment.id)
      ])
      expect(processor.record(payment.id)).toMatchObject({ capturedCents: 2_000 })
    }).pipe(Effect.provide(withProcessor(processor)))
  })

  it.effect("an authorization never answered in time fails the payment and cancels whatever the processor may have authorized", () => {
    // Every authorization answer is lost: the processor authorized, the service never learns it.
    const processor = makeMemoryProcessor({ fault: (call) => (call.operation === "authorize" ? "lost" : undefined) })
    return Effect.gen(function*() {
      // ACQUIRER_TIMEOUT for the authorization, and as much again to claim its key before the cancel.
      const { payments, merchantId, payment } = yield* createAndWait({}, 2 * config.acquirerTimeoutMs + 1_000)
      expect(payment).toMatchObject({ status: "failed", failureCode: "network_timeout" })
      expect(processor.record(payment.id)).toMatchObject({ authorizedCents: 0, capturedCents: 0, cancelled: true })
      expect(callsOf(processor, "cancel").map((c) => c.idempotencyKey)).toEqual([operationKeys.cancel(payment.id)])
      expect(yield* payments.ledger(merchantId, payment.id)).toEqual([])
    }).pipe(Effect.provide(withProcessor(processor)))
  })

  it.effect("an unanswered authorization whose cancel went unconfirmed stays cancelled when its flow is resumed: the processor's replayed approval is looked up", () => {
    // The processor authorizes but every answer is lost, then the cancel's answers too: the flow
    // stops with the payment pending. Resumed, the authorization's key replays the approval.
    let reachable = false
    const processor = makeMemoryProcessor({ fault: (call) => (!reachable && (call.operation === "authorize" || call.operation === "cancel") ? "lost" : undefined) })
    return Effect.gen(function*() {
      // The authorization's deadline, the claim of its key, then the cancel's own deadline.
      const { payments, merchantId, payment } = yield* createAndWait({ captureMethod: "manual" }, 3 * config.acquirerTimeoutMs + 1_000)
      expect(payment.status).toBe("pending")
      expect(processor.record(payment.id)).toMatchObject({ cancelled: true, authorizedCents: 0 })
      reachable = true
      yield* payments.resumeFlows({ staleBefore: "2100-01-01T00:00:00.000Z", takeOver: false })
      expect(yield* payments.get(merchantId, payment.id)).toMatchObject({ status: "failed", failureCode: "network_timeout" })
      expect(processor.record(payment.id)).toMatchObject({ cancelled: true, authorizedCents: 0, capturedCents: 0 })
    }).pipe(Effect.provide(withProcessor(processor)))
  })

  it.effect("a fraud-blocked payment cancels its authorization at the processor", () => {
    const processor = makeMemoryProcessor()
    return Effect.gen(function*() {
      const { payment } = yield* createAndWait({ cardToken: "tok_risk_highest" })
      expect(payment.status).toBe("blocked")
      expect(processor.record(payment.id)).toMatchObject({ authorizedCents: 0, capturedCents: 0, cancelled: true })
    }).pipe(Effect.provide(withProcessor(processor)))
  })

  it.effect("a decline holds nothing and cancels nothing", () => {
    const processor = makeMemoryProcessor()
    return Effect.gen(function*() {
      const { payment } = yield* createAndWait({ cardToken: "tok_decline_insufficient_funds" })
      expect(payment).toMatchObject({ status: "failed", failureCode: "insufficient_funds" })
      expect(callsOf(processor, "cancel")).toEqual([])
    }).pipe(Effect.provide(withProcessor(processor)))
  })

  it.effect("a void cancels at the processor; a manual capture and refunds go to the processor, each refund under its own key", () => {
    // The first refund's first answer is lost.
    const processor = makeMemoryProcessor({ fault: (call) => (call.operation === "refund" && call.idempotencyKey.endsWith(":refund:0") ? loseFirst("refund")(call) : undefined) })
    return Effect.gen(function*() {
      const voided = yield* createAndWait({ captureMethod: "manual" })
      expect(voided.payment.status).toBe("authorized")
      const afterVoid = yield* voided.payments.void(voided.merchantId, voided.payment.id)
      expect(afterVoid.status).toBe("voided")
      expect(processor.record(voided.payment.id)).toMatchObject({ cancelled: true, authorizedCents: 0 })

      const { payments, merchantId, payment } = yield* createAndWait({ captureMethod: "manual" })
      const captured = yield* payments.capture(merchantId, payment.id, 1_500)
      expect(captured).toMatchObject({ status: "captured", capturedAmountCents: 1_500 })
      // The first refund's answer is lost: asked again under the same key, done once.
      const refunding = yield* Effect.forkChild(payments.refund(merchantId, payment.id, 500))
      yield* TestClock.adjust(Duration.seconds(1))
      expect((yield* Fiber.join(refunding)).refundedAmountCents).toBe(500)
      const second = yield* payments.refund(merchantId, payment.id, 1_000)
      expect(second).toMatchObject({ status: "refunded", refundedAmountCents: 1_500 })
      expect(processor.record(payment.id)).toMatchObject({ capturedCents: 1_500, refundedCents: 1_500 })
      expect(callsOf(processor, "refund").map((c) => c.idempotencyKey)).toEqual([
        operationKeys.refund(payment.id, 0),
        operationKeys.refund(payment.id, 0),
        operationKeys.refund(payment.id, 500)
      ])
    }).pipe(Effect.provide(withProcessor(processor)))
  })

  it.effect("a capture the processor cannot confirm in time books nothing; asked again, it happens once", () => {
    let reachable = false
    const processor = makeMemoryProcessor({ fault: (call) => (call.operation === "capture" && !reachable ? (call.attempt === 0 ? "lost" : "unreachable") : undefined) })
    return Effect.gen(function*() {
      const { payments, merchantId, payment } = yield* createAndWait({ captureMethod: "manual" })
      const capturing = yield* Effect.forkChild(Effect.flip(payments.capture(merchantId, payment.id, undefined)))
      yield* TestClock.adjust(Duration.millis(config.acquirerTimeoutMs))
      const error = yield* Fiber.join(capturing)
      expect(error._tag).toBe("ProcessorUnavailable")
      expect((yield* payments.get(merchantId, payment.id)).status).toBe("authorized")
      expect(yield* payments.events(merchantId, payment.id)).toHaveLength(3)
      // The processor did capture (the first answer was lost); the retry learns it under the same key.
      expect(processor.record(payment.id)).toMatchObject({ capturedCents: 2_000 })
      reachable = true
      const captured = yield* payments.capture(merchantId, payment.id, undefined)
      expect(captured.status).toBe("captured")
      expect(new Set(callsOf(processor, "capture").map((c) => c.idempotencyKey))).toEqual(new Set([operationKeys.capture(payment.id)]))
      expect(processor.record(payment.id)).toMatchObject({ capturedCents: 2_000 })
    }).pipe(Effect.provide(withProcessor(processor)))
  })

  it.effect("reconciliation finds no difference after every kind of flow, and names a capture the books never made", () => {
    const processor = makeMemoryProcessor({ fault: loseFirst("capture") })
    return Effect.gen(function*() {
      yield* createAndWait({})
      yield* createAndWait({ cardToken: "tok_risk_highest" })
      yield* createAndWait({ cardToken: "tok_decline_expired_card" })
      yield* createAndWait({ cardToken: "tok_network_timeout" }, 2 * config.acquirerTimeoutMs + 1_000)
      const refunded = yield* createAndWait({})
      yield* refunded.payments.refund(refunded.merchantId, refunded.payment.id, 700)
      const manual = yield* createAndWait({ captureMethod: "manual" })
      const reconciliation = yield* Reconciliation
      const period = { fromMs: 0, toMs: 10 * 86_400_000 }
      const clean = yield* reconciliation.run(period)
      expect(clean.differences).toEqual([])
      expect(clean.ours).toBe(6)

      // The processor captures a payment the books hold as authorized (a capture whose booking was lost).
      yield* processor.acquirer.operations!.capture({
        paymentId: manual.payment.id,
        reference: null,
        idempotencyKey: "elsewhere",
        timeoutMs: 1_000,
        amountCents: 2_000,
        currency: "USD"
      }).pipe(Effect.ignore) // its answer is lost too (the first under its key); it captured all the same
      const report = yield* reconciliation.run(period)
      expect(report.differences).toEqual([
        { paymentId: manual.payment.id, field: "authorized", ours: 2_000, processor: 0 },
        { paymentId: manual.payment.id, field: "captured", ours: 0, processor: 2_000 }
      ])
    }).pipe(Effect.provide(withProcessor(processor)))
  })
})
