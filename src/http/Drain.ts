import { HttpApiBuilder, HttpMiddleware, HttpServer, HttpServerResponse } from "@effect/platform"
import type { HttpApp } from "@effect/platform"
import { NodeHttpServer } from "@effect/platform-node"
import { Duration, Effect, Layer, Option } from "effect"
import { createServer } from "node:http"
import { AppConfig } from "../platform/Config.ts"

/**
 * The HTTP server with a graceful stop. When the service stops (SIGTERM, SIGINT), before
 * anything else is torn down: the listener closes (new connections are refused, which a client
 * retries safely), idle keep-alive connections close, requests in flight finish within
 * SHUTDOWN_GRACE (their answers say `Connection: close`), then the remaining connections close.
 * Only then do the workers, the database pool and the embedded database stop beneath them.
 */
export const serverLayer = <ROut, E, R>(routes: Layer.Layer<ROut, E, R>, port: number, host: string) => {
  // Made here rather than by the platform's layer, so the stop can close it and its connections.
  const server = createServer()
  let inFlight = 0
  let draining = false

  const counted = (app: HttpApp.Default): HttpApp.Default =>
    Effect.suspend(() => {
      inFlight++
      return app.pipe(
        Effect.map((response) => (draining ? HttpServerResponse.setHeader(response, "connection", "close") : response)),
        Effect.ensuring(Effect.sync(() => void inFlight--))
      )
    })

  const waitForInFlight = Effect.gen(function*() {
    while (inFlight > 0) yield* Effect.sleep(Duration.millis(10))
  })

  const drain = Layer.scopedDiscard(Effect.gen(function*() {
    const config = yield* AppConfig
    yield* Effect.addFinalizer(() =>
      Effect.gen(function*() {
        draining = true
        const atStop = inFlight
        server.close()
        server.closeIdleConnections()
        yield* Effect.logInfo(`shutting down: HTTP listener closed; waiting up to ${config.shutdownGraceMs} ms for ${atStop} requests in flight`)
        const finished = yield* waitForInFlight.pipe(Effect.timeoutOption(Duration.millis(config.shutdownGraceMs)))
        server.closeAllConnections()
        yield* Option.isSome(finished)
          ? Effect.logInfo("shutting down: every request in flight was answered; HTTP server stopped")
          : Effect.logWarning(`shutting down: ${inFlight} requests still in flight after SHUTDOWN_GRACE were cut off; HTTP server stopped`)
      })
    )
  }))

  // `drain` is built after the server, so its finalizer runs before the server's own (which
  // unhooks the request handler and would leave requests on open connections unanswered).
  return drain.pipe(
    Layer.provideMerge(
      HttpApiBuilder.serve(counted).pipe(
        Layer.provide(routes),
        HttpMiddleware.withTracerDisabledWhen(() => true),
        HttpServer.withLogAddress,
        Layer.provide(NodeHttpServer.layer(() => server, { port, host }))
      )
    )
  )
}
