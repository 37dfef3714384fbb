/**
 * The driver's HTTP/1.1 client for plain `http:` targets, on `node:net` sockets: node:http's
 * client (ClientRequest, the agent, its parser and header checks) cost the driver 3 to 6 times
 * autocannon's CPU per request, so this one does only what the harness needs. A pool of at most
 * `sockets` kept-alive connections, the most recently freed reused first, made on demand; requests
 * beyond them wait in a queue, oldest first. Each request goes out as one write (its head, built
 * from a prefix made once, and its body; a request without headers or a body as bytes encoded
 * once per path and method); one request is in flight per socket (no pipelining). Sockets read
 * into one buffer of the client's (`onread`: no buffer, stream event and tick per read) and the
 * answer is read there by `ResponseParser`, which reads the fields that frame the body and leaves
 * the other headers (lower-cased) to be split out when something asks for them.
 *
 * Outcomes as `WireOutcome` says: `Refused` only for a refused connect (nothing was written),
 * `Lost` once the request was written and the connection then failed, closed or outlived the
 * client timeout, `Answered` with the socket wait (from the send to a socket ready to write on).
 */
import { connect, type Socket } from "node:net"
import type { WireRequest, WireResponse } from "./Contract.ts"
import type { WireClient, WireOutcome } from "./Wire.ts"

/** The longest response head read (status line and headers): a longer one is a broken answer. */
const maximumHeadBytes = 64 * 1024

const enum Reading {
  Head,
  FixedBody,
  ChunkSize,
  ChunkData,
  ChunkEnd,
  Trailers,
  UntilClose
}

/** A header's value in a lower-cased response head (`name` with its leading CRLF and colon), trimmed; the first if several. */
const fieldOf = (lower: string, name: string): string | undefined => {
  const at = lower.indexOf(name)
  if (at < 0) return undefined
  const end = lower.indexOf("\r\n", at + name.length)
  return lower.slice(at + name.length, end < 0 ? lower.length : end).trim()
}

/** Header lines of a response head by lower-cased name; repeated names joined by ", " as node:http does. */
const headersOf = (head: string): Record<string, string> => {
  const headers: Record<string, string> = {}
  let lineStart = head.indexOf("\r\n")
  while (lineStart >= 0) {
    const lineEnd = head.indexOf("\r\n", lineStart + 2)
    const line = head.slice(lineStart + 2, lineEnd < 0 ? head.length : lineEnd)
    const colon = line.indexOf(":")
    if (colon > 0) {
      const name = line.slice(0, colon).toLowerCase()
      const value = line.slice(colon + 1).trim()
      headers[name] = headers[name] === undefined ? value : `${headers[name]}, ${value}`
    }
    lineStart = lineEnd
  }
  return headers
}

/**
 * A response whose headers are split out of its head when first read: most answers are judged by
 * status and body alone, and building every header record was a measured share of the driver's
 * CPU. `toJSON` gives the plain record.
 */
export class ParsedResponse implements WireResponse {
  private parsed: Record<string, string> | null = null

  constructor(readonly status: number, private readonly head: string, readonly body: string) {}

  get headers(): Readonly<Record<string, string>> {
    if (this.parsed === null) this.parsed = headersOf(this.head)
    return this.parsed
  }

  toJSON(): WireResponse {
    return { status: this.status, headers: this.headers, body: this.body }
  }
}

/** A response as read: the response, and whether its connection may carry another request. */
export type ResponseReady = (response: WireResponse, keepAlive: boolean) => void

/**
 * An incremental HTTP/1.1 response reader: bytes in as they arrive, split anywhere; each complete
 * response out through `ready`, in order. Bodies by content-length, chunked transfer coding, or
 * until the connection ends; none for HEAD, 1xx, 204 and 304. Interim 1xx responses are skipped.
 * A malformed response throws: its connection is no longer usable.
 */
export class ResponseParser {
  private reading = Reading.Head
  /** Bytes received but not yet read (a head, a chunk-size line or a chunk's CRLF split across reads). */
  private pending: Buffer | null = null
  private status = 0
  /** The head of the response being read (status line and header lines). */
  private head = ""
  private keepAlive = true
  private body: Array<Buffer> = []
  private remaining = 0
  /** The request in flight was a HEAD: its answer has no body whatever its headers say. */
  headRequest = false

