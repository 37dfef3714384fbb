import { NodeHttpServer } from "@effect/platform-node"
import { Cause, Data, Duration, Effect, Layer, Option } from "effect"
import { HttpMiddleware, HttpRouter, HttpServerResponse } from "effect/http"
import type { ServeError } from "effect/http/HttpServerError"
import type { HttpServerRequest } from "effect/http/HttpServerRequest"
import { Server as NetServer } from "node:net"
import { AppConfig } from "../../platform/Config.ts"
import * as Metrics from "../../platform/Metrics.ts"
import { createHttpServer } from "./NodeResponse.ts"

/**
 * The HTTP server with a graceful stop. When the service stops (SIGTERM, SIGINT), before
 * anything else is torn down: the listener closes (new connections are refused, which a client
 * retries safely), requests in flight, and those already on their way over an accepted
 * connection, finish within SHUTDOWN_GRACE (their answers say `Connection: close`), then every
 * connection closes.
 * Only then do the workers, the database pool and the embedded database stop beneath them.
 */
/** The address the server is to listen on is taken; the message says which and what to do. */
export class AddressInUse extends Data.TaggedError("AddressInUse")<{ readonly message: string }> {}

const isAddressInUse = (error: unknown) => {
  const cause: unknown = typeof error === "object" && error !== null
    ? (error as { readonly cause?: unknown }).cause
    : undefined
  return typeof cause === "object" && cause !== null && (cause as { readonly code?: unknown }).code === "EADDRINUSE"
}

const addressInUse = (port: number, host: string) =>
  new AddressInUse({
    message: `port ${port} on ${host} is already in use (another program, or another instance of this service, ` +
      `listens there): stop it, or choose another port with the PORT variable, e.g. PORT=${
        port === 65535 ? 3001 : port + 1
      } npm start`
  })

/** Node's server on `port`: a port in use fails with `AddressInUse`, whose message says what to do. */
const listening = (server: ReturnType<typeof createHttpServer>, port: number, host: string) => {
  const layer = NodeHttpServer.layer(() => server, { port, host })
  return layer.pipe(
    Layer.catchCause((cause) =>
      // A layer that only fails: it provides nothing, whatever it declares.
      Layer.effectContext<Layer.Success<typeof layer>, AddressInUse | ServeError, never>(
        Effect.failCause<AddressInUse | ServeError>(
          isAddressInUse(Cause.squash(cause)) ? Cause.fail(addressInUse(port, host)) : cause
        )
      )
    )
  )
}

/** How long connections accepted before the listener closed have to deliver their request. */
const lateRequestMs = 250

export const serverLayer = <ROut, E, R>(routes: Layer.Layer<ROut, E, R>, port: number, host: string) => {
  // Made here rather than by the platform's layer, so the stop can close it and its connections;
  // its responses call back when the client hung up before the answer was written (NodeResponse.ts).
  const server = createHttpServer()
  let inFlight = 0
  let draining = false

  // Around the whole chain, the sending of the answer included: a request is in flight until then.
  const counted = <E, R>(
    app: Effect.Effect<HttpServerResponse.HttpServerResponse, E, R>
  ): Effect.Effect<HttpServerResponse.HttpServerResponse, E, R | HttpServerRequest> =>
    Effect.suspend(() => {
      Metrics.record(Metrics.httpRequestsInFlight, ++inFlight)
      return Effect.ensuring(app, Effect.sync(() => Metrics.record(Metrics.httpRequestsInFlight, --inFlight)))
    })

  // A middleware of the router, not of the server: only the router's may still change the answer.
  const closingWhileDraining = HttpRouter.middleware(
    (app) =>
      Effect.map(
        app,
        (response) => (draining ? HttpServerResponse.setHeader(response, "connection", "close") : response)
      ),
    { global: true }
  )

  const waitForInFlight = Effect.gen(function*() {
    while (inFlight > 0) yield* Effect.sleep(Duration.millis(10))
  })

  const drain = Layer.effectDiscard(Effect.gen(function*() {
    const config = yield* AppConfig
    yield* Effect.addFinalizer(() =>
      Effect.gen(function*() {
        draining = true
        const atStop = inFlight
        // Only the listener: http.Server#close would also drop idle connections at once, among
        // them connections accepted a moment ago whose request is still on its way, which the
        // client could not tell from a lost request. Those get a moment to arrive and are served.
        NetServer.prototype.close.call(server)
        yield* Effect.logInfo(
          `shutting down: HTTP listener closed; waiting up to ${config.shutdownGraceMs} ms for ${atStop} requests in flight`
        )
        // Interruptible: a finalizer runs uninterruptibly, and the timeout could not stop a wait
        // that inherits that (it would last as long as the slowest request, SHUTDOWN_GRACE or not).
        const finished = yield* Effect.andThen(Effect.sleep(lateRequestMs), waitForInFlight).pipe(
          Effect.interruptible,
          Effect.timeoutOption(Duration.millis(Math.max(config.shutdownGraceMs, lateRequestMs)))
        )
        server.closeAllConnections()
        yield* Option.isSome(finished)
          ? Effect.logInfo("shutting down: every request in flight was answered; HTTP server stopped")
          : Effect.logWarning(
            `shutting down: ${inFlight} requests still in flight after SHUTDOWN_GRACE were cut off; HTTP server stopped`
          )
      })
    )
  }))

  // `drain` is built after the server, so its finalizer runs before the server's own (which
  // unhooks the request handler and would leave requests on open connections unanswered).
  return drain.pipe(
    Layer.provideMerge(
      HttpRouter.serve(Layer.merge(routes, closingWhileDraining), { middleware: counted as any, disableLogger: true })
        .pipe(
          Layer.provide(Layer.succeed(HttpMiddleware.TracerDisabledWhen, () => true)),
          Layer.provide(listening(server, port, host))
        )
    )
  )
}
