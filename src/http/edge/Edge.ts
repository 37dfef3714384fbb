import { Cause, Clock, Context, Effect, Exit, Option, References } from "effect"
import { HttpRouter, HttpServerRequest, HttpServerResponse } from "effect/http"
import { HttpApiSchemaError } from "effect/http-api/HttpApiError"
import * as LogLevel from "effect/LogLevel"
import type { unhandled } from "effect/Types"
import { IncomingMessage } from "node:http"
import { Ids } from "../../platform/Ids.ts"
import * as Metrics from "../../platform/Metrics.ts"
import { ApiKeys } from "../../services/ApiKeys.ts"
import { Idempotency } from "../../services/Idempotency.ts"
import * as E from "../api/ApiError.ts"
import { isWellFormedApiKey } from "./Authentication.ts"
import { storeRefusal } from "./Idempotency.ts"
import { jsonResponse } from "./JsonResponse.ts"
import { describeParseError, jsonShapeProblem } from "./JsonShape.ts"
import { fromDecodeError, routeNotFound } from "./RequestErrors.ts"
import { type RequestState, setRequestState } from "./RequestState.ts"
import { makeRouteOf } from "./Routes.ts"

export const maximumBodyBytes = 64 * 1024

const closingConnection = (response: HttpServerResponse.HttpServerResponse) =>
  HttpServerResponse.setHeader(response, "connection", "close")

export const renderError = (error: E.ApiError, requestId: string) =>
  jsonResponse(error.status, JSON.stringify(error.body(requestId)), error.headers ?? {})

const toApiError = (cause: Cause.Cause<unknown>, request: HttpServerRequest.HttpServerRequest) =>
  Effect.gen(function*() {
    const failure = Cause.findErrorOption(cause)
    if (Option.isSome(failure)) {
      const error = failure.value
      if (error instanceof E.ApiError) return error
      const tag = (error as { _tag?: string })?._tag
      const reason = (error as { reason?: { _tag?: string } })?.reason?._tag
      if (tag === "RouteNotFound" || reason === "RouteNotFound") return routeNotFound(request)
      if (tag === "StoreUnavailable") return E.serviceUnavailable()
    }
    // Effect 4's HttpApi turns a request that fails its schemas into a defect.
    const defect = cause.reasons.find(Cause.isDieReason)?.defect
    if (HttpApiSchemaError.is(defect)) return fromDecodeError(defect, request)
    if ((defect as { _tag?: string } | undefined)?._tag === "RequestError") {
      return E.invalidJson("it could not be parsed.")
    }
    yield* Effect.logError("request failed with a defect", cause)
    return E.internalError()
  })

const hasJsonContentType = (request: HttpServerRequest.HttpServerRequest) => {
  const type = request.headers["content-type"]
  return type !== undefined && /^application\/json\s*(;|$)/i.test(type.trim())
}

/**
 * The body's text checked for media type (415), shape and JSON syntax (400): the parsed body, or
 * the refusal. An empty body is no body, unless its request declares another media type (a POST
 * saying `text/plain` is refused whether or not it carries a body).
 */
const parseBody = (request: HttpServerRequest.HttpServerRequest, text: string): RequestState["body"] | E.ApiError => {
  if (text.length === 0) {
    return request.headers["content-type"] === undefined || hasJsonContentType(request)
      ? undefined
      : E.unsupportedMediaType()
  }
  if (!hasJsonContentType(request)) return E.unsupportedMediaType()
  const shapeProblem = jsonShapeProblem(text)
  if (shapeProblem !== null) return E.invalidJson(shapeProblem)
  try {
    return { text, value: JSON.parse(text) as unknown }
  } catch (error) {
    return E.invalidJson(describeParseError(error))
  }
}

/** Puts the parsed body on the request's state and routes (`app`), or refuses the body. */
const withParsedBody = <A, X, R>(
  request: HttpServerRequest.HttpServerRequest,
  state: RequestState,
  text: string,
  app: Effect.Effect<A, X, R>
): Effect.Effect<A, X | E.ApiError, R> => {
  const body = parseBody(request, text)
  if (body instanceof E.ApiError) return Effect.fail(body)
  state.body = body
  return app
}

