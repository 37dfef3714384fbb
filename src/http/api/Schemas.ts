import { Schema, SchemaAST } from "effect"
import { disputeReasons } from "../../domain/Dispute.ts"
import { maximumAmountCents, minimumAmountCents, supportedCurrencies } from "../../domain/Money.ts"
import { cardBrands, eventTypes, paymentStatuses } from "../../domain/Payment.ts"
import * as X from "./Examples.ts"

/**
 * Unknown fields are errors, so a typo never passes silently (CONTRACT section 1): the API sets
 * `onExcessProperty: "error"` for every payload and query (src/http/Api.ts).
 */

/**
 * The rule of an input field in a merchant's words (the 422 says `<param> <rule>.`). It stands
 * for every inner message, so a string where a number belongs, a number that is not an integer
 * and one out of range all answer with the same sentence, never the parser's `Expected ...`.
 * Effect 4's own `message` annotation does not override the messages of a type mismatch or a
 * failed check, so the rule is an annotation of ours that src/http/RequestErrors.ts looks up
 * along the failing field's path.
 */
export const ruleAnnotation = "paymentsRule"
export const rule = (message: string) => ({ [ruleAnnotation]: message }) as Schema.Annotations.Annotations
const msg = rule

/** The rule a schema node carries, if any. */
export const ruleOf = (ast: SchemaAST.AST): string | undefined => {
  const value = (SchemaAST.resolve(ast) as Record<string, unknown> | undefined)?.[ruleAnnotation]
  return typeof value === "string" ? value : undefined
}

const quoted = (values: ReadonlyArray<string>) => values.map((value) => `"${value}"`).join(", ")

/** A closed set of strings; its 422 lists every allowed value. */
export const OneOf = <const Values extends readonly [string, ...Array<string>]>(...values: Values) =>
  Schema.Literals(values).annotate(rule(`must be one of ${quoted(values)}`))

// Text and ids the database can always store -----------------------------------------------------

// The control characters are what these patterns are for.
// eslint-disable-next-line no-control-regex
const controlCharacters = /[\u0000-\u001f\u007f]/
// eslint-disable-next-line no-control-regex
const controlCharactersButLineBreaks = /[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f]/
const unpairedSurrogate = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/

/** Why `text` cannot be stored as given, or null when it can. */
export const unsafeTextReason = (text: string, options: { readonly lineBreaks?: boolean } = {}): string | null => {
  if ((options.lineBreaks === true ? controlCharactersButLineBreaks : controlCharacters).test(text)) {
    return options.lineBreaks === true
      ? "must not contain control characters other than tab and line breaks"
      : "must not contain control characters"
  }
  if (unpairedSurrogate.test(text)) return "must be valid Unicode text (it contains an unpaired surrogate)"
  return null
}

/** A string of `minLength` to `maxLength` characters without control characters or broken Unicode. */
export const Text = (minLength: number, maxLength: number, options: { readonly lineBreaks?: boolean } = {}) =>
  Schema.String.check(Schema.makeFilter((text: string) => {
    if (text.length < minLength || text.length > maxLength) {
      return minLength === 0
        ? `must be at most ${maxLength} characters`
        : `must be ${minLength} to ${maxLength} characters`
    }
    return unsafeTextReason(text, options) ?? undefined
  }))

/** The message a malformed record id in a path carries; the edge answers it 404 (no such record can exist). */
export const malformedIdMessage = "is not a well-formed id"
const RecordId = Schema.String.check(Schema.isPattern(/^[A-Za-z0-9_]{1,100}$/)).annotate(msg(malformedIdMessage))
export const RecordIdPath = Schema.Struct({ id: RecordId })

export const AmountCents = Schema.Int.check(
  Schema.isBetween({ minimum: minimumAmountCents, maximum: maximumAmountCents })
).annotate(
  msg(`must be an integer number of cents between ${minimumAmountCents} and ${maximumAmountCents}`)
)

export const IdempotencyKeyText = Schema.String.check(Schema.isPattern(/^[\x20-\x7e]{1,255}$/)).annotate(
  msg("must be 1 to 255 printable ASCII characters")
)

/** Keys that would change a plain object's prototype or shadow its methods when decoded. */
const reservedKeys = new Set(["__proto__", "constructor", "prototype"])

export const metadataLimits = { maxKeys: 50, maxKeyLength: 40, maxValueLength: 500 } as const

type MetadataRecord = { readonly [key: string]: string }

