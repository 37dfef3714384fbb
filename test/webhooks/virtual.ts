import { Cause, type Context, Effect, Exit, Layer, Logger, Scope } from "effect"
import { VirtualTime } from "../../sim/engine/VirtualTime.ts"
import { fenced } from "../../sim/world/Service.ts"
import type { Delivery } from "../../src/domain/Webhook.ts"
import * as Config from "../../src/platform/Config.ts"
import * as Ids from "../../src/platform/Ids.ts"
import * as Instance from "../../src/platform/Instance.ts"
import { timedOut, type TransportResult, WebhookTransport } from "../../src/platform/WebhookTransport.ts"
import * as Webhooks from "../../src/services/Webhooks.ts"
import { emptyState, layerMemoryFrom, type MemoryState } from "../../src/store/MemoryStore.ts"
import { memoryWebhookOperations } from "../../src/store/MemoryWebhookStore.ts"
import { type Store, Store as StoreTag } from "../../src/store/Store.ts"
import {
  type WebhookStore,
  WebhookStore as WebhookStoreTag,
  type WebhookStoreShape
} from "../../src/store/WebhookStore.ts"
import type * as WebhookDispatcher from "../../src/workers/WebhookDispatcher.ts"
import { engineLayer } from "./support.ts"

/**
 * The real webhook engine (Webhooks service, dispatcher, memory stores) under the simulator's
 * discrete-event virtual time, with an in-memory transport. Nothing runs unless the test drives
 * it: `runUntil(ms)` settles every fiber and fires every wake-up in order up to `ms`, so "nothing
 * happens 1 ms early" is an exact, deterministic check instead of a real-time sleep.
 */

/** One POST the dispatcher made, as the in-memory endpoint saw it. */
export interface Post {
  /** Virtual time the POST was sent. */
  readonly atMs: number
  readonly url: string
  readonly headers: Readonly<Record<string, string>>
  readonly body: string
  /** How it ended: still in flight, answered (or failed) by the endpoint, interrupted by the caller, or died. */
  end: "in flight" | "answered" | "interrupted" | "died"
  endedAtMs: number | null
}

/** How the in-memory endpoint treats a POST (the dispatcher applies its own timeout). */
export type Respond = (post: Post) => Effect.Effect<TransportResult>

export const status = (code: number, snippet = code < 300 ? "ok" : "internal error"): Effect.Effect<TransportResult> =>
  Effect.succeed({ _tag: "Answered", status: code, snippet })

/** The answer, after `ms` of virtual time. */
export const after = (ms: number, reply: Effect.Effect<TransportResult>) => Effect.andThen(Effect.sleep(ms), reply)

/** An endpoint that never answers. */
export const noAnswer: Effect.Effect<TransportResult> = Effect.never

export const connectionError = (error = "connection error: ECONNREFUSED"): Effect.Effect<TransportResult> =>
  Effect.succeed({ _tag: "Failed", error })

export interface LogEntry {
  readonly level: string
  /** The log line's text (its first part). */
  readonly message: string
  /** Everything else logged with it (errors, causes), as text. */
  readonly details: string
}

/** What a test's effects may use in a running "process". */
export type EngineServices = Webhooks.Webhooks | WebhookStore | Store | WebhookTransport | Ids.Ids | Config.AppConfig

/** One running "process": the engine's layers built in their own scope. */
export interface Engine {
  readonly config: Config.AppConfigShape
  /** Runs an effect against this process's services, to completion at the current virtual time. */
  readonly run: <A, E>(effect: Effect.Effect<A, E, EngineServices>) => A
  /** Stops the process gracefully: every fiber of its scope is interrupted, and its clean-up runs. */
  readonly stop: () => void
  /** Kills the process (kill -9): from now on it reaches nothing, not even to clean up; then its fibers end. */
  readonly crash: () => void
}

export class VirtualWebhooks {
  readonly time: VirtualTime
  readonly state: MemoryState = emptyState()
  readonly posts: Array<Post> = []
  /** Warnings and errors the engine logged (the runtime drops anything below warning). */
  readonly logs: Array<LogEntry> = []
  /** Decides each POST's fate; tests may swap it between attempts. */
  respond: Respond
  private readonly runtime: Context.Context<never>
  private readonly seed: number
  private generation = 0

  /** Whether the transport applies WEBHOOK_TIMEOUT itself (`postWithin`, as the simulator's endpoints do) instead of the dispatcher. */
  private readonly transportAppliesTimeout: boolean

  /** Wraps each process's webhook store (to make its calls fail). */
  private readonly wrapStore: (store: WebhookStoreShape) => WebhookStoreShape

  constructor(options: {
    readonly startMs: number
    readonly respond: Respond
    readonly seed?: number
    readonly transportAppliesTimeout?: boolean
    readonly wrapStore?: (store: WebhookStoreShape) => WebhookStoreShape
  }) {
    this.transportAppliesTimeout = options.transportAppliesTimeout ?? false
    this.wrapStore = options.wrapStore ?? ((store) => store)
    this.time = new VirtualTime(options.startMs)
    this.respond = options.respond
    this.seed = options.seed ?? 1
    const logs = this.logs
    const logger = Logger.make<unknown, void>(({ cause, logLevel, message }) => {
      const parts = (Array.isArray(message) ? message : [message]).map((m) => (typeof m === "string" ? m : String(m)))
      if (!(cause.reasons.length === 0)) parts.push(Cause.pretty(cause))
      logs.push({ level: logLevel.toUpperCase(), message: parts[0] ?? "", details: parts.slice(1).join("\n") })
    })
    this.runtime = this.time.runtime(this.seed, logger)
  }

