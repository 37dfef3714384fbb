import { Cause, Clock, Context, Effect, identity, Option } from "effect"
import { HttpServerRequest, type HttpServerResponse } from "effect/http"
import { hash as oneShotHash } from "node:crypto"
import type { AppConfigShape } from "../../platform/Config.ts"
import { AppConfig } from "../../platform/Config.ts"
import { ServiceInstance } from "../../platform/Instance.ts"
import * as Metrics from "../../platform/Metrics.ts"
import { carriesSecret, configuredKey, isSealed, processLocalKey, seal, unseal } from "../../platform/Sealing.ts"
import { isoAt } from "../../platform/Time.ts"
import type { Answer, InlineOutcome } from "../../services/Payments.ts"
import type { CommandKey, IdempotencyClaim, StoreShape, StoreUnavailable } from "../../store/Store.ts"
import { Store } from "../../store/Store.ts"
import * as E from "../api/ApiError.ts"
import { jsonResponse } from "./JsonResponse.ts"
import { noCaller, type RequestState, requestStateOf } from "./RequestState.ts"

const keyPattern = /^[\x20-\x7e]{1,255}$/

export const isWellFormedKey = (key: string) => keyPattern.test(key)

/** Key order does not make two requests different: the fingerprint hashes canonical JSON. */
const canonical = (value: unknown): string => {
  if (Array.isArray(value)) {
    let text = "["
    for (let i = 0; i < value.length; i++) text += (i === 0 ? "" : ",") + canonical(value[i])
    return text + "]"
  }
  if (value !== null && typeof value === "object") {
    const keys = Object.keys(value).sort()
    let text = "{"
    for (let i = 0; i < keys.length; i++) {
      const k = keys[i]!
      text += (i === 0 ? "" : ",") + JSON.stringify(k) + ":" + canonical((value as Record<string, unknown>)[k])
    }
    return text + "}"
  }
  return JSON.stringify(value)
}

/**
 * Method, path and body; a body that does not parse counts byte for byte. `parsed` is the body
 * as the edge already parsed it, when it was this very text.
 */
export const fingerprintOf = (
  method: string,
  url: string,
  text: string,
  parsed?: { readonly text: string; readonly value: unknown }
) => {
  // The request fingerprinted last, and its fingerprint (one, not a cache): a retry or a racing
  // twin sent right after carries the very same method, target and body (~17% of keyed requests
  // in the simulator), and its fingerprint is the same.
  if (text === lastText && url === lastUrl && method === lastMethod) return lastFingerprint
  const fingerprint = computeFingerprint(method, url, text, parsed)
  lastMethod = method
  lastUrl = url
  lastText = text
  lastFingerprint = fingerprint
  return fingerprint
}

let lastMethod: string | null = null
let lastUrl = ""
let lastText = ""
let lastFingerprint = ""

const computeFingerprint = (
  method: string,
  url: string,
  text: string,
  parsed?: { readonly text: string; readonly value: unknown }
) => {
  let body = text
  if (parsed !== undefined && parsed.text === text) body = canonical(parsed.value)
  else if (text !== "") {
    try {
      body = canonical(JSON.parse(text))
    } catch {
      body = `raw:${text}`
    }
  }
  return oneShotHash("sha256", `${method} ${pathnameOf(url)}\n${body}`, "hex")
}

/** Non-empty segments of unreserved characters, no dots: the URL parser would give the path back as it is. */
const plainPath = /^(?:\/[A-Za-z0-9_~-]+)+\/?$/

/** The request target's path as the WHATWG URL parser normalizes it (without parsing the plain ones every route has). */
export const pathnameOf = (url: string) => (plainPath.test(url) ? url : new URL(url, "http://x").pathname)

const keys = new WeakMap<AppConfigShape, Buffer>()
const sealingKey = (config: AppConfigShape) => {
  let key = keys.get(config)
  if (key === undefined) {
    key = configuredKey(config) ?? processLocalKey()
    keys.set(config, key)
  }
  return key
}

