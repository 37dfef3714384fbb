import { HttpServerRequest, type HttpServerResponse } from "@effect/platform"
import { Effect, Exit, FiberRef, Option, Redacted } from "effect"
import { createHash } from "node:crypto"
import type { AppConfigShape } from "../platform/Config.ts"
import { AppConfig } from "../platform/Config.ts"
import { carriesSecret, isSealed, parseKey, processLocalKey, seal, unseal } from "../platform/Sealing.ts"
import { ServiceInstance } from "../platform/Instance.ts"
import { addMs, nowIso } from "../platform/Time.ts"
import * as Metrics from "../platform/Metrics.ts"
import type { Answer, InlineOutcome } from "../services/Payments.ts"
import type { CommandKey, IdempotencyClaim, StoreShape } from "../store/Store.ts"
import { Store } from "../store/Store.ts"
import * as E from "./ApiError.ts"
import { currentRequest, jsonResponse } from "./Edge.ts"

const keyPattern = /^[\x20-\x7e]{1,255}$/

export const isWellFormedKey = (key: string) => keyPattern.test(key)

/** Key order does not make two requests different: the fingerprint hashes canonical JSON. */
const canonical = (value: unknown): string => {
  if (Array.isArray(value)) return `[${value.map(canonical).join(",")}]`
  if (value !== null && typeof value === "object") {
    return `{${Object.keys(value).sort().map((k) => `${JSON.stringify(k)}:${canonical((value as Record<string, unknown>)[k])}`).join(",")}}`
  }
  return JSON.stringify(value)
}

/**
 * Method, path and body; a body that does not parse counts byte for byte. `parsed` is the body
 * as the edge already parsed it, when it was this very text.
 */
export const fingerprintOf = (method: string, url: string, text: string, parsed?: { readonly text: string; readonly value: unknown }) => {
  let body = text
  if (parsed !== undefined && parsed.text === text) body = canonical(parsed.value)
  else if (text !== "") {
    try {
      body = canonical(JSON.parse(text))
    } catch {
      body = `raw:${text}`
    }
  }
  return createHash("sha256").update(`${method} ${new URL(url, "http://x").pathname}\n${body}`).digest("hex")
}


