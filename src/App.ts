import { HttpApiBuilder, HttpApiScalar, HttpServerResponse } from "@effect/platform"
import { Effect, Layer } from "effect"
import * as Acquirer from "./acquirer/Acquirer.ts"
import { PaymentsApi } from "./http/Api.ts"
import * as Authentication from "./http/Authentication.ts"
import * as Drain from "./http/Drain.ts"
import * as Edge from "./http/Edge.ts"
import * as Handlers from "./http/Handlers.ts"
import * as RateLimiter from "./http/RateLimiter.ts"
import * as Config from "./platform/Config.ts"
import * as Database from "./platform/Database.ts"
import * as Ids from "./platform/Ids.ts"
import * as Instance from "./platform/Instance.ts"
import * as Analytics from "./services/Analytics.ts"
import * as ApiKeys from "./services/ApiKeys.ts"
import * as Fraud from "./services/Fraud.ts"
import * as Merchants from "./services/Merchants.ts"
import * as PaymentActors from "./services/PaymentActors.ts"
import * as Payments from "./services/Payments.ts"
import * as PgStore from "./store/PgStore.ts"
import * as Workers from "./workers/Workers.ts"
import * as SandboxDisputes from "./workers/SandboxDisputes.ts"
import * as WebhookDispatcher from "./workers/WebhookDispatcher.ts"
import * as WebhookTransport from "./platform/WebhookTransport.ts"
import * as Webhooks from "./services/Webhooks.ts"
import type { Store } from "./store/Store.ts"

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

/** The HttpApi with its handlers and middleware (no server): tests can serve it in-process. */
export const ApiLive = HttpApiBuilder.api(PaymentsApi).pipe(
  Layer.provide(Handlers.layer),
  Layer.provide(Authentication.layer),
  Layer.provide(Edge.layer),
  Layer.provide(RateLimiter.layer)
)

/**
 * `GET /` points to the API's documentation: a browser is sent on to the docs page, and the body
 * says where both documents are for a client that does not follow redirects.
 */
const RootLive = HttpApiBuilder.Router.use((router) =>
  router.get(
    "/",
    Effect.succeed(HttpServerResponse.unsafeJson(
      {
        message: "Payments API. Documentation: GET /docs (human), GET /api/v1/openapi.json (OpenAPI 3.1).",
        docs: "/docs",
        openapi: "/api/v1/openapi.json"
      },
      { status: 302, headers: { location: "/docs" } }
    ))
  )
)

/** Routes: the API, its OpenAPI document, a docs page and `/` pointing to them (src/http/Routes.ts lists them). */
export const HttpRoutesLive = Layer.mergeAll(
  HttpApiBuilder.middlewareOpenApi({ path: "/api/v1/openapi.json" }),
  HttpApiScalar.layer({ path: "/docs" }),
  RootLive
).pipe(Layer.provideMerge(ApiLive))

/** The production infrastructure: configuration, database (embedded when no DATABASE_URL), ids, sandbox acquirer. */
export const InfrastructureLive = PgStore.layerPg.pipe(
  Layer.provideMerge(Database.layer),
  Layer.provideMerge(Layer.mergeAll(Ids.layer, Acquirer.layerSandbox, WebhookTransport.layer)),
  Layer.provideMerge(Config.layer)
)

/** The HTTP server with a graceful stop (src/http/Drain.ts). */
export const serverLayer = (port: number, host = "127.0.0.1") => Drain.serverLayer(HttpRoutesLive, port, host)

/** The whole service: HTTP server and workers over the services and production infrastructure. */
export const AppLive = <E>(port: number, host: string, startup: Layer.Layer<never, E, Payments.Payments | Merchants.Merchants | Store | Config.AppConfig>) =>
  Layer.mergeAll(serverLayer(port, host), Workers.layer, WebhookDispatcher.layer, SandboxDisputes.layer).pipe(
    // Start-up work (the demo merchant and its key file) is done before the server listens:
    // `mergeAll` builds its layers concurrently, so a ready service could answer before the key
    // file a newcomer reads existed (test/guard/root-start.test.ts saw it under load).
    Layer.provideMerge(startup),
    Layer.provideMerge(ServicesLive),
    // The serving process beats (its idempotency claims name it); CLI commands do not.
    Layer.provideMerge(Instance.layer),
    Layer.provideMerge(InfrastructureLive)
  )
