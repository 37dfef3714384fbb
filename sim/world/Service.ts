import { Cause, Clock, Context, Effect, Exit, Fiber, Layer, Scope } from "effect"
import { HttpRouter, HttpServer, HttpServerRequest, type HttpServerResponse } from "effect/http"
import { HttpApiBuilder } from "effect/http-api"
import * as HttpServerError from "effect/http/HttpServerError"
import { Acquirer, type AcquirerShape } from "../../src/acquirer/Acquirer.ts"
import { ApiLive, ServicesLive } from "../../src/App.ts"
import { PaymentsApi } from "../../src/http/api/Api.ts"
import * as Authentication from "../../src/http/edge/Authentication.ts"
import * as Edge from "../../src/http/edge/Edge.ts"
import type { RateLimiter } from "../../src/http/edge/RateLimiter.ts"
import * as Handlers from "../../src/http/handlers/Handlers.ts"
import * as Config from "../../src/platform/Config.ts"
import { Ids, type IdsShape } from "../../src/platform/Ids.ts"
import { WebhookTransport, type WebhookTransportShape } from "../../src/platform/WebhookTransport.ts"
import { ApiKeys, type ApiKeysShape } from "../../src/services/ApiKeys.ts"
import type { Merchants } from "../../src/services/Merchants.ts"
import type { Payments } from "../../src/services/Payments.ts"
import type { Reconciliation } from "../../src/services/Reconciliation.ts"
import { Store, type StoreShape } from "../../src/store/Store.ts"
import { WebhookStore, type WebhookStoreShape } from "../../src/store/WebhookStore.ts"
import * as WebhookDispatcher from "../../src/workers/WebhookDispatcher.ts"
import * as Workers from "../../src/workers/Workers.ts"
import { type Fence, heldBy } from "../engine/Fence.ts"
import { makeRequest, readResponse, type SimRequest, type SimResponse } from "./Http.ts"
import type { ClientPort, IssuedKey, Merchant } from "./Workload.ts"

/**
 * One running copy of the service: the production services, HttpApi and workers, built over
 * simulated infrastructure layers. A crash (`crashNow`, then `reap`) fences the instance off
 * from the outside at once, then interrupts everything in flight and closes the scope; a
 * restart builds fresh layers over the same store state, and recovery resumes the flows that
 * were in flight, exactly as a process restart against the database would.
 */
export interface Infrastructure {
  readonly store: StoreShape
  /**
   * The main store behind an instance's fence, when the store can check the fence in its own
   * wrapper's step (sim/world/StoreFaults.ts `fencedBy`: one Effect step a call less); else `fenced(store)`.
   */
  readonly fencedStore?: (fence: Fence) => StoreShape
  readonly ids: IdsShape
  readonly config: Config.AppConfigShape
  readonly acquirer: AcquirerShape
  readonly webhookStore: WebhookStoreShape
  readonly webhookTransport: WebhookTransportShape
  /**
   * The webhook endpoints behind an instance's fence, when they check the fence in their own
   * step (sim/world/Endpoints.ts `fencedBy`: one Effect step a POST less); else `fenced(webhookTransport)`.
   */
  readonly fencedWebhookTransport?: (fence: Fence) => WebhookTransportShape
  /** Run the webhook dispatcher worker (off: events stay in the outbox). */
  readonly webhookDispatcher: Partial<WebhookDispatcher.DispatcherOptions> | null
  /** Dispatchers per instance (default 1): each claims under its own leases, like separate processes. */
  readonly webhookDispatchers?: number
  /**
   * The clock of the instance of `generation` (clock skew: sim/engine/Simulator.ts); absent or null: the
   * run's own clock.
   */
  readonly clockOf?: (generation: number) => Clock.Clock | null
  /** Calls `task` after `delayMs` of virtual time (the clients' timeout while an instance is paused). */
  readonly timer?: (delayMs: number, task: () => void) => void
  /**
   * Virtual time, and what to tell of each answer that reached its client (or the connection that
   * dropped under it, `response` null): how long it took, when it was sent and which instance
   * served it (its fence, compared by identity).
   */
  readonly nowMs?: () => number
  readonly answered?: (
    request: SimRequest,
    elapsedMs: number,
    response: SimResponse | null,
    servedBy: Fence,
    sentMs: number
  ) => void
  /** The API keys as the HTTP API (its authentication and handlers) sees them: a planted bug wraps them (sim/checks/PlantedBugs.ts). */
  readonly apiKeys?: (apiKeys: ApiKeysShape) => ApiKeysShape
  /** The HTTP API's rate limiter instead of the service's own (a planted bug's: sim/checks/PlantedBugs.ts). */
  readonly rateLimiter?: Layer.Layer<RateLimiter, never, Config.AppConfig>
}

