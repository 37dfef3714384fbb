import { parentPort } from "node:worker_threads"
import type { SimOptions } from "../engine/Options.ts"
import { runSimulation } from "../engine/Simulator.ts"
import type { SeedOutcome } from "./Sweep.ts"

/**
 * One sweep worker (sim/commands/Sweep.ts): runs the seeds it is sent, one at a time, and answers each
 * with its outcome. A run depends only on its options, so which worker runs a seed, and after
 * which others, changes nothing in its result.
 */
parentPort!.on("message", (options: SimOptions) => {
  let outcome: SeedOutcome
  try {
    const result = runSimulation(options)
    const first = result.violations[0]
    outcome = {
      seed: options.seed,
      ok: result.ok,
      firstViolation: first?.invariant ?? null,
      message: first?.message ?? null,
      violations: result.violations.length,
      traceHash: result.traceHash,
      wallMs: result.wallMs
    }
  } catch (error) {
    // A run that throws is a failure of that seed, not of the sweep.
    outcome = {
      seed: options.seed,
      ok: false,
      firstViolation: "crashed",
      message: error instanceof Error ? (error.stack ?? error.message) : String(error),
      violations: 1,
      traceHash: "",
      wallMs: 0
    }
  }
  parentPort!.postMessage(outcome)
})
