/**
 * Reproducible training of the fraud model (docs/fraud-model.md): a labelled synthetic data set
 * drawn from a seeded generator, logistic regression by full-batch gradient descent with a fixed
 * number of iterations on standardised features, and held-out metrics. Pure: the same options
 * give the same artefact, byte for byte (`serialise`).
 */
import {
  cardBrands,
  cardHourMs,
  currencies,
  featureNames,
  features,
  type FraudFeatures,
  type FraudInput,
  logOdds,
  merchantAmountMinimumCount,
  minorUnitsPerMajor,
  type ModelArtefact,
  sigmoid
} from "./Fraud.ts"

/** A small, fast, seeded generator (mulberry32); never Math.random. */
export const seededRandom = (seed: number) => {
  let state = seed >>> 0
  const next = () => {
    state = (state + 0x6d2b79f5) >>> 0
    let t = state
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
  const uniform = (low: number, high: number) => low + (high - low) * next()
  const int = (low: number, high: number) => Math.floor(uniform(low, high + 1))
  const chance = (p: number) => next() < p
  const normal = (mean: number, sd: number) => {
    const u = Math.max(next(), 1e-12)
    return mean + sd * Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * next())
  }
  /** Gamma(shape, 1) by Marsaglia–Tsang (shape < 1 boosted). */
  const gamma = (shape: number): number => {
    if (shape < 1) return gamma(shape + 1) * Math.pow(Math.max(next(), 1e-12), 1 / shape)
    const d = shape - 1 / 3
    const c = 1 / Math.sqrt(9 * d)
    for (;;) {
      const x = normal(0, 1)
      const v = Math.pow(1 + c * x, 3)
      if (v <= 0) continue
      const u = next()
      if (Math.log(Math.max(u, 1e-300)) < 0.5 * x * x + d - d * v + d * Math.log(v)) return d * v
    }
  }
  const beta = (a: number, b: number) => {
    const x = gamma(a)
    return x / (x + gamma(b))
  }
  const weighted = <A extends string>(weights: Readonly<Record<A, number>>): A => {
    const entries = Object.entries(weights) as Array<[A, number]>
    let roll = uniform(0, entries.reduce((sum, [, w]) => sum + w, 0))
    for (const [value, w] of entries) {
      roll -= w
      if (roll < 0) return value
    }
    return entries[entries.length - 1]![0]
  }
  return { next, uniform, int, chance, normal, beta, weighted }
}
type Random = ReturnType<typeof seededRandom>

export type Pattern = "legitimate" | "card_testing" | "amount_spike" | "country_mismatch" | "new_card_high_amount"

export interface Sample {
  readonly pattern: Pattern
  readonly label: 0 | 1
  readonly input: FraudInput
}

/**
 * Generator parameters. The network's risk signal is drawn from Beta(a, b + 1) for legitimate
 * payments and Beta(a + 1, b) for fraud, so that on its own it is calibrated: the posterior
 * log-odds grow with logit(signal) with slope 1 (the likelihood ratio is ∝ s / (1 − s)).
 */
export const generator = {
  version: "synthetic-1",
  fraudRate: 0.04,
  labelNoise: 0.003,
  signalBeta: { a: 0.6, b: 0.6 / 0.04 * 0.96 },
  patterns: { card_testing: 30, amount_spike: 20, country_mismatch: 20, new_card_high_amount: 30 } as Record<
    Exclude<Pattern, "legitimate">,
    number
  >,
  brands: { visa: 50, mastercard: 30, amex: 9, discover: 4, jcb: 2, diners: 1, unionpay: 4 } as Record<
    (typeof cardBrands)[number],
    number
  >,
  currencies: { USD: 40, EUR: 20, GBP: 12, CAD: 10, AUD: 8, JPY: 10 } as Record<(typeof currencies)[number], number>
} as const

const baseTime = Date.UTC(2026, 0, 5)

