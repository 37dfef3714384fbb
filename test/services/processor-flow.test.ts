import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Fiber, Layer } from "effect"
import * as TestClock from "effect/testing/TestClock"
import { operationKeys } from "../../src/acquirer/Acquirer.ts"
import {
  type CallInfo,
  type Fault,
  makeMemoryProcessor,
  type MemoryProcessor
} from "../../src/acquirer/MemoryProcessor.ts"
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
    const creating = yield* Effect.forkChild(
      payments.create(createInput(merchantId, { amountCents: 2_000, ...overrides }))
    )
    yield* TestClock.adjust(Duration.millis(Math.min(waitMs, config.requestDeadlineMs)))
    const { payment } = yield* Fiber.join(creating)
    if (waitMs > config.requestDeadlineMs) yield* TestClock.adjust(Duration.millis(waitMs - config.requestDeadlineMs))
    return { payments, merchantId, payment: yield* payments.get(merchantId, payment.id) }
  })

const callsOf = (processor: MemoryProcessor, operation: CallInfo["operation"]) =>
  processor.calls.filter((c) => c.operation === operation)

/** Loses the answer to the first call of `operation` (after the processor acted). */
const loseFirst = (operation: CallInfo["operation"]) =>
(
  call: CallInfo
): Fault => (call.operation === operation && call.attempt === 0 ? "lost" : undefined)

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
      // ACQUIRER_TIMEOUT for the authorization, and as much again to claim its key (its answers
      // lost, the look-up by our id finds it) before the cancel.
      const { payments, merchantId, payment } = yield* createAndWait({}, 2 * config.acquirerTimeoutMs + 1_000)
      expect(payment).toMatchObject({ status: "failed", failureCode: "network_timeout", processorPending: null })
      expect(processor.record(payment.id)).toMatchObject({ authorizedCents: 0, capturedCents: 0, cancelled: true })
      expect(callsOf(processor, "cancel").map((c) => c.idempotencyKey)).toEqual([operationKeys.cancel(payment.id)])
      expect(yield* payments.ledger(merchantId, payment.id)).toEqual([])
      expect((yield* payments.events(merchantId, payment.id)).map((e) => e.type)).toEqual([
        "payment.initiated",
        "payment.authorization_failed"
      ])
    }).pipe(Effect.provide(withProcessor(processor)))
  })

  it.effect("a cancel owed and unanswered is recorded as unknown, and the resumed flow sends it again under the same key", () => {
    // The processor authorizes but every answer is lost, then the cancel's answers too.
    let reachable = false
    const processor = makeMemoryProcessor({
      fault: (
        call
      ) => (!reachable && (call.operation === "authorize" || call.operation === "cancel") ? "lost" : undefined)
    })
    return Effect.gen(function*() {
      // The authorization's deadline, the claim of its key, then the cancel's own deadline.
      const { payments, merchantId, payment } = yield* createAndWait(
        { captureMethod: "manual" },
        3 * config.acquirerTimeoutMs + 1_000
      )
      expect(payment).toMatchObject({
        status: "failed",
        failureCode: "network_timeout",
        processorPending: { operation: "cancel", outcome: "unknown" }
      })
      expect((yield* payments.events(merchantId, payment.id)).map((e) => e.type)).toEqual([
        "payment.initiated",
        "payment.authorization_failed",
        "payment.processor_outcome_unknown"
      ])
      // The merchant's commands wait for the processor's answer.
      yield* TestClock.adjust(Duration.seconds(1))
      reachable = true
      yield* payments.resumeFlows({ staleBefore: Date.UTC(2100, 0, 1), takeOver: false })
      expect(yield* payments.get(merchantId, payment.id)).toMatchObject({
        status: "failed",
        failureCode: "network_timeout",
        processorPending: null
      })
      expect(processor.record(payment.id)).toMatchObject({ cancelled: true, authorizedCents: 0, capturedCents: 0 })
      expect(new Set(callsOf(processor, "cancel").map((c) => c.idempotencyKey))).toEqual(
        new Set([operationKeys.cancel(payment.id)])
      )
    }).pipe(Effect.provide(withProcessor(processor)))
  })

  it.effect("an approval that arrives after its payment failed is the one authorization the owed cancel claims and cancels", () => {
    // The processor answers the first authorization only after ACQUIRER_TIMEOUT has passed.
    const processor = makeMemoryProcessor({
      fault: (call) => (call.operation === "authorize" && call.attempt === 0 ? "late" : undefined)
    })
    return Effect.gen(function*() {
      const { payment } = yield* createAndWait({}, 2 * config.acquirerTimeoutMs + 1_000)
      expect(payment).toMatchObject({ status: "failed", failureCode: "network_timeout", processorPending: null })
      expect(callsOf(processor, "authorize").map((c) => c.idempotencyKey)).toEqual([
        operationKeys.authorize(payment.id),
        operationKeys.authorize(payment.id)
      ])
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
    const processor = makeMemoryProcessor({
      fault: (call) => (call.operation === "refund" && call.idempotencyKey.endsWith(":refund:0")
        ? loseFirst("refund")(call)
        : undefined)
    })
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

  it.effect("a capture the processor cannot confirm in time books nothing and says so; asked again, it happens once", () => {
    let reachable = false
    const processor = makeMemoryProcessor({
      fault: (
        call
      ) => (call.operation === "capture" && !reachable ? (call.attempt === 0 ? "lost" : "unreachable") : undefined)
    })
    return Effect.gen(function*() {
      const { payments, merchantId, payment } = yield* createAndWait({ captureMethod: "manual" })
      const capturing = yield* Effect.forkChild(Effect.flip(payments.capture(merchantId, payment.id, undefined)))
      yield* TestClock.adjust(Duration.millis(config.acquirerTimeoutMs))
      const error = yield* Fiber.join(capturing)
      expect(error._tag).toBe("ProcessorUnavailable")
      const waiting = yield* payments.get(merchantId, payment.id)
      expect(waiting).toMatchObject({
        status: "authorized",
        capturedAmountCents: 0,
        processorPending: { operation: "capture", outcome: "unknown", amountCents: 2_000 }
      })
      expect((yield* payments.events(merchantId, payment.id)).at(-1)!.type).toBe("payment.processor_outcome_unknown")
      expect((yield* payments.ledger(merchantId, payment.id)).some((e) => e.account === "merchant_pending")).toBe(false)
      // The processor did capture (the first answer was lost). Another capture waits for the
      // processor's answer.
      expect(processor.record(payment.id)).toMatchObject({ capturedCents: 2_000 })
      expect((yield* Effect.flip(payments.capture(merchantId, payment.id, undefined)))._tag).toBe("InvalidState")
      // Recovery resumes the payment's flow: asked again under the same key, the capture is booked.
      reachable = true
      yield* payments.resumeFlows({ staleBefore: Date.UTC(2100, 0, 1), takeOver: false })
      const captured = yield* payments.get(merchantId, payment.id)
      expect(captured).toMatchObject({ status: "captured", capturedAmountCents: 2_000, processorPending: null })
      expect((yield* payments.events(merchantId, payment.id)).at(-1)!.type).toBe("payment.captured")
      expect(new Set(callsOf(processor, "capture").map((c) => c.idempotencyKey))).toEqual(
        new Set([operationKeys.capture(payment.id)])
      )
      expect(processor.record(payment.id)).toMatchObject({ capturedCents: 2_000 })
    }).pipe(Effect.provide(withProcessor(processor)))
  })

  it.effect("a refund the processor refuses after its outcome was unknown leaves the books as they were", () => {
    let reachable = false
    const processor = makeMemoryProcessor({
      fault: (call) => (call.operation === "refund" && !reachable ? "unreachable" : undefined)
    })
    return Effect.gen(function*() {
      const { payments, merchantId, payment } = yield* createAndWait({})
      const refunding = yield* Effect.forkChild(Effect.flip(payments.refund(merchantId, payment.id, 700)))
      yield* TestClock.adjust(Duration.millis(config.acquirerTimeoutMs))
      expect((yield* Fiber.join(refunding))._tag).toBe("ProcessorUnavailable")
      expect(yield* payments.get(merchantId, payment.id)).toMatchObject({
        refundedAmountCents: 0,
        processorPending: { operation: "refund", amountCents: 700 }
      })
      // Meanwhile the processor refunded the payment in full under another key (its dashboard):
      // asked for the 700, it refuses (nothing left to refund).
      reachable = true
      yield* processor.acquirer.operations!.refund({
        paymentId: payment.id,
        reference: null,
        idempotencyKey: "dashboard",
        timeoutMs: 1_000,
        amountCents: 2_000,
        currency: "USD"
      })
      yield* payments.resumeFlows({ staleBefore: Date.UTC(2100, 0, 1), takeOver: false })
      expect(yield* payments.get(merchantId, payment.id)).toMatchObject({
        status: "captured",
        refundedAmountCents: 0,
        processorPending: null
      })
      expect((yield* payments.events(merchantId, payment.id)).at(-1)!.type).toBe("payment.processor_operation_refused")
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
