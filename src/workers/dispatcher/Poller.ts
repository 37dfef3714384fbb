import { Cause, Duration, Effect, type Fiber, Option } from "effect"
import type { CallbackTimer } from "../../platform/Timers.ts"
import type { StoreUnavailable } from "../../store/Store.ts"
import type { PollResult } from "../../store/WebhookStore.ts"
import type { ClaimBatch, DispatcherContext } from "./Context.ts"
import type { Endpoints } from "./Endpoints.ts"

/**
 * The dispatcher's poller: one store call a poll drains the outbox into deliveries and claims due
 * work under a lease naming this instance (so several processes share the work and a dead one's is
 * taken over), and the endpoints take the claims; then it sleeps until work is due, the poll
 * interval, a wake (an attempt's retry due sooner, a manual resend) or shortly after a commit of
 * this process wrote events. A poll and its wait are measured hot paths (every poll interval of
 * every process): the wait is one `Effect.callback` on the clock's timer and the two signals.
 */

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
 * A full mailbox's claim whose give-back failed: taken over when its lease ends; the claims after
 * it were given back (those whose give-back failed too wait for their leases as well).
 */
const handOutFailed = (error: StoreUnavailable) =>
  Effect.as(
    Effect.logWarning(
      "webhook claim not given back (a full mailbox): taken over when its lease ends; the poll's claims after it were given back",
      error
    ),
    0
  )

export class Poller {
  /** The poller's fiber, once started (a stop interrupts it first). */
  fiber: Fiber.Fiber<never, never> | undefined = undefined
  /**
   * When work is next due, as the last poll's store call answered (ms; Infinity: none), for the
   * idle wait after it; undefined when that poll failed (the wait asks the store).
   */
  private polledNextDueAt: number | undefined = undefined
  /** Stops the wait in progress (timer and listeners), if any. */
  private cancelWait: (() => void) | null = null
  /** One poll: the number claimed (0 when it failed: logged). */
  private readonly poll: Effect.Effect<number>
  /**
   * Polls for ever. A poll is not cut in the middle by a stop: claims it made always reach a queue
   * (or go back). A plain loop: the idle wait suspends, and a full batch yields before the next poll.
   */
  private readonly polls: Effect.Effect<never>
  /**
   * The wait after a poll, for the due time the poll's store call answered, then the next poll: one
   * `Effect.callback`, resumed with the polls themselves (a hot path, docs/architecture.md).
   */
  private readonly idleThenPoll: Effect.Effect<never>

  constructor(private readonly ctx: DispatcherContext, private readonly endpoints: Endpoints) {
    this.poll = Effect.suspend(() => this.pollNow())
    const batchSize = ctx.options.batchSize
    this.polls = this.poll.pipe(
      Effect.uninterruptible,
      Effect.flatMap((
        claimed
      ) => (claimed === batchSize ? Effect.flatMap(Effect.yieldNow, () => this.polls) : this.idleThenPoll))
    )
    this.idleThenPoll = Effect.callback<never>((resume) => this.idle(resume))
  }

  /** Forks the poller into the dispatcher's fibers; an interruption stops its wait. */
  start(): Effect.Effect<void> {
    const interrupted = () => Effect.sync(() => this.cancelWait?.())
    return Effect.map(Effect.forkIn(Effect.onInterrupt(this.polls, interrupted), this.ctx.fibers), (fiber) => {
      this.fiber = fiber
    })
  }

  /**
   * One poll, one store call: outbox → deliveries (batches while they come full, at most ten), then
   * claim due work under a lease minted only when something is claimed, and hand it to the
   * endpoints. A hand-out that fails is caught on its own.
   */
  private pollNow(): Effect.Effect<number> {
    const { ctx } = this
    const batchSize = ctx.options.batchSize
    const now = Math.floor(ctx.clock.currentTimeMillisUnsafe())
    this.polledNextDueAt = undefined
    // Announced before the store is read, so a retry recorded meanwhile still wakes the wait after it.
    ctx.state.sleepingUntil = now + ctx.options.pollIntervalMs
    let token = ""
    const leaseUntil = now + ctx.leaseMs
    const lease = () => ({ token: token = ctx.ids.secret("lease_"), until: leaseUntil, owner: ctx.owner })
    const build = ctx.webhooks.deliveryBuilder(now)
    return Effect.matchCauseEffect(
      ctx.store.poll({ drainLimit: batchSize, drainBatches: 10, build, now, lease, claimLimit: batchSize }),
      {
        onFailure: pollEnded,
        onSuccess: (polled) =>
          this.handOut(polled, {
            claimed: polled.claimed,
            token,
            leaseUntil,
            secrets: polled.secrets,
            secretsReadAt: now,
            takenOver: polled.takenOver,
            at: now
          })
      }
    )
  }

