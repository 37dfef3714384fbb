/**
 * The service on Effect 4, as far as it is ported: creating a payment (edge checks,
 * authentication, rate limit, idempotency, the create hot path with its group commit and the
 * automatic authorize → fraud → capture flow) and retrieving one, on the production
 * infrastructure (PostgreSQL, the sandbox acquirer). No workers (recovery, settlement, webhook
 * dispatch, sandbox disputes): a payment whose flow is interrupted stays in flight until the
 * whole service runs again.
 *
 *   npx tsx src/trial.ts serve                        same environment as `payments serve`
 *   npx tsx src/trial.ts merchant create --name NAME  a merchant and its first API key (JSON on stdout)
 *
 * `npm run trial` starts `serve` with `npm start`'s V8 flags.
 */
import { NodeRuntime } from "@effect/platform-node"
import { Cause, Console, Effect, Layer } from "effect"
import { HttpApiBuilder } from "effect/http-api"
import * as Acquirer from "./acquirer/Acquirer.ts"
import { PaymentsApi } from "./http/api/Api.ts"
import * as Authentication from "./http/edge/Authentication.ts"
import * as Drain from "./http/server/Drain.ts"
import * as Edge from "./http/edge/Edge.ts"
import * as Handlers from "./http/handlers/Handlers.ts"
import * as RateLimiter from "./http/edge/RateLimiter.ts"
import * as Wire from "./http/api/Wire.ts"
import * as Config from "./platform/Config.ts"
import { AppConfig } from "./platform/Config.ts"
import * as Database from "./platform/Database.ts"
import * as Ids from "./platform/Ids.ts"
import * as Instance from "./platform/Instance.ts"
import * as Logging from "./platform/Logging.ts"
import * as ApiKeys from "./services/ApiKeys.ts"
import * as Fraud from "./services/Fraud.ts"
import * as Merchants from "./services/Merchants.ts"
import * as PaymentActors from "./services/PaymentActors.ts"
import * as Payments from "./services/Payments.ts"
import * as Webhooks from "./services/Webhooks.ts"
import * as PgStore from "./store/PgStore.ts"

const ServicesLive = Layer.mergeAll(Payments.layer, Merchants.layer, ApiKeys.layer).pipe(
  Layer.provideMerge(ApiKeys.layer),
  Layer.provideMerge(Webhooks.layer),
  Layer.provideMerge(Layer.merge(Fraud.layer, PaymentActors.layer))
)

const InfrastructureLive = PgStore.layerPg.pipe(
  Layer.provideMerge(Database.layer),
  Layer.provideMerge(Layer.mergeAll(Ids.layer, Acquirer.layerSandbox)),
  Layer.provideMerge(Config.layer)
)

/** The HttpApi with its handlers and middleware (no server). */
const ApiLive = HttpApiBuilder.layer(PaymentsApi).pipe(
  Layer.provide(Handlers.layer),
  Layer.provide(Authentication.layer),
  Layer.provide(RateLimiter.layer)
)

const serve = Effect.gen(function*() {
  const config = yield* AppConfig
  const host = process.env.HOST ?? "127.0.0.1"
  const app = Drain.serverLayer(Layer.merge(ApiLive, Edge.layer), config.port, host).pipe(
    Layer.provideMerge(ServicesLive),
    Layer.provideMerge(Instance.layer),
    Layer.provideMerge(InfrastructureLive)
  )
  return yield* Layer.launch(app)
}) as Effect.Effect<never, unknown, AppConfig>

const option = (args: ReadonlyArray<string>, name: string) => {
  const index = args.indexOf(name)
  return index === -1 ? undefined : args[index + 1]
}

const program = (args: ReadonlyArray<string>): Effect.Effect<void, unknown> => {
  const [command = "serve", sub] = args
  if (command === "serve") return Effect.provide(serve, Config.layer)
  if (command === "merchant" && sub === "create") {
    const name = option(args, "--name") ?? "Trial"
    return Effect.gen(function*() {
      const created = yield* (yield* Merchants.Merchants).create({ name, webhookUrl: null })
      yield* Console.log(JSON.stringify({
        merchant: Wire.merchant(created.merchant),
        api_key: Wire.apiKeyCreated(created.apiKey, created.secret)
      }))
    }).pipe(Effect.provide(ServicesLive.pipe(Layer.provideMerge(InfrastructureLive))), Effect.scoped) as Effect.Effect<void, unknown>
  }
  return Effect.fail(new Error("usage: trial serve | trial merchant create --name NAME"))
}

Effect.suspend(() => program(process.argv.slice(2))).pipe(
  Effect.provide(Logging.layerFromEnvironment),
  Effect.tapCause((cause) => (Cause.hasInterruptsOnly(cause) ? Effect.void : Console.error(Cause.pretty(cause)))),
  NodeRuntime.runMain({ disableErrorReporting: true })
)
