import { Effect } from "effect"
import { HttpApiBuilder } from "effect/http-api"
import { successRate } from "../../domain/Webhook.ts"
import { isoAt } from "../../platform/IsoTime.ts"
import { Webhooks } from "../../services/Webhooks.ts"
import { CurrentMerchant, PaymentsApi } from "../api/Api.ts"
import { asAnswered, mapErrors } from "../api/ApiError.ts"
import * as Wire from "../api/Wire.ts"
import { idempotent } from "../edge/Idempotency.ts"

export const WebhooksLive = HttpApiBuilder.group(PaymentsApi, "webhooks", (handlers) =>
  Effect.gen(function*() {
    const webhooks = yield* Webhooks
    return handlers
      .handle("deliveries", ({ query }) =>
        asAnswered(Effect.gen(function*() {
          const { merchant } = yield* CurrentMerchant
          const page = Wire.pageRequest(query)
          const result = yield* mapErrors(webhooks.list(merchant.id, { status: query.status }, page))
          return { deliveries: result.items.map(Wire.delivery), meta: Wire.meta(page, result) }
        })))
      .handle("delivery", ({ params }) =>
        asAnswered(Effect.gen(function*() {
          const { merchant } = yield* CurrentMerchant
          return { delivery: Wire.delivery(yield* mapErrors(webhooks.get(merchant.id, params.id))) }
        })))
      .handle("retry", ({ params }) =>
        asAnswered(idempotent({}, (merchantId) =>
          mapErrors(webhooks.retry(merchantId, params.id)).pipe(
            Effect.map((d) => ({ status: 202, body: JSON.stringify({ delivery: Wire.delivery(d) }) }))
          ))))
      .handle("status", () =>
        asAnswered(Effect.gen(function*() {
          const { merchant } = yield* CurrentMerchant
          const { merchant: current, stats } = yield* mapErrors(webhooks.status(merchant.id))
          return {
            webhook_status: {
              url: current.webhookUrl,
              enabled: current.webhookUrl !== null,
              success_rate: successRate(stats),
              counts: { ...stats.counts },
              last_success_at: Wire.isoOrNull(stats.lastSuccessAt),
              last_failure_at: Wire.isoOrNull(stats.lastFailureAt),
              consecutive_failures: stats.consecutiveFailures
            }
          }
        })))
      .handle("test", ({ payload }) =>
        asAnswered(idempotent({}, (merchantId) =>
          mapErrors(webhooks.sendTest(merchantId, payload.event_type)).pipe(
            Effect.map((d) => ({ status: 202, body: JSON.stringify({ delivery: Wire.delivery(d) }) }))
          ))))
      .handle("rotateSecret", () =>
        asAnswered(idempotent({}, (merchantId) =>
          mapErrors(webhooks.rotateSecret(merchantId)).pipe(
            Effect.map((rotated) => ({
              status: 200,
              body: JSON.stringify({
                merchant: Wire.merchant(rotated.merchant),
                previous_secret_expires_at: isoAt(rotated.previousExpiresAt)
              })
            }))
          ))))
  }))
