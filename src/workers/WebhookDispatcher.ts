import { Cause, Clock, Duration, Effect, Fiber, Layer, Option, Scope } from "effect"
import type { AttemptOutcome, Delivery } from "../domain/Webhook.ts"
import { afterAttempt, cutAttempt, isOpen, isSuccess, nextAttemptNumber, signatureHeader } from "../domain/Webhook.ts"
import * as Metrics from "../platform/Metrics.ts"
import { AppConfig } from "../platform/Config.ts"
import { Ids } from "../platform/Ids.ts"
import * as Instance from "../platform/Instance.ts"
import { isoAt, isoMs } from "../platform/Time.ts"
import { type CallbackTimer, callbackTimerOf } from "../platform/Timers.ts"
import { timedOut, type TransportResult, WebhookTransport, type WebhookRequest } from "../platform/WebhookTransport.ts"
import { Webhooks } from "../services/Webhooks.ts"
import type { StoreUnavailable } from "../store/Store.ts"
import { WebhookStore } from "../store/WebhookStore.ts"

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
   * process stopped for longer than its beats' liveness, 5 s, finds its claims stale and renews) (a rotated-out secret keeps
   * signing for 24 hours, so secrets this fresh still verify). Otherwise the attempt renews the
   * lease and reads the secrets again in one call.
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

interface Claim {
  readonly delivery: Delivery
  readonly token: string
  /** When the claim's lease ends (ms). */
  readonly leaseUntilMs: number
  /**
   * The merchant's signing secrets as read with the claim (a poll's, or by the attempt before
   * it for a successor; null: not read), and when they were read.
   */
  readonly secrets: ReadonlyArray<string> | null
  readonly secretsReadAtMs: number
}

/** A store call's claims, as `handOut` hands them to the endpoints. */
interface ClaimBatch {
  readonly claimed: ReadonlyArray<Delivery>
  readonly token: string
  /** When the claims' lease ends (ms). */
  readonly leaseUntilMs: number
  /** The signing secrets read with the claim, by merchant, and when. */
  readonly secrets: ReadonlyMap<string, ReadonlyArray<string>>
  readonly secretsReadAtMs: number
  /** The deliveries taken over from a cut lease (`PollResult.takenOver`), and when. */
  readonly takenOver: ReadonlySet<string>
  readonly at: string
}

const noneTakenOver: ReadonlySet<string> = new Set()

/** A worker's place among its mailbox's takers while it waits (null: not waiting). */
interface WaitingPlace {
  taker: ((claim: Claim) => void) | null
}

/**
 * An endpoint's bounded queue of claims, as `Queue.dropping` behaves (an offer beyond the
 * capacity is refused; a taker waiting gets the next claim, first come first served), with a
 * synchronous `offer` and `takeAll`, so a poll hands its claims out without an Effect step each.
 */
class Mailbox {
  private items: Array<Claim> = []
  private head = 0
  private readonly takers: Array<(claim: Claim) => void> = []

  constructor(private readonly capacity: number) {}

  /** False when full: the caller gives the claim back. */
  offer(claim: Claim): boolean {
    const taker = this.takers.shift()
    if (taker !== undefined) {
      taker(claim)
      return true
    }
    if (this.items.length - this.head >= this.capacity) return false
    this.items.push(claim)
    return true
  }

  /**
   * Goes on with `serve` of the next claim, waiting for one when there is none: one `Effect.callback`
   * either way (`serve` is called when the claim is handed over). The wait registers no canceller
   * (Effect wraps every async that returns one in an interruption handler, ~10 steps a wait): the
   * worker gives its waiting place back with `cancel` once, from the one handler it runs under.
   */
  next<A, E>(place: WaitingPlace, serve: (claim: Claim) => Effect.Effect<A, E>): Effect.Effect<A, E> {
    return Effect.callback<A, E>((resume) => {
      if (this.head < this.items.length) {
        const claim = this.items[this.head]!
        this.items[this.head++] = undefined as never
        if (this.head === this.items.length) {
          this.items = []
          this.head = 0
        }
        return resume(serve(claim))
      }
      const taker = (claim: Claim) => {
        place.taker = null
        resume(serve(claim))
      }
      place.taker = taker
      this.takers.push(taker)
    })
  }