/**
 * Connections whose request body was refused as too large: the refusal closes them
 * (`Connection: close`), and a request the client pipelined behind that body, which Node may
 * parse before the connection is gone, is not served (its answer could never be sent).
 */
const refusedConnections = new WeakSet<object>()

const bodyTooLarge = (incoming: IncomingMessage) => {
  if (incoming.socket !== null) refusedConnections.add(incoming.socket)
  return Effect.fail(E.bodyTooLarge(maximumBodyBytes))
}

/** A body over the limit: the read stopped there, and the rest is never read. */
const overLimit = Symbol("over the limit")

/**
 * The body's bytes, read from Node's request as they come: `overLimit` as soon as they grow past
 * `limitBytes` (the request is paused there; the refusal's `Connection: close` then ends the
 * connection without reading the rest). A client that hangs up mid-body interrupts the request,
 * as it would anywhere else (nothing is refused, so nothing is stored under its idempotency key).
 */
const readBytes = (incoming: IncomingMessage, limitBytes: number) =>
  Effect.callback<Buffer | typeof overLimit>((resume) => {
    let first: Buffer | null = null
    let more: Array<Buffer> | null = null
    let bytes = 0
    const stop = () => {
      incoming.off("data", onData)
      incoming.off("end", onEnd)
      incoming.off("error", onGone)
      incoming.off("close", onGone)
    }
    const onData = (chunk: Buffer) => {
      bytes += chunk.length
      if (bytes > limitBytes) {
        stop()
        incoming.pause()
        resume(Effect.succeed(overLimit))
      } else if (first === null) {
        first = chunk
      } else {
        ;(more ??= [first]).push(chunk)
      }
    }
    const onEnd = () => {
      stop()
      resume(Effect.succeed(more !== null ? Buffer.concat(more, bytes) : first ?? noBytes))
    }
    const onGone = () => {
      stop()
      resume(Effect.interrupt)
    }
    incoming.on("data", onData)
    incoming.on("end", onEnd)
    incoming.on("error", onGone)
    incoming.on("close", onGone)
    return Effect.sync(stop)
  })

const noBytes = Buffer.alloc(0)

/** UTF-8 as RFC 3629 defines it: anything else (a stray byte, an encoded surrogate, an overlong form, a cut sequence) throws. */
const strictUtf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true })

/**
 * From here on the request's `text` (and its `json`, which reads `text`) is what the edge read:
 * the body's bytes can be read from the connection only once, and the fingerprint of an idempotent
 * request and the HttpApi's payload decoding read the body through the request.
 */
const setText = (request: HttpServerRequest.HttpServerRequest, text: string) => {
  Object.defineProperty(request, "text", { value: Effect.succeed(text) })
}

/**
 * The text a body that is not UTF-8 stands for when its refusal is fingerprinted under an
 * idempotency key: its bytes one for one, after a lone surrogate no decoded body can contain,
 * so it is never taken for a well-formed body (the same text with U+FFFD in it is another request).
 */
const notUtf8Text = (bytes: Buffer) => `\ud800${bytes.toString("latin1")}`

/** The body of a request from Node's server, read as bytes and decoded as strict UTF-8 in one pass. */
const withNodeBody = <A, X, R>(
  incoming: IncomingMessage,
  request: HttpServerRequest.HttpServerRequest,
  state: RequestState,
  app: Effect.Effect<A, X, R>
): Effect.Effect<A, X | E.ApiError, R> => {
  if (refusedConnections.has(incoming.socket)) return Effect.interrupt
  const declaredLength = request.headers["content-length"]
  if (declaredLength !== undefined && Number(declaredLength) > maximumBodyBytes) return bodyTooLarge(incoming)
  return Effect.flatMap(readBytes(incoming, maximumBodyBytes), (bytes): Effect.Effect<A, X | E.ApiError, R> => {
    if (bytes === overLimit) return bodyTooLarge(incoming)
    let text: string
    try {
      text = strictUtf8.decode(bytes)
    } catch {
      setText(request, notUtf8Text(bytes))
      // A body not declared JSON is refused for that first (415), whatever its encoding.
      return Effect.fail(
        hasJsonContentType(request) ? E.invalidJson("it is not valid UTF-8.") : E.unsupportedMediaType()
      )
    }
    setText(request, text)
    return withParsedBody(request, state, text, app)
  })
}