/** One payment in the shape of a pattern, with its merchant's and card's history. */
const sample = (random: Random, pattern: Pattern): Sample => {
  const fraud = pattern !== "legitimate"
  const currency = random.weighted(generator.currencies)
  // Amounts are drawn in a dollar-like major unit, then scaled to the currency (a yen is about a cent).
  const priceLevel = currency === "JPY" ? 100 : 1
  const usualMajor = Math.pow(10, random.uniform(0.7, 2.4))
  const merchantCount = random.chance(0.15)
    ? random.int(0, merchantAmountMinimumCount - 1)
    : random.int(merchantAmountMinimumCount, 50)
  const { a, b } = generator.signalBeta
  const signal = fraud ? random.beta(a + 1, b) : random.beta(a, b + 1)
  // The hour: fraud a little more often at night (00–06 UTC).
  const night = random.chance(fraud ? 0.3 : 0.24)
  const hour = night ? random.int(0, 5) : random.int(6, 23)
  const createdAt = baseTime + random.int(0, 27) * 86_400_000 + hour * cardHourMs + random.int(0, 3_599_999)
  let amountMajor = usualMajor * Math.pow(10, random.normal(0, 0.25))
  let seenBefore = random.chance(0.6)
  let hourAttempts = 0
  let dayAttempts = 0
  let declines = 0
  let mismatch = random.chance(0.02)
  let metadataPresent = random.chance(0.5)
  const ordinaryHistory = () => {
    if (!seenBefore) return
    hourAttempts = random.chance(0.7) ? 0 : random.int(1, 3)
    if (random.chance(0.1)) hourAttempts = random.int(4, 40) // regulars: top-ups, rides, games, tests of an integration
    dayAttempts = hourAttempts + (random.chance(0.6) ? 0 : random.int(1, 10))
    declines = random.chance(0.95) ? 0 : Math.min(dayAttempts, random.int(1, 2))
  }
  switch (pattern) {
    case "legitimate":
      ordinaryHistory()
      if (random.chance(0.06)) amountMajor = usualMajor * Math.pow(10, random.uniform(0.5, 2.3)) // a big order now and then
      break
    case "card_testing":
      // Bursts of small amounts on a card, many of them declined.
      amountMajor = random.uniform(0.5, 3)
      seenBefore = !random.chance(0.15)
      if (seenBefore) {
        hourAttempts = random.int(3, 25)
        dayAttempts = hourAttempts + random.int(0, 8)
        declines = Math.min(dayAttempts, random.int(1, 10))
      }
      break
    case "amount_spike":
      // A known card suddenly spending far above the merchant's usual amount.
      seenBefore = random.chance(0.8)
      ordinaryHistory()
      amountMajor = usualMajor * Math.pow(10, random.uniform(0.7, 2))
      break
    case "country_mismatch":
      // The buyer's IP country differs from the card's country.
      seenBefore = random.chance(0.3)
      ordinaryHistory()
      metadataPresent = true
      mismatch = random.chance(0.85)
      amountMajor = usualMajor * Math.pow(10, random.normal(0.2, 0.35))
      break
    case "new_card_high_amount":
      // A card never seen at this merchant, going straight for several times the usual amount.
      seenBefore = false
      amountMajor = usualMajor * Math.pow(10, random.uniform(0.4, 1.5))
      break
  }
  const toMinor = (major: number) =>
    Math.min(99_999_999, Math.max(1, Math.round(major * priceLevel * minorUnitsPerMajor(currency))))
  const amountCents = toMinor(amountMajor)
  const usualCents = toMinor(usualMajor * Math.pow(10, random.normal(0, 0.05)))
  const metadata: Record<string, string> = metadataPresent
    ? { ip_country: "US", card_country: mismatch ? random.weighted({ GB: 1, NG: 1, BR: 1, RU: 1, VN: 1 }) : "US" }
    : {}
  const label: 0 | 1 = random.chance(generator.labelNoise) ? (fraud ? 0 : 1) : fraud ? 1 : 0
  return {
    pattern,
    label,
    input: {
      networkRiskSignal: signal,
      amountCents,
      currency,
      cardBrand: random.weighted(generator.brands),
      metadata,
      createdAt,
      history: {
        cardAttemptsLastHour: seenBefore ? hourAttempts : 0,
        cardAttemptsLastDay: seenBefore ? dayAttempts : 0,
        cardDeclinesLastDay: seenBefore ? declines : 0,
        cardSeenBefore: seenBefore,
        merchantAmountCount: merchantCount,
        merchantAmountSumCents: merchantCount * usualCents
      }
    }
  }
}

