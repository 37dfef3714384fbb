import { describe, expect, it } from "@effect/vitest"
import { Clock, Duration, Effect, Fiber, Layer } from "effect"
import * as TestClock from "effect/testing/TestClock"
import * as Acquirer from "../../src/acquirer/Acquirer.ts"
import { ServicesLive } from "../../src/App.ts"
import type { MintId } from "../../src/domain/Ids.ts"
import * as Payment from "../../src/domain/Payment.ts"
import * as Config from "../../src/platform/Config.ts"
import * as Ids from "../../src/platform/Ids.ts"
import { Merchants } from "../../src/services/Merchants.ts"
import { Payments, resumeBatch } from "../../src/services/Payments.ts"
import { emptyState, layerMemoryFrom, memoryOperations } from "../../src/store/MemoryStore.ts"
import { memoryWebhookOperations } from "../../src/store/MemoryWebhookStore.ts"
import { Store, StoreUnavailable } from "../../src/store/Store.ts"
import { WebhookStore } from "../../src/store/WebhookStore.ts"
import * as Workers from "../../src/workers/Workers.ts"
import { createInput } from "../domain/fixtures.ts"

// Time-dependent flows at service level, over the memory store, with Effect's TestClock.

const config = Config.defaultsWith({ requestDeadlineMs: 5_000, acquirerTimeoutMs: 10_000 })

const servicesWith = (options: {
  readonly config?: Config.AppConfigShape
  readonly acquirer?: Layer.Layer<Acquirer.Acquirer>
  readonly store?: Layer.Layer<Store | WebhookStore>
} = {}) =>
  ServicesLive.pipe(
    Layer.provideMerge(options.store ?? layerMemoryFrom(emptyState())),
    Layer.provideMerge(
      Layer.mergeAll(
        Ids.layerSeeded(7),
        options.acquirer ?? Acquirer.layerSandbox,
        Config.layerWith(options.config ?? config)
      )
    )
  )

const input = (merchantId: string, overrides: Partial<Payment.CreateInput> = {}): Payment.CreateInput =>
  createInput(merchantId, { amountCents: 2_000, ...overrides })

const newMerchant = Effect.flatMap(Merchants, (m) => m.create({ name: "Flow Shop", webhookUrl: null })).pipe(
  Effect.map((created) => created.merchant.id)
)

/** Lets forked flows run until the payment leaves `status` (bounded: the flows are fibers, not timers). */
const settleFibers = (merchantId: string, paymentId: string, from: Payment.PaymentStatus) =>
  Effect.gen(function*() {
    const payments = yield* Payments
    for (let turn = 0; turn < 1_000; turn++) {
      const payment = yield* payments.get(merchantId, paymentId)
      if (payment.status !== from) return payment
      yield* Effect.yieldNow
    }
    return yield* payments.get(merchantId, paymentId)
  })

/** A create left running until its request deadline on the test clock: its answer, and what made it. */
const createUntilDeadline = Effect.gen(function*() {
  const payments = yield* Payments
  const merchantId = yield* newMerchant
  const creating = yield* Effect.forkChild(payments.create(input(merchantId)))
  yield* TestClock.adjust(Duration.millis(config.requestDeadlineMs))
  const { payment } = yield* Fiber.join(creating)
  return { payments, merchantId, payment }
})

const eventTypes = (merchantId: string, paymentId: string) =>
  Effect.flatMap(Payments, (p) => p.events(merchantId, paymentId)).pipe(
    Effect.map((events) => events.map((e) => e.type))
  )

