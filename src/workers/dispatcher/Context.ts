import { Clock, Duration, Effect, type Scope } from "effect"
import type { Delivery } from "../../domain/Webhook.ts"
import { AppConfig, type AppConfigShape } from "../../platform/Config.ts"
import { Ids, type IdsShape } from "../../platform/Ids.ts"
import * as Instance from "../../platform/Instance.ts"
import { type CallbackTimer, callbackTimerOf } from "../../platform/Timers.ts"
import {
  timedOut,
  type TransportResult,
  type WebhookRequest,
  WebhookTransport
} from "../../platform/WebhookTransport.ts"
import { Webhooks, type WebhooksShape } from "../../services/Webhooks.ts"
import type { StoreUnavailable } from "../../store/Store.ts"
import { WebhookStore, type WebhookStoreShape } from "../../store/WebhookStore.ts"

/**
 * What the webhook dispatcher's parts share (src/workers/WebhookDispatcher.ts): its options, the
 * services and figures read once at its start, and the little state the poller, the endpoints'
 * attempts and the stop must see of one another. One value, passed to each part, in place of
 * positions threaded through every call; and the claims they hand one another.
 */

export interface DispatcherOptions {
  /** Longest idle wait between polls (outbox rows, work of other processes, expired leases). */
  readonly pollIntervalMs: number
  /**
   * After a commit in this process wrote events, poll within this long (never later than the poll
   * interval): events committed meanwhile share the poll.
   */
  readonly eventsDelayMs: number
  /** Deliveries claimed (and outbox events drained) per poll. */
  readonly batchSize: number
  /** Claimed deliveries waiting per endpoint; beyond it claims are released for a later poll. */
  readonly queueCapacity: number
  /** Attempts in flight per endpoint at once. */
  readonly concurrencyPerEndpoint: number
  /** Added to WEBHOOK_TIMEOUT for a lease: a dead holder's work is taken over after this. */
  readonly leaseMarginMs: number
  /**
   * At a stop, let attempts in flight finish (within SHUTDOWN_GRACE) before the workers are
   * interrupted; off, a stop interrupts them at once (their leases are released either way).
   */
  readonly finishAttemptsOnStop: boolean
  /**
   * An attempt whose claim came with the merchant's signing secrets read at most this long before
   * it starts goes without renewing its lease first, when the lease still covers WEBHOOK_TIMEOUT and
   * half the margin: no other process takes a lease before it ends while this one beats (and a
   * process stopped for longer than its beats' liveness, 5 s, finds its claims stale and renews) (a
   * rotated-out secret keeps signing for 24 hours, so secrets this fresh still verify). Otherwise the
   * attempt renews the lease and reads the secrets again in one call.
   */
  readonly claimFreshMs: number
}

export const defaultOptions: DispatcherOptions = {
  pollIntervalMs: 250,
  eventsDelayMs: 250,
  batchSize: 200,
  queueCapacity: 1000,
  concurrencyPerEndpoint: 8,
  leaseMarginMs: 30_000,
  finishAttemptsOnStop: false,
  claimFreshMs: 5_000
}

/** A delivery this process holds under a lease, as it waits in its endpoint's queue and is attempted. */
export interface Claim {
  readonly delivery: Delivery
  readonly token: string
  /** When the claim's lease ends. */
  readonly leaseUntil: number
  /**
   * The merchant's signing secrets as read with the claim (a poll's, or by the attempt before
   * it for a successor; null: not read), and when they were read.
   */
  readonly secrets: ReadonlyArray<string> | null
  readonly secretsReadAt: number
}

/** A store call's claims, as the endpoints take them (`Endpoints.handOut`). */
export interface ClaimBatch {
  readonly claimed: ReadonlyArray<Delivery>
  readonly token: string
  /** When the claims' lease ends. */
  readonly leaseUntil: number
  /** The signing secrets read with the claim, by merchant, and when. */
  readonly secrets: ReadonlyMap<string, ReadonlyArray<string>>
  readonly secretsReadAt: number
  /** The deliveries taken over from a cut lease (`PollResult.takenOver`), and when. */
  readonly takenOver: ReadonlySet<string>
  readonly at: number
}

/**
 * Where an attempt queues the successor its record claimed: its own endpoint (the next delivery of
 * its payment to its URL, so of its merchant too).
 */
export interface EndpointQueue {
  /** Queues `claim` behind the endpoint's work (`Effect.void` when it went into the queue); a full queue gives it back to the store, unsent. */
  readonly queue: (claim: Claim) => Effect.Effect<void, StoreUnavailable>
}

/** What the poller, the attempts and the stop tell one another while the dispatcher runs. */
export interface DispatcherState {
  /**
   * Until when the poller sleeps (-Infinity while it is awake: its next idle reads the store
   * afresh). An attempt wakes it only when the retry it scheduled is due before that.
   */
  sleepingUntil: number
  /** Set at a stop: attempts finishing meanwhile claim no successor (no new claims). */
  stopping: boolean
  /** Claims whose attempt has started and not finished (one left here at the end was cut by a stop). */
  readonly inFlight: Set<Claim>
}

export interface DispatcherContext {
  readonly options: DispatcherOptions
  readonly store: WebhookStoreShape
  readonly webhooks: WebhooksShape
  readonly config: AppConfigShape
  readonly ids: IdsShape
  /** This process's instance, named on every lease it takes (null: a process without one). */
  readonly owner: string | null
  readonly clock: Clock.Clock
  /** The clock's callback timer (null: none, as under `TestClock`; the poller's wait races fibers then). */
  readonly timer: CallbackTimer | null
  /** A lease's length: WEBHOOK_TIMEOUT and the margin. */
  readonly leaseMs: number
  /** What a lease must still cover at an attempt's start for the attempt to go without renewing it. */
  readonly freshLeaseNeedMs: number
  /** The POST under WEBHOOK_TIMEOUT: applied by the transport when it can, else raced against the clock. */
  readonly post: (request: WebhookRequest) => Effect.Effect<TransportResult>
  /** Where the poller and the endpoints' workers run: closed after the graceful stop, before the last give-back. */
  readonly fibers: Scope.Scope
  readonly state: DispatcherState
}

/** The context of a dispatcher with `options` whose fibers run in `fibers`, from the services. */
export const makeContext = Effect.fnUntraced(function*(options: DispatcherOptions, fibers: Scope.Scope) {
  const config = yield* AppConfig
  const transport = yield* WebhookTransport
  const clock = yield* Clock.Clock
  const timeoutMs = config.webhookTimeoutMs
  const onTimeout = () => timedOut(timeoutMs)
  const post = transport.postWithin !== undefined
    ? (request: WebhookRequest) => transport.postWithin!(request, timeoutMs)
    : (request: WebhookRequest) =>
      Effect.timeoutOrElse(transport.post(request), {
        duration: Duration.millis(timeoutMs),
        orElse: () => Effect.sync(onTimeout)
      })
  const context: DispatcherContext = {
    options,
    store: yield* WebhookStore,
    webhooks: yield* Webhooks,
    config,
    ids: yield* Ids,
    owner: yield* Instance.currentId,
    clock,
    timer: yield* callbackTimerOf(clock),
    leaseMs: timeoutMs + options.leaseMarginMs,
    freshLeaseNeedMs: timeoutMs + options.leaseMarginMs / 2,
    post,
    fibers,
    state: { sleepingUntil: Number.NEGATIVE_INFINITY, stopping: false, inFlight: new Set() }
  }
  return context
})
