import { HttpApiBuilder } from "@effect/platform"
import { Effect, Layer } from "effect"
import { Analytics } from "../services/Analytics.ts"
import { ApiKeys } from "../services/ApiKeys.ts"
import { Fraud } from "../services/Fraud.ts"
import { Merchants } from "../services/Merchants.ts"
import { NotFound } from "../services/Errors.ts"
import { Payments } from "../services/Payments.ts"
import * as E from "./ApiError.ts"
import { answer, mapErrors } from "./ApiError.ts"
import { CurrentMerchant, PaymentsApi } from "./Api.ts"
import { jsonResponse } from "./Edge.ts"
import { idempotent, idempotentInline } from "./Idempotency.ts"
import { withCaller } from "./RequestState.ts"
import * as Wire from "./Wire.ts"
import * as Database from "../platform/Database.ts"
import { prometheusText } from "../platform/Metrics.ts"
import { makeGaugeSampler } from "../services/Gauges.ts"
import { PgPool } from "../store/PgPrepared.ts"
import { WebhookStore } from "../store/WebhookStore.ts"
import { WebhooksLive } from "./WebhooksHttp.ts"

/** Dates without a time mean the whole day: `from` its start, `to` its end. */
const boundary = (text: string | undefined, end: boolean) => {
  if (text === undefined) return undefined
  const dateOnly = /^\d{4}-\d{2}-\d{2}$/.test(text)
  return new Date(dateOnly ? `${text}T${end ? "23:59:59.999" : "00:00:00.000"}Z` : text).toISOString()
}

const TransactionsLive = HttpApiBuilder.group(PaymentsApi, "transactions", (handlers) =>
  Effect.gen(function*() {
    const payments = yield* Payments
    return handlers
      // The hot endpoints in plain steps: the caller and the request's state are read in one.
      .handle("create", ({ payload }) => {
        const t = payload.transaction
        const input = (merchantId: string, idempotencyKey: string | null) => ({
          merchantId,
          amountCents: t.amount_cents,
          currency: t.currency,
          cardBrand: t.card_brand,
          cardLastFour: t.card_last_four,
          cardToken: t.card_token,
          captureMethod: t.capture_method ?? "automatic",
          idempotencyKey,
          metadata: t.metadata ?? {}
        })
        return idempotentInline(
          { bodyKey: t.idempotency_key, bodyKeyParam: "transaction.idempotency_key" },
          (merchantId, claim, onClaimed, storedForm) =>
            // Its store failures are mapped by idempotentInline, in the step that handles its outcome.
            payments.createInline(input(merchantId, claim?.key ?? null), {
              claim,
              onClaimed,
              respond: (payment) => {
                const body = JSON.stringify({ transaction: Wire.transaction(payment) })
                return { status: 201, body, stored: storedForm(body) }
              }
            }),
          (merchantId, commandKey) =>
            answer(payments.create(input(merchantId, commandKey?.key ?? null)), ({ payment }) => ({
              status: 201,
              body: { transaction: Wire.transaction(payment) }
            }))
        )
      })
      .handle("list", ({ urlParams }) =>
        Effect.gen(function*() {
          const { merchant } = yield* CurrentMerchant
          const page = Wire.pageRequest(urlParams)
          const result = yield* mapErrors(payments.list(merchant.id, {
            status: urlParams.status,
            createdFrom: boundary(urlParams.from, false),
            createdTo: boundary(urlParams.to, true),
            minAmountCents: urlParams.min_amount,
            maxAmountCents: urlParams.max_amount
          }, page))
          return { transactions: result.items.map(Wire.transaction), meta: Wire.meta(page, result) }
        }))
      .handle("get", ({ path }) =>
        withCaller(({ merchant }) =>
          // Rendered here rather than encoded through the success schema: the hottest read. The
          // missing payment is refused in the same step as the rendering (no step of `get` for it).
          Effect.matchEffect(payments.find(merchant.id, path.id), {
            onFailure: (error) => Effect.fail(E.toApiError(error)),
            onSuccess: (payment) =>
              payment === null
                ? Effect.fail(E.toApiError(new NotFound({ resource: "transaction", id: path.id })))
                : Effect.succeed(jsonResponse(200, JSON.stringify({ transaction: Wire.transaction(payment) })))
          })))
      .handle("capture", ({ path, payload }) =>
        idempotent({}, (merchantId, commandKey) =>
          answer(payments.capture(merchantId, path.id, payload?.amount_cents, commandKey), (payment) => ({
            status: 200,
            body: { transaction: Wire.transaction(payment) }
          }))))
      .handle("refund", ({ path, payload }) =>
        idempotent({}, (merchantId, commandKey) =>
          answer(payments.refund(merchantId, path.id, payload?.amount_cents, commandKey), (payment) => ({
            status: 200,
            body: { transaction: Wire.transaction(payment) }
          }))))
      .handle("void", ({ path }) =>
        idempotent({}, (merchantId, commandKey) =>
          answer(payments.void(merchantId, path.id, commandKey), (payment) => ({
            status: 200,
            body: { transaction: Wire.transaction(payment) }
          }))))
      .handle("events", ({ path }) =>
        Effect.gen(function*() {
          const { merchant } = yield* CurrentMerchant
          return { events: (yield* mapErrors(payments.events(merchant.id, path.id))).map(Wire.event) }
        }))
      .handle("ledger", ({ path }) =>
        Effect.gen(function*() {
          const { merchant } = yield* CurrentMerchant
          return { ledger_entries: (yield* mapErrors(payments.ledger(merchant.id, path.id))).map(Wire.ledgerEntry) }
        }))
  }))

