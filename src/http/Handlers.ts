import { Effect, Layer } from "effect"
import { HttpApiBuilder } from "effect/http-api"
import { NotFound } from "../services/Errors.ts"
import { Payments } from "../services/Payments.ts"
import * as E from "./ApiError.ts"
import { answer } from "./ApiError.ts"
import { PaymentsApi } from "./Api.ts"
import { jsonResponse } from "./Edge.ts"
import { idempotentInline } from "./Idempotency.ts"
import { withCaller } from "./RequestState.ts"
import * as Wire from "./Wire.ts"

/**
 * The handlers of the endpoints served on Effect 4 so far: create and retrieve a payment, and
 * the liveness probe. The other groups' handlers are still those of Effect 3
 * (`git show main:src/http/Handlers.ts`).
 */
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
        return E.asAnswered(idempotentInline(
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
        ))
      })
      .handle("get", ({ params: path }) =>
        E.asAnswered(withCaller(({ merchant }) =>
          // Rendered here rather than encoded through the success schema: the hottest read. The
          // missing payment is refused in the same step as the rendering (no step of `get` for it).
          Effect.matchEffect(payments.find(merchant.id, path.id), {
            onFailure: (error) => Effect.fail(E.toApiError(error)),
            onSuccess: (payment) =>
              payment === null
                ? Effect.fail(E.toApiError(new NotFound({ resource: "transaction", id: path.id })))
                : Effect.succeed(jsonResponse(200, JSON.stringify({ transaction: Wire.transaction(payment) })))
          }))))
  }))

const OperationsLive = HttpApiBuilder.group(PaymentsApi, "operations", (handlers) =>
  Effect.succeed(handlers.handle("healthz", () => Effect.succeed({ status: "ok" as const }))))

export const layer = Layer.mergeAll(TransactionsLive, OperationsLive)