/** A key as it may be quoted back: only when it is printable, and cut at the key length limit. */
const quoteKey = (key: string) =>
  unsafeTextReason(key) !== null
    ? ""
    : ` ("${key.length > metadataLimits.maxKeyLength ? `${key.slice(0, metadataLimits.maxKeyLength)}…` : key}")`

/**
 * Metadata is checked on the object as the client sent it, before anything copies it: a record
 * schema would drop a `__proto__` key silently while copying, and would report a bad key as an
 * unknown field without saying the rule. A key's problem names `metadata`; a value's names its key.
 */
const metadataProblem = (
  input: unknown
): string | { readonly path: ReadonlyArray<string>; readonly issue: string } | undefined => {
  const { maxKeyLength, maxKeys, maxValueLength } = metadataLimits
  if (typeof input !== "object" || input === null || Array.isArray(input)) {
    return "must be an object of string keys and string values"
  }
  const keys = Object.keys(input)
  if (keys.length > maxKeys) return `must have at most ${maxKeys} keys (${keys.length} were sent)`
  for (const key of keys) {
    const problem = key.length === 0
      ? "keys must not be empty"
      : key.length > maxKeyLength
      ? `keys are at most ${maxKeyLength} characters; one has ${key.length}${quoteKey(key)}`
      : unsafeTextReason(key) !== null
      ? "keys must not contain control characters or broken Unicode"
      : reservedKeys.has(key)
      ? `keys must not be ${quoted([...reservedKeys])}`
      : null
    if (problem !== null) return problem
    const value: unknown = (input as Record<string, unknown>)[key]
    const valueProblem = typeof value !== "string" || value.length > maxValueLength
      ? `must be a string of at most ${maxValueLength} characters`
      : unsafeTextReason(value, { lineBreaks: true })
    if (valueProblem !== null) return { path: [key], issue: valueProblem }
  }
  return undefined
}

export const Metadata = Schema.Unknown.check(Schema.makeFilter(metadataProblem)).pipe(
  Schema.refine((input): input is MetadataRecord => metadataProblem(input) === undefined),
  Schema.annotate({
    identifier: "Metadata",
    description: `At most ${metadataLimits.maxKeys} keys of 1 to ${metadataLimits.maxKeyLength} characters, ` +
      `each with a string value of at most ${metadataLimits.maxValueLength} characters.`
  })
)

export const TransactionCreateFields = Schema.Struct({
  amount_cents: AmountCents,
  currency: OneOf(...supportedCurrencies),
  card_token: Schema.String.check(Schema.isPattern(/^tok_[A-Za-z0-9_]{1,64}$/)).annotate(
    msg("must be 'tok_' followed by 1 to 64 letters, digits or underscores")
  ),
  card_last_four: Schema.String.check(Schema.isPattern(/^\d{4}$/)).annotate(msg("must be exactly 4 digits")),
  card_brand: OneOf(...cardBrands),
  idempotency_key: Schema.optionalKey(IdempotencyKeyText),
  metadata: Schema.optionalKey(Metadata),
  capture_method: Schema.optionalKey(OneOf("automatic", "manual"))
})

export const TransactionCreate = Schema.Struct({ transaction: TransactionCreateFields }).annotate({
  identifier: "TransactionCreate",
  examples: [X.transactionCreate as any]
})

/**
 * Bodies that may be left out: an endpoint declares the object and `Schema.Null`, and the HttpApi
 * decodes a request without a body as `null` (it does so only when a payload schema is `Null`).
 */
const orNoBody = <S extends Schema.Top>(schema: S) => [schema, Schema.Null] as const

/** Optional body of capture and refund; no body (or null) means "the whole amount". */
export const AmountFields = Schema.Struct({ amount_cents: Schema.optionalKey(AmountCents) }).annotate({
  examples: [{ amount_cents: 2_500 }, {}]
})
export const AmountBody = orNoBody(AmountFields)

/**
 * A body with no fields (void, rotate): the first field present is refused by name (the API's
 * `onExcessProperty: "error"` does so too; the check keeps the rule with the schema).
 */
export const EmptyObject = Schema.Struct({}).check(Schema.makeFilter((body: object) => {
  if (typeof body !== "object" || Array.isArray(body)) return "must be an empty JSON object"
  const field = Object.keys(body)[0]
  return field === undefined ? undefined : { path: [field], issue: "is not a recognised field" }
})).annotate({ description: "No body, null, or an empty JSON object.", examples: [{}] })
export const EmptyBody = orNoBody(EmptyObject)

