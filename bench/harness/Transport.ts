/**
 * The driver's HTTP client to the target: a keep-alive pool with a bounded number of sockets and
 * a client timeout (for `http:` the lean client of NetClient.ts, on `node:net`; for `https:`
 * node:https's agent); `balancedClient` spreads requests over several instances as a
 * load balancer would; `recordingTransport` bounds the requests in flight and records each one
 * (route, status, "dropped" or "refused", latency from its intended start).
 */
import { Agent, request as httpRequest } from "node:http"
import { Agent as HttpsAgent, request as httpsRequest } from "node:https"
import type { AvailabilityRecorder } from "./Availability.ts"
import type { Clock } from "./Clock.ts"
import type { Transport } from "./Contract.ts"
import { netClient } from "./NetClient.ts"
import { type Recorder, routeTemplate } from "./Recorder.ts"
import type { WireClient, WireOutcome } from "./Wire.ts"

export type { WireClient, WireOutcome } from "./Wire.ts"

const refused: WireOutcome = { _tag: "Refused" }
const lost: WireOutcome = { _tag: "Lost" }

/**
 * How long a kept-alive socket may sit idle in the pool before the harness closes it: below the
 * keep-alive timeout of the servers it drives (Node's default 5 s, which our service keeps), so
 * the client, never the server, closes an idle connection. A server that closes first races the
 * next request written on that socket (its FIN still unread by a busy driver): the request is
 * reset after it went out, its outcome unknown, and recorded as `dropped`. The `http:` client
 * (NetClient.ts) closes an idle socket within this, and drops at once one the server closed while
 * idle; it ignores the server's `Keep-Alive: timeout=N` hint. Node's agent (`https:`) lowers
 * this further to a shorter `Keep-Alive: timeout=N` hint from the server, less 1 s, but only when
 * it has a timeout of its own (without one it keeps idle sockets forever and ignores the hint).
 */
export const idleSocketTimeoutMs = 4_000

export interface HttpClientOptions {
  readonly sockets: number
  readonly timeoutMs: number
  readonly idleSocketTimeoutMs?: number
}

/** The client for `targetUrl`: NetClient.ts's for plain `http:`, node:https's agent for `https:`. */
export const httpClient = (targetUrl: string, options: HttpClientOptions): WireClient =>
  new URL(targetUrl).protocol === "http:"
    ? netClient(targetUrl, { ...options, idleSocketTimeoutMs: options.idleSocketTimeoutMs ?? idleSocketTimeoutMs })
    : nodeHttpClient(targetUrl, options)

/** node:http's (or node:https's) client: ClientRequest over a keep-alive agent. */
export const nodeHttpClient = (targetUrl: string, options: HttpClientOptions): WireClient => {
  const base = new URL(targetUrl)
  const secure = base.protocol === "https:"
  // `timeout` is the socket's inactivity timeout: the agent destroys a free socket when it fires; on
  // a socket in use it only emits an event nothing here listens to (the client timeout below rules).
  const agentOptions = {
    keepAlive: true,
    maxSockets: options.sockets,
    maxFreeSockets: options.sockets,
    scheduling: "lifo" as const,
    timeout: options.idleSocketTimeoutMs ?? idleSocketTimeoutMs
  }
  const agent = secure ? new HttpsAgent(agentOptions) : new Agent(agentOptions)
  const send = secure ? httpsRequest : httpRequest
  const prefix = base.pathname.replace(/\/$/, "")
  return {
    send: (wire) =>
      new Promise((done) => {
        const sentAt = performance.now()
        let socketWaitMs = 0
        let finished = false
        const finish = (outcome: WireOutcome) => {
          if (finished) return
          finished = true
          clearTimeout(timer)
          done(outcome)
        }
        const headers: Record<string, string | number> = { ...wire.headers }
        if (wire.body !== null) headers["content-length"] = Buffer.byteLength(wire.body)
        const outgoing = send({
          agent,
          protocol: base.protocol,
          hostname: base.hostname,
          port: base.port,
          method: wire.method,
          path: prefix + wire.path,
          headers
        }, (incoming) => {
          const chunks: Array<Buffer> = []
          incoming.on("data", (chunk: Buffer) => chunks.push(chunk))
          incoming.on("end", () => {
            const responseHeaders: Record<string, string> = {}
            for (const [name, value] of Object.entries(incoming.headers)) {
              if (value !== undefined) responseHeaders[name] = Array.isArray(value) ? value.join(", ") : value
            }
            finish({
              _tag: "Answered",
              socketWaitMs,
              response: {
                status: incoming.statusCode ?? 0,
                headers: responseHeaders,
                body: chunks.length === 1 ? chunks[0]!.toString("utf8") : Buffer.concat(chunks).toString("utf8")
              }
            })
          })
          incoming.on("error", () => finish(lost))
          incoming.on("aborted", () => finish(lost))
        })
        // A socket is handed over when the agent has one free (at once on a kept-alive one, after a
        // connect on a new one): until then the request waits on the driver's side, not the service's.
        outgoing.once("socket", (socket) => {
          if (!socket.connecting) socketWaitMs = performance.now() - sentAt
          else socket.once("connect", () => void (socketWaitMs = performance.now() - sentAt))
        })
        // The whole exchange, queueing for a socket included, is bounded by the client's timeout.
        const timer = setTimeout(() => {
          outgoing.destroy()
          finish(lost)
        }, options.timeoutMs)
        // Only a refused connect is known to have sent nothing; a reset of a kept-alive socket
        // may come after the request went out.
        outgoing.on("error", (error: NodeJS.ErrnoException) => finish(error.code === "ECONNREFUSED" ? refused : lost))
        outgoing.end(wire.body ?? undefined)
      }),
    close: () => agent.destroy()
  }
}

