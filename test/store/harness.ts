import { Cause, Effect, Exit, type Layer } from "effect"
import { defaultThresholds, type FraudCase } from "../../src/domain/Fraud.ts"
import type { ApiKey, MerchantWithSecret } from "../../src/domain/Merchant.ts"
import * as Payment from "../../src/domain/Payment.ts"
import { type CommandKey, Store, type UpdateOutcome } from "../../src/store/Store.ts"
import { accepted, assessmentWithScore, createInput, makeWorld } from "../domain/fixtures.ts"

/** Runs a test body against a layer; a failed assertion surfaces as itself, not wrapped in a FiberFailure. */
export const runner =
  <R>(layer: () => Layer.Layer<R, unknown>) => async <A, E>(effect: Effect.Effect<A, E, R>): Promise<A> => {
    const exit = await Effect.runPromiseExit(Effect.provide(effect, layer()))
    if (Exit.isSuccess(exit)) return exit.value
    throw Cause.squash(exit.cause)
  }

let worlds = 0

/**
 * A deterministic world per test: counter ids with a tag of their own (tests may share a
 * database, so ids never collide) and a clock starting at `startIso`.
 */
export const testWorld = (startIso = "2026-03-01T00:00:00.000Z") => {
  const world = makeWorld(startIso, `t${++worlds}_`)
  return { ...world, merchantId: world.mintId("merchant") }
}
export type TestWorld = ReturnType<typeof testWorld>

export const apiKeyFor = (
  world: TestWorld,
  merchantId: string,
  createdAt: number,
  id = world.mintId("apiKey")
): ApiKey => ({
  id,
  merchantId,
  name: `key ${id}`,
  keyHash: `sha256_of_${id}`,
  prefix: "sk_live_abcd",
  lastFour: id.slice(-4),
  status: "active",
  createdAt,
  lastUsedAt: null,
  revokedAt: null
})

export const merchantFor = (
  world: TestWorld,
  id = world.merchantId,
  createdAt = world.clock.now()
): MerchantWithSecret => ({
  id,
  name: `Merchant ${id}`,
  webhookUrl: "https://merchant.example/webhooks",
  webhookSecret: `whsec_${id}`,
  createdAt,
  updatedAt: createdAt
})

/** Stores a merchant (with its first key) and returns it. */
export const givenMerchant = (world: TestWorld, id = world.merchantId) =>
  Effect.gen(function*() {
    const merchant = merchantFor(world, id)
    const apiKey = apiKeyFor(world, id, merchant.createdAt)
    yield* (yield* Store).insertMerchant(merchant, apiKey)
    return { merchant, apiKey }
  })

/** A decision on the locked payment, with the world's next context. */
export type Step = (payment: Payment.Payment, fraudCase: FraudCase | null, context: Payment.Context) => Payment.Decision

export const steps = {
  authorize: ((p, _, ctx) => Payment.applyAuthorization(p, { _tag: "Approved", networkRiskSignal: 0.05 }, ctx)) as Step,
  decline:
    ((p, _, ctx) =>
      Payment.applyAuthorization(p, { _tag: "Declined", code: "do_not_honor", message: "Declined." }, ctx)) as Step,
  screen: (score: number): Step => (p, _, ctx) =>
    Payment.applyFraudAssessment(p, assessmentWithScore(score), defaultThresholds, ctx),
  capture: (amountCents?: number): Step => (p, _, ctx) => Payment.capture(p, amountCents, ctx),
  voidIt: ((p, _, ctx) => Payment.voidAuthorization(p, ctx)) as Step,
  refund: (amountCents?: number): Step => (p, _, ctx) => Payment.refund(p, amountCents, ctx),
  settle: ((p, _, ctx) => Payment.settle(p, ctx)) as Step,
  review: (decision: Payment.ReviewDecision, notes: string | null): Step => (p, fraudCase, ctx) =>
    Payment.review(p, fraudCase!, decision, notes, ctx)
}

/** The usual way to a captured payment. */
export const toCaptured = (amountCents?: number) => [steps.authorize, steps.screen(0.1), steps.capture(amountCents)]

/** Applies one step through `updatePayment` (the world's clock advances by `advanceMs` first). */
export const apply = (
  world: TestWorld,
  target: { readonly merchantId: string | null; readonly paymentId: string; readonly commandKey?: CommandKey },
  step: Step,
  advanceMs = 1_000
): Effect.Effect<UpdateOutcome, unknown, Store> =>
  Effect.flatMap(
    Store,
    (store) => store.updatePayment(target, (payment, fraudCase) => step(payment, fraudCase, world.context(advanceMs)))
  )

/** Applies a step that must be accepted and returns its change. */
export const applied = (world: TestWorld, merchantId: string, paymentId: string, step: Step, advanceMs = 1_000) =>
  Effect.map(apply(world, { merchantId, paymentId }, step, advanceMs), (outcome) => {
    if (outcome._tag !== "Applied") throw new Error(`expected Applied, got ${outcome._tag}`)
    return outcome.change
  })

/**
 * Creates and stores a payment, then applies `path`; returns the final payment and every change
 * in order (the create first).
 */
export const givenPayment = (
  world: TestWorld,
  options: {
    readonly merchantId?: string
    readonly input?: Partial<Payment.CreateInput>
    readonly path?: ReadonlyArray<Step>
  } = {}
) =>
  Effect.gen(function*() {
    const merchantId = options.merchantId ?? world.merchantId
    const created = accepted(Payment.create(createInput(merchantId, options.input), world.context()))
    const inserted = yield* (yield* Store).insertPayment(created)
    if (inserted._tag !== "Inserted") throw new Error("expected a new payment")
    const changes: Array<Payment.Change> = [created]
    for (const step of options.path ?? []) changes.push(yield* applied(world, merchantId, created.payment.id, step))
    return { payment: changes.at(-1)!.payment, changes }
  })

export const eventsOf = (changes: ReadonlyArray<Payment.Change>) => changes.flatMap((c) => c.events)
export const ledgerOf = (changes: ReadonlyArray<Payment.Change>) => changes.flatMap((c) => c.ledger)
