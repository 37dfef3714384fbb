import { Cause, Clock, Context, Data, Effect, Layer, Option } from "effect"
import type * as Payment from "../domain/Payment.ts"
import type { AppConfigShape } from "../platform/Config.ts"
import { AppConfig } from "../platform/Config.ts"
import { withoutStack } from "../platform/EffectInternals.ts"
import * as Instance from "../platform/Instance.ts"
import * as Metrics from "../platform/Metrics.ts"
import { carriesSecret, configuredKey, isSealed, processLocalKey, seal, unseal } from "../platform/Sealing.ts"
import type { IdempotencyClaim } from "../store/Store.ts"
import { Store, type StoreUnavailable } from "../store/Store.ts"
import { type CreateResponse, Payments } from "./Payments.ts"

/**
 * Idempotency (CONTRACT section 5) as one service with one entry point, `run`: a write under the
 * request's idempotency key. The first request with a key claims it, and its finished response
 * (any status but 429 and 5xx) is stored, sealed when it carries a secret, and replayed byte for
 * byte to the same request sent again; the same key with another request is refused
 * (`key_reused`), and one still in flight answers `in_progress`. A retry after a crash resumes
 * the same operation, which the store recognises by its `CommandKey`. A request that does not
 * finish (a failure that is not final, a hang-up, a stop) releases its claim at once, so the
 * client's retry runs again instead of waiting out the claim's lease.
 *
 * A create claims its key with its payment (`Payments.createInline`): written once, the key is
 * claimed finished, with its response, in the statement that writes the payment; otherwise it is
 * claimed in the payment's first commit and its response stored with the flow's. A key never seen
 * before costs no round trip of its own. Any other state of the key (a retry, a replay, a racing
 * request, a different body) comes back from the create's first round trip (or its write, for a
 * race) as `KeyTaken`, and is answered here.
 */

/** A finished response: its status, its JSON text, and headers of its own. */
export interface Reply {
  readonly status: number
  readonly body: string
  readonly headers?: Readonly<Record<string, string>> | undefined
}

/** What `run` needs to know of a request: its merchant and key, and what makes two requests the same. */
export interface KeyedRequest<E> {
  /** The authenticated caller's merchant: the scope of its keys. */
  readonly merchantId: string
  /** Null: the request carries no key, and the operation runs as it is. */
  readonly key: string | null
  /** Where the key came from, named by a `key_reused` refusal. */
  readonly keyParam: string
  /** The request's method, path and body, hashed: the same key with another fingerprint is `key_reused`. */
  readonly fingerprint: string
  /** A failure of the operation as the reply stored under the key when it is final; null when it is not (429, 5xx). */
  readonly finalReply: (error: E) => Reply | null
}

/** A create: its payment committed with the key's claim, its response stored with the flow. */
export class Create {
  constructor(
    readonly input: Payment.CreateInput,
    /** The response to the create, made of the payment as committed. */
    readonly render: (payment: Payment.Payment) => Reply
  ) {}
}

/** What runs under the key: any command, or a create (which claims the key in its own first commit). */
export type Operation<E> = Effect.Effect<Reply, E> | Create

/** The key's state answers the request instead of the operation. */
export class IdempotencyRefused extends withoutStack(
  Data.TaggedError("IdempotencyRefused")<{
    /**
     * `in_progress`: the key's first request still runs; `key_reused`: the key was used with
     * another request; `replay_unavailable`: its stored response carried a secret sealed with a
     * key this service no longer has.
     */
    readonly reason: "in_progress" | "key_reused" | "replay_unavailable"
    readonly keyParam: string
  }>
) {}

export interface IdempotencyShape {
  readonly run: <E>(
    request: KeyedRequest<E>,
    operation: Operation<E>
  ) => Effect.Effect<Reply, E | IdempotencyRefused | StoreUnavailable>
}

export class Idempotency extends Context.Service<Idempotency, IdempotencyShape>()("payments/Idempotency") {}

const replayedHeaders = { "idempotent-replayed": "true" }

