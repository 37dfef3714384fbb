import { Clock, Duration, Effect, Layer, Schedule } from "effect"
import { AppConfig } from "../platform/Config.ts"
import * as Instance from "../platform/Instance.ts"
import { isoAt } from "../platform/IsoTime.ts"
import * as Metrics from "../platform/Metrics.ts"
import { Payments, resumeBatch } from "../services/Payments.ts"
import { Store, type StoreUnavailable } from "../store/Store.ts"

/** How long a flow may sit untouched before it is presumed stopped (its fiber ended on an error) and resumed. */
export const staleFlowMs = 60_000
/** How often every instance looks for its own stale flows (and, without an identity, for any). */
export const recoveryIntervalMs = 30_000
const recoveryInterval = Duration.millis(recoveryIntervalMs)
/**
 * How often the leader looks for flows of instances that have stopped beating: with beats alive
 * for 5 s, a dead instance's flows are resumed within about 7 s of its last beat.
 */
export const takeOverIntervalMs = 2_000
const maximumStartBatches = 200

/**
 * Recovery of payments left in flight.
 *
 * In the service (a process with an instance identity, src/platform/Instance.ts): every instance
 * resumes, every 30 s, its own flows and those nobody owns untouched for a minute (a flow that
 * stopped on an error); the leader, from the moment it leads and then every 2 s, resumes the flows
 * of instances that have stopped beating (killed, paused, cut off) and those that name no instance
 * (left by a process without one, or from before owners were recorded). A flow whose owner still
 * beats is never resumed by another instance.
 *
 * In a process without an identity (the simulator, tests of one service): at start every payment
 * left in flight (by a crash) has its flow resumed; afterwards, every 30 s, flows untouched for a
 * minute are resumed.
 */
export const recovery = Layer.effectDiscard(
  Effect.gen(function*() {
    const payments = yield* Payments
    const identified = (yield* Instance.currentId) !== null
    const counted = (what: string, passes: Effect.Effect<number, StoreUnavailable>) =>
      passes.pipe(
        Effect.matchEffect({
          onFailure: (error) =>
            Effect.andThen(
              Effect.sync(() => Metrics.record(Metrics.recoveryRuns("failed"), 1)),
              Effect.logWarning(`${what} failed`, error)
            ),
          onSuccess: (resumed) => {
            Metrics.record(Metrics.recoveryRuns("ok"), 1)
            Metrics.record(Metrics.recoveredPayments, resumed)
            return resumed > 0 ? Effect.logInfo(`${what} resumed ${resumed} payment flows`) : Effect.void
          }
        })
      )
    /** Batch after batch; bounded, so a failing database cannot keep it looping (the next pass picks up whatever is left). */
    const resumeAll = (options: { readonly staleBefore: number; readonly takeOver: boolean }) =>
      Effect.gen(function*() {
        let resumed = 0
        for (let batch = 0; batch < maximumStartBatches; batch++) {
          const count = yield* payments.resumeFlows(options)
          resumed += count
          if (count < resumeBatch) break
        }
        return resumed
      })
    if (identified) {
      // Only the flows no live instance owns (nothing is stale before the epoch): this instance's
      // own stale flows are the 30 s pass's below.
      const takeOver = counted(
        "recovery of flows no live instance owns",
        resumeAll({ staleBefore: 0, takeOver: true })
      )
      yield* Effect.forkScoped(
        Instance.whileLeading(
          Effect.forever(Effect.andThen(takeOver, Effect.sleep(Duration.millis(takeOverIntervalMs))))
        )
      )
    } else {
      // In the background: serving does not wait for old flows (each waits on its payment's row).
      yield* Effect.forkScoped(
        counted(
          "recovery at start",
          Effect.flatMap(Clock.currentTimeMillis, (now) => resumeAll({ staleBefore: now + 1, takeOver: false }))
        )
      )
    }
    // One pass (it runs every 30 s, and nearly always finds nothing).
    const pass = counted(
      "recovery pass",
      Effect.clockWith((clock) =>
        payments.resumeFlows({ staleBefore: clock.currentTimeMillisUnsafe() - staleFlowMs, takeOver: false })
      )
    )
    // A pass every 30 s after the last one ended (the sleep suspends: no yield of its own is needed).
    yield* Effect.forkScoped(
      Effect.forever(Effect.andThen(Effect.sleep(recoveryInterval), pass), { disableYield: true })
    )
  })
)

