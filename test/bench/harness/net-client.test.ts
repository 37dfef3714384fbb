import { createServer as createHttpServer } from "node:http"
import { type AddressInfo, createServer, type Server, type Socket } from "node:net"
import { describe, expect, it } from "vitest"
import type { WireRequest, WireResponse } from "../../../bench/harness/Contract.ts"
import { netClient, ResponseParser } from "../../../bench/harness/NetClient.ts"
import type { WireOutcome } from "../../../bench/harness/Wire.ts"
import { freePort } from "../../../src/platform/Database.ts"

const get = (path: string): WireRequest => ({ method: "GET", path, headers: {}, body: null })

/** Every response `bytes` parses into, fed in the pieces `cuts` makes. */
const parse = (bytes: string, cuts: ReadonlyArray<number> = [], head = false) => {
  const read: Array<{ response: WireResponse; keepAlive: boolean }> = []
  // As a plain record: its headers are read from the head when asked for.
  const parser = new ResponseParser((response, keepAlive) =>
    read.push({
      response: { status: response.status, headers: { ...response.headers }, body: response.body },
      keepAlive
    })
  )
  parser.headRequest = head
  const buffer = Buffer.from(bytes, "utf8")
  let from = 0
  for (const cut of [...cuts, buffer.length]) {
    parser.feed(buffer.subarray(from, cut))
    from = cut
  }
  return { read, parser }
}

const okWithLength =
  "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 16\r\n\r\n{\"status\":\"ok\"}\n"
const chunked =
  "HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\nRetry-After: 2\r\n\r\n5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\nX-Trailer: t\r\n\r\n"

describe("reading responses", () => {
  it("reads a response with a content-length, its headers in lower case", () => {
    const { read, parser } = parse(okWithLength)
    expect(read).toEqual([{
      response: {
        status: 200,
        headers: { "content-type": "application/json", "content-length": "16" },
        body: "{\"status\":\"ok\"}\n"
      },
      keepAlive: true
    }])
    expect(parser.between).toBe(true)
  })

  it("reads the same response however the bytes are split, a chunked one too", () => {
    for (const bytes of [okWithLength, chunked]) {
      const whole = parse(bytes).read
      expect(whole).toHaveLength(1)
      for (let cut = 1; cut < bytes.length; cut++) expect(parse(bytes, [cut]).read).toEqual(whole)
      // Byte by byte.
      expect(parse(bytes, Array.from({ length: bytes.length - 1 }, (_, i) => i + 1)).read).toEqual(whole)
    }
    expect(parse(chunked).read[0]!.response).toEqual({
      status: 201,
      headers: { "transfer-encoding": "chunked", "retry-after": "2" },
      body: "hello, world"
    })
  })

  it("joins a repeated header as node:http does, and serializes as a plain response", () => {
    const read: Array<WireResponse> = []
    new ResponseParser((response) => read.push(response)).feed(
      Buffer.from("HTTP/1.1 200 OK\r\nVary: a\r\nvary:b\r\nContent-Length: 2\r\n\r\nok")
    )
    expect(read[0]!.headers).toEqual({ "vary": "a, b", "content-length": "2" })
    expect(JSON.parse(JSON.stringify(read[0]))).toEqual({
      status: 200,
      headers: { "vary": "a, b", "content-length": "2" },
      body: "ok"
    })
  })

  it("reads several responses from one read, in order", () => {
    const { read } = parse(okWithLength + chunked + "HTTP/1.1 204 No Content\r\n\r\n")
    expect(read.map((r) => r.response.status)).toEqual([200, 201, 204])
    expect(read[2]!.response.body).toBe("")
  })

  it("decodes a UTF-8 body split inside a character", () => {
    const body = "prix: 12 €"
    const bytes = `HTTP/1.1 200 OK\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`
    const euro = Buffer.from(bytes).length - 2
    expect(parse(bytes, [euro]).read[0]!.response.body).toBe(body)
  })

  it("skips an interim 100 Continue, and reads no body after HEAD, 204 or 304", () => {
    expect(parse(`HTTP/1.1 100 Continue\r\n\r\n${okWithLength}`).read.map((r) => r.response.status)).toEqual([200])
    const { read, parser } = parse("HTTP/1.1 200 OK\r\ncontent-length: 16\r\n\r\n", [], true)
    expect(read[0]!.response).toMatchObject({ status: 200, body: "" })
    expect(parser.between).toBe(true)
    expect(parse("HTTP/1.1 304 Not Modified\r\ncontent-length: 16\r\n\r\n").read[0]!.response.body).toBe("")
  })

  it("tells when the connection may not carry another request", () => {
    expect(parse("HTTP/1.1 200 OK\r\nConnection: close\r\ncontent-length: 0\r\n\r\n").read[0]!.keepAlive).toBe(false)
    expect(parse("HTTP/1.0 200 OK\r\ncontent-length: 0\r\n\r\n").read[0]!.keepAlive).toBe(false)
    expect(parse("HTTP/1.0 200 OK\r\nConnection: keep-alive\r\ncontent-length: 0\r\n\r\n").read[0]!.keepAlive).toBe(
      true
    )
  })

  it("reads a body with neither length nor chunks until the connection ends", () => {
    const { read, parser } = parse("HTTP/1.1 200 OK\r\n\r\npart one, ", [22])
    expect(read).toEqual([])
    parser.feed(Buffer.from("part two"))
    expect(parser.end()).toBe(true)
    expect(read).toEqual([{ response: { status: 200, headers: {}, body: "part one, part two" }, keepAlive: false }])
  })

  it("knows a response cut short by the end of the connection is no answer", () => {
    const { read, parser } = parse(okWithLength.slice(0, -3))
    expect(parser.between).toBe(false)
    expect(parser.end()).toBe(false)
    expect(read).toEqual([])
  })

  it("reads the same responses from a buffer reused after each read (a socket's onread buffer)", () => {
    const bytes = Buffer.from(okWithLength + chunked + "HTTP/1.1 200 OK\r\n\r\nuntil the close")
    const whole = parse(bytes.toString("utf8")).read
    for (const size of [1, 2, 3, 7, 16, 50, 64]) {
      const read: Array<{ response: WireResponse; keepAlive: boolean }> = []
      const parser = new ResponseParser((response, keepAlive) =>
        read.push({
          response: { status: response.status, headers: { ...response.headers }, body: response.body },
          keepAlive
        })
      )
      // One buffer for every read, written over by the next read (and scribbled on after each).
      const reused = Buffer.alloc(size)
      for (let from = 0; from < bytes.length; from += size) {
        const length = bytes.copy(reused, 0, from, from + size)
        parser.feed(reused.subarray(0, length), true)
        reused.fill(0x58)
      }
      expect(parser.end()).toBe(true)
      expect(read).toEqual([
        ...whole,
        { response: { status: 200, headers: {}, body: "until the close" }, keepAlive: false }
      ])
    }
  })

  it("throws on what is not an HTTP/1.x response", () => {
    expect(() => parse("SSH-2.0-OpenSSH\r\n\r\n")).toThrow()
    expect(() => parse("HTTP/1.1 200 OK\r\ncontent-length: x\r\n\r\n")).toThrow()
    expect(() => parse("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n")).toThrow()
  })
})

