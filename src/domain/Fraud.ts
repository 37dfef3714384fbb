/**
 * Fraud scoring: a logistic model whose explanations are exact SHAP values. For a linear model
 * over independent features, feature i contributes `weight_i * (value_i - mean_i)` to the
 * log-odds, and the contributions sum to the model output (log-odds) minus the base value
 * (the log-odds at the mean input). The trained model replaces these weights; the plumbing
 * (features, thresholds, cases, priorities, explanations) stays.
 */
export interface FraudFeatures {
  /** Risk signal reported by the card network with the authorization, 0..1. */
  readonly networkRiskSignal: number
  /** Payment amount in major units, log10(1 + amount). */
  readonly amountLog10: number
  /** Earlier payment attempts with the same card token at this merchant in the last hour (capped). */
  readonly cardAttemptsLastHour: number
}

export interface Explanation {
  readonly feature: string
  readonly value: number
  readonly contribution: number
}

export interface Assessment {
  readonly score: number
  readonly modelVersion: string
  readonly baseValue: number
  readonly output: number
  readonly explanations: ReadonlyArray<Explanation>
}

interface Term {
  readonly feature: keyof FraudFeatures
  readonly name: string
  readonly weight: number
  readonly mean: number
}

/**
 * Calibration (documented in docs/api.md): an ordinary card (signal 0.05) always passes; the
 * sandbox review signal (0.64) scores 0.57–0.79 for amounts from 0.01 to 10,000 with no earlier
 * attempts; the highest-risk signal (0.95) always scores above 0.9.
 */
export const baselineModel = {
  version: "baseline-logistic-1",
  bias: -4,
  terms: [
    { feature: "networkRiskSignal", name: "network_risk_signal", weight: 8, mean: 0.05 },
    { feature: "amountLog10", name: "amount_log10", weight: 0.25, mean: 1.7 },
    { feature: "cardAttemptsLastHour", name: "card_attempts_last_hour", weight: 0.1, mean: 0.2 }
  ] satisfies ReadonlyArray<Term>
} as const

export const maximumCardAttemptsFeature = 10

const round6 = (value: number) => Math.round(value * 1e6) / 1e6
const sigmoid = (logit: number) => 1 / (1 + Math.exp(-logit))

export const features = (input: {
  readonly networkRiskSignal: number
  readonly amountCents: number
  readonly minorUnitsPerMajor: number
  readonly cardAttemptsLastHour: number
}): FraudFeatures => ({
  networkRiskSignal: Math.min(1, Math.max(0, input.networkRiskSignal)),
  amountLog10: Math.log10(1 + input.amountCents / input.minorUnitsPerMajor),
  cardAttemptsLastHour: Math.min(maximumCardAttemptsFeature, input.cardAttemptsLastHour)
})

export const assess = (values: FraudFeatures, model = baselineModel): Assessment => {
  const explanations = model.terms.map((term) => {
    const value = values[term.feature]
    return { feature: term.name, value: round6(value), contribution: round6(term.weight * (value - term.mean)) }
  })
  const baseValue = model.bias
  // The output is defined from the rounded contributions so the documented sum holds exactly.
  const output = round6(baseValue + explanations.reduce((sum, e) => sum + e.contribution, 0))
  explanations.sort((a, b) => Math.abs(b.contribution) - Math.abs(a.contribution) || a.feature.localeCompare(b.feature))
  return { score: round6(sigmoid(output)), modelVersion: model.version, baseValue, output, explanations }
}

export interface Thresholds {
  readonly review: number
  readonly block: number
}
export const defaultThresholds: Thresholds = { review: 0.5, block: 0.8 }

export type Verdict = "passed" | "review" | "blocked"
export const verdict = (score: number, thresholds: Thresholds): Verdict =>
  score >= thresholds.block ? "blocked" : score >= thresholds.review ? "review" : "passed"

export type Priority = "low" | "medium" | "high" | "critical"
export const largeAmountCents = 100_000

/** Priority of a fraud case, from its score and the money at risk (documented in docs/api.md). */
export const priority = (score: number, amountCents: number): Priority => {
  if (score >= 0.9 || (score >= 0.8 && amountCents >= largeAmountCents)) return "critical"
  if (score >= 0.8 || (score >= 0.65 && amountCents >= largeAmountCents)) return "high"
  if (score >= 0.65 || amountCents >= largeAmountCents) return "medium"
  return "low"
}

export type FraudCaseStatus = "open" | "confirmed_fraud" | "false_positive"

export interface FraudCase {
  readonly id: string
  readonly paymentId: string
  readonly merchantId: string
  readonly status: FraudCaseStatus
  readonly priority: Priority
  readonly riskScore: number
  readonly modelVersion: string
  readonly explanations: ReadonlyArray<Explanation>
  readonly notes: string | null
  readonly reviewedAt: string | null
  readonly createdAt: string
  readonly updatedAt: string
}
