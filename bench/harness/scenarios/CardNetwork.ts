import { Effect, Layer, type LogLevel, ManagedRuntime, References } from "effect"
import * as Acquirer from "../../../src/acquirer/Acquirer.ts"
import { ServicesLive } from "../../../src/App.ts"
import type { DisputeNotification } from "../../../src/domain/Dispute.ts"
import * as Config from "../../../src/platform/Config.ts"
import { pgClientLayer } from "../../../src/platform/Database.ts"
import * as Ids from "../../../src/platform/Ids.ts"
import { Payments } from "../../../src/services/Payments.ts"
import { layerPg } from "../../../src/store/PgStore.ts"

/**
 * The card network of a target the harness started itself (embedded): it applies dispute
 * notifications through the service's own operation (`Payments.applyDisputeNotification`, what
 * `payments dispute open|resolve` runs), in this process, on the service's database, as
 * sim/world/Disputes.ts's network does in the simulator. The running service sends the events it
 * makes as webhooks like any other (its dispatcher reads the same outbox).
 */
export interface CardNetwork {
  /** "applied" (now or before), or the refusal's tag (InvalidState, InvalidInput, NotFound...). */
  readonly notify: (notification: DisputeNotification) => Promise<string>
  /** Builds the service's layers in this process, its pool connected (the layer's first query). */
  readonly ready: () => Promise<void>
  readonly close: () => Promise<void>
}

/**
 * The service's own services (payments, merchants, keys) in this process, on the service's
 * database, configured as the service reads its environment: this process's, with `environment`
 * over it (the service's own settings, such as RESPONSE_ENCRYPTION_KEY, when the caller knows them).
 */
export const servicesOn = (
  databaseUrl: string,
  environment: Readonly<Record<string, string>> = {},
  logLevel: LogLevel.LogLevel = "Warn"
) => {
  const variables: Record<string, string> = {}
  for (const [name, value] of Object.entries({ ...process.env, ...environment })) {
    if (typeof value === "string") variables[name] = value
  }
  variables["DATABASE_URL"] = databaseUrl
  const infrastructure = layerPg.pipe(
    Layer.provideMerge(pgClientLayer(databaseUrl, 2)),
    Layer.provideMerge(Layer.mergeAll(Ids.layer, Acquirer.layerSandbox)),
    Layer.provideMerge(Config.layerFrom(variables))
  )
  // Its own log lines (the pool closing) are not the harness's output.
  return ManagedRuntime.make(
    ServicesLive.pipe(
      Layer.provideMerge(infrastructure),
      Layer.provide(Layer.succeed(References.MinimumLogLevel, logLevel))
    )
  )
}

export const makeCardNetwork = (databaseUrl: string): CardNetwork => {
  // Errors only: the store's start-up warnings (about the service's settings, such as a
  // RESPONSE_ENCRYPTION_KEY this process is not given) concern the service, not the network.
  const runtime = servicesOn(databaseUrl, {}, "Error")
  return {
    notify: (notification) =>
      runtime.runPromise(
        Effect.flatMap(Payments, (payments) => payments.applyDisputeNotification(notification)).pipe(
          Effect.map(() => "applied"),
          Effect.catch((error) =>
            Effect.succeed(
              typeof error === "object" && error !== null && "_tag" in error ? String(error._tag) : String(error)
            )
          )
        )
      ),
    ready: () => runtime.context().then(() => undefined),
    close: () => runtime.dispose()
  }
}
