import { STATUS_CODES } from "node:http"
import { createServer, type Server, type Socket } from "node:net"
import type { EndpointFate, makeSimulatedEndpoints } from "../../../sim/world/Endpoints.ts"
import type { Redeliveries } from "./Redeliveries.ts"

/**
 * The simulator's webhook endpoints (sim/world/Endpoints.ts: signature and timestamp checked, the
 * fate of each POST drawn from the seed) served over real HTTP by one server, one URL per
 * merchant (`/m/<index>`). A fate becomes what a real endpoint does:
 * - an answer: its status, written after the simulated latency scaled to the service's webhook
 *   timeout (`latencyScale`: the simulator's latencies are drawn against a 30 s timeout); an
 *   answer that would come within the last tenth of the timeout (or past it: "slow") is never
 *   written: the connection is held until the service gives up, bounded by the timeout and a
 *   second, then closed;
 * - no answer: the same hold;
 * - refused (an outage window of the endpoint): the connection is dropped as soon as the POST
 *   is read (a real server cannot refuse one request of a kept-alive connection).
 * A 2xx counts as acknowledged (the endpoints' receipts) only when it is written to a
 * connection still open. Each POST and what was written back is told to `redeliveries`.
 * Each POST's hold of one of the service's slots for the endpoint (from its arrival until its
 * answer was written or its connection closed, at most the service's timeout) goes to the
 * endpoints' `HeldSlots`: the witness of a backlog the retry schedule's law reads.
 *
 * A documented hot path of the driver (docs/harness.md, "The driver's own cost"): each event
 * the load makes reaches it once or more, so it speaks HTTP/1.1 on `node:net` sockets itself, as
 * the harness's client does (./NetClient.ts), with no request and response objects, no streams
 * and no Effect: a POST is read whole (content-length or chunked), handed to the endpoints as
 * one plain call, and answered with one write. One request at a time a connection (a pipelined
 * one waits in the connection's buffer), kept alive unless the client asked to close.
 */
export interface WebhookServer {
  /** `http://host:port`, or the advertised base URL */
  readonly baseUrl: string
  readonly urlOf: (merchantIndex: number) => string
  /** POSTs being answered or held. */
  readonly inFlight: () => number
  /** When attempt `attempt` of the delivery ended here (epoch ms: answer written, connection closed or dropped; NaN: not seen or not ended). */
  readonly attemptEndedAtMs: (deliveryId: string, attempt: number) => number
  readonly close: () => Promise<void>
}

type Endpoints = ReturnType<typeof makeSimulatedEndpoints>

/** A request read whole off a connection. */
interface Received {
  readonly method: string
  readonly path: string
  /** Lower-cased names; a repeated header's values joined with ", " (as node:http joins them). */
  readonly headers: Record<string, string>
  readonly body: string
  /** The client asked to close the connection after the answer. */
  readonly close: boolean
}

/** The longest request head read (node:http's default limit). */
const maxHeadBytes = 16 * 1024
/** The longest body read: far above a webhook event's. */
const maxBodyBytes = 16 * 1024 * 1024
/** Longer than the service's client keeps an idle connection: the server never closes one the client is about to reuse (a POST lost on a closing connection). */
const keepAliveTimeoutMs = 65_000

/** The answer's bytes (a 204 or 304 carries no body, as node:http writes it). */
const answerText = (status: number, body: string, close: boolean) => {
  const bodyless = status === 204 || status === 304
  return `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? "Status"}\r\n${
    bodyless ? "" : `content-type: text/plain\r\ncontent-length: ${Buffer.byteLength(body)}\r\n`
  }${
    close ? "connection: close\r\n" : `connection: keep-alive\r\nkeep-alive: timeout=${keepAliveTimeoutMs / 1000}\r\n`
  }\r\n${bodyless ? "" : body}`
}

/** The head's fields: null when it is not HTTP/1.x. */
const parseHead = (head: string) => {
  const lines = head.split("\r\n")
  const request = /^([A-Z]+) (\S+) HTTP\/1\.([01])$/.exec(lines[0]!)
  if (request === null) return null
  const headers: Record<string, string> = {}
  for (let i = 1; i < lines.length; i++) {
    const line = lines[i]!
    const colon = line.indexOf(":")
    if (colon <= 0) return null
    const name = line.slice(0, colon).trim().toLowerCase()
    const value = line.slice(colon + 1).trim()
    const before = headers[name]
    headers[name] = before === undefined ? value : `${before}, ${value}`
  }
  const connection = headers["connection"]?.toLowerCase()
  const close = request[3] === "0" ? connection !== "keep-alive" : connection === "close"
  return { method: request[1]!, path: request[2]!, headers, close }
}

