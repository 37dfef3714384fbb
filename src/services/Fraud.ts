import { Context, Effect, Layer } from "effect"
import * as FraudModel from "../domain/Fraud.ts"
import type { Payment } from "../domain/Payment.ts"
import { Store, type StoreUnavailable } from "../store/Store.ts"
import { addMs, nowIso } from "../platform/Time.ts"

/** Scores an authorized payment. The model is pure; this service gathers its features. */
export interface FraudShape {
  readonly assess: (payment: Payment) => Effect.Effect<FraudModel.Assessment, StoreUnavailable>
  /** The same score when the card's earlier attempts in the last hour are known already (the create path counts them). */
  readonly score: (payment: Payment, cardAttemptsLastHour: number) => FraudModel.Assessment
}

export class Fraud extends Context.Tag("payments/Fraud")<Fraud, FraudShape>() {}

const minorUnitsPerMajor = (currency: string) => (currency === "JPY" ? 1 : 100)
export const velocityWindowMs = 3_600_000
/** How many earlier attempts the velocity count needs to see (the model caps the feature). */
export const velocityLimit = FraudModel.maximumCardAttemptsFeature

/** The model's assessment of an authorized payment given its card's earlier attempts in the last hour. */
export const score = (payment: Payment, cardAttemptsLastHour: number) =>
  FraudModel.assess(FraudModel.features({
    networkRiskSignal: payment.networkRiskSignal ?? 0,
    amountCents: payment.amountCents,
    minorUnitsPerMajor: minorUnitsPerMajor(payment.currency),
    cardAttemptsLastHour
  }))

export const layer = Layer.effect(
  Fraud,
  Effect.gen(function*() {
    const store = yield* Store
    return Fraud.of({
      assess: (payment) =>
        Effect.gen(function*() {
          const since = addMs(yield* nowIso, -velocityWindowMs)
          // The payment itself is among the attempts; only earlier ones count.
          const attempts = yield* store.countCardAttempts(payment.merchantId, payment.cardToken, since, velocityLimit + 1)
          return score(payment, Math.max(0, attempts - 1))
        }),
      score
    })
  })
)
