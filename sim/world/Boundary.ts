import { ordinaryRiskSignal } from "../../src/acquirer/Acquirer.ts"
import { contribution, features, minorUnitsPerMajor, model, noHistory } from "../../src/domain/Fraud.ts"

/**
 * Boundary-directed payments: the amount, card brand, currency and country metadata of a
 * payment made with a card never used before, chosen so that its fraud score lands exactly on a
 * documented threshold (or on the nearest score either side), where a comparison written the
 * wrong way (`>` for `≥`) shows. Random amounts almost never get there: the model output has 6
 * decimals, so one output in millions sits on the line.
 *
 * The model output is `base + Σ contributions` in whole millionths (docs/fraud-model.md), and the
 * score `1 / (1 + e^−output)`. 0.50 is output 0 exactly. No output with 6 decimals scores exactly
 * 0.80 (`1 / (1 + e^−1.386294)` = 0.79999994, `1 / (1 + e^−1.386295)` = 0.80000010): the two
 * outputs either side are the targets for the block threshold, with −0.000001 for the review one.
 *
 * The search uses src/domain's own `features` and `contribution` (aiming is not judging: the
 * auditor's laws stay independent), on the history the merchant is expected to have: a fresh card
 * (seen nowhere, no attempts, no declines) and the merchant's last payments in the currency as the
 * workload knows them. When the prediction is off (a create the client never heard of, a racing
 * payment) the score lands near the threshold instead.
 */

/** Target outputs in millionths: below and on the review threshold, below and above the block one. */
export const boundaryTargets: ReadonlyArray<number> = [-1, 0, 1_386_294, 1_386_295]

const maximumAmountCents = 99_999_999
const mismatched: Readonly<Record<string, string>> = { ip_country: "US", card_country: "GB" }
const noMetadata: Readonly<Record<string, string>> = {}
/** Below this many earlier payments in a currency the merchant's usual amount is unknown (`merchantAmountMinimumCount`). */
const minimumCount = 5

export interface BoundaryPlan {
  readonly amountCents: number
  readonly currency: string
  readonly cardBrand: string
  /** Send `ip_country` and `card_country` that differ (the `country_mismatch` feature). */
  readonly countryMismatch: boolean
  /** The output (millionths) the plan predicts: the target. */
  readonly outputMillionths: number
}

/** The merchant's last payments in a currency, as the workload knows them. */
export interface AmountHistory {
  readonly count: number
  readonly sumCents: number
}

/** The model output in millionths, as `Fraud.assess` sums it. */
const outputMillionths = (values: Readonly<Record<string, number>>) => {
  let sum = Math.round(model.bias * 1e6)
  for (const f of model.features) sum += Math.round(contribution(f, values[f.name] ?? 0) * 1e6)
  return sum
}

/** The features that move with the amount (as `Fraud.features` computes them, for a card never seen before). */
const amountFeatureNames = new Set(["amount_log10", "amount_vs_merchant_log10", "new_card_above_usual_log10"])
const amountModel = model.features.filter((f) => amountFeatureNames.has(f.name))
const fixedModel = model.features.filter((f) => !amountFeatureNames.has(f.name))

const fixedMillionths = (values: Readonly<Record<string, number>>) => {
  let sum = Math.round(model.bias * 1e6)
  for (const f of fixedModel) sum += Math.round(contribution(f, values[f.name] ?? 0) * 1e6)
  return sum
}

const amountMillionths = (amountCents: number, currency: string, count: number, sumCents: number) => {
  const vs = count >= minimumCount && sumCents > 0
    ? Math.min(1, Math.max(0, Math.log10((amountCents * count) / sumCents)))
    : 0
  let sum = 0
  for (const f of amountModel) {
    const value = f.name === "amount_log10" ? Math.log10(1 + amountCents / minorUnitsPerMajor(currency)) : vs
    sum += Math.round(contribution(f, value) * 1e6)
  }
  return sum
}

/**
 * A plan whose predicted output is exactly `target` (millionths), trying the currencies and
 * brands in the order given, or null when none reaches it. `createdAt` (ms) is when the create is sent
 * (the night feature reads its UTC hour).
 */
export const planBoundary = (
  target: number,
  currencies: ReadonlyArray<string>,
  brands: ReadonlyArray<string>,
  historyOf: (currency: string) => AmountHistory,
  createdAt: number
): BoundaryPlan | null => {
  for (const countryMismatch of [true, false]) {
    for (const currency of currencies) {
      const known = historyOf(currency)
      const history = {
        ...noHistory,
        merchantAmountCount: Math.min(known.count, 50),
        merchantAmountSumCents: known.sumCents
      }
      for (const cardBrand of brands) {
        const inputAt = (amountCents: number) => ({
          networkRiskSignal: ordinaryRiskSignal,
          amountCents,
          currency,
          cardBrand,
          metadata: countryMismatch ? mismatched : noMetadata,
          createdAt,
          history
        })
        // The features that do not move with the amount, summed once; the three that do
        // (`amountFeatures`) per amount tried. The amount found is checked with `features` whole.
        const fixed = fixedMillionths(features(inputAt(1)))
        const at = (amountCents: number) =>
          fixed + amountMillionths(amountCents, currency, history.merchantAmountCount, history.merchantAmountSumCents)
        // Monotone pieces of the output in the amount: below the merchant's usual amount and at
        // ten times it or more the amount feature alone moves it (down); between, the amount
        // against the usual one does (up).
        const usual = history.merchantAmountCount >= minimumCount && history.merchantAmountSumCents > 0
          ? history.merchantAmountSumCents / history.merchantAmountCount
          : Infinity
        const cuts = [
          1,
          Math.min(maximumAmountCents, Math.ceil(usual)),
          Math.min(maximumAmountCents, Math.ceil(10 * usual)),
          maximumAmountCents
        ]
        for (let i = 0; i + 1 < cuts.length; i++) {
          const found = crossing(at, cuts[i]!, cuts[i + 1]!, target)
          if (found !== null && outputMillionths(features(inputAt(found))) === target) {
            return { amountCents: found, currency, cardBrand, countryMismatch, outputMillionths: target }
          }
        }
      }
    }
  }
  return null
}

/** An amount in [low, high] where the monotone `at` equals `target` exactly (null: none near its crossing). */
const crossing = (at: (amountCents: number) => number, low: number, high: number, target: number): number | null => {
  if (high <= low) return null
  const lowValue = at(low)
  const highValue = at(high)
  if (Math.min(lowValue, highValue) > target || Math.max(lowValue, highValue) < target) return null
  const rising = highValue >= lowValue
  // The first amount whose output is at or past the target (in the direction of the piece).
  let a = low
  let b = high
  while (b - a > 1) {
    const middle = Math.floor((a + b) / 2)
    const value = at(middle)
    if (rising ? value >= target : value <= target) b = middle
    else a = middle
  }
  for (let amount = Math.max(low, a - 2); amount <= Math.min(high, b + 2); amount++) {
    if (at(amount) === target) return amount
  }
  return null
}
