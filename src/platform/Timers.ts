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
  const withScheduler = clock as Clock.Clock & { readonly scheduler?: () => Effect.Effect<Clock.ClockScheduler & Partial<MillisecondScheduler>> }
  if (typeof withScheduler.scheduler !== "function") return Effect.succeed(null)
  return Effect.map(withScheduler.scheduler(), (scheduler): CallbackTimer => {
    // The canceller is handed back as it is (a caller ignores what it answers).
    const inMs = scheduler.unsafeScheduleMs
    // `delayMs > 0 ? delayMs : 0`: as `Duration.millis` reads a negative or NaN delay (now).
    if (inMs !== undefined) return (delayMs, task) => inMs(task, delayMs > 0 ? delayMs : 0)
    return (delayMs, task) => scheduler.unsafeSchedule(task, Duration.millis(Math.max(0, delayMs)))
  })
}

/**
 * What a clock's scheduler may offer besides `unsafeSchedule`: the delay in milliseconds, without
 * a `Duration` made for it and read back (the simulator's virtual clock, ~10 timers a payment).
 */
export interface MillisecondScheduler {
  readonly unsafeScheduleMs: (task: () => void, delayMs: number) => () => boolean
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
