import * as fc from "fast-check"
import { connect, type Socket } from "node:net"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { client, startApp, type TestApp, transactionBody } from "../support/app.ts"

// What the edge does with bodies it refuses or cannot read as text, through the real server on
// PostgreSQL: a body over the limit ends its connection (the rest is never read), and a body
// that is not UTF-8 is refused rather than repaired.

let app: TestApp
let key: string
let api: ReturnType<typeof client>
let port: number
beforeAll(async () => {
  app = await startApp({ label: "edge_input" })
  key = (await app.createMerchant("Edge")).key
  api = client(app.baseUrl, key)
  port = Number(new URL(app.baseUrl).port)
})
afterAll(async () => {
  await app?.close()
})

const paymentCount = async () => Number((await app.query("SELECT count(*) AS n FROM payments"))[0]!.n)

// ---------------------------------------------------------------------------------------------
// A raw connection: what the server sends back, byte for byte, and how the connection ended.

interface Connection {
  readonly socket: Socket
  /** Writes `data`, waiting for the socket to drain; false once the connection is gone. */
  readonly write: (data: string | Buffer) => Promise<boolean>
  /** Everything received so far, as latin1 text (one character per byte). */
  readonly received: () => string
  /** Resolves when the connection closed (either side), with the error that closed it, if any. */
  readonly closed: Promise<string | null>
}

const open = (): Promise<Connection> =>
  new Promise((resolve, reject) => {
    const socket = connect({ host: "127.0.0.1", port })
    const chunks: Array<Buffer> = []
    let failure: string | null = null
    socket.on("data", (chunk: Buffer) => chunks.push(chunk))
    socket.on("error", (error: NodeJS.ErrnoException) => (failure ??= error.code ?? String(error)))
    const closed = new Promise<string | null>((done) => socket.once("close", () => done(failure)))
    const write = (data: string | Buffer) =>
      new Promise<boolean>((done) => {
        if (socket.destroyed || !socket.writable) return done(false)
        const onClose = () => done(false)
        socket.once("close", onClose)
        const drained = socket.write(data, (error) => {
          if (error !== undefined && error !== null) {
            socket.off("close", onClose)
            done(false)
          }
        })
        if (drained) {
          socket.off("close", onClose)
          done(true)
        } else {
          socket.once("drain", () => {
            socket.off("close", onClose)
            done(true)
          })
        }
      })
    socket.once("connect", () =>
      resolve({ socket, write, received: () => Buffer.concat(chunks).toString("latin1"), closed }))
    socket.once("error", reject)
  })

/** Resolves with `promise`, or fails the test after `ms` (a bound, never a synchronisation). */
const within = <A>(promise: Promise<A>, ms: number, what: string): Promise<A> =>
  new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms)
    promise.then((value) => {
      clearTimeout(timer)
      resolve(value)
    }, reject)
  })

interface RawResponse {
  readonly status: number
  readonly headers: Record<string, string>
  readonly body: string
}

/** The responses in a received byte stream (bodies framed by Content-Length, as ours are). */
const responsesIn = (text: string): Array<RawResponse> => {
  const responses: Array<RawResponse> = []
  let at = 0
  while (at < text.length) {
    const headEnd = text.indexOf("\r\n\r\n", at)
    if (headEnd === -1) break
    const [statusLine, ...lines] = text.slice(at, headEnd).split("\r\n")
    const headers: Record<string, string> = {}
    for (const line of lines) {
      const colon = line.indexOf(":")
      headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim()
    }
    const length = Number(headers["content-length"] ?? 0)
    responses.push({
      status: Number(/^HTTP\/1\.1 (\d{3})/.exec(statusLine!)?.[1]),
      headers,
      body: text.slice(headEnd + 4, headEnd + 4 + length)
    })
    at = headEnd + 4 + length
  }
  return responses
}

