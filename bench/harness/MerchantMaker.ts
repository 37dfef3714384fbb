/**
 * Merchants made as `payments merchant create` makes them: the service's own Merchants service
 * (a merchant, its webhook signing secret and its first API key, in one transaction), in this
 * process, on the database and with the settings `environment` names (DATABASE_URL,
 * RESPONSE_ENCRYPTION_KEY, ...), read by the service's own configuration reader. The embedded
 * service's merchants and `harness keys`'s come from here.
 */
import type { ManagedRuntime } from "effect"
import type { Environment } from "../../src/platform/Config.ts"
import type { Merchants } from "../../src/services/Merchants.ts"

export interface MerchantMaker {
  readonly create: (
    name: string,
    webhookUrl: string | null
  ) => Promise<{ readonly merchantId: string; readonly apiKey: string }>
  /** Closes the database pool (once no create is in flight). */
  readonly close: () => Promise<void>
}

export const merchantMaker = (environment: Environment): MerchantMaker => {
  let runtime: ManagedRuntime.ManagedRuntime<Merchants, unknown> | null = null
  return {
    create: async (name, webhookUrl) => {
      // The service's modules load on the first merchant only: a scenario without merchants
      // (health) keeps the harness's memory and start-up small.
      const { Effect, Layer, ManagedRuntime, References } = await import("effect")
      const { infrastructureWith, ServicesLive } = await import("../../src/AppServices.ts")
      const Config = await import("../../src/platform/Config.ts")
      const { Merchants } = await import("../../src/services/Merchants.ts")
      // The service's info lines (pool opened, closed) would land among the harness's output.
      runtime ??= ManagedRuntime.make(
        ServicesLive.pipe(
          Layer.provideMerge(infrastructureWith(Config.layerFrom(environment))),
          Layer.provide(Layer.succeed(References.MinimumLogLevel, "Warn"))
        )
      )
      const created = await runtime.runPromise(
        Effect.flatMap(Merchants, (merchants) => merchants.create({ name, webhookUrl }))
      )
      return { merchantId: created.merchant.id, apiKey: created.secret }
    },
    close: async () => {
      await runtime?.dispose()
      runtime = null
    }
  }
}
