import { NodeHttpServer } from "@effect/platform-node"
import { Deferred, Effect, Layer } from "effect"
import { HttpMiddleware, HttpServer, HttpServerResponse } from "effect/http"
import type { AddressInfo } from "node:net"
import { describe, expect, it } from "vitest"
import { createHttpServer } from "../../src/http/server/NodeResponse.ts"

// A client that hangs up just as its request is answered: the answer is written to a connection
// already closed. Node calls `end(body, callback)` back on `finish` only, which a closed response
// never reaches, and @effect/platform-node waits for that callback in the request's
// uninterruptible tail: the request stayed in flight for ever (docs/operations.md, the hang-up
// known issue). Each step below waits for an event, never for time: without the fix these tests
// do not end (the test timeout fails them).

/** A request whose client is gone (the server saw its response close) before it is answered. */
const hungUp = (port: number, arrived: Promise<void>) => {
  const controller = new AbortController()
  const sent = fetch(`http://127.0.0.1:${port}/`, { method: "POST", body: "{}", signal: controller.signal }).catch(() =>
    null
  )
  return arrived.then(() => {
    controller.abort()
    return sent
  })
}

describe("an answer written after the client hung up", () => {
  it("node level: end's callback is called for a response already closed", async () => {
    const server = createHttpServer()
    let arrived!: () => void
    const arrival = new Promise<void>((done) => (arrived = done))
    const ended = new Promise<string>((done) => {
      server.on("request", (_request, response) => {
        response.once("close", () => {
          expect(response.destroyed).toBe(true)
          response.writeHead(200, { "content-type": "application/json" })
          response.end("{}", () => done("called back"))
        })
        arrived()
      })
    })
    await new Promise<void>((done) => server.listen(0, "127.0.0.1", done))
    try {
      await hungUp((server.address() as AddressInfo).port, arrival)
      expect(await ended).toBe("called back")
    } finally {
      server.closeAllConnections()
      await new Promise((done) => server.close(done))
    }
  }, 20_000)

  it("the request's fiber ends: the platform's write of the answer is called back", async () => {
    const server = createHttpServer()
    const program = Effect.gen(function*() {
      const clientGone = yield* Deferred.make<void>()
      const requestEnded = yield* Deferred.make<string>()
      let arrived!: () => void
      const arrival = new Promise<void>((done) => (arrived = done))
      // Told before the platform's own handler sees the request: the client is gone once its
      // response closed.
      server.prependListener("request", (_request, response) => {
        response.once("close", () => Deferred.doneUnsafe(clientGone, Effect.void))
        arrived()
      })
      // The handler answers only after the hang-up, and the hang-up's interrupt cannot stop it
      // (as when the interrupt comes in just behind the handler's last resumption).
      const app = Effect.uninterruptible(
        Effect.as(Deferred.await(clientGone), HttpServerResponse.text("{}", { contentType: "application/json" }))
      )
      // Around the platform's error handling and its write of the answer, as the service's drain counts requests.
      const whole = HttpMiddleware.make((handled) =>
        Effect.onExit(handled, (exit) => Deferred.succeed(requestEnded, exit._tag))
      )
      yield* Layer.launch(
        HttpServer.serve(app, whole).pipe(
          Layer.provide(NodeHttpServer.layer(() => server, { port: 0, host: "127.0.0.1" }))
        )
      ).pipe(
        Effect.forkScoped
      )
      const port = yield* Effect.callback<number>((resume) => {
        if (server.listening) resume(Effect.succeed((server.address() as AddressInfo).port))
        else server.once("listening", () => resume(Effect.succeed((server.address() as AddressInfo).port)))
      })
      yield* Effect.promise(() => hungUp(port, arrival))
      return yield* Deferred.await(requestEnded)
    })
    const ended = await Effect.runPromise(Effect.scoped(program))
    expect(ended).toBe("Success")
  }, 20_000)
})
