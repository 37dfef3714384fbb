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
let abandoned = 0
beforeAll(async () => {
  server = createServer((request, response) => {
    received++
    if (request.url === "/moved") {
      return void response.writeHead(302, { location: `http://127.0.0.1:${port}/target` }).end()
    }
    if (request.url === "/target") targetHits++
    if (request.url === "/reset") return void request.socket.destroy()
    if (request.url === "/silent") return void request.on("close", () => abandoned++)
    if (request.url === "/large") return void response.writeHead(500).end("x".repeat(3000) + "é".repeat(3000))
    response.writeHead(200).end("ok")
  })
  await new Promise<void>((done) => server.listen(0, "127.0.0.1", done))
  const address = server.address()
  port = typeof address === "object" && address !== null ? address.port : 0
})
afterAll(async () => {
  await new Promise((done) => server.close(done))
})

const postWithin = (url: string, timeoutMs: number) =>
  Effect.runPromise(
    Effect.flatMap(WebhookTransport, (transport) =>
      transport.postWithin === undefined
        ? Effect.die("the live clock's transport applies the timeout itself")
        : transport.postWithin({ url, headers: {}, body: "{}" }, timeoutMs)).pipe(
        Effect.provide(transportLayer),
        Effect.provide(Config.layerWith(Config.defaultsWith({ webhookAllowPrivateUrls: true })))
      )
  )

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
    expect(result).toEqual({
      _tag: "Failed",
      error: "refused: the host resolves to a loopback, private or link-local address"
    })
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
    expect(await post(`http://127.0.0.1:${closedPort}/hook`, true)).toEqual({
      _tag: "Failed",
      error: "connection error: ECONNREFUSED"
    })
  })
})

describe("the production webhook transport on the live clock", () => {
  it("applies the timeout itself: a socket that never answers is a timeout, and the request is abandoned", async () => {
    const before = abandoned
    expect(await postWithin(`http://127.0.0.1:${port}/silent`, 50)).toEqual({
      _tag: "Failed",
      error: "timeout: no answer within 50 ms"
    })
    await expect.poll(() => abandoned).toBe(before + 1)
  })

  it("an answer within the timeout is the answer", async () => {
    expect(await postWithin(`http://127.0.0.1:${port}/hook`, 10_000)).toEqual({
      _tag: "Answered",
      status: 200,
      snippet: "ok"
    })
  })

  it("reads at most the first 4,096 bytes of an answer", async () => {
    const result = await post(`http://127.0.0.1:${port}/large`, true)
    expect(result._tag).toBe("Answered")
    if (result._tag !== "Answered") return
    expect(result.status).toBe(500)
    expect(Buffer.byteLength(result.snippet)).toBeLessThanOrEqual(4096)
    expect(result.snippet.startsWith("x".repeat(3000) + "é".repeat(500))).toBe(true)
  })
})
