import fc from "fast-check"
import { createHash } from "node:crypto"
import { readFileSync } from "node:fs"
import { describe, expect, it } from "vitest"
import { ordinaryRiskSignal, sandboxReviewMaximumMajor, sandboxRiskSignals } from "../../src/acquirer/Acquirer.ts"
import * as Fraud from "../../src/domain/Fraud.ts"
import * as Training from "../../src/domain/FraudTraining.ts"
import { maximumAmountCents, minimumAmountCents } from "../../src/domain/Money.ts"

const history = fc.record({
  cardAttemptsLastHour: fc.integer({ min: 0, max: 60 }),
  cardAttemptsLastDay: fc.integer({ min: 0, max: 60 }),
  cardDeclinesLastDay: fc.integer({ min: 0, max: 60 }),
  cardSeenBefore: fc.boolean(),
  merchantAmountCount: fc.integer({ min: 0, max: 50 }),
  merchantAmountSumCents: fc.integer({ min: 0, max: 50 * maximumAmountCents })
})
const country = fc.constantFrom("US", "GB", "de", "NG")
const input = fc.record({
  networkRiskSignal: fc.double({ min: -1, max: 2, noNaN: true }),
  amountCents: fc.integer({ min: minimumAmountCents, max: maximumAmountCents }),
  currency: fc.constantFrom(...Fraud.currencies),
  cardBrand: fc.constantFrom(...Fraud.cardBrands),
  metadata: fc.oneof(
    fc.constant({}),
    fc.record({ ip_country: country, card_country: country }),
    fc.record({ ip_country: country })
  ),
  createdAt: fc.integer({ min: Date.UTC(2020, 0, 1), max: Date.UTC(2030, 0, 1) }),
  history
})

describe("fraud model: exact explanations", () => {
  it("contributions + base value = model output (log-odds), and score = sigmoid(output) exactly, over random inputs", () => {
    const millionths = (value: number) => {
      const scaled = value * 1e6
      // Every shown number has at most 6 decimals: its millionths are a whole number.
      expect(Math.abs(scaled - Math.round(scaled))).toBeLessThan(1e-6)
      return Math.round(scaled)
    }
    fc.assert(
      fc.property(input, (raw) => {
        const values = Fraud.features(raw)
        const assessment = Fraud.assess(values)
        // Exact in decimal: the millionths of the base value and the contributions add up to the output's.
        const sumMillionths = assessment.explanations.reduce(
          (total, e) => total + millionths(e.contribution),
          millionths(assessment.baseValue)
        )
        expect(sumMillionths).toBe(millionths(assessment.output))
        expect(assessment.output).toBe(sumMillionths / 1e6)
        // In floating point, in any order, the sum rounds to the output at 6 decimals.
        const sum = assessment.explanations.reduce((total, e) => total + e.contribution, 0)
        expect(Math.round((assessment.baseValue + sum) * 1e6) / 1e6).toBe(assessment.output)
        // The score is the output's sigmoid, the very double (nothing rounded after it).
        expect(assessment.score).toBe(1 / (1 + Math.exp(-assessment.output)))
        expect(Fraud.verdict(assessment.score, Fraud.defaultThresholds)).toBe(
          assessment.score >= 0.8 ? "blocked" : assessment.score >= 0.5 ? "review" : "passed"
        )
        // Each contribution is weight × (standardised value − 0), exactly as the artefact says.
        for (const e of assessment.explanations) {
          const f = Fraud.model.features.find((x) => x.name === e.feature)!
          expect(Math.abs(e.contribution - f.weight * (values[f.name]! - f.mean) / f.std)).toBeLessThanOrEqual(
            0.5e-6 + 1e-12
          )
        }
        // The output is the model's log-odds (up to the rounding of each contribution).
        expect(Math.abs(assessment.output - Fraud.logOdds(values))).toBeLessThanOrEqual(
          1e-6 * Fraud.featureNames.length
        )
        expect(assessment.baseValue).toBeCloseTo(Fraud.model.bias, 6)
        expect(assessment.modelVersion).toBe(Fraud.model.version)
      }),
      { seed: 42, numRuns: 1_000 }
    )
  })

  it("lists one explanation per feature, by |contribution|, largest first", () => {
    fc.assert(
      fc.property(input, (raw) => {
        const { explanations } = Fraud.assess(Fraud.features(raw))
        expect(explanations.map((e) => e.feature).sort()).toEqual([...Fraud.featureNames].sort())
        for (let i = 1; i < explanations.length; i++) {
          expect(Math.abs(explanations[i - 1]!.contribution)).toBeGreaterThanOrEqual(
            Math.abs(explanations[i]!.contribution)
          )
        }
      }),
      { seed: 42, numRuns: 300 }
    )
  })

  it("bounds its features: signal clamped, counts capped, amount ratio from the usual amount up to 10× above it", () => {
    const values = Fraud.features({
      networkRiskSignal: 3,
      amountCents: 900,
      currency: "USD",
      cardBrand: "diners",
      metadata: { ip_country: "us", card_country: "US " },
      createdAt: Date.parse("2026-01-01T05:59:59.999Z"),
      history: {
        ...Fraud.noHistory,
        cardAttemptsLastHour: 999,
        cardAttemptsLastDay: 999,
        cardDeclinesLastDay: 99,
        cardSeenBefore: true,
        merchantAmountCount: 10,
        merchantAmountSumCents: 10
      }
    })
    expect(values.network_risk_logit).toBeCloseTo(Math.log(0.9999 / 0.0001), 9)
    expect(values.amount_log10).toBeCloseTo(1, 9) // log10(1 + 9.00)
    expect(values.amount_vs_merchant_log10).toBe(1)
    expect(values.card_attempts_last_hour).toBeCloseTo(Math.log2(51), 9)
    expect(values.card_declines_last_day).toBe(10)
    expect(values.card_first_seen).toBe(0)
    expect(values.country_mismatch).toBe(0) // compared without case or spaces
    expect(values.night_utc).toBe(1)
    expect(values.card_brand_other).toBe(1)
    // Below the usual amount counts as the usual amount.
    expect(
      Fraud.features({
        ...sampleInput,
        amountCents: 10,
        history: { ...Fraud.noHistory, merchantAmountCount: 10, merchantAmountSumCents: 100_000 }
      }).amount_vs_merchant_log10
    ).toBe(0)
    // Fewer than five earlier payments in the currency: the merchant's usual amount is unknown.
    expect(
      Fraud.features({
        ...sampleInput,
        history: { ...Fraud.noHistory, merchantAmountCount: 4, merchantAmountSumCents: 4 }
      }).amount_vs_merchant_log10
    ).toBe(0)
  })
})

