import { Effect, Layer } from "effect"
import { HttpRouter, HttpServerResponse } from "effect/http"
import { HttpApiBuilder, HttpApiScalar } from "effect/http-api"
import { InfrastructureLive, infrastructureWith, ServicesLive, teardown } from "./AppServices.ts"
import { PaymentsApi } from "./http/api/Api.ts"
import * as Authentication from "./http/edge/Authentication.ts"
import * as Edge from "./http/edge/Edge.ts"
import * as RateLimiter from "./http/edge/RateLimiter.ts"
import * as Handlers from "./http/handlers/Handlers.ts"
import * as Drain from "./http/server/Drain.ts"
import * as Config from "./platform/Config.ts"
import * as Instance from "./platform/Instance.ts"
import * as Merchants from "./services/Merchants.ts"
import * as Payments from "./services/Payments.ts"
import type { Store } from "./store/Store.ts"
import * as SandboxDisputes from "./workers/SandboxDisputes.ts"
import * as WebhookDispatcher from "./workers/WebhookDispatcher.ts"
import * as Workers from "./workers/Workers.ts"

// Defined apart so that the command line's other commands load no HTTP code; the tests, the
// simulator and the harness take them from here with the rest.
export { InfrastructureLive, infrastructureWith, ServicesLive, teardown }

/**
 * The HttpApi with its handlers and middleware, and the edge (a global middleware of the router),
 * with no server: tests can serve it in-process. Its OpenAPI document is served at
 * /api/v1/openapi.json.
 */
export const apiWith = <E, R>(rateLimiter: Layer.Layer<RateLimiter.RateLimiter, E, R>) =>
  Layer.merge(HttpApiBuilder.layer(PaymentsApi, { openapiPath: "/api/v1/openapi.json" }), Edge.layer).pipe(
    Layer.provide(Handlers.layer),
    Layer.provide(Authentication.layer),
    Layer.provide(rateLimiter)
  )
export const ApiLive = apiWith(RateLimiter.layer)

/**
 * `GET /` points to the API's documentation: a browser is sent on to the docs page, and the body
 * says where both documents are for a client that does not follow redirects.
 */
const RootLive = HttpRouter.add(
  "GET",
  "/",
  Effect.succeed(HttpServerResponse.jsonUnsafe(
    {
      message: "Payments API. Documentation: GET /docs (human), GET /api/v1/openapi.json (OpenAPI 3.1).",
      docs: "/docs",
      openapi: "/api/v1/openapi.json"
    },
    { status: 302, headers: { location: "/docs" } }
  ))
)

/** Routes over an API layer: it, its OpenAPI document, a docs page and `/` pointing to them. */
const routesOf = <E, R>(api: Layer.Layer<never, E, R>) =>
  Layer.mergeAll(api, HttpApiScalar.layer(PaymentsApi, { path: "/docs" }), RootLive)

/** Routes: the API, its OpenAPI document, a docs page and `/` pointing to them (src/http/edge/Routes.ts lists them). */
export const HttpRoutesLive = routesOf(ApiLive)

/** The HTTP server with a graceful stop (src/http/Drain.ts). */
export const serverLayer = (port: number, host = "127.0.0.1") => Drain.serverLayer(HttpRoutesLive, port, host)

/**
 * The same server with another rate limiter: the harness's planted bugs (bench/harness/PlantedService.ts)
 * put theirs in; production uses `serverLayer`.
 */
export const serverLayerWith = <E, R>(
  port: number,
  host: string,
  rateLimiter: Layer.Layer<RateLimiter.RateLimiter, E, R>
) => Drain.serverLayer(routesOf(apiWith(rateLimiter)), port, host)

/** The whole service: HTTP server and workers over the services and production infrastructure. */
export const AppLive = <E>(
  port: number,
  host: string,
  startup: Layer.Layer<never, E, Payments.Payments | Merchants.Merchants | Store | Config.AppConfig>
) =>
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