  /** Takes back a worker's waiting place (its fiber is interrupted): no claim is handed to it any more. */
  cancel(place: WaitingPlace) {
    const taker = place.taker
    if (taker === null) return
    place.taker = null
    const index = this.takers.indexOf(taker)
    if (index >= 0) this.takers.splice(index, 1)
  }

  takeAll(): Array<Claim> {
    const claims = this.items.slice(this.head)
    this.items = []
    this.head = 0
    return claims
  }
}

/**
 * The webhook dispatcher. A poller drains the outbox into deliveries and claims due deliveries
 * under a lease (so several processes share the work and a dead one's work is taken over); each
 * endpoint is an actor: a bounded queue worked with bounded concurrency by its own supervised
 * fiber, so a slow or dead endpoint only ever delays itself.
 */
export const run = (options: DispatcherOptions = defaultOptions) =>
  Effect.gen(function*() {
    const store = yield* WebhookStore
    const webhooks = yield* Webhooks
    const transport = yield* WebhookTransport
    const config = yield* AppConfig
    const ids = yield* Ids
    /** This process's instance, named on every lease it takes (null: a process without one). */
    const owner = yield* Instance.currentId
    const scope = yield* Effect.scope
    const clock = yield* Clock.Clock
    const timer = yield* callbackTimerOf(clock)
    const leaseMs = config.webhookTimeoutMs + options.leaseMarginMs
    /** What a lease must still cover at an attempt's start for the attempt to go without renewing it. */
    const freshLeaseNeedMs = config.webhookTimeoutMs + options.leaseMarginMs / 2
    /** Endpoints' mailboxes by merchant, then URL (no key text built per claim), and all of them. */
    const actors = new Map<string, Map<string, Mailbox>>()
    const mailboxes: Array<Mailbox> = []
    /**
     * Until when the poller sleeps (-Infinity while it is awake: its next idle reads the store
     * afresh). An attempt wakes it only when the retry it scheduled is due before that.
     */
    let sleepingUntilMs = Number.NEGATIVE_INFINITY
    /** Claims whose attempt has started and not finished (one left here was cut by a stop). */
    const inFlight = new Set<Claim>()
    // Last at shutdown (after the workers are interrupted): claims still waiting in an endpoint's
    // queue, and those whose attempt the stop cut in the middle (given back as cut: the endpoint
    // may have it), go back to the store, so another process takes them now, not when their lease
    // ends (a recorded attempt's token holds nothing, so giving it back changes nothing). A killed
    // process reaches nothing (its leases are taken over once it stops beating): each give-back is
    // best effort, whatever its outcome.
    yield* Effect.addFinalizer(() =>
      Effect.gen(function*() {
        const cutAt = isoAt(clock.currentTimeMillisUnsafe())
        const giveBack = (claim: Claim, cut: string | undefined) =>
          store.releaseLease(claim.delivery.id, claim.token, cut).pipe(Effect.catchCause(() => Effect.void))
        yield* Effect.forEach([...inFlight], (claim) => giveBack(claim, cutAt), { discard: true })
        yield* Effect.forEach(mailboxes.flatMap((mailbox) => mailbox.takeAll()), (claim) => giveBack(claim, undefined), { discard: true })
      })
    )

    // The poller and the workers live in a scope of their own, closed after the graceful stop
    // below (a finalizer added later runs earlier): the stop runs while they still run.
    const fibers = yield* Scope.fork(scope, "sequential")
    let poller: Fiber.Fiber<never, never> | undefined
    /** Set at a stop: attempts finishing meanwhile claim no successor (no new claims). */
    let stopping = false
    yield* Effect.addFinalizer(() =>
      Effect.gen(function*() {
        // No new claims; the claims still queued go back to the store at once.
        stopping = true
        if (poller !== undefined) yield* Fiber.interrupt(poller)
        let released = 0
        for (const mailbox of mailboxes) {
          for (const { delivery, token } of mailbox.takeAll()) {
            yield* store.releaseLease(delivery.id, token).pipe(Effect.ignore)
            released++
          }
        }
        const startedInFlight = inFlight.size
        if (!options.finishAttemptsOnStop) return
        const finished = yield* Effect.gen(function*() {
          while (inFlight.size > 0) yield* Effect.sleep(Duration.millis(10))
        }).pipe(Effect.timeoutOption(Duration.millis(config.shutdownGraceMs)))
        yield* Option.isSome(finished)
          ? Effect.logInfo(`shutting down: webhook dispatcher stopped; ${startedInFlight} attempts in flight finished, ${released} queued claims released`)
          : Effect.logWarning(
            `shutting down: webhook dispatcher stopped; ${inFlight.size} attempts cut off after SHUTDOWN_GRACE (their claims released), ${released} queued claims released`
          )
      })
    )

    const timeoutMs = config.webhookTimeoutMs
    const onTimeout = () => timedOut(timeoutMs)
    /** The POST under WEBHOOK_TIMEOUT: applied by the transport when it can, else raced against the clock. */
    const post = transport.postWithin !== undefined
      ? (request: WebhookRequest) => transport.postWithin!(request, timeoutMs)
      : (request: WebhookRequest) =>
        Effect.timeoutOrElse(transport.post(request), { duration: Duration.millis(timeoutMs), orElse: () => Effect.sync(onTimeout) })

    /** An attempt with no secret to sign with: the merchant's stored secret does not open under this service's key. */
    const unsignable: TransportResult = {
      _tag: "Failed",
      error: "not sent: the webhook signing secret cannot be opened with this service's RESPONSE_ENCRYPTION_KEY; rotate the secret"
    }

    /** The attempt counters by outcome, looked up once. */
    const attemptsSucceeded = Metrics.webhookAttempts("succeeded")
    const attemptsRejected = Metrics.webhookAttempts("rejected")
    const attemptsError = Metrics.webhookAttempts("error")

    /**
     * One attempt of a claim: renew the lease, POST, record. A chain of `flatMap`s with each
     * stretch of synchronous work in one callback (a generator costs an iterator step and a
     * continuation per `yield*`, ~1 in 4 of an attempt's Effect instructions).
     */
    const attempt = ({ secretsReadAtMs, delivery, leaseUntilMs, secrets, token }: Claim) =>
      Effect.suspend(() => {
        const atMs = Math.floor(clock.currentTimeMillisUnsafe())
        const at = isoAt(atMs)
        // A fresh claim's lease is ours (no other process takes it before it ends) and covers
        // the attempt with room to spare: it goes at once, signed with the secrets the claim read.
        if (secrets !== null && atMs - secretsReadAtMs <= options.claimFreshMs && atMs + freshLeaseNeedMs <= leaseUntilMs) {
          return send(delivery, token, secrets, secretsReadAtMs, atMs, at)
        }
        // Renewing proves the lease is still ours (a claim that waited too long is someone else's
        // now); the same call answers the secrets to sign with.
        return Effect.flatMap(
          store.renewLease(delivery.id, token, at, isoAt(atMs + leaseMs)),
          (secrets) => (secrets === null ? Effect.void : send(delivery, token, secrets, atMs, atMs, at))
        )
      })

    /** The POST of an attempt that starts at `at` with `secrets` read at `secretsAtMs`, then its record. */
    const send = (delivery: Delivery, token: string, secrets: ReadonlyArray<string>, secretsAtMs: number, atMs: number, at: string) => {
      const startMs = clock.currentTimeMillisUnsafe()
      if (delivery.nextAttemptAt !== null) {
        Metrics.record(Metrics.webhookDeliveryLag, Math.max(0, startMs - isoMs(delivery.nextAttemptAt)) / 1000)
      }
      const request: WebhookRequest = {
        url: delivery.url,
        body: delivery.payload,
        headers: {
          "content-type": "application/json",
          "user-agent": "payments-webhooks/1.0",
          "x-service-signature": signatureHeader(secrets, Math.floor(atMs / 1000), delivery.payload),
          "x-service-event-id": delivery.eventId,
          "x-service-delivery-id": delivery.id,
          "x-service-delivery-attempt": String(nextAttemptNumber(delivery))
        }
      }
      // Never an unsigned POST: without a secret it can open, the attempt fails and is retried on schedule.
      return Effect.flatMap(secrets.length === 0 ? Effect.succeed(unsignable) : post(request), (result) => {
        const endMs = clock.currentTimeMillisUnsafe()
        const durationMs = endMs - startMs
        const outcome: AttemptOutcome = result._tag === "Answered"
          ? { _tag: "Answered", status: result.status, snippet: result.snippet, durationMs }
          : { _tag: "Failed", error: result.error, durationMs }
        const endAt = isoAt(endMs)
        const next = afterAttempt(delivery, at, outcome, config.webhookRetryScheduleMs, endAt)
        const counter = isSuccess(outcome) ? attemptsSucceeded : outcome._tag === "Answered" ? attemptsRejected : attemptsError
        const recorded = (answer: boolean) => {
          Metrics.record(counter, 1)
          if (answer && next.delivery.status === "failed") Metrics.record(Metrics.webhookDeliveriesFailed, 1)
          // (An awake poller, -Infinity, needs no wake: no time read then.)
          const retryAt = next.delivery.nextAttemptAt
          return retryAt !== null && sleepingUntilMs !== Number.NEGATIVE_INFINITY && isoMs(retryAt) < sleepingUntilMs ? webhooks.wake : Effect.void
        }
        // The payment's next event waits for this one: once this one is done, it is due at once,
        // so it is claimed in the same call (under the same token) and queued behind this
        // endpoint's work, as a poll would: not cut in the middle by a stop.
        if (delivery.order === null || isOpen(next.delivery) || stopping) {
          return Effect.flatMap(store.recordAttempt(next.delivery, next.attempt, token, undefined), (answer) => recorded(answer._tag !== "LeaseLost"))
        }
        const successorUntilMs = endMs + leaseMs
        const successor = { now: endAt, lease: { token, until: isoAt(successorUntilMs), owner } }
        return Effect.uninterruptible(Effect.flatMap(store.recordAttempt(next.delivery, next.attempt, token, successor), (answer) => {
          if (answer._tag !== "RecordedWithSuccessor") return recorded(answer._tag === "Recorded")
          // Recorded, and a successor claimed: a store failure handing it out (a full mailbox's
          // claim given back) is not this attempt's; the successor's lease ends and it is taken over.
          // Same merchant: it signs with this attempt's secrets, as fresh as they were for this one.
          const handed = handOut({ claimed: [answer.successor], token, leaseUntilMs: successorUntilMs, secrets: secretsByMerchant(delivery.merchantId, secrets), secretsReadAtMs: secretsAtMs, takenOver: noneTakenOver, at: endAt }, 0)
          if (handed === Effect.void) return recorded(true)
          return Effect.flatMap(
            Effect.catch(handed, (error) =>
              Effect.logWarning(`webhook delivery ${answer.successor.id} (successor of ${delivery.id}) not handed out; taken over when its lease ends`, error)),
            () => recorded(true)
          )
        }))
      })
    }

    /**
     * Starts one endpoint's actor: a bounded mailbox worked by `concurrencyPerEndpoint` supervised
     * worker fibers. A defect in an attempt restarts that worker only; the mailbox (and so the
     * endpoint's waiting work) survives, and the attempt it was on is taken over when its lease ends.
     */
    const startActor = (merchantId: string, url: string) =>
      Effect.suspend(() => {
        const mailbox = new Mailbox(options.queueCapacity)
        const ofMerchant = actors.get(merchantId)
        if (ofMerchant === undefined) actors.set(merchantId, new Map([[url, mailbox]]))
        else ofMerchant.set(url, mailbox)
        mailboxes.push(mailbox)
        const worker = (place: WaitingPlace) => Effect.suspend(() => {
          let current: Claim | null = null
          // A plain loop: no yield between attempts (take suspends when there is no work, and the
          // runtime's scheduler still yields a long-running fiber). An attempt cut by a stop stays
          // in flight: the last finalizer gives its claim back.
          // A claim is in flight from when it is handed to this worker (so a stop before the
          // worker resumes still gives it back).
          const serve: Effect.Effect<never, StoreUnavailable> = mailbox.next(place, (claim) => {
            inFlight.add(current = claim)
            return attempt(claim).pipe(Effect.flatMap(() => {
              inFlight.delete(claim)
              current = null
              return serve
            }))
          })
          // One handler for the worker's whole loop (none around each attempt): after it the
          // worker starts again, in the same waiting place.
          return serve.pipe(Effect.catchCause((cause) => {
            if (Cause.hasInterruptsOnly(cause)) return Effect.failCause(cause)
            // The attempt is over (its claim is taken over when its lease ends).
            const claim = current
            if (claim !== null) inFlight.delete(claim)
            // The store failed: the attempt was not recorded.
            const failure = Cause.findErrorOption(cause)
            if (claim !== null && Option.isSome(failure)) {
              return Effect.logWarning(`webhook delivery ${claim.delivery.id} attempt not recorded`, failure.value)
            }
            // A defect.
            return Effect.logError("webhook endpoint worker crashed; restarting", cause)
          }))
        }).pipe(Effect.forever)
        // Each worker waits in its own place; interrupted, it gives the place back (once, not per wait).
        const supervised = Effect.suspend(() => {
          const place: WaitingPlace = { taker: null }
          return Effect.onInterrupt(worker(place), () => Effect.sync(() => mailbox.cancel(place)))
        })
        // Forked from a poll, which a stop does not cut: the workers themselves must stay interruptible.
        return Effect.replicateEffect(Effect.forkIn(Effect.interruptible(supervised), fibers), options.concurrencyPerEndpoint, { discard: true })
      })

    /**
     * Hands the claims of `batch` from `from` on to their endpoints' mailboxes (starting an
     * endpoint's actor the first time): synchronous but for those starts and a full mailbox's claim
     * given back. A delivery taken over from a cut lease carries its cut attempt, recorded at
     * `batch.at`, so the attempt that follows is the next one. When a give-back fails, the claims not
     * handed out yet are given back too (best effort), for the next poll: not left under a lease
     * nobody works until it ends.
     */
    const handOut = (batch: ClaimBatch, from: number): Effect.Effect<void, StoreUnavailable> => {
      const { claimed, token } = batch
      for (let i = from; i < claimed.length; i++) {
        const leased = claimed[i]!
        const delivery = batch.takenOver.has(leased.id) ? cutAttempt(leased, batch.at) : leased
        const mailbox = actors.get(delivery.merchantId)?.get(delivery.url)
        if (mailbox === undefined) {
          return Effect.flatMap(startActor(delivery.merchantId, delivery.url), () => handOut(batch, i))
        }
        const secrets = batch.secrets.get(delivery.merchantId) ?? null
        if (!mailbox.offer({ delivery, token, leaseUntilMs: batch.leaseUntilMs, secrets, secretsReadAtMs: batch.secretsReadAtMs })) {
          // Given back as it was leased: the cut stays to be recorded by the next claim.
          const givenBack = Effect.tapError(store.releaseLease(delivery.id, token), () => giveBackRest(claimed, token, i + 1))
          return Effect.flatMap(givenBack, () => handOut(batch, i + 1))
        }
      }
      return Effect.void
    }
    const secretsByMerchant = (merchantId: string, secrets: ReadonlyArray<string>): ReadonlyMap<string, ReadonlyArray<string>> =>
      new Map([[merchantId, secrets]])
    const giveBackRest = (claimed: ReadonlyArray<Delivery>, token: string, from: number) =>
      Effect.forEach(claimed.slice(from), (delivery) => Effect.ignore(store.releaseLease(delivery.id, token)), { discard: true })

    /**
     * When work is next due, as the last poll's store call answered (ms; Infinity: none), for the
     * idle wait after it; undefined when that poll failed (the wait asks the store).
     */
    let polledNextDueMs: number | undefined

    /** A failed poll is logged; the poller waits and polls again (0 claimed). */
    const pollFailed = (error: StoreUnavailable) => Effect.as(Effect.logWarning("webhook poll failed", error), 0)
    /**
     * A poll's store call that did not answer: unavailable (a warning; the next poll retries), or a
     * defect (a bug, or data the store could not read): an error, and the poller goes on, as the
     * endpoints' workers do. A poller that died would stop this process's webhooks without a word.
     */
    const pollEnded = (cause: Cause.Cause<StoreUnavailable>): Effect.Effect<number> => {
      const failure = Cause.findErrorOption(cause)
      if (Option.isSome(failure)) return pollFailed(failure.value)
      if (Cause.hasInterruptsOnly(cause)) return Effect.failCause(cause as Cause.Cause<never>)
      return Effect.as(Effect.logError("webhook poll crashed; polling goes on", cause), 0)
    }
    /**
     * A full mailbox's claim whose give-back failed: taken over when its lease ends; the claims
     * after it were given back (those whose give-back failed too wait for their leases as well).
     */
    const handOutFailed = (error: StoreUnavailable) =>
      Effect.as(
        Effect.logWarning("webhook claim not given back (a full mailbox): taken over when its lease ends; the poll's claims after it were given back", error),
        0
      )

    /**
     * One poll, one store call: outbox → deliveries (batches while they come full, at most ten),
     * then claim due work and hand it to the endpoints. Returns the number claimed (0 when it
     * failed: logged). The store call's outcome is matched in one step (not a `flatMap` for the
     * hand-out and a `catchAll` around both): a hand-out that fails is caught on its own.
     */
    const poll = Effect.suspend(() => {
      const nowMs = Math.floor(clock.currentTimeMillisUnsafe())
      const now = isoAt(nowMs)
      polledNextDueMs = undefined
      // Announced before the store is read, so a retry recorded meanwhile still wakes the wait after it.
      sleepingUntilMs = nowMs + options.pollIntervalMs
      let token = ""
      const leaseUntilMs = nowMs + leaseMs
      const lease = () => ({ token: token = ids.secret("lease_"), until: isoAt(leaseUntilMs), owner })
      return Effect.matchCauseEffect(
        store.poll({ drainLimit: options.batchSize, drainBatches: 10, build: webhooks.deliveryBuilder(now), now, lease, claimLimit: options.batchSize }),
        {
          onFailure: pollEnded,
          onSuccess: ({ claimed, nextDueMs, secrets, takenOver }) => {
            polledNextDueMs = nextDueMs === null ? Infinity : nextDueMs
            // A full batch polls again at once, without a wait.
            if (claimed.length === options.batchSize) sleepingUntilMs = Number.NEGATIVE_INFINITY
            const handed = handOut({ claimed, token, leaseUntilMs, secrets, secretsReadAtMs: nowMs, takenOver, at: now }, 0)
            return handed === Effect.void ? Effect.succeed(claimed.length) : Effect.catch(Effect.as(handed, claimed.length), handOutFailed)
          }
        }
      )
    })

    /** Stops the poller's wait in progress (timer and listeners), if any. */
    let cancelWait: (() => void) | null = null
    /**
     * Waits until `untilMs`, a wake, or `eventsDelayMs` after an events commit (never past
     * `untilMs`), whichever comes first, then calls `done` (once): on the clock's callback timer and
     * the two signals, no fiber forked, no Effect step. A wake already pending ends it at once (`done`
     * is called before this returns); an events commit already pending starts its delay now.
     */
    const startWait = (timer: CallbackTimer, nowMs: number, untilMs: number, done: () => void) => {
      if (webhooks.wakeSignal.tryTake()) return done()
      let over = false
      let removeEvents: (() => void) | null = null
      let cancelTimer: () => void
      const stop = () => {
        if (cancelWait === stop) cancelWait = null
        over = true
        cancelTimer()
        removeWake()
        removeEvents?.()
      }
      const finish = () => {
        if (over) return
        stop()
        done()
      }
      const removeWake = webhooks.wakeSignal.listen(finish)
      const eventsAt = (atMs: number) => {
        if (atMs + options.eventsDelayMs >= untilMs) return
        cancelTimer()
        cancelTimer = timer(options.eventsDelayMs, finish)
      }
      cancelTimer = timer(untilMs - nowMs, finish)
      if (webhooks.eventsSignal.tryTake()) eventsAt(nowMs)
      else {
        removeEvents = webhooks.eventsSignal.listen(() => {
          removeEvents = null
          if (!over) eventsAt(clock.currentTimeMillisUnsafe())
        })
      }
      // No canceller (one would wrap every wait in an interruption handler): an interrupted
      // poller stops its wait from its one handler (`cancelWait`).
      cancelWait = stop
    }

    /** The same wait for a clock without a callback timer (`TestClock`): a race of three fibers. */
    const raceFor = (nowMs: number, untilMs: number) => {
      const untilTimeout = Effect.sleep(Duration.millis(Math.max(0, untilMs - nowMs)))
      const eventsDelay = Duration.millis(Math.min(options.eventsDelayMs, Math.max(0, untilMs - nowMs)))
      return Effect.raceAll([untilTimeout, webhooks.awaitWake, Effect.andThen(webhooks.awaitEventsCommitted, Effect.sleep(eventsDelay))])
    }

    /** Until when to wait at `nowMs` for work due at `dueMs` (Infinity: none): at most a poll interval. */
    const waitUntil = (nowMs: number, dueMs: number) =>
      // Work due already but not claimed sits in a full endpoint queue: wait a poll interval for it.
      dueMs <= nowMs ? nowMs + options.pollIntervalMs : Math.min(nowMs + options.pollIntervalMs, dueMs)
    const awake = () => {
      sleepingUntilMs = Number.NEGATIVE_INFINITY
    }

    /** Starts the wait on the callback timer for work due at `dueMs` (announced); `done` once it is over. */
    const startWaitUntilDue = (timer: CallbackTimer, nowMs: number, dueMs: number, done: () => void) => {
      const untilMs = waitUntil(nowMs, dueMs)
      sleepingUntilMs = untilMs
      startWait(timer, nowMs, untilMs, () => {
        awake()
        done()
      })
    }

    /** The idle wait for work due at `dueMs`, as an effect (after a failed poll, or without a callback timer). */
    const waitUntilDue = (nowMs: number, dueMs: number): Effect.Effect<void> => {
      if (timer !== null) return Effect.callback<void>((resume) => startWaitUntilDue(timer, nowMs, dueMs, () => resume(Effect.void)))
      const untilMs = waitUntil(nowMs, dueMs)
      sleepingUntilMs = untilMs
      return Effect.map(raceFor(nowMs, untilMs), awake)
    }

    /**
     * The wait after a poll, for the due time the poll's store call answered, then the next poll:
     * one `Effect.callback`, resumed with the polls themselves (no step to end the wait and another
     * to go on). After a failed poll the store is asked (announced before it is read, so a retry
     * recorded meanwhile still wakes us).
     */
    const idleThenPoll: Effect.Effect<never> = Effect.callback<never>((resume) => {
      const nowMs = clock.currentTimeMillisUnsafe()
      const dueMs = polledNextDueMs
      if (dueMs === undefined) {
        sleepingUntilMs = nowMs + options.pollIntervalMs
        return resume(Effect.flatMap(store.nextDueAt().pipe(Effect.orElseSucceed(() => null)), (due) =>
          Effect.flatMap(waitUntilDue(nowMs, due === null ? Infinity : isoMs(due)), () => polls)))
      }
      if (timer === null) return resume(Effect.flatMap(waitUntilDue(nowMs, dueMs), () => polls))
      startWaitUntilDue(timer, nowMs, dueMs, () => resume(polls))
    })

    // A poll is not cut in the middle by a stop: claims it made always reach a queue (or go back).
    // A plain loop: the idle wait suspends, and a full batch yields before the next poll.
    const polls: Effect.Effect<never> = poll.pipe(
      Effect.uninterruptible,
      Effect.flatMap((claimed) => (claimed === options.batchSize ? Effect.flatMap(Effect.yieldNow, () => polls) : idleThenPoll))
    )
    poller = yield* Effect.forkIn(Effect.onInterrupt(polls, () => Effect.sync(() => cancelWait?.())), fibers)
  })

export const layerWith = (options: Partial<DispatcherOptions> = {}) =>
  Layer.effectDiscard(run({ ...defaultOptions, ...options }))

/** The dispatcher with default options (merged into the service's workers). */
export const layer = layerWith({ finishAttemptsOnStop: true })