/** A raw TCP server on 127.0.0.1: `onData` sees each read with its socket; the test decides what to write. */
const rawServer = async (onData: (socket: Socket, data: Buffer, connection: number) => void) => {
  const sockets: Array<Socket> = []
  const server: Server = createServer((socket) => {
    const index = sockets.length
    sockets.push(socket)
    socket.on("data", (data) => onData(socket, data, index))
    socket.on("error", () => {})
  })
  await new Promise<void>((listening) => server.listen(0, "127.0.0.1", listening))
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    sockets,
    close: () => {
      for (const socket of sockets) socket.destroy()
      return new Promise((closed) => server.close(closed))
    }
  }
}

const response = (body: string, extra = "") =>
  `HTTP/1.1 200 OK\r\ncontent-length: ${Buffer.byteLength(body)}\r\n${extra}\r\n${body}`
const bodyOf = (outcome: WireOutcome) => (outcome._tag === "Answered" ? outcome.response.body : outcome._tag)
const turn = () => new Promise((tick) => setImmediate(tick))
/** What became of one GET to a raw server that answers it with `onData`. */
const oneRequestTo = async (onData: (socket: Socket, data: Buffer, connection: number) => void) => {
  const server = await rawServer(onData)
  const client = netClient(server.url, { sockets: 1, timeoutMs: 5_000, idleSocketTimeoutMs: 4_000 })
  try {
    return await client.send(get("/"))
  } finally {
    client.close()
    await server.close()
  }
}

