import { Effect } from "effect"
import { HttpApiBuilder } from "effect/http-api"
import { Analytics } from "../../services/Analytics.ts"
import { Fraud } from "../../services/Fraud.ts"
import { Payments } from "../../services/Payments.ts"
import { CurrentMerchant, PaymentsApi } from "../api/Api.ts"
import * as E from "../api/ApiError.ts"
import { mapErrors } from "../api/ApiError.ts"
import * as Wire from "../api/Wire.ts"
import { idempotent } from "../edge/Idempotency.ts"

/** The fraud group: cases, statistics, reviews. */
export const FraudLive = HttpApiBuilder.group(PaymentsApi, "fraud", (handlers) =>
  Effect.gen(function*() {
    const fraud = yield* Fraud
    const analytics = yield* Analytics
    const payments = yield* Payments
    return handlers
      .handle("cases", ({ query }) =>
        E.asAnswered(Effect.gen(function*() {
          const { merchant } = yield* CurrentMerchant
          const page = Wire.pageRequest(query)
          const result = yield* mapErrors(
            fraud.cases(merchant.id, { status: query.status, priority: query.priority }, page)
          )
          return { fraud_cases: result.items.map(Wire.fraudCase), meta: Wire.meta(page, result) }
        })))
      .handle("stats", () =>
        E.asAnswered(Effect.gen(function*() {
          const { merchant } = yield* CurrentMerchant
          return { fraud_stats: Wire.fraudStats(yield* mapErrors(analytics.fraudStats(merchant.id))) }
        })))
      .handle("review", ({ params, payload }) =>
        E.asAnswered(idempotent({}, (merchantId, commandKey) =>
          mapErrors(payments.review(merchantId, params.id, payload.status, payload.notes ?? null, commandKey)).pipe(
            Effect.map((fraudCase) => ({
              status: 200,
              body: JSON.stringify({ fraud_case: Wire.fraudCase(fraudCase) })
            }))
          ))))
  }))
