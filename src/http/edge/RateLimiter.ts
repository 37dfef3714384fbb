import { Context, Effect, Layer } from "effect"
import { AppConfig } from "../../platform/Config.ts"

export interface RateDecision {
  readonly allowed: boolean
  readonly limit: number
  readonly remaining: number
  readonly retryAfterSeconds: number
}

/** A token bucket per API key: `RATE_LIMIT_PER_SECOND` refill, a burst of twice that. */
export interface RateLimiterShape {
  /** Takes a token from the key's bucket at `now` (the caller's request step already holds the clock). */
  readonly takeAt: (key: string, now: number) => RateDecision
}

export class RateLimiter extends Context.Service<RateLimiter, RateLimiterShape>()("payments/RateLimiter") {}

/** Buckets are kept for at most this many keys; idle full buckets are dropped first. */
const maximumBuckets = 100_000

export const make = (perSecond: number) =>
  Effect.sync(() => {
    const capacity = perSecond * 2
    const buckets = new Map<string, { tokens: number; updatedMs: number }>()
    const takeAt = (key: string, now: number): RateDecision => {
      let bucket = buckets.get(key)
      if (bucket === undefined) {
        if (buckets.size >= maximumBuckets) {
          for (const [k, b] of buckets) {
            if (b.tokens + ((now - b.updatedMs) / 1000) * perSecond >= capacity) buckets.delete(k)
          }
        }
        bucket = { tokens: capacity, updatedMs: now }
        buckets.set(key, bucket)
      }
      bucket.tokens = Math.min(capacity, bucket.tokens + ((now - bucket.updatedMs) / 1000) * perSecond)
      bucket.updatedMs = now
      if (bucket.tokens < 1) {
        return {
          allowed: false,
          limit: perSecond,
          remaining: 0,
          retryAfterSeconds: Math.max(1, Math.ceil((1 - bucket.tokens) / perSecond))
        }
      }
      bucket.tokens -= 1
      return { allowed: true, limit: perSecond, remaining: Math.floor(bucket.tokens), retryAfterSeconds: 0 }
    }
    return RateLimiter.of({ takeAt })
  })

export const layer = Layer.effect(RateLimiter, Effect.flatMap(AppConfig, (config) => make(config.rateLimitPerSecond)))
