import { Layer } from "effect"
import * as Acquirer from "./acquirer/Acquirer.ts"
import * as Config from "./platform/Config.ts"
import * as Database from "./platform/Database.ts"
import * as Ids from "./platform/Ids.ts"
import * as WebhookTransport from "./platform/WebhookTransport.ts"
import * as Analytics from "./services/Analytics.ts"
import * as ApiKeys from "./services/ApiKeys.ts"
import * as Fraud from "./services/Fraud.ts"
import * as Merchants from "./services/Merchants.ts"
import * as PaymentActors from "./services/PaymentActors.ts"
import * as Payments from "./services/Payments.ts"
import * as Webhooks from "./services/Webhooks.ts"
import * as PgStore from "./store/PgStore.ts"

// The services and the production infrastructure, without the HTTP layers (src/App.ts): the
// command line's commands other than `serve` load only this.

/**
 * The application services. They need a Store, Ids, AppConfig and an Acquirer: production
 * and the simulator differ only in which layers provide those.
 */
export const ServicesLive = Layer.mergeAll(Payments.layer, Merchants.layer, Analytics.layer).pipe(
  // Merchants creates a merchant's first key through ApiKeys; provideMerge also offers it to the handlers.
  Layer.provideMerge(ApiKeys.layer),
  Layer.provideMerge(Webhooks.layer),
  Layer.provideMerge(Layer.merge(Fraud.layer, PaymentActors.layer))
)

/** The production infrastructure: configuration, database (embedded when no DATABASE_URL), ids, sandbox acquirer. */
export const InfrastructureLive = PgStore.layerPg.pipe(
  Layer.provideMerge(Database.layer),
  Layer.provideMerge(Layer.mergeAll(Ids.layer, Acquirer.layerSandbox, WebhookTransport.layer)),
  Layer.provideMerge(Config.layer)
)