/** How long a client waits for an answer from a paused instance before it gives up (a dropped connection). */
export const clientTimeoutMs = 30_000

export type { Fence } from "../engine/Fence.ts"

const appLayer = (infrastructure: Infrastructure) => {
  const base = Layer.mergeAll(
    Layer.succeed(Store, infrastructure.store),
    Layer.succeed(Ids, infrastructure.ids),
    Config.layerWith(infrastructure.config),
    Layer.succeed(Acquirer, infrastructure.acquirer),
    Layer.succeed(WebhookStore, infrastructure.webhookStore),
    Layer.succeed(WebhookTransport, infrastructure.webhookTransport)
  )
  const workers = infrastructure.webhookDispatcher === null
    ? Workers.layer
    : Layer.mergeAll(
      Workers.layer,
      // Distinct layer values, so each is built: N dispatchers, not one memoised.
      ...Array.from(
        { length: Math.max(1, infrastructure.webhookDispatchers ?? 1) },
        () => WebhookDispatcher.layerWith(infrastructure.webhookDispatcher!)
      )
    )
  return workers.pipe(
    Layer.provideMerge(ServicesLive),
    Layer.provideMerge(base)
  )
}

/**
 * `ApiLive` (src/App.ts) with another rate limiter: the same composition, its limiter aside, for a
 * planted bug that sits in the limiter (ApiLive provides its own inside). test/sim/rate-limit.test.ts
 * holds the two together: given the service's own limiter, a run answers the same (same trace).
 */
export const apiWithLimiter = (limiter: Layer.Layer<RateLimiter, never, Config.AppConfig>) =>
  Layer.merge(HttpApiBuilder.layer(PaymentsApi, { openapiPath: "/api/v1/openapi.json" }), Edge.layer).pipe(
    Layer.provide(Handlers.layer),
    Layer.provide(Authentication.layer),
    Layer.provide(limiter)
  )

/** The HttpApi over an instance's services, as an effect that answers the request in its context. */
const httpApp = (
  services: Context.Context<AppContext>,
  limiter: Layer.Layer<RateLimiter, never, Config.AppConfig> | undefined
) =>
  HttpRouter.toHttpEffect(
    (limiter === undefined ? ApiLive : apiWithLimiter(limiter)).pipe(
      Layer.provide(Layer.succeedContext(services)),
      Layer.provide(HttpServer.layerServices)
    )
  )

type AppContext = Layer.Success<ReturnType<typeof appLayer>>

interface Instance {
  readonly scope: Scope.Closeable
  readonly context: Context.Context<AppContext>
  readonly send: <A>(request: SimRequest, then: (response: SimResponse | null) => Effect.Effect<A>) => Effect.Effect<A>
  readonly open: (request: SimRequest) => Effect.Effect<Pending>
  readonly requests: Set<Fiber.Fiber<void>>
  /** The clients waiting for an answer, by request fiber: each gives up when called (a paused instance). */
  readonly clients: Map<Fiber.Fiber<void>, () => void>
  readonly fence: Fence
}

/**
 * A request sent (`SimulatedService.open`) whose answer is awaited later (`awaitEither`): two
 * racing requests of one client are two of these, awaited by the one fiber that sent them.
 */
export interface Pending extends Served {
  /** How the request's fiber ended; null while it runs. */
  exit: Exit.Exit<void> | null
  /** The instance that serves it; null when the connection was refused (the service was down). */
  readonly fence: Fence | null
  /** Resumes the fiber awaiting this request (set while one waits). */
  wake: (() => void) | null
  /** The client gave up waiting (its instance was paused): no answer, whatever the fiber does later. */
  gaveUp?: boolean
}

