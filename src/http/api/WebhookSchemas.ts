import { Schema } from "effect"
import { eventTypes } from "../../domain/Payment.ts"
import { deliveryStatuses } from "../../domain/Webhook.ts"
import * as X from "./Examples.ts"
import { ListMeta, Merchant, OneOf, PageParams, RecordIdPath } from "./Schemas.ts"

const Timestamp = Schema.String.annotate({ description: "ISO 8601 UTC with milliseconds" })

export const DeliveryAttempt = Schema.Struct({
  attempt: Schema.Int,
  at: Timestamp,
  response_status: Schema.NullOr(Schema.Int),
  duration_ms: Schema.Int,
  error: Schema.NullOr(Schema.String),
  cut: Schema.Boolean.annotate({
    description:
      "The instance sending this attempt stopped before it recorded an answer (the endpoint may have received it); " +
      "the delivery was sent again at once as the next attempt, with the same event id. Not a failure: it schedules no retry."
  })
})

export const Delivery = Schema.Struct({
  id: Schema.String,
  event_id: Schema.String,
  event_type: Schema.Literals(eventTypes),
  url: Schema.String,
  status: Schema.Literals(deliveryStatuses),
  attempts: Schema.Array(DeliveryAttempt),
  next_attempt_at: Schema.NullOr(Timestamp),
  created_at: Timestamp,
  completed_at: Schema.NullOr(Timestamp)
}).annotate({ identifier: "WebhookDelivery", examples: [X.delivery] })
export const DeliveryEnvelope = Schema.Struct({ delivery: Delivery }).annotate({ examples: [{ delivery: X.delivery }] })
export const DeliveryList = Schema.Struct({ deliveries: Schema.Array(Delivery), meta: ListMeta }).annotate({
  examples: [{ deliveries: [X.delivery], meta: X.listMeta }]
})

export const DeliveryListParams = Schema.Struct({
  ...PageParams,
  status: Schema.optionalKey(OneOf(...deliveryStatuses))
})

export const DeliveryIdPath = RecordIdPath

export const WebhookStatus = Schema.Struct({
  url: Schema.NullOr(Schema.String),
  enabled: Schema.Boolean,
  success_rate: Schema.NullOr(Schema.Number),
  counts: Schema.Struct({ pending: Schema.Int, retrying: Schema.Int, succeeded: Schema.Int, failed: Schema.Int }),
  last_success_at: Schema.NullOr(Timestamp),
  last_failure_at: Schema.NullOr(Timestamp),
  consecutive_failures: Schema.Int
}).annotate({ identifier: "WebhookStatus", examples: [X.webhookStatus] })
export const WebhookStatusEnvelope = Schema.Struct({ webhook_status: WebhookStatus }).annotate({
  examples: [{ webhook_status: X.webhookStatus }]
})

export const WebhookTest = Schema.Struct({
  event_type: OneOf(...eventTypes)
}).annotate({ identifier: "WebhookTest", examples: [{ event_type: "payment.captured" }] })

export const SecretRotated = Schema.Struct({
  merchant: Merchant,
  previous_secret_expires_at: Timestamp
}).annotate({ identifier: "WebhookSecretRotated", examples: [X.secretRotated] })
