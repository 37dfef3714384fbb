import { HttpServerRequest } from "@effect/platform"
import { Clock, Context, Effect, type Fiber, Layer, Redacted } from "effect"
import { ApiKeys, type Found } from "../services/ApiKeys.ts"
import * as E from "./ApiError.ts"
import { Authentication } from "./Api.ts"
import { RateLimiter } from "./RateLimiter.ts"
import { requestStateOf } from "./RequestState.ts"

const wellFormedKey = /^sk_live_[A-Za-z0-9]{16,128}$/

/** Whether a token has the shape of an API key at all (anything else is never looked up). */
export const isWellFormedApiKey = (token: string) => wellFormedKey.test(token)

const unavailable = () => Effect.fail(E.serviceUnavailable())

/** No key sent at all is asked for; anything else in the header is a key that is not valid. */
const refusalOfMalformed = (fiber: Fiber.RuntimeFiber<unknown, unknown>) => {
  const header = Context.unsafeGet(fiber.currentContext, HttpServerRequest.HttpServerRequest).headers["authorization"]
  return header === undefined || header.trim() === "" ? E.authenticationRequired() : E.malformedApiKey()
}

/** Bearer authentication with hashed keys, then the per-key rate limit. */
export const layer = Layer.effect(
  Authentication,
  Effect.gen(function*() {
    const apiKeys = yield* ApiKeys
    const limiter = yield* RateLimiter
    return Authentication.of({
      // One step holds the fiber: the clock, and the request's state the caller is recorded on
      // (no FiberRef.getWith nor clock read of their own); this runs on every request. A key
      // the cache knows is admitted in that same step (no look-up effect to run).
      bearer: (token) =>
        Effect.withFiberRuntime((fiber) => {
          const secret = Redacted.value(token).trim()
          if (!isWellFormedApiKey(secret)) return Effect.fail(refusalOfMalformed(fiber))
          const clock = Context.get(fiber.currentDefaultServices, Clock.Clock)
          const state = requestStateOf(fiber)
          const admit = (found: Found | null): Effect.Effect<void, E.ApiError> => {
            if (found === null) return Effect.fail(E.invalidApiKey())
            // The time after the look-up, as when the limiter read the clock itself.
            const rate = limiter.takeAt(found.key.id, clock.unsafeCurrentTimeMillis())
            if (!rate.allowed) return Effect.fail(E.rateLimited(rate.limit, rate.retryAfterSeconds))
            state.caller = { merchant: found.merchant, apiKey: found.key }
            return Effect.void
          }
          return apiKeys.authenticateThen(secret, clock.unsafeCurrentTimeMillis(), { onFound: admit, onUnavailable: unavailable })
        })
    })
  })
)
