import fc from "fast-check"
import { describe, expect, it } from "vitest"
import {
  type Currency,
  isCurrency,
  maximumAmountCents,
  processingFeeCents,
  supportedCurrencies
} from "../../src/domain/Money.ts"

describe("processingFeeCents", () => {
  // 2.9 % (half-up to the cent) plus a fixed part per currency, never more than the amount.
  it.each<[number, Currency, number]>([
    [10_000, "USD", 290 + 30],
    [1_000, "USD", 29 + 30],
    [1_000, "EUR", 29 + 25],
    [1_000, "GBP", 29 + 20],
    [1_000, "CAD", 29 + 30],
    [1_000, "AUD", 29 + 30],
    [1_000, "JPY", 29],
    [500, "JPY", 15], // 14.5 rounds half up
    [1_500, "JPY", 44], // 43.5 rounds half up
    [50, "JPY", 1], // 1.45 rounds down
    [17, "JPY", 0], // 0.493 rounds down
    [1, "USD", 1], // capped at the amount
    [30, "USD", 30], // 0.87 → 1, plus 30 = 31, capped at 30
    [maximumAmountCents, "USD", 2_900_000 + 30]
  ])("%i %s → %i", (amountCents, currency, feeCents) => {
    expect(processingFeeCents(amountCents, currency)).toBe(feeCents)
  })

  it("is an integer between 0 and the amount, and never decreases as the amount grows", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: maximumAmountCents - 1 }),
        fc.constantFrom(...supportedCurrencies),
        (amountCents, currency) => {
          const fee = processingFeeCents(amountCents, currency)
          expect(Number.isSafeInteger(fee)).toBe(true)
          expect(fee).toBeGreaterThanOrEqual(0)
          expect(fee).toBeLessThanOrEqual(amountCents)
          expect(processingFeeCents(amountCents + 1, currency)).toBeGreaterThanOrEqual(fee)
        }
      ),
      { seed: 42, numRuns: 500 }
    )
  })
})

describe("currencies", () => {
  it("supports at least the six of the contract, upper-case only", () => {
    for (const code of ["USD", "EUR", "GBP", "CAD", "AUD", "JPY"]) expect(isCurrency(code)).toBe(true)
    expect(isCurrency("usd")).toBe(false)
    expect(isCurrency("XXX")).toBe(false)
  })
})