  constructor(private readonly ready: ResponseReady) {}

  /** No response begun and unfinished: the connection may carry a new request. */
  get between(): boolean {
    return this.reading === Reading.Head && this.pending === null
  }

  /**
   * Reads `chunk`. A `transient` chunk is a buffer the caller reuses once this returns (a socket's
   * `onread` buffer): what is kept of it past the call (a head split across reads, the body read so
   * far of an unfinished response) is copied.
   */
  feed(chunk: Buffer, transient = false): void {
    let data = chunk
    if (this.pending !== null) {
      data = Buffer.concat([this.pending, chunk])
      this.pending = null
    }
    let at = 0
    while (at < data.length) {
      at = this.step(data, at)
      if (at < 0) break
    }
    if (transient && data === chunk) this.detach(chunk.buffer)
  }

  /** Copies what is kept of `buffer`'s bytes (pending bytes, body pieces), so that it may be reused. */
  private detach(buffer: ArrayBufferLike): void {
    if (this.pending !== null && this.pending.buffer === buffer) this.pending = Buffer.from(this.pending)
    for (let i = 0; i < this.body.length; i++) {
      if (this.body[i]!.buffer === buffer) this.body[i] = Buffer.from(this.body[i]!)
    }
  }

  /**
   * The connection ended: true when that completed a response read until the close; false when
   * a response was begun and not finished (or none was begun).
   */
  end(): boolean {
    if (this.reading !== Reading.UntilClose) return false
    this.complete(false)
    return true
  }

  /** Reads from `at`; the next offset, or -1 when the rest was kept in `pending` or taken whole. */
  private step(data: Buffer, at: number): number {
    switch (this.reading) {
      case Reading.Head: {
        const end = data.indexOf("\r\n\r\n", at, "latin1")
        if (end < 0) return this.keep(data, at)
        if (end - at > maximumHeadBytes) throw new Error("response head too long")
        this.readHead(data.toString("latin1", at, end))
        return end + 4
      }
      case Reading.FixedBody:
      case Reading.ChunkData: {
        const taken = Math.min(this.remaining, data.length - at)
        if (taken > 0) this.body.push(data.subarray(at, at + taken))
        this.remaining -= taken
        if (this.remaining === 0) {
          if (this.reading === Reading.FixedBody) this.complete(this.keepAlive)
          else this.reading = Reading.ChunkEnd
        }
        return at + taken
      }
      case Reading.ChunkSize: {
        const end = data.indexOf("\r\n", at, "latin1")
        if (end < 0) return this.keep(data, at)
        const size = Number.parseInt(data.toString("latin1", at, end), 16)
        if (!Number.isFinite(size) || size < 0) throw new Error("bad chunk size")
        this.remaining = size
        this.reading = size === 0 ? Reading.Trailers : Reading.ChunkData
        return end + 2
      }
      case Reading.ChunkEnd: {
        if (data.length - at < 2) return this.keep(data, at)
        if (data[at] !== 13 || data[at + 1] !== 10) throw new Error("chunk not followed by CRLF")
        this.reading = Reading.ChunkSize
        return at + 2
      }
      case Reading.Trailers: {
        const end = data.indexOf("\r\n", at, "latin1")
        if (end < 0) return this.keep(data, at)
        if (end === at) this.complete(this.keepAlive)
        return end + 2
      }
      case Reading.UntilClose: {
        this.body.push(at === 0 ? data : data.subarray(at))
        return -1
      }
    }
  }

  private keep(data: Buffer, at: number): number {
    if (data.length - at > maximumHeadBytes) throw new Error("response head too long")
    this.pending = at === 0 ? data : data.subarray(at)
    return -1
  }

