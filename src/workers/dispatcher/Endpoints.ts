import { Cause, Effect, Option } from "effect"
import type { Delivery } from "../../domain/Webhook.ts"
import { cutAttempt } from "../../domain/Webhook.ts"
import type { StoreUnavailable } from "../../store/Store.ts"
import { attempt } from "./Attempt.ts"
import type { Claim, ClaimBatch, DispatcherContext, EndpointQueue } from "./Context.ts"
import { Mailbox, type WaitingPlace } from "./Mailbox.ts"

/**
 * The endpoint actors: one per merchant and URL, started at its first claim, each a bounded
 * mailbox worked by `concurrencyPerEndpoint` supervised worker fibers, so a slow or dead endpoint
 * only ever delays itself. A defect in an attempt restarts that worker only; the mailbox (and so
 * the endpoint's waiting work) survives, and the attempt it was on is taken over when its lease
 * ends.
 */

/** One endpoint's actor. */
class Endpoint implements EndpointQueue {
  readonly mailbox: Mailbox<Claim>

  constructor(private readonly ctx: DispatcherContext) {
    // A claim is in flight from when it is handed to a worker (so a stop before the worker resumes still gives it back).
    this.mailbox = new Mailbox(ctx.options.queueCapacity, (claim) => ctx.state.inFlight.add(claim))
  }

  queue(claim: Claim): Effect.Effect<void, StoreUnavailable> {
    return this.mailbox.offer(claim) ? Effect.void : this.ctx.store.releaseLease(claim.delivery.id, claim.token)
  }

  /**
   * Forks the workers. Forked from a poll, which a stop does not cut: the workers themselves must
   * stay interruptible. Each waits in its own place; interrupted, it gives the place back (once,
   * not per wait).
   */
  startWorkers(): Effect.Effect<void> {
    const supervised = Effect.suspend(() => {
      const place: WaitingPlace<Claim> = { taker: null }
      return Effect.onInterrupt(this.worker(place), () => Effect.sync(() => this.mailbox.cancel(place)))
    })
    return Effect.replicateEffect(
      Effect.forkIn(Effect.interruptible(supervised), this.ctx.fibers),
      this.ctx.options.concurrencyPerEndpoint,
      {
        discard: true
      }
    )
  }

  /**
   * A worker: a loop under one handler (none around each attempt); after a failure the worker
   * starts again, in the same waiting place. An attempt cut by a stop stays in flight, for the
   * last give-back.
   */
  private worker(place: WaitingPlace<Claim>): Effect.Effect<never> {
    const { ctx, mailbox } = this
    const attemptOf = (claim: Claim) => attempt(ctx, this, claim)
    let current: Claim | null = null
    const serve = Effect.gen(function*() {
      while (true) {
        current = null
        current = yield* mailbox.take(place)
        yield* attemptOf(current)
        ctx.state.inFlight.delete(current)
      }
    })
    return Effect.forever(Effect.catchCause(serve, (cause) => workerFailed(ctx, current, cause)))
  }
}

/**
 * A worker's loop ended by a failure while it was on `claim` (null: between attempts). The attempt
 * is over (its claim is taken over when its lease ends): the store failed (it was not recorded), or
 * a defect. An interruption ends the worker.
 */
const workerFailed = (
  ctx: DispatcherContext,
  claim: Claim | null,
  cause: Cause.Cause<StoreUnavailable>
): Effect.Effect<void> => {
  if (Cause.hasInterruptsOnly(cause)) return Effect.failCause(cause as Cause.Cause<never>)
  if (claim !== null) ctx.state.inFlight.delete(claim)
  const failure = Cause.findErrorOption(cause)
  if (claim !== null && Option.isSome(failure)) {
    return Effect.logWarning(`webhook delivery ${claim.delivery.id} attempt not recorded`, failure.value)
  }
  return Effect.logError("webhook endpoint worker crashed; restarting", cause)
}

/** This process's endpoint actors, by merchant then URL (no key text built per claim). */
export class Endpoints {
  private readonly byMerchant = new Map<string, Map<string, Endpoint>>()
  private readonly all: Array<Endpoint> = []

  constructor(private readonly ctx: DispatcherContext) {}

  /**
   * Hands the claims of `batch` from `from` on to their endpoints' mailboxes (starting an
   * endpoint's actor the first time): synchronous but for those starts and a full mailbox's claim
   * given back (`Effect.void` when nothing was). A delivery taken over from a cut lease carries
   * its cut attempt, recorded at `batch.at`, so the attempt that follows is the next one. When a
   * give-back fails, the claims not handed out yet are given back too (best effort), for the next
   * poll: not left under a lease nobody works until it ends.
   */
  handOut(batch: ClaimBatch, from: number): Effect.Effect<void, StoreUnavailable> {
    const { claimed, token } = batch
    for (let i = from; i < claimed.length; i++) {
      const leased = claimed[i]!
      const delivery = batch.takenOver.has(leased.id) ? cutAttempt(leased, batch.at) : leased
      const endpoint = this.byMerchant.get(delivery.merchantId)?.get(delivery.url)
      if (endpoint === undefined) {
        return Effect.flatMap(this.start(delivery.merchantId, delivery.url), () => this.handOut(batch, i))
      }
      const secrets = batch.secrets.get(delivery.merchantId) ?? null
      if (
        !endpoint.mailbox.offer({
          delivery,
          token,
          leaseUntil: batch.leaseUntil,
          secrets,
          secretsReadAt: batch.secretsReadAt
        })
      ) {
        // Given back as it was leased: the cut stays to be recorded by the next claim.
        const givenBack = Effect.tapError(
          this.ctx.store.releaseLease(delivery.id, token),
          () => this.giveBackRest(claimed, token, i + 1)
        )
        return Effect.flatMap(givenBack, () => this.handOut(batch, i + 1))
      }
    }
    return Effect.void
  }

  /** Takes every claim still waiting in a mailbox out of it (a stop gives them back). */
  takeAllQueued(): Array<Claim> {
    return this.all.flatMap((endpoint) => endpoint.mailbox.takeAll())
  }

  /** Starts the actor of a merchant's URL. */
  private start(merchantId: string, url: string): Effect.Effect<void> {
    return Effect.suspend(() => {
      const endpoint = new Endpoint(this.ctx)
      const ofMerchant = this.byMerchant.get(merchantId)
      if (ofMerchant === undefined) this.byMerchant.set(merchantId, new Map([[url, endpoint]]))
      else ofMerchant.set(url, endpoint)
      this.all.push(endpoint)
      return endpoint.startWorkers()
    })
  }

  private giveBackRest(claimed: ReadonlyArray<Delivery>, token: string, from: number) {
    return Effect.forEach(
      claimed.slice(from),
      (delivery) => Effect.ignore(this.ctx.store.releaseLease(delivery.id, token)),
      { discard: true }
    )
  }
}