const isSettled = (pending: Pending) => pending.fence === null || pending.exit !== null || pending.gaveUp === true

/**
 * The first of two sent requests to be answered (`b` null: the one), the one that was answered
 * already if any. No fiber of its own: the awaiting fiber resumes when the first request's fiber
 * ends, as a fiber awaiting that request alone would.
 */
export const awaitEither = (a: Pending, b: Pending | null): Effect.Effect<Pending> =>
  Effect.suspend(() => {
    if (isSettled(a)) return Effect.succeed(a)
    if (b !== null && isSettled(b)) return Effect.succeed(b)
    return Effect.callback<Pending>((resume) => {
      const wake = (first: Pending) => () => {
        a.wake = null
        if (b !== null) b.wake = null
        resume(Effect.succeed(first))
      }
      a.wake = wake(a)
      if (b !== null) b.wake = wake(b)
    })
  })

/**
 * The answer of a settled request, read when its awaiting fiber resumes (as `send` reads it): null
 * when the connection was refused or reset; a reply completed after the instance died never
 * leaves the process.
 */
export const answerOf = (pending: Pending): SimResponse | null =>
  pending.fence !== null && pending.exit !== null && pending.gaveUp !== true
    ? replyOf(pending.exit, pending, pending.fence)
    : null

/**
 * Where a request's fiber leaves its response (set as it succeeds): its exit carries no value, so
 * the response needs no `Effect.as` after the scope's close (two Effect steps a request).
 */
interface Served {
  response: SimResponse | null
}

/** What leaves the process of a request's fiber that ended: its response, unless the instance died first. */
const replyOf = (exit: Exit.Exit<void>, served: Served, fence: Fence): SimResponse | null =>
  Exit.isSuccess(exit) && !fence.dead ? served.response : null

const refused: Pending = { exit: null, fence: null, wake: null, response: null }

/**
 * The instance's view of an outside system (store, webhook store, acquirer, webhook endpoints):
 * once the instance is dead, every call interrupts its caller (as the crash does), so a process
 * killed in the middle of an instant commits, sends and answers nothing more; not even the
 * clean-up a graceful stop would do (releasing claims and leases), which must not hang teardown.
 */
export const fenced = <S extends object>(shape: S, fence: Fence): S => {
  const out: Record<string, unknown> = {}
  for (const [name, member] of Object.entries(shape)) {
    out[name] = typeof member !== "function" ? member : fencedMember(member as Member, fence)
  }
  return out as S
}

type Member = (...args: Array<unknown>) => Effect.Effect<unknown, unknown>

/**
 * One member behind the fence (the webhook store's and the acquirer's; the main store and the
 * endpoints check the fence in a step they take anyway). The check runs when the call runs, not
 * when it is built: an operation's own `Effect.sync` cannot interrupt its caller.
 */
const fencedMember = (member: Member, fence: Fence): Member => (...args: Array<unknown>) =>
  Effect.suspend(() =>
    fence.dead ? Effect.interrupt : fence.held !== null ? heldBy(fence, () => member(...args)) : member(...args)
  )

/**
 * The acquirer behind the fence. Its `answerNow` is a plain call (an answer at once, or none), no
 * Effect: it stays as it is. It asks nothing of the outside and only reads the network's plan; a
 * dead instance's create stops at its next store call.
 */
const fencedAcquirer = (acquirer: AcquirerShape, fence: Fence): AcquirerShape => {
  const { answerNow, ...calls } = acquirer
  return answerNow === undefined ? fenced(calls, fence) : { ...fenced(calls, fence), answerNow }
}

const fencedInfrastructure = (infrastructure: Infrastructure, fence: Fence): Infrastructure => ({
  ...infrastructure,
  store: infrastructure.fencedStore?.(fence) ?? fenced(infrastructure.store, fence),
  acquirer: fencedAcquirer(infrastructure.acquirer, fence),
  webhookStore: fenced(infrastructure.webhookStore, fence),
  webhookTransport: infrastructure.fencedWebhookTransport?.(fence) ?? fenced(infrastructure.webhookTransport, fence)
})

