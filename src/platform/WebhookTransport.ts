import { Clock, Context, Effect, Layer } from "effect"
import { lookup as dnsLookup } from "node:dns"
import type { LookupAddress, LookupOptions } from "node:dns"
import * as http from "node:http"
import * as https from "node:https"
import { isIP } from "node:net"
import { isPublicAddress } from "../domain/Network.ts"
import { AppConfig } from "./Config.ts"
import { type CallbackTimer, callbackTimerOf } from "./Timers.ts"

export interface WebhookRequest {
  readonly url: string
  readonly headers: Readonly<Record<string, string>>
  readonly body: string
}

/** What an endpoint did with a POST. Never an error channel: every failure is a value to record. */
export type TransportResult =
  | { readonly _tag: "Answered"; readonly status: number; readonly snippet: string }
  | { readonly _tag: "Failed"; readonly error: string }

/**
 * Sends one webhook POST. Production speaks HTTP (refusing non-public addresses unless allowed);
 * the simulator provides simulated endpoints. The caller applies the timeout, with Effect's clock,
 * unless the transport offers `postWithin`.
 */
export interface WebhookTransportShape {
  readonly post: (request: WebhookRequest) => Effect.Effect<TransportResult>
  /**
   * Optional: `post` with the timeout applied by the transport itself, for one that knows when an
   * answer will come and so needs no racing fiber (the simulated endpoints): an answer later than
   * `timeoutMs` (or none) is `timedOut(timeoutMs)` exactly `timeoutMs` after the start, as the
   * caller's race would make it.
   */
  readonly postWithin?: (request: WebhookRequest, timeoutMs: number) => Effect.Effect<TransportResult>
}

/** The failure of an attempt whose endpoint did not answer within the timeout. */
export const timedOut = (timeoutMs: number): TransportResult => ({
  _tag: "Failed",
  error: `timeout: no answer within ${timeoutMs} ms`
})

export class WebhookTransport
  extends Context.Service<WebhookTransport, WebhookTransportShape>()("payments/WebhookTransport")
{}

/** At most this much of an endpoint's answer is read; the rest is discarded unread. */
export const responseReadLimitBytes = 4096

const refusedMessage = "refused: the host resolves to a loopback, private or link-local address"

/**
 * A DNS lookup for the HTTP agent that refuses non-public addresses: checked at connection time,
 * on the very addresses connected to, so a DNS change after validation cannot reach inside.
 */
const publicOnlyLookup = (
  hostname: string,
  options: LookupOptions,
  callback: (error: NodeJS.ErrnoException | null, address: string | Array<LookupAddress>, family?: number) => void
) =>
  dnsLookup(hostname, { ...options, all: true }, (error, addresses) => {
    if (error) return callback(error, "")
    const list = addresses as Array<LookupAddress>
    if (list.length === 0 || !list.every((a) => isPublicAddress(a.address))) {
      const refused: NodeJS.ErrnoException = new Error(refusedMessage)
      refused.code = "EADDRNOTPUBLIC"
      return callback(refused, "")
    }
    if (options.all === true) return callback(null, list)
    return callback(null, list[0]!.address, list[0]!.family)
  })

/** The system error code (ECONNRESET, ...) of an error or of what it wraps, a few levels down. */
const codeOf = (error: unknown): string | undefined => {
  let current = error
  for (let depth = 0; depth < 4 && typeof current === "object" && current !== null; depth++) {
    const code = (current as { readonly code?: unknown }).code
    if (typeof code === "string" && /^E[A-Z]{3,}$/.test(code)) return code
    current = (current as { readonly cause?: unknown }).cause
  }
  return undefined
}

const describe = (error: unknown): string => {
  const text = String((error as { cause?: unknown })?.cause ?? error)
  if (text.includes(refusedMessage) || text.includes("EADDRNOTPUBLIC")) return refusedMessage
  // A reset's message ("socket hang up") does not name its code: the error's own field does.
  const code = codeOf(error) ?? /\b(E[A-Z]{3,})\b/.exec(text)?.[1]
  return code === undefined ? "connection error" : `connection error: ${code}`
}