const sampleInput: Fraud.FraudInput = {
  networkRiskSignal: ordinaryRiskSignal,
  amountCents: 5_000,
  currency: "USD",
  cardBrand: "visa",
  metadata: {},
  createdAt: Date.parse("2026-01-01T12:00:00.000Z"),
  history: Fraud.noHistory
}
const scoreOf = (overrides: Partial<Fraud.FraudInput>, h: Partial<Fraud.FraudHistory> = {}) =>
  Fraud.assess(
    Fraud.features({ ...sampleInput, ...overrides, history: { ...Fraud.noHistory, ...overrides.history, ...h } })
  ).score
const verdictOf = (score: number) => Fraud.verdict(score, Fraud.defaultThresholds)

/** The documented conditions of the sandbox bands (docs/api.md): a card's first few payments at its merchant's usual amounts. */
const ordinaryContext = fc.record({
  major: fc.integer({ min: 10, max: 1_000 }),
  currency: fc.constantFrom(...Fraud.currencies),
  cardBrand: fc.constantFrom(...Fraud.cardBrands),
  hour: fc.integer({ min: 0, max: 23 }),
  earlier: fc.integer({ min: 0, max: 2 }),
  merchantHistory: fc.boolean()
}).map(({ major, currency, cardBrand, hour, earlier, merchantHistory }): Fraud.FraudInput => {
  const amountCents = major * 100
  return {
    ...sampleInput,
    amountCents,
    currency,
    cardBrand,
    createdAt: Date.UTC(2026, 0, 1, hour, 30),
    history: {
      ...Fraud.noHistory,
      cardAttemptsLastHour: earlier,
      cardAttemptsLastDay: earlier,
      cardSeenBefore: earlier > 0,
      merchantAmountCount: merchantHistory ? 10 : 0,
      merchantAmountSumCents: merchantHistory ? 10 * amountCents : 0
    }
  }
})

