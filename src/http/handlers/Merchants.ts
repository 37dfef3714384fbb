import { Effect } from "effect"
import { HttpApiBuilder } from "effect/http-api"
import { Analytics } from "../../services/Analytics.ts"
import { Merchants } from "../../services/Merchants.ts"
import { CurrentMerchant, PaymentsApi } from "../api/Api.ts"
import * as E from "../api/ApiError.ts"
import { mapErrors } from "../api/ApiError.ts"
import * as Wire from "../api/Wire.ts"
import { boundary } from "./Query.ts"

/** The merchants group: the caller's merchant, its update, analytics and balances. */
export const MerchantsLive = HttpApiBuilder.group(PaymentsApi, "merchants", (handlers) =>
  Effect.gen(function*() {
    const merchants = yield* Merchants
    const analytics = yield* Analytics
    return handlers
      .handle("me", () =>
        E.asAnswered(Effect.gen(function*() {
          const { merchant } = yield* CurrentMerchant
          return { merchant: Wire.merchant(yield* mapErrors(merchants.get(merchant.id))) }
        })))
      .handle("update", ({ payload }) =>
        E.asAnswered(Effect.gen(function*() {
          const { merchant } = yield* CurrentMerchant
          const updated = yield* mapErrors(
            merchants.update(merchant.id, { name: payload.name, webhookUrl: payload.webhook_url })
          )
          return { merchant: Wire.merchant(updated) }
        })))
      .handle("analytics", ({ query }) =>
        E.asAnswered(Effect.gen(function*() {
          const { merchant } = yield* CurrentMerchant
          const report = yield* mapErrors(analytics.analytics(merchant.id, {
            from: boundary(query.from, false) ?? null,
            to: boundary(query.to, true) ?? null,
            interval: query.interval ?? null
          }))
          return { analytics: Wire.analytics(report) }
        })))
      .handle("balance", () =>
        E.asAnswered(Effect.gen(function*() {
          const { merchant } = yield* CurrentMerchant
          return { balances: [...(yield* mapErrors(merchants.balances(merchant.id)))] }
        })))
  }))
