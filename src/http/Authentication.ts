import { Effect, Layer, Redacted } from "effect"
import { ApiKeys } from "../services/ApiKeys.ts"
import * as E from "./ApiError.ts"
import { Authentication } from "./Api.ts"
import { RateLimiter } from "./RateLimiter.ts"

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
      bearer: (token) =>
        Effect.gen(function*() {
          const secret = Redacted.value(token).trim()
          if (!isWellFormedApiKey(secret)) return yield* Effect.fail(E.authenticationRequired())
          const found = yield* apiKeys.authenticate(secret).pipe(Effect.mapError(() => E.serviceUnavailable()))
          if (found === null) return yield* Effect.fail(E.invalidApiKey())
          const rate = yield* limiter.take(found.key.id)
          if (!rate.allowed) return yield* Effect.fail(E.rateLimited(rate.limit, rate.retryAfterSeconds))
          return { merchant: found.merchant, apiKey: found.key }
        })
    })
  })
)
