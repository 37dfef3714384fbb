import { Effect, Exit, Inspectable, Option, Stream } from "effect"
import { Headers, HttpIncomingMessage, type HttpMethod, HttpServerRequest, type HttpServerResponse } from "effect/http"
import { HttpServerError, RequestParseError } from "effect/http/HttpServerError"

/**
 * An in-process HTTP request for the simulator: the same `HttpServerRequest` the Node server
 * hands to the HttpApi, but with its body already in memory, so reading it never touches a
 * promise and the virtual-time driver can drain every fiber synchronously.
 */
export class SimRequest extends Inspectable.Class implements HttpServerRequest.HttpServerRequest {
  readonly [HttpServerRequest.TypeId]: typeof HttpServerRequest.TypeId = HttpServerRequest.TypeId
  readonly [HttpIncomingMessage.TypeId]: typeof HttpIncomingMessage.TypeId = HttpIncomingMessage.TypeId
  readonly source: object = {}
  readonly originalUrl: string
  readonly remoteAddress = Option.none<string>()
  readonly peerAddress = Option.none<string>()
  readonly protocol = "http" as const
  readonly cookies = {}

  constructor(
    readonly method: HttpMethod.HttpMethod,
    readonly url: string,
    readonly headers: Headers.Headers,
    readonly body: string
  ) {
    super()
    this.originalUrl = url
  }

  toJSON(): unknown {
    return { _id: "SimRequest", method: this.method, url: this.url }
  }

  get text(): Effect.Effect<string, HttpServerError> {
    return Effect.succeed(this.body)
  }
  get json(): Effect.Effect<any, HttpServerError> {
    // The body is in memory and parsing it has no effect: it is parsed as the getter is read
    // (when the request path asks for the body) and answered as an Exit, one Effect step where
    // `Effect.try` took two. As the platform's Node request does: an empty body is no JSON value at all.
    try {
      return Exit.succeed((this.body === "" ? null : JSON.parse(this.body)) as unknown)
    } catch (cause) {
      return Exit.fail(
        new HttpServerError({ reason: new RequestParseError({ request: this, reason: "Parse", cause }) })
      )
    }
  }
  get urlParamsBody(): Effect.Effect<never, HttpServerError> {
    return this.unsupported("url-encoded bodies")
  }
  get arrayBuffer(): Effect.Effect<ArrayBuffer, HttpServerError> {
    return Effect.sync(() => new TextEncoder().encode(this.body).buffer as ArrayBuffer)
  }
  get stream(): Stream.Stream<Uint8Array, HttpServerError> {
    return Stream.make(new TextEncoder().encode(this.body))
  }
  get multipart(): Effect.Effect<never, never> {
    return Effect.die(new Error("SimRequest: multipart is not simulated"))
  }
  get multipartStream(): Stream.Stream<never> {
    return Stream.die(new Error("SimRequest: multipart is not simulated"))
  }
  get upgrade(): Effect.Effect<never, HttpServerError> {
    return this.unsupported("upgrades")
  }
  readonly upgradeWith = (): Effect.Effect<never, HttpServerError> => this.unsupported("upgrades")
  readonly modify = (options: { readonly url?: string; readonly headers?: Headers.Headers }) =>
    new SimRequest(this.method, options.url ?? this.url, options.headers ?? this.headers, this.body)
  private unsupported(what: string) {
    return Effect.fail(
      new HttpServerError({
        reason: new RequestParseError({
          request: this,
          reason: "Parse",
          description: `SimRequest: ${what} are not simulated`
        })
      })
    )
  }
}

export interface SimResponse {
  readonly status: number
  readonly headers: Readonly<Record<string, string>>
  readonly body: string
}

const decoder = new TextDecoder()

/** Reads the status, headers and body of a response the HttpApi produced (bodies are in memory). */
export const readResponse = (response: HttpServerResponse.HttpServerResponse): SimResponse => {
  const body = response.body
  let text = ""
  // A text body keeps its string until it is first sent (its bytes are encoded then): read the
  // string itself, rather than encoding it only to decode it again.
  if (body._tag === "Uint8Array") text = body.text ?? decoder.decode(body.body)
  else if (body._tag === "Raw") text = typeof body.body === "string" ? body.body : String(body.body)
  else if (body._tag !== "Empty") text = `<${body._tag} body>`
  return { status: response.status, headers: response.headers, body: text }
}

export const makeRequest = (
  method: HttpMethod.HttpMethod,
  url: string,
  apiKey: string | null,
  body: string | null,
  extraHeaders: Readonly<Record<string, string>> = {}
) => {
  // Built as a Headers from the start, names lower-cased as Headers.fromInput would (giving a plain
  // record its prototype afterwards, Headers.fromRecordUnsafe, cost ~10x more than building it).
  const headers: Record<string, string> = Object.create(headersPrototype)
  for (const name in extraHeaders) headers[name.toLowerCase()] = extraHeaders[name]!
  if (apiKey !== null) headers["authorization"] = `Bearer ${apiKey}`
  if (body !== null) {
    headers["content-type"] = "application/json"
    headers["content-length"] = String(Buffer.byteLength(body))
  }
  return new SimRequest(method, url, headers as Headers.Headers, body ?? "")
}

const headersPrototype: object = Object.getPrototypeOf(Headers.empty)
