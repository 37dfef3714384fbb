import { Schema } from "effect"
import {
  HttpApi,
  HttpApiEndpoint,
  HttpApiGroup,
  HttpApiMiddleware,
  HttpApiSchema,
  HttpApiSecurity,
  OpenApi
} from "effect/http-api"
import { documentErrors } from "./ApiError.ts"
import * as S from "./Schemas.ts"
import * as W from "./WebhookSchemas.ts"

/**
 * The authenticated caller (the merchant that owns the API key, and the key itself) is recorded
 * on the request's state (`CurrentMerchant`, src/http/edge/RequestState.ts) rather than provided as a
 * service: a provided service would add a provide to every request.
 */
export { CurrentMerchant } from "../edge/RequestState.ts"

/**
 * Bearer authentication. Its refusals (`ApiError`, 401 and 429) render themselves like every
 * other error (`ApiError` is Respondable); the OpenAPI document lists them (`documentErrors`).
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
    description:
      "1 to 255 printable ASCII characters. The same key and request within IDEMPOTENCY_TTL (24 h) replays the first " +
      "response byte for byte (with Idempotent-Replayed: true); the same key with another request is 422 idempotency_key_reused.",
    examples: ["order-1042-attempt-1"]
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
    HttpApiEndpoint.get("list", "/transactions", { query: S.TransactionListParams, success: S.TransactionList })
      .annotateMerge(doc(
        "List payments",
        "The merchant's payments, newest first (ties by id), filtered by status, created_at range and amount range; paginated."
      ))
  )
  .add(
    HttpApiEndpoint.get("get", "/transactions/:id", { params: S.PaymentIdPath, success: S.TransactionEnvelope })
      .annotateMerge(doc("Retrieve a payment", "One payment of the merchant; another merchant's payment is 404."))
  )
  .add(
    HttpApiEndpoint.post("capture", "/transactions/:id/capture", {
      params: S.PaymentIdPath,
      payload: S.AmountBody,
      headers: IdempotencyHeaders,
      success: S.TransactionEnvelope
    }).annotateMerge(doc(
      "Capture an authorized payment",
      "Captures a manual-capture payment in status authorized whose fraud screen passed: the whole amount without a body, " +
        "or amount_cents (at most the authorized amount; the rest of the authorization is released). Other states are 409."
    ))
  )
  .add(
    HttpApiEndpoint.post("refund", "/transactions/:id/refund", {
      params: S.PaymentIdPath,
      payload: S.AmountBody,
      headers: IdempotencyHeaders,
      success: S.TransactionEnvelope
    }).annotateMerge(doc(
      "Refund a payment",
      "Refunds a captured or settled payment: the whole remainder without a body, or amount_cents. A refund reaching the " +
        "captured amount makes it refunded; a partial one raises refunded_amount_cents. Above the remainder is 422."
    ))
  )
  .add(
    HttpApiEndpoint.post("void", "/transactions/:id/void", {
      params: S.PaymentIdPath,
      payload: S.EmptyBody,
      headers: IdempotencyHeaders,
      success: S.TransactionEnvelope
    }).annotateMerge(
      doc(
        "Void an authorized payment",
        "Releases the authorization of a payment in status authorized; it becomes voided."
      )
    )
  )
  .add(
    HttpApiEndpoint.get("events", "/transactions/:id/events", { params: S.PaymentIdPath, success: S.EventList })
      .annotateMerge(
        doc(
          "List a payment's events",
          "Every event of the payment, oldest first; data is the snapshot the webhook carried."
        )
      )
  )
  .add(
    HttpApiEndpoint.get("ledger", "/transactions/:id/ledger", { params: S.PaymentIdPath, success: S.LedgerEntryList })
      .annotateMerge(doc(
        "List a payment's ledger entries",
        "The double-entry postings of the payment; the entries of one group_id balance (debits equal credits)."
      ))
  )
  .middleware(Authentication)
  .prefix("/api/v1")
  .annotateMerge(
    OpenApi.annotations({ description: "Payments: create, capture, refund, void; their events and ledger entries." })
  )
{}

export class MerchantsGroup extends HttpApiGroup.make("merchants")
  .add(
    HttpApiEndpoint.get("me", "/merchants/me", { success: S.MerchantEnvelope }).annotateMerge(
      doc("Retrieve the merchant", "The merchant of the API key, with its webhook_url and webhook signing secret.")
    )
  )
  .add(
    HttpApiEndpoint.patch("update", "/merchants/me", { payload: S.MerchantPatch, success: S.MerchantEnvelope })
      .annotateMerge(doc(
        "Update the merchant",
        "Changes name and/or webhook_url (null removes it). A webhook_url must be an absolute http(s) URL without credentials " +
          "whose host is not a private address literal or localhost; names are resolved at delivery time."
      ))
  )
  .add(
    HttpApiEndpoint.get("analytics", "/merchants/me/analytics", {
      query: S.AnalyticsParams,
      success: S.AnalyticsEnvelope
    }).annotateMerge(doc(
      "Payment analytics",
      "Volume, revenue (captured − refunded − fees) and the approval, fraud, refund and dispute rates per currency (and per period " +
        "with interval), over an optional created_at range. Count rates are also given over every currency; money is never added " +
        "across currencies, so the top-level refund_rate is null when the payments are in several."
    ))
  )
  .add(
    HttpApiEndpoint.get("balance", "/merchants/me/balance", { success: S.BalanceEnvelope }).annotateMerge(
      doc("Balances", "Pending, available and reserved balances per currency, in minor units, derived from the ledger.")
    )
  )
  .middleware(Authentication)
  .prefix("/api/v1")
  .annotateMerge(
    OpenApi.annotations({ description: "The merchant of the API key: profile, webhook URL, balances and analytics." })
  )
{}

export class ApiKeysGroup extends HttpApiGroup.make("apiKeys")
  .add(
    HttpApiEndpoint.get("list", "/api_keys", { query: S.PageOnlyParams, success: S.ApiKeyList }).annotateMerge(
      doc("List API keys", "The merchant's API keys, newest first, without their secrets.")
    )
  )
  .add(
    HttpApiEndpoint.post("create", "/api_keys", {
      payload: S.ApiKeyCreate,
      headers: IdempotencyHeaders,
      success: S.ApiKeyCreatedEnvelope.pipe(created)
    }).annotateMerge(doc("Create an API key", "A new active key; its full secret (key) appears in this response only."))
  )
  .add(
    HttpApiEndpoint.post("rotate", "/api_keys/:id/rotate", {
      params: S.PaymentIdPath,
      payload: S.EmptyBody,
      headers: IdempotencyHeaders,
      success: S.ApiKeyCreatedEnvelope.pipe(created)
    }).annotateMerge(doc(
      "Rotate an API key",
      "Issues a new key (full secret once) and revokes the old one at once; rotating a revoked key is 409."
    ))
  )
  .middleware(Authentication)
  .prefix("/api/v1")
  .annotateMerge(OpenApi.annotations({ description: "API keys of the merchant: list, create, rotate." }))
{}

export class FraudGroup extends HttpApiGroup.make("fraud")
  .add(
    HttpApiEndpoint.get("cases", "/fraud/cases", { query: S.FraudCaseListParams, success: S.FraudCaseList })
      .annotateMerge(
        doc("List fraud cases", "Cases opened by the fraud screen, newest first, filtered by status and priority.")
      )
  )
  .add(
    HttpApiEndpoint.post("review", "/fraud/cases/:id/review", {
      params: S.PaymentIdPath,
      payload: S.FraudReview,
      headers: IdempotencyHeaders,
      success: S.FraudCaseEnvelope
    }).annotateMerge(doc(
      "Review a fraud case",
      "Decides an open case: false_positive releases a held payment (captured if automatic), confirmed_fraud blocks it. " +
        "Only open cases can be reviewed (else 409)."
    ))
  )
  .add(
    HttpApiEndpoint.get("stats", "/fraud/stats", { success: S.FraudStatsEnvelope }).annotateMerge(
      doc(
        "Fraud statistics",
        "Case counts by status and priority, approved, screened and blocked counts (blocked amounts per currency), fraud rate " +
          "(blocked / approved), lost dispute rate, review precision and the same per model version."
      )
    )
  )
  .middleware(Authentication)
  .prefix("/api/v1")
  .annotateMerge(
    OpenApi.annotations({ description: "Fraud screening: cases held for review, reviews and statistics." })
  )
{}

export class WebhooksGroup extends HttpApiGroup.make("webhooks")
  .add(
    HttpApiEndpoint.get("deliveries", "/webhooks/deliveries", { query: W.DeliveryListParams, success: W.DeliveryList })
      .annotateMerge(
        doc("List webhook deliveries", "Deliveries to the merchant's webhook_url, newest first, with every attempt.")
      )
  )
  .add(
    HttpApiEndpoint.get("delivery", "/webhooks/deliveries/:id", {
      params: W.DeliveryIdPath,
      success: W.DeliveryEnvelope
    }).annotateMerge(
      doc("Retrieve a webhook delivery", "One delivery with its attempts, status and next attempt time.")
    )
  )
  .add(
    HttpApiEndpoint.post("retry", "/webhooks/deliveries/:id/retry", {
      params: W.DeliveryIdPath,
      payload: S.EmptyBody,
      headers: IdempotencyHeaders,
      success: W.DeliveryEnvelope.pipe(HttpApiSchema.status(202))
    }).annotateMerge(doc("Retry a failed delivery", "Sends a failed delivery again now (one more attempt)."))
  )
  .add(
    HttpApiEndpoint.get("status", "/webhooks/status", { success: W.WebhookStatusEnvelope }).annotateMerge(doc(
      "Webhook endpoint status",
      "The webhook_url, success rate over the last 24 hours, counts by delivery status and consecutive failures."
    ))
  )
  .add(
    HttpApiEndpoint.post("test", "/webhooks/test", {
      payload: W.WebhookTest,
      headers: IdempotencyHeaders,
      success: W.DeliveryEnvelope.pipe(HttpApiSchema.status(202))
    }).annotateMerge(doc(
      "Send a test event",
      "Sends a sample event of the given type to the webhook_url through the delivery pipeline; 409 without a webhook_url."
    ))
  )
  .add(
    HttpApiEndpoint.post("rotateSecret", "/webhooks/secret/rotate", {
      payload: S.EmptyBody,
      headers: IdempotencyHeaders,
      success: W.SecretRotated
    }).annotateMerge(doc(
      "Rotate the webhook signing secret",
      "Issues a new whsec_ signing secret; the previous one keeps signing beside it (a second v1=) for 24 hours."
    ))
  )
  .middleware(Authentication)
  .prefix("/api/v1")
  .annotateMerge(OpenApi.annotations({
    description:
      "Webhook deliveries: signed POSTs of payment events to the merchant's webhook_url, retried on a schedule."
  }))
{}

const Ok = Schema.Struct({ status: Schema.Literal("ok") }).annotate({ examples: [{ status: "ok" }] })

const NotificationReceived = Schema.Struct({
  received: Schema.Literal(true),
  event_id: Schema.String,
  /** What the notification did: a dispute opened or resolved, a refund failure recorded, nothing (already applied, or a kind the service does not act on). */
  outcome: Schema.Literals([
    "dispute_applied",
    "refund_failure_applied",
    "already_applied",
    "refund_failure_unmatched",
    "ignored"
  ])
}).annotate({ examples: [{ received: true, event_id: "evt_1Q2w3E4r5T6y", outcome: "dispute_applied" }] })

