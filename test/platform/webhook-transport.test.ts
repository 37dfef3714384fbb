import { Effect } from "effect"
import { createServer, type Server } from "node:http"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import * as Config from "../../src/platform/Config.ts"
import { layer as transportLayer, WebhookTransport } from "../../src/platform/WebhookTransport.ts"

// A webhook URL's host name is not resolved when the URL is saved (src/http/WebhookUrl.ts): the
// production transport classifies what the name resolves to on every connection instead.

let server: Server
let port = 0
let received = 0
beforeAll(async () => {
  server = createServer((_request, response) => {
    received++
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