const keys = new WeakMap<AppConfigShape, Buffer>()
const sealingKey = (config: AppConfigShape) => {
  let key = keys.get(config)
  if (key === undefined) {
    const configured = config.responseEncryptionKey === null ? null : parseKey(Redacted.value(config.responseEncryptionKey))
    key = configured ?? processLocalKey()
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
  return body === null ? Effect.fail(replayUnavailable()) : Effect.succeed(jsonResponse(status, body, { "idempotent-replayed": "true" }))
}

/** The service process claiming keys (null where none is provided: tests, the simulator). */
const claimOwner = Effect.map(Effect.serviceOption(ServiceInstance), (instance) => Option.getOrNull(Option.map(instance, (i) => i.id)))

/** Claims `key`; `Claimed` means this request goes ahead, anything else is the answer already. */
const claim = (store: StoreShape, config: AppConfigShape, merchantId: string, key: string, fingerprint: string) =>
  Effect.gen(function*() {
    const now = yield* nowIso
    const outcome = yield* store.claimIdempotencyKey({
      merchantId,
      key,
      fingerprint,
      now,
      lockedUntil: addMs(now, config.idempotencyLeaseMs),
      expiresAt: addMs(now, config.idempotencyTtlMs),
      owner: yield* claimOwner
    }).pipe(Effect.mapError(() => E.serviceUnavailable()))
    switch (outcome._tag) {
      case "Replay":
        return yield* replay(config, outcome.status, outcome.body)
      case "InProgress":
        Metrics.record(Metrics.idempotencyConflicts("in_progress"), 1)
        return yield* Effect.fail(E.idempotencyInProgress(1))
      case "Mismatch":
        Metrics.record(Metrics.idempotencyConflicts("key_reused"), 1)
        return yield* Effect.fail(E.idempotencyKeyReused())
      case "Claimed":
        return null
    }
  })

/** A response body as it is stored: sealed when it carries a secret. */
const storedForm = (config: AppConfigShape, body: string) => (carriesSecret(body) ? seal(sealingKey(config), body) : body)

/**
 * Stores a finished response under a claimed key (sealed when it carries a secret). If storing
 * fails the claim is released, so the client's retry runs again instead of waiting out the lease.
 */
const complete = (store: StoreShape, config: AppConfigShape, merchantId: string, key: string, status: number, body: string) =>
  store.completeIdempotencyKey(merchantId, key, status, storedForm(config, body)).pipe(
    Effect.catchAll(() =>
      Effect.zipRight(store.releaseIdempotencyKey(merchantId, key).pipe(Effect.ignore), Effect.fail(E.serviceUnavailable()))
    )
  )

/**
 * CONTRACT section 5. With a key, the first request claims it and its finished response
 * (any status but 429 and 5xx) is stored and replayed byte for byte; a retry after a crash
 * resumes the same operation, which the store recognises by `commandKey`.
 */
export interface IdempotencyOptions {
  readonly merchantId: string
  readonly bodyKey?: string | undefined
  readonly bodyKeyParam?: string
}

/** The request's idempotency key (header or body field), checked; undefined without one. */
const requestKey = (request: HttpServerRequest.HttpServerRequest, options: IdempotencyOptions) => {
  const headerKey = request.headers["x-idempotency-key"]
  if (headerKey !== undefined && !isWellFormedKey(headerKey)) {
    return Effect.fail(E.validationFailed("X-Idempotency-Key", "X-Idempotency-Key must be 1 to 255 printable ASCII characters."))
  }
  if (headerKey !== undefined && options.bodyKey !== undefined && headerKey !== options.bodyKey) {
    return Effect.fail(E.validationFailed(
      options.bodyKeyParam ?? "idempotency_key",
      "The X-Idempotency-Key header and the idempotency_key field differ."
    ))
  }
  return Effect.succeed(headerKey ?? options.bodyKey)
}

export const idempotent = (
  options: IdempotencyOptions,
  operation: (commandKey: CommandKey | undefined) => Effect.Effect<Reply, E.ApiError>
): Effect.Effect<HttpServerResponse.HttpServerResponse, E.ApiError, HttpServerRequest.HttpServerRequest | Store | AppConfig> =>
  Effect.gen(function*() {
    const current = yield* FiberRef.get(currentRequest)
    current.taken = true
    const request = yield* HttpServerRequest.HttpServerRequest
    const key = yield* requestKey(request, options)
    const render = (reply: Reply) => jsonResponse(reply.status, JSON.stringify(reply.body))
    if (key === undefined) return render(yield* operation(undefined))

    const store = yield* Store
    const config = yield* AppConfig
    const text = yield* Effect.orElseSucceed(request.text, () => "")
    const answered = yield* claim(store, config, options.merchantId, key, fingerprintOf(request.method, request.url, text, current.body))
    if (answered !== null) return answered

    const release = store.releaseIdempotencyKey(options.merchantId, key).pipe(Effect.ignore)
    const requestId = current.id
    // A stop (SIGTERM) in the middle releases the claim: the retry runs at once, not after the lease.
    const exit = yield* Effect.exit(operation({ merchantId: options.merchantId, key })).pipe(
      Effect.onInterrupt(() => release)
    )
    const finished = Exit.match(exit, {
      onSuccess: (reply) => ({ reply, headers: {} }),
      onFailure: (cause) =>
        cause._tag === "Fail" && isFinal(cause.error)
          ? { reply: { status: cause.error.status, body: cause.error.body(requestId) }, headers: cause.error.headers ?? {} }
          : null
    })
    if (finished === null) {
      // 429, 5xx, defects and interruptions are not stored: a retry runs the operation again.
      yield* release
      return yield* Effect.failCause((exit as Exit.Failure<Reply, E.ApiError>).cause)
    }
    const body = JSON.stringify(finished.reply.body)
    yield* complete(store, config, options.merchantId, key, finished.reply.status, body).pipe(Effect.onInterrupt(() => release))
    return jsonResponse(finished.reply.status, body, finished.headers)
  })

/**
 * For an operation that takes its key in its own first commit and stores its response with its
 * last (the create path, docs/performance.md): a key never seen before costs no round trip of
 * its own. Any other state of the key (a retry, a replay, a racing request, a different body)
 * goes through `idempotent` and `general`, which handle every case.
 */
export const idempotentInline = (
  options: IdempotencyOptions,
  inline: (
    claim: IdempotencyClaim | null,
    onClaimed: () => void,
    storedForm: (body: string) => string
  ) => Effect.Effect<InlineOutcome, E.ApiError>,
  general: (commandKey: CommandKey | undefined) => Effect.Effect<Reply, E.ApiError>
): Effect.Effect<HttpServerResponse.HttpServerResponse, E.ApiError, HttpServerRequest.HttpServerRequest | Store | AppConfig> =>
  Effect.gen(function*() {
    const current = yield* FiberRef.get(currentRequest)
    current.taken = true
    const request = yield* HttpServerRequest.HttpServerRequest
    const key = yield* requestKey(request, options)
    const config = yield* AppConfig
    const sealed = (body: string) => storedForm(config, body)
    const send = (answer: Answer) => jsonResponse(answer.status, answer.body)
    if (key === undefined) {
      const outcome = yield* inline(null, () => {}, sealed)
      return outcome._tag === "Answered" ? send(outcome.answer) : yield* Effect.dieMessage("a create without a key cannot find it taken")
    }
    const store = yield* Store
    const text = yield* Effect.orElseSucceed(request.text, () => "")
    const now = yield* nowIso
    const claim: IdempotencyClaim = {
      merchantId: options.merchantId,
      key,
      fingerprint: fingerprintOf(request.method, request.url, text, current.body),
      now,
      lockedUntil: addMs(now, config.idempotencyLeaseMs),
      expiresAt: addMs(now, config.idempotencyTtlMs),
      owner: yield* claimOwner
    }
    let claimed = false
    const release = Effect.suspend(() => (claimed ? store.releaseIdempotencyKey(options.merchantId, key).pipe(Effect.ignore) : Effect.void))
    // A failure or a stop after the claim committed releases it: the retry resumes the payment.
    const outcome = yield* inline(claim, () => void (claimed = true), sealed).pipe(
      Effect.onExit((exit) => (Exit.isSuccess(exit) ? Effect.void : release))
    )
    if (outcome._tag === "KeyTaken") {
      // The common retry, a finished request sent again, is answered from the same round trip.
      const finished = outcome.finished
      if (finished === undefined) return yield* idempotent(options, general)
      if (finished.fingerprint !== claim.fingerprint) {
        Metrics.record(Metrics.idempotencyConflicts("key_reused"), 1)
        return yield* Effect.fail(E.idempotencyKeyReused())
      }
      return yield* replay(config, finished.status, finished.body)
    }
    if (!outcome.stored) {
      yield* complete(store, config, options.merchantId, key, outcome.answer.status, outcome.answer.body).pipe(
        Effect.onInterrupt(() => release)
      )
    }
    return send(outcome.answer)
  })

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
    const answered = yield* claim(store, config, merchantId, key, fingerprintOf(request.method, request.url, text))
    if (answered !== null) return answered
    const body = JSON.stringify(error.body(requestId))
    yield* complete(store, config, merchantId, key, error.status, body)
    return jsonResponse(error.status, body, error.headers ?? {})
  })