/** A labelled data set of `size` payments, drawn from `seed`. */
export const generate = (seed: number, size: number): Array<Sample> => {
  const random = seededRandom(seed)
  return Array.from(
    { length: size },
    () => sample(random, random.chance(generator.fraudRate) ? random.weighted(generator.patterns) : "legitimate")
  )
}

export interface TrainingOptions {
  readonly seed: number
  readonly samples: number
  /** Share of the data set held out for the metrics (the last part). */
  readonly holdout: number
  readonly iterations: number
  readonly learningRate: number
  readonly l2: number
  /**
   * A stronger L2 on the brand and currency indicators: the generator gives them no effect, and
   * rare categories would otherwise learn noise large enough to move a payment across a band.
   */
  readonly l2Indicators: number
  readonly version: string
}

export const defaultTrainingOptions: TrainingOptions = {
  seed: 11,
  samples: 80_000,
  holdout: 0.25,
  iterations: 1_500,
  learningRate: 1,
  l2: 0.005,
  l2Indicators: 0.5,
  version: "trained-logistic-2"
}

/** Numbers in the artefact are rounded so that it reads the same on any platform. */
const round = (value: number, digits = 10) => {
  const factor = Math.pow(10, digits)
  const rounded = Math.round(value * factor) / factor
  return Object.is(rounded, -0) ? 0 : rounded
}

export interface Metrics {
  readonly samples: number
  readonly positives: number
  readonly auc: number
  readonly atThresholds: ReadonlyArray<
    { readonly threshold: number; readonly precision: number | null; readonly recall: number; readonly flagged: number }
  >
  readonly calibration: ReadonlyArray<
    {
      readonly from: number
      readonly to: number
      readonly count: number
      readonly meanScore: number | null
      readonly fraudRate: number | null
    }
  >
}

/** AUC by ranks (Mann–Whitney), ties sharing their mean rank. */
export const areaUnderCurve = (scores: ReadonlyArray<number>, labels: ReadonlyArray<0 | 1>) => {
  const order = scores.map((score, i) => ({ score, label: labels[i]! })).sort((x, y) => x.score - y.score)
  let rankSum = 0
  let positives = 0
  for (let i = 0; i < order.length;) {
    let j = i
    while (j < order.length && order[j]!.score === order[i]!.score) j++
    const meanRank = (i + 1 + j) / 2
    for (let k = i; k < j; k++) {
      if (order[k]!.label === 1) {
        rankSum += meanRank
        positives++
      }
    }
    i = j
  }
  const negatives = order.length - positives
  return positives === 0 || negatives === 0
    ? 0.5
    : (rankSum - (positives * (positives + 1)) / 2) / (positives * negatives)
}

export const evaluate = (
  scores: ReadonlyArray<number>,
  labels: ReadonlyArray<0 | 1>,
  thresholds: ReadonlyArray<number>
): Metrics => {
  const positives = labels.filter((l) => l === 1).length
  const atThresholds = thresholds.map((threshold) => {
    let flagged = 0
    let hits = 0
    scores.forEach((s, i) => {
      if (s < threshold) return
      flagged++
      if (labels[i] === 1) hits++
    })
    return {
      threshold,
      precision: flagged === 0 ? null : round(hits / flagged, 4),
      recall: positives === 0 ? 0 : round(hits / positives, 4),
      flagged
    }
  })
  const edges = [0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.000001]
  const calibration = edges.slice(0, -1).map((from, i) => {
    const to = edges[i + 1]!
    const inBin = scores.map((s, k) => ({ s, l: labels[k]! })).filter(({ s }) => s >= from && s < to)
    return {
      from,
      to: Math.min(1, to),
      count: inBin.length,
      meanScore: inBin.length === 0 ? null : round(inBin.reduce((sum, x) => sum + x.s, 0) / inBin.length, 4),
      fraudRate: inBin.length === 0 ? null : round(inBin.filter((x) => x.l === 1).length / inBin.length, 4)
    }
  })
  return { samples: scores.length, positives, auc: round(areaUnderCurve(scores, labels), 4), atThresholds, calibration }
}

/**
 * Logistic regression by full-batch gradient descent on standardised features: a fixed number
 * of iterations, a fixed step, a small L2 penalty on the weights (not the intercept).
 */
