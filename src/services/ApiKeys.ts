import { createHash } from "node:crypto"
import { Context, Effect, Layer } from "effect"
import type { ApiKey, Merchant } from "../domain/Merchant.ts"
import { apiKeySecretPrefix, displayPrefix } from "../domain/Merchant.ts"
import { Ids } from "../platform/Ids.ts"
import { nowIso } from "../platform/Time.ts"
import type { PageOf, PageRequest } from "../store/Store.ts"
import { Store, type StoreUnavailable } from "../store/Store.ts"
import { InvalidState, NotFound } from "./Errors.ts"

export const hashSecret = (secret: string) => createHash("sha256").update(secret).digest("hex")

export interface IssuedKey {
  readonly record: ApiKey
  readonly secret: string
}

export interface ApiKeysShape {
  /** Builds a new key record and its secret (not yet stored). */
  readonly issue: (merchantId: string, name: string) => Effect.Effect<IssuedKey>
  readonly create: (merchantId: string, name: string) => Effect.Effect<IssuedKey, StoreUnavailable>
  readonly list: (merchantId: string, page: PageRequest) => Effect.Effect<PageOf<ApiKey>, StoreUnavailable>
  readonly rotate: (merchantId: string, keyId: string) => Effect.Effect<IssuedKey, NotFound | InvalidState | StoreUnavailable>
  /** The active key and its merchant for a presented secret, or null. */
  readonly authenticate: (secret: string) => Effect.Effect<{ readonly key: ApiKey; readonly merchant: Merchant } | null, StoreUnavailable>
}

export class ApiKeys extends Context.Tag("payments/ApiKeys")<ApiKeys, ApiKeysShape>() {}

/** last_used_at is written at most once a minute per key, to keep reads cheap. */
const touchIntervalMs = 60_000

export const layer = Layer.effect(
  ApiKeys,
  Effect.gen(function*() {
    const store = yield* Store
    const ids = yield* Ids

    const issue = (merchantId: string, name: string) =>
      Effect.map(nowIso, (now): IssuedKey => {
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
      create: (merchantId, name) =>
        Effect.tap(issue(merchantId, name), (issued) => store.insertApiKey(issued.record)),
      list: (merchantId, page) => store.listApiKeys(merchantId, page),
      rotate: (merchantId, keyId) =>
        Effect.gen(function*() {
          const current = yield* store.getApiKey(merchantId, keyId)
          if (current === null) return yield* Effect.fail(new NotFound({ resource: "api_key", id: keyId }))
          // The new key keeps the old one's name; the store re-checks the status under its lock.
          const replacement = yield* issue(merchantId, current.name)
          const outcome = yield* store.rotateApiKey(merchantId, keyId, replacement.record, replacement.record.createdAt)
          if (outcome === "not_found") return yield* Effect.fail(new NotFound({ resource: "api_key", id: keyId }))
          if (outcome === "revoked") {
            return yield* Effect.fail(new InvalidState({ status: "revoked", message: "Cannot rotate an API key in status 'revoked'." }))
          }
          return replacement
        }),
      authenticate: (secret) =>
        Effect.gen(function*() {
          const found = yield* store.findApiKeyWithMerchant(hashSecret(secret))
          if (found === null || found.key.status !== "active") return null
          const { key, merchant } = found
          const now = yield* nowIso
          if (key.lastUsedAt === null || Date.parse(now) - Date.parse(key.lastUsedAt) >= touchIntervalMs) {
            yield* store.touchApiKey(key.id, now)
          }
          return { key, merchant }
        })
    })
  })
)