const Timestamp = Schema.String.annotate({ description: "ISO 8601 UTC with milliseconds" })

/** One feature's exact contribution to the model output (log-odds), docs/fraud-model.md. */
export const Explanation = Schema.Struct({ feature: Schema.String, value: Schema.Number, contribution: Schema.Number })
  .annotate({ identifier: "FraudExplanation" })
export const Dispute = Schema.Struct({
  status: Schema.Literals(["open", "won", "lost"]),
  reason: Schema.Literals(disputeReasons),
  amount_cents: Schema.Int.annotate({ description: "Disputed amount, held in the reserved balance while open" }),
  opened_at: Timestamp,
  resolved_at: Schema.NullOr(Timestamp)
}).annotate({
  identifier: "Dispute",
  description: "A chargeback the card network opened on the payment (at most one); null when there is none"
})

export const ProcessorPending = Schema.Struct({
  operation: Schema.Literals(["capture", "refund", "cancel"]).annotate({
    description: "capture, refund, or cancel of the authorization (a fraud-blocked, voided or unanswered payment's)"
  }),
  outcome: Schema.Literals(["owed", "unknown"]).annotate({
    description:
      "owed: booked here and being sent (a cancel); unknown: asked for, and no answer came within ACQUIRER_TIMEOUT " +
      "(a capture or refund is not in the ledger until the processor answers)"
  }),
  amount_cents: Schema.Int.annotate({
    description: "the capture's total, the refund's amount, or the amount held for a cancel"
  }),
  since: Timestamp
}).annotate({ identifier: "ProcessorPending" })

export const Transaction = Schema.Struct({
  id: Schema.String,
  merchant_id: Schema.String,
  status: Schema.Literals(paymentStatuses),
  amount_cents: Schema.Int,
  currency: Schema.String,
  captured_amount_cents: Schema.Int,
  refunded_amount_cents: Schema.Int,
  fee_cents: Schema.Int,
  card_brand: Schema.String,
  card_last_four: Schema.String,
  capture_method: Schema.Literals(["automatic", "manual"]),
  idempotency_key: Schema.NullOr(Schema.String),
  metadata: Schema.Record(Schema.String, Schema.String),
  fraud_score: Schema.NullOr(Schema.Number).annotate({
    description:
      "the fraud model's score, 0..1, not rounded: the sigmoid of the model output (a held or blocked payment's " +
      "fraud case has it as risk_score, with model_output); the thresholds compare this number. Null before screening"
  }),
  fraud_model_version: Schema.NullOr(Schema.String).annotate({
    description: "the fraud model that screened the payment"
  }),
  fraud_explanations: Schema.NullOr(Schema.Array(Explanation)).annotate({
    description:
      "the screening's largest contributions (at most 5, largest |contribution| first); the fraud case has them all"
  }),
  fraud_case_id: Schema.NullOr(Schema.String),
  failure_code: Schema.NullOr(Schema.String),
  failure_message: Schema.NullOr(Schema.String),
  dispute: Schema.NullOr(Dispute),
  processor_pending: Schema.NullOr(ProcessorPending).annotate({
    description:
      "an operation the card processor has not confirmed yet (only with a remote processor, ACQUIRER=stripe); " +
      "null when the processor knows everything the record says. See docs/api.md, \"Unknown outcomes at the processor\""
  }),
  created_at: Timestamp,
  updated_at: Timestamp
}).annotate({ identifier: "Transaction", examples: [X.transaction as any] })

export const TransactionEnvelope = Schema.Struct({ transaction: Transaction }).annotate({
  examples: [{ transaction: X.transaction as any }]
})
export const ListMeta = Schema.Struct({
  page: Schema.Int,
  per_page: Schema.Int,
  total_count: Schema.Int,
  total_pages: Schema.Int,
  has_more: Schema.Boolean
})

const PageParam = Schema.NumberFromString.check(Schema.isInt(), Schema.isGreaterThanOrEqualTo(1)).annotate(
  msg("must be an integer of at least 1")
)
const PerPageParam = Schema.NumberFromString.check(Schema.isInt(), Schema.isBetween({ minimum: 1, maximum: 100 }))
  .annotate(
    msg("must be an integer between 1 and 100")
  )
