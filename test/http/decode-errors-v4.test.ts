import { Exit, Schema } from "effect"
import type { HttpServerRequest } from "effect/http"
import { HttpApiSchemaError } from "effect/http-api/HttpApiError"
import { describe, expect, it } from "vitest"
import * as S from "../../src/http/api/Schemas.ts"
import { fromDecodeError } from "../../src/http/edge/RequestErrors.ts"

/**
 * The create body's decode failures on Effect 4, mapped to CONTRACT section 3's 422: the same
 * `param` and message as the service on Effect 3 answers (each expected body below was taken
 * from it with curl). Runs without a database: the issue comes from the schema itself, as the
 * HttpApi gets it, with the payload's parse options (unknown fields are errors).
 */
const request = { url: "/api/v1/transactions", method: "POST" } as unknown as HttpServerRequest.HttpServerRequest

const answer = (body: unknown) => {
  const exit = Schema.decodeUnknownExit(S.TransactionCreate)(body, { onExcessProperty: "error" })
  if (!Exit.isFailure(exit)) throw new Error("the body decoded")
  const error = exit.cause.reasons.find((reason) => reason._tag === "Fail")
  if (error === undefined || error._tag !== "Fail") throw new Error("no schema error")
  const refusal = fromDecodeError(
    new HttpApiSchemaError({ kind: "Payload", cause: error.error as Schema.SchemaError }),
    request
  )
  return { status: refusal.status, ...refusal.body("req_test").error }
}

const card = { currency: "USD", card_token: "tok_visa", card_last_four: "4242", card_brand: "visa" }
const failed = (param: string | undefined, message: string) => ({
  status: 422,
  type: "invalid_request_error",
  code: "validation_failed",
  message,
  ...(param === undefined ? {} : { param }),
  request_id: "req_test"
})

describe("the create body's 422 on Effect 4", () => {
  it("names a field's rule whatever is wrong with its value", () => {
    const rule = "transaction.amount_cents must be an integer number of cents between 1 and 99999999."
    for (const amount of ["12", 1.5, 0, 100_000_000, null]) {
      expect(answer({ transaction: { amount_cents: amount, ...card } })).toEqual(
        failed("transaction.amount_cents", rule)
      )
    }
  })

  it("lists every allowed value of a closed set", () => {
    expect(answer({ transaction: { amount_cents: 100, ...card, currency: "XXX" } })).toEqual(
      failed(
        "transaction.currency",
        "transaction.currency must be one of \"USD\", \"EUR\", \"GBP\", \"CAD\", \"AUD\", \"JPY\"."
      )
    )
    expect(answer({ transaction: { amount_cents: 100, ...card, capture_method: "later" } })).toEqual(
      failed("transaction.capture_method", "transaction.capture_method must be one of \"automatic\", \"manual\".")
    )
  })

  it("refuses an unknown field by name, with the fields of its object", () => {
    expect(answer({ transaction: { amount_cents: 100, ...card, amount: 1 } })).toEqual(failed(
      "transaction.amount",
      "transaction.amount is not a recognised field; the fields here are \"amount_cents\", \"currency\", \"card_token\", " +
        "\"card_last_four\", \"card_brand\", \"idempotency_key\", \"metadata\", \"capture_method\"."
    ))
    expect(answer({ txn: {} })).toEqual(
      failed("txn", "txn is not a recognised field; the fields here are \"transaction\".")
    )
  })

  it("says which field is missing", () => {
    expect(answer({ transaction: { ...card } })).toEqual(
      failed("transaction.amount_cents", "transaction.amount_cents is required.")
    )
    expect(answer({})).toEqual(failed("transaction", "transaction is required."))
  })

  it("names a metadata value by its key, and a metadata problem by the field", () => {
    expect(answer({ transaction: { amount_cents: 100, ...card, metadata: { a: 1 } } })).toEqual(
      failed("transaction.metadata.a", "transaction.metadata.a must be a string of at most 500 characters.")
    )
    expect(answer({ transaction: { amount_cents: 100, ...card, metadata: [] } })).toEqual(
      failed("transaction.metadata", "transaction.metadata must be an object of string keys and string values.")
    )
  })

  it("answers a body that is not an object without a param", () => {
    expect(answer([])).toEqual(
      failed(undefined, "The request body is missing or is not a JSON object of the documented shape.")
    )
  })
})