/** UTF-8 takes at least one byte and at most three per UTF-16 unit. */
const isOverLimit = (text: string) =>
  text.length > maximumBodyBytes || (text.length * 3 > maximumBodyBytes && Buffer.byteLength(text) > maximumBodyBytes)

/**
 * Reads and checks the body before routing: size (413), UTF-8, shape and JSON syntax (400),
 * media type (415); then routes (`app`) with the body on the request's state. A request from
 * Node's server is read here as bytes (`withNodeBody`); an in-process one (the simulator's)
 * carries its body as text already.
 */
const withCheckedBody = <A, X, R>(
  request: HttpServerRequest.HttpServerRequest,
  state: RequestState,
  app: Effect.Effect<A, X, R>
): Effect.Effect<A, X | E.ApiError, R> => {
  if (request.method !== "POST" && request.method !== "PATCH" && request.method !== "PUT") return app
  // A coded body (gzip, deflate, br) is refused before it is read: the API takes plain JSON only.
  const coding = request.headers["content-encoding"]
  if (coding !== undefined && coding.trim() !== "" && coding.trim().toLowerCase() !== "identity") {
    return Effect.fail(E.unsupportedContentEncoding(coding.trim()))
  }
  const source = request.source
  if (source instanceof IncomingMessage) return withNodeBody(source, request, state, app)
  const declaredLength = request.headers["content-length"]
  if (declaredLength !== undefined && Number(declaredLength) > maximumBodyBytes) {
    return Effect.fail(E.bodyTooLarge(maximumBodyBytes))
  }
  const checkText = (text: string): Effect.Effect<A, X | E.ApiError, R> =>
    isOverLimit(text) ? Effect.fail(E.bodyTooLarge(maximumBodyBytes)) : withParsedBody(request, state, text, app)
  const unreadable = () => Effect.fail(E.invalidJson("it could not be read."))
  const read = request.text
  // A body already in memory is answered as an Exit: read in this step, not in two more.
  if (Exit.isExit(read)) {
    const exit = read as Exit.Exit<string, unknown>
    return Exit.isSuccess(exit) ? checkText(exit.value) : unreadable()
  }
  return Effect.matchEffect(read, { onFailure: unreadable, onSuccess: checkText })
}

/** A served request as its metrics and log line name it. */
interface Served {
  readonly method: string
  /** The route's pattern (`/api/v1/transactions/:id`), not the path: a bounded set of values. */
  readonly route: string
  readonly status: number
  readonly requestId: string
  readonly seconds: number
}

/**
 * The request's metrics (made once per method, route and status) and its log line (skipped, with
 * its annotations, when the minimum log level drops info lines anyway).
 */
const logRequest = ({ method, requestId, route, seconds, status }: Served, minimumLevel: LogLevel.LogLevel) => {
  const statusText = String(status)
  Metrics.record(Metrics.httpRequests(method, route, statusText), 1)
  Metrics.record(Metrics.httpRequestDuration(method, route, statusText), seconds)
  if (LogLevel.isLessThan("Info", minimumLevel)) return null
  return Effect.logInfo(`${method} ${route} ${statusText}`).pipe(Effect.annotateLogs({
    request_id: requestId,
    method,
    route,
    status,
    latency_ms: Math.round(seconds * 1e6) / 1e3
  }))
}

const bearerPattern = /^Bearer\s+(\S+)\s*$/i

/**
 * The API-level middleware: it wraps routing, so it sees every failure before HttpApi would
 * encode it, and answers all of them with the CONTRACT envelope.
 */