const IsoDateParam = Schema.String.check(
  Schema.makeFilter((text: string) =>
    /^\d{4}-\d{2}-\d{2}([T ][\d:.]+(Z|[+-]\d{2}:?\d{2})?)?$/.test(text) && !Number.isNaN(Date.parse(text))
  )
).annotate(msg("must be an ISO 8601 date or date-time"))
const AmountParam = Schema.NumberFromString.check(
  Schema.isInt(),
  Schema.isBetween({ minimum: 0, maximum: maximumAmountCents })
).annotate(
  msg(`must be an integer number of cents between 0 and ${maximumAmountCents}`)
)

export const PageParams = {
  page: Schema.optionalKey(PageParam),
  per_page: Schema.optionalKey(PerPageParam)
}

export const TransactionListParams = Schema.Struct({
  ...PageParams,
  status: Schema.optionalKey(OneOf(...paymentStatuses)),
  from: Schema.optionalKey(IsoDateParam),
  to: Schema.optionalKey(IsoDateParam),
  min_amount: Schema.optionalKey(AmountParam),
  max_amount: Schema.optionalKey(AmountParam)
})

export const TransactionList = Schema.Struct({ transactions: Schema.Array(Transaction), meta: ListMeta }).annotate({
  examples: [{ transactions: [X.transaction], meta: X.listMeta }]
})

export const Event = Schema.Struct({
  id: Schema.String,
  type: Schema.Literals(eventTypes),
  created_at: Timestamp,
  data: Schema.Struct({
    id: Schema.String,
    merchant_id: Schema.String,
    status: Schema.String,
    amount_cents: Schema.Int,
    currency: Schema.String,
    captured_amount_cents: Schema.Int,
    refunded_amount_cents: Schema.Int,
    fraud_score: Schema.NullOr(Schema.Number),
    failure_code: Schema.NullOr(Schema.String),
    dispute: Schema.NullOr(Dispute)
  })
}).annotate({ identifier: "Event", examples: [X.event] })
export const EventList = Schema.Struct({ events: Schema.Array(Event) }).annotate({ examples: [{ events: [X.event] }] })

export const LedgerEntry = Schema.Struct({
  id: Schema.String,
  transaction_id: Schema.String,
  group_id: Schema.String,
  account: Schema.String,
  direction: Schema.Literals(["debit", "credit"]),
  amount_cents: Schema.Int,
  currency: Schema.String,
  created_at: Timestamp
}).annotate({ identifier: "LedgerEntry", examples: [X.ledgerEntry] })
export const LedgerEntryList = Schema.Struct({ ledger_entries: Schema.Array(LedgerEntry) }).annotate({
  examples: [{ ledger_entries: [X.ledgerEntry] }]
})

export const PaymentIdPath = RecordIdPath

// Merchants ------------------------------------------------------------------------------------

export const Merchant = Schema.Struct({
  id: Schema.String,
  name: Schema.String,
  webhook_url: Schema.NullOr(Schema.String),
  webhook_secret: Schema.NullOr(Schema.String).annotate({
    description:
      "The webhook signing secret (`whsec_...`); null when it was sealed under an encryption key this service " +
      "no longer has: rotate it (POST /api/v1/webhooks/secret/rotate)"
  }),
  created_at: Timestamp,
  updated_at: Timestamp
}).annotate({ identifier: "Merchant", examples: [X.merchant] })
export const MerchantEnvelope = Schema.Struct({ merchant: Merchant }).annotate({ examples: [{ merchant: X.merchant }] })

export const MerchantName = Text(1, 200).annotate(
  msg("must be a string of 1 to 200 characters, without control characters")
)
export const WebhookUrl = Text(1, 2048).annotate(
  msg("must be an absolute http or https URL of at most 2048 characters without control characters, or null")
)

export const MerchantPatch = Schema.Struct({
  name: Schema.optionalKey(MerchantName),
  webhook_url: Schema.optionalKey(Schema.NullOr(WebhookUrl))
}).annotate({
  identifier: "MerchantPatch",
  examples: [{ webhook_url: X.merchant.webhook_url }, { name: "Acme Books Ltd" }]
})

export const Balance = Schema.Struct({
  currency: Schema.String,
  pending: Schema.Int,
  available: Schema.Int,
  reserved: Schema.Int
})
export const BalanceEnvelope = Schema.Struct({ balances: Schema.Array(Balance) }).annotate({
  examples: [{ balances: [X.balance] }]
})

