import { HttpServerRequest, type HttpServerResponse } from "@effect/platform"
import { Effect, Exit, FiberRef } from "effect"
import { createHash } from "node:crypto"
import { AppConfig } from "../platform/Config.ts"
import { addMs, nowIso } from "../platform/Time.ts"
import type { CommandKey } from "../store/Store.ts"
import { Store } from "../store/Store.ts"
import * as E from "./ApiError.ts"
import { currentRequestId, jsonResponse } from "./Edge.ts"

const keyPattern = /^[\x20-\x7e]{1,255}$/

/** Key order does not make two requests different: the fingerprint hashes canonical JSON. */
const canonical = (value: unknown): string => {
  if (Array.isArray(value)) return `[${value.map(canonical).join(",")}]`
  if (value !== null && typeof value === "object") {
    return `{${Object.keys(value).sort().map((k) => `${JSON.stringify(k)}:${canonical((value as Record<string, unknown>)[k])}`).join(",")}}`
  }
  return JSON.stringify(value)
}

export interface Reply {
  readonly status: number
  readonly body: unknown
}

/**
 * CONTRACT section 5. With a key, the first request claims it and its finished response
 * (any status but 429 and 5xx) is stored and replayed byte for byte; a retry after a crash
 * resumes the same operation, which the store recognises by `commandKey`.
 */
export const idempotent = (
  options: { readonly merchantId: string; readonly bodyKey?: string | undefined; readonly bodyKeyParam?: string },
  operation: (commandKey: CommandKey | undefined) => Effect.Effect<Reply, E.ApiError>
): Effect.Effect<HttpServerResponse.HttpServerResponse, E.ApiError, HttpServerRequest.HttpServerRequest | Store | AppConfig> =>
  Effect.gen(function*() {
    const request = yield* HttpServerRequest.HttpServerRequest
    const headerKey = request.headers["x-idempotency-key"]
    if (headerKey !== undefined && !keyPattern.test(headerKey)) {
      return yield* Effect.fail(E.validationFailed("X-Idempotency-Key", "X-Idempotency-Key must be 1 to 255 printable ASCII characters."))
    }
    if (headerKey !== undefined && options.bodyKey !== undefined && headerKey !== options.bodyKey) {
      return yield* Effect.fail(E.validationFailed(
        options.bodyKeyParam ?? "idempotency_key",
        "The X-Idempotency-Key header and the idempotency_key field differ."
      ))
    }
    const key = headerKey ?? options.bodyKey
    const render = (reply: Reply) => jsonResponse(reply.status, JSON.stringify(reply.body))
    if (key === undefined) return render(yield* operation(undefined))

    const store = yield* Store
    const config = yield* AppConfig
    const unavailable = () => E.serviceUnavailable()
    const text = yield* Effect.orElseSucceed(request.text, () => "")
    const path = new URL(request.url, "http://x").pathname
    const fingerprint = createHash("sha256")
      .update(`${request.method} ${path}\n${text === "" ? "" : canonical(JSON.parse(text))}`)
      .digest("hex")
    const now = yield* nowIso
    const claim = yield* store.claimIdempotencyKey({
      merchantId: options.merchantId,
      key,
      fingerprint,
      now,
      lockedUntil: addMs(now, config.idempotencyLeaseMs),
      expiresAt: addMs(now, config.idempotencyTtlMs)
    }).pipe(Effect.mapError(unavailable))
    switch (claim._tag) {
      case "Replay":
        return jsonResponse(claim.status, claim.body, { "idempotent-replayed": "true" })
      case "InProgress":
        return yield* Effect.fail(E.idempotencyInProgress(1))
      case "Mismatch":
        return yield* Effect.fail(E.idempotencyKeyReused())
      case "Claimed":
        break
    }

    const requestId = yield* FiberRef.get(currentRequestId)
    const exit = yield* Effect.exit(operation({ merchantId: options.merchantId, key }))
    const finished = Exit.match(exit, {
      onSuccess: (reply) => ({ reply, headers: {} }),
      onFailure: (cause) =>
        cause._tag === "Fail" && isFinal(cause.error)
          ? { reply: { status: cause.error.status, body: cause.error.body(requestId) }, headers: cause.error.headers ?? {} }
          : null
    })
    if (finished === null) {
      // 429, 5xx, defects and interruptions are not stored: a retry runs the operation again.
      yield* store.releaseIdempotencyKey(options.merchantId, key).pipe(Effect.ignore)
      return yield* Effect.failCause((exit as Exit.Failure<Reply, E.ApiError>).cause)
    }
    const body = JSON.stringify(finished.reply.body)
    yield* store.completeIdempotencyKey(options.merchantId, key, finished.reply.status, body).pipe(Effect.mapError(unavailable))
    return jsonResponse(finished.reply.status, body, finished.headers)
  })

const isFinal = (error: E.ApiError) => error.status !== 429 && error.status < 500
