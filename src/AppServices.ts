import { Cause, Exit, Layer, Runtime } from "effect"
import * as AcquirerFromConfig from "./acquirer/FromConfig.ts"
import * as Config from "./platform/Config.ts"
import * as Database from "./platform/Database.ts"
import * as Ids from "./platform/Ids.ts"
import * as WebhookTransport from "./platform/WebhookTransport.ts"
import * as Analytics from "./services/Analytics.ts"
import * as ApiKeys from "./services/ApiKeys.ts"
import * as Fraud from "./services/Fraud.ts"
import * as Idempotency from "./services/Idempotency.ts"
import * as Merchants from "./services/Merchants.ts"
import * as PaymentActors from "./services/PaymentActors.ts"
import * as Payments from "./services/Payments.ts"
import * as Reconciliation from "./services/Reconciliation.ts"
import * as Webhooks from "./services/Webhooks.ts"
import * as PgStore from "./store/PgStore.ts"

// The services and the production infrastructure, without the HTTP layers (src/App.ts): the
// command line's commands other than `serve` load only this.

/**
 * The application services. They need a Store, Ids, AppConfig and an Acquirer: production
 * and the simulator differ only in which layers provide those.
 */
export const ServicesLive = Layer.mergeAll(
  Idempotency.layer.pipe(Layer.provideMerge(Payments.layer)),
  Merchants.layer,
  Analytics.layer,
  Reconciliation.layer
).pipe(
  // Merchants creates a merchant's first key through ApiKeys; provideMerge also offers it to the handlers.
  Layer.provideMerge(ApiKeys.layer),
  Layer.provideMerge(Webhooks.layer),
  Layer.provideMerge(Layer.merge(Fraud.layer, PaymentActors.layer))
)

/** The production infrastructure: configuration, database (embedded when no DATABASE_URL), ids, the configured acquirer (ACQUIRER). */
export const infrastructureWith = <E>(config: Layer.Layer<Config.AppConfig, E>) =>
  PgStore.layerPg.pipe(
    Layer.provideMerge(Database.layer),
    Layer.provideMerge(Layer.mergeAll(Ids.layer, AcquirerFromConfig.layerFromConfig, WebhookTransport.layer)),
    Layer.provideMerge(config)
  )
export const InfrastructureLive = infrastructureWith(Config.layer)

/**
 * How the process exits: a stop by SIGTERM or SIGINT (the run interrupted, and nothing else
 * wrong) is a clean exit, 0, as an operator and a supervisor expect of a graceful stop; anything
 * else as Effect's default teardown says (1 for a failure). Effect 4's default exits 130 on an
 * interruption.
 */
export const teardown: Runtime.Teardown = (exit, onExit) =>
  Exit.isFailure(exit) && Cause.hasInterruptsOnly(exit.cause) ? onExit(0) : Runtime.defaultTeardown(exit, onExit)
