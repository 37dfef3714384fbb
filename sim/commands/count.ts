import { Context, type Fiber, Tracer } from "effect"
import { Command } from "effect/cli"
import * as Cli from "../../src/platform/Cli.ts"
import { instructionOf } from "../../src/platform/EffectInternals.ts"
import { defaultOptions } from "../engine/Options.ts"
import { runSimulation } from "../engine/Simulator.ts"
import { VirtualTime } from "../engine/VirtualTime.ts"
import { formatReport, scenarioFlags, scenarioOptionsOrExit } from "./main.ts"

/**
 * `npm run sim:count -- --seed 1 --payments 1500 --hours 30`: the work of one simulation in exact,
 * deterministic counts, for comparing changes on a machine whose wall time is noisy. It prints
 * the Effect instructions every fiber ran and the fibers that ran, by instruction kind and by the
 * 40 functions that ran the most. Slower than a plain run; the figures in docs/simulation.md
 * ("Speed") were taken this way.
 *
 * Every fiber of the run starts from the run's services (sim/engine/VirtualTime.ts `runtime`), which here
 * hold Effect's own tracer with a `context` hook: a fiber's loop hands each instruction it runs to
 * that hook, which counts it and runs it. The tracer stays Effect's native one (the HTTP layer
 * skips span work for it), so the run does exactly what a plain run does: same trace hash.
 * Instructions a continuation runs inline, without going back to the loop (a success passed
 * straight to the next `flatMap`, up to 32 deep), are counted from the fiber's `currentOpCount`,
 * as "inline continuation".
 */
const countCommand = Command.make("sim:count", {
  seed: Cli.integer("seed", "the seed of the run", { default: defaultOptions.seed }),
  ...scenarioFlags(defaultOptions),
  json: Cli.toggle("json", "print the counts as JSON instead of the tables")
}).pipe(Command.withDescription(
  "Count the work of one simulation exactly (Effect instructions and fibers, by kind and by function): deterministic figures to compare changes " +
    "on a noisy machine. Prints the run's last summary lines (trace hash) first. Exits 2 on bad arguments."
))

// Parsed before the counting hook below is installed, so that only the simulation's own work is counted.
const input = Cli.parseOrExit(countCommand, process.argv.slice(2))
const options = scenarioOptionsOrExit("sim:count", input, { ...defaultOptions, seed: input.seed })

const byOp = new Map<string, number>()
const byFunction = new Map<string, number>()
const names = new WeakMap<Function, string>()
const seen = new WeakSet<Fiber.Fiber<unknown, unknown>>()
let instructions = 0
let fibers = 0

const nameOf = (f: Function) => {
  let name = names.get(f)
  if (name === undefined) {
    name = f.toString().slice(0, 120).replace(/\s+/g, " ")
    names.set(f, name)
  }
  return name
}

const add = (counts: Map<string, number>, key: string, n: number) => counts.set(key, (counts.get(key) ?? 0) + n)

type Evaluate = <X>(primitive: Tracer.EffectPrimitive<X>, fiber: Fiber.Fiber<any, any>) => X
const counting: Evaluate = (primitive, fiber) => {
  if (!seen.has(fiber)) {
    seen.add(fiber)
    fibers++
  }
  const { fn, kind } = instructionOf(primitive)
  instructions++
  add(byOp, kind, 1)
  if (fn !== undefined) add(byFunction, `${kind} ${nameOf(fn)}`, 1)
  const before = fiber.currentOpCount
  const next = primitive["~effect/Effect/evaluate"](fiber)
  const inline = fiber.currentOpCount - before
  if (inline > 0) {
    instructions += inline
    add(byOp, "inline continuation", inline)
  }
  return next
}
;(Tracer.nativeTracer as { context?: Evaluate }).context = counting

const plain = VirtualTime.prototype.runtime
VirtualTime.prototype.runtime = function(seed, logger) {
  return Context.add(plain.call(this, seed, logger), Tracer.Tracer, Tracer.nativeTracer)
}

const result = runSimulation(options)
const top = (counts: Map<string, number>, n: number) =>
  [...counts].sort((a, b) => b[1] - a[1]).slice(0, n).map(([name, count]) => `${String(count).padStart(10)}  ${name}`)
    .join("\n")
const sorted = (counts: Map<string, number>, n: number) =>
  Object.fromEntries([...counts].sort((a, b) => b[1] - a[1]).slice(0, n))
if (input.json) {
  console.log(JSON.stringify(
    {
      ok: result.ok,
      seed: options.seed,
      traceHash: result.traceHash,
      instructions,
      instructionsPerPayment: Math.round(instructions / Math.max(1, options.payments)),
      fibers,
      fiberTasks: result.tasks,
      byKind: sorted(byOp, 20),
      byFunction: sorted(byFunction, 40)
    },
    null,
    2
  ))
  process.exit(0)
}
console.log(formatReport(result).split("\n").slice(-2).join("\n"))
console.log(
  `Effect instructions ${instructions} (${
    Math.round(instructions / Math.max(1, options.payments))
  } a payment), fibers ${fibers}, fiber tasks ${result.tasks}`
)
console.log(`by kind\n${top(byOp, 20)}\nby function\n${top(byFunction, 40)}`)
