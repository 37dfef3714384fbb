import { Clock, Context, Effect, Layer } from "effect"
import { hash as oneShotHash } from "node:crypto"
import type { ApiKey, Merchant } from "../domain/Merchant.ts"
import { apiKeySecretPrefix, displayPrefix } from "../domain/Merchant.ts"
import { AppConfig } from "../platform/Config.ts"
import { Ids } from "../platform/Ids.ts"
import type { PageOf, PageRequest } from "../store/Store.ts"
import { Store, type StoreUnavailable } from "../store/Store.ts"
import { InvalidState, NotFound } from "./Errors.ts"

// One-shot `crypto.hash`: the same digest as createHash().update().digest(), a third of the cost
// (no Hash object); it runs on every request.
export const hashSecret = (secret: string) => oneShotHash("sha256", secret, "hex")

export interface IssuedKey {
  readonly record: ApiKey
  readonly secret: string
}

export interface ApiKeysShape {
  /** Builds a new key record and its secret (not yet stored). */
  readonly issue: (merchantId: string, name: string) => Effect.Effect<IssuedKey>
  readonly create: (merchantId: string, name: string) => Effect.Effect<IssuedKey, StoreUnavailable>
  readonly list: (merchantId: string, page: PageRequest) => Effect.Effect<PageOf<ApiKey>, StoreUnavailable>
  readonly rotate: (
    merchantId: string,
    keyId: string
  ) => Effect.Effect<IssuedKey, NotFound | InvalidState | StoreUnavailable>
  /**
   * The active key and its merchant for a presented secret, or null: a cached key with no
   * last_used_at write due at once, otherwise one store call (the look-up, which writes
   * last_used_at when due).
   */
  readonly authenticate: (secret: string) => Effect.Effect<Found | null, StoreUnavailable>
}

export class ApiKeys extends Context.Service<ApiKeys, ApiKeysShape>()("payments/ApiKeys") {}

/** last_used_at is written at most once a minute per key (by the store's look-up), to keep reads cheap. */
const touchIntervalMs = 60_000
/** Keys remembered per process; the oldest entry goes first beyond this. */
const cacheLimit = 10_000

export type Found = { readonly key: ApiKey; readonly merchant: Merchant }

export const layer = Layer.effect(
  ApiKeys,
  Effect.gen(function*() {
    const store = yield* Store
    const ids = yield* Ids
    const config = yield* AppConfig

    /**
     * Active keys by hash, each trusted for `apiKeyCacheTtlMs` (docs/performance.md): the
     * authentication read leaves the request path. A rotation in this process clears it at once;
     * one made by another process is seen within the TTL. Unknown and revoked keys are never
     * cached, so a guessed key cannot fill it. An entry also ends when the key's last_used_at
     * write falls due (a minute after the last one), so that the look-up that follows writes it.
     */
    const cache = new Map<string, { readonly found: Found; readonly until: number }>()
    /**
     * Counts the clearings: a look-up that started before a rotation in this process cleared the
     * cache may answer the old key as active, and must not put it back (CONTRACT section 4: the
     * old key is refused from the rotation's answer on).
     */
    let generation = 0
    const invalidate = Effect.sync(() => {
      generation++
      cache.clear()
    })

    // A hot path (docs/architecture.md): every authenticated request, nearly always a cache hit,
    // answered in the step that reads the clock.
    const authenticate = (secret: string): Effect.Effect<Found | null, StoreUnavailable> =>
      Effect.clockWith((clock) => {
        const now = clock.currentTimeMillisUnsafe()
        // Hashed on every request, cache hit or not: the process keeps no plaintext secret (a map
        // from secrets to their hashes would save the SHA-256, ~0.3% of a simulated run, and leave
        // every active key readable in a heap dump).
        const hash = hashSecret(secret)
        const hit = cache.get(hash)
        if (hit !== undefined && hit.until > now) return Effect.succeed(hit.found)
        if (hit !== undefined) cache.delete(hash)
        return lookUp(hash, now)
      })

    /**
     * One store call: the key with its merchant, and last_used_at written in the same call when
     * the key is active and has not been used for a minute (whichever process last wrote it).
     */
    const lookUp = Effect.fnUntraced(
      function*(hash: string, now: number): Effect.fn.Return<Found | null, StoreUnavailable> {
        const startedIn = generation
        const found = yield* store.useApiKey(hash, now, now - touchIntervalMs)
        if (found === null || found.key.status !== "active") return null
        if (config.apiKeyCacheTtlMs > 0 && startedIn === generation) {
          if (cache.size >= cacheLimit) cache.delete(cache.keys().next().value!)
          // An active key's last_used_at is written now or less than a minute ago, except on
          // PostgreSQL when a concurrent call wrote it after this statement's snapshot: then the
          // answer carries the older time (or null), and the write counts as made now.
          const usedAt = found.key.lastUsedAt ?? now
          const touchDueAt = (usedAt <= now - touchIntervalMs ? now : usedAt) + touchIntervalMs
          cache.set(hash, { found, until: Math.min(now + config.apiKeyCacheTtlMs, touchDueAt) })
        }
        return found
      }
    )

    const issue = (merchantId: string, name: string) =>
      Effect.map(Clock.currentTimeMillis, (now): IssuedKey => {
        const secret = ids.secret(apiKeySecretPrefix)
        return {
          secret,
          record: {
            id: ids.mint("apiKey"),
            merchantId,
            name,
            keyHash: hashSecret(secret),
            prefix: displayPrefix(secret),
            lastFour: secret.slice(-4),
            status: "active",
            createdAt: now,
            lastUsedAt: null,
            revokedAt: null
          }
        }
      })

    return ApiKeys.of({
      issue,
      create: (merchantId, name) => Effect.tap(issue(merchantId, name), (issued) => store.insertApiKey(issued.record)),
      list: (merchantId, page) => store.listApiKeys(merchantId, page),
      rotate: (merchantId, keyId) =>
        Effect.gen(function*() {
          const current = yield* store.getApiKey(merchantId, keyId)
          if (current === null) return yield* Effect.fail(new NotFound({ resource: "api_key", id: keyId }))
          // The new key keeps the old one's name; the store re-checks the status under its lock.
          const replacement = yield* issue(merchantId, current.name)
          // Whatever the outcome (even unknown, after a lost connection), the old key is looked up again.
          const outcome = yield* store.rotateApiKey(merchantId, keyId, replacement.record, replacement.record.createdAt)
            .pipe(
              Effect.ensuring(invalidate)
            )
          if (outcome === "not_found") return yield* Effect.fail(new NotFound({ resource: "api_key", id: keyId }))
          if (outcome === "revoked") {
            return yield* Effect.fail(
              new InvalidState({ status: "revoked", message: "Cannot rotate an API key in status 'revoked'." })
            )
          }
          return replacement
        }),
      authenticate
    })
  })
)
