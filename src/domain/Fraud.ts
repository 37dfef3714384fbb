/**
 * Fraud scoring: a logistic regression trained on labelled synthetic data
 * (`npm run fraud:train`, src/domain/FraudTraining.ts, docs/fraud-model.md), whose explanations
 * are exact. Features are standardised with the training set's mean and standard deviation;
 * feature i contributes `weight_i × (standardised value_i − mean of the standardised value)`
 * (the mean is 0 by construction) to the log-odds, and the contributions plus the base value
 * (the intercept: the log-odds at the training mean) equal the model output, the log-odds whose
 * sigmoid is the score. For a linear model over independent features these are the SHAP values.
 */
import trainedModel from "./fraud-models/trained-logistic-2.json" with { type: "json" }

/** What the store knows about the card and the merchant when the payment is created (one round trip). */
export interface FraudHistory {
  /** Earlier payments of this card token at this merchant in the last hour (counted up to `cardDayLimit`). */
  readonly cardAttemptsLastHour: number
  /** ...in the last 24 hours (up to `cardDayLimit`). */
  readonly cardAttemptsLastDay: number
  /** Of those of the last 24 hours, the ones the network declined (`failed`). */
  readonly cardDeclinesLastDay: number
  /** Whether the token was ever used at this merchant before. */
  readonly cardSeenBefore: boolean
  /** The merchant's last `merchantAmountWindow` payments in the payment's currency: how many, and their sum. */
  readonly merchantAmountCount: number
  readonly merchantAmountSumCents: number
}

export const noHistory: FraudHistory = {
  cardAttemptsLastHour: 0,
  cardAttemptsLastDay: 0,
  cardDeclinesLastDay: 0,
  cardSeenBefore: false,
  merchantAmountCount: 0,
  merchantAmountSumCents: 0
}

/** Windows and bounds of the history (the store counts within them; a busy card never scans its whole past). */
export const cardHourMs = 3_600_000
export const cardDayMs = 86_400_000
export const cardDayLimit = 50
export const merchantAmountWindow = 50
/** Below this many earlier payments in a currency the merchant's usual amount is unknown (feature 0). */
export const merchantAmountMinimumCount = 5

export const cardBrands = ["visa", "mastercard", "amex", "discover", "jcb", "diners", "unionpay"] as const
export const currencies = ["USD", "EUR", "GBP", "CAD", "AUD", "JPY"] as const

/** The raw inputs of one screening: the request, the network's answer, the history and the time. */
export interface FraudInput {
  readonly networkRiskSignal: number
  readonly amountCents: number
  readonly currency: string
  readonly cardBrand: string
  readonly metadata: Readonly<Record<string, string>>
  /** When the payment was created (epoch milliseconds); the hour of day is taken in UTC. */
  readonly createdAt: number
  readonly history: FraudHistory
}

/** The model's inputs, by name (documented in docs/fraud-model.md). */
export type FraudFeatures = Readonly<Record<string, number>>

export const featureNames = [
  "network_risk_logit",
  "amount_log10",
  "amount_vs_merchant_log10",
  "card_attempts_last_hour",
  "card_attempts_last_day",
  "card_declines_last_day",
  "card_first_seen",
  "new_card_above_usual_log10",
  "country_mismatch",
  "night_utc",
  "card_brand_mastercard",
  "card_brand_amex",
  "card_brand_other",
  ...currencies.slice(1).map((currency) => `currency_${currency}`)
] as const

const clamp = (value: number, low: number, high: number) => Math.min(high, Math.max(low, value))
export const minorUnitsPerMajor = (currency: string) => (currency === "JPY" ? 1 : 100)
const countryOf = (value: string | undefined) => (value === undefined ? null : value.trim().toUpperCase())

