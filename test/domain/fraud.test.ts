import fc from "fast-check"
import { describe, expect, it } from "vitest"
import * as Fraud from "../../src/domain/Fraud.ts"
import { maximumAmountCents, minimumAmountCents } from "../../src/domain/Money.ts"
import { ordinaryRiskSignal, sandboxRiskSignals } from "../../src/acquirer/Acquirer.ts"

const featureValues = fc.record({
  networkRiskSignal: fc.double({ min: 0, max: 1, noNaN: true }),
  amountCents: fc.integer({ min: minimumAmountCents, max: maximumAmountCents }),
  minorUnitsPerMajor: fc.constantFrom(1, 100),
  cardAttemptsLastHour: fc.integer({ min: 0, max: 50 })
})

/** Score of a first attempt with a card, as the Fraud service computes it. */
const scoreFor = (networkRiskSignal: number, amountCents: number, minorUnitsPerMajor = 100, cardAttemptsLastHour = 0) =>
  Fraud.assess(Fraud.features({ networkRiskSignal, amountCents, minorUnitsPerMajor, cardAttemptsLastHour })).score

describe("fraud model", () => {
  it("explains its output exactly: contributions sum to output − base value", () => {
    fc.assert(
      fc.property(featureValues, (input) => {
        const assessment = Fraud.assess(Fraud.features(input))
        const sum = assessment.explanations.reduce((total, e) => total + e.contribution, 0)
        expect(Math.abs(sum - (assessment.output - assessment.baseValue))).toBeLessThanOrEqual(1e-6)
        expect(assessment.score).toBeGreaterThanOrEqual(0)
        expect(assessment.score).toBeLessThanOrEqual(1)
        expect(Math.abs(assessment.score - 1 / (1 + Math.exp(-assessment.output)))).toBeLessThanOrEqual(1e-6)
        expect(assessment.modelVersion).toBe(Fraud.baselineModel.version)
      }),
      { seed: 42, numRuns: 500 }
    )
  })

  it("lists explanations by |contribution|, largest first, one per feature", () => {
    fc.assert(
      fc.property(featureValues, (input) => {
        const { explanations } = Fraud.assess(Fraud.features(input))
        expect(explanations.map((e) => e.feature).sort()).toEqual(["amount_log10", "card_attempts_last_hour", "network_risk_signal"])
        for (let i = 1; i < explanations.length; i++) {
          expect(Math.abs(explanations[i - 1]!.contribution)).toBeGreaterThanOrEqual(Math.abs(explanations[i]!.contribution))
        }
      }),
      { seed: 42, numRuns: 500 }
    )
  })

  it("clamps features: risk signal to 0..1, card attempts to the cap", () => {
    const features = Fraud.features({ networkRiskSignal: 3, amountCents: 900, minorUnitsPerMajor: 100, cardAttemptsLastHour: 99 })
    expect(features.networkRiskSignal).toBe(1)
    expect(features.cardAttemptsLastHour).toBe(Fraud.maximumCardAttemptsFeature)
    expect(features.amountLog10).toBeCloseTo(1, 9) // log10(1 + 9.00)
    expect(Fraud.features({ networkRiskSignal: -1, amountCents: 1, minorUnitsPerMajor: 1, cardAttemptsLastHour: 0 }).networkRiskSignal).toBe(0)
  })

  describe("sandbox test tokens with the default thresholds (CONTRACT section 6, calibration in Fraud.ts)", () => {
    const verdictOf = (score: number) => Fraud.verdict(score, Fraud.defaultThresholds)
    const review = sandboxRiskSignals.tok_risk_review!
    const highest = sandboxRiskSignals.tok_risk_highest!
    const anyAmount = fc.integer({ min: minimumAmountCents, max: maximumAmountCents })
    const minorUnits = fc.constantFrom(1, 100)

    it.each([
      ["an ordinary card", ordinaryRiskSignal, "passed"],
      ["tok_risk_review", review, "review"],
      ["tok_risk_highest", highest, "blocked"]
    ] as const)("%s on a typical 50.00 payment → %s", (_, signal, expected) => {
      expect(verdictOf(scoreFor(signal, 5_000))).toBe(expected)
    })

    it("an ordinary card passes at every amount, whatever its recent attempts", () => {
      fc.assert(
        fc.property(anyAmount, minorUnits, fc.integer({ min: 0, max: 1_000 }), (amountCents, perMajor, attempts) => {
          expect(verdictOf(scoreFor(ordinaryRiskSignal, amountCents, perMajor, attempts))).toBe("passed")
        }),
        { seed: 42, numRuns: 500 }
      )
    })

    it("tok_risk_highest scores above 0.9 at every amount", () => {
      fc.assert(
        fc.property(anyAmount, minorUnits, (amountCents, perMajor) => {
          expect(scoreFor(highest, amountCents, perMajor)).toBeGreaterThan(0.9)
        }),
        { seed: 42, numRuns: 500 }
      )
    })

    it("tok_risk_review lands in the review band from 0.01 to 10,000.00 (first attempt)", () => {
      fc.assert(
        fc.property(fc.integer({ min: 1, max: 10_000 }), fc.double({ min: 0, max: 1, noNaN: true }), (major, fraction) => {
          // Cents currencies up to 10,000.00; zero-decimal currencies (JPY) up to 10,000.
          const cents = Math.max(1, Math.round(major * 100 * fraction))
          expect(verdictOf(scoreFor(review, cents, 100))).toBe("review")
          expect(verdictOf(scoreFor(review, major, 1))).toBe("review")
        }),
        { seed: 42, numRuns: 500 }
      )
    })

    it.each([1, 100, 5_000, 1_000_000])("tok_risk_review at the edge amount %i cents is in review", (amountCents) => {
      expect(verdictOf(scoreFor(review, amountCents))).toBe("review")
    })
  })

  it("scores more risk for more card attempts in the last hour", () => {
    expect(scoreFor(0.05, 5_000, 100, 5)).toBeGreaterThan(scoreFor(0.05, 5_000, 100, 0))
  })
})

