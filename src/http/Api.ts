import { HttpApi, HttpApiEndpoint, HttpApiGroup, HttpApiMiddleware, HttpApiSchema, HttpApiSecurity, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { errorResponses } from "./ApiError.ts"
import * as S from "./Schemas.ts"
import * as W from "./WebhookSchemas.ts"

/**
 * The authenticated caller (the merchant that owns the API key, and the key itself) is recorded
 * on the request's state (`CurrentMerchant`, src/http/RequestState.ts) rather than provided as a
 * service: a provided service costs ~20 Effect steps on every request.
 */
export { CurrentMerchant } from "./RequestState.ts"

export class Authentication extends HttpApiMiddleware.Tag<Authentication>()("payments/Authentication", {
  failure: errorResponses[1],
  security: { bearer: HttpApiSecurity.bearer }
}) {}

const created = { status: 201 }

/** An operation's summary (a short title) and description, for the OpenAPI document and the docs page. */
const doc = (summary: string, description: string) => OpenApi.annotations({ summary, description })

/**
 * Every POST honours an idempotency key (CONTRACT section 5). Declared here, so the OpenAPI
 * document and the typed client know it; the idempotency layer reads and applies it.
 */
export const IdempotencyHeaders = Schema.Struct({
  "x-idempotency-key": Schema.optional(S.IdempotencyKeyText.annotations({
    description: "1 to 255 printable ASCII characters. The same key and request within IDEMPOTENCY_TTL (24 h) replays the first " +
      "response byte for byte (with Idempotent-Replayed: true); the same key with another request is 422 idempotency_key_reused.",
    examples: ["order-1042-attempt-1"]
  }))
})

export class TransactionsGroup extends HttpApiGroup.make("transactions")
  .add(
    HttpApiEndpoint.post("create", "/transactions")
      .setPayload(S.TransactionCreate)
      .setHeaders(IdempotencyHeaders)
      .addSuccess(S.TransactionEnvelope, created)
      .annotateContext(doc(
        "Create a payment",
        "Creates a payment and runs authorize → fraud screen → capture (capture_method automatic) in the request. " +
          "Answers 201 with the record as the flow left it: pending when the card network has not answered within the " +
          "request deadline (webhooks report the outcome). Honours X-Idempotency-Key or transaction.idempotency_key."
      ))
  )
  .add(
    HttpApiEndpoint.get("list", "/transactions")
      .setUrlParams(S.TransactionListParams)
      .addSuccess(S.TransactionList)
      .annotateContext(doc(
        "List payments",
        "The merchant's payments, newest first (ties by id), filtered by status, created_at range and amount range; paginated."
      ))
  )
  .add(
    HttpApiEndpoint.get("get", "/transactions/:id")
      .setPath(S.PaymentIdPath)
      .addSuccess(S.TransactionEnvelope)
      .annotateContext(doc("Retrieve a payment", "One payment of the merchant; another merchant's payment is 404."))
  )
  .add(
    HttpApiEndpoint.post("capture", "/transactions/:id/capture")
      .setPath(S.PaymentIdPath)
      .setPayload(S.AmountBody)
      .setHeaders(IdempotencyHeaders)
      .addSuccess(S.TransactionEnvelope)
      .annotateContext(doc(
        "Capture an authorized payment",
        "Captures a manual-capture payment in status authorized whose fraud screen passed: the whole amount without a body, " +
          "or amount_cents (at most the authorized amount; the rest of the authorization is released). Other states are 409."
      ))
  )
  .add(
    HttpApiEndpoint.post("refund", "/transactions/:id/refund")
      .setPath(S.PaymentIdPath)
      .setPayload(S.AmountBody)
      .setHeaders(IdempotencyHeaders)
      .addSuccess(S.TransactionEnvelope)
      .annotateContext(doc(
        "Refund a payment",
        "Refunds a captured or settled payment: the whole remainder without a body, or amount_cents. A refund reaching the " +
          "captured amount makes it refunded; a partial one raises refunded_amount_cents. Above the remainder is 422."
      ))
  )
  .add(
    HttpApiEndpoint.post("void", "/transactions/:id/void")
      .setPath(S.PaymentIdPath)
      .setPayload(S.EmptyBody)
      .setHeaders(IdempotencyHeaders)
      .addSuccess(S.TransactionEnvelope)
      .annotateContext(doc("Void an authorized payment", "Releases the authorization of a payment in status authorized; it becomes voided."))
  )
  .add(
    HttpApiEndpoint.get("events", "/transactions/:id/events")
      .setPath(S.PaymentIdPath)
      .addSuccess(S.EventList)
      .annotateContext(doc("List a payment's events", "Every event of the payment, oldest first; data is the snapshot the webhook carried."))
  )
  .add(
    HttpApiEndpoint.get("ledger", "/transactions/:id/ledger")
      .setPath(S.PaymentIdPath)
      .addSuccess(S.LedgerEntryList)
      .annotateContext(doc(
        "List a payment's ledger entries",
        "The double-entry postings of the payment; the entries of one group_id balance (debits equal credits)."
      ))
  )
  .middleware(Authentication)
  .prefix("/api/v1")
  .annotateContext(OpenApi.annotations({ description: "Payments: create, capture, refund, void; their events and ledger entries." }))
{}

export class MerchantsGroup extends HttpApiGroup.make("merchants")
  .add(
    HttpApiEndpoint.get("me", "/merchants/me")
      .addSuccess(S.MerchantEnvelope)
      .annotateContext(doc("Retrieve the merchant", "The merchant of the API key, with its webhook_url and webhook signing secret."))
  )
  .add(
    HttpApiEndpoint.patch("update", "/merchants/me")
      .setPayload(S.MerchantPatch)
      .addSuccess(S.MerchantEnvelope)
      .annotateContext(doc(
        "Update the merchant",
        "Changes name and/or webhook_url (null removes it). A webhook_url must be an absolute http(s) URL without credentials " +
          "whose host is not a private address literal or localhost; names are resolved at delivery time."
      ))
  )
  .add(
    HttpApiEndpoint.get("analytics", "/merchants/me/analytics")
      .setUrlParams(S.AnalyticsParams)
      .addSuccess(S.AnalyticsEnvelope)
      .annotateContext(doc(
        "Payment analytics",
        "Volume, revenue (captured − refunded − fees) and the approval, fraud, refund and dispute rates per currency (and per period " +
          "with interval), over an optional created_at range. Count rates are also given over every currency; money is never added " +
          "across currencies, so the top-level refund_rate is null when the payments are in several."
      ))
  )
  .add(
    HttpApiEndpoint.get("balance", "/merchants/me/balance")
      .addSuccess(S.BalanceEnvelope)
      .annotateContext(doc("Balances", "Pending, available and reserved balances per currency, in minor units, derived from the ledger."))
  )
  .middleware(Authentication)
  .prefix("/api/v1")
  .annotateContext(OpenApi.annotations({ description: "The merchant of the API key: profile, webhook URL, balances and analytics." }))
{}

export class ApiKeysGroup extends HttpApiGroup.make("apiKeys")
  .add(
    HttpApiEndpoint.get("list", "/api_keys")
      .setUrlParams(S.PageOnlyParams)
      .addSuccess(S.ApiKeyList)
      .annotateContext(doc("List API keys", "The merchant's API keys, newest first, without their secrets."))
  )
  .add(
    HttpApiEndpoint.post("create", "/api_keys")
      .setPayload(S.ApiKeyCreate)
      .setHeaders(IdempotencyHeaders)
      .addSuccess(S.ApiKeyCreatedEnvelope, created)
      .annotateContext(doc("Create an API key", "A new active key; its full secret (key) appears in this response only."))
  )
  .add(
    HttpApiEndpoint.post("rotate", "/api_keys/:id/rotate")
      .setPath(S.PaymentIdPath)
      .setPayload(S.EmptyBody)
      .setHeaders(IdempotencyHeaders)
      .addSuccess(S.ApiKeyCreatedEnvelope, created)
      .annotateContext(doc(
        "Rotate an API key",
        "Issues a new key (full secret once) and revokes the old one at once; rotating a revoked key is 409."
      ))
  )
  .middleware(Authentication)
  .prefix("/api/v1")
  .annotateContext(OpenApi.annotations({ description: "API keys of the merchant: list, create, rotate." }))
{}

export class FraudGroup extends HttpApiGroup.make("fraud")
  .add(
    HttpApiEndpoint.get("cases", "/fraud/cases")
      .setUrlParams(S.FraudCaseListParams)
      .addSuccess(S.FraudCaseList)
      .annotateContext(doc("List fraud cases", "Cases opened by the fraud screen, newest first, filtered by status and priority."))
  )
  .add(
    HttpApiEndpoint.post("review", "/fraud/cases/:id/review")
      .setPath(S.PaymentIdPath)
      .setPayload(S.FraudReview)
      .setHeaders(IdempotencyHeaders)
      .addSuccess(S.FraudCaseEnvelope)
      .annotateContext(doc(
        "Review a fraud case",
        "Decides an open case: false_positive releases a held payment (captured if automatic), confirmed_fraud blocks it. " +
          "Only open cases can be reviewed (else 409)."
      ))
  )
  .add(
    HttpApiEndpoint.get("stats", "/fraud/stats")
      .addSuccess(S.FraudStatsEnvelope)
      .annotateContext(doc("Fraud statistics", "Case counts by status and priority, approved, screened and blocked counts (blocked amounts per currency), fraud rate " +
        "(blocked / approved), lost dispute rate, review precision and the same per model version."))
  )
  .middleware(Authentication)
  .prefix("/api/v1")
  .annotateContext(OpenApi.annotations({ description: "Fraud screening: cases held for review, reviews and statistics." }))
{}

export class WebhooksGroup extends HttpApiGroup.make("webhooks")
  .add(
    HttpApiEndpoint.get("deliveries", "/webhooks/deliveries")
      .setUrlParams(W.DeliveryListParams)
      .addSuccess(W.DeliveryList)
      .annotateContext(doc("List webhook deliveries", "Deliveries to the merchant's webhook_url, newest first, with every attempt."))
  )
  .add(
    HttpApiEndpoint.get("delivery", "/webhooks/deliveries/:id")
      .setPath(W.DeliveryIdPath)
      .addSuccess(W.DeliveryEnvelope)
      .annotateContext(doc("Retrieve a webhook delivery", "One delivery with its attempts, status and next attempt time."))
  )
  .add(
    HttpApiEndpoint.post("retry", "/webhooks/deliveries/:id/retry")
      .setPath(W.DeliveryIdPath)
      .setPayload(S.EmptyBody)
      .setHeaders(IdempotencyHeaders)
      .addSuccess(W.DeliveryEnvelope, { status: 202 })
      .annotateContext(doc("Retry a failed delivery", "Sends a failed delivery again now (one more attempt)."))
  )
  .add(
    HttpApiEndpoint.get("status", "/webhooks/status")
      .addSuccess(W.WebhookStatusEnvelope)
      .annotateContext(doc(
        "Webhook endpoint status",
        "The webhook_url, success rate over the last 24 hours, counts by delivery status and consecutive failures."
      ))
  )
  .add(
    HttpApiEndpoint.post("test", "/webhooks/test")
      .setPayload(W.WebhookTest)
      .setHeaders(IdempotencyHeaders)
      .addSuccess(W.DeliveryEnvelope, { status: 202 })
      .annotateContext(doc(
        "Send a test event",
        "Sends a sample event of the given type to the webhook_url through the delivery pipeline; 409 without a webhook_url."
      ))
  )
  .add(
    HttpApiEndpoint.post("rotateSecret", "/webhooks/secret/rotate")
      .setPayload(S.EmptyBody)
      .setHeaders(IdempotencyHeaders)
      .addSuccess(W.SecretRotated)
      .annotateContext(doc(
        "Rotate the webhook signing secret",
        "Issues a new whsec_ signing secret; the previous one keeps signing beside it (a second v1=) for 24 hours."
      ))
  )
  .middleware(Authentication)
  .prefix("/api/v1")
  .annotateContext(OpenApi.annotations({
    description: "Webhook deliveries: signed POSTs of payment events to the merchant's webhook_url, retried on a schedule."
  }))
{}

const Ok = Schema.Struct({ status: Schema.Literal("ok") }).annotations({ examples: [{ status: "ok" }] })

export class OperationsGroup extends HttpApiGroup.make("operations")
  .add(
    HttpApiEndpoint.get("healthz", "/healthz")
      .addSuccess(Ok)
      .annotateContext(doc("Liveness", "Answers 200 while the process serves requests."))
  )
  .add(
    HttpApiEndpoint.get("readyz", "/readyz")
      .addSuccess(Ok)
      .annotateContext(doc("Readiness", "Answers 200 when the database is reachable, 503 service_unavailable otherwise."))
  )
  .add(
    HttpApiEndpoint.get("metrics", "/metrics")
      .addSuccess(
        Schema.String.pipe(HttpApiSchema.withEncoding({ kind: "Text", contentType: "text/plain; version=0.0.4" })).annotations({
          examples: ["# TYPE http_requests_total counter\nhttp_requests_total{status=\"200\"} 42\n"]
        })
      )
      .annotateContext(doc("Prometheus metrics", "Counters and histograms in the Prometheus text format (docs/operations.md)."))
  )
  .annotateContext(OpenApi.annotations({ description: "Health, readiness and metrics for operators; no API key needed." }))
{}

/**
 * HttpApi documents its own 400 `HttpApiDecodeError`, which this API never sends: decode
 * failures are answered as 422 `validation_failed` by the edge middleware. Drop it. And mark the
 * bodies that may be left out as optional.
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
        response.description = "invalid_json: the body is not parseable JSON (or not valid UTF-8)"
      } else if (isDecodeError(schema)) {
        delete operation.responses["400"]
      }
    }
  }
  for (const name of ["HttpApiDecodeError", "Issue", "PropertyKey"]) delete spec.components?.schemas?.[name]
  // A body that may be null may also be absent (refund and capture without a body mean "the whole amount").
  for (const path of Object.values<any>(spec.paths ?? {})) {
    for (const operation of Object.values<any>(path)) {
      const schema = operation?.requestBody?.content?.["application/json"]?.schema
      if (schema?.anyOf?.some((member: any) => member?.type === "null") === true) operation.requestBody.required = false
    }
  }
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
    // SPDX custom identifier: the package is private (package.json), not under an open licence.
    license: { name: "Proprietary", identifier: "LicenseRef-Proprietary" } as OpenApi.OpenAPISpecLicense,
    servers: [{ url: "/", description: "This service (the document is served by the API it describes)" }],
    description: "Card payments for merchants: transactions, ledger, fraud review, webhooks and API keys. " +
      "Errors follow one envelope: {\"error\": {type, code, message, param?, request_id}}."
  })
) {}
