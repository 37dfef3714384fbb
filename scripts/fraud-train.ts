/**
 * Trains the fraud model on a seeded synthetic data set and writes its artefact
 * (docs/fraud-model.md). The same options give a byte-identical file.
 *
 *   npm run fraud:train -- --seed 11 [--samples 60000] [--iterations 600] [--version V] [--out src/domain/fraud-models/trained-logistic-2.json] [--json]
 */
import { Command, Flag } from "effect/cli"
import { createHash } from "node:crypto"
import { writeFileSync } from "node:fs"
import { defaultTrainingOptions, serialise, train } from "../src/domain/FraudTraining.ts"
import * as Cli from "../src/platform/Cli.ts"

const trainCommand = Command.make("fraud:train", {
  seed: Cli.integer("seed", "the seed of the synthetic data set and of the training", {
    default: defaultTrainingOptions.seed
  }),
  samples: Cli.integer("samples", "synthetic payments to train and evaluate on", {
    min: 1,
    default: defaultTrainingOptions.samples
  }),
  iterations: Cli.integer("iterations", "gradient descent iterations", {
    min: 1,
    default: defaultTrainingOptions.iterations
  }),
  version: Cli.text("version", "the model's version, also the artefact's file name", {
    default: defaultTrainingOptions.version
  }),
  out: Cli.text("out", "the artefact to write (default: src/domain/fraud-models/<version>.json)").pipe(Flag.optional),
  json: Cli.toggle("json", "print the evaluation as JSON instead of the tables")
}).pipe(Command.withDescription(
  "Train the fraud model on a seeded synthetic data set and write its artefact (docs/fraud-model.md); the same options give a byte-identical file. " +
    "Prints the held-out evaluation. Exits 2 on bad arguments."
))

const flags = Cli.parseOrExit(trainCommand, process.argv.slice(2))
const options = {
  ...defaultTrainingOptions,
  seed: flags.seed,
  samples: flags.samples,
  iterations: flags.iterations,
  version: flags.version
}
const out = Cli.given(flags.out) ?? `src/domain/fraud-models/${options.version}.json`
const { artefact, metrics, baseline } = train(options)
const text = serialise(artefact)
writeFileSync(out, text)
const sha256 = createHash("sha256").update(text).digest("hex")

const percent = (
  value: number | null
) => (value === null || !Number.isFinite(value) ? "n/a" : `${(value * 100).toFixed(1)}%`)
if (flags.json) {
  console.log(
    JSON.stringify({ model: artefact.version, options, out, sha256, metrics, baselineAuc: baseline.auc }, null, 2)
  )
} else {
  console.log(
    `model ${artefact.version}: seed ${options.seed}, ${options.samples} samples, ${options.iterations} iterations`
  )
  console.log(`held out: ${metrics.samples} payments, ${metrics.positives} fraud`)
  console.log(`AUC ${metrics.auc.toFixed(4)} (network signal alone: ${baseline.auc.toFixed(4)})`)
  console.log("")
  console.log(
    Cli.table(
      ["score ≥", "precision", "recall", "flagged"],
      metrics.atThresholds.map((t) => [t.threshold.toFixed(2), percent(t.precision), percent(t.recall), t.flagged]),
      "  "
    )
  )
  console.log("\ncalibration (held out)")
  console.log(Cli.table(
    ["score band", "payments", "mean score", "fraud rate"],
    metrics.calibration.map((
      bin
    ) => [`${bin.from.toFixed(2)}–${bin.to.toFixed(2)}`, bin.count, percent(bin.meanScore), percent(bin.fraudRate)]),
    "  "
  ))
  console.log("\nweights (standardised features)")
  console.log(Cli.table(
    ["feature", "weight", "mean", "std"],
    [...artefact.features.map((f) => [f.name, f.weight.toFixed(4), f.mean.toFixed(4), f.std.toFixed(4)]), [
      "(intercept: base value)",
      artefact.bias.toFixed(4),
      "",
      ""
    ]],
    "  "
  ))
  console.log(`\nwrote ${out} (sha256 ${sha256})`)
}
