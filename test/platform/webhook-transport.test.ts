import { Effect } from "effect"
import { createServer, type Server } from "node:http"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import * as Config from "../../src/platform/Config.ts"
import { layer as transportLayer, WebhookTransport } from "../../src/platform/WebhookTransport.ts"

// A webhook URL's host name is not resolved when the URL is saved (`webhookUrlProblem`, src/domain/Network.ts): the
// production transport classifies what the name resolves to on every connection instead.

let server: Server
let port = 0
let received = 0
let targetHits = 0
beforeAll(async () => {
  server = createServer((request, response) => {
    received++
    if (request.url === "/moved") return void response.writeHead(302, { location: `http://127.0.0.1:${port}/target` }).end()
    if (request.url === "/target") targetHits++
    if (request.url === "/reset") return void request.socket.destroy()
    response.writeHead(200).end("ok")
  })
  await new Promise<void>((done) => server.listen(0, "127.0.0.1", done))
  const address = server.address()
  port = typeof address === "object" && address !== null ? address.port : 0
})
afterAll(async () => {
  await new Promise((done) => server.close(done))
})

const post = (url: string, allowPrivate: boolean) =>
  Effect.runPromise(
    Effect.flatMap(WebhookTransport, (transport) => transport.post({ url, headers: {}, body: "{}" })).pipe(
      Effect.provide(transportLayer),
      Effect.provide(Config.layerWith(Config.defaultsWith({ webhookAllowPrivateUrls: allowPrivate })))
    )
  )

describe("the production webhook transport checks resolved addresses at connect time", () => {
  it("refuses a name that resolves to loopback, without sending anything", async () => {
    const before = received
    const result = await post(`http://localhost:${port}/hook`, false)
    expect(result).toEqual({ _tag: "Failed", error: "refused: the host resolves to a loopback, private or link-local address" })
    expect(received).toBe(before)
  })

  it("a name that does not resolve is a failed attempt (retried on the schedule), not a crash", async () => {
    const result = await post("http://hooks.example.invalid/x", false)
    expect(result._tag).toBe("Failed")
    if (result._tag === "Failed") expect(result.error).toMatch(/^connection error/)
  })

  it("delivers to the same name when private URLs are allowed", async () => {
    const result = await post(`http://localhost:${port}/hook`, true)
    expect(result).toMatchObject({ _tag: "Answered", status: 200 })
  })
})

// Real sockets, not an interceptor (msw and the like patch Node's request functions above the
// socket, past the transport's own agent and its connect-time address check): what a merchant's
// endpoint can do to a delivery, done by a real server on 127.0.0.1.
describe("the production webhook transport and what an endpoint does to a POST", () => {
  it("a redirect is not followed: the 3xx is the answer (a failed attempt), and its target is never asked", async () => {
    const result = await post(`http://127.0.0.1:${port}/moved`, true)
    expect(result).toMatchObject({ _tag: "Answered", status: 302 })
    expect(targetHits).toBe(0)
  })

  it("a connection reset before any answer is a failed attempt naming the reset, not a crash", async () => {
    const result = await post(`http://127.0.0.1:${port}/reset`, true)
    expect(result).toEqual({ _tag: "Failed", error: "connection error: ECONNRESET" })
  })

  it("a port with nothing listening is a failed attempt naming the refusal", async () => {
    const closed = createServer()
    await new Promise<void>((done) => closed.listen(0, "127.0.0.1", done))
    const address = closed.address()
    const closedPort = typeof address === "object" && address !== null ? address.port : 0
    await new Promise((done) => closed.close(done))
    expect(await post(`http://127.0.0.1:${closedPort}/hook`, true)).toEqual({ _tag: "Failed", error: "connection error: ECONNREFUSED" })
  })
})