describe("the net client against a server", () => {
  it("sends method, path under the target's own path, host, headers and a body with its byte length", async () => {
    let seen = ""
    const server = await rawServer((socket, data) => {
      seen += data.toString()
      if (seen.endsWith("€")) socket.write(response("ok"))
    })
    const client = netClient(`${server.url}/base/`, { sockets: 1, timeoutMs: 5_000, idleSocketTimeoutMs: 4_000 })
    try {
      const outcome = await client.send({
        method: "POST",
        path: "/pay?x=1",
        headers: { authorization: "Bearer k" },
        body: "12 €"
      })
      expect(bodyOf(outcome)).toBe("ok")
      expect(seen).toBe(
        `POST /base/pay?x=1 HTTP/1.1\r\nhost: ${
          new URL(server.url).host
        }\r\nauthorization: Bearer k\r\ncontent-length: 6\r\n\r\n12 €`
      )
    } finally {
      client.close()
      await server.close()
    }
  })

  it("sends the same bytes for a request without headers or a body each time, per method and path", async () => {
    const seen: Array<string> = []
    const server = await rawServer((socket, data) => {
      seen.push(data.toString())
      socket.write(response("ok"))
    })
    const client = netClient(`${server.url}/base`, { sockets: 1, timeoutMs: 5_000, idleSocketTimeoutMs: 4_000 })
    try {
      const requests: Array<WireRequest> = [
        get("/healthz"),
        get("/healthz"),
        { method: "DELETE", path: "/healthz", headers: {}, body: null },
        { method: "POST", path: "/healthz", headers: {}, body: null },
        { method: "GET", path: "/healthz", headers: { "x-n": "1" }, body: null },
        get("/healthz"),
        get("/other")
      ]
      for (const request of requests) expect(bodyOf(await client.send(request))).toBe("ok")
      const host = new URL(server.url).host
      expect(seen).toEqual([
        `GET /base/healthz HTTP/1.1\r\nhost: ${host}\r\n\r\n`,
        `GET /base/healthz HTTP/1.1\r\nhost: ${host}\r\n\r\n`,
        `DELETE /base/healthz HTTP/1.1\r\nhost: ${host}\r\n\r\n`,
        `POST /base/healthz HTTP/1.1\r\nhost: ${host}\r\ncontent-length: 0\r\n\r\n`,
        `GET /base/healthz HTTP/1.1\r\nhost: ${host}\r\nx-n: 1\r\n\r\n`,
        `GET /base/healthz HTTP/1.1\r\nhost: ${host}\r\n\r\n`,
        `GET /base/other HTTP/1.1\r\nhost: ${host}\r\n\r\n`
      ])
    } finally {
      client.close()
      await server.close()
    }
  })

  it("reads chunked answers, and answers written a byte at a time", async () => {
    const server = await rawServer((socket, _data, connection) => {
      if (connection === 0) return void socket.write(chunked)
      const bytes = Buffer.from(response("slowly", "x-n: 1\r\n"))
      for (let i = 0; i < bytes.length; i++) socket.write(bytes.subarray(i, i + 1))
    })
    const chunkedClient = netClient(server.url, { sockets: 1, timeoutMs: 5_000, idleSocketTimeoutMs: 4_000 })
    try {
      const first = await chunkedClient.send(get("/a"))
      expect(first).toMatchObject({
        _tag: "Answered",
        response: { status: 201, body: "hello, world", headers: { "retry-after": "2" } }
      })
      const byteByByte = netClient(server.url, { sockets: 1, timeoutMs: 5_000, idleSocketTimeoutMs: 4_000 })
      expect(bodyOf(await byteByByte.send(get("/b")))).toBe("slowly")
      byteByByte.close()
    } finally {
      chunkedClient.close()
      await server.close()
    }
  })

  it("reads node:http's chunked answers and keeps the connection for the next request", async () => {
    let connections = 0
    const server = createHttpServer((_request, answer) => {
      answer.write("streamed ")
      answer.end("answer")
    })
    server.on("connection", () => connections++)
    await new Promise<void>((listening) => server.listen(0, "127.0.0.1", listening))
    const client = netClient(`http://127.0.0.1:${(server.address() as AddressInfo).port}`, {
      sockets: 1,
      timeoutMs: 5_000,
      idleSocketTimeoutMs: 4_000
    })
    try {
      for (let i = 0; i < 3; i++) expect(bodyOf(await client.send(get("/")))).toBe("streamed answer")
      expect(connections).toBe(1)
    } finally {
      client.close()
      await new Promise((closed) => server.close(closed))
    }
  })

  it("does not reuse a connection answered with connection: close", async () => {
    const server = await rawServer((socket, _data, connection) =>
      socket.end(response(`c${connection}`, "connection: close\r\n"))
    )
    const client = netClient(server.url, { sockets: 1, timeoutMs: 5_000, idleSocketTimeoutMs: 4_000 })
    try {
      expect(bodyOf(await client.send(get("/")))).toBe("c0")
      expect(bodyOf(await client.send(get("/")))).toBe("c1")
      expect(server.sockets).toHaveLength(2)
    } finally {
      client.close()
      await server.close()
    }
  })

  it("drops an idle connection the server closed, and sends the next request on a new one", async () => {
    const server = await rawServer((socket, _data, connection) => socket.write(response(`c${connection}`)))
    const client = netClient(server.url, { sockets: 1, timeoutMs: 5_000, idleSocketTimeoutMs: 600_000 })
    try {
      expect(bodyOf(await client.send(get("/")))).toBe("c0")
      expect(client.pool()).toEqual({ open: 1, idle: 1 })
      // The server's keep-alive ran out: it closes the idle connection.
      server.sockets[0]!.end()
      while (client.pool().open > 0) await turn()
      expect(bodyOf(await client.send(get("/")))).toBe("c1")
    } finally {
      client.close()
      await server.close()
    }
  })

  it("closes an idle connection itself once it has been idle for idleSocketTimeoutMs", async () => {
    const server = await rawServer((socket) => socket.write(response("ok")))
    const client = netClient(server.url, { sockets: 1, timeoutMs: 5_000, idleSocketTimeoutMs: 20 })
    try {
      expect(bodyOf(await client.send(get("/")))).toBe("ok")
      const serverSeesEnd = new Promise<void>((ended) => server.sockets[0]!.once("end", () => ended()))
      await serverSeesEnd
      expect(client.pool()).toEqual({ open: 0, idle: 0 })
    } finally {
      client.close()
      await server.close()
    }
  })

  it("tells a refused connect (nothing sent) from a reset after the request went out", async () => {
    const nobody = netClient(`http://127.0.0.1:${await freePort()}`, {
      sockets: 1,
      timeoutMs: 5_000,
      idleSocketTimeoutMs: 4_000
    })
    expect(await nobody.send(get("/"))).toEqual({ _tag: "Refused" })
    expect(nobody.pool()).toEqual({ open: 0, idle: 0 })
    nobody.close()
    expect(await oneRequestTo((socket) => socket.resetAndDestroy())).toEqual({ _tag: "Lost" })
  })

  it("loses a request whose connection closes mid-answer", async () => {
    expect(await oneRequestTo((socket) => socket.end(response("the whole body").slice(0, -4)))).toEqual({
      _tag: "Lost"
    })
  })

  it("loses a request unanswered within the client timeout, and serves the next on a new connection", async () => {
    const server = await rawServer((socket, data) => {
      if (data.toString().startsWith("GET /answered")) socket.write(response("ok"))
    })
    // Long enough for the second request's connect and answer on a busy machine.
    const client = netClient(server.url, { sockets: 1, timeoutMs: 500, idleSocketTimeoutMs: 4_000 })
    try {
      const sentAt = performance.now()
      expect(await client.send(get("/silent"))).toEqual({ _tag: "Lost" })
      expect(performance.now() - sentAt).toBeGreaterThanOrEqual(500)
      expect(bodyOf(await client.send(get("/answered")))).toBe("ok")
      expect(server.sockets).toHaveLength(2)
    } finally {
      client.close()
      await server.close()
    }
  })

  it("carries many requests over few sockets, each with its own answer, the waiting ones measured", async () => {
    const server = await rawServer((socket, data) => {
      const path = data.toString().split(" ")[1]!
      socket.write(response(path))
    })
    const client = netClient(server.url, { sockets: 4, timeoutMs: 10_000, idleSocketTimeoutMs: 4_000 })
    try {
      const outcomes = await Promise.all(Array.from({ length: 300 }, (_, i) => client.send(get(`/r${i}`))))
      expect(outcomes.map(bodyOf)).toEqual(Array.from({ length: 300 }, (_, i) => `/r${i}`))
      expect(server.sockets.length).toBeLessThanOrEqual(4)
      expect(client.pool()).toEqual({ open: server.sockets.length, idle: server.sockets.length })
      const waits = outcomes.map((outcome) => (outcome._tag === "Answered" ? outcome.socketWaitMs! : -1))
      expect(Math.min(...waits)).toBeGreaterThanOrEqual(0)
      // The last waited for the first connect, then for the requests before it on four sockets.
      expect(waits[299]!).toBeGreaterThan(Math.min(...waits.slice(0, 4)))
    } finally {
      client.close()
      await server.close()
    }
  })

  it("loses the requests still out or waiting when closed", async () => {
    const server = await rawServer(() => {})
    const client = netClient(server.url, { sockets: 1, timeoutMs: 10_000, idleSocketTimeoutMs: 4_000 })
    try {
      const out = [client.send(get("/1")), client.send(get("/2"))]
      while (server.sockets.length === 0) await turn()
      client.close()
      expect(await Promise.all(out)).toEqual([{ _tag: "Lost" }, { _tag: "Lost" }])
      expect(await client.send(get("/3"))).toEqual({ _tag: "Lost" })
    } finally {
      await server.close()
    }
  })
})