/**
 * A chunked body from `from` in `buffer`: its bytes and where the message ends; null: not all of
 * it is here yet; "bad": malformed.
 */
const chunkedBody = (buffer: Buffer, from: number): { body: Buffer; end: number } | null | "bad" => {
  const parts: Array<Buffer> = []
  let at = from
  for (;;) {
    const lineEnd = buffer.indexOf("\r\n", at, "latin1")
    if (lineEnd < 0) return null
    const size = Number.parseInt(buffer.toString("latin1", at, lineEnd).split(";")[0]!.trim(), 16)
    if (!Number.isInteger(size) || size < 0) return "bad"
    if (size === 0) {
      // Trailers, then the empty line.
      let trailer = lineEnd + 2
      for (;;) {
        const end = buffer.indexOf("\r\n", trailer, "latin1")
        if (end < 0) return null
        if (end === trailer) return { body: Buffer.concat(parts), end: end + 2 }
        trailer = end + 2
      }
    }
    if (buffer.length < lineEnd + 2 + size + 2) return null
    parts.push(buffer.subarray(lineEnd + 2, lineEnd + 2 + size))
    at = lineEnd + 2 + size + 2
  }
}

/**
 * One request read whole from the start of `buffer`: it and the bytes it took; null: not all of
 * it is here yet; "bad": not a request this server reads (the connection is dropped).
 */
const readRequest = (buffer: Buffer): { request: Received; used: number } | null | "bad" => {
  const headEnd = buffer.indexOf("\r\n\r\n", 0, "latin1")
  if (headEnd < 0) return buffer.length > maxHeadBytes ? "bad" : null
  const head = parseHead(buffer.toString("latin1", 0, headEnd))
  if (head === null) return "bad"
  const bodyStart = headEnd + 4
  if (head.headers["transfer-encoding"]?.toLowerCase().includes("chunked") === true) {
    const chunked = chunkedBody(buffer, bodyStart)
    if (chunked === null || chunked === "bad") return chunked
    return { request: { ...head, body: chunked.body.toString("utf8") }, used: chunked.end }
  }
  const length = head.headers["content-length"] === undefined ? 0 : Number(head.headers["content-length"])
  if (!Number.isInteger(length) || length < 0 || length > maxBodyBytes) return "bad"
  if (buffer.length < bodyStart + length) return null
  return {
    request: { ...head, body: buffer.toString("utf8", bodyStart, bodyStart + length) },
    used: bodyStart + length
  }
}

/** A connection's state: the bytes not yet read as a request, and whether a request of it is being answered. */
interface Connection {
  readonly socket: Socket
  buffer: Buffer | null
  busy: boolean
  closed: boolean
  /** Run once when the connection closes (holds and their ends). */
  readonly onClose: Array<() => void>
}