describe("tok_network_timeout", () => {
  it.effect("create answers pending at the request deadline; the flow fails with network_timeout at the acquirer timeout", () =>
    Effect.gen(function*() {
      const payments = yield* Payments
      const merchantId = yield* newMerchant
      const creating = yield* Effect.forkChild(payments.create(input(merchantId, { cardToken: "tok_network_timeout" })))
      yield* TestClock.adjust(Duration.millis(config.requestDeadlineMs - 1))
      expect(creating.pollUnsafe()).toBeUndefined()
      yield* TestClock.adjust(Duration.millis(1))
      const { payment, created } = yield* Fiber.join(creating)
      expect(created).toBe(true)
      expect(payment.status).toBe("pending")
      expect(payment.failureCode).toBeNull()
      expect(yield* eventTypes(merchantId, payment.id)).toEqual(["payment.initiated"])

      // Just before the acquirer timeout the payment is still pending.
      yield* TestClock.adjust(Duration.millis(config.acquirerTimeoutMs - config.requestDeadlineMs - 1))
      expect((yield* payments.get(merchantId, payment.id)).status).toBe("pending")
      yield* TestClock.adjust(Duration.millis(1))
      const failed = yield* settleFibers(merchantId, payment.id, "pending")
      expect(failed).toMatchObject({ status: "failed", failureCode: "network_timeout" })
      expect(failed.failureMessage).toBeTruthy()
      expect(yield* eventTypes(merchantId, payment.id)).toEqual(["payment.initiated", "payment.authorization_failed"])
      expect(yield* payments.ledger(merchantId, payment.id)).toEqual([])
    }).pipe(Effect.provide(servicesWith())))

  it.effect("with an acquirer timeout shorter than the request deadline, create answers failed directly", () =>
    Effect.gen(function*() {
      const payments = yield* Payments
      const merchantId = yield* newMerchant
      const creating = yield* Effect.forkChild(payments.create(input(merchantId, { cardToken: "tok_network_timeout" })))
      yield* TestClock.adjust(Duration.seconds(2))
      const { payment } = yield* Fiber.join(creating)
      expect(payment).toMatchObject({ status: "failed", failureCode: "network_timeout" })
    }).pipe(
      Effect.provide(
        servicesWith({ config: Config.defaultsWith({ requestDeadlineMs: 5_000, acquirerTimeoutMs: 2_000 }) })
      )
    ))

  it.effect("a slow but answering network finishes the flow within the request deadline", () =>
    Effect.gen(function*() {
      const payments = yield* Payments
      const merchantId = yield* newMerchant
      const creating = yield* Effect.forkChild(payments.create(input(merchantId)))
      yield* TestClock.adjust(Duration.seconds(3))
      const { payment } = yield* Fiber.join(creating)
      expect(payment.status).toBe("captured")
      expect(yield* eventTypes(merchantId, payment.id)).toEqual([
        "payment.initiated",
        "payment.authorized",
        "payment.fraud_passed",
        "payment.captured"
      ])
    }).pipe(Effect.provide(servicesWith({
      acquirer: Layer.succeed(Acquirer.Acquirer, {
        authorize: (request) => Effect.andThen(Effect.sleep(Duration.seconds(3)), Acquirer.sandboxAuthorize(request))
      })
    }))))

  it.effect("transport failures are retried until the acquirer timeout, then the payment fails", () =>
    Effect.gen(function*() {
      const { merchantId, payment } = yield* createUntilDeadline
      expect(payment.status).toBe("pending")
      yield* TestClock.adjust(Duration.millis(config.acquirerTimeoutMs))
      const failed = yield* settleFibers(merchantId, payment.id, "pending")
      expect(failed.status).toBe("failed")
      expect(["network_timeout", "network_error"]).toContain(failed.failureCode)
    }).pipe(Effect.provide(servicesWith({
      acquirer: Layer.succeed(Acquirer.Acquirer, {
        authorize: () => Effect.fail(new Acquirer.AcquirerUnavailable({ reason: "connection refused" }))
      })
    }))))
})

describe("an acquirer keeping the deadline itself (authorizeWithin)", () => {
  /** Fails in transport `failures` times, then answers after `latencyMs`; records each call's time and timeout. */
  const recordingAcquirer = (failures: number, latencyMs: number) => {
    const calls: Array<{ readonly atMs: number; readonly timeoutMs: number }> = []
    const layer = Layer.succeed(Acquirer.Acquirer, {
      authorize: () => Effect.die(new Error("the flow must use authorizeWithin")),
      authorizeWithin: (request, timeoutMs) =>
        Effect.flatMap(Clock.currentTimeMillis, (atMs) => {
          calls.push({ atMs, timeoutMs })
          if (calls.length <= failures) {
            return Effect.fail(new Acquirer.AcquirerUnavailable({ reason: "connection reset" }))
          }
          return latencyMs >= timeoutMs
            ? Effect.as(Effect.sleep(timeoutMs), null)
            : Effect.as(Effect.sleep(latencyMs), Acquirer.sandboxAnswer(request) ?? null)
        })
    })
    return { calls, layer }
  }

  it.effect("transport failures are retried after 200 ms, doubling, each call given what is left of ACQUIRER_TIMEOUT", () => {
    const acquirer = recordingAcquirer(3, 3_000)
    return Effect.gen(function*() {
      const { payment } = yield* createUntilDeadline
      expect(acquirer.calls).toEqual([
        { atMs: 0, timeoutMs: 10_000 },
        { atMs: 200, timeoutMs: 9_800 },
        { atMs: 600, timeoutMs: 9_400 },
        { atMs: 1_400, timeoutMs: 8_600 }
      ])
      // Answered at 4.4 s, within the request deadline.
      expect(payment.status).toBe("captured")
    }).pipe(Effect.provide(servicesWith({ acquirer: acquirer.layer })))
  })

  it.effect("no answer by the deadline fails the payment with network_timeout at ACQUIRER_TIMEOUT exactly", () => {
    const acquirer = recordingAcquirer(4, 60_000)
    return Effect.gen(function*() {
      const { payments, merchantId, payment } = yield* createUntilDeadline
      expect(payment.status).toBe("pending")
      yield* TestClock.adjust(Duration.millis(config.acquirerTimeoutMs - config.requestDeadlineMs - 1))
      expect((yield* payments.get(merchantId, payment.id)).status).toBe("pending")
      yield* TestClock.adjust(Duration.millis(1))
      const failed = yield* settleFibers(merchantId, payment.id, "pending")
      expect(failed.failureCode).toBe("network_timeout")
      expect(acquirer.calls.map((call) => call.atMs)).toEqual([0, 200, 600, 1_400, 3_000])
      expect(acquirer.calls.at(-1)?.timeoutMs).toBe(7_000)
    }).pipe(Effect.provide(servicesWith({ acquirer: acquirer.layer })))
  })
})