describe("verdict", () => {
  const thresholds = { review: 0.5, block: 0.8 }
  it.each([
    [0, "passed"],
    [0.499999, "passed"],
    [0.5, "review"],
    [0.799999, "review"],
    [0.8, "blocked"],
    [1, "blocked"]
  ] as const)("score %s → %s (thresholds are inclusive)", (score, expected) => {
    expect(Fraud.verdict(score, thresholds)).toBe(expected)
  })
})

describe("priority", () => {
  // Score bands, raised one level for large amounts (≥ 1,000.00).
  it.each([
    [0.5, 100, "low"],
    [0.64, 99_999, "low"],
    [0.5, 100_000, "medium"],
    [0.65, 100, "medium"],
    [0.79, 99_999, "medium"],
    [0.65, 100_000, "high"],
    [0.8, 100, "high"],
    [0.89, 99_999, "high"],
    [0.8, 100_000, "critical"],
    [0.9, 100, "critical"],
    [1, 1, "critical"]
  ] as const)("score %s, amount %i → %s", (score, amountCents, expected) => {
    expect(Fraud.priority(score, amountCents)).toBe(expected)
  })

  it("never decreases with score or amount", () => {
    const rank = { low: 0, medium: 1, high: 2, critical: 3 } as const
    fc.assert(
      fc.property(
        fc.double({ min: 0, max: 1, noNaN: true }),
        fc.double({ min: 0, max: 1, noNaN: true }),
        fc.integer({ min: 1, max: maximumAmountCents }),
        fc.integer({ min: 1, max: maximumAmountCents }),
        (s1, s2, a1, a2) => {
          const [lowScore, highScore] = s1 <= s2 ? [s1, s2] : [s2, s1]
          const [lowAmount, highAmount] = a1 <= a2 ? [a1, a2] : [a2, a1]
          expect(rank[Fraud.priority(highScore, highAmount)]).toBeGreaterThanOrEqual(rank[Fraud.priority(lowScore, lowAmount)])
        }
      ),
      { seed: 42, numRuns: 500 }
    )
  })
})
