import { Effect } from "effect"
import type { Attempt, AttemptOutcome, Delivery } from "../../domain/Webhook.ts"
import { afterAttempt, isOpen, isSuccess, nextAttemptNumber, signatureHeader } from "../../domain/Webhook.ts"
import * as Metrics from "../../platform/Metrics.ts"
import type { TransportResult, WebhookRequest } from "../../platform/WebhookTransport.ts"
import type { StoreUnavailable } from "../../store/Store.ts"
import type { Claim, DispatcherContext, EndpointQueue } from "./Context.ts"

/**
 * One webhook attempt, in the phases of Svix's worker, each handing a typed result to the next:
 *
 * 1. prepare: the lease and the secrets to sign with (`Prepared`): at once on a fresh claim's, or
 *    from a renewal of the lease, which also proves it is still ours (none: no attempt);
 * 2. call: the signed POST under WEBHOOK_TIMEOUT, and the delivery's state after its answer
 *    (`Answered`, by the domain's `afterAttempt`);
 * 3. handle success / failure: the record under the lease, with the payment's next delivery
 *    claimed in the same call once the delivery has ended (queued behind this endpoint's work),
 *    then the counters and, for a retry due before the poller wakes, a wake.
 *
 * A hot path (docs/architecture.md, "Hot paths"): each phase goes on into the next within one
 * `flatMap` callback, with each stretch of synchronous work in one callback, instead of a
 * `flatMap` between phases or a generator.
 */

/** Phase 1's result: an attempt ready to go. */
interface Prepared {
  readonly claim: Claim
  /** When the attempt starts (whole ms): its record's `at`. */
  readonly at: number
  readonly secrets: ReadonlyArray<string>
  /** When `secrets` were read: a successor claimed by this attempt signs with them, as fresh as they were for it. */
  readonly secretsReadAt: number
}

/** Phase 2's result: what the endpoint did, when the POST ended, and the delivery and attempt to record. */
interface Answered {
  readonly prepared: Prepared
  readonly outcome: AttemptOutcome
  readonly endAt: number
  readonly next: { readonly delivery: Delivery; readonly attempt: Attempt }
}

/** The attempt counters by outcome, looked up once. */
const attemptsSucceeded = Metrics.webhookAttempts("succeeded")
const attemptsRejected = Metrics.webhookAttempts("rejected")
const attemptsError = Metrics.webhookAttempts("error")

/** An attempt with no secret to sign with: the merchant's stored secret does not open under this service's key. */
const unsignable: TransportResult = {
  _tag: "Failed",
  error:
    "not sent: the webhook signing secret cannot be opened with this service's RESPONSE_ENCRYPTION_KEY; rotate the secret"
}

/** One attempt of `claim`, a worker's of `endpoint` (see the phases above). */
export const attempt = (
  ctx: DispatcherContext,
  endpoint: EndpointQueue,
  claim: Claim
): Effect.Effect<void, StoreUnavailable> => prepare(ctx, endpoint, claim)

/**
 * A fresh claim's lease is ours (no other process takes it before it ends) and covers the attempt
 * with room to spare: the attempt goes at once, signed with the secrets the claim read.
 */
const isFresh = (ctx: DispatcherContext, claim: Claim, at: number) =>
  at - claim.secretsReadAt <= ctx.options.claimFreshMs && at + ctx.freshLeaseNeedMs <= claim.leaseUntil

/**
 * Phase 1, prepare. Any claim but a fresh one renews its lease first: that proves the lease is still
 * ours (a claim that waited too long is someone else's now), and the same call answers the secrets
 * to sign with.
 */
const prepare = (ctx: DispatcherContext, endpoint: EndpointQueue, claim: Claim) =>
  Effect.suspend(() => {
    const at = Math.floor(ctx.clock.currentTimeMillisUnsafe())
    if (claim.secrets !== null && isFresh(ctx, claim, at)) {
      return call(ctx, endpoint, { claim, at, secrets: claim.secrets, secretsReadAt: claim.secretsReadAt })
    }
    return Effect.flatMap(
      ctx.store.renewLease(claim.delivery.id, claim.token, at, at + ctx.leaseMs),
      (secrets) => (secrets === null ? Effect.void : call(ctx, endpoint, { claim, at, secrets, secretsReadAt: at }))
    )
  })

/** The POST of a delivery's next attempt, signed at `at` with `secrets`. */
const signedRequest = (delivery: Delivery, secrets: ReadonlyArray<string>, at: number): WebhookRequest => ({
  url: delivery.url,
  body: delivery.payload,
  headers: {
    "content-type": "application/json",
    "user-agent": "payments-webhooks/1.0",
    "x-service-signature": signatureHeader(secrets, Math.floor(at / 1000), delivery.payload),
    "x-service-event-id": delivery.eventId,
    "x-service-delivery-id": delivery.id,
    "x-service-delivery-attempt": String(nextAttemptNumber(delivery))
  }
})

const outcomeOf = (result: TransportResult, durationMs: number): AttemptOutcome =>
  result._tag === "Answered"
    ? { _tag: "Answered", status: result.status, snippet: result.snippet, durationMs }
    : { _tag: "Failed", error: result.error, durationMs }