describe("settlement worker", () => {
  it.effect("settles at the daily cut-off (SETTLEMENT_CUTOFF), not before", () =>
    Effect.gen(function*() {
      const payments = yield* Payments
      const store = yield* Store
      const merchantId = yield* newMerchant
      // TestClock starts at 1970-01-01T00:00:00Z; capture at 01:00, cut-off at 06:00.
      yield* TestClock.adjust(Duration.hours(1))
      const { payment } = yield* payments.create(input(merchantId, { amountCents: 10_000 }))
      expect(payment.status).toBe("captured")
      yield* Layer.launch(Workers.settlement).pipe(Effect.forkScoped)
      yield* TestClock.adjust(Duration.minutes(299))
      expect((yield* payments.get(merchantId, payment.id)).status).toBe("captured")
      yield* TestClock.adjust(Duration.minutes(1))
      const settled = yield* settleFibers(merchantId, payment.id, "captured")
      expect(settled.status).toBe("settled")
      expect(settled.settledAt).toBe(Date.parse("1970-01-01T06:00:00.000Z"))
      const [balance] = yield* store.balances(merchantId)
      expect(balance).toMatchObject({ currency: "USD", pending: 0, available: 10_000 - payment.feeCents })
      expect((yield* eventTypes(merchantId, payment.id)).at(-1)).toBe("payment.settled")
    }).pipe(
      Effect.scoped,
      Effect.provide(servicesWith({ config: Config.defaultsWith({ settlementCutoffMinutes: 6 * 60 }) }))
    ))
})

describe("settlement worker after downtime", () => {
  it.effect("a process started after a cut-off it missed settles that day's payments at once", () =>
    Effect.gen(function*() {
      const payments = yield* Payments
      const merchantId = yield* newMerchant
      yield* TestClock.adjust(Duration.hours(1))
      const { payment } = yield* payments.create(input(merchantId, { amountCents: 10_000 }))
      // No process ran at the 06:00 cut-off; one starts at 07:00.
      yield* TestClock.adjust(Duration.hours(6))
      const late = yield* payments.create(input(merchantId, { amountCents: 5_000, cardToken: "tok_card_late" }))
      yield* Layer.launch(Workers.settlement).pipe(Effect.forkScoped)
      const settled = yield* settleFibers(merchantId, payment.id, "captured")
      expect(settled.status).toBe("settled")
      expect(settled.settledAt).toBe(Date.parse("1970-01-01T07:00:00.000Z"))
      // Captured after that cut-off: waits for the next one.
      expect((yield* payments.get(merchantId, late.payment.id)).status).toBe("captured")
    }).pipe(
      Effect.scoped,
      Effect.provide(servicesWith({ config: Config.defaultsWith({ settlementCutoffMinutes: 6 * 60 }) }))
    ))
})

