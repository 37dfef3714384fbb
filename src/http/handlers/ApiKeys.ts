import { Effect } from "effect"
import { HttpApiBuilder } from "effect/http-api"
import { ApiKeys } from "../../services/ApiKeys.ts"
import { CurrentMerchant, PaymentsApi } from "../api/Api.ts"
import * as E from "../api/ApiError.ts"
import { mapErrors } from "../api/ApiError.ts"
import * as Wire from "../api/Wire.ts"
import { idempotent } from "../edge/Idempotency.ts"

/** The API keys group: list, create, rotate. */
export const ApiKeysLive = HttpApiBuilder.group(PaymentsApi, "apiKeys", (handlers) =>
  Effect.gen(function*() {
    const apiKeys = yield* ApiKeys
    return handlers
      .handle("list", ({ query }) =>
        E.asAnswered(Effect.gen(function*() {
          const { merchant } = yield* CurrentMerchant
          const page = Wire.pageRequest(query)
          const result = yield* mapErrors(apiKeys.list(merchant.id, page))
          return { api_keys: result.items.map(Wire.apiKey), meta: Wire.meta(page, result) }
        })))
      .handle("create", ({ payload }) =>
        E.asAnswered(idempotent({}, (merchantId) =>
          mapErrors(apiKeys.create(merchantId, payload.name)).pipe(
            Effect.map((issued) => ({
              status: 201,
              body: JSON.stringify({ api_key: Wire.apiKeyCreated(issued.record, issued.secret) })
            }))
          ))))
      .handle("rotate", ({ params }) =>
        E.asAnswered(idempotent({}, (merchantId) =>
          mapErrors(apiKeys.rotate(merchantId, params.id)).pipe(
            Effect.map((issued) => ({
              status: 201,
              body: JSON.stringify({ api_key: Wire.apiKeyCreated(issued.record, issued.secret) })
            }))
          ))))
  }))