  private readHead(head: string): void {
    if (!head.startsWith("HTTP/1.")) throw new Error("not an HTTP/1.x response")
    const status = Number(head.slice(9, 12))
    if (!Number.isInteger(status) || status < 100) throw new Error("bad status line")
    if (status < 200) return // interim (100 Continue, 103 Early Hints): the answer follows
    // Only the fields that frame the body are read now; the rest when someone asks (ParsedResponse).
    const lower = head.toLowerCase()
    const connection = fieldOf(lower, "\r\nconnection:")
    this.keepAlive = head[7] === "1"
      ? connection === undefined || !connection.includes("close")
      : connection?.includes("keep-alive") === true
    this.status = status
    this.head = head
    const transferEncoding = fieldOf(lower, "\r\ntransfer-encoding:")
    this.startBody(
      transferEncoding !== undefined && transferEncoding.includes("chunked"),
      fieldOf(lower, "\r\ncontent-length:")
    )
  }

  private startBody(chunked: boolean, contentLength: string | undefined): void {
    if (this.headRequest || this.status === 204 || this.status === 304) this.complete(this.keepAlive)
    else if (chunked) this.reading = Reading.ChunkSize
    else if (contentLength !== undefined) {
      const length = Number(contentLength)
      if (!Number.isSafeInteger(length) || length < 0) throw new Error("bad content-length")
      this.remaining = length
      if (length === 0) this.complete(this.keepAlive)
      else this.reading = Reading.FixedBody
    } else {
      this.keepAlive = false
      this.reading = Reading.UntilClose
    }
  }

  private complete(keepAlive: boolean): void {
    const body = this.body
    const text = body.length === 0
      ? ""
      : body.length === 1
      ? body[0]!.toString("utf8")
      : Buffer.concat(body).toString("utf8")
    const response = new ParsedResponse(this.status, this.head, text)
    this.reading = Reading.Head
    this.body = []
    this.ready(response, keepAlive)
  }
}

/** One request from its send to its outcome. */
interface Exchange {
  /** Head and body, written in one go. */
  readonly payload: string | Buffer
  /** A HEAD request: its answer has no body. */
  readonly head: boolean
  readonly sentAt: number
  readonly done: (outcome: WireOutcome) => void
  settled: boolean
  /** From the send to a connection ready to write on; -1 until then. */
  socketWaitMs: number
  /** The connection carrying it; null while it waits for one. */
  connection: Connection | null
}

interface Connection {
  readonly socket: Socket
  readonly parser: ResponseParser
  exchange: Exchange | null
  connected: boolean
  /** Out of the pool (closing or closed): counts no more against `sockets`, and carries nothing new. */
  retired: boolean
  /** When it last became idle (performance.now()). */
  idleSince: number
  /** The error that closed it, if one did. */
  error: NodeJS.ErrnoException | null
}

export interface NetClientOptions {
  readonly sockets: number
  readonly timeoutMs: number
  readonly idleSocketTimeoutMs: number
}

/** A `WireClient` with a view of its pool, for tests. */
export interface NetClient extends WireClient {
  /** Connections open or opening, and how many of them sit idle in the pool. */
  readonly pool: () => { readonly open: number; readonly idle: number }
}

const refused: WireOutcome = { _tag: "Refused" }
const lost: WireOutcome = { _tag: "Lost" }

/** Methods whose request carries a body even when empty (a content-length of 0, as node:http sends). */
const withBody = new Set(["POST", "PUT", "PATCH"])

/** Paths whose request bytes a client keeps; emptied when it holds this many (most paths with ids come with headers, and are not kept). */
const encodedKept = 1024
/** No header of the scenario's own. */
const bare = (headers: Readonly<Record<string, string>>) => {
  for (const _ in headers) return false
  return true
}