export const startWebhookServer = async (input: {
  /** The address it listens on. */
  readonly host: string
  /** The port it listens on (0 or absent: any free one). */
  readonly port?: number
  /**
   * The base URL the service reaches it by, when that is not `http://host:port` (NAT, a proxy,
   * another host forwarding to it); null or absent: `http://host:port`.
   */
  readonly advertisedUrl?: string | null
  readonly endpoints: Endpoints
  /** The service's webhook timeout (its `WEBHOOK_TIMEOUT`). */
  readonly timeoutMs: number
  /** Multiplies the simulated latencies (the service's timeout over the simulator's 30 s). */
  readonly latencyScale: number
  /** Counts the events that reach the endpoint again (absent: not counted). */
  readonly redeliveries?: Redeliveries
}): Promise<WebhookServer> => {
  const { endpoints, timeoutMs } = input
  const timers = new Set<NodeJS.Timeout>()
  const connections = new Set<Connection>()
  let inFlight = 0
  let baseUrl = ""
  const later = (ms: number, run: () => void) => {
    const timer = setTimeout(() => {
      timers.delete(timer)
      run()
    }, ms)
    timers.add(timer)
    return timer
  }
  /** Held until the service gives up: closed by the timeout and a second at the latest. */
  const hold = (connection: Connection) => {
    const timer = later(timeoutMs + 1_000, () => connection.socket.destroy())
    connection.onClose.push(() => {
      clearTimeout(timer)
      timers.delete(timer)
    })
  }
  /** When each attempt ended here, by `<delivery id> <attempt>` (the first end seen). */
  const ends = new Map<string, number>()
  /** The POST to `url` that arrived at `arrivedMs` held a slot until now (at most the timeout), and ended now. */
  const held = (url: string, arrivedMs: number, attemptKey: string) => {
    const nowMs = Date.now()
    const baseMs = endpoints.receipts.baseMs
    endpoints.held.hold(url, arrivedMs - baseMs, Math.min(nowMs, arrivedMs + timeoutMs) - baseMs)
    if (!ends.has(attemptKey)) ends.set(attemptKey, nowMs)
  }
  /** Writes the answer and reads the connection's next request, if any. */
  const answer = (connection: Connection, status: number, body: string, close: boolean) => {
    connection.socket.write(answerText(status, body, close))
    connection.busy = false
    if (close) connection.socket.end()
    else if (connection.buffer !== null) readNext(connection)
  }
  const handle = (connection: Connection, request: Received) => {
    const arrivedMs = Date.now()
    const { headers, path } = request
    // The URL the service posted to, as it was registered: the base and the endpoint's `/m/<j>`
    // (a proxy in front may or may not have passed on the base URL's own path).
    const url = `${baseUrl}${/\/m\/\d+$/.exec(path)?.[0] ?? path}`
    const fate: EndpointFate = endpoints.receive({ url, headers, body: request.body })
    const deliveryId = headers["x-service-delivery-id"] ?? "?"
    const attemptHeader = headers["x-service-delivery-attempt"]
    const attemptKey = `${deliveryId} ${attemptHeader ?? "?"}`
    const eventId = headers["x-service-event-id"] ?? "?"
    // The event's slot in the receipts, which `receive` made at its first POST.
    const slot = endpoints.receipts.ofEvent(eventId)
    const post = input.redeliveries?.received(slot, eventId, deliveryId, Number(attemptHeader), Date.now()) ?? 0
    if (fate._tag === "Refused") {
      if (!ends.has(attemptKey)) ends.set(attemptKey, arrivedMs)
      input.redeliveries?.answered(slot, post, null)
      connection.socket.destroy()
      return
    }
    const latencyMs = fate._tag === "Answer" ? fate.latencyMs * input.latencyScale : Number.POSITIVE_INFINITY
    if (fate._tag === "NoAnswer" || latencyMs > timeoutMs * 0.9) {
      connection.onClose.push(() => held(url, arrivedMs, attemptKey))
      hold(connection)
      return
    }
    inFlight++
    later(latencyMs, () => {
      inFlight--
      held(url, arrivedMs, attemptKey)
      if (connection.closed) return
      endpoints.settle(fate)
      input.redeliveries?.answered(slot, post, fate.status)
      answer(connection, fate.status, fate.status < 300 ? "ok" : "simulated failure", request.close)
    })
  }
  /** Reads and handles the next whole request of the connection, when one is there and none is being answered. */
  const readNext = (connection: Connection) => {
    if (connection.busy || connection.buffer === null) return
    const read = readRequest(connection.buffer)
    if (read === null) return
    if (read === "bad") return void connection.socket.destroy()
    connection.buffer = read.used === connection.buffer.length ? null : connection.buffer.subarray(read.used)
    connection.busy = true
    if (read.request.method !== "POST") answer(connection, 405, "", read.request.close)
    else handle(connection, read.request)
  }
  const server: Server = createServer((socket) => {
    const connection: Connection = { socket, buffer: null, busy: false, closed: false, onClose: [] }
    connections.add(connection)
    socket.setNoDelay(true)
    socket.setTimeout(keepAliveTimeoutMs, () => socket.destroy())
    socket.on("data", (chunk: Buffer) => {
      connection.buffer = connection.buffer === null ? chunk : Buffer.concat([connection.buffer, chunk])
      readNext(connection)
    })
    socket.on("error", () => {})
    socket.on("close", () => {
      connection.closed = true
      connections.delete(connection)
      for (const run of connection.onClose) run()
    })
  })
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject)
    server.listen(input.port ?? 0, input.host, () => resolve())
  })
  // The URL names the host as it was given (the address the service reaches it by), unless another is advertised.
  const address = server.address() as { port: number }
  baseUrl = input.advertisedUrl ?? `http://${input.host.includes(":") ? `[${input.host}]` : input.host}:${address.port}`
  return {
    baseUrl,
    urlOf: (merchantIndex) => `${baseUrl}/m/${merchantIndex}`,
    inFlight: () => inFlight,
    attemptEndedAtMs: (deliveryId, attempt) => ends.get(`${deliveryId} ${attempt}`) ?? Number.NaN,
    close: async () => {
      for (const timer of timers) clearTimeout(timer)
      timers.clear()
      for (const connection of connections) connection.socket.destroy()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    }
  }
}
