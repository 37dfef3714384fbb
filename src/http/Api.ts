import { Schema } from "effect"
import { HttpApi, HttpApiEndpoint, HttpApiGroup, HttpApiMiddleware, HttpApiSchema, HttpApiSecurity, OpenApi } from "effect/http-api"
import * as S from "./Schemas.ts"

/**
 * The authenticated caller (the merchant that owns the API key, and the key itself) is recorded
 * on the request's state (`CurrentMerchant`, src/http/RequestState.ts) rather than provided as a
 * service: a provided service costs Effect steps on every request.
 */
export { CurrentMerchant } from "./RequestState.ts"

/**
 * Bearer authentication. Its refusals (`ApiError`, 401 and 429) are rendered by the edge
 * (src/http/Edge.ts) like every other error: the error schemas of the OpenAPI document are not
 * declared on this port yet.
 */
export class Authentication extends HttpApiMiddleware.Service<Authentication>()("payments/Authentication", {
  security: { bearer: HttpApiSecurity.bearer }
}) {}

const created = HttpApiSchema.status(201)

/** An operation's summary (a short title) and description, for the OpenAPI document and the docs page. */
const doc = (summary: string, description: string) => OpenApi.annotations({ summary, description })

/**
 * Every POST honours an idempotency key (CONTRACT section 5). Declared here, so the OpenAPI
 * document and the typed client know it; the idempotency layer reads and applies it.
 */
export const IdempotencyHeaders = Schema.Struct({
  "x-idempotency-key": Schema.optional(S.IdempotencyKeyText.annotate({
    description: "1 to 255 printable ASCII characters. The same key and request within IDEMPOTENCY_TTL (24 h) replays the first " +
      "response byte for byte (with Idempotent-Replayed: true); the same key with another request is 422 idempotency_key_reused."
  }))
})

export class TransactionsGroup extends HttpApiGroup.make("transactions")
  .add(
    HttpApiEndpoint.post("create", "/transactions", {
      payload: S.TransactionCreate,
      headers: IdempotencyHeaders,
      success: S.TransactionEnvelope.pipe(created)
    }).annotateMerge(doc(
      "Create a payment",
      "Creates a payment and runs authorize → fraud screen → capture (capture_method automatic) in the request. " +
        "Answers 201 with the record as the flow left it: pending when the card network has not answered within the " +
        "request deadline (webhooks report the outcome). Honours X-Idempotency-Key or transaction.idempotency_key."
    ))
  )
  .add(
    HttpApiEndpoint.get("get", "/transactions/:id", {
      params: S.PaymentIdPath,
      success: S.TransactionEnvelope
    }).annotateMerge(doc("Retrieve a payment", "One payment of the merchant; another merchant's payment is 404."))
  )
  .middleware(Authentication)
  .prefix("/api/v1")
  .annotateMerge(OpenApi.annotations({ description: "Payments: create and retrieve." }))
{}

export class OperationsGroup extends HttpApiGroup.make("operations")
  .add(
    HttpApiEndpoint.get("healthz", "/healthz", { success: Schema.Struct({ status: Schema.Literal("ok") }) })
      .annotateMerge(doc("Liveness", "Answers while the process serves HTTP; it does not touch the database."))
  )
{}

export class PaymentsApi extends HttpApi.make("payments")
  .add(TransactionsGroup)
  .add(OperationsGroup)
  // Unknown fields are errors, so a typo never passes silently (CONTRACT section 1).
  .annotate(HttpApi.PayloadParseOptions, { onExcessProperty: "error" })
  .annotateMerge(OpenApi.annotations({
    title: "Payments API",
    version: "1.0.0",
    description: "Card payments for merchants. Every error answers with the CONTRACT envelope."
  }))
{}