export const fit = (rows: ReadonlyArray<FraudFeatures>, labels: ReadonlyArray<0 | 1>, options: TrainingOptions) => {
  const names = [...featureNames]
  const n = rows.length
  const columns = names.map((name) => Float64Array.from(rows, (r) => r[name] ?? 0))
  const stats = columns.map((column) => {
    const mean = column.reduce((sum, v) => sum + v, 0) / n
    const variance = column.reduce((sum, v) => sum + (v - mean) * (v - mean), 0) / n
    const std = Math.sqrt(variance)
    return { mean, std: std > 1e-12 ? std : 1 }
  })
  const standardised = columns.map((column, j) => column.map((v) => (v - stats[j]!.mean) / stats[j]!.std))
  const weights = new Float64Array(names.length)
  const prior = labels.reduce<number>((sum, l) => sum + l, 0) / n
  let bias = Math.log(Math.max(prior, 1e-6) / Math.max(1 - prior, 1e-6))
  const residual = new Float64Array(n)
  for (let iteration = 0; iteration < options.iterations; iteration++) {
    for (let i = 0; i < n; i++) {
      let z = bias
      for (let j = 0; j < names.length; j++) z += weights[j]! * standardised[j]![i]!
      residual[i] = sigmoid(z) - labels[i]!
    }
    let biasGradient = 0
    for (let i = 0; i < n; i++) biasGradient += residual[i]!
    bias -= (options.learningRate * biasGradient) / n
    for (let j = 0; j < names.length; j++) {
      const column = standardised[j]!
      let gradient = 0
      for (let i = 0; i < n; i++) gradient += residual[i]! * column[i]!
      const penalty = /^(card_brand_|currency_)/.test(names[j]!) ? options.l2Indicators : options.l2
      weights[j] = weights[j]! - options.learningRate * (gradient / n + penalty * weights[j]!)
    }
  }
  return {
    bias: round(bias),
    features: names.map((name, j) => ({
      name,
      mean: round(stats[j]!.mean),
      std: round(stats[j]!.std),
      weight: round(weights[j]!)
    }))
  }
}

export interface TrainingResult {
  readonly artefact: ModelArtefact
  readonly metrics: Metrics
  readonly baseline: { readonly auc: number }
}

/** Generates the data set, trains on the first part and measures on the held-out rest. */
export const train = (options: TrainingOptions, thresholds: ReadonlyArray<number> = [0.5, 0.8]): TrainingResult => {
  const data = generate(options.seed, options.samples)
  const cut = Math.floor(data.length * (1 - options.holdout))
  const training = data.slice(0, cut)
  const heldOut = data.slice(cut)
  const fitted = fit(training.map((s) => features(s.input)), training.map((s) => s.label), options)
  const artefactWithoutMetrics = {
    version: options.version,
    kind: "logistic-regression" as const,
    bias: fitted.bias,
    features: fitted.features,
    training: {}
  }
  const labels = heldOut.map((s) => s.label)
  const scores = heldOut.map((s) => sigmoid(logOdds(features(s.input), artefactWithoutMetrics)))
  const metrics = evaluate(scores, labels, thresholds)
  // For comparison: the network's signal alone.
  const baseline = { auc: round(areaUnderCurve(heldOut.map((s) => s.input.networkRiskSignal), labels), 4) }
  const artefact: ModelArtefact = {
    ...artefactWithoutMetrics,
    training: {
      command: `npm run fraud:train -- --seed ${options.seed}`,
      generator: generator.version,
      seed: options.seed,
      samples: options.samples,
      holdout: options.holdout,
      iterations: options.iterations,
      learning_rate: options.learningRate,
      l2: options.l2,
      l2_indicators: options.l2Indicators,
      held_out: {
        samples: metrics.samples,
        positives: metrics.positives,
        auc: metrics.auc,
        network_signal_auc: baseline.auc,
        at_thresholds: metrics.atThresholds
      }
    }
  }
  return { artefact, metrics, baseline }
}

/** The artefact as written to disk: stable key order, two-space indentation, a final newline. */
export const serialise = (artefact: ModelArtefact) => `${JSON.stringify(artefact, null, 2)}\n`
