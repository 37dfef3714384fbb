/**
 * `--find-capacity` over a session: one load a step at the rate the search asks for
 * (bench/harness/Capacity.ts), each judged as a run is (the objectives over its judged requests,
 * the saturation verdict), a step that has lost an objective for good stopped at once.
 */
import { type CapacityStep, nextRate } from "./Capacity.ts"
export type { CapacityFigures } from "./Capacity.ts"
import type { LoadModel } from "./LoadModel.ts"
import { abortSpec, driveLoad, judgeLoad, type LoadFigures, type Session } from "./Run.ts"
import { measuredText } from "./Slo.ts"

/** One step, driven and judged. */
const runStep = async (session: Session, rate: number, index: number) => {
  const { options, io } = session
  const stepMs = options.findCapacity!.stepMs
  const model: LoadModel = {
    kind: "open",
    rate,
    arrival: options.model.kind === "open" ? options.model.arrival : "constant"
  }
  const abort = abortSpec(session, model, stepMs, true)
  io.log(`step ${index}: ${rate} requests/s offered for ${stepMs / 1000} s`)
  const figures = await driveLoad(session, {
    model,
    durationMs: stepMs,
    maxRequests: null,
    warmupMs: options.warmupMs,
    label: `step ${index} `,
    ...abort.spec
  })
  const judged = judgeLoad(session, figures, model, false)
  const missed = judged.slo.filter((o) => !o.met).map((o) => `${o.objective} missed (${measuredText(o)})`)
  const lost = abort.watch?.lost() ?? null
  const step: CapacityStep = {
    offered_per_s: rate,
    achieved_per_s: judged.rate,
    requests: figures.judged.requests,
    errors: figures.judged.errors,
    p50_ms: figures.judged.latency_ms.p50,
    p99_ms: figures.judged.latency_ms.p99,
    passed: missed.length === 0 && session.setUp,
    failed_because: missed.length === 0
      ? (session.setUp ? null : "the scenario did not set up")
      : missed.join("; ") + (lost === null ? "" : `; stopped early: ${lost.reason}`),
    driver_bound: judged.saturation.verdict === "the driver fell behind"
  }
  io.log(
    `step ${index}: ${rate}/s offered, ${step.achieved_per_s.toFixed(1)}/s achieved, p50 ${
      step.p50_ms.toFixed(2)
    } ms, p99 ${step.p99_ms.toFixed(2)} ms, ` +
      `${step.errors} errors: ${step.passed ? "passed" : `FAILED (${step.failed_because})`}`
  )
  return { step, figures, model }
}

/** Steps until the search is over; the figures of the highest step that passed (else the last one's). */
export const runCapacitySearch = async (session: Session) => {
  const search = session.options.findCapacity!.search
  const steps: Array<CapacityStep> = []
  let best: { figures: LoadFigures; model: LoadModel; rate: number } | null = null
  let last: { figures: LoadFigures; model: LoadModel } | null = null
  for (let rate = nextRate(steps, search); rate !== null; rate = nextRate(steps, search)) {
    const { step, figures, model } = await runStep(session, rate, steps.length + 1)
    steps.push(step)
    last = { figures, model }
    if (step.passed && (best === null || rate > best.rate)) best = { figures, model, rate }
    if (!session.setUp) break
  }
  const chosen = best ?? last
  const failed = steps.filter((s) => !s.passed).sort((a, b) => a.offered_per_s - b.offered_per_s)[0]
  const limit = failed === undefined ? null : `at ${failed.offered_per_s}/s: ${failed.failed_because}`
  return { steps, chosen, limit }
}
