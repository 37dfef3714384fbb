import { HttpApiBuilder } from "@effect/platform"
import { Effect } from "effect"
import type { Delivery } from "../domain/Webhook.ts"
import { successRate } from "../domain/Webhook.ts"
import type { InvalidState, NotFound } from "../services/Errors.ts"
import { Webhooks } from "../services/Webhooks.ts"
import type { StoreUnavailable } from "../store/Store.ts"
import { CurrentMerchant, PaymentsApi } from "./Api.ts"
import * as E from "./ApiError.ts"
import { idempotent } from "./Idempotency.ts"
import * as Wire from "./Wire.ts"

type ServiceError = NotFound | InvalidState | StoreUnavailable
const toApiError = (error: ServiceError): E.ApiError =>
  error._tag === "NotFound"
    ? E.notFound(error.resource)
    : error._tag === "InvalidState"
    ? E.invalidState(error.message)
    : E.serviceUnavailable()

export const delivery = (d: Delivery) => ({
  id: d.id,
  event_id: d.eventId,
  event_type: d.eventType,
  url: d.url,
  status: d.status,
  attempts: d.attempts.map((a) => ({
    attempt: a.attempt,
    at: a.at,
    response_status: a.responseStatus,
    duration_ms: a.durationMs,
    error: a.error
  })),
  next_attempt_at: d.nextAttemptAt,
  created_at: d.createdAt,
  completed_at: d.completedAt
})

export const WebhooksLive = HttpApiBuilder.group(PaymentsApi, "webhooks", (handlers) =>
  Effect.gen(function*() {
    const webhooks = yield* Webhooks
    return handlers
      .handle("deliveries", ({ urlParams }) =>
        Effect.gen(function*() {
          const { merchant } = yield* CurrentMerchant
          const page = Wire.pageRequest(urlParams)
          const result = yield* Effect.mapError(webhooks.list(merchant.id, { status: urlParams.status }, page), toApiError)
          return { deliveries: result.items.map(delivery), meta: Wire.meta(page, result) }
        }))
      .handle("delivery", ({ path }) =>
        Effect.gen(function*() {
          const { merchant } = yield* CurrentMerchant
          return { delivery: delivery(yield* Effect.mapError(webhooks.get(merchant.id, path.id), toApiError)) }
        }))
      .handle("retry", ({ path }) =>
        Effect.gen(function*() {
          const { merchant } = yield* CurrentMerchant
          return yield* idempotent({ merchantId: merchant.id }, () =>
            Effect.mapError(webhooks.retry(merchant.id, path.id), toApiError).pipe(
              Effect.map((d) => ({ status: 202, body: { delivery: delivery(d) } }))
            ))
        }))
      .handle("status", () =>
        Effect.gen(function*() {
          const { merchant } = yield* CurrentMerchant
          const { merchant: current, stats } = yield* Effect.mapError(webhooks.status(merchant.id), toApiError)
          return {
            webhook_status: {
              url: current.webhookUrl,
              enabled: current.webhookUrl !== null,
              success_rate: successRate(stats),
              counts: { ...stats.counts },
              last_success_at: stats.lastSuccessAt,
              last_failure_at: stats.lastFailureAt,
              consecutive_failures: stats.consecutiveFailures
            }
          }
        }))
      .handle("test", ({ payload }) =>
        Effect.gen(function*() {
          const { merchant } = yield* CurrentMerchant
          return yield* idempotent({ merchantId: merchant.id }, () =>
            Effect.mapError(webhooks.sendTest(merchant.id, payload.event_type), toApiError).pipe(
              Effect.map((d) => ({ status: 202, body: { delivery: delivery(d) } }))
            ))
        }))
      .handle("rotateSecret", () =>
        Effect.gen(function*() {
          const { merchant } = yield* CurrentMerchant
          return yield* idempotent({ merchantId: merchant.id }, () =>
            Effect.mapError(webhooks.rotateSecret(merchant.id), toApiError).pipe(
              Effect.map((rotated) => ({
                status: 200,
                body: { merchant: Wire.merchant(rotated.merchant), previous_secret_expires_at: rotated.previousExpiresAt }
              }))
            ))
        }))
  }))
