import { Duration, Effect, Fiber, Layer, Option, Scope } from "effect"
import type { Claim, DispatcherContext, DispatcherOptions } from "./dispatcher/Context.ts"
import { defaultOptions, makeContext } from "./dispatcher/Context.ts"
import { Endpoints } from "./dispatcher/Endpoints.ts"
import { Poller } from "./dispatcher/Poller.ts"

/**
 * The webhook dispatcher. A poller drains the outbox into deliveries and claims due deliveries
 * under a lease (so several processes share the work and a dead one's work is taken over); each
 * endpoint is an actor: a bounded queue worked with bounded concurrency by its own supervised
 * fibers, so a slow or dead endpoint only ever delays itself; each attempt goes in phases
 * (prepare → call → handle success / failure). The parts live in src/workers/dispatcher/:
 * `Context.ts` (what they share), `Poller.ts`, `Endpoints.ts` (the actors, over `Mailbox.ts`) and
 * `Attempt.ts`; here they are started, and stopped.
 */

export { defaultOptions, type DispatcherOptions } from "./dispatcher/Context.ts"

export const run = Effect.fnUntraced(function*(options: DispatcherOptions = defaultOptions) {
  const scope = yield* Effect.scope
  // The poller and the workers live in a scope of their own, closed after the graceful stop
  // below (a finalizer added later runs earlier): the stop runs while they still run.
  const fibers = yield* Scope.fork(scope, "sequential")
  const ctx = yield* makeContext(options, fibers)
  const endpoints = new Endpoints(ctx)
  const poller = new Poller(ctx, endpoints)
  // The first finalizer of their scope, so the last to run, once they are all interrupted.
  yield* Scope.addFinalizer(fibers, giveBackAll(ctx, endpoints))
  yield* Effect.addFinalizer(() => stop(ctx, endpoints, poller))
  yield* poller.start()
})

/**
 * Last at shutdown (after the workers are interrupted): claims still waiting in an endpoint's
 * queue, and those whose attempt the stop cut in the middle (given back as cut: the endpoint may
 * have it), go back to the store, so another process takes them now, not when their lease ends (a
 * recorded attempt's token holds nothing, so giving it back changes nothing). A killed process
 * reaches nothing (its leases are taken over once it stops beating): each give-back is best effort,
 * whatever its outcome.
 */
const giveBackAll = (ctx: DispatcherContext, endpoints: Endpoints) =>
  Effect.suspend(() => {
    const cutAt = ctx.clock.currentTimeMillisUnsafe()
    const giveBack = (claim: Claim, cut: number | undefined) =>
      ctx.store.releaseLease(claim.delivery.id, claim.token, cut).pipe(Effect.catchCause(() => Effect.void))
    return Effect.andThen(
      Effect.forEach([...ctx.state.inFlight], (claim) => giveBack(claim, cutAt), { discard: true }),
      Effect.suspend(() =>
        Effect.forEach(endpoints.takeAllQueued(), (claim) => giveBack(claim, undefined), { discard: true })
      )
    )
  })

/**
 * The graceful stop, first at shutdown: no new claims (the poller is interrupted, and attempts
 * finishing meanwhile claim no successor), the claims still queued go back to the store at once,
 * and, with `finishAttemptsOnStop`, the attempts in flight get SHUTDOWN_GRACE to finish.
 */
const stop = Effect.fnUntraced(function*(ctx: DispatcherContext, endpoints: Endpoints, poller: Poller) {
  ctx.state.stopping = true
  if (poller.fiber !== undefined) yield* Fiber.interrupt(poller.fiber)
  const queued = endpoints.takeAllQueued()
  for (const { delivery, token } of queued) yield* ctx.store.releaseLease(delivery.id, token).pipe(Effect.ignore)
  const startedInFlight = ctx.state.inFlight.size
  if (!ctx.options.finishAttemptsOnStop) return
  const finished = yield* Effect.gen(function*() {
    while (ctx.state.inFlight.size > 0) yield* Effect.sleep(Duration.millis(10))
  }).pipe(Effect.timeoutOption(Duration.millis(ctx.config.shutdownGraceMs)))
  yield* Option.isSome(finished)
    ? Effect.logInfo(
      `shutting down: webhook dispatcher stopped; ${startedInFlight} attempts in flight finished, ${queued.length} queued claims released`
    )
    : Effect.logWarning(
      `shutting down: webhook dispatcher stopped; ${ctx.state.inFlight.size} attempts cut off after SHUTDOWN_GRACE (their claims released), ${queued.length} queued claims released`
    )
})

export const layerWith = (options: Partial<DispatcherOptions> = {}) =>
  Layer.effectDiscard(run({ ...defaultOptions, ...options }))

/** The dispatcher with default options (merged into the service's workers). */
export const layer = layerWith({ finishAttemptsOnStop: true })
