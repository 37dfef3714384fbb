import { request } from "node:http"
import { connect } from "node:net"
import { describe, expect, it } from "vitest"
import { startWebhookServer } from "../../../bench/harness/scenarios/WebhookServer.ts"
import { HeldSlots, type makeSimulatedEndpoints } from "../../../sim/world/Endpoints.ts"
import { freePort } from "../../../src/platform/Database.ts"

/** Endpoints that answer 204 at once and remember the URL (and body) each POST was matched by. */
const recordingEndpoints = () => {
  const urls: Array<string> = []
  const bodies: Array<string> = []
  const endpoints = {
    receive: (input: { readonly url: string; readonly body: string }) => {
      urls.push(input.url)
      bodies.push(input.body)
      return { _tag: "Answer", status: 204, latencyMs: 0, slot: 0 } as const
    },
    settle: () => {},
    receipts: { ofEvent: () => 0, baseMs: 0 },
    held: new HeldSlots()
  } as unknown as ReturnType<typeof makeSimulatedEndpoints>
  return { urls, bodies, endpoints }
}

const post = (port: number, path: string) =>
  new Promise<number>((done, fail) => {
    const sent = request({
      host: "127.0.0.1",
      port,
      method: "POST",
      path,
      headers: { "content-type": "application/json" }
    }, (response) => {
      response.resume()
      response.on("end", () => done(response.statusCode ?? 0))
    })
    sent.on("error", fail)
    sent.end("{}")
  })

describe("the scenario's webhook receiver", () => {
  it("listens on --webhook-port and registers the URL --webhook-url advertises, with or without the base's path passed on", async () => {
    const port = await freePort()
    const { urls, endpoints } = recordingEndpoints()
    const server = await startWebhookServer({
      host: "127.0.0.1",
      port,
      advertisedUrl: "https://hooks.example:8443/shard-3",
      endpoints,
      timeoutMs: 2_000,
      latencyScale: 1
    })
    try {
      expect(server.baseUrl).toBe("https://hooks.example:8443/shard-3")
      expect(server.urlOf(4)).toBe("https://hooks.example:8443/shard-3/m/4")
      // A proxy that passes the path on, and one that strips its own prefix: the same endpoint.
      expect(await post(port, "/shard-3/m/4")).toBe(204)
      expect(await post(port, "/m/4")).toBe(204)
      expect(urls).toEqual(["https://hooks.example:8443/shard-3/m/4", "https://hooks.example:8443/shard-3/m/4"])
    } finally {
      await server.close()
    }
  })

  it("without them, listens on a free port and registers http://<webhook-host>:<port>", async () => {
    const { urls, endpoints } = recordingEndpoints()
    const server = await startWebhookServer({ host: "127.0.0.1", endpoints, timeoutMs: 2_000, latencyScale: 1 })
    try {
      const port = Number(new URL(server.baseUrl).port)
      expect(server.baseUrl).toBe(`http://127.0.0.1:${port}`)
      expect(await post(port, "/m/0")).toBe(204)
      expect(urls).toEqual([`http://127.0.0.1:${port}/m/0`])
    } finally {
      await server.close()
    }
  })

  it("reads a chunked body and requests pipelined in one write, refuses other methods with 405, and closes when asked", async () => {
    const { urls, bodies, endpoints } = recordingEndpoints()
    const server = await startWebhookServer({ host: "127.0.0.1", endpoints, timeoutMs: 2_000, latencyScale: 1 })
    try {
      const port = Number(new URL(server.baseUrl).port)
      const answers = await new Promise<string>((done, fail) => {
        const socket = connect({ host: "127.0.0.1", port })
        let text = ""
        socket.on("data", (chunk) => (text += chunk.toString("latin1")))
        socket.on("end", () => done(text))
        socket.on("error", fail)
        socket.write(
          "POST /m/1 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{\"a\r\n4;ext=1\r\n\":1}\r\n0\r\n\r\n" +
            "POST /m/2 HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}" +
            "GET /m/3 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
      })
      expect(answers.match(/^HTTP\/1\.1 \d+/gm)).toEqual(["HTTP/1.1 204", "HTTP/1.1 204", "HTTP/1.1 405"])
      expect(bodies).toEqual(["{\"a\":1}", "{}"])
      expect(urls).toEqual([`${server.baseUrl}/m/1`, `${server.baseUrl}/m/2`])
    } finally {
      await server.close()
    }
  })
})
