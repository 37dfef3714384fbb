import { HttpApi, HttpApiEndpoint, HttpApiGroup, HttpApiMiddleware, HttpApiSchema, HttpApiSecurity, OpenApi } from "@effect/platform"
import { Context, Schema } from "effect"
import type { ApiKey, Merchant } from "../domain/Merchant.ts"
import { errorResponses } from "./ApiError.ts"
import * as S from "./Schemas.ts"
import * as W from "./WebhookSchemas.ts"

/** The authenticated caller: the merchant that owns the API key, and the key itself. */
export class CurrentMerchant extends Context.Tag("payments/CurrentMerchant")<
  CurrentMerchant,
  { readonly merchant: Merchant; readonly apiKey: ApiKey }
>() {}

export class Authentication extends HttpApiMiddleware.Tag<Authentication>()("payments/Authentication", {
  provides: CurrentMerchant,
  failure: errorResponses[1],
  security: { bearer: HttpApiSecurity.bearer }
}) {}

const created = { status: 201 }

export class TransactionsGroup extends HttpApiGroup.make("transactions")
  .add(
    HttpApiEndpoint.post("create", "/transactions")
      .setPayload(S.TransactionCreate)
      .addSuccess(S.TransactionEnvelope, created)
      .annotate(OpenApi.Description, "Creates a payment and runs authorize → fraud screen → capture. Honours X-Idempotency-Key.")
  )
  .add(HttpApiEndpoint.get("list", "/transactions").setUrlParams(S.TransactionListParams).addSuccess(S.TransactionList))
  .add(HttpApiEndpoint.get("get", "/transactions/:id").setPath(S.PaymentIdPath).addSuccess(S.TransactionEnvelope))
  .add(
    HttpApiEndpoint.post("capture", "/transactions/:id/capture")
      .setPath(S.PaymentIdPath)
      .setPayload(S.AmountBody)
      .addSuccess(S.TransactionEnvelope)
  )
  .add(
    HttpApiEndpoint.post("refund", "/transactions/:id/refund")
      .setPath(S.PaymentIdPath)
      .setPayload(S.AmountBody)
      .addSuccess(S.TransactionEnvelope)
  )
  .add(
    HttpApiEndpoint.post("void", "/transactions/:id/void")
      .setPath(S.PaymentIdPath)
      .setPayload(S.EmptyBody)
      .addSuccess(S.TransactionEnvelope)
  )
  .add(HttpApiEndpoint.get("events", "/transactions/:id/events").setPath(S.PaymentIdPath).addSuccess(S.EventList))
  .add(HttpApiEndpoint.get("ledger", "/transactions/:id/ledger").setPath(S.PaymentIdPath).addSuccess(S.LedgerEntryList))
  .middleware(Authentication)
  .prefix("/api/v1")
{}

export class MerchantsGroup extends HttpApiGroup.make("merchants")
  .add(HttpApiEndpoint.get("me", "/merchants/me").addSuccess(S.MerchantEnvelope))
  .add(HttpApiEndpoint.patch("update", "/merchants/me").setPayload(S.MerchantPatch).addSuccess(S.MerchantEnvelope))
  .add(HttpApiEndpoint.get("analytics", "/merchants/me/analytics").setUrlParams(S.AnalyticsParams).addSuccess(S.AnalyticsEnvelope))
  .add(HttpApiEndpoint.get("balance", "/merchants/me/balance").addSuccess(S.BalanceEnvelope))
  .middleware(Authentication)
  .prefix("/api/v1")
{}

export class ApiKeysGroup extends HttpApiGroup.make("apiKeys")
  .add(HttpApiEndpoint.get("list", "/api_keys").setUrlParams(S.PageOnlyParams).addSuccess(S.ApiKeyList))
  .add(HttpApiEndpoint.post("create", "/api_keys").setPayload(S.ApiKeyCreate).addSuccess(S.ApiKeyCreatedEnvelope, created))
  .add(
    HttpApiEndpoint.post("rotate", "/api_keys/:id/rotate")
      .setPath(S.PaymentIdPath)
      .setPayload(S.EmptyBody)
      .addSuccess(S.ApiKeyCreatedEnvelope, created)
  )
  .middleware(Authentication)
  .prefix("/api/v1")
{}

export class FraudGroup extends HttpApiGroup.make("fraud")
  .add(HttpApiEndpoint.get("cases", "/fraud/cases").setUrlParams(S.FraudCaseListParams).addSuccess(S.FraudCaseList))
  .add(
    HttpApiEndpoint.post("review", "/fraud/cases/:id/review")
      .setPath(S.PaymentIdPath)
      .setPayload(S.FraudReview)
      .addSuccess(S.FraudCaseEnvelope)
  )
  .add(HttpApiEndpoint.get("stats", "/fraud/stats").addSuccess(S.FraudStatsEnvelope))
  .middleware(Authentication)
  .prefix("/api/v1")
{}