export class ProcessorGroup extends HttpApiGroup.make("processor")
  .add(
    HttpApiEndpoint.post("notification", "/processor/notifications", {
      headers: Schema.Struct({
        "stripe-signature": Schema.optional(
          Schema.String.annotate({
            description: "Stripe's signature of the raw body: t=<unix time>,v1=<HMAC-SHA256 hex>."
          })
        )
      }),
      success: NotificationReceived
    }).annotateMerge(doc(
      "Processor notification",
      "The card processor's webhook (ACQUIRER=stripe): verified with STRIPE_WEBHOOK_SECRET against the raw body, then applied. Disputes opened " +
        "and closed feed the dispute flow (idempotent on the processor's dispute id: a notification sent again changes nothing); a refund " +
        "that failed later is logged and counted for an operator. 401 when the signature does not verify, 404 when no processor is configured."
    ))
  )
  .prefix("/api/v1")
  .annotateMerge(
    OpenApi.annotations({
      description: "Inbound notifications from the card processor; signed by the processor, no API key."
    })
  )
{}

export class OperationsGroup extends HttpApiGroup.make("operations")
  .add(
    HttpApiEndpoint.get("healthz", "/healthz", { success: Ok }).annotateMerge(
      doc("Liveness", "Answers 200 while the process serves requests.")
    )
  )
  .add(
    HttpApiEndpoint.get("readyz", "/readyz", { success: Ok }).annotateMerge(
      doc("Readiness", "Answers 200 when the database is reachable, 503 service_unavailable otherwise.")
    )
  )
  .add(
    HttpApiEndpoint.get("metrics", "/metrics", {
      success: Schema.String.pipe(HttpApiSchema.asText({ contentType: "text/plain; version=0.0.4" })).annotate({
        examples: ["# TYPE http_requests_total counter\nhttp_requests_total{status=\"200\"} 42\n"]
      })
    }).annotateMerge(
      doc("Prometheus metrics", "Counters and histograms in the Prometheus text format (docs/operations.md).")
    )
  )
  .annotateMerge(
    OpenApi.annotations({ description: "Health, readiness and metrics for operators; no API key needed." })
  )
{}

