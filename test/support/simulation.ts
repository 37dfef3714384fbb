import type { runSimulation } from "../../sim/engine/Simulator.ts"

/** "ok", or a run's violations and the tail of its trace: what an assertion on a simulation shows when it fails. */
export const describeFailure = (result: ReturnType<typeof runSimulation>) =>
  result.ok
    ? "ok"
    : `${result.violations.map((v) => `[${v.invariant}] ${v.message}`).join("\n")}\n${result.traceTail.join("\n")}`
