import { Clock, Effect, type Fiber } from "effect"

/**
 * The places where this project relies on how Effect is built rather than on its public API.
 * Each is needed on a hot path; each has a guard in test/platform/effect-internals.test.ts that
 * fails loudly when an upgrade of `effect` changes what it relies on. Nothing else in src/ may
 * reach past Effect's public API: add a use here, with its reason and its guard, or not at all.
 */

/**
 * 1. Recognising Effect's default clock. Effect 4's `Clock` has no scheduler of its own to ask,
 * and the default clock's timers are `setTimeout` (the one `Effect.sleep` uses): a worker that
 * waits on a timer and on signals at once can then be one `Effect.callback` instead of a race of
 * forked fibers (src/platform/Timers.ts). The default clock is the instance a fiber without
 * services finds; it is recognised by its class (its prototype), which Effect does not export.
 * Guard: the default clock is recognised, TestClock is not.
 */
const defaultClockPrototype: object | null = Object.getPrototypeOf(Effect.runSync(Clock.clockWith(Effect.succeed)))

export const isDefaultClock = (clock: Clock.Clock): boolean => Object.getPrototypeOf(clock) === defaultClockPrototype

/**
 * 2. Errors without a stack trace. Answers built on everyday requests (404, 409, 422: the
 * services' outcomes and ApiError) are never shown with a stack, and capturing one costs more
 * than the rest of the error. Effect's error classes (`Data.Error`, `Data.TaggedError`) capture
 * it in their constructor, through `Error`'s: the constructor runs with `Error.stackTraceLimit`
 * at 0. Guard: such an error's stack names no frame, and one of the same class without this
 * wrapper does (so the guard notices when Effect stops capturing there, or captures elsewhere).
 */
export const withoutStack = <Args extends ReadonlyArray<unknown>, T>(Base: new(...args: Args) => T) =>
  class extends (Base as new(...args: Array<any>) => object) {
    constructor(...args: Array<any>) {
      const stackTraceLimit = Error.stackTraceLimit
      Error.stackTraceLimit = 0
      try {
        super(...args)
      } finally {
        Error.stackTraceLimit = stackTraceLimit
      }
    }
  } as unknown as new(...args: Args) => T

/**
 * 3. Whether a fiber has been asked to stop while it could not be (an interrupt recorded during an
 * uninterruptible region, to take effect when the region ends). Effect 4 keeps it in a private
 * field of its fibers and offers no accessor; only tests read it, to know that a request was
 * interrupted by its client hanging up while its statement was provably on its way
 * (test/http/hang-up-claim.test.ts). Guard: an uninterruptible fiber that was interrupted has
 * one; a running fiber that was not has none.
 */
export const hasPendingInterrupt = (fiber: Fiber.Fiber<unknown, unknown>): boolean =>
  (fiber as unknown as { readonly _interruptedCause?: unknown })._interruptedCause !== undefined

/**
 * 4. What an Effect instruction is, for counting the instructions of a run (sim/commands/count.ts). A
 * tracer's `context` hook (public) is handed every instruction a fiber's loop runs; what kind it is
 * and which function it carries are kept under keys Effect does not export: the kind under
 * `~effect/Effect/identifier` ("Sync", "Suspend", "OnSuccess", ...), the thunk or the effect it
 * continues under `~effect/Effect/args`, a continuation's function under
 * `~effect/Effect/successCont` or, when that function is shared, its `payload`. Only the counting
 * script reads them. Guard: `Effect.sync`'s instruction is a "Sync" carrying its thunk, a
 * `flatMap`'s an "OnSuccess" carrying its function.
 */
export interface Instruction {
  readonly kind: string
  /** The function the instruction runs (a thunk, a continuation), when it carries one. */
  readonly fn: Function | undefined
}

export const instructionOf = (primitive: unknown): Instruction => {
  const p = primitive as Record<string, unknown>
  const kind = typeof p["~effect/Effect/identifier"] === "string" ? p["~effect/Effect/identifier"] as string : "unknown"
  const candidates = [
    p["~effect/Effect/args"],
    p["payload"],
    p["~effect/Effect/successCont"],
    p["~effect/Effect/failureCont"]
  ]
  const fn = candidates.find((c): c is Function => typeof c === "function")
  return { kind, fn }
}