export const netClient = (targetUrl: string, options: NetClientOptions): NetClient => {
  const base = new URL(targetUrl)
  if (base.protocol !== "http:") throw new Error(`netClient: plain http: only, not ${base.protocol}`)
  const host = base.hostname.startsWith("[") ? base.hostname.slice(1, -1) : base.hostname
  const port = base.port === "" ? 80 : Number(base.port)
  const prefix = base.pathname.replace(/\/$/, "")
  const hostLine = ` HTTP/1.1\r\nhost: ${base.host}\r\n`
  /** Idle connections, the most recently freed last (taken first). */
  const idle: Array<Connection> = []
  /** Requests waiting for a connection, oldest first: read from `head`, compacted now and then. */
  let waiting: Array<Exchange> = []
  let head = 0
  let open = 0
  let closed = false
  /** Every connection not yet closed, in the pool or retired. */
  const live = new Set<Connection>()
  /**
   * Where every connection of this client reads into (`onread`): the answer is parsed in the read's
   * callback, before the next read reuses it, and the parser copies what it keeps past that. No
   * buffer and stream event per read; reads run one at a time on this thread, so one serves all.
   */
  const readBuffer = Buffer.allocUnsafeSlow(64 * 1024)

  const finish = (exchange: Exchange, outcome: WireOutcome) => {
    if (exchange.settled) return
    exchange.settled = true
    exchange.connection = null
    exchange.done(outcome)
  }

  const retire = (connection: Connection) => {
    if (connection.retired) return
    connection.retired = true
    open--
    const at = idle.indexOf(connection)
    if (at >= 0) idle.splice(at, 1)
  }

  /**
   * Writes the exchange on the connection: from here on its outcome is Answered or Lost. `waitedMs`:
   * its socket wait, 0 when an idle connection took it as it was sent (no clock read for that).
   */
  const carry = (connection: Connection, exchange: Exchange, waitedMs = performance.now() - exchange.sentAt) => {
    connection.exchange = exchange
    exchange.connection = connection
    connection.parser.headRequest = exchange.head
    exchange.socketWaitMs = waitedMs
    connection.socket.write(exchange.payload)
  }

  /** The next waiting request not already timed out, or null. */
  const nextWaiting = (): Exchange | null => {
    while (head < waiting.length) {
      const exchange = waiting[head++]!
      if (head > 1024 && head * 2 > waiting.length) {
        waiting = waiting.slice(head)
        head = 0
      }
      if (!exchange.settled) return exchange
    }
    return null
  }

  /** A connection free again: the oldest waiting request takes it, or it goes idle. */
  const free = (connection: Connection) => {
    connection.exchange = null
    const next = nextWaiting()
    if (next !== null) return carry(connection, next)
    connection.idleSince = performance.now()
    idle.push(connection)
  }

  /** A connection gone: its request, if any, is lost (or refused, when it never connected); a waiting request may open another. */
  const gone = (connection: Connection) => {
    retire(connection)
    live.delete(connection)
    const exchange = connection.exchange
    if (exchange !== null && !exchange.settled) {
      const answeredAtClose = connection.connected && connection.parser.end()
      if (!answeredAtClose) {
        finish(exchange, !connection.connected && connection.error?.code === "ECONNREFUSED" ? refused : lost)
      }
    }
    connection.exchange = null
    while (!closed && open < options.sockets) {
      const next = nextWaiting()
      if (next === null) break
      dial(next)
    }
  }

  const dial = (exchange: Exchange) => {
    open++
    const socket = connect({
      host,
      port,
      noDelay: true,
      onread: {
        buffer: readBuffer,
        callback: (bytes: number) => {
          try {
            connection.parser.feed(readBuffer.subarray(0, bytes), true)
          } catch {
            socket.destroy()
          }
          return true
        }
      }
    })
    const connection: Connection = {
      socket,
      parser: new ResponseParser((response, keepAlive) => answered(connection, response, keepAlive)),
      exchange: null,
      connected: false,
      retired: false,
      idleSince: 0,
      error: null
    }
    live.add(connection)
    connection.exchange = exchange
    exchange.connection = connection
    socket.once("connect", () => {
      connection.connected = true
      const first = connection.exchange
      if (first !== null && !first.settled) carry(connection, first)
      else free(connection)
    })
    // The server closed its side: an idle connection leaves the pool at once (never reused), a
    // busy one ends its request (answered when its body was read until the close, else lost).
    socket.on("end", () => socket.destroy())
    socket.on("error", (error: NodeJS.ErrnoException) => void (connection.error = error))
    socket.on("close", () => gone(connection))
  }

  const answered = (connection: Connection, response: WireResponse, keepAlive: boolean) => {
    const exchange = connection.exchange
    if (exchange === null) {
      // An answer nobody asked for: the connection is out of step.
      connection.socket.destroy()
      return
    }
    finish(exchange, { _tag: "Answered", response, socketWaitMs: exchange.socketWaitMs })
    if (!keepAlive || connection.retired || closed) {
      connection.exchange = null
      retire(connection)
      connection.socket.destroy()
      return
    }
    free(connection)
  }

  const timedOut = (exchange: Exchange) => {
    const connection = exchange.connection
    finish(exchange, lost)
    // Its connection may still bring the late answer: it cannot carry another request.
    if (connection !== null) connection.socket.destroy()
  }

  /**
   * Idle connections are closed before `idleSocketTimeoutMs` passes (checked every quarter of it,
   * at most every 250 ms): the oldest idle are first in `idle`.
   */
  const idleSweepMs = Math.max(1, Math.min(250, options.idleSocketTimeoutMs / 4))
  const idleSweeper = setInterval(() => {
    const oldest = performance.now() - (options.idleSocketTimeoutMs - idleSweepMs)
    while (idle.length > 0 && idle[0]!.idleSince <= oldest) {
      const connection = idle[0]!
      retire(connection)
      connection.socket.end()
    }
  }, idleSweepMs)
  idleSweeper.unref()

  /**
   * The client timeout, checked every twentieth of it (between 1 and 100 ms) over the requests on
   * a connection and those waiting, rather than a timer per request (set and cleared at every
   * request, a measured share of the driver's CPU): a request is lost between `timeoutMs` and
   * `timeoutMs` plus that period after its send. Waiting requests are in the order they were sent.
   */
  const timeoutSweepMs = Math.max(1, Math.min(100, options.timeoutMs / 20))
  const timeoutSweeper = setInterval(() => {
    const sentBefore = performance.now() - options.timeoutMs
    for (const connection of live) {
      const exchange = connection.exchange
      if (exchange !== null && !exchange.settled && exchange.sentAt <= sentBefore) timedOut(exchange)
    }
    for (let at = head; at < waiting.length && waiting[at]!.sentAt <= sentBefore; at++) finish(waiting[at]!, lost)
  }, timeoutSweepMs)
  timeoutSweeper.unref()

  const take = (exchange: Exchange) => {
    const connection = idle.pop()
    if (connection !== undefined) return carry(connection, exchange, 0)
    if (open < options.sockets) return dial(exchange)
    waiting.push(exchange)
  }

  const payloadOf = (wire: WireRequest): string => {
    let text = wire.method + " " + prefix + wire.path + hostLine
    for (const name in wire.headers) text += name + ": " + wire.headers[name] + "\r\n"
    if (wire.body !== null) return text + "content-length: " + Buffer.byteLength(wire.body) + "\r\n\r\n" + wire.body
    return withBody.has(wire.method) ? text + "content-length: 0\r\n\r\n" : text + "\r\n"
  }

  /** The bytes of requests without headers or a body, by path and method: the same bytes each time (health's GET /healthz). */
  const encoded = new Map<string, Map<string, Buffer>>()
  const bytesOf = (wire: WireRequest): string | Buffer => {
    if (wire.body !== null || !bare(wire.headers)) return payloadOf(wire)
    let byMethod = encoded.get(wire.path)
    if (byMethod === undefined) {
      if (encoded.size >= encodedKept) encoded.clear()
      byMethod = new Map()
      encoded.set(wire.path, byMethod)
    }
    let bytes = byMethod.get(wire.method)
    if (bytes === undefined) {
      bytes = Buffer.from(payloadOf(wire), "utf8")
      byMethod.set(wire.method, bytes)
    }
    return bytes
  }

  return {
    pool: () => ({ open, idle: idle.length }),
    send: (wire) =>
      new Promise<WireOutcome>((done) => {
        if (closed) return done(lost)
        // The whole exchange, the wait for a connection included, is bounded by the client's timeout.
        take({
          payload: bytesOf(wire),
          head: wire.method === "HEAD",
          sentAt: performance.now(),
          done,
          settled: false,
          socketWaitMs: -1,
          connection: null
        })
      }),
    close: () => {
      closed = true
      clearInterval(idleSweeper)
      clearInterval(timeoutSweeper)
      for (let exchange = nextWaiting(); exchange !== null; exchange = nextWaiting()) finish(exchange, lost)
      // Requests in flight are lost as their sockets close.
      for (const connection of [...live]) connection.socket.destroy()
    }
  }
}