const replayUnavailable = () =>
  E.invalidState(
    "The response to this request carried a secret and can no longer be shown: it was sealed with a response encryption key " +
      "this service no longer has. List your API keys (or read the merchant) and rotate the one this request created."
  )

export interface Reply {
  readonly status: number
  readonly body: unknown
}

/** A stored response as the client gets it on a replay. */
const replay = (config: AppConfigShape, status: number, stored: string) => {
  Metrics.record(Metrics.idempotencyReplays, 1)
  if (!isSealed(stored)) return Effect.succeed(jsonResponse(status, stored, { "idempotent-replayed": "true" }))
  const body = unseal(sealingKey(config), stored)
  return body === null
    ? Effect.fail(replayUnavailable())
    : Effect.succeed(jsonResponse(status, body, { "idempotent-replayed": "true" }))
}

/** The service process claiming keys (null where none is provided: tests, the simulator). */
const ownerIn = (context: Context.Context<never>) => {
  const instance = Context.getOption(context, ServiceInstance)
  return instance._tag === "Some" ? instance.value.id : null
}

/** What a request being served needs, read from its fiber in one step. */
interface Served {
  readonly current: RequestState
  /** The authenticated caller's merchant: the scope of its keys. */
  readonly merchantId: string
  readonly request: HttpServerRequest.HttpServerRequest
  readonly store: StoreShape
  readonly config: AppConfigShape
  readonly owner: string | null
  readonly now: string
  /** `now` in whole milliseconds: the claim's lease and expiry are counted from it (no parse of `now` again). */
  readonly nowMs: number
}

const served = <A>(
  f: (served: Served) => Effect.Effect<A, E.ApiError, HttpServerRequest.HttpServerRequest | Store | AppConfig>
) =>
  Effect.withFiber<A, E.ApiError, HttpServerRequest.HttpServerRequest | Store | AppConfig>((fiber) => {
    const context = fiber.context
    const current = requestStateOf(fiber)
    if (current.caller === null) return noCaller
    current.keyHandled = true
    const nowMs = Math.floor(fiber.getRef(Clock.Clock).currentTimeMillisUnsafe())
    return f({
      current,
      merchantId: current.caller.merchant.id,
      request: Context.getUnsafe(context, HttpServerRequest.HttpServerRequest),
      store: Context.getUnsafe(context, Store),
      config: Context.getUnsafe(context, AppConfig),
      owner: ownerIn(context),
      now: isoAt(nowMs),
      nowMs
    })
  })

/** Runs `f` on the body's text: as the edge read it (no step of its own), or read again (cached) when the edge saw no body. */
const withBodyText = <A, E, R>(
  request: HttpServerRequest.HttpServerRequest,
  current: RequestState,
  f: (text: string) => Effect.Effect<A, E, R>
) => current.body !== undefined ? f(current.body.text) : Effect.flatMap(Effect.orElseSucceed(request.text, () => ""), f)

/** A key's claim at `nowMs` (`now` is its text): locked for the lease, kept for the key's lifetime. */
const claimOf = (
  config: AppConfigShape,
  merchantId: string,
  key: string,
  fingerprint: string,
  now: string,
  nowMs: number,
  owner: string | null
): IdempotencyClaim => ({
  merchantId,
  key,
  fingerprint,
  now,
  lockedUntil: isoAt(nowMs + config.idempotencyLeaseMs),
  expiresAt: isoAt(nowMs + config.idempotencyTtlMs),
  owner
})