const dayMs = 86_400_000

/** The next daily cut-off strictly after `now`, at `cutoffMinutes` past midnight UTC. */
export const nextCutoff = (now: number, cutoffMinutes: number) => {
  const midnight = Math.floor(now / dayMs) * dayMs
  const today = midnight + cutoffMinutes * 60_000
  return today > now ? today : today + dayMs
}

/** Retries of a failed settlement sweep: 1 s doubling up to every 5 minutes, for at most 23 hours. */
export const settlementRetry = Schedule.min([
  Schedule.exponential(Duration.seconds(1), 2),
  Schedule.spaced(Duration.minutes(5))
]).pipe(
  Schedule.upTo({ duration: Duration.hours(23) })
)

/**
 * Settlement: at every daily cut-off, payments captured before it move to `settled`, on the leader
 * (src/platform/Instance.ts). At start, and when an instance becomes the leader, the last cut-off
 * is swept again: it may have passed while no process was running, or the last leader may have
 * died in the middle (the sweep is idempotent, so when it did run this finds nothing).
 */
export const settlement = Layer.effectDiscard(
  Effect.gen(function*() {
    const payments = yield* Payments
    const config = yield* AppConfig
    // A database blip must not cost the merchants a day: the sweep is retried with capped
    // back-off until it completes or the day is over.
    const sweep = (cutoff: number) =>
      payments.settle(cutoff).pipe(
        Effect.tapError((error) =>
          Effect.andThen(
            Effect.sync(() => Metrics.record(Metrics.settlementRuns("failed"), 1)),
            Effect.logWarning("settlement run failed; retrying", error)
          )
        ),
        Effect.retry(settlementRetry),
        Effect.tap((settled) =>
          Effect.sync(() => {
            Metrics.record(Metrics.settlementRuns("ok"), 1)
            Metrics.record(Metrics.settledPayments, settled)
          })
        ),
        Effect.flatMap((settled) => Effect.logInfo(`settlement at ${isoAt(cutoff)} settled ${settled} payments`)),
        Effect.catch((error) =>
          Effect.logWarning("settlement run failed all day; it will run at the next cut-off", error)
        )
      )
    // On the leader only; a new leader sweeps the last cut-off again first (one that died
    // mid-sweep leaves the rest to it).
    yield* Effect.forkScoped(Instance.whileLeading(Effect.gen(function*() {
      const start = yield* Clock.currentTimeMillis
      yield* sweep(nextCutoff(start, config.settlementCutoffMinutes) - dayMs)
      while (true) {
        const now = yield* Clock.currentTimeMillis
        const cutoff = nextCutoff(now, config.settlementCutoffMinutes)
        yield* Effect.sleep(Duration.millis(cutoff - now))
        yield* sweep(cutoff)
      }
    })))
  })
)

/** Idempotency keys are forgotten after IDEMPOTENCY_TTL; purged hourly, by the leader. */
export const idempotencyPurge = Layer.effectDiscard(
  Effect.gen(function*() {
    const store = yield* Store
    yield* Effect.forkScoped(Instance.whileLeading(
      Effect.flatMap(Clock.currentTimeMillis, (now) => store.purgeIdempotencyKeys(now)).pipe(
        Effect.catch((error) => Effect.logWarning("idempotency purge failed", error)),
        Effect.repeat(Schedule.spaced(Duration.hours(1))),
        Effect.asVoid
      )
    ))
  })
)

export const layer = Layer.mergeAll(recovery, settlement, idempotencyPurge)