const head = (method: string, path: string, headers: Record<string, string>) =>
  `${method} ${path} HTTP/1.1\r\nhost: 127.0.0.1\r\n${
    Object.entries(headers).map(([name, value]) => `${name}: ${value}\r\n`).join("")
  }\r\n`

const createRequest = (body: string) =>
  head("POST", "/api/v1/transactions", {
    authorization: `Bearer ${key}`,
    "content-type": "application/json",
    "content-length": String(Buffer.byteLength(body))
  }) + body

const chunked = (data: string) => `${data.length.toString(16)}\r\n${data}\r\n`

const twentyMebibytes = 20 * 1024 * 1024

const expectBodyTooLarge = (response: RawResponse | undefined) => {
  expect(response?.status).toBe(413)
  expect(response?.headers["connection"]).toBe("close")
  expect(JSON.parse(response!.body).error.code).toBe("body_too_large")
}

describe("a body over the limit ends its connection", () => {
  it("a declared 20 MiB body: 413 with Connection: close after a few KiB, then the connection ends", async () => {
    const connection = await open()
    await connection.write(head("POST", "/api/v1/transactions", {
      authorization: `Bearer ${key}`,
      "content-type": "application/json",
      "content-length": String(twentyMebibytes)
    }))
    await connection.write("x".repeat(4 * 1024))
    // The client sends nothing more: only the server can end the connection.
    await within(connection.closed, 5_000, "the connection to end")
    const responses = responsesIn(connection.received())
    expect(responses).toHaveLength(1)
    expectBodyTooLarge(responses[0])
  })

  it("a declared 20 MiB body sent whole with a GET behind it: one answer (413), the connection ends before the body is through", async () => {
    const connection = await open()
    let written = 0
    let open_ = await connection.write(head("POST", "/api/v1/transactions", {
      authorization: `Bearer ${key}`,
      "content-type": "application/json",
      "content-length": String(twentyMebibytes)
    }))
    const piece = Buffer.alloc(64 * 1024, "x")
    while (open_ && written < twentyMebibytes) {
      open_ = await connection.write(piece)
      if (open_) written += piece.length
    }
    if (open_) await connection.write(head("GET", "/healthz", {}))
    await within(connection.closed, 10_000, "the connection to end")
    const responses = responsesIn(connection.received())
    expect(responses.map((response) => response.status)).toEqual([413])
    expectBodyTooLarge(responses[0])
    // The server read none of the rest: what the client got out is what the kernel buffers held.
    expect(written).toBeLessThan(twentyMebibytes)
  })

  it("a chunked body growing past the limit: 413 with Connection: close, then the connection ends", async () => {
    const connection = await open()
    await connection.write(head("POST", "/api/v1/transactions", {
      authorization: `Bearer ${key}`,
      "content-type": "application/json",
      "transfer-encoding": "chunked"
    }))
    for (let i = 0; i < 10; i++) await connection.write(chunked("x".repeat(8 * 1024)))
    // Unfinished: no terminating chunk.
    await within(connection.closed, 5_000, "the connection to end")
    const responses = responsesIn(connection.received())
    expect(responses).toHaveLength(1)
    expectBodyTooLarge(responses[0])
  })

  const chunkedOverLimit = (headers: Record<string, string>) =>
    head("POST", "/api/v1/transactions", {
      authorization: `Bearer ${key}`,
      "content-type": "application/json",
      "transfer-encoding": "chunked",
      ...headers
    }) +
    Array.from({ length: 9 }, () => chunked("x".repeat(8 * 1024))).join("") + "0\r\n\r\n"
  it.each(
    [
      ["a declared body one byte over", () => createRequest("x".repeat(64 * 1024 + 1))],
      ["a chunked body past the limit", () => chunkedOverLimit({})],
      // Storing the refusal under the key takes a round trip to the database before the answer:
      // Node has parsed the create behind the body by then.
      [
        "a chunked body past the limit with an idempotency key",
        () => chunkedOverLimit({ "x-idempotency-key": `too-large-${Math.random()}` })
      ]
    ] as const
  )("%s with writes pipelined behind it: only the 413 is answered and nothing is written", async (_name, refused) => {
    const before = await paymentCount()
    const merchant = (await api.get("/api/v1/merchants/me")).body.merchant
    const rename = JSON.stringify({ name: `Renamed ${Math.random()}` })
    const connection = await open()
    await connection.write(
      refused() +
        head("PATCH", "/api/v1/merchants/me", {
          authorization: `Bearer ${key}`,
          "content-type": "application/json",
          "content-length": String(rename.length)
        }) +
        rename +
        createRequest(JSON.stringify(transactionBody({ amount_cents: 4321 })))
    )
    await within(connection.closed, 5_000, "the connection to end")
    const responses = responsesIn(connection.received())
    expect(responses.map((response) => response.status)).toEqual([413])
    expectBodyTooLarge(responses[0])
    expect(await paymentCount()).toBe(before)
    expect((await api.get("/api/v1/merchants/me")).body.merchant).toEqual(merchant)
  })

  it("a body within the limit keeps the connection open for the next request", async () => {
    const connection = await open()
    await connection.write(
      createRequest(JSON.stringify(transactionBody({ amount_cents: 1234 }))) + head("GET", "/healthz", {})
    )
    const bothAnswered = async () => {
      while (responsesIn(connection.received()).length < 2) {
        await new Promise((done) => connection.socket.once("data", done))
      }
    }
    await within(bothAnswered(), 5_000, "both answers")
    expect(responsesIn(connection.received()).map((response) => response.status)).toEqual([201, 200])
    expect(connection.socket.destroyed).toBe(false)
    connection.socket.destroy()
  })
})