describe("settlement worker under database failures", () => {
  // The first four sweeps for the 06:00 cut-off fail as a database outage would; the fifth succeeds.
  // (The start-up sweep of the previous day's cut-off is left alone.)
  let failures = 0
  const state = emptyState()
  const store = memoryOperations(state)
  const flakyStore = Layer.merge(
    Layer.succeed(Store, {
      ...store,
      settleablePayments: (capturedBefore: number, limit: number) =>
        capturedBefore === 6 * 3_600_000 && failures++ < 4
          ? Effect.fail(new StoreUnavailable({ cause: "connection reset" }))
          : store.settleablePayments(capturedBefore, limit)
    }),
    Layer.succeed(WebhookStore, memoryWebhookOperations(state))
  )

  it.effect("retries a failed sweep with back-off (1 s, 2 s, 4 s, 8 s) instead of waiting for the next day", () =>
    Effect.gen(function*() {
      const payments = yield* Payments
      const merchantId = yield* newMerchant
      yield* TestClock.adjust(Duration.hours(1))
      const { payment } = yield* payments.create(input(merchantId, { amountCents: 10_000 }))
      expect(payment.status).toBe("captured")
      yield* Layer.launch(Workers.settlement).pipe(Effect.forkScoped)
      // Cut-off at 06:00; retries at +1 s, +3 s, +7 s, and the fifth sweep at +15 s succeeds.
      yield* TestClock.adjust(Duration.minutes(300))
      expect(failures).toBe(1)
      yield* TestClock.adjust(Duration.millis(14_999))
      expect(failures).toBe(4)
      expect((yield* payments.get(merchantId, payment.id)).status).toBe("captured")
      yield* TestClock.adjust(Duration.millis(1))
      const settled = yield* settleFibers(merchantId, payment.id, "captured")
      expect(settled.status).toBe("settled")
      // Settled when the sweep finally ran, for the cut-off it was meant for.
      expect(settled.settledAt).toBe(Date.parse("1970-01-01T06:00:15.000Z"))
    }).pipe(
      Effect.scoped,
      Effect.provide(
        servicesWith({ config: Config.defaultsWith({ settlementCutoffMinutes: 6 * 60 }), store: flakyStore })
      )
    ))
})

describe("recovery worker", () => {
  it.effect("resumes the flow of a payment left pending by a crash", () =>
    Effect.gen(function*() {
      const store = yield* Store
      const payments = yield* Payments
      const merchantId = yield* newMerchant
      // What a crash leaves behind: the create committed, the flow never ran.
      const decision = Payment.create(input(merchantId), {
        now: 0,
        mintId: (kind) => `${kind === "payment" ? "pay" : "evt"}_crashed${kind}`
      })
      if (!decision.ok) throw new Error("create refused")
      yield* store.insertPayment(decision.change)
      yield* TestClock.adjust(Duration.seconds(1))
      yield* Layer.launch(Workers.recovery).pipe(Effect.forkScoped)
      const resumed = yield* settleFibers(merchantId, decision.change.payment.id, "pending")
      const finished = resumed.status === "captured"
        ? resumed
        : yield* settleFibers(merchantId, resumed.id, resumed.status)
      expect(finished.status).toBe("captured")
      expect(yield* payments.events(merchantId, finished.id)).toHaveLength(4)
    }).pipe(Effect.scoped, Effect.provide(servicesWith())))

  it.effect("resumes more payments than one batch, batch after batch, and then stops", () =>
    Effect.gen(function*() {
      const store = yield* Store
      const merchantId = yield* newMerchant
      const count = Math.floor(resumeBatch * 2.5)
      let serial = 0
      const mintId: MintId = (kind) => `${kind}_crashed_${++serial}`
      for (let i = 0; i < count; i++) {
        const decision = Payment.create(input(merchantId, { cardToken: `tok_card_${i}` }), {
          now: 0,
          mintId
        })
        if (!decision.ok) throw new Error("create refused")
        yield* store.insertPayment(decision.change)
      }
      yield* TestClock.adjust(Duration.seconds(1))
      yield* Layer.launch(Workers.recovery).pipe(Effect.forkScoped)
      let inFlight = count
      for (let turn = 0; turn < 100_000 && inFlight > 0; turn++) {
        inFlight = (yield* store.claimFlows({
          owner: null,
          now: Date.UTC(9999, 0, 1),
          staleBefore: Date.UTC(9999, 0, 1),
          takeOver: false,
          limit: count
        })).length
        yield* Effect.yieldNow
      }
      expect(inFlight).toBe(0)
      const page = yield* store.listPayments(merchantId, { status: "captured" }, { page: 1, perPage: 1 })
      expect(page.totalCount).toBe(count)
    }).pipe(Effect.scoped, Effect.provide(servicesWith())))
})
