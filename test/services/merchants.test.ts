import { describe, expect, it } from "@effect/vitest"
import { Cause, Effect, Exit, Layer, Option } from "effect"
import * as Config from "../../src/platform/Config.ts"
import * as Ids from "../../src/platform/Ids.ts"
import * as ApiKeys from "../../src/services/ApiKeys.ts"
import { layer as merchantsLayer, Merchants } from "../../src/services/Merchants.ts"
import { emptyState, memoryOperations } from "../../src/store/MemoryStore.ts"
import { Store } from "../../src/store/Store.ts"

// The webhook URL rule belongs to the service (any edge that changes a merchant gets it), not to
// an HTTP handler.

const merchantsOver = (allowPrivate: boolean) =>
  merchantsLayer.pipe(
    Layer.provideMerge(ApiKeys.layer),
    Layer.provide(Layer.mergeAll(
      Layer.succeed(Store, memoryOperations(emptyState())),
      Ids.layerSeeded(3),
      Config.layerWith(Config.defaultsWith({ webhookAllowPrivateUrls: allowPrivate }))
    ))
  )

describe("Merchants.update and the webhook URL", () => {
  it.effect("refuses a loopback or malformed URL with InvalidInput on webhook_url, and changes nothing", () =>
    Effect.gen(function*() {
      const merchants = yield* Merchants
      const { merchant } = yield* merchants.create({ name: "Shop", webhookUrl: null })
      for (
        const url of [
          "http://127.0.0.1/hook",
          "http://localhost:8080/x",
          "ftp://example.com/x",
          "https://user:pw@example.com/"
        ]
      ) {
        const refused = yield* Effect.exit(merchants.update(merchant.id, { webhookUrl: url }))
        expect(Exit.isFailure(refused) && Option.getOrUndefined(Cause.findErrorOption(refused.cause))).toMatchObject({
          _tag: "InvalidInput",
          param: "webhook_url"
        })
      }
      expect((yield* merchants.get(merchant.id)).webhookUrl).toBeNull()
      // A public URL, and removing it, are accepted.
      expect((yield* merchants.update(merchant.id, { webhookUrl: "https://shop.example/hooks" })).webhookUrl).toBe(
        "https://shop.example/hooks"
      )
      expect((yield* merchants.update(merchant.id, { webhookUrl: null })).webhookUrl).toBeNull()
    }).pipe(Effect.provide(merchantsOver(false))))

  it.effect("accepts a private address when WEBHOOK_ALLOW_PRIVATE_URLS is set", () =>
    Effect.gen(function*() {
      const merchants = yield* Merchants
      const { merchant } = yield* merchants.create({ name: "Shop", webhookUrl: null })
      expect((yield* merchants.update(merchant.id, { webhookUrl: "http://127.0.0.1:9/hook" })).webhookUrl).toBe(
        "http://127.0.0.1:9/hook"
      )
    }).pipe(Effect.provide(merchantsOver(true))))
})