describe("sandbox test tokens with the default thresholds (CONTRACT section 6, docs/api.md)", () => {
  const review = sandboxRiskSignals.tok_risk_review!
  const highest = sandboxRiskSignals.tok_risk_highest!
  const score = (context: Fraud.FraudInput, signal: number) =>
    Fraud.assess(Fraud.features({ ...context, networkRiskSignal: signal })).score

  it.each(
    [
      ["an ordinary card", ordinaryRiskSignal, "passed"],
      ["tok_risk_review", review, "review"],
      ["tok_risk_highest", highest, "blocked"]
    ] as const
  )("%s on a typical first 50.00 payment → %s", (_, signal, expected) => {
    expect(verdictOf(scoreOf({ networkRiskSignal: signal }))).toBe(expected)
  })

  it("tok_risk_review lands in the review band, tok_risk_highest at 0.85 or more, an ordinary card passes", () => {
    fc.assert(
      fc.property(ordinaryContext, (context) => {
        expect(verdictOf(score(context, review))).toBe("review")
        expect(score(context, highest)).toBeGreaterThanOrEqual(0.85)
        expect(verdictOf(score(context, ordinaryRiskSignal))).toBe("passed")
      }),
      { seed: 42, numRuns: 1_000 }
    )
  })

  // A bound, not a sample: each feature's lowest possible contribution, taken independently (the
  // real features are correlated, so no payment reaches the sum), added to the signal's.
  const lowestScore = (signal: number, maximumMajor: number) => {
    const contribution = (name: string, value: number) =>
      Fraud.contribution(Fraud.model.features.find((x) => x.name === name)!, value)
    const lowest = (name: string, values: ReadonlyArray<number>) =>
      Math.min(...values.map((v) => contribution(name, v)))
    const attempts = [0, Math.log2(1 + Fraud.cardDayLimit)]
    const others = lowest("amount_log10", [Math.log10(1.01), Math.log10(1 + maximumMajor)]) +
      lowest("amount_vs_merchant_log10", [0, 1]) + lowest("card_attempts_last_hour", attempts) +
      lowest("card_attempts_last_day", attempts) +
      lowest("card_declines_last_day", [0, 10]) + lowest("card_first_seen", [0, 1]) +
      lowest("new_card_above_usual_log10", [0, 1]) +
      lowest("country_mismatch", [0, 1]) + lowest("night_utc", [0, 1]) +
      Math.min(
        ...["visa", ...Fraud.cardBrands].map((brand) =>
          contribution("card_brand_mastercard", brand === "mastercard" ? 1 : 0) +
          contribution("card_brand_amex", brand === "amex" ? 1 : 0) +
          contribution("card_brand_other", ["visa", "mastercard", "amex"].includes(brand) ? 0 : 1)
        )
      ) +
      Math.min(
        ...Fraud.currencies.map((currency) =>
          Fraud.currencies.slice(1).reduce((sum, c) => sum + contribution(`currency_${c}`, c === currency ? 1 : 0), 0)
        )
      )
    return Fraud.sigmoid(
      Fraud.model.bias + contribution("network_risk_logit", Math.log(signal / (1 - signal))) + others
    )
  }

  it(`tok_risk_review never passes up to ${sandboxReviewMaximumMajor.toLocaleString("en")} in any currency, whatever the history; tok_risk_highest is blocked at any amount`, () => {
    // JPY has no minor unit: its largest amount is the largest in major units.
    expect(lowestScore(review, sandboxReviewMaximumMajor)).toBeGreaterThanOrEqual(0.5)
    expect(lowestScore(highest, maximumAmountCents)).toBeGreaterThanOrEqual(0.8)
    // The bound is tight enough to matter: above the limit the review token can pass (as a
    // simulated ¥3,330,359 payment with a busy, known card did).
    expect(lowestScore(review, maximumAmountCents)).toBeLessThan(0.5)
    fc.assert(
      fc.property(input, (raw) => {
        const amountCents = Math.min(
          raw.amountCents,
          sandboxReviewMaximumMajor * Fraud.minorUnitsPerMajor(raw.currency)
        )
        expect(score({ ...raw, amountCents }, review)).toBeGreaterThanOrEqual(
          lowestScore(review, sandboxReviewMaximumMajor)
        )
        expect(verdictOf(score(raw, highest))).toBe("blocked")
      }),
      { seed: 42, numRuns: 2_000 }
    )
  })

  it("an ordinary card already seen at the merchant passes at any amount, however busy, without declines or a country mismatch", () => {
    fc.assert(
      fc.property(input, fc.integer({ min: 0, max: 1_000 }), (raw, attempts) => {
        const context = {
          ...raw,
          metadata: {},
          history: {
            ...raw.history,
            cardSeenBefore: true,
            cardDeclinesLastDay: 0,
            cardAttemptsLastHour: attempts,
            cardAttemptsLastDay: attempts
          }
        }
        expect(verdictOf(score(context, ordinaryRiskSignal))).toBe("passed")
      }),
      { seed: 42, numRuns: 1_000 }
    )
  })
})