/**
 * The service run in-process; also the merchants' port to it (sim/world/Workload.ts `ClientPort`),
 * with no adapter between them: a request is the `SimRequest` the HttpApi reads.
 */
export class SimulatedService implements ClientPort<SimRequest, Pending> {
  private instance: Instance | null = null
  /** Instances killed but not yet torn down (their fibers interrupted, their scope closed). */
  private dying: Array<Instance> = []
  /** Instances paused, or resumed after a pause and still running beside the current one (they serve no new request). */
  private detached: Array<Instance> = []
  generation = 0
  crashes = 0
  pauses = 0

  constructor(private readonly infrastructure: Infrastructure) {}

  get isUp() {
    return this.instance !== null
  }

  /** Paused instances, and resumed ones still running beside the current one. */
  get detachedCount() {
    return this.detached.length
  }

  /** Builds a fresh instance (new layers, same store) and runs start-up recovery. */
  readonly start: Effect.Effect<void> = Effect.suspend(() => {
    if (this.instance !== null) return Effect.die(new Error("sim: service already running"))
    const generation = ++this.generation
    const clock = this.infrastructure.clockOf?.(generation) ?? null
    const started = Effect.gen({ self: this }, function*() {
      const fence: Fence = { dead: false, held: null }
      const scope = yield* Scope.make()
      const context = yield* Layer.buildWithScope(appLayer(fencedInfrastructure(this.infrastructure, fence)), scope)
      const wrapApiKeys = this.infrastructure.apiKeys
      const served = wrapApiKeys === undefined
        ? context
        : Context.add(context, ApiKeys, wrapApiKeys(Context.get(context, ApiKeys)))
      const app = yield* Scope.provide(httpApp(served, this.infrastructure.rateLimiter), scope)
      // The services a request fiber starts from: the run's own (scheduler, clock, random, log
      // level; the instance's skewed clock if it has one), as the starting fiber holds them;
      // interruptible, as the Node server's request fibers are.
      const runServices = yield* Effect.context<never>()
      const requests = new Set<Fiber.Fiber<void>>()
      const clients = new Map<Fiber.Fiber<void>, () => void>()
      const serve = (scope: Scope.Closeable, served: Served) =>
        (app as unknown as Effect.Effect<HttpServerResponse.HttpServerResponse, unknown>).pipe(
          // The request's scope closes when it is answered (nothing in the request path adds to
          // it); a request killed by a crash leaves its scope to the collector. The response is
          // left in `served` (read only once the fiber succeeded).
          Effect.matchCauseEffect({
            onSuccess: (response) => {
              served.response = readResponse(response)
              // Closed in this step: an empty scope (the usual case) has nothing to run.
              const finalizing = Scope.closeUnsafe(scope, Exit.void)
              return finalizing === undefined ? Effect.void : Effect.uninterruptible(finalizing)
            },
            // What the Node server does with an unhandled failure: answer from the cause.
            onFailure: (cause) =>
              Effect.andThen(
                Scope.close(scope, Exit.failCause(cause)),
                Cause.hasInterruptsOnly(cause)
                  ? Effect.failCause(cause as Cause.Cause<never>)
                  : Effect.map(HttpServerError.causeResponse(cause), ([response]) => {
                    served.response = readResponse(response)
                  })
              )
          })
        )
      // One fiber for each request, started from the run's services with its own (the request
      // and its scope) added, interruptible: not forked from the client's fiber, whose child it
      // would become (a server's fiber is nobody's child, and takes nothing of its client's).
      // Queued, not run at once, as a fork is.
      //
      // The context holds only what the request path reads from its fiber at request time:
      // the request and its scope (the router adds the route and the search parameters, the
      // edge a body limit). Everything else it needs was captured when the app was built:
      // each handler group runs with the services its layer was built with (HttpApiBuilder
      // merges them under the request's own), the edge, authentication and rate limiter
      // hold theirs, and the error encoder is provided its own. The optional reads
      // (`ServiceInstance`, a tracing parent span) find nothing here, as they found nothing
      // in the instance's services either; a required read of a service added later would
      // die loudly (a 500, the `no-internal-errors` law), never pass silently. The Node
      // server gives its request fibers every service of the process: the same answers, but
      // the platform copies the request's context twice a request (the router's `new Map`,
      // the group's `Context.merge`), and those copies are of four entries here, not ~50.
      const serveFiber = (request: SimRequest, scope: Scope.Closeable, served: Served) => {
        const services = Context.add(
          Context.add(runServices, Scope.Scope, scope),
          HttpServerRequest.HttpServerRequest,
          request
        )
        // Queued behind a yield, as a fork is: Effect 4 starts a fiber inline.
        const fiber = Effect.runForkWith(services)(Effect.andThen(Effect.yieldNow, serve(scope, served)))
        requests.add(fiber)
        return fiber
      }
      const { nowMs, answered } = this.infrastructure
      const timed = nowMs !== undefined && answered !== undefined
      // The request's scope is made and its fiber started as the caller's step that sends it
      // runs (the registration of the callback that awaits the answer): no steps of their own.
      const send = <A>(
        request: SimRequest,
        then: (response: SimResponse | null) => Effect.Effect<A>
      ): Effect.Effect<A> =>
        // `Fiber.await` without its canceller (the caller is never interrupted while it waits;
        // if it were, the observer would resume nothing): `Fiber.await` wraps its async in an
        // onInterrupt, and asks the child fiber by message to add the observer (~12 steps more).
        // The fence is read when the caller resumes, as after `Fiber.await`, and the caller's
        // handling of the answer runs in that same step.
        Effect.callback<A>((resume) => {
          const served: Served = { response: null }
          const sentMs = timed ? nowMs() : 0
          const fiber = serveFiber(request, Scope.makeUnsafe(), served)
          let waiting = true
          fiber.addObserver((exit) => {
            requests.delete(fiber)
            clients.delete(fiber)
            if (!waiting) return
            waiting = false
            if (timed && !fence.dead) answered(request, nowMs() - sentMs, replyOf(exit, served, fence), fence, sentMs)
            resume(Effect.suspend(() => then(replyOf(exit, served, fence))))
          })
          // Given up while the instance is paused: the client sees a dropped connection.
          if (waiting) {
            clients.set(fiber, () => {
              if (!waiting) return
              waiting = false
              resume(Effect.suspend(() => then(null)))
            })
          }
        })
      // The same request, its answer awaited later (`awaitEither`).
      const open = (request: SimRequest): Effect.Effect<Pending> =>
        Effect.sync(() => {
          const pending: Pending = { exit: null, fence, wake: null, response: null }
          const sentMs = timed ? nowMs() : 0
          const fiber = serveFiber(request, Scope.makeUnsafe(), pending)
          fiber.addObserver((exit) => {
            requests.delete(fiber)
            clients.delete(fiber)
            if (timed && !fence.dead && pending.gaveUp !== true) {
              answered(request, nowMs() - sentMs, replyOf(exit, pending, fence), fence, sentMs)
            }
            pending.exit = exit
            if (pending.wake !== null) {
              pending.wake()
            }
          })
          if (pending.exit === null) {
            clients.set(fiber, () => {
              if (pending.exit !== null || pending.gaveUp === true) return
              pending.gaveUp = true
              if (pending.wake !== null) pending.wake()
            })
          }
          return pending
        })
      this.instance = { scope, context, send, open, requests, clients, fence }
    })
    return clock === null ? started : Effect.provideService(started, Clock.Clock, clock)
  })