/** Claims `key`: `claimed` runs when this request goes ahead; anything else is the answer already. */
const claim = <R>(
  store: StoreShape,
  config: AppConfigShape,
  keyClaim: IdempotencyClaim,
  /** Where the key came from (named by a 422 idempotency_key_reused). */
  keyParam: string,
  claimed: () => Effect.Effect<HttpServerResponse.HttpServerResponse, E.ApiError, R>
): Effect.Effect<HttpServerResponse.HttpServerResponse, E.ApiError, R> =>
  Effect.matchEffect(
    store.claimIdempotencyKey(keyClaim),
    {
      onFailure: () => Effect.fail(E.serviceUnavailable()),
      onSuccess: (outcome) => {
        switch (outcome._tag) {
          case "Replay":
            return replay(config, outcome.status, outcome.body)
          case "InProgress":
            Metrics.record(Metrics.idempotencyConflicts("in_progress"), 1)
            return Effect.fail(E.idempotencyInProgress(1))
          case "Mismatch":
            Metrics.record(Metrics.idempotencyConflicts("key_reused"), 1)
            return Effect.fail(E.idempotencyKeyReused(keyParam))
          case "Claimed":
            return claimed()
        }
      }
    }
  )

/** A response body as it is stored: sealed when it carries a secret. */
const storedForm = (
  config: AppConfigShape,
  body: string
) => (carriesSecret(body) ? seal(sealingKey(config), body) : body)

/**
 * Stores a finished response under a claimed key (sealed when it carries a secret), then answers
 * `response`. If storing fails the claim is released, so the client's retry runs again instead of
 * waiting out the lease; so does a stop (SIGTERM) while it is stored. Run under a mask: `restore`
 * makes the store call itself interruptible, the release is not.
 */
const complete = (
  store: StoreShape,
  config: AppConfigShape,
  merchantId: string,
  key: string,
  status: number,
  body: string,
  response: HttpServerResponse.HttpServerResponse,
  restore: <A, X, R>(effect: Effect.Effect<A, X, R>) => Effect.Effect<A, X, R>
): Effect.Effect<HttpServerResponse.HttpServerResponse, E.ApiError> =>
  Effect.matchCauseEffect(restore(store.completeIdempotencyKey(merchantId, key, status, storedForm(config, body))), {
    onFailure: (cause) => {
      const release = store.releaseIdempotencyKey(merchantId, key).pipe(Effect.ignore)
      if (Cause.hasInterruptsOnly(cause)) return Effect.andThen(release, Effect.failCause(cause as Cause.Cause<never>))
      return Option.isSome(Cause.findErrorOption(cause))
        ? Effect.andThen(release, Effect.fail(E.serviceUnavailable()))
        : Effect.failCause(cause as Cause.Cause<never>)
    },
    onSuccess: () => Effect.succeed(response)
  })

/**
 * CONTRACT section 5. With a key, the first request claims it and its finished response
 * (any status but 429 and 5xx) is stored and replayed byte for byte; a retry after a crash
 * resumes the same operation, which the store recognises by `commandKey`.
 */
export interface IdempotencyOptions {
  readonly bodyKey?: string | undefined
  readonly bodyKeyParam?: string
}

/** The request's idempotency key (header or body field), checked: the key, undefined without one, or the refusal. */
/** Where the request's key came from, for a refusal that names it: the header when it was sent. */
const keyParamOf = (request: HttpServerRequest.HttpServerRequest, options: IdempotencyOptions) =>
  request.headers["x-idempotency-key"] !== undefined ? "X-Idempotency-Key" : (options.bodyKeyParam ?? "idempotency_key")

const requestKey = (
  request: HttpServerRequest.HttpServerRequest,
  options: IdempotencyOptions
): string | undefined | E.ApiError => {
  const headerKey = request.headers["x-idempotency-key"]
  if (headerKey !== undefined && !isWellFormedKey(headerKey)) {
    return E.validationFailed("X-Idempotency-Key", "X-Idempotency-Key must be 1 to 255 printable ASCII characters.")
  }
  if (headerKey !== undefined && options.bodyKey !== undefined && headerKey !== options.bodyKey) {
    return E.validationFailed(
      options.bodyKeyParam ?? "idempotency_key",
      "The X-Idempotency-Key header and the idempotency_key field differ."
    )
  }
  return headerKey ?? options.bodyKey
}

const render = (reply: Reply) => jsonResponse(reply.status, JSON.stringify(reply.body))

/** A keyed operation of the authenticated caller's merchant (`merchantId`). */
export type Operation = (merchantId: string, commandKey: CommandKey | undefined) => Effect.Effect<Reply, E.ApiError>

