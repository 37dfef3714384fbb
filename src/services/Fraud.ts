import { Context, Effect, Layer } from "effect"
import * as FraudModel from "../domain/Fraud.ts"
import type { Payment } from "../domain/Payment.ts"
import {
  type FraudCaseFilter,
  type HistoryWindows,
  type PageOf,
  type PageRequest,
  Store,
  type StoreUnavailable
} from "../store/Store.ts"

/** Scores an authorized payment. The model is pure; this service gathers its features. */
export interface FraudShape {
  readonly assess: (payment: Payment) => Effect.Effect<FraudModel.Assessment, StoreUnavailable>
  /** The same score when the history is known already (the create path reads it with the insert). */
  readonly score: (payment: Payment, history: FraudModel.FraudHistory) => FraudModel.Assessment
  /** The merchant's fraud cases, newest first, filtered by status and priority. */
  readonly cases: (
    merchantId: string,
    filter: FraudCaseFilter,
    page: PageRequest
  ) => Effect.Effect<PageOf<FraudModel.FraudCase>, StoreUnavailable>
}

export class Fraud extends Context.Service<Fraud, FraudShape>()("payments/Fraud") {}

/** The history windows of a payment created at `createdAt` (docs/fraud-model.md). */
export const historyWindows = (createdAt: number): HistoryWindows => ({
  hourSince: createdAt - FraudModel.cardHourMs,
  daySince: createdAt - FraudModel.cardDayMs,
  dayLimit: FraudModel.cardDayLimit,
  amountWindow: FraudModel.merchantAmountWindow
})

/** The model's assessment of an authorized payment, given its history. */
export const score = (payment: Payment, history: FraudModel.FraudHistory) =>
  FraudModel.assess(FraudModel.features({
    networkRiskSignal: payment.networkRiskSignal ?? 0,
    amountCents: payment.amountCents,
    currency: payment.currency,
    cardBrand: payment.cardBrand,
    metadata: payment.metadata,
    createdAt: payment.createdAt,
    history
  }))

export const layer = Layer.effect(
  Fraud,
  Effect.gen(function*() {
    const store = yield* Store
    return Fraud.of({
      assess: (payment) =>
        Effect.map(
          store.fraudHistory({
            ...historyWindows(payment.createdAt),
            merchantId: payment.merchantId,
            cardToken: payment.cardToken,
            currency: payment.currency,
            until: payment.createdAt,
            excludePaymentId: payment.id
          }),
          (history) => score(payment, history)
        ),
      score,
      cases: (merchantId, filter, page) => store.listFraudCases(merchantId, filter, page)
    })
  })
)