export const AnalyticsInterval = Schema.Literals(["hour", "day", "week"]).annotate(
  msg("must be 'hour', 'day' or 'week'")
)
export const AnalyticsParams = Schema.Struct({
  from: Schema.optionalKey(IsoDateParam),
  to: Schema.optionalKey(IsoDateParam),
  interval: Schema.optionalKey(AnalyticsInterval)
})
/** The rates' definitions are written once, in docs/api.md ("Rates") and src/services/Analytics.ts. */
const Rate = (description: string) =>
  Schema.NullOr(Schema.Number).annotate({ description: `${description}; null when nothing to divide by` })
const approvalRate = Rate("approved / decided by the card network (payments, not money)")
const fraudRate = Rate("blocked by the fraud screening / approved by the card network (payments)")
const disputeRate = Rate("disputed / payments with captured money")
const currencyFigures = {
  currency: Schema.String,
  transaction_count: Schema.Int,
  volume_cents: Schema.Int.annotate({ description: "amount of every payment, in this currency's minor units" }),
  captured_cents: Schema.Int,
  refunded_cents: Schema.Int,
  fees_cents: Schema.Int,
  revenue_cents: Schema.Int.annotate({ description: "captured − refunded − fees" }),
  approval_rate: approvalRate,
  fraud_rate: fraudRate,
  refund_rate: Rate("refunded_cents / captured_cents, in this currency"),
  dispute_rate: disputeRate
}
export const AnalyticsPeriod = Schema.Struct({
  ...currencyFigures,
  period_start: Timestamp.annotate({ description: "start of the UTC hour, day or ISO week (Monday)" })
}).annotate({ identifier: "AnalyticsPeriod" })
export const CurrencyAnalytics = Schema.Struct(currencyFigures).annotate({ identifier: "CurrencyAnalytics" })
export const Analytics = Schema.Struct({
  from: Schema.NullOr(Schema.String),
  to: Schema.NullOr(Schema.String),
  transaction_count: Schema.Int.annotate({ description: "payments of every currency" }),
  approval_rate: approvalRate.annotate({
    description: "approved / decided by the card network, payments of every currency"
  }),
  fraud_rate: fraudRate.annotate({ description: "blocked / approved, payments of every currency" }),
  refund_rate: Rate("refunded_cents / captured_cents of the window's only currency").annotate({
    description:
      "refunded_cents / captured_cents when the window's payments are in one currency; null when they are in several " +
      "(money of different currencies is never added): read each currency's refund_rate in by_currency"
  }),
  dispute_rate: disputeRate.annotate({ description: "disputed / payments with captured money, of every currency" }),
  by_currency: Schema.Array(CurrencyAnalytics),
  interval: Schema.NullOr(AnalyticsInterval),
  series: Schema.Array(AnalyticsPeriod).annotate({
    description:
      "with `interval`: one entry per currency and period that has payments, by currency then period (empty without it)"
  })
})
export const AnalyticsEnvelope = Schema.Struct({ analytics: Analytics }).annotate({
  examples: [{ analytics: X.analytics }]
})

// API keys -------------------------------------------------------------------------------------

export const ApiKeyCreate = Schema.Struct({
  name: Text(1, 100).annotate(msg("must be a string of 1 to 100 characters, without control characters"))
}).annotate({ identifier: "ApiKeyCreate", examples: [{ name: "checkout server" }] })

export const ApiKeyCreated = Schema.Struct({
  id: Schema.String,
  name: Schema.String,
  key: Schema.String,
  prefix: Schema.String,
  last_four: Schema.String,
  status: Schema.Literals(["active", "revoked"]),
  created_at: Timestamp
}).annotate({ identifier: "ApiKeyCreated", examples: [X.apiKeyCreated] })
export const ApiKeyCreatedEnvelope = Schema.Struct({ api_key: ApiKeyCreated }).annotate({
  examples: [{ api_key: X.apiKeyCreated }]
})

export const ApiKey = Schema.Struct({
  id: Schema.String,
  name: Schema.String,
  prefix: Schema.String,
  last_four: Schema.String,
  status: Schema.Literals(["active", "revoked"]),
  created_at: Timestamp,
  last_used_at: Schema.NullOr(Timestamp),
  revoked_at: Schema.NullOr(Timestamp)
}).annotate({ identifier: "ApiKey", examples: [X.apiKey] })
export const ApiKeyList = Schema.Struct({ api_keys: Schema.Array(ApiKey), meta: ListMeta }).annotate({
  examples: [{ api_keys: [X.apiKey], meta: X.listMeta }]
})
export const PageOnlyParams = Schema.Struct(PageParams)

// Fraud ----------------------------------------------------------------------------------------

