import { Clock, Context, Effect, Layer } from "effect"
import type { Balance } from "../domain/Ledger.ts"
import type { ApiKey, Merchant, MerchantWithSecret } from "../domain/Merchant.ts"
import { webhookSecretPrefix } from "../domain/Merchant.ts"
import { webhookUrlProblem } from "../domain/Network.ts"
import { AppConfig } from "../platform/Config.ts"
import { Ids } from "../platform/Ids.ts"
import { Store, type StoreUnavailable } from "../store/Store.ts"
import { ApiKeys } from "./ApiKeys.ts"
import { InvalidInput, NotFound } from "./Errors.ts"

export interface MerchantPatch {
  readonly name?: string | undefined
  /** `null` removes the URL; `undefined` leaves it. */
  readonly webhookUrl?: string | null | undefined
}

export interface MerchantsShape {
  /** Creates a merchant with its webhook signing secret and first API key (atomically). */
  readonly create: (input: { readonly name: string; readonly webhookUrl: string | null }) => Effect.Effect<
    { readonly merchant: MerchantWithSecret; readonly apiKey: ApiKey; readonly secret: string },
    StoreUnavailable
  >
  readonly get: (merchantId: string) => Effect.Effect<Merchant, NotFound | StoreUnavailable>
  /** A webhook URL must pass `webhookUrlProblem` (private addresses as WEBHOOK_ALLOW_PRIVATE_URLS says). */
  readonly update: (
    merchantId: string,
    patch: MerchantPatch
  ) => Effect.Effect<Merchant, InvalidInput | NotFound | StoreUnavailable>
  /** The merchant's balances per currency, derived from its ledger entries (CONTRACT section 7). */
  readonly balances: (merchantId: string) => Effect.Effect<ReadonlyArray<Balance>, StoreUnavailable>
}

export class Merchants extends Context.Service<Merchants, MerchantsShape>()("payments/Merchants") {}

export const layer = Layer.effect(
  Merchants,
  Effect.gen(function*() {
    const store = yield* Store
    const ids = yield* Ids
    const apiKeys = yield* ApiKeys
    const config = yield* AppConfig

    const get = (merchantId: string) =>
      Effect.flatMap(
        store.getMerchant(merchantId),
        (merchant) =>
          merchant === null
            ? Effect.fail(new NotFound({ resource: "merchant", id: merchantId }))
            : Effect.succeed(merchant)
      )

    return Merchants.of({
      create: ({ name, webhookUrl }) =>
        Effect.gen(function*() {
          const now = yield* Clock.currentTimeMillis
          const merchant: MerchantWithSecret = {
            id: ids.mint("merchant"),
            name,
            webhookUrl,
            webhookSecret: ids.secret(webhookSecretPrefix),
            createdAt: now,
            updatedAt: now
          }
          const issued = yield* apiKeys.issue(merchant.id, "Default key")
          yield* store.insertMerchant(merchant, issued.record)
          return { merchant, apiKey: issued.record, secret: issued.secret }
        }),
      get,
      update: (merchantId, patch) =>
        Effect.gen(function*() {
          const problem = typeof patch.webhookUrl === "string"
            ? webhookUrlProblem(patch.webhookUrl, config.webhookAllowPrivateUrls)
            : null
          if (problem !== null) return yield* new InvalidInput({ param: "webhook_url", message: problem })
          const current = yield* get(merchantId)
          const updated: Merchant = {
            ...current,
            name: patch.name ?? current.name,
            webhookUrl: patch.webhookUrl === undefined ? current.webhookUrl : patch.webhookUrl,
            updatedAt: yield* Clock.currentTimeMillis
          }
          yield* store.updateMerchant(updated)
          // Read back: a secret rotated meanwhile is part of the answer.
          return yield* get(merchantId)
        }),
      balances: (merchantId) => store.balances(merchantId)
    })
  })
)