// The edge handles every failure itself (it answers all of them), which the router's types
// cannot express for a middleware that needs services: hence the cast.
/** The edge handles every failure of what it wraps: each becomes a CONTRACT error answer. */
export const layer = HttpRouter.middleware(
  Effect.gen(function*() {
    const ids = yield* Ids
    const apiKeys = yield* ApiKeys
    const idempotency = yield* Idempotency
    const routeOf = makeRouteOf()

    /** The merchant of the request's API key, for refusals stored under its idempotency key; null when none. */
    const merchantOf = (request: HttpServerRequest.HttpServerRequest) => {
      const token = bearerPattern.exec(request.headers["authorization"] ?? "")?.[1]
      if (token === undefined || !isWellFormedApiKey(token)) return Effect.succeed(null)
      return apiKeys.authenticate(token).pipe(
        Effect.map((found) => found?.merchant.id ?? null),
        Effect.orElseSucceed(() => null)
      )
    }

    /**
     * A refusal of a write that carries an idempotency key is stored like any finished response.
     * A body refused as too large was not read to its end: its answer (a replay of a stored 413
     * too) closes the connection, which Node ends once the answer is written, since reading the
     * rest only to discard it is what the limit is there to prevent.
     */
    const answerRefusal = (
      request: HttpServerRequest.HttpServerRequest,
      error: E.ApiError,
      requestId: string,
      keyHandled: boolean
    ) => {
      const answered = keyHandled
        ? Effect.succeed(renderError(error, requestId))
        : storeRefusal({ request, error, requestId, merchantOf: merchantOf(request), idempotency }).pipe(
          Effect.map((stored) => stored ?? renderError(error, requestId)),
          Effect.catch((refusal: E.ApiError) => Effect.succeed(renderError(refusal, requestId)))
        )
      return error.code === "body_too_large" ? Effect.map(answered, closingConnection) : answered
    }

    return (app: Effect.Effect<HttpServerResponse.HttpServerResponse, unknown>) =>
      // What the request needs from its fiber: the request, the clock, the log level.
      Effect.withFiber<
        HttpServerResponse.HttpServerResponse,
        E.ApiError | unhandled,
        HttpServerRequest.HttpServerRequest
      >((fiber) => {
        const request = Context.getUnsafe(fiber.context, HttpServerRequest.HttpServerRequest)
        const clock = fiber.getRef(Clock.Clock)
        const startNanos = clock.currentTimeNanosUnsafe()
        const minimumLevel = fiber.getRef(References.MinimumLogLevel)
        const requestId = ids.mint("request")
        const state: RequestState = { id: requestId, body: undefined, keyHandled: false, caller: null }
        // Recorded against the request (no fiber-local value set): the rest of the request reads it from there.
        setRequestState(request, state)
        const checked = withCheckedBody(request, state, app)
        const refuse = (
          cause: Cause.Cause<unknown>
        ): Effect.Effect<HttpServerResponse.HttpServerResponse, E.ApiError> =>
          Cause.hasInterruptsOnly(cause)
            ? Effect.failCause(cause as Cause.Cause<never>)
            : Effect.flatMap(
              toApiError(cause, request),
              (error) => answerRefusal(request, error, requestId, state.keyHandled)
            )
        const finish = (response: HttpServerResponse.HttpServerResponse) => {
          const seconds = Number(clock.currentTimeNanosUnsafe() - startNanos) / 1e9
          const answer = HttpServerResponse.setHeader(response, "x-request-id", requestId)
          const logged = logRequest({
            method: request.method,
            route: routeOf(request.method, request.url),
            status: response.status,
            requestId,
            seconds
          }, minimumLevel)
          return logged === null ? Effect.succeed(answer) : Effect.as(logged, answer)
        }
        // Nothing is logged at all under LogLevel.None: no annotation, and the answer and the
        // refusal are finished in one match.
        if (minimumLevel === "None") {
          return Effect.matchCauseEffect(checked, {
            onFailure: (cause) => Effect.flatMap(refuse(cause), finish),
            onSuccess: finish
          })
        }
        return Effect.flatMap(Effect.annotateLogs(Effect.catchCause(checked, refuse), "request_id", requestId), finish)
      }) as Effect.Effect<HttpServerResponse.HttpServerResponse, unhandled, HttpServerRequest.HttpServerRequest>
  }),
  { global: true }
)
