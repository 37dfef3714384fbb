import { Context, Effect, Layer } from "effect"
import * as FraudModel from "../domain/Fraud.ts"
import type { Payment } from "../domain/Payment.ts"
import { Store, type StoreUnavailable } from "../store/Store.ts"
import { addMs, nowIso } from "../platform/Time.ts"

/** Scores an authorized payment. The model is pure; this service gathers its features. */
export interface FraudShape {
  readonly assess: (payment: Payment) => Effect.Effect<FraudModel.Assessment, StoreUnavailable>
}

export class Fraud extends Context.Tag("payments/Fraud")<Fraud, FraudShape>() {}

const minorUnitsPerMajor = (currency: string) => (currency === "JPY" ? 1 : 100)
const hourMs = 3_600_000

export const layer = Layer.effect(
  Fraud,
  Effect.gen(function*() {
    const store = yield* Store
    return Fraud.of({
      assess: (payment) =>
        Effect.gen(function*() {
          const since = addMs(yield* nowIso, -hourMs)
          // The payment itself is among the attempts; only earlier ones count.
          const attempts = yield* store.countCardAttempts(payment.merchantId, payment.cardToken, since, FraudModel.maximumCardAttemptsFeature + 1)
          return FraudModel.assess(FraudModel.features({
            networkRiskSignal: payment.networkRiskSignal ?? 0,
            amountCents: payment.amountCents,
            minorUnitsPerMajor: minorUnitsPerMajor(payment.currency),
            cardAttemptsLastHour: Math.max(0, attempts - 1)
          }))
        })
    })
  })
)
