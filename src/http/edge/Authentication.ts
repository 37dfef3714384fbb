import { Clock, Context, Effect, type Fiber, Layer, Redacted } from "effect"
import { HttpServerRequest } from "effect/http/HttpServerRequest"
import type { HttpServerResponse } from "effect/http/HttpServerResponse"
import type { unhandled } from "effect/Types"
import { ApiKeys, type Found } from "../../services/ApiKeys.ts"
import { Authentication } from "../api/Api.ts"
import * as E from "../api/ApiError.ts"
import { RateLimiter } from "./RateLimiter.ts"
import { requestStateOf } from "./RequestState.ts"

const wellFormedKey = /^sk_live_[A-Za-z0-9]{16,128}$/

/** Whether a token has the shape of an API key at all (anything else is never looked up). */
export const isWellFormedApiKey = (token: string) => wellFormedKey.test(token)

const unavailable = () => Effect.fail(E.serviceUnavailable())

/** No key sent at all is asked for; anything else in the header is a key that is not valid. */
const refusalOfMalformed = (fiber: Fiber.Fiber<unknown, unknown>) => {
  const header = Context.getUnsafe(fiber.context, HttpServerRequest).headers["authorization"]
  return header === undefined || header.trim() === "" ? E.authenticationRequired() : E.malformedApiKey()
}

/** Bearer authentication with hashed keys, then the per-key rate limit. */
export const layer = Layer.effect(
  Authentication,
  Effect.gen(function*() {
    const apiKeys = yield* ApiKeys
    const limiter = yield* RateLimiter
    return Authentication.of({
      // One step holds the fiber: the clock, and the request's state the caller is recorded on;
      // this runs on every request. A key the cache knows is admitted in that same step (no
      // look-up effect to run).
      bearer: (httpEffect, { credential }) =>
        Effect.withFiber((fiber): Effect.Effect<HttpServerResponse, E.ApiError | unhandled> => {
          const secret = Redacted.value(credential).trim()
          if (!isWellFormedApiKey(secret)) return Effect.fail(refusalOfMalformed(fiber))
          const clock = fiber.getRef(Clock.Clock)
          const state = requestStateOf(fiber)
          const admit = (found: Found | null): Effect.Effect<void, E.ApiError> => {
            if (found === null) return Effect.fail(E.invalidApiKey())
            // The time after the look-up, as when the limiter read the clock itself.
            const rate = limiter.takeAt(found.key.id, clock.currentTimeMillisUnsafe())
            if (!rate.allowed) return Effect.fail(E.rateLimited(rate.limit, rate.retryAfterSeconds))
            state.caller = { merchant: found.merchant, apiKey: found.key }
            return Effect.void
          }
          return Effect.andThen(
            apiKeys.authenticateThen(secret, clock.currentTimeMillisUnsafe(), {
              onFound: admit,
              onUnavailable: unavailable
            }),
            httpEffect
          )
        }) as Effect.Effect<HttpServerResponse, unhandled>
    })
  })
)
