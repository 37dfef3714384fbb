import { Effect, Runtime, RuntimeFlags, RuntimeFlagsPatch, Supervisor } from "effect"
import { formatReport, parseArguments } from "./main.ts"
import { runSimulation } from "./Simulator.ts"
import { VirtualTime } from "./VirtualTime.ts"

/**
 * `npm run sim:count -- --seed 1 --payments 1500 --hours 30`: the work of one simulation in exact,
 * deterministic counts, for comparing changes on a machine whose wall time is noisy. It prints
 * the Effect instructions every fiber ran and the fibers started (a counting `Supervisor` with op
 * supervision on), by instruction kind and by the 40 functions that ran the most. Slower than a
 * plain run (every instruction goes through the supervisor); the figures in docs/simulation.md
 * ("Speed") were taken this way.
 */
const byOp = new Map<string, number>()
const byFunction = new Map<string, number>()
const names = new WeakMap<object, string>()
let instructions = 0
let fibers = 0

const nameOf = (f: unknown) => {
  if (typeof f !== "function") return undefined
  let name = names.get(f)
  if (name === undefined) {
    name = f.toString().slice(0, 120).replace(/\s+/g, " ")
    names.set(f, name)
  }
  return name
}

class Counting extends Supervisor.AbstractSupervisor<void> {
  readonly value = Effect.void
  override onStart() {
    fibers++
  }
  override onEffect(_fiber: unknown, effect: unknown) {
    instructions++
    const e = effect as { readonly _op: string; readonly effect_instruction_i0?: unknown; readonly effect_instruction_i1?: unknown; readonly effect_instruction_i2?: unknown }
    byOp.set(e._op, (byOp.get(e._op) ?? 0) + 1)
    const f = e._op.startsWith("On") ? e.effect_instruction_i1 ?? e.effect_instruction_i2 : e.effect_instruction_i0
    const name = nameOf(f)
    if (name !== undefined) byFunction.set(`${e._op} ${name}`, (byFunction.get(`${e._op} ${name}`) ?? 0) + 1)
  }
}
const counting = new Counting()
const supervise = RuntimeFlagsPatch.enable(RuntimeFlags.OpSupervision)

// Every fiber the simulation forks from its runtime, and those started from the default runtime
// (FiberMap.run starts the payment flows there), report to the counting supervisor.
const plain = VirtualTime.prototype.runtime
VirtualTime.prototype.runtime = function(seed, logger) {
  const runtime = plain.call(this, seed, logger)
  return Effect.runSync(Effect.runtime<never>().pipe(Effect.provide(runtime), Effect.supervised(counting), Effect.withRuntimeFlagsPatch(supervise)))
}
;(Runtime.defaultRuntime as { runtimeFlags: RuntimeFlags.RuntimeFlags }).runtimeFlags = RuntimeFlags.enable(Runtime.defaultRuntime.runtimeFlags, RuntimeFlags.OpSupervision)

const { options } = parseArguments(process.argv.slice(2))
const result = runSimulation(options)
const top = (counts: Map<string, number>, n: number) =>
  [...counts].sort((a, b) => b[1] - a[1]).slice(0, n).map(([name, count]) => `${String(count).padStart(10)}  ${name}`).join("\n")
console.log(formatReport(result).split("\n").slice(-2).join("\n"))
console.log(`Effect instructions ${instructions} (${Math.round(instructions / Math.max(1, options.payments))} a payment), fibers ${fibers}, fiber tasks ${result.tasks}`)
console.log(`by kind\n${top(byOp, 20)}\nby function\n${top(byFunction, 40)}`)