  /**
   * Kills the running instance at once, even from inside one of its own fibers (just after a
   * store commit): it reaches nothing outside from now on, every reply still on its way is
   * dropped (the client sees a reset connection) and no new connection is accepted. `reap`
   * then interrupts its fibers and closes its scope. False when no instance is running.
   */
  crashNow(): boolean {
    if (!this.kill()) return false
    this.crashes++
    return true
  }

  private kill(): boolean {
    const instance = this.instance
    if (instance === null) return false
    instance.fence.dead = true
    this.instance = null
    this.dying.push(instance)
    return true
  }

  /**
   * Pauses the running instance (a stop-the-world pause, a frozen VM): from now on every call it
   * makes to the outside waits (`heldBy`), it takes no new connection (the service is down until
   * a replacement starts), and the clients waiting on it give up after `clientTimeoutMs` (a
   * dropped connection: they retry, with the same idempotency key, on the replacement). Its
   * fibers, claims and leases stay as they are. Answers the paused instance's fence (null when
   * none is running); `resume(fence)` lets it carry on.
   */
  pause(): Fence | null {
    const instance = this.instance
    if (instance === null) return null
    instance.fence.held = []
    this.instance = null
    this.detached.push(instance)
    this.pauses++
    const timer = this.infrastructure.timer
    if (timer !== undefined) {
      const clients = [...instance.clients.values()]
      timer(clientTimeoutMs, () => {
        for (const giveUp of clients) giveUp()
      })
    }
    return instance.fence
  }