// ---------------------------------------------------------------------------------------------
// UTF-8

/** RFC 3629's well-formed byte sequences, written out: the oracle the server is held to. */
const isWellFormedUtf8 = (bytes: Uint8Array) => {
  let i = 0
  while (i < bytes.length) {
    const first = bytes[i]!
    if (first < 0x80) {
      i++
      continue
    }
    const length = first >= 0xc2 && first <= 0xdf
      ? 2
      : first >= 0xe0 && first <= 0xef
      ? 3
      : first >= 0xf0 && first <= 0xf4
      ? 4
      : 0
    if (length === 0 || i + length > bytes.length) return false
    let codePoint = first & (0xff >> (length + 1))
    for (let k = 1; k < length; k++) {
      const next = bytes[i + k]!
      if ((next & 0xc0) !== 0x80) return false
      codePoint = (codePoint << 6) | (next & 0x3f)
    }
    const smallest = length === 2 ? 0x80 : length === 3 ? 0x800 : 0x10000
    if (codePoint < smallest || codePoint > 0x10ffff || (codePoint >= 0xd800 && codePoint <= 0xdfff)) return false
    i += length
  }
  return true
}

/** A create whose metadata value `note` is `note`'s bytes, as is. */
const createWithNote = (note: Uint8Array) => {
  const [before, after] = JSON.stringify(transactionBody({ metadata: { note: "NOTE" } })).split("NOTE")
  return Buffer.concat([Buffer.from(before!), note, Buffer.from(after!)])
}

const sendBytes = async (method: string, path: string, body: Uint8Array, headers: Record<string, string> = {}) => {
  const response = await fetch(`${app.baseUrl}${path}`, {
    method,
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json", ...headers },
    body
  })
  const bytes = Buffer.from(await response.arrayBuffer())
  return { status: response.status, headers: response.headers, bytes, body: JSON.parse(bytes.toString("utf8")) }
}

const bytes = (...values: Array<number>) => Uint8Array.from(values)

