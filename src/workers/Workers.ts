import { Clock, Duration, Effect, Layer, Schedule } from "effect"
import { AppConfig } from "../platform/Config.ts"
import * as Metrics from "../platform/Metrics.ts"
import { addMs, isoAt, nowIso } from "../platform/Time.ts"
import { Payments, resumeBatch } from "../services/Payments.ts"
import { Store } from "../store/Store.ts"

/** How long a flow may sit untouched before another process presumes its owner dead and resumes it. */
export const staleFlowMs = 60_000
const recoveryInterval = Duration.seconds(30)
const maximumStartBatches = 200

/**
 * Recovery: at start every payment left in flight (by a crash) has its flow resumed; afterwards,
 * every 30 s, flows untouched for a minute (their process died) are resumed.
 */
export const recovery = Layer.effectDiscard(
  Effect.gen(function*() {
    const payments = yield* Payments
    // Batch after batch; bounded, so a failing database cannot keep the start looping (the
    // periodic pass below picks up whatever is left).
    const resumeAll = Effect.gen(function*() {
      const now = yield* nowIso
      for (let batch = 0; batch < maximumStartBatches; batch++) {
        const resumed = yield* payments.resumeFlows(addMs(now, 1))
        Metrics.record(Metrics.recoveredPayments, resumed)
        if (resumed < resumeBatch) break
      }
      Metrics.record(Metrics.recoveryRuns("ok"), 1)
    }).pipe(Effect.tapError(() => Effect.sync(() => Metrics.record(Metrics.recoveryRuns("failed"), 1))))
    // In the background: serving does not wait for old flows (each waits on its payment's row).
    yield* Effect.forkScoped(resumeAll.pipe(Effect.catch((error) => Effect.logWarning("recovery at start failed", error))))
    // One pass in a handful of steps (it runs every 30 s, and nearly always finds nothing).
    const pass = Effect.clockWith((clock) => payments.resumeFlows(isoAt(clock.currentTimeMillisUnsafe() - staleFlowMs))).pipe(
      Effect.matchEffect({
        onFailure: (error) =>
          Effect.andThen(Effect.sync(() => Metrics.record(Metrics.recoveryRuns("failed"), 1)), Effect.logWarning("recovery pass failed", error)),
        onSuccess: (resumed) => {
          Metrics.record(Metrics.recoveryRuns("ok"), 1)
          Metrics.record(Metrics.recoveredPayments, resumed)
          return resumed > 0 ? Effect.logInfo(`recovery resumed ${resumed} stale payment flows`) : Effect.void
        }
      })
    )
    // A pass every 30 s after the last one ended (a plain loop: a Schedule's driver costs more
    // than the pass itself finding nothing, which is what it does nearly every time).
    const passes: Effect.Effect<never> = Effect.andThen(Effect.sleep(recoveryInterval), Effect.andThen(pass, Effect.suspend(() => passes)))
    yield* Effect.forkScoped(passes)
  })
)

const dayMs = 86_400_000

/** The next daily cut-off strictly after `nowMs`, at `cutoffMinutes` past midnight UTC. */
export const nextCutoffMs = (nowMs: number, cutoffMinutes: number) => {
  const midnight = Math.floor(nowMs / dayMs) * dayMs
  const today = midnight + cutoffMinutes * 60_000
  return today > nowMs ? today : today + dayMs
}

/** Retries of a failed settlement sweep: 1 s doubling up to every 5 minutes, for at most 23 hours. */
export const settlementRetry = Schedule.min([Schedule.exponential(Duration.seconds(1), 2), Schedule.spaced(Duration.minutes(5))]).pipe(
  Schedule.upTo({ duration: Duration.hours(23) })
)

/**
 * Settlement: at every daily cut-off, payments captured before it move to `settled`. At start,
 * the last cut-off is swept again: it may have passed while no process was running (the sweep is
 * idempotent, so when it did run this finds nothing).
 */
export const settlement = Layer.effectDiscard(
  Effect.gen(function*() {
    const payments = yield* Payments
    const config = yield* AppConfig
    // A database blip must not cost the merchants a day: the sweep is retried with capped
    // back-off until it completes or the day is over.
    const sweep = (cutoffMs: number) =>
      payments.settle(isoAt(cutoffMs)).pipe(
        Effect.tapError((error) =>
          Effect.andThen(Effect.sync(() => Metrics.record(Metrics.settlementRuns("failed"), 1)), Effect.logWarning("settlement run failed; retrying", error))
        ),
        Effect.retry(settlementRetry),
        Effect.tap((settled) =>
          Effect.sync(() => {
            Metrics.record(Metrics.settlementRuns("ok"), 1)
            Metrics.record(Metrics.settledPayments, settled)
          })
        ),
        Effect.flatMap((settled) => Effect.logInfo(`settlement at ${isoAt(cutoffMs)} settled ${settled} payments`)),
        Effect.catch((error) => Effect.logWarning("settlement run failed all day; it will run at the next cut-off", error))
      )
    yield* Effect.forkScoped(Effect.gen(function*() {
      const startMs = yield* Clock.currentTimeMillis
      yield* sweep(nextCutoffMs(startMs, config.settlementCutoffMinutes) - dayMs)
      while (true) {
        const nowMs = yield* Clock.currentTimeMillis
        const cutoffMs = nextCutoffMs(nowMs, config.settlementCutoffMinutes)
        yield* Effect.sleep(Duration.millis(cutoffMs - nowMs))
        yield* sweep(cutoffMs)
      }
    }))
  })
)

/** Idempotency keys are forgotten after IDEMPOTENCY_TTL; purged hourly. */
export const idempotencyPurge = Layer.effectDiscard(
  Effect.gen(function*() {
    const store = yield* Store
    yield* Effect.forkScoped(
      Effect.flatMap(nowIso, (now) => store.purgeIdempotencyKeys(now)).pipe(
        Effect.catch((error) => Effect.logWarning("idempotency purge failed", error)),
        Effect.repeat(Schedule.spaced(Duration.hours(1)))
      )
    )
  })
)

export const layer = Layer.mergeAll(recovery, settlement, idempotencyPurge)