/**
 * Phase 2, call: the POST, timed from its own start (after any renewal), never unsigned: without a
 * secret it can open, the attempt fails and is retried on schedule.
 */
const call = (ctx: DispatcherContext, endpoint: EndpointQueue, prepared: Prepared) => {
  const { delivery } = prepared.claim
  const startAt = ctx.clock.currentTimeMillisUnsafe()
  if (delivery.nextAttemptAt !== null) {
    Metrics.record(Metrics.webhookDeliveryLag, Math.max(0, startAt - delivery.nextAttemptAt) / 1000)
  }
  const sent = prepared.secrets.length === 0
    ? Effect.succeed(unsignable)
    : ctx.post(signedRequest(delivery, prepared.secrets, prepared.at))
  return Effect.flatMap(sent, (result) => {
    const endAt = ctx.clock.currentTimeMillisUnsafe()
    const outcome = outcomeOf(result, endAt - startAt)
    const next = afterAttempt(delivery, prepared.at, outcome, ctx.config.webhookRetryScheduleMs, endAt)
    const answered: Answered = { prepared, outcome, endAt, next }
    return isSuccess(outcome) ? handleSuccess(ctx, endpoint, answered) : handleFailure(ctx, endpoint, answered)
  })
}

/** Phase 3, a 2xx: the delivery has ended, and its payment's next delivery may go. */
const handleSuccess = (ctx: DispatcherContext, endpoint: EndpointQueue, answered: Answered) =>
  recordEnded(ctx, endpoint, answered, attemptsSucceeded)

/** Phase 3, a failure: a retry scheduled (the payment's next delivery waits), or the delivery failed for good. */
const handleFailure = (ctx: DispatcherContext, endpoint: EndpointQueue, answered: Answered) => {
  const counter = answered.outcome._tag === "Answered" ? attemptsRejected : attemptsError
  return isOpen(answered.next.delivery) ? record(ctx, answered, counter) : recordEnded(ctx, endpoint, answered, counter)
}

type Counter = typeof attemptsSucceeded

/**
 * The record of an attempt whose delivery has ended. The payment's next event waits for this one:
 * once this one is done it is due at once, so it is claimed in the same call (under the same token)
 * and queued behind this endpoint's work, as a poll would; not cut in the middle by a stop. A stop
 * under way claims nothing new.
 */
const recordEnded = (ctx: DispatcherContext, endpoint: EndpointQueue, answered: Answered, counter: Counter) =>
  answered.prepared.claim.delivery.order === null || ctx.state.stopping
    ? record(ctx, answered, counter)
    : recordWithSuccessor(ctx, endpoint, answered, counter)

/** The record of an attempt that claims no successor. */
const record = (ctx: DispatcherContext, answered: Answered, counter: Counter) => {
  const { next, prepared } = answered
  return Effect.flatMap(
    ctx.store.recordAttempt(next.delivery, next.attempt, prepared.claim.token, undefined),
    (outcome) => recorded(ctx, answered, counter, outcome._tag !== "LeaseLost")
  )
}

const recordWithSuccessor = (ctx: DispatcherContext, endpoint: EndpointQueue, answered: Answered, counter: Counter) => {
  const { endAt, next, prepared } = answered
  const { token } = prepared.claim
  const successorUntil = endAt + ctx.leaseMs
  const successor = { now: endAt, lease: { token, until: successorUntil, owner: ctx.owner } }
  return Effect.uninterruptible(
    Effect.flatMap(ctx.store.recordAttempt(next.delivery, next.attempt, token, successor), (outcome) => {
      if (outcome._tag !== "RecordedWithSuccessor") return recorded(ctx, answered, counter, outcome._tag === "Recorded")
      // Same merchant: it signs with this attempt's secrets, as fresh as they were for this one.
      const queued = endpoint.queue({
        delivery: outcome.successor,
        token,
        leaseUntil: successorUntil,
        secrets: prepared.secrets,
        secretsReadAt: prepared.secretsReadAt
      })
      if (queued === Effect.void) return recorded(ctx, answered, counter, true)
      // A store failure giving back a successor a full queue refused is not this attempt's: the
      // successor's lease ends and it is taken over.
      return Effect.flatMap(
        Effect.catch(queued, (error) =>
          Effect.logWarning(
            `webhook delivery ${outcome.successor.id} (successor of ${next.delivery.id}) not handed out; taken over when its lease ends`,
            error
          )),
        () => recorded(ctx, answered, counter, true)
      )
    })
  )
}

/**
 * After the store answered: the attempt counted (and the delivery, if it failed for good and this
 * record stood), and the poller woken when the retry this attempt scheduled falls before its wake-up.
 * (An awake poller, -Infinity, needs no wake: it reads the store afresh.)
 */
const recorded = (ctx: DispatcherContext, answered: Answered, counter: Counter, stood: boolean) => {
  const delivery = answered.next.delivery
  Metrics.record(counter, 1)
  if (stood && delivery.status === "failed") Metrics.record(Metrics.webhookDeliveriesFailed, 1)
  const retryAt = delivery.nextAttemptAt
  const sleepingUntil = ctx.state.sleepingUntil
  return retryAt !== null && sleepingUntil !== Number.NEGATIVE_INFINITY && retryAt < sleepingUntil
    ? ctx.webhooks.wake
    : Effect.void
}
