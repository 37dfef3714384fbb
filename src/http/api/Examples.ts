// Example values for the OpenAPI document: one consistent story (a 100.00 USD payment, captured,
// then partly refunded). The schemas that carry them type-check them, and the redocly lint in
// `npm test` checks each against its JSON schema, so an example cannot drift from the API.

const at = "2026-11-22T04:21:42.700Z"
const later = "2026-11-22T04:21:43.120Z"

export const transaction = {
  id: "pay_8Jx2kQ4vN7rT1mWc",
  merchant_id: "mer_3Fh7sK2pL9qZ",
  status: "captured",
  amount_cents: 10_000,
  currency: "USD",
  captured_amount_cents: 10_000,
  refunded_amount_cents: 0,
  fee_cents: 320,
  card_brand: "visa",
  card_last_four: "4242",
  capture_method: "automatic",
  idempotency_key: "order-1042-attempt-1",
  metadata: { order_id: "1042" },
  fraud_score: 0.08,
  fraud_model_version: "trained-logistic-2",
  fraud_explanations: [
    { feature: "network_risk_logit", value: -2.944439, contribution: 0.659076 },
    { feature: "card_first_seen", value: 1, contribution: 0.221083 },
    { feature: "amount_log10", value: 2.004321, contribution: 0.051523 }
  ],
  fraud_case_id: null,
  failure_code: null,
  failure_message: null,
  dispute: null,
  processor_pending: null,
  created_at: at,
  updated_at: at
} as const

export const transactionCreate = {
  transaction: {
    amount_cents: 10_000,
    currency: "USD",
    card_token: "tok_visa",
    card_last_four: "4242",
    card_brand: "visa",
    metadata: { order_id: "1042" }
  }
} as const

export const listMeta = { page: 1, per_page: 20, total_count: 1, total_pages: 1, has_more: false } as const

export const event = {
  id: "evt_5Tn8wQ1zR4yB",
  type: "payment.captured",
  created_at: at,
  data: {
    id: transaction.id,
    merchant_id: transaction.merchant_id,
    status: "captured",
    amount_cents: 10_000,
    currency: "USD",
    captured_amount_cents: 10_000,
    refunded_amount_cents: 0,
    fraud_score: 0.08,
    failure_code: null,
    dispute: null
  }
} as const

export const ledgerEntry = {
  id: "le_7Gd2mV9xK1pS",
  transaction_id: transaction.id,
  group_id: "le_7Gd2mV9xK1pR",
  account: "merchant_pending",
  direction: "credit",
  amount_cents: 10_000,
  currency: "USD",
  created_at: at
} as const

export const merchant = {
  id: transaction.merchant_id,
  name: "Acme Books",
  webhook_url: "https://acme.example.com/hooks/payments",
  webhook_secret: "whsec_Zk3pQ8vT2nW5yR7mB4cX",
  created_at: at,
  updated_at: at
} as const

export const balance = { currency: "USD", pending: 9_680, available: 0, reserved: 0 } as const

export const analytics = {
  from: "2026-11-01T00:00:00.000Z",
  to: "2026-11-30T23:59:59.999Z",
  transaction_count: 1,
  approval_rate: 1,
  fraud_rate: 0,
  refund_rate: 0,
  dispute_rate: 0,
  by_currency: [
    {
      currency: "USD",
      transaction_count: 1,
      volume_cents: 10_000,
      captured_cents: 10_000,
      refunded_cents: 0,
      fees_cents: 320,
      revenue_cents: 9_680,
      approval_rate: 1,
      fraud_rate: 0,
      refund_rate: 0,
      dispute_rate: 0
    }
  ],
  interval: "day",
  series: [
    {
      currency: "USD",
      period_start: "2026-11-22T00:00:00.000Z",
      transaction_count: 1,
      volume_cents: 10_000,
      captured_cents: 10_000,
      refunded_cents: 0,
      fees_cents: 320,
      revenue_cents: 9_680,
      approval_rate: 1,
      fraud_rate: 0,
      refund_rate: 0,
      dispute_rate: 0
    }
  ]
} as const