/**
 * The OpenAPI document as the service answers: every operation lists the CONTRACT errors
 * (`documentErrors`), none of HttpApi's own decode error (decode failures are answered as 422
 * `validation_failed`), the bearer scheme is named in lower case, an empty body object is
 * described as one, and a body that may be null may also be left out (refund and capture
 * without a body mean "the whole amount").
 */
const isNotNull = (schema: any) => schema?.not?.type === "null" && Object.keys(schema).length === 1
const emptyObjectJsonSchema = { type: "object", maxProperties: 0, description: "An empty JSON object.", examples: [{}] }

function asServed(spec: Record<string, any>): Record<string, any> {
  documentErrors(spec)
  // HTTP auth scheme names are case-insensitive; OpenAPI tools and the IANA registry write "bearer".
  for (const scheme of Object.values<any>(spec.components?.securitySchemes ?? {})) {
    if (scheme?.type === "http" && typeof scheme.scheme === "string") scheme.scheme = scheme.scheme.toLowerCase()
  }
  for (const path of Object.values<any>(spec.paths ?? {})) {
    for (const operation of Object.values<any>(path)) {
      const schema = operation?.requestBody?.content?.["application/json"]?.schema
      if (schema?.anyOf?.some((member: any) => member?.type === "null") === true) operation.requestBody.required = false
      // An empty struct is "anything but null" to Effect 4's JSON Schema: say what it accepts.
      if (Array.isArray(schema?.anyOf)) {
        schema.anyOf = schema.anyOf.map((member: any) => (isNotNull(member) ? emptyObjectJsonSchema : member))
      }
    }
  }
  return spec
}

export class PaymentsApi extends HttpApi.make("payments")
  .add(TransactionsGroup)
  .add(MerchantsGroup)
  .add(ApiKeysGroup)
  .add(FraudGroup)
  .add(WebhooksGroup)
  .add(OperationsGroup)
  .add(ProcessorGroup)
  // Unknown fields are errors, so a typo never passes silently (CONTRACT section 1): in bodies
  // and in query strings alike (headers keep Schema's defaults: every request has undeclared ones).
  .annotate(HttpApi.PayloadParseOptions, { onExcessProperty: "error" })
  .annotate(HttpApi.QueryParseOptions, { onExcessProperty: "error" })
  .annotateMerge(OpenApi.annotations({
    transform: asServed,
    title: "Payments API",
    version: "1.0.0",
    // SPDX custom identifier: the package is private (package.json), not under an open licence.
    license: { name: "Proprietary", identifier: "LicenseRef-Proprietary" } as OpenApi.OpenAPISpecLicense,
    servers: [{ url: "/", description: "This service (the document is served by the API it describes)" }],
    description: "Card payments for merchants: transactions, ledger, fraud review, webhooks and API keys. " +
      "Errors follow one envelope: {\"error\": {type, code, message, param?, request_id}}."
  }))
{}
