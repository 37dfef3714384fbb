import { Effect, Layer, Redacted } from "effect"
import { ApiKeys } from "../services/ApiKeys.ts"
import * as E from "./ApiError.ts"
import { Authentication } from "./Api.ts"
import { RateLimiter } from "./RateLimiter.ts"
import { setCaller } from "./RequestState.ts"

const wellFormedKey = /^sk_live_[A-Za-z0-9]{16,128}$/

/** Whether a token has the shape of an API key at all (anything else is never looked up). */
export const isWellFormedApiKey = (token: string) => wellFormedKey.test(token)

/** Bearer authentication with hashed keys, then the per-key rate limit. */
export const layer = Layer.effect(
  Authentication,
  Effect.gen(function*() {
    const apiKeys = yield* ApiKeys
    const limiter = yield* RateLimiter
    return Authentication.of({
      // Plain steps rather than a generator: this runs on every request.
      bearer: (token) => {
        const secret = Redacted.value(token).trim()
        if (!isWellFormedApiKey(secret)) return Effect.fail(E.authenticationRequired())
        return Effect.matchEffect(apiKeys.authenticate(secret), {
          onFailure: () => Effect.fail(E.serviceUnavailable()),
          onSuccess: (found) =>
            found === null
              ? Effect.fail(E.invalidApiKey())
              : Effect.flatMap(limiter.take(found.key.id), (rate) =>
                rate.allowed
                  ? setCaller({ merchant: found.merchant, apiKey: found.key })
                  : Effect.fail(E.rateLimited(rate.limit, rate.retryAfterSeconds)))
        })
      }
    })
  })
)