const MerchantsLive = HttpApiBuilder.group(PaymentsApi, "merchants", (handlers) =>
  Effect.gen(function*() {
    const merchants = yield* Merchants
    const analytics = yield* Analytics
    return handlers
      .handle("me", () =>
        Effect.gen(function*() {
          const { merchant } = yield* CurrentMerchant
          return { merchant: Wire.merchant(yield* mapErrors(merchants.get(merchant.id))) }
        }))
      .handle("update", ({ payload }) =>
        Effect.gen(function*() {
          const { merchant } = yield* CurrentMerchant
          const updated = yield* mapErrors(merchants.update(merchant.id, { name: payload.name, webhookUrl: payload.webhook_url }))
          return { merchant: Wire.merchant(updated) }
        }))
      .handle("analytics", ({ urlParams }) =>
        Effect.gen(function*() {
          const { merchant } = yield* CurrentMerchant
          const report = yield* mapErrors(analytics.analytics(merchant.id, {
            from: boundary(urlParams.from, false) ?? null,
            to: boundary(urlParams.to, true) ?? null,
            interval: urlParams.interval ?? null
          }))
          return { analytics: Wire.analytics(report) }
        }))
      .handle("balance", () =>
        Effect.gen(function*() {
          const { merchant } = yield* CurrentMerchant
          return { balances: [...(yield* mapErrors(merchants.balances(merchant.id)))] }
        }))
  }))

const ApiKeysLive = HttpApiBuilder.group(PaymentsApi, "apiKeys", (handlers) =>
  Effect.gen(function*() {
    const apiKeys = yield* ApiKeys
    return handlers
      .handle("list", ({ urlParams }) =>
        Effect.gen(function*() {
          const { merchant } = yield* CurrentMerchant
          const page = Wire.pageRequest(urlParams)
          const result = yield* mapErrors(apiKeys.list(merchant.id, page))
          return { api_keys: result.items.map(Wire.apiKey), meta: Wire.meta(page, result) }
        }))
      .handle("create", ({ payload }) =>
        idempotent({}, (merchantId) =>
          mapErrors(apiKeys.create(merchantId, payload.name)).pipe(
            Effect.map((issued) => ({ status: 201, body: { api_key: Wire.apiKeyCreated(issued.record, issued.secret) } }))
          )))
      .handle("rotate", ({ path }) =>
        idempotent({}, (merchantId) =>
          mapErrors(apiKeys.rotate(merchantId, path.id)).pipe(
            Effect.map((issued) => ({ status: 201, body: { api_key: Wire.apiKeyCreated(issued.record, issued.secret) } }))
          )))
  }))

const FraudLive = HttpApiBuilder.group(PaymentsApi, "fraud", (handlers) =>
  Effect.gen(function*() {
    const fraud = yield* Fraud
    const analytics = yield* Analytics
    const payments = yield* Payments
    return handlers
      .handle("cases", ({ urlParams }) =>
        Effect.gen(function*() {
          const { merchant } = yield* CurrentMerchant
          const page = Wire.pageRequest(urlParams)
          const result = yield* mapErrors(fraud.cases(merchant.id, { status: urlParams.status, priority: urlParams.priority }, page))
          return { fraud_cases: result.items.map(Wire.fraudCase), meta: Wire.meta(page, result) }
        }))
      .handle("stats", () =>
        Effect.gen(function*() {
          const { merchant } = yield* CurrentMerchant
          return { fraud_stats: Wire.fraudStats(yield* mapErrors(analytics.fraudStats(merchant.id))) }
        }))
      .handle("review", ({ path, payload }) =>
        idempotent({}, (merchantId, commandKey) =>
          mapErrors(payments.review(merchantId, path.id, payload.status, payload.notes ?? null, commandKey)).pipe(
            Effect.map((fraudCase) => ({ status: 200, body: { fraud_case: Wire.fraudCase(fraudCase) } }))
          )))
  }))

const OperationsLive = HttpApiBuilder.group(PaymentsApi, "operations", (handlers) =>
  Effect.gen(function*() {
    const pool = yield* Effect.serviceOption(PgPool)
    const sampleGauges = makeGaugeSampler(yield* Effect.serviceOption(WebhookStore), pool)
    const ready = Database.readiness(pool).pipe(
      Effect.as({ status: "ok" as const }),
      Effect.mapError(() => E.serviceUnavailable())
    )
    return handlers
      .handle("healthz", () => Effect.succeed({ status: "ok" as const }))
      .handle("readyz", () => ready)
      .handle("metrics", () => Effect.zipRight(sampleGauges, prometheusText))
  }))

export const layer = Layer.mergeAll(TransactionsLive, MerchantsLive, ApiKeysLive, FraudLive, OperationsLive, WebhooksLive)