  /**
   * Resumes a paused instance: the calls it held are made in the order it made them, and it carries
   * on beside the current instance (its workers run; it serves no new request) until `retire`.
   */
  resume(fence: Fence): void {
    const held = fence.held
    if (held === null) return
    fence.held = null
    for (const call of held) call()
  }

  /** Kills a paused or resumed instance (its orchestrator replaces it); `reap` tears it down. */
  retire(fence: Fence): boolean {
    const index = this.detached.findIndex((instance) => instance.fence === fence)
    if (index < 0 || fence.dead) return false
    const [instance] = this.detached.splice(index, 1)
    fence.dead = true
    if (fence.held !== null) {
      const held = fence.held
      fence.held = null
      for (const call of held) call()
    }
    this.dying.push(instance!)
    return true
  }

  /** Whether `fence` is the running instance's (not a paused or resumed one's). */
  isCurrent(fence: Fence): boolean {
    return this.instance !== null && this.instance.fence === fence
  }

  /** Tears down killed instances: in-flight requests and every fiber of their scope are interrupted. */
  readonly reap: Effect.Effect<void> = Effect.suspend(() => {
    const dying = this.dying
    this.dying = []
    return Effect.forEach(dying, (instance) =>
      // The dead instance's own clean-up is interrupted by its fence (a finalizer that would
      // release a claim or a lease); that interruption is the corpse's, not the caller's: it must
      // not stop the restart that reaps it (it did, and left the service down for good).
      Effect.exit(Effect.andThen(Fiber.interruptAll(instance.requests), Scope.close(instance.scope, Exit.void))), {
      discard: true
    })
  })

  /**
   * Sends one request and goes on with `then` of its answer: null when the connection is refused
   * or reset (service down or crashed).
   * The instance is the one running when this is called: call it as the request is sent, from
   * the running client (no `Effect.suspend` a request to defer the look-up).
   */
  send<A>(request: SimRequest, then: (response: SimResponse | null) => Effect.Effect<A>): Effect.Effect<A> {
    const instance = this.instance
    return instance === null ? then(null) : instance.send(request, then)
  }

  /** Sends one request without awaiting its answer (`awaitEither`, then `answerOf`); as `send`, when it is sent. */
  open(request: SimRequest): Effect.Effect<Pending> {
    const instance = this.instance
    return instance === null ? Effect.succeed(refused) : instance.open(request)
  }

  readonly request = makeRequest
  readonly awaitEither = awaitEither
  readonly answerOf = answerOf

  /** A key issued as the operator's CLI would (`payments` CLI); null when that fails. */
  issueKey(merchant: Merchant): Effect.Effect<IssuedKey | null> {
    return this.withServices(Effect.flatMap(ApiKeys, (keys) => keys.create(merchant.id, "recovered"))).pipe(
      Effect.orElseSucceed(() => null)
    )
  }

  /** Runs an effect against the running instance's services (bootstrap, like the CLI does). */
  withServices<A, E>(
    effect: Effect.Effect<A, E, Payments | Merchants | ApiKeys | Store | Reconciliation>
  ): Effect.Effect<A, E> {
    return Effect.suspend(() => {
      const instance = this.instance
      if (instance === null) return Effect.die(new Error("sim: service is down"))
      return Effect.provide(effect, instance.context)
    })
  }

  readonly stop: Effect.Effect<void> = Effect.suspend(() => {
    this.kill()
    for (const instance of [...this.detached]) this.retire(instance.fence)
    return this.reap
  })
}