  get nowMs() {
    return this.time.nowMs
  }

  /** The transport every process shares: it records the POST, then answers as `respond` says. */
  private readonly transport = WebhookTransport.of({
    post: (request) =>
      Effect.suspend(() => {
        const post: Post = {
          atMs: this.time.nowMs,
          url: request.url,
          headers: request.headers,
          body: request.body,
          end: "in flight",
          endedAtMs: null
        }
        this.posts.push(post)
        return this.respond(post).pipe(
          Effect.onExit((exit) =>
            Effect.sync(() => {
              post.endedAtMs = this.time.nowMs
              post.end = Exit.isSuccess(exit) ? "answered" : Exit.hasInterrupts(exit) ? "interrupted" : "died"
            })
          )
        )
      })
  })

  /**
   * Runs an effect to completion at the current virtual time: every fiber runnable now settles,
   * time does not move. Throws when the effect fails, or waits on time to pass.
   */
  runNow<A, E>(effect: Effect.Effect<A, E>): A {
    const fiber = Effect.runForkWith(this.runtime)(effect)
    this.time.settle()
    const exit = fiber.pollUnsafe()
    if (exit === undefined) throw new Error("the effect is still waiting: it needs virtual time to pass")
    if (Exit.isFailure(exit)) throw Cause.squash(exit.cause)
    return exit.value
  }

  /** Settles every fiber and fires every wake-up in order up to `ms` (inclusive); time ends at `ms`. */
  runUntil(ms: number) {
    if (ms < this.time.nowMs) throw new Error(`virtual time is at ${this.time.nowMs}, cannot run back to ${ms}`)
    this.time.run({ untilMs: ms })
  }

  /**
   * Starts a process over the shared state: the engine's layers, built in a fresh scope (its
   * dispatcher polls at once). Each process mints ids and lease tokens from its own seed.
   */
  start(
    config: Partial<Config.AppConfigShape> = {},
    options: Partial<WebhookDispatcher.DispatcherOptions> = {},
    /** Run as a named service instance (src/platform/Instance.ts): it beats, and its leases name it. */
    instanceId?: string
  ): Engine {
    const full = Config.defaultsWith({ webhookAllowPrivateUrls: true, ...config })
    const fence = { dead: false, held: null }
    const memory = layerMemoryFrom(this.state)
    const fencedStores = Layer.mergeAll(
      Layer.effect(WebhookStoreTag, Effect.map(WebhookStoreTag, (store) => fenced(this.wrapStore(store), fence))),
      Layer.effect(StoreTag, Effect.map(StoreTag, (store) => fenced(store, fence)))
    ).pipe(Layer.provide(memory))
    const stores = instanceId === undefined
      ? fencedStores
      : Instance.layerWithId(instanceId).pipe(Layer.provideMerge(fencedStores))
    const transport = this.transportAppliesTimeout
      ? WebhookTransport.of({
        post: this.transport.post,
        postWithin: (request, timeoutMs) =>
          Effect.timeoutOrElse(this.transport.post(request), {
            duration: timeoutMs,
            orElse: () => Effect.succeed(timedOut(timeoutMs))
          })
      })
      : this.transport
    const layer = engineLayer(
      stores,
      full,
      options,
      this.seed * 1000 + ++this.generation,
      Layer.succeed(WebhookTransport, transport)
    )
    const { context, scope } = this.runNow(Effect.gen(function*() {
      const scope = yield* Scope.make()
      const context = yield* Layer.buildWithScope(layer, scope)
      return { context, scope }
    }))
    let stopped = false
    const stop = () => {
      stopped = true
      this.runNow(Scope.close(scope, Exit.void))
    }
    return {
      config: full,
      run: (effect) => {
        if (stopped) throw new Error("this process was stopped")
        return this.runNow(Effect.provide(effect, context))
      },
      stop,
      crash: () => {
        fence.dead = true
        stop()
      }
    }
  }

  /** A merchant's deliveries, newest first, read from the shared state (whether or not a process runs). */
  deliveries(merchantId: string): ReadonlyArray<Delivery> {
    return this.runNow(memoryWebhookOperations(this.state).listDeliveries(merchantId, {}, { page: 1, perPage: 1000 }))
      .items
  }

  /** The merchant's only delivery (fails the test when there is not exactly one). */
  delivery(merchantId: string): Delivery {
    const all = this.deliveries(merchantId)
    if (all.length !== 1) throw new Error(`expected one delivery for ${merchantId}, found ${all.length}`)
    return all[0]!
  }

  postsTo(urlPrefix: string): ReadonlyArray<Post> {
    return this.posts.filter((p) => p.url.startsWith(urlPrefix))
  }
}
