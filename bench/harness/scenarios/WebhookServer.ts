import { createServer, type IncomingMessage, type ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"
import type { EndpointFate, makeSimulatedEndpoints } from "../../../sim/world/Endpoints.ts"
import type { Redeliveries } from "./Redeliveries.ts"

/**
 * The simulator's webhook endpoints (sim/world/Endpoints.ts: signature and timestamp checked, the
 * fate of each POST drawn from the seed) served over real HTTP by one node:http server, one
 * URL per merchant (`/m/<index>`). A fate becomes what a real endpoint does:
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
  const hold = (request: IncomingMessage) => {
    const timer = later(timeoutMs + 1_000, () => request.socket.destroy())
    request.socket.once("close", () => {
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
  const handle = (request: IncomingMessage, response: ServerResponse, body: string) => {
    const arrivedMs = Date.now()
    const headers: Record<string, string> = {}
    for (const [name, value] of Object.entries(request.headers)) if (typeof value === "string") headers[name] = value
    // The URL the service posted to, as it was registered: the base and the endpoint's `/m/<j>`
    // (a proxy in front may or may not have passed on the base URL's own path).
    const path = request.url ?? "/"
    const url = `${baseUrl}${/\/m\/\d+$/.exec(path)?.[0] ?? path}`
    const fate: EndpointFate = endpoints.receive({ url, headers, body })
    const attemptKey = `${headers["x-service-delivery-id"] ?? "?"} ${headers["x-service-delivery-attempt"] ?? "?"}`
    // The event's slot in the receipts, which `receive` made at its first POST.
    const slot = endpoints.receipts.ofEvent(headers["x-service-event-id"] ?? "?")
    const post = input.redeliveries?.received(
      slot,
      headers["x-service-event-id"] ?? "?",
      headers["x-service-delivery-id"] ?? "?",
      Number(headers["x-service-delivery-attempt"]),
      Date.now()
    ) ?? 0
    if (fate._tag === "Refused") {
      if (!ends.has(attemptKey)) ends.set(attemptKey, arrivedMs)
      input.redeliveries?.answered(slot, post, null)
      request.socket.destroy()
      return
    }
    const latencyMs = fate._tag === "Answer" ? fate.latencyMs * input.latencyScale : Number.POSITIVE_INFINITY
    if (fate._tag === "NoAnswer" || latencyMs > timeoutMs * 0.9) {
      request.socket.once("close", () => held(url, arrivedMs, attemptKey))
      hold(request)
      return
    }
    inFlight++
    later(latencyMs, () => {
      inFlight--
      held(url, arrivedMs, attemptKey)
      if (request.socket.destroyed) return
      endpoints.settle(fate)
      input.redeliveries?.answered(slot, post, fate.status)
      response.writeHead(fate.status, { "content-type": "text/plain" })
      response.end(fate.status < 300 ? "ok" : "simulated failure")
    })
  }
  const server = createServer((request, response) => {
    if (request.method !== "POST") {
      response.writeHead(405).end()
      return
    }
    const chunks: Array<Buffer> = []
    request.on("data", (chunk: Buffer) => chunks.push(chunk))
    request.on("end", () => handle(request, response, Buffer.concat(chunks).toString("utf8")))
  })
  // Longer than the service's client keeps an idle connection: the server never closes one the
  // client is about to reuse (a POST lost on a closing connection).
  server.keepAliveTimeout = 65_000
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject)
    server.listen(input.port ?? 0, input.host, () => resolve())
  })
  // The URL names the host as it was given (the address the service reaches it by), unless another is advertised.
  const address = server.address() as AddressInfo
  baseUrl = input.advertisedUrl ?? `http://${input.host.includes(":") ? `[${input.host}]` : input.host}:${address.port}`
  return {
    baseUrl,
    urlOf: (merchantIndex) => `${baseUrl}/m/${merchantIndex}`,
    inFlight: () => inFlight,
    attemptEndedAtMs: (deliveryId, attempt) => ends.get(`${deliveryId} ${attempt}`) ?? Number.NaN,
    close: async () => {
      for (const timer of timers) clearTimeout(timer)
      timers.clear()
      server.closeAllConnections()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    }
  }
}
