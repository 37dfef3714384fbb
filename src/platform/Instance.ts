import { Clock, Context, Effect, Latch, Layer, Option } from "effect"
import { randomBytes } from "node:crypto"
import { Store } from "../store/Store.ts"

/**
 * This service process, as the other processes on the same database see it. It beats every
 * second (alive for 5 s). Work it holds names it: idempotency claims, the payments whose flows it
 * runs, the webhook attempts it leases. Once its beats stop (a kill -9, a pause, a lost host),
 * another instance takes that work over within seconds instead of waiting out a lease. A graceful
 * stop says it has stopped (and releases its claims and leases besides).
 *
 * One instance at a time is the leader: it runs the once-only jobs (`whileLeading`). The role is
 * a row of `service_leaders`, taken at a beat when its holder has stopped beating, and given up
 * at a graceful stop (docs/operations.md, "Running several instances").
 */
export interface ServiceInstanceShape {
  readonly id: string
  /** Open while this instance leads (as its last beat found). */
  readonly leading: Latch.Latch
  /** Open while it does not. */
  readonly following: Latch.Latch
}

export class ServiceInstance
  extends Context.Service<ServiceInstance, ServiceInstanceShape>()("payments/ServiceInstance")
{}

export const heartbeatEveryMs = 1_000
export const aliveForMs = 5_000
/** The role whose holder runs the once-only jobs. */
export const jobsRole = "jobs"

/** The instance `id` (tests name theirs; a service process gets a random one from `layer`). */
export const layerWithId = (id: string) =>
  Layer.effect(
    ServiceInstance,
    Effect.gen(function*() {
      const store = yield* Store
      const leading = yield* Latch.make(false)
      const following = yield* Latch.make(true)
      const setLeading = (leads: boolean) =>
        Effect.sync(() => {
          if (leads === Latch.isOpen(leading)) return
          if (leads) {
            Latch.closeUnsafe(following)
            Latch.openUnsafe(leading)
          } else {
            Latch.closeUnsafe(leading)
            Latch.openUnsafe(following)
          }
        })
      // A beat says the instance is alive, then takes or keeps the leader's role (its holder's
      // liveness is read from the beats). A missed beat is logged, not fatal. A leader whose beats
      // have failed for as long as a beat keeps it alive steps down: the others no longer see it
      // alive and one of them takes the role (a leader cut off from the database, or paused, may
      // still run a job once beside the new one, which the jobs tolerate: their writes are
      // version-checked and idempotent).
      let lastBeatMs = Number.NEGATIVE_INFINITY
      const beat = Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        yield* store.heartbeat(id, now + aliveForMs)
        lastBeatMs = now
        yield* setLeading(yield* store.lead(jobsRole, id, now))
      }).pipe(Effect.catch((error) =>
        Effect.gen(function*() {
          yield* Effect.logWarning("instance heartbeat failed", error)
          if ((yield* Clock.currentTimeMillis) - lastBeatMs >= aliveForMs) yield* setLeading(false)
        })
      ))
      yield* beat
      yield* Effect.forkScoped(Effect.sleep(heartbeatEveryMs).pipe(Effect.andThen(beat), Effect.forever))
      yield* Effect.addFinalizer(() =>
        Effect.gen(function*() {
          yield* setLeading(false)
          yield* store.resign(jobsRole, id)
          yield* store.heartbeat(id, yield* Clock.currentTimeMillis)
        }).pipe(Effect.catchCause(() => Effect.void))
      )
      return { id, leading, following }
    })
  )

/** A new instance: a fresh random id each process start (a restarted process is another instance). */
export const layer = Layer.unwrap(Effect.sync(() => layerWithId(`ins_${randomBytes(12).toString("hex")}`)))

/** This process's instance id, or null in a process without one (a CLI command, the simulator). */
export const currentId = Effect.map(
  Effect.serviceOption(ServiceInstance),
  (instance) => Option.isSome(instance) ? instance.value.id : null
)

/**
 * Runs `job` while this instance leads: started each time it becomes the leader, interrupted when
 * it stops being one. In a process without an instance (a CLI command, the simulator, tests of one
 * service) there is no one else: `job` just runs.
 */
export const whileLeading = <E, R>(job: Effect.Effect<void, E, R>): Effect.Effect<void, E, R> =>
  Effect.flatMap(Effect.serviceOption(ServiceInstance), (instance) => {
    if (Option.isNone(instance)) return job
    const { following, leading } = instance.value
    // The job ends with the leadership (the race's loser is interrupted), or by itself.
    const term = Effect.andThen(leading.await, Effect.raceFirst(Effect.andThen(job, Effect.never), following.await))
    return Effect.forever(term)
  })