export const FraudCase = Schema.Struct({
  id: Schema.String,
  transaction_id: Schema.String,
  status: Schema.Literals(["open", "confirmed_fraud", "false_positive"]),
  priority: Schema.Literals(["low", "medium", "high", "critical"]),
  risk_score: Schema.Number.annotate({
    description: "the score, not rounded: exactly 1 / (1 + Math.exp(-model_output)) in double precision; " +
      "the transaction's fraud_score is the same number and the thresholds compare it"
  }),
  model_version: Schema.String,
  base_value: Schema.NullOr(Schema.Number).annotate({
    description: "the model's log-odds at the training mean (6 decimals)"
  }),
  model_output: Schema.NullOr(Schema.Number).annotate({
    description:
      "the model output, log-odds of fraud (6 decimals): base_value + the sum of the contributions, exactly in decimal"
  }),
  explanations: Schema.Array(Explanation).annotate({ description: "one per feature, largest |contribution| first" }),
  notes: Schema.NullOr(Schema.String),
  reviewed_at: Schema.NullOr(Timestamp),
  created_at: Timestamp
}).annotate({ identifier: "FraudCase", examples: [X.fraudCase] })
export const FraudCaseEnvelope = Schema.Struct({ fraud_case: FraudCase }).annotate({
  examples: [{ fraud_case: X.fraudCase }]
})
export const FraudCaseList = Schema.Struct({ fraud_cases: Schema.Array(FraudCase), meta: ListMeta }).annotate({
  examples: [{ fraud_cases: [X.fraudCase], meta: X.listMeta }]
})
export const FraudCaseListParams = Schema.Struct({
  ...PageParams,
  status: Schema.optionalKey(OneOf("open", "confirmed_fraud", "false_positive")),
  priority: Schema.optionalKey(OneOf("low", "medium", "high", "critical"))
})
export const FraudStats = Schema.Struct({
  cases: Schema.Struct({
    total: Schema.Int,
    by_status: Schema.Struct({ open: Schema.Int, confirmed_fraud: Schema.Int, false_positive: Schema.Int }),
    by_priority: Schema.Struct({ low: Schema.Int, medium: Schema.Int, high: Schema.Int, critical: Schema.Int })
  }),
  approved_count: Schema.Int.annotate({ description: "payments the card network approved (fraud_rate's denominator)" }),
  screened_count: Schema.Int,
  blocked: Schema.Struct({
    count: Schema.Int,
    by_currency: Schema.Array(Schema.Struct({ currency: Schema.String, count: Schema.Int, amount_cents: Schema.Int }))
  }),
  lost_dispute_count: Schema.Int.annotate({
    description: "screened payments whose dispute was lost (fraud the screening let through)"
  }),
  fraud_rate: fraudRate,
  lost_dispute_rate: Rate("lost disputes / approved by the card network (payments): fraud the screening let through"),
  review_precision: Schema.NullOr(Schema.Number).annotate({
    description: "confirmed_fraud / reviewed cases: how often a held or blocked payment was really fraud"
  }),
  score_histogram: Schema.Array(Schema.Struct({ from: Schema.Number, to: Schema.Number, count: Schema.Int })).annotate({
    description: "screened payments by fraud score, ten bins [from, to); the last includes 1.0"
  }),
  by_model_version: Schema.Array(Schema.Struct({
    model_version: Schema.String,
    screened_count: Schema.Int,
    blocked_count: Schema.Int,
    fraud_rate: Rate("blocked / approved payments this model screened"),
    cases: Schema.Struct({
      total: Schema.Int,
      by_status: Schema.Struct({ open: Schema.Int, confirmed_fraud: Schema.Int, false_positive: Schema.Int })
    }),
    review_precision: Schema.NullOr(Schema.Number)
  })).annotate({
    description:
      "the same figures per fraud model version ('unrecorded': screened before versions were kept on payments)"
  })
}).annotate({ identifier: "FraudStats", examples: [X.fraudStats] })
export const FraudStatsEnvelope = Schema.Struct({ fraud_stats: FraudStats }).annotate({
  examples: [{ fraud_stats: X.fraudStats }]
})

export const FraudReview = Schema.Struct({
  status: OneOf("confirmed_fraud", "false_positive"),
  notes: Schema.optionalKey(
    Schema.NullOr(
      Text(0, 5000, { lineBreaks: true }).annotate(
        msg(
          "must be a string of at most 5000 characters without control characters other than tab and line breaks, or null"
        )
      )
    )
  )
}).annotate({ identifier: "FraudReview", examples: [X.fraudReview] })