describe("the documented fraud patterns raise the score of an ordinary card", () => {
  const usual = { merchantAmountCount: 20, merchantAmountSumCents: 20 * 5_000 }
  const known = { ...usual, cardSeenBefore: true, cardAttemptsLastHour: 1, cardAttemptsLastDay: 1 }
  it.each(
    [
      ["card testing: a burst of small attempts, several declined", [{ amountCents: 100 }, {
        ...known,
        cardAttemptsLastHour: 12,
        cardAttemptsLastDay: 15,
        cardDeclinesLastDay: 8
      }], [{ amountCents: 100 }, known]],
      ["amount spike: 10× the merchant's usual amount", [{ amountCents: 50_000 }, known], [{}, known]],
      ["country mismatch", [{ metadata: { ip_country: "NG", card_country: "US" } }, known], [{
        metadata: { ip_country: "US", card_country: "US" }
      }, known]],
      ["new card far above the usual amount", [{ amountCents: 80_000 }, usual], [{}, usual]]
    ] as const
  )("%s", (_, [patternInput, patternHistory], [plainInput, plainHistory]) => {
    expect(scoreOf(patternInput, patternHistory)).toBeGreaterThan(scoreOf(plainInput, plainHistory) * 2)
  })

  it("card testing from a card the network already doubts is held or blocked", () => {
    expect(
      verdictOf(
        scoreOf({ networkRiskSignal: 0.5, amountCents: 100 }, {
          cardSeenBefore: true,
          cardAttemptsLastHour: 12,
          cardAttemptsLastDay: 15,
          cardDeclinesLastDay: 8
        })
      )
    ).not.toBe("passed")
  })
})

describe("reproducible training", () => {
  const small = { ...Training.defaultTrainingOptions, samples: 3_000, iterations: 60 }
  const hash = (text: string) => createHash("sha256").update(text).digest("hex")

  it("the same seed gives a byte-identical artefact; another seed another one", () => {
    const first = hash(Training.serialise(Training.train(small).artefact))
    expect(hash(Training.serialise(Training.train(small).artefact))).toBe(first)
    expect(hash(Training.serialise(Training.train({ ...small, seed: small.seed + 1 }).artefact))).not.toBe(first)
  })

  it("the committed artefact is what `npm run fraud:train -- --seed 11` writes", () => {
    const committed = readFileSync(
      new URL("../../src/domain/fraud-models/trained-logistic-2.json", import.meta.url),
      "utf8"
    )
    expect(JSON.parse(committed).training.command).toBe(
      `npm run fraud:train -- --seed ${Training.defaultTrainingOptions.seed}`
    )
    expect(hash(Training.serialise(Training.train(Training.defaultTrainingOptions).artefact))).toBe(hash(committed))
  }, 120_000)

  it("learns something: held-out AUC above the network signal's alone", () => {
    const { metrics, baseline } = Training.train({ ...small, samples: 20_000, iterations: 300 })
    expect(metrics.auc).toBeGreaterThan(baseline.auc)
    expect(metrics.auc).toBeGreaterThan(0.8)
  })

  it("AUC by ranks: perfect, inverted, ties", () => {
    expect(Training.areaUnderCurve([0.1, 0.2, 0.8, 0.9], [0, 0, 1, 1])).toBe(1)
    expect(Training.areaUnderCurve([0.9, 0.8, 0.2, 0.1], [0, 0, 1, 1])).toBe(0)
    expect(Training.areaUnderCurve([0.5, 0.5, 0.5, 0.5], [0, 1, 0, 1])).toBe(0.5)
  })
})

describe("verdict", () => {
  const thresholds = { review: 0.5, block: 0.8 }
  it.each(
    [
      [0, "passed"],
      [0.499999, "passed"],
      [0.5, "review"],
      [0.799999, "review"],
      [0.8, "blocked"],
      [1, "blocked"]
    ] as const
  )("score %s → %s (thresholds are inclusive)", (score, expected) => {
    expect(Fraud.verdict(score, thresholds)).toBe(expected)
  })
})

describe("priority", () => {
  // Score bands, raised one level for large amounts (≥ 1,000.00).
  it.each(
    [
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
    ] as const
  )("score %s, amount %i → %s", (score, amountCents, expected) => {
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
          expect(rank[Fraud.priority(highScore, highAmount)]).toBeGreaterThanOrEqual(
            rank[Fraud.priority(lowScore, lowAmount)]
          )
        }
      ),
      { seed: 42, numRuns: 500 }
    )
  })
})
