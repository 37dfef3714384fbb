import { Effect, Layer } from "effect"
import * as Config from "../platform/Config.ts"
import { layerSandbox } from "./Acquirer.ts"
import { layerStripe } from "./Stripe.ts"

/**
 * The acquirer the configuration names (`ACQUIRER`): the in-process sandbox, or the Stripe
 * connector with its `STRIPE_*` settings. Apart from Acquirer.ts, which the connector imports.
 */
export const layerFromConfig = Layer.unwrap(
  Effect.gen(function*() {
    const config = yield* Config.AppConfig
    return config.acquirer === "stripe" ? layerStripe : layerSandbox
  })
)