export const idempotent = (
  options: IdempotencyOptions,
  operation: Operation
): Effect.Effect<
  HttpServerResponse.HttpServerResponse,
  E.ApiError,
  HttpServerRequest.HttpServerRequest | Store | AppConfig
> =>
  served(({ config, current, merchantId, now, nowMs, owner, request, store }) => {
    const key = requestKey(request, options)
    if (key instanceof E.ApiError) return Effect.fail(key)
    if (key === undefined) return Effect.map(operation(merchantId, undefined), render)
    return withBodyText(request, current, (text) =>
      claim(
        store,
        config,
        claimOf(
          config,
          merchantId,
          key,
          fingerprintOf(request.method, request.url, text, current.body),
          now,
          nowMs,
          owner
        ),
        keyParamOf(request, options),
        () => runClaimed(store, config, merchantId, key, current.id, operation)
      ))
  })

/**
 * Runs the operation under a claimed key and stores its finished answer. A stop (SIGTERM) in the
 * middle releases the claim, so the retry runs at once, not after the lease; so does an answer
 * that is not stored (429, 5xx, defects): a retry runs the operation again.
 */
const runClaimed = (
  store: StoreShape,
  config: AppConfigShape,
  merchantId: string,
  key: string,
  requestId: string,
  operation: Operation
): Effect.Effect<HttpServerResponse.HttpServerResponse, E.ApiError> =>
  // One mask for both steps: the release runs even when the request is interrupted.
  Effect.uninterruptibleMask((restore) =>
    Effect.matchCauseEffect(restore(operation(merchantId, { merchantId, key })), {
      onSuccess: (reply) => {
        const body = JSON.stringify(reply.body)
        return complete(store, config, merchantId, key, reply.status, body, jsonResponse(reply.status, body), restore)
      },
      onFailure: (cause) => {
        const only = cause.reasons.length === 1 ? cause.reasons[0]! : undefined
        if (only !== undefined && Cause.isFailReason(only) && isFinal(only.error)) {
          const error = only.error
          const body = JSON.stringify(error.body(requestId))
          return complete(
            store,
            config,
            merchantId,
            key,
            error.status,
            body,
            jsonResponse(error.status, body, error.headers ?? {}),
            restore
          )
        }
        return Effect.andThen(store.releaseIdempotencyKey(merchantId, key).pipe(Effect.ignore), Effect.failCause(cause))
      }
    })
  )

/**
 * For an operation that takes its key in its own first commit and stores its response with its
 * last (the create path, docs/performance.md): a key never seen before costs no round trip of
 * its own. Any other state of the key (a retry, a replay, a racing request, a different body)
 * goes through `idempotent` and `general`, which handle every case.
 */
export const idempotentInline = (
  options: IdempotencyOptions,
  inline: (
    merchantId: string,
    claim: IdempotencyClaim | null,
    onClaimed: () => void,
    storedForm: (body: string) => string
  ) => Effect.Effect<InlineOutcome, E.ApiError | StoreUnavailable>,
  general: Operation
): Effect.Effect<
  HttpServerResponse.HttpServerResponse,
  E.ApiError,
  HttpServerRequest.HttpServerRequest | Store | AppConfig