export const apiKeyCreated = {
  id: "key_4Qw9eR2tY6uI",
  name: "checkout server",
  key: "sk_live_9fK2mP7xQ4vN8rT1wC5zB3hJ6gD0sL",
  prefix: "sk_live_9fK2",
  last_four: "s0sL",
  status: "active",
  created_at: at
} as const

export const apiKey = {
  id: apiKeyCreated.id,
  name: apiKeyCreated.name,
  prefix: apiKeyCreated.prefix,
  last_four: apiKeyCreated.last_four,
  status: "active",
  created_at: at,
  last_used_at: later,
  revoked_at: null
} as const

export const fraudCase = {
  id: "fc_2Lm8nB4vC7xZ",
  transaction_id: transaction.id,
  status: "open",
  priority: "medium",
  risk_score: 0.6399160967377341,
  model_version: "trained-logistic-2",
  base_value: -4.157939,
  model_output: 0.575,
  explanations: [
    { feature: "network_risk_logit", value: 4.119037, contribution: 5.019212 },
    { feature: "card_first_seen", value: 1, contribution: 0.221083 },
    { feature: "amount_log10", value: 2.004321, contribution: -0.507356 }
  ],
  notes: null,
  reviewed_at: null,
  created_at: at
} as const

export const fraudReview = { status: "false_positive", notes: "Customer confirmed the order by phone." } as const

export const fraudStats = {
  cases: {
    total: 3,
    by_status: { open: 1, confirmed_fraud: 1, false_positive: 1 },
    by_priority: { low: 0, medium: 2, high: 1, critical: 0 }
  },
  approved_count: 120,
  screened_count: 120,
  blocked: { count: 2, by_currency: [{ currency: "USD", count: 2, amount_cents: 45_000 }] },
  lost_dispute_count: 0,
  fraud_rate: 0.016667,
  lost_dispute_rate: 0,
  review_precision: 0.5,
  score_histogram: [
    { from: 0, to: 0.1, count: 110 },
    { from: 0.1, to: 0.2, count: 4 },
    { from: 0.2, to: 0.3, count: 1 },
    { from: 0.3, to: 0.4, count: 1 },
    { from: 0.4, to: 0.5, count: 1 },
    { from: 0.5, to: 0.6, count: 1 },
    { from: 0.6, to: 0.7, count: 0 },
    { from: 0.7, to: 0.8, count: 0 },
    { from: 0.8, to: 0.9, count: 1 },
    { from: 0.9, to: 1, count: 1 }
  ],
  by_model_version: [
    {
      model_version: "trained-logistic-2",
      screened_count: 120,
      blocked_count: 2,
      fraud_rate: 0.016667,
      cases: { total: 3, by_status: { open: 1, confirmed_fraud: 1, false_positive: 1 } },
      review_precision: 0.5
    }
  ]
} as const

export const delivery = {
  id: "whd_6Yh3jK8lP2qW",
  event_id: event.id,
  event_type: "payment.captured",
  url: merchant.webhook_url,
  status: "succeeded",
  attempts: [{ attempt: 1, at: later, response_status: 200, duration_ms: 84, error: null, cut: false }],
  next_attempt_at: null,
  created_at: at,
  completed_at: later
} as const

export const webhookStatus = {
  url: merchant.webhook_url,
  enabled: true,
  success_rate: 0.98,
  counts: { pending: 0, retrying: 1, succeeded: 49, failed: 0 },
  last_success_at: later,
  last_failure_at: at,
  consecutive_failures: 0
} as const

export const secretRotated = { merchant, previous_secret_expires_at: "2026-11-23T04:21:42.700Z" } as const

export const error = {
  error: {
    type: "invalid_request_error",
    code: "validation_failed",
    message: `transaction.capture_method must be one of "automatic", "manual".`,
    param: "transaction.capture_method",
    request_id: "req_0Vb7nM3kL9jH"
  }
} as const
