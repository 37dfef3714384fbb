import { type Clock, Duration, Effect } from "effect"

/** Calls `task` once after `delayMs` on the clock's timer; the returned function cancels it. */
export type CallbackTimer = (delayMs: number, task: () => void) => () => void

/**
 * A timer that calls back without a fiber, from the clock's own scheduler: Effect's default clock
 * (`setTimeout`, the one its `sleep` uses) and the simulator's virtual clock offer one. A fiber
 * that waits on several things at once (a timer and signals) can then be one `Effect.async`
 * instead of a race of forked fibers. Null for a clock without one, such as `TestClock`: the
 * caller falls back to `sleep` and a race.
 */
export const callbackTimerOf = (clock: Clock.Clock): Effect.Effect<CallbackTimer | null> => {
  const withScheduler = clock as Clock.Clock & { readonly scheduler?: () => Effect.Effect<Clock.ClockScheduler> }
  if (typeof withScheduler.scheduler !== "function") return Effect.succeed(null)
  return Effect.map(withScheduler.scheduler(), (scheduler): CallbackTimer => (delayMs, task) => {
    const cancel = scheduler.unsafeSchedule(task, Duration.millis(Math.max(0, delayMs)))
    return () => void cancel()
  })
}