> =>
  served(({ config, current, merchantId, now, nowMs, owner, request, store }) => {
    const key = requestKey(request, options)
    if (key instanceof E.ApiError) return Effect.fail(key)
    const sealed = (body: string) => storedForm(config, body)
    if (key === undefined) {
      return Effect.matchEffect(inline(merchantId, null, () => {}, sealed), {
        onFailure: (error) => Effect.fail(asApiError(error)),
        onSuccess: (outcome) =>
          outcome._tag === "Answered"
            ? Effect.succeed(send(outcome.answer))
            : Effect.die(new Error("a create without a key cannot find it taken"))
      })
    }
    return withBodyText(request, current, (text) => {
      const claim = claimOf(
        config,
        merchantId,
        key,
        fingerprintOf(request.method, request.url, text, current.body),
        now,
        nowMs,
        owner
      )
      let claimed = false
      const release = store.releaseIdempotencyKey(merchantId, key).pipe(Effect.ignore)
      // A failure, a stop or a hang-up after the claim committed releases it: the retry resumes the
      // payment. `claimed` is set from the statement's result itself, so a request cut off while
      // its group-committed first statement ran (it never sees the outcome) knows it holds the
      // key by the time its interruption is handled here. One mask for both steps, so the release
      // runs even when the request is interrupted.
      return Effect.uninterruptibleMask((restore) =>
        Effect.matchCauseEffect(restore(inline(merchantId, claim, () => void (claimed = true), sealed)), {
          onFailure: (failed) => {
            const cause = Cause.map(failed, asApiError)
            return claimed ? Effect.andThen(release, Effect.failCause(cause)) : Effect.failCause(cause)
          },
          onSuccess: (
            outcome
          ): Effect.Effect<
            HttpServerResponse.HttpServerResponse,
            E.ApiError,
            HttpServerRequest.HttpServerRequest | Store | AppConfig
          > => {
            if (outcome._tag === "KeyTaken") {
              // The common retry, a finished request sent again, is answered from the same round trip.
              const finished = outcome.finished
              if (finished === undefined) return restore(idempotent(options, general))
              if (finished.fingerprint !== claim.fingerprint) {
                Metrics.record(Metrics.idempotencyConflicts("key_reused"), 1)
                return Effect.fail(E.idempotencyKeyReused(keyParamOf(request, options)))
              }
              return replay(config, finished.status, finished.body)
            }
            if (outcome.stored) return Effect.succeed(send(outcome.answer))
            const answer = outcome.answer
            return complete(store, config, merchantId, key, answer.status, answer.body, send(answer), restore)
          }
        })
      )
    })
  })

/** The inline operation's own failures (the store's) as the API answers them; ours as they are. */
const asApiError = (
  error: E.ApiError | StoreUnavailable
): E.ApiError => (error instanceof E.ApiError ? error : E.toApiError(error))

const send = (answer: Answer) => jsonResponse(answer.status, answer.body)

const isFinal = (error: E.ApiError) => error.status !== 429 && error.status < 500

/**
 * A request the edge refused before any handler ran (400 invalid_json, 413, 415, 422 from
 * decoding, 404 of an unknown route) still carries its idempotency key: the refusal is a finished
 * response, stored and replayed like any other (CONTRACT section 5). Null when there is nothing
 * to do: not a write, no well-formed key, not final, or no merchant to scope the key to (looked
 * up only when everything else holds).
 */
export const storeRefusal = (
  request: HttpServerRequest.HttpServerRequest,
  error: E.ApiError,
  requestId: string,
  merchantOf: Effect.Effect<string | null>,
  store: StoreShape,
  config: AppConfigShape
): Effect.Effect<HttpServerResponse.HttpServerResponse | null, E.ApiError> =>
  Effect.gen(function*() {
    const key = request.headers["x-idempotency-key"]
    if (request.method === "GET" || key === undefined || !isWellFormedKey(key) || !isFinal(error)) return null
    const merchantId = yield* merchantOf
    if (merchantId === null) return null
    // The edge read the body already (the read is cached); one over the limit was never read whole.
    const text = error.code === "body_too_large"
      ? `over the limit, ${request.headers["content-length"] ?? "chunked"}`
      : yield* Effect.orElseSucceed(request.text, () => "")
    const nowMs = Math.floor(yield* Clock.currentTimeMillis)
    const now = isoAt(nowMs)
    const owner = ownerIn(yield* Effect.context<never>())
    const body = JSON.stringify(error.body(requestId))
    return yield* claim(
      store,
      config,
      claimOf(config, merchantId, key, fingerprintOf(request.method, request.url, text), now, nowMs, owner),
      "X-Idempotency-Key",
      () =>
        complete(
          store,
          config,
          merchantId,
          key,
          error.status,
          body,
          jsonResponse(error.status, body, error.headers ?? {}),
          identity
        )
    )
  })
