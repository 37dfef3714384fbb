/**
 * The driver's HTTP client to the target: a keep-alive pool over node:http with a bounded number
 * of sockets and a client timeout, wrapped by `recordingTransport`, which bounds the requests in
 * flight and records each one (route, status or "dropped", latency from its intended start).
 */
import { Agent, request as httpRequest } from "node:http"
import { Agent as HttpsAgent, request as httpsRequest } from "node:https"
import type { Clock } from "./Clock.ts"
import type { Transport, WireRequest, WireResponse } from "./Contract.ts"
import { type Recorder, routeTemplate } from "./Recorder.ts"

/** The wire alone: one request, its answer or null (dropped, refused, timed out). */
export interface WireClient {
  send(request: WireRequest): Promise<WireResponse | null>
  close(): void
}

export const httpClient = (targetUrl: string, options: { readonly sockets: number; readonly timeoutMs: number }): WireClient => {
  const base = new URL(targetUrl)
  const secure = base.protocol === "https:"
  const agentOptions = { keepAlive: true, maxSockets: options.sockets, maxFreeSockets: options.sockets, scheduling: "lifo" as const }
  const agent = secure ? new HttpsAgent(agentOptions) : new Agent(agentOptions)
  const send = secure ? httpsRequest : httpRequest
  const prefix = base.pathname.replace(/\/$/, "")
  return {
    send: (wire) =>
      new Promise((done) => {
        let finished = false
        const finish = (response: WireResponse | null) => {
          if (finished) return
          finished = true
          clearTimeout(timer)
          done(response)
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
              status: incoming.statusCode ?? 0,
              headers: responseHeaders,
              body: chunks.length === 1 ? chunks[0]!.toString("utf8") : Buffer.concat(chunks).toString("utf8")
            })
          })
          incoming.on("error", () => finish(null))
          incoming.on("aborted", () => finish(null))
        })
        // The whole exchange, queueing for a socket included, is bounded by the client's timeout.
        const timer = setTimeout(() => {
          outgoing.destroy()
          finish(null)
        }, options.timeoutMs)
        outgoing.on("error", () => finish(null))
        outgoing.end(wire.body ?? undefined)
      }),
    close: () => agent.destroy()
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
  /** Where requests are recorded now (the driver switches it between set-up, load and checks). */
  sink: { readonly recorder: Recorder },
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
      if (inFlight < maxInFlight) inFlight++
      else await new Promise<void>((turn) => waiting.push(turn))
      const fromMs = intendedStartMs ?? enqueuedMs
      let response: WireResponse | null = null
      try {
        response = await client.send(request)
      } finally {
        release()
        const nowMs = clock.now()
        sink.recorder.record(routeTemplate(request.method, request.path), response === null ? "dropped" : response.status, nowMs - fromMs, nowMs)
      }
      return response
    }
  }
}