/** Turns the raw inputs into the model's features (pure; the same in training and in service). */
export const features = (input: FraudInput): FraudFeatures => {
  const signal = clamp(input.networkRiskSignal, 0.0001, 0.9999)
  const amountLog10 = Math.log10(1 + input.amountCents / minorUnitsPerMajor(input.currency))
  const h = input.history
  const vsMerchant = h.merchantAmountCount >= merchantAmountMinimumCount && h.merchantAmountSumCents > 0
    ? clamp(Math.log10((input.amountCents * h.merchantAmountCount) / h.merchantAmountSumCents), 0, 1)
    : 0
  const firstSeen = h.cardSeenBefore ? 0 : 1
  const ipCountry = countryOf(input.metadata.ip_country)
  const cardCountry = countryOf(input.metadata.card_country)
  const hour = new Date(input.createdAt).getUTCHours()
  const values: Record<string, number> = {
    network_risk_logit: Math.log(signal / (1 - signal)),
    amount_log10: amountLog10,
    amount_vs_merchant_log10: vsMerchant,
    card_attempts_last_hour: Math.log2(1 + Math.min(h.cardAttemptsLastHour, cardDayLimit)),
    card_attempts_last_day: Math.log2(1 + Math.min(h.cardAttemptsLastDay, cardDayLimit)),
    card_declines_last_day: Math.min(h.cardDeclinesLastDay, 10),
    card_first_seen: firstSeen,
    new_card_above_usual_log10: firstSeen * Math.max(0, vsMerchant),
    country_mismatch: ipCountry !== null && cardCountry !== null && ipCountry !== cardCountry ? 1 : 0,
    night_utc: hour < 6 ? 1 : 0
  }
  // Visa is the reference; the rare brands are pooled (too few payments each for a weight of their own).
  values.card_brand_mastercard = input.cardBrand === "mastercard" ? 1 : 0
  values.card_brand_amex = input.cardBrand === "amex" ? 1 : 0
  values.card_brand_other = input.cardBrand === "visa" || input.cardBrand === "mastercard" || input.cardBrand === "amex"
    ? 0
    : 1
  for (const currency of currencies.slice(1)) values[`currency_${currency}`] = input.currency === currency ? 1 : 0
  return values
}

/** A trained model as written by `npm run fraud:train` (src/domain/fraud-models/*.json). */
export interface ModelArtefact {
  readonly version: string
  readonly kind: "logistic-regression"
  /** The intercept on standardised features: the log-odds at the training mean (the base value). */
  readonly bias: number
  readonly features: ReadonlyArray<
    { readonly name: string; readonly mean: number; readonly std: number; readonly weight: number }
  >
  readonly training: Readonly<Record<string, unknown>>
}

export const model: ModelArtefact = trainedModel as ModelArtefact

/** What one feature adds to the log-odds: weight × its standardised deviation from the training mean. */
export const contribution = (feature: ModelArtefact["features"][number], value: number) =>
  feature.weight * (value - feature.mean) / feature.std

export interface Explanation {
  readonly feature: string
  readonly value: number
  readonly contribution: number
}

export interface Assessment {
  /** `sigmoid(output)`, exactly as computed (not rounded): the thresholds compare this very number. */
  readonly score: number
  readonly modelVersion: string
  /** The model's log-odds at the training mean, rounded to 6 decimals. */
  readonly baseValue: number
  /** The model output: log-odds of fraud, `baseValue + Σ contributions` (6 decimals); `score = 1 / (1 + e^−output)`. */
  readonly output: number
  /** One per feature, largest |contribution| first; they sum to `output − baseValue`. */
  readonly explanations: ReadonlyArray<Explanation>
}

/** Explanations are shown in millionths: every value, contribution and the output has at most 6 decimals. */
const millionths = (value: number) => Math.round(value * 1e6)
const round6 = (value: number) => millionths(value) / 1e6
export const sigmoid = (logit: number) => 1 / (1 + Math.exp(-logit))

/**
 * The model output an explanation adds up to: base value + Σ contributions, summed in whole
 * millionths (integers, so exactly and in any order), then read back as the nearest double.
 */
export const modelOutput = (baseValue: number, explanations: ReadonlyArray<{ readonly contribution: number }>) =>
  explanations.reduce((sum, e) => sum + millionths(e.contribution), millionths(baseValue)) / 1e6

/** The unrounded log-odds (training and metrics use it). */
export const logOdds = (values: FraudFeatures, artefact: ModelArtefact = model) =>
  artefact.features.reduce((sum, f) => sum + contribution(f, values[f.name] ?? 0), artefact.bias)

export const assess = (values: FraudFeatures, artefact: ModelArtefact = model): Assessment => {
  const explanations = artefact.features.map((f) => {
    const value = values[f.name] ?? 0
    return { feature: f.name, value: round6(value), contribution: round6(contribution(f, value)) }
  })
  const baseValue = round6(artefact.bias)
  // The output is defined from the rounded contributions, so the documented sum holds exactly
  // (it differs from the unrounded log-odds by at most 0.5e-6 per feature). The score is not
  // rounded: it is the sigmoid of the output the case shows, the very double the thresholds see.
  const output = modelOutput(baseValue, explanations)
  explanations.sort((a, b) => Math.abs(b.contribution) - Math.abs(a.contribution) || a.feature.localeCompare(b.feature))
  return { score: sigmoid(output), modelVersion: artefact.version, baseValue, output, explanations }
}

/** How many contributions a transaction record shows (the fraud case keeps them all). */
export const topContributions = 5

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
  /** The model's base value (log-odds at the training mean): base value + Σ contributions = model output. */
  readonly baseValue: number | null
  readonly explanations: ReadonlyArray<Explanation>
  readonly notes: string | null
  readonly reviewedAt: number | null
  readonly createdAt: number
  readonly updatedAt: number
}
