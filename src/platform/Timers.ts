import type { Clock } from "effect"
import { Effect } from "effect"
import { isDefaultClock } from "./EffectInternals.ts"

/** Calls `task` once after `delayMs` on the clock's timer; the returned function cancels it. */
export type CallbackTimer = (delayMs: number, task: () => void) => () => void

/**
 * A timer that calls back without a fiber: Effect's default clock (`setTimeout`, the one its
 * `sleep` uses) and a clock that offers `scheduleMs` of its own (a virtual clock) have one. A
 * fiber that waits on several things at once (a timer and signals) can then be one
 * `Effect.callback` instead of a race of forked fibers. Null for any other clock, such as
 * `TestClock`: the caller falls back to `sleep` and a race. Effect 4's clocks have no scheduler of
 * their own to ask: the default clock is recognised as src/platform/EffectInternals.ts says.
 */
export const callbackTimerOf = (clock: Clock.Clock): Effect.Effect<CallbackTimer | null> => {
  const own = (clock as Clock.Clock & Partial<MillisecondScheduler>).scheduleMs
  if (typeof own === "function") {
    return Effect.succeed((delayMs, task) => own.call(clock, task, delayMs > 0 ? delayMs : 0))
  }
  if (isDefaultClock(clock)) return Effect.succeed(ioDeadlineTimer)
  return Effect.succeed(null)
}

/** What a clock may offer to call back after a delay in milliseconds (the simulator's virtual clock). */
export interface MillisecondScheduler {
  readonly scheduleMs: (task: () => void, delayMs: number) => () => void
}

/**
 * The wall clock's timer, for the deadlines of real I/O only: how long a PostgreSQL connection may
 * leave a statement unanswered is a property of that socket, not of the application's time (the
 * `pg` driver's own `query_timeout` runs on the same timer). Application and domain time goes
 * through the `Clock` service, so the simulator can replay it; no adapter the simulator runs may
 * use this.
 */
export const ioDeadlineTimer: CallbackTimer = (delayMs, task) => {
  const handle = setTimeout(task, delayMs > 0 ? delayMs : 0)
  return () => clearTimeout(handle)
}
