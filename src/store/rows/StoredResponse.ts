import { deflateRawSync, inflateRawSync } from "node:zlib"

/**
 * A stored idempotent response's body as PostgreSQL keeps it (`idempotency_keys.response_body`):
 * a create's answer is about a kilobyte of JSON, most of it the same field names, feature names
 * and values in every answer. It is deflated (raw deflate, RFC 1951) against a preset dictionary
 * of those, to about 200 bytes of base64; a replay inflates it back to the same text, byte for
 * byte (CONTRACT section 5). A body stored before packing is read as it is.
 *
 * The prefix names the dictionary. A dictionary, once used, never changes: a new one takes the
 * next number, and `unpack` keeps every earlier one.
 */

const transaction = (
  status: string,
  explanations: ReadonlyArray<readonly [string, number, number]>
) =>
  `{"transaction":{"id":"pay_","merchant_id":"mer_","status":"${status}","amount_cents":1000,"currency":"USD",` +
  `"captured_amount_cents":0,"refunded_amount_cents":0,"fee_cents":0,"card_brand":"visa","card_last_four":"4242",` +
  `"capture_method":"automatic","idempotency_key":"","metadata":{},"fraud_score":0.0` +
  `,"fraud_model_version":"trained-logistic-2","fraud_explanations":[${
    explanations.map(([feature, value, contribution]) =>
      `{"feature":"${feature}","value":${value},"contribution":${contribution}}`
    ).join(",")
  }],"fraud_case_id":null,"failure_code":null,"failure_message":null,"dispute":null,"processor_pending":null,` +
  `"created_at":"2026-01-01T00:00:00.000Z","updated_at":"2026-01-01T00:00:00.000Z"}}`

/**
 * Dictionary 1: the commonest answer last (a match reaches back at most the window, 2 KB), other
 * values and features before it. Its text is fixed for good.
 */
const dictionary1 = Buffer.from(
  [
    `"card_brand":"mastercard""card_brand":"amex""currency":"EUR""currency":"GBP""capture_method":"manual"`,
    `"status":"authorized""status":"failed","failure_code":"do_not_honor","fraud_case_id":"fc_"`,
    ...["amount_log10", "new_card_above_usual_log10", "country_mismatch", "night_utc", "card_attempts_last_day"]
      .map((feature) => `{"feature":"${feature}","value":`),
    transaction("captured", [
      ["network_risk_logit", -2.944439, 0.644686],
      ["amount_vs_merchant_log10", 0, -0.343098],
      ["card_first_seen", 0, -0.251366],
      ["card_declines_last_day", 0, -0.100912],
      ["card_attempts_last_hour", 0, -0.097439]
    ])
  ].join("")
)

const dictionaries: ReadonlyArray<Buffer | undefined> = [undefined, dictionary1]
const current = 1
/**
 * A 2 KB window and the fastest level: a body deflated so costs about 25 µs (zlib's defaults,
 * about 40) for 5% more bytes.
 */
const options = (dictionary: Buffer) => ({ dictionary, windowBits: 11, memLevel: 4, level: 1 })
const prefix = (version: number) => `z${version}:`

/**
 * The body as stored: a JSON object's as `z<dictionary>:` and its deflated bytes in base64, any
 * other (a sealed body, which no dictionary shrinks) or one that would not shrink as it is.
 * Neither a JSON text nor a sealed one begins with `z`.
 */
export const pack = (body: string): string => {
  if (body.charCodeAt(0) !== 123 /* { */) return body
  const packed = prefix(current) + deflateRawSync(body, options(dictionaries[current]!)).toString("base64")
  return packed.length < body.length ? packed : body
}

/** The text `pack` was given. */
export const unpack = (stored: string): string => {
  if (stored.charCodeAt(0) !== 122 /* z */) return stored
  const colon = stored.indexOf(":")
  const dictionary = dictionaries[Number(stored.slice(1, colon))]
  if (dictionary === undefined) throw new Error(`stored response: unknown dictionary ${stored.slice(0, colon)}`)
  return inflateRawSync(Buffer.from(stored.slice(colon + 1), "base64"), options(dictionary)).toString("utf8")
}