/** Ill-formed sequences, each inside text that is otherwise fine. */
const illFormed: ReadonlyArray<readonly [string, Uint8Array]> = [
  ["a stray byte FF", bytes(0xff)],
  ["FE", bytes(0xfe)],
  ["a surrogate encoded as ED A0 80", bytes(0xed, 0xa0, 0x80)],
  ["a low surrogate ED BF BF", bytes(0xed, 0xbf, 0xbf)],
  ["an overlong slash C0 AF", bytes(0xc0, 0xaf)],
  ["an overlong three-byte form E0 80 AF", bytes(0xe0, 0x80, 0xaf)],
  ["an overlong four-byte form F0 80 80 AF", bytes(0xf0, 0x80, 0x80, 0xaf)],
  ["past U+10FFFF, F4 90 80 80", bytes(0xf4, 0x90, 0x80, 0x80)],
  ["a lone continuation byte 80", bytes(0x80)],
  ["a sequence cut short, E6 97", bytes(0xe6, 0x97)],
  ["a lead byte followed by ASCII, C3 41", bytes(0xc3, 0x41)]
]

describe("a body that is not UTF-8 is refused, never repaired", () => {
  it.each(illFormed)("%s in a metadata value: 400 invalid_json, nothing created", async (_name, sequence) => {
    expect(isWellFormedUtf8(sequence)).toBe(false)
    const before = await paymentCount()
    const reply = await sendBytes(
      "POST",
      "/api/v1/transactions",
      createWithNote(Buffer.concat([Buffer.from("ok "), sequence, Buffer.from(" ok")]))
    )
    expect(reply.status).toBe(400)
    expect(reply.body.error.code).toBe("invalid_json")
    expect(reply.body.error.message).toBe("The request body is not valid JSON: it is not valid UTF-8.")
    expect(await paymentCount()).toBe(before)
  })

  it("anywhere in the body: in a key, between tokens, cut short at its very end", async () => {
    const text = JSON.stringify(transactionBody())
    const bodies = [
      Buffer.from(text.replace("\"currency\"", "\"curr\xffency\""), "latin1"),
      Buffer.concat([Buffer.from(text), bytes(0xff)]),
      Buffer.concat([Buffer.from(text.slice(0, -1)), bytes(0xe6, 0x97)]),
      Buffer.concat([bytes(0xc0, 0xbb), Buffer.from(text)])
    ]
    const before = await paymentCount()
    for (const body of bodies) {
      const reply = await sendBytes("POST", "/api/v1/transactions", body)
      expect(reply.status).toBe(400)
      expect(reply.body.error.message).toContain("UTF-8")
    }
    expect(await paymentCount()).toBe(before)
  })

  it("a body not declared JSON is a 415 first, whatever its bytes", async () => {
    const reply = await sendBytes("POST", "/api/v1/transactions", createWithNote(bytes(0xff)), {
      "content-type": "text/plain; charset=latin1"
    })
    expect(reply.status).toBe(415)
    expect(reply.body.error.code).toBe("unsupported_media_type")
  })

  it("a merchant name with a stray byte leaves the merchant as it was", async () => {
    const before = (await api.get("/api/v1/merchants/me")).body.merchant
    const reply = await sendBytes(
      "PATCH",
      "/api/v1/merchants/me",
      Buffer.concat([Buffer.from("{\"name\":\"Caf"), bytes(0xe9), Buffer.from("\"}")])
    )
    expect(reply.status).toBe(400)
    expect(reply.body.error.code).toBe("invalid_json")
    expect((await api.get("/api/v1/merchants/me")).body.merchant).toEqual(before)
  })

  it("with an idempotency key the refusal is replayed, and the key with another body is a reuse", async () => {
    const idempotencyKey = `not-utf8-${Math.random()}`
    const body = createWithNote(bytes(0x61, 0xff))
    const first = await sendBytes("POST", "/api/v1/transactions", body, { "x-idempotency-key": idempotencyKey })
    const second = await sendBytes("POST", "/api/v1/transactions", body, { "x-idempotency-key": idempotencyKey })
    expect(first.status).toBe(400)
    expect(second.status).toBe(400)
    expect(second.bytes.equals(first.bytes)).toBe(true)
    expect(second.headers.get("idempotent-replayed")).toBe("true")
    // The same text, repaired as a lenient decoder would (U+FFFD), is another request.
    const repaired = await sendBytes("POST", "/api/v1/transactions", createWithNote(Buffer.from("a\ufffd")), {
      "x-idempotency-key": idempotencyKey
    })
    expect(repaired.status).toBe(422)
    expect(repaired.body.error.code).toBe("idempotency_key_reused")
  })

  it("well-formed text round-trips byte for byte: é, 日本, emoji, U+FFFD itself", async () => {
    for (const note of ["café", "日本", "😀 🇯🇵", "\u00e9\u0301", "\ufffd", "\u{10ffff}"]) {
      const sent = Buffer.from(note, "utf8")
      const reply = await sendBytes("POST", "/api/v1/transactions", createWithNote(sent))
      expect(reply.status).toBe(201)
      expect(Buffer.from(reply.body.transaction.metadata.note, "utf8").equals(sent)).toBe(true)
      const stored = await app.query<{ note: string }>("SELECT metadata->>'note' AS note FROM payments WHERE id = $1", [
        reply.body.transaction.id
      ])
      expect(Buffer.from(stored[0]!.note, "utf8").equals(sent)).toBe(true)
      const read = await api.get(`/api/v1/transactions/${reply.body.transaction.id}`)
      expect(Buffer.from(read.body.transaction.metadata.note, "utf8").equals(sent)).toBe(true)
    }
    const renamed = await sendBytes(
      "PATCH",
      "/api/v1/merchants/me",
      Buffer.from(JSON.stringify({ name: "Café 日本 😀" }), "utf8")
    )
    expect(renamed.status).toBe(200)
    expect(renamed.body.merchant.name).toBe("Café 日本 😀")
  })

  it(
    "property: over random byte strings, a create is accepted exactly when its bytes are well-formed UTF-8",
    async () => {
      // Pieces that are text the field accepts (no control characters, no quote or backslash),
      // ill-formed sequences, and raw high bytes that sometimes happen to form a valid sequence.
      const codePoint = fc.oneof(
        fc.integer({ min: 0x20, max: 0x7e }).filter((c) => c !== 0x22 && c !== 0x5c),
        fc.integer({ min: 0x80, max: 0x7ff }),
        fc.integer({ min: 0x800, max: 0xffff }).filter((c) => c < 0xd800 || c > 0xdfff),
        fc.integer({ min: 0x10000, max: 0x10ffff })
      )
      const piece = fc.oneof(
        { weight: 4, arbitrary: codePoint.map((c) => Buffer.from(String.fromCodePoint(c), "utf8")) },
        { weight: 1, arbitrary: fc.constantFrom(...illFormed.map(([, sequence]) => sequence)) },
        { weight: 2, arbitrary: fc.uint8Array({ minLength: 1, maxLength: 4 }).map((raw) => raw.map((b) => b | 0x80)) }
      )
      const note = fc.array(piece, { minLength: 1, maxLength: 24 }).map((pieces) => Buffer.concat(pieces))
      const before = await paymentCount()
      let accepted = 0
      let refused = 0
      await fc.assert(
        fc.asyncProperty(note, async (sent) => {
          const reply = await sendBytes("POST", "/api/v1/transactions", createWithNote(sent))
          if (isWellFormedUtf8(sent)) {
            expect(reply.status).toBe(201)
            expect(Buffer.from(reply.body.transaction.metadata.note, "utf8").equals(sent)).toBe(true)
            accepted++
          } else {
            expect(reply.status).toBe(400)
            expect(reply.body.error.code).toBe("invalid_json")
            refused++
          }
        }),
        { numRuns: 150, seed: 20261126 }
      )
      // Both kinds were drawn, and only the accepted ones were stored.
      expect(accepted).toBeGreaterThan(10)
      expect(refused).toBeGreaterThan(10)
      expect(await paymentCount()).toBe(before + accepted)
    },
    120_000
  )
})