/** A client over several instances, and how often a refused connection sent a request on to the next one. */
export interface BalancedClient extends WireClient {
  readonly movedOn: () => number
}

/**
 * Several instances of one service behind one client, as a round-robin load balancer spreads
 * them: each request goes to the next instance in turn. A refused connection (nothing was sent:
 * the instance is down) is tried on the following instance, each instance once at most, as a
 * load balancer retries a connect failure; an answer, or no answer after the request went out,
 * is the request's outcome (only the scenario may send it again: its idempotency key says how).
 */
export const balancedClient = (clients: ReadonlyArray<WireClient>): BalancedClient => {
  if (clients.length === 0) throw new Error("balancedClient: no instance")
  // One instance: its own client, without the turn and the retry's extra promise per request.
  if (clients.length === 1) {
    return {
      movedOn: () => 0,
      send: (request) => clients[0]!.send(request),
      close: () => clients[0]!.close()
    }
  }
  let next = 0
  let movedOn = 0
  return {
    movedOn: () => movedOn,
    send: async (request) => {
      const first = next
      next = (next + 1) % clients.length
      for (let i = 0;; i++) {
        const outcome = await clients[(first + i) % clients.length]!.send(request)
        if (outcome._tag !== "Refused" || i === clients.length - 1) return outcome
        movedOn++
      }
    },
    close: () => {
      for (const client of clients) client.close()
    }
  }
}

export interface RecordingTransport extends Transport {
  readonly inFlight: () => number
  /** Requests handed to `send` so far (the load models stop at `--max-requests`). */
  readonly sent: () => number
}

/**
 * Records every request in `recorder`. At most `maxInFlight` are on the wire at once; the rest
 * wait their turn, and that wait counts in their latency when they have an intended start.
 */
export const recordingTransport = (
  client: WireClient,
  clock: Clock,
  /**
   * Where requests are recorded now (the driver switches it between set-up, load and checks),
   * and, during the load, their availability by the time each was handed over.
   */
  sink: { readonly recorder: Recorder; readonly availability?: AvailabilityRecorder | null },
  maxInFlight: number
): RecordingTransport => {
  let inFlight = 0
  let sent = 0
  // Requests waiting for their turn, oldest first: an array read from `head`, compacted now and then.
  let waiting: Array<() => void> = []
  let head = 0
  const release = () => {
    inFlight--
    if (head < waiting.length) {
      const next = waiting[head++]!
      if (head > 1024 && head * 2 > waiting.length) {
        waiting = waiting.slice(head)
        head = 0
      }
      inFlight++
      next()
    }
  }
  return {
    inFlight: () => inFlight,
    sent: () => sent,
    send: async (request, intendedStartMs) => {
      sent++
      const enqueuedMs = clock.now()
      // Its turn: at once while fewer than `maxInFlight` are out, else when one of them ends.
      let turnMs = enqueuedMs
      if (inFlight < maxInFlight) inFlight++
      else {
        await new Promise<void>((turn) => waiting.push(turn))
        turnMs = clock.now()
      }
      // From the intended start, or from the send when it went out before it (the load model
      // starts a script within a millisecond of its time): never a latency shorter than it was.
      const fromMs = intendedStartMs === null ? enqueuedMs : Math.min(intendedStartMs, enqueuedMs)
      const recorder = sink.recorder
      const judged = recorder.admit(fromMs)
      let outcome: WireOutcome = lost
      try {
        outcome = await client.send(request)
      } finally {
        release()
        const nowMs = clock.now()
        const status = outcome._tag === "Answered"
          ? outcome.response.status
          : outcome._tag === "Refused"
          ? "refused"
          : "dropped"
        // Socket wait: the turn awaited here and the agent's own wait for a socket; service: the rest.
        const agentWaitMs = outcome._tag === "Answered" ? Math.min(outcome.socketWaitMs ?? 0, nowMs - turnMs) : 0
        const phases = outcome._tag === "Answered"
          ? { socketWaitMs: turnMs - enqueuedMs + agentWaitMs, serviceMs: nowMs - turnMs - agentWaitMs }
          : null
        recorder.record(routeTemplate(request.method, request.path), status, nowMs - fromMs, nowMs, judged, phases)
        sink.availability?.record(status, enqueuedMs)
      }
      // A refused request is no answer to the scenario, as one lost: it sends it again or not.
      return outcome._tag === "Answered" ? outcome.response : null
    }
  }
}
