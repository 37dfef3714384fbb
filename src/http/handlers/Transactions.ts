import { Effect } from "effect"
import { HttpApiBuilder } from "effect/http-api"
import type * as Payment from "../../domain/Payment.ts"
import { NotFound } from "../../services/Errors.ts"
import { Create } from "../../services/Idempotency.ts"
import { Payments } from "../../services/Payments.ts"
import { CurrentMerchant, PaymentsApi } from "../api/Api.ts"
import * as E from "../api/ApiError.ts"
import { answer, mapErrors } from "../api/ApiError.ts"
import * as Wire from "../api/Wire.ts"
import { idempotent } from "../edge/Idempotency.ts"
import { jsonResponse } from "../edge/JsonResponse.ts"
import { withCaller } from "../edge/RequestState.ts"
import { boundary } from "./Query.ts"

/** A created transaction's answer, from the payment as committed. */
const created = (payment: Payment.Payment) => ({
  status: 201,
  body: JSON.stringify({ transaction: Wire.transaction(payment) })
})

/** The transactions group: create (the hot path, in plain steps), list, retrieve, capture, refund, void, events, ledger. */
export const TransactionsLive = HttpApiBuilder.group(PaymentsApi, "transactions", (handlers) =>
  Effect.gen(function*() {
    const payments = yield* Payments
    return handlers
      // The hot endpoint: the create, under its idempotency key (header or body field), through the
      // Idempotency service, which commits the key's claim with the payment.
      .handle("create", ({ payload }) => {
        const t = payload.transaction
        return E.asAnswered(idempotent(
          { bodyKey: t.idempotency_key, bodyKeyParam: "transaction.idempotency_key" },
          (merchantId, commandKey) =>
            new Create({
              merchantId,
              amountCents: t.amount_cents,
              currency: t.currency,
              cardBrand: t.card_brand,
              cardLastFour: t.card_last_four,
              cardToken: t.card_token,
              captureMethod: t.capture_method ?? "automatic",
              idempotencyKey: commandKey?.key ?? null,
              metadata: t.metadata ?? {}
            }, created)
        ))
      })
      .handle("list", ({ query }) =>
        E.asAnswered(Effect.gen(function*() {
          const { merchant } = yield* CurrentMerchant
          const page = Wire.pageRequest(query)
          const result = yield* mapErrors(payments.list(merchant.id, {
            status: query.status,
            createdFrom: boundary(query.from, false),
            createdTo: boundary(query.to, true),
            minAmountCents: query.min_amount,
            maxAmountCents: query.max_amount
          }, page))
          return { transactions: result.items.map(Wire.transaction), meta: Wire.meta(page, result) }
        })))
      .handle("get", ({ params }) =>
        E.asAnswered(withCaller(({ merchant }) =>
          // Rendered here rather than encoded through the success schema: the hottest read. The
          // missing payment is refused in the same step as the rendering (no step of `get` for it).
          Effect.matchEffect(payments.find(merchant.id, params.id), {
            onFailure: (error) => Effect.fail(E.toApiError(error)),
            onSuccess: (payment) =>
              payment === null
                ? Effect.fail(E.toApiError(new NotFound({ resource: "transaction", id: params.id })))
                : Effect.succeed(jsonResponse(200, JSON.stringify({ transaction: Wire.transaction(payment) })))
          })
        )))
      .handle("capture", ({ params, payload }) =>
        E.asAnswered(idempotent({}, (merchantId, commandKey) =>
          answer(payments.capture(merchantId, params.id, payload?.amount_cents, commandKey), (payment) => ({
            status: 200,
            body: JSON.stringify({ transaction: Wire.transaction(payment) })
          })))))
      .handle("refund", ({ params, payload }) =>
        E.asAnswered(idempotent({}, (merchantId, commandKey) =>
          answer(payments.refund(merchantId, params.id, payload?.amount_cents, commandKey), (payment) => ({
            status: 200,
            body: JSON.stringify({ transaction: Wire.transaction(payment) })
          })))))
      .handle("void", ({ params }) =>
        E.asAnswered(idempotent({}, (merchantId, commandKey) =>
          answer(payments.void(merchantId, params.id, commandKey), (payment) => ({
            status: 200,
            body: JSON.stringify({ transaction: Wire.transaction(payment) })
          })))))
      .handle("events", ({ params }) =>
        E.asAnswered(Effect.gen(function*() {
          const { merchant } = yield* CurrentMerchant
          return { events: (yield* mapErrors(payments.events(merchant.id, params.id))).map(Wire.event) }
        })))
      .handle("ledger", ({ params }) =>
        E.asAnswered(Effect.gen(function*() {
          const { merchant } = yield* CurrentMerchant
          return { ledger_entries: (yield* mapErrors(payments.ledger(merchant.id, params.id))).map(Wire.ledgerEntry) }
        })))
  }))
