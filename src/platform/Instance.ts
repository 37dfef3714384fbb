import { Clock, Context, Effect, Layer } from "effect"
import { randomBytes } from "node:crypto"
import { Store } from "../store/Store.ts"
import { isoAt } from "./Time.ts"

/**
 * This service process, as other processes on the same database see it. It beats every second
 * (alive for 5 s); idempotency claims name it, so after a kill -9 a retry takes its claims over
 * within about 5 s instead of waiting out IDEMPOTENCY_LEASE. A graceful stop says it has stopped
 * (and releases its claims besides).
 */
export class ServiceInstance extends Context.Service<ServiceInstance, { readonly id: string }>()("payments/ServiceInstance") {}

export const heartbeatEveryMs = 1_000
export const aliveForMs = 5_000

export const layer = Layer.effect(
  ServiceInstance,
  Effect.gen(function*() {
    const store = yield* Store
    const id = `ins_${randomBytes(12).toString("hex")}`
    const aliveUntil = (extraMs: number) => Effect.map(Clock.currentTimeMillis, (now) => isoAt(now + extraMs))
    const beat = Effect.flatMap(aliveUntil(aliveForMs), (until) => store.heartbeat(id, until))
    // A missed beat is logged, not fatal: the lease still bounds how long a claim blocks.
    yield* beat.pipe(Effect.catch((error) => Effect.logWarning("instance heartbeat failed", error)))
    yield* Effect.forkScoped(
      Effect.sleep(heartbeatEveryMs).pipe(
        Effect.andThen(beat.pipe(Effect.catch((error) => Effect.logWarning("instance heartbeat failed", error)))),
        Effect.forever
      )
    )
    yield* Effect.addFinalizer(() => Effect.flatMap(aliveUntil(0), (now) => store.heartbeat(id, now)).pipe(Effect.ignore))
    return { id }
  })
)