  /** A poll's claims to the endpoints; the number claimed. A full batch polls again at once, without a wait. */
  private handOut(polled: PollResult, batch: ClaimBatch): Effect.Effect<number> {
    this.polledNextDueAt = polled.nextDueAt === null ? Infinity : polled.nextDueAt
    const claimed = batch.claimed.length
    if (claimed === this.ctx.options.batchSize) this.ctx.state.sleepingUntil = Number.NEGATIVE_INFINITY
    const handed = this.endpoints.handOut(batch, 0)
    return handed === Effect.void ? Effect.succeed(claimed) : Effect.catch(Effect.as(handed, claimed), handOutFailed)
  }

  /**
   * `idleThenPoll`'s wait, resumed with the next polls. After a failed poll the store is asked
   * (announced before it is read, so a retry recorded meanwhile still wakes us).
   */
  private idle(resume: (effect: Effect.Effect<never>) => void) {
    const { ctx } = this
    const now = ctx.clock.currentTimeMillisUnsafe()
    const dueAt = this.polledNextDueAt
    if (dueAt === undefined) {
      ctx.state.sleepingUntil = now + ctx.options.pollIntervalMs
      const due = ctx.store.nextDueAt().pipe(Effect.orElseSucceed(() => null))
      return resume(
        Effect.flatMap(
          due,
          (at) => Effect.flatMap(this.waitUntilDue(now, at ?? Infinity), () => this.polls)
        )
      )
    }
    const timer = ctx.timer
    if (timer === null) return resume(Effect.flatMap(this.waitUntilDue(now, dueAt), () => this.polls))
    this.startWaitUntilDue(timer, now, dueAt, () => resume(this.polls))
  }

  /** Until when to wait at `now` for work due at `dueAt` (Infinity: none): at most a poll interval. */
  private waitUntil(now: number, dueAt: number) {
    const pollIntervalMs = this.ctx.options.pollIntervalMs
    // Work due already but not claimed sits in a full endpoint queue: wait a poll interval for it.
    return dueAt <= now ? now + pollIntervalMs : Math.min(now + pollIntervalMs, dueAt)
  }

  /** The idle wait for work due at `dueAt`, as an effect (after a failed poll, or without a callback timer). */
  private waitUntilDue(now: number, dueAt: number): Effect.Effect<void> {
    const timer = this.ctx.timer
    if (timer !== null) {
      return Effect.callback<void>((resume) => this.startWaitUntilDue(timer, now, dueAt, () => resume(Effect.void)))
    }
    const until = this.waitUntil(now, dueAt)
    this.ctx.state.sleepingUntil = until
    return Effect.map(this.raceFor(now, until), () => this.awake())
  }

  private awake() {
    this.ctx.state.sleepingUntil = Number.NEGATIVE_INFINITY
  }

  /** Starts the wait on the callback timer for work due at `dueAt` (announced); `done` once it is over. */
  private startWaitUntilDue(timer: CallbackTimer, now: number, dueAt: number, done: () => void) {
    const until = this.waitUntil(now, dueAt)
    this.ctx.state.sleepingUntil = until
    this.startWait(timer, now, until, () => {
      this.awake()
      done()
    })
  }

  /**
   * Waits until `until`, a wake, or `eventsDelayMs` after an events commit (never past
   * `until`), whichever comes first, then calls `done` (once): on the clock's callback timer and
   * the two signals, no fiber forked. A wake already pending ends it at once (`done`
   * is called before this returns); an events commit already pending starts its delay now.
   */
  private startWait(timer: CallbackTimer, now: number, until: number, done: () => void) {
    const { clock, options, webhooks } = this.ctx
    if (webhooks.wakeSignal.tryTake()) return done()
    let over = false
    let removeEvents: (() => void) | null = null
    let cancelTimer: () => void
    const stop = () => {
      if (this.cancelWait === stop) this.cancelWait = null
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
    const eventsAt = (at: number) => {
      if (at + options.eventsDelayMs >= until) return
      cancelTimer()
      cancelTimer = timer(options.eventsDelayMs, finish)
    }
    cancelTimer = timer(until - now, finish)
    if (webhooks.eventsSignal.tryTake()) eventsAt(now)
    else {
      removeEvents = webhooks.eventsSignal.listen(() => {
        removeEvents = null
        if (!over) eventsAt(clock.currentTimeMillisUnsafe())
      })
    }
    // No canceller (one would wrap every wait in an interruption handler): an interrupted poller
    // stops its wait from its one handler (`cancelWait`).
    this.cancelWait = stop
  }

  /** The same wait for a clock without a callback timer (`TestClock`): a race of three fibers. */
  private raceFor(now: number, until: number) {
    const { options, webhooks } = this.ctx
    const untilTimeout = Effect.sleep(Duration.millis(Math.max(0, until - now)))
    const eventsDelay = Duration.millis(Math.min(options.eventsDelayMs, Math.max(0, until - now)))
    return Effect.raceAll([
      untilTimeout,
      webhooks.awaitWake,
      Effect.andThen(webhooks.awaitEventsCommitted, Effect.sleep(eventsDelay))
    ])
  }
}
