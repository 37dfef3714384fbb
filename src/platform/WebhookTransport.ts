import { HttpClient, HttpClientRequest } from "@effect/platform"
import { NodeHttpClient } from "@effect/platform-node"
import { Context, Effect, Layer, Stream } from "effect"
import { lookup as dnsLookup } from "node:dns"
import type { LookupAddress, LookupOptions } from "node:dns"
import { isIP } from "node:net"
import { isPublicAddress } from "../domain/Network.ts"
import { AppConfig } from "./Config.ts"

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
export const timedOut = (timeoutMs: number): TransportResult => ({ _tag: "Failed", error: `timeout: no answer within ${timeoutMs} ms` })

export class WebhookTransport extends Context.Tag("payments/WebhookTransport")<WebhookTransport, WebhookTransportShape>() {}

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

const decoder = new TextDecoder()

const readSnippet = (stream: Stream.Stream<Uint8Array, unknown>) =>
  Stream.runFoldWhile(stream, { bytes: new Uint8Array(0) }, (acc) => acc.bytes.length < responseReadLimitBytes, (acc, chunk) => {
    const merged = new Uint8Array(Math.min(responseReadLimitBytes, acc.bytes.length + chunk.length))
    merged.set(acc.bytes.subarray(0, merged.length))
    merged.set(chunk.subarray(0, merged.length - acc.bytes.length), acc.bytes.length)
    return { bytes: merged }
  }).pipe(Effect.map((acc) => decoder.decode(acc.bytes)), Effect.orElseSucceed(() => ""))

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

export const makeHttpTransport = (allowPrivate: boolean) =>
  Effect.gen(function*() {
    // Merchants get the documented headers only: no traceparent/b3 from our tracer, no redirects
    // followed (a 3xx is a failed attempt, so a redirect can never lead inside the network).
    const client = HttpClient.withTracerPropagation(yield* HttpClient.HttpClient, false)
    return WebhookTransport.of({
      post: (request) =>
        Effect.gen(function*() {
          const url = new URL(request.url)
          const host = url.hostname.replace(/^\[|\]$/g, "")
          if (!allowPrivate && isIP(host) !== 0 && !isPublicAddress(host)) {
            return { _tag: "Failed", error: refusedMessage } as const
          }
          const response = yield* client.execute(
            HttpClientRequest.post(request.url).pipe(
              HttpClientRequest.setHeaders(request.headers),
              HttpClientRequest.bodyText(request.body, "application/json")
            )
          )
          const snippet = yield* readSnippet(response.stream)
          return { _tag: "Answered", status: response.status, snippet } as const
        }).pipe(
          Effect.scoped,
          Effect.catchAll((error) => Effect.succeed({ _tag: "Failed", error: describe(error) } as const)),
          Effect.catchAllDefect((defect) => Effect.succeed({ _tag: "Failed", error: describe(defect) } as const))
        )
    })
  })

/** The production transport: Node's HTTP client with a keep-alive agent and the public-only lookup. */
export const layer = Layer.unwrapEffect(
  Effect.map(AppConfig, (config) =>
    Layer.effect(WebhookTransport, makeHttpTransport(config.webhookAllowPrivateUrls)).pipe(
      Layer.provide(NodeHttpClient.layerWithoutAgent),
      Layer.provide(NodeHttpClient.makeAgentLayer({
        keepAlive: true,
        maxSockets: 64,
        ...(config.webhookAllowPrivateUrls ? {} : { lookup: publicOnlyLookup as never })
      }))
    )
  )
)
