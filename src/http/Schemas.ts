import { Schema, SchemaAST } from "effect"
import { maximumAmountCents, minimumAmountCents, supportedCurrencies } from "../domain/Money.ts"
import { cardBrands, paymentStatuses } from "../domain/Payment.ts"
import { disputeReasons } from "../domain/Dispute.ts"
import * as X from "./Examples.ts"

/**
 * The schemas of the endpoints served on Effect 4 so far (create and retrieve a payment). The
 * other endpoints' schemas are still those of Effect 3 (`git show main:src/http/Schemas.ts`).
 *
 * Unknown fields are errors, so a typo never passes silently (CONTRACT section 1): the API sets
 * `onExcessProperty: "error"` for every payload (src/http/Api.ts).
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

const controlCharacters = /[\u0000-\u001f\u007f]/
const controlCharactersButLineBreaks = /[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f]/
const unpairedSurrogate = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/

/** Why `text` cannot be stored as given, or null when it can. */
export const unsafeTextReason = (text: string, options: { readonly lineBreaks?: boolean } = {}): string | null => {
  if ((options.lineBreaks === true ? controlCharactersButLineBreaks : controlCharacters).test(text)) {
    return options.lineBreaks === true ? "must not contain control characters other than tab and line breaks" : "must not contain control characters"
  }
  if (unpairedSurrogate.test(text)) return "must be valid Unicode text (it contains an unpaired surrogate)"
  return null
}

/** The message a malformed record id in a path carries; the edge answers it 404 (no such record can exist). */
export const malformedIdMessage = "is not a well-formed id"
const RecordId = Schema.String.check(Schema.isPattern(/^[A-Za-z0-9_]{1,100}$/)).annotate(msg(malformedIdMessage))
export const RecordIdPath = Schema.Struct({ id: RecordId })

export const AmountCents = Schema.Int.check(Schema.isBetween({ minimum: minimumAmountCents, maximum: maximumAmountCents })).annotate(
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
  unsafeTextReason(key) !== null ? "" : ` ("${key.length > metadataLimits.maxKeyLength ? `${key.slice(0, metadataLimits.maxKeyLength)}…` : key}")`

/**
 * Metadata is checked on the object as the client sent it, before anything copies it: a record
 * schema would drop a `__proto__` key silently while copying, and would report a bad key as an
 * unknown field without saying the rule. A key's problem names `metadata`; a value's names its key.
 */
const metadataProblem = (input: unknown): string | { readonly path: ReadonlyArray<string>; readonly issue: string } | undefined => {
  const { maxKeyLength, maxKeys, maxValueLength } = metadataLimits
  if (typeof input !== "object" || input === null || Array.isArray(input)) return "must be an object of string keys and string values"
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
    description: "the fraud model's score, 0..1, not rounded: the sigmoid of the model output (a held or blocked payment's " +
      "fraud case has it as risk_score, with model_output); the thresholds compare this number. Null before screening"
  }),
  fraud_model_version: Schema.NullOr(Schema.String).annotate({ description: "the fraud model that screened the payment" }),
  fraud_explanations: Schema.NullOr(Schema.Array(Explanation)).annotate({
    description: "the screening's largest contributions (at most 5, largest |contribution| first); the fraud case has them all"
  }),
  fraud_case_id: Schema.NullOr(Schema.String),
  failure_code: Schema.NullOr(Schema.String),
  failure_message: Schema.NullOr(Schema.String),
  dispute: Schema.NullOr(Dispute),
  created_at: Timestamp,
  updated_at: Timestamp
}).annotate({ identifier: "Transaction", examples: [X.transaction as any] })

export const TransactionEnvelope = Schema.Struct({ transaction: Transaction })

export const PaymentIdPath = RecordIdPath
