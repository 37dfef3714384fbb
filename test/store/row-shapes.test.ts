import { describe, expect, it } from "@effect/vitest"
import * as fc from "fast-check"
import { explanationsColumn, toExplanations } from "../../src/store/rows/Payment.ts"
import { pack, unpack } from "../../src/store/rows/StoredResponse.ts"

const answer = (fields: Record<string, unknown>) =>
  JSON.stringify({
    transaction: {
      id: "pay_0mx1q3jrg4dgOc7ioY2bqSt",
      merchant_id: "mer_tVmWDxvtKTcVQqQw",
      status: "captured",
      amount_cents: 1500,
      currency: "USD",
      captured_amount_cents: 1500,
      refunded_amount_cents: 0,
      fee_cents: 74,
      card_brand: "visa",
      card_last_four: "4242",
      capture_method: "automatic",
      idempotency_key: "order-1001",
      metadata: {},
      fraud_score: 0.009994861723540253,
      fraud_model_version: "trained-logistic-2",
      fraud_explanations: [
        { feature: "network_risk_logit", value: -2.944439, contribution: 0.644686 },
        { feature: "amount_vs_merchant_log10", value: 0, contribution: -0.343098 },
        { feature: "card_first_seen", value: 0, contribution: -0.251366 },
        { feature: "card_declines_last_day", value: 0, contribution: -0.100912 },
        { feature: "card_attempts_last_hour", value: 0, contribution: -0.097439 }
      ],
      fraud_case_id: null,
      failure_code: null,
      failure_message: null,
      dispute: null,
      processor_pending: null,
      created_at: "2026-11-29T10:55:28.972Z",
      updated_at: "2026-11-29T10:55:28.978Z",
      ...fields
    }
  })

describe("a stored response's body", () => {
  it("reads back byte for byte, whatever the JSON object (property)", () => {
    fc.assert(
      fc.property(fc.jsonValue(), fc.string({ unit: "grapheme" }), (value, text) => {
        for (const body of [JSON.stringify({ value }), answer({ metadata: { note: text } }), `{${text}`]) {
          expect(unpack(pack(body))).toBe(body)
        }
      }),
      { seed: 11, numRuns: 300 }
    )
  })

  it("keeps a create's answer in a third of its text", () => {
    for (
      const fields of [{ idempotency_key: "a-client-key-7", amount_cents: 98_765 }, {
        status: "failed",
        currency: "EUR"
      }]
    ) {
      const body = answer(fields)
      const stored = pack(body)
      expect(stored.startsWith("~1")).toBe(true)
      expect(stored.length).toBeLessThan(body.length / 3)
      expect(unpack(stored)).toBe(body)
    }
  })

  it("keeps a body that is not a JSON object, or was stored before packing, as it is", () => {
    for (const body of ["sealed:v1:AAAA", "", "[]", "null", "{\"a\":1}\n", "{\u0001}"]) expect(pack(body)).toBe(body)
    expect(unpack("{\"transaction\":{}}")).toBe("{\"transaction\":{}}")
    expect(unpack("sealed:v1:AAAA")).toBe("sealed:v1:AAAA")
  })

  it("refuses a table it does not know", () => {
    expect(() => unpack("~9\u0001")).toThrow(/unknown table ~9/)
  })
})

describe("a payment's explanations as its row keeps them", () => {
  const explanations = [
    { feature: "network_risk_logit", value: -2.944439, contribution: 0.644686 },
    { feature: "card_first_seen", value: 0, contribution: -0.251366 }
  ]

  it("read back as the domain wrote them, through JSON as PostgreSQL returns it", () => {
    const stored = JSON.parse(JSON.stringify(explanationsColumn(explanations)))
    expect(stored).toEqual([["network_risk_logit", -2.944439, 0.644686], ["card_first_seen", 0, -0.251366]])
    expect(toExplanations(stored)).toEqual(explanations)
    expect(toExplanations(explanationsColumn(null))).toBeNull()
  })

  it("read a row written before, which keeps each as an object, the same", () => {
    expect(toExplanations(JSON.parse(JSON.stringify(explanations)))).toEqual(explanations)
  })
})