export class WebhooksGroup extends HttpApiGroup.make("webhooks")
  .add(HttpApiEndpoint.get("deliveries", "/webhooks/deliveries").setUrlParams(W.DeliveryListParams).addSuccess(W.DeliveryList))
  .add(HttpApiEndpoint.get("delivery", "/webhooks/deliveries/:id").setPath(W.DeliveryIdPath).addSuccess(W.DeliveryEnvelope))
  .add(
    HttpApiEndpoint.post("retry", "/webhooks/deliveries/:id/retry")
      .setPath(W.DeliveryIdPath)
      .setPayload(S.EmptyBody)
      .addSuccess(W.DeliveryEnvelope, { status: 202 })
      .annotate(OpenApi.Description, "Sends a failed delivery again now (one more attempt).")
  )
  .add(HttpApiEndpoint.get("status", "/webhooks/status").addSuccess(W.WebhookStatusEnvelope))
  .add(
    HttpApiEndpoint.post("test", "/webhooks/test")
      .setPayload(W.WebhookTest)
      .addSuccess(W.DeliveryEnvelope, { status: 202 })
      .annotate(OpenApi.Description, "Sends a sample event of the given type to the webhook_url through the delivery pipeline.")
  )
  .add(
    HttpApiEndpoint.post("rotateSecret", "/webhooks/secret/rotate")
      .setPayload(S.EmptyBody)
      .addSuccess(W.SecretRotated)
      .annotate(OpenApi.Description, "Issues a new whsec_ signing secret; the previous one keeps signing beside it for 24 hours.")
  )
  .middleware(Authentication)
  .prefix("/api/v1")
{}

export class OperationsGroup extends HttpApiGroup.make("operations")
  .add(HttpApiEndpoint.get("healthz", "/healthz").addSuccess(Schema.Struct({ status: Schema.Literal("ok") })))
  .add(HttpApiEndpoint.get("readyz", "/readyz").addSuccess(Schema.Struct({ status: Schema.Literal("ok") })))
  .add(
    HttpApiEndpoint.get("metrics", "/metrics").addSuccess(
      Schema.String.pipe(HttpApiSchema.withEncoding({ kind: "Text", contentType: "text/plain; version=0.0.4" }))
    )
  )
{}

/**
 * HttpApi documents its own 400 `HttpApiDecodeError`, which this API never sends: decode
 * failures are answered as 422 `validation_failed` by the edge middleware. Drop it.
 */
function withoutDecodeErrors(spec: Record<string, any>): Record<string, any> {
  const isDecodeError = (schema: any) => schema?.$ref === "#/components/schemas/HttpApiDecodeError"
  for (const path of Object.values<any>(spec.paths ?? {})) {
    for (const operation of Object.values<any>(path)) {
      const response = operation?.responses?.["400"]
      const schema = response?.content?.["application/json"]?.schema
      if (schema?.anyOf !== undefined) {
        const rest = schema.anyOf.filter((s: any) => !isDecodeError(s))
        response.content["application/json"].schema = rest.length === 1 ? rest[0] : { anyOf: rest }
        response.description = "invalid_json: the body is not parseable JSON"
      } else if (isDecodeError(schema)) {
        delete operation.responses["400"]
      }
    }
  }
  for (const name of ["HttpApiDecodeError", "Issue", "PropertyKey"]) delete spec.components?.schemas?.[name]
  return spec
}

const [e400, e401, e404, e409, e413, e415, e422, e429, e500, e503] = errorResponses

export class PaymentsApi extends HttpApi.make("payments")
  .add(TransactionsGroup)
  .add(MerchantsGroup)
  .add(ApiKeysGroup)
  .add(FraudGroup)
  .add(WebhooksGroup)
  .add(OperationsGroup)
  .addError(e400).addError(e401).addError(e404).addError(e409).addError(e413)
  .addError(e415).addError(e422).addError(e429).addError(e500).addError(e503)
  .annotateContext(
  OpenApi.annotations({
    transform: withoutDecodeErrors,
    title: "Payments API",
    version: "1.0.0",
    description: "Card payments for merchants: transactions, ledger, fraud review, webhooks and API keys. " +
      "Errors follow one envelope: {\"error\": {type, code, message, param?, request_id}}."
  })
) {}