/** A key's claim at `now` by `owner`: locked for the lease, kept for the key's lifetime. */
const claimOf = (
  config: AppConfigShape,
  request: { readonly merchantId: string; readonly key: string; readonly fingerprint: string },
  at: { readonly now: number; readonly owner: string | null }
): IdempotencyClaim => ({
  merchantId: request.merchantId,
  key: request.key,
  fingerprint: request.fingerprint,
  now: at.now,
  lockedUntil: at.now + config.idempotencyLeaseMs,
  expiresAt: at.now + config.idempotencyTtlMs,
  owner: at.owner
})

/** No failure of the operation is final. */
const never = () => null

const refused = (reason: IdempotencyRefused["reason"], keyParam: string) => {
  if (reason !== "replay_unavailable") {
    Metrics.record(Metrics.idempotencyConflicts(reason), 1)
  }
  return Effect.fail(new IdempotencyRefused({ reason, keyParam }))
}

export const make = Effect.gen(function*() {
  const store = yield* Store
  const config = yield* AppConfig
  const payments = yield* Payments
  /** The service process claiming keys (null where none is provided: tests, the simulator). */
  const owner = yield* Instance.currentId
  /** The clock the service was built with: a claim's time is read with no step of its own. */
  const clock = yield* Clock.clockWith(Effect.succeed)
  const sealingKey = configuredKey(config) ?? processLocalKey()

  /** A response body as it is stored: sealed when it carries a secret. */
  const storedForm = (body: string) => (carriesSecret(body) ? seal(sealingKey, body) : body)

  /** A stored response as the client gets it on a replay. */
  const replay = (status: number, stored: string, keyParam: string) => {
    Metrics.record(Metrics.idempotencyReplays, 1)
    if (!isSealed(stored)) return Effect.succeed<Reply>({ status, body: stored, headers: replayedHeaders })
    const body = unseal(sealingKey, stored)
    return body === null
      ? refused("replay_unavailable", keyParam)
      : Effect.succeed<Reply>({ status, body, headers: replayedHeaders })
  }

  const release = (claim: IdempotencyClaim) =>
    store.releaseIdempotencyKey(claim.merchantId, claim.key).pipe(Effect.ignore)

  /**
   * Stores a finished reply under a claimed key, then answers it. If storing fails the claim is
   * released, so the client's retry runs again instead of waiting out the lease; so does a stop
   * while it is stored. Run under a mask: `restore` makes the store call itself interruptible.
   */
  const complete = (
    claim: IdempotencyClaim,
    reply: Reply,
    restore: <A, X, R>(effect: Effect.Effect<A, X, R>) => Effect.Effect<A, X, R>
  ): Effect.Effect<Reply, StoreUnavailable> =>
    Effect.matchCauseEffect(
      restore(store.completeIdempotencyKey(claim.merchantId, claim.key, reply.status, storedForm(reply.body))),
      {
        onFailure: (cause) =>
          Cause.hasInterruptsOnly(cause) || Option.isSome(Cause.findErrorOption(cause))
            ? Effect.andThen(release(claim), Effect.failCause(cause))
            : Effect.failCause(cause),
        onSuccess: () => Effect.succeed(reply)
      }
    )

  /**
   * Claims the key (a round trip of its own), runs `effect` under it and stores its finished
   * reply; any other state of the key is the answer already. A stop in the middle releases the
   * claim, and so does an answer that is not stored (429, 5xx, defects): a retry runs again.
   */
  const command = <E>(
    request: KeyedRequest<E>,
    claim: IdempotencyClaim,
    effect: Effect.Effect<Reply, E>
  ): Effect.Effect<Reply, E | IdempotencyRefused | StoreUnavailable> =>
    Effect.gen(function*() {
      const outcome = yield* store.claimIdempotencyKey(claim)
      switch (outcome._tag) {
        case "Replay":
          return yield* replay(outcome.status, outcome.body, request.keyParam)
        case "InProgress":
          return yield* refused("in_progress", request.keyParam)
        case "Mismatch":
          return yield* refused("key_reused", request.keyParam)
        case "Claimed":
          // One mask for both steps: the release runs even when the request is interrupted.
          return yield* Effect.uninterruptibleMask((restore) =>
            Effect.matchCauseEffect(restore(effect), {
              onSuccess: (reply) => complete(claim, reply, restore),
              onFailure: (cause): Effect.Effect<Reply, E | StoreUnavailable> => {
                const only = cause.reasons.length === 1 ? cause.reasons[0]! : undefined
                const final = only !== undefined && Cause.isFailReason(only) ? request.finalReply(only.error) : null
                return final !== null
                  ? complete(claim, final, restore)
                  : Effect.andThen(release(claim), Effect.failCause(cause))
              }
            })
          )
      }
    })

  /** A create's response as sent, and as stored under the key in the flow's commit. */
  const respondUnder = (claim: IdempotencyClaim, render: Create["render"]) => (payment: Payment.Payment) => {
    const reply = render(payment)
    return {
      reply,
      stored: { merchantId: claim.merchantId, key: claim.key, status: reply.status, body: storedForm(reply.body) }
    }
  }
  const respondUnkeyed = (render: Create["render"]) => (payment: Payment.Payment): CreateResponse<Reply> => ({
    reply: render(payment),
    stored: null
  })

  /**
   * A keyed create: the claim goes with the payment's first commit, and the response with the
   * flow's when it finishes inline (`Payments.createInline`, which releases a claim it committed
   * if the create then fails). The common retry, a finished request sent again, is answered from
   * that first round trip; any other state of the key is claimed on its own, as a command's.
   */
  const create = (
    request: KeyedRequest<never>,
    claim: IdempotencyClaim,
    operation: Create
  ): Effect.Effect<Reply, IdempotencyRefused | StoreUnavailable> =>
    // One mask for both steps: a response the flow did not store is stored even when the request
    // is interrupted meanwhile, or its claim released.
    Effect.uninterruptibleMask((restore) =>
      Effect.gen(function*() {
        const outcome = yield* restore(
          payments.createInline(operation.input, { claim, respond: respondUnder(claim, operation.render) })
        )
        if (outcome._tag === "Created") {
          return outcome.stored ? outcome.reply : yield* complete(claim, outcome.reply, restore)
        }
        const finished = outcome.finished
        if (finished === undefined) {
          return yield* restore(command({ ...request, finalReply: never }, claim, createAgain(operation)))
        }
        return finished.fingerprint === claim.fingerprint
          ? yield* replay(finished.status, finished.body, request.keyParam)
          : yield* refused("key_reused", request.keyParam)
      })
    )

  /** The general create, under a key claimed on its own: it also resumes the payment of a key claimed before a crash. */
  const createAgain = (operation: Create) =>
    Effect.map(payments.create(operation.input), ({ payment }) => operation.render(payment))

  const createUnkeyed = Effect.fnUntraced(function*(operation: Create) {
    const outcome = yield* payments.createInline(operation.input, {
      claim: null,
      respond: respondUnkeyed(operation.render)
    })
    if (outcome._tag !== "Created") return yield* Effect.die(new Error("a create without a key cannot find it taken"))
    return outcome.reply
  })

  const run = <E>(
    request: KeyedRequest<E>,
    operation: Operation<E>
  ): Effect.Effect<Reply, E | IdempotencyRefused | StoreUnavailable> => {
    const isCreate = operation instanceof Create
    if (request.key === null) return isCreate ? createUnkeyed(operation) : operation
    const claim = claimOf(config, {
      merchantId: request.merchantId,
      key: request.key,
      fingerprint: request.fingerprint
    }, {
      now: Math.floor(clock.currentTimeMillisUnsafe()),
      owner
    })
    return isCreate ? create(request as KeyedRequest<never>, claim, operation) : command(request, claim, operation)
  }

  return Idempotency.of({ run })
})

export const layer = Layer.effect(Idempotency, make)