const answered = (status: number, chunks: ReadonlyArray<Buffer>): TransportResult => {
  const bytes = Buffer.concat(chunks as Array<Buffer>)
  return {
    _tag: "Answered",
    status,
    snippet: bytes.toString("utf8", 0, Math.min(bytes.length, responseReadLimitBytes))
  }
}

export interface HttpAgents {
  readonly http: http.Agent
  readonly https: https.Agent
}

/**
 * The POSTs on Node's own client (one callback per socket event, no stream or fiber per
 * request): a redirect is never followed (a 3xx is the answer), at most
 * `responseReadLimitBytes` of the answer are read (a longer one closes its connection), and an
 * interrupted attempt destroys its request. With a callback `timer` (the live clock's) the
 * transport applies the timeout itself (`postWithin`); without one (a `TestClock`) the caller races
 * `post` against its clock.
 */
export const makeHttpTransport = (allowPrivate: boolean, agents: HttpAgents, timer: CallbackTimer | null) => {
  const send = (request: WebhookRequest, timeoutMs: number | undefined) =>
    Effect.callback<TransportResult>((resume) => {
      let over = false
      let outgoing: http.ClientRequest | undefined
      let cancelTimer: (() => void) | undefined
      const finish = (result: TransportResult) => {
        if (over) return
        over = true
        cancelTimer?.()
        resume(Effect.succeed(result))
      }
      try {
        const url = new URL(request.url)
        const host = url.hostname.replace(/^\[|\]$/g, "")
        if (!allowPrivate && isIP(host) !== 0 && !isPublicAddress(host)) {
          finish({ _tag: "Failed", error: refusedMessage })
          return
        }
        const secure = url.protocol === "https:"
        outgoing = (secure ? https.request : http.request)(url, {
          method: "POST",
          agent: secure ? agents.https : agents.http,
          headers: { ...request.headers, "content-length": Buffer.byteLength(request.body) }
        }, (response) => {
          const status = response.statusCode ?? 0
          const chunks: Array<Buffer> = []
          let read = 0
          response.on("data", (chunk: Buffer) => {
            if (over) return
            chunks.push(chunk)
            read += chunk.length
            if (read >= responseReadLimitBytes) {
              finish(answered(status, chunks))
              response.destroy()
            }
          })
          response.on("end", () => finish(answered(status, chunks)))
          // An answer cut off in its body is still the status the endpoint gave.
          response.on("error", () => finish(answered(status, [])))
          response.on("close", () => finish(answered(status, [])))
        })
        outgoing.on("error", (error) => finish({ _tag: "Failed", error: describe(error) }))
        if (timeoutMs !== undefined && timer !== null) {
          cancelTimer = timer(timeoutMs, () => {
            finish(timedOut(timeoutMs))
            outgoing?.destroy()
          })
        }
        outgoing.end(request.body)
      } catch (error) {
        finish({ _tag: "Failed", error: describe(error) })
      }
      return Effect.sync(() => {
        over = true
        cancelTimer?.()
        outgoing?.destroy()
      })
    })
  return WebhookTransport.of({
    post: (request) => send(request, undefined),
    ...(timer === null ? {} : { postWithin: (request: WebhookRequest, timeoutMs: number) => send(request, timeoutMs) })
  })
}

/**
 * The production transport: Node's HTTP client with keep-alive agents and the public-only lookup
 * (their sockets are closed when the layer is released).
 */
export const layer = Layer.effect(
  WebhookTransport,
  Effect.gen(function*() {
    const config = yield* AppConfig
    const options = {
      keepAlive: true,
      maxSockets: 64,
      ...(config.webhookAllowPrivateUrls ? {} : { lookup: publicOnlyLookup as never })
    }
    const agents = yield* Effect.acquireRelease(
      Effect.sync(() => ({ http: new http.Agent(options), https: new https.Agent(options) })),
      (agents) =>
        Effect.sync(() => {
          agents.http.destroy()
          agents.https.destroy()
        })
    )
    return makeHttpTransport(config.webhookAllowPrivateUrls, agents, yield* callbackTimerOf(yield* Clock.Clock))
  })
)
