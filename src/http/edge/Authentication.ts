import { Clock, Context, Effect, Layer, Redacted } from "effect"
import { HttpServerRequest } from "effect/http/HttpServerRequest"
import type { HttpServerResponse } from "effect/http/HttpServerResponse"
import type { unhandled } from "effect/Types"
import { ApiKeys, type ApiKeysShape } from "../../services/ApiKeys.ts"
import { Authentication } from "../api/Api.ts"
import * as E from "../api/ApiError.ts"
import { RateLimiter, type RateLimiterShape } from "./RateLimiter.ts"
import { requestStateOf } from "./RequestState.ts"

const wellFormedKey = /^sk_live_[A-Za-z0-9]{16,128}$/

/** Whether a token has the shape of an API key at all (anything else is never looked up). */
export const isWellFormedApiKey = (token: string) => wellFormedKey.test(token)

const unavailable = () => Effect.fail(E.serviceUnavailable())

/** No key sent at all is asked for; anything else in the header is a key that is not valid. */
const refusalOfMalformed = Effect.withFiber((fiber) => {
  const header = Context.getUnsafe(fiber.context, HttpServerRequest).headers["authorization"]
  return Effect.fail(header === undefined || header.trim() === "" ? E.authenticationRequired() : E.malformedApiKey())
})

/** The state of the request being served, where the caller is recorded. */
const requestState = Effect.withFiber((fiber) => Effect.succeed(requestStateOf(fiber)))

/** Bearer authentication with hashed keys, then the per-key rate limit. */
const makeBearer = (apiKeys: ApiKeysShape, limiter: RateLimiterShape) =>
  Effect.fnUntraced(function*(
    httpEffect: Effect.Effect<HttpServerResponse, unhandled>,
    { credential }: { readonly credential: Redacted.Redacted<string> }
  ) {
    const secret = Redacted.value(credential).trim()
    if (!isWellFormedApiKey(secret)) return yield* refusalOfMalformed
    const found = yield* Effect.catchTag(apiKeys.authenticate(secret), "StoreUnavailable", unavailable)
    if (found === null) return yield* Effect.fail(E.invalidApiKey())
    // The time after the look-up, as when the limiter read the clock itself.
    const rate = limiter.takeAt(found.key.id, yield* Clock.currentTimeMillis)
    if (!rate.allowed) return yield* Effect.fail(E.rateLimited(rate.limit, rate.retryAfterSeconds))
    ;(yield* requestState).caller = { merchant: found.merchant, apiKey: found.key }
    return yield* httpEffect
  })

export const layer = Layer.effect(
  Authentication,
  Effect.gen(function*() {
    const bearer = makeBearer(yield* ApiKeys, yield* RateLimiter)
    return Authentication.of({
      // ApiErrors render themselves (HttpServerRespondable): the middleware's error channel takes them.
      bearer: (httpEffect, options) => bearer(httpEffect, options) as Effect.Effect<HttpServerResponse, unhandled>
    })
  })
)
