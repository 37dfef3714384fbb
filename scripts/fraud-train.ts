/**
 * Trains the fraud model on a seeded synthetic data set and writes its artefact
 * (docs/fraud-model.md). The same options give a byte-identical file.
 *
 *   npm run fraud:train -- --seed 11 [--samples 60000] [--iterations 600] [--out src/domain/fraud-models/trained-logistic-2.json]
 */
import { createHash } from "node:crypto"
import { writeFileSync } from "node:fs"
import { defaultTrainingOptions, serialise, train } from "../src/domain/FraudTraining.ts"

const argument = (name: string) => {
  const at = process.argv.indexOf(`--${name}`)
  return at === -1 ? undefined : process.argv[at + 1]
}
const integer = (name: string, fallback: number) => {
  const text = argument(name)
  if (text === undefined) return fallback
  const value = Number(text)
  if (!Number.isSafeInteger(value) || value < 0) {
    console.error(`--${name} must be a non-negative integer, not ${text}`)
    process.exit(2)
  }
  return value
}

const options = {
  ...defaultTrainingOptions,
  seed: integer("seed", defaultTrainingOptions.seed),
  samples: integer("samples", defaultTrainingOptions.samples),
  iterations: integer("iterations", defaultTrainingOptions.iterations),
  version: argument("version") ?? defaultTrainingOptions.version
}
const out = argument("out") ?? `src/domain/fraud-models/${options.version}.json`
const { artefact, metrics, baseline } = train(options)
const text = serialise(artefact)
writeFileSync(out, text)

const percent = (value: number | null) => (value === null ? "   n/a" : `${(value * 100).toFixed(1).padStart(5)}%`)
console.log(`model ${artefact.version}: seed ${options.seed}, ${options.samples} samples, ${options.iterations} iterations`)
console.log(`held out: ${metrics.samples} payments, ${metrics.positives} fraud`)
console.log(`AUC ${metrics.auc.toFixed(4)} (network signal alone: ${baseline.auc.toFixed(4)})`)
for (const t of metrics.atThresholds) {
  console.log(`score ≥ ${t.threshold.toFixed(2)}: precision ${percent(t.precision)}  recall ${percent(t.recall)}  flagged ${t.flagged}`)
}
console.log("\ncalibration (held out)\n  score band     payments  mean score  fraud rate")
for (const bin of metrics.calibration) {
  console.log(`  ${bin.from.toFixed(2)}–${bin.to.toFixed(2)}  ${String(bin.count).padStart(10)}  ${percent(bin.meanScore).padStart(10)}  ${percent(bin.fraudRate).padStart(10)}`)
}
console.log("\nweights (standardised features)")
for (const f of artefact.features) console.log(`  ${f.name.padEnd(28)} ${f.weight.toFixed(4).padStart(9)}   mean ${f.mean.toFixed(4)}  std ${f.std.toFixed(4)}`)
console.log(`  ${"(intercept: base value)".padEnd(28)} ${artefact.bias.toFixed(4).padStart(9)}`)
console.log(`\nwrote ${out} (sha256 ${createHash("sha256").update(text).digest("hex")})`)
