import { FileSystem, HttpApiBuilder, type HttpApp, HttpIncomingMessage, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { HttpApiDecodeError } from "@effect/platform/HttpApiError"
import { Cause, Clock, Context, Effect, type Fiber, FiberRef, LogLevel, Option } from "effect"
import * as Metrics from "../platform/Metrics.ts"
import { Ids } from "../platform/Ids.ts"
import * as E from "./ApiError.ts"
import { AppConfig } from "../platform/Config.ts"
import { ApiKeys } from "../services/ApiKeys.ts"
import { Store } from "../store/Store.ts"
import { PaymentsApi } from "./Api.ts"
import { isWellFormedApiKey } from "./Authentication.ts"
import { storeRefusal } from "./Idempotency.ts"
import { describeParseError, jsonShapeProblem } from "./JsonShape.ts"
import { makeRouteOf } from "./Routes.ts"
import { fromDecodeError, routeNotFound } from "./RequestErrors.ts"
import { type RequestState, setRequestState } from "./RequestState.ts"


/**
 * Sets a fiber-local value from inside a step that already holds the fiber (`withFiberRuntime`):
 * what `FiberRef.set` does, without the two Effect steps of its own. The runtime fiber's setter
 * is not on the public `RuntimeFiber` type; `FiberRef.set` calls it the same way.
 */
const setFiberRef = <A>(fiber: Fiber.RuntimeFiber<unknown, unknown>, ref: FiberRef.FiberRef<A>, value: A): void =>
  (fiber as unknown as { setFiberRef(ref: FiberRef.FiberRef<A>, value: A): void }).setFiberRef(ref, value)

export const maximumBodyBytes = 64 * 1024

/** Without headers of its own a response shares `Headers.empty` (no headers object built per response). */
export const jsonResponse = (status: number, body: string, headers?: Readonly<Record<string, string>>) =>
  HttpServerResponse.text(
    body,
    headers === undefined || isEmpty(headers) ? { status, contentType: "application/json" } : { status, contentType: "application/json", headers }
  )

const isEmpty = (record: Readonly<Record<string, string>>) => {
  for (const _ in record) return false
  return true
}

export const renderError = (error: E.ApiError, requestId: string) =>
  jsonResponse(error.status, JSON.stringify(error.body(requestId)), error.headers ?? {})

const toApiError = (cause: Cause.Cause<unknown>, request: HttpServerRequest.HttpServerRequest) =>
  Effect.gen(function*() {
    const failure = Cause.failureOption(cause)
    if (Option.isSome(failure)) {
      const error = failure.value
      if (error instanceof E.ApiError) return error
      if (error instanceof HttpApiDecodeError) return fromDecodeError(error, request)
      const tag = (error as { _tag?: string })?._tag
      if (tag === "RouteNotFound") return routeNotFound(request)
      if (tag === "StoreUnavailable") return E.serviceUnavailable()
    }
    const defect = Cause.dieOption(cause)
    if (Option.isSome(defect) && (defect.value as { _tag?: string })?._tag === "RequestError") {
      return E.invalidJson("it could not be parsed.")
    }
    yield* Effect.logError("request failed with a defect", cause)
    return E.internalError()
  })

const hasJsonContentType = (request: HttpServerRequest.HttpServerRequest) => {
  const type = request.headers["content-type"]
  return type !== undefined && /^application\/json\s*(;|$)/i.test(type.trim())
}

/** The body's text checked for media type (415), shape and JSON syntax (400): the parsed body, or the refusal. */
const parseBody = (request: HttpServerRequest.HttpServerRequest, text: string): RequestState["body"] | E.ApiError => {
  if (text.length === 0) return undefined
  if (!hasJsonContentType(request)) return E.unsupportedMediaType()
  const shapeProblem = jsonShapeProblem(text)
  if (shapeProblem !== null) return E.invalidJson(shapeProblem)
  try {
    return { text, value: JSON.parse(text) as unknown }
  } catch (error) {
    return E.invalidJson(describeParseError(error))
  }
}

const maximumBodySize = Option.some(FileSystem.Size(maximumBodyBytes))

/**
 * Reads and checks the body before routing: size (413), media type (415), shape and JSON syntax
 * (400); then routes (`app`) with the body on the request's state. Runs in the request fiber's
 * own step (`fiber`): the body size limit is set on it directly, for the rest of the request
 * (chunked bodies have no declared length: the read itself stops at the limit).
 */
const withCheckedBody = <A, X, R>(
  fiber: Fiber.RuntimeFiber<unknown, unknown>,
  request: HttpServerRequest.HttpServerRequest,
  state: RequestState,
  app: Effect.Effect<A, X, R>
): Effect.Effect<A, X | E.ApiError, R> => {
  if (request.method !== "POST" && request.method !== "PATCH" && request.method !== "PUT") return app
  const declaredLength = request.headers["content-length"]
  if (declaredLength !== undefined && Number(declaredLength) > maximumBodyBytes) return Effect.fail(E.bodyTooLarge(maximumBodyBytes))
  // A declared length within the limit is the body's length (the HTTP parser frames the body by
  // it): only a body without one needs the limit in the context (a copy of every service in it).
  if (!(Number(declaredLength) <= maximumBodyBytes)) {
    setFiberRef(fiber, FiberRef.currentContext, Context.add(fiber.getFiberRef(FiberRef.currentContext), HttpIncomingMessage.MaxBodySize, maximumBodySize))
  }
  return Effect.matchEffect(request.text, {
    onFailure: () => Effect.fail(E.bodyTooLarge(maximumBodyBytes)),
    onSuccess: (text): Effect.Effect<A, X | E.ApiError, R> => {
      const body = parseBody(request, text)
      if (body instanceof E.ApiError) return Effect.fail(body)
      state.body = body
      return app
    }
  })
}

/**
 * The request's metrics (made once per method, route and status) and its log line (skipped, with
 * its annotations, when the minimum log level drops info lines anyway).
 */
const logRequest = (method: string, route: string, status: number, requestId: string, seconds: number, minimumLevel: LogLevel.LogLevel) => {
  const statusText = String(status)
  Metrics.record(Metrics.httpRequests(method, route, statusText), 1)
  Metrics.record(Metrics.httpRequestDuration(method, route, statusText), seconds)
  if (LogLevel.lessThan(LogLevel.Info, minimumLevel)) return null
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
export const layer = HttpApiBuilder.middleware(
  PaymentsApi,
  Effect.gen(function*() {
    const ids = yield* Ids
    const apiKeys = yield* ApiKeys
    const store = yield* Store
    const config = yield* AppConfig
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

    /** A refusal of a write that carries an idempotency key is stored like any finished response. */
    const answerRefusal = (request: HttpServerRequest.HttpServerRequest, error: E.ApiError, requestId: string, taken: boolean) =>
      taken
        ? Effect.succeed(renderError(error, requestId))
        : storeRefusal(request, error, requestId, merchantOf(request), store, config).pipe(
          Effect.map((stored) => stored ?? renderError(error, requestId)),
          Effect.catchAll((refusal) => Effect.succeed(renderError(refusal, requestId)))
        )

    return (app: HttpApp.Default) =>
      // One step reads what the request needs from its fiber: the request, the clock, the log level.
      Effect.withFiberRuntime<HttpServerResponse.HttpServerResponse, E.ApiError, HttpServerRequest.HttpServerRequest>((fiber) => {
        const request = Context.unsafeGet(fiber.currentContext, HttpServerRequest.HttpServerRequest)
        const clock = Context.get(fiber.currentDefaultServices, Clock.Clock)
        const startNanos = clock.unsafeCurrentTimeNanos()
        const minimumLevel = fiber.getFiberRef(FiberRef.currentMinimumLogLevel)
        const requestId = ids.mint("request")
        const state: RequestState = { id: requestId, body: undefined, taken: false, caller: null }
        // Recorded against the request (no fiber-local value set): the rest of the request reads it from there.
        setRequestState(request, state)
        const checked = withCheckedBody(fiber, request, state, app)
        const refuse = (cause: Cause.Cause<unknown>): Effect.Effect<HttpServerResponse.HttpServerResponse, E.ApiError> =>
          Cause.isInterruptedOnly(cause)
            ? Effect.failCause(cause as Cause.Cause<never>)
            : Effect.flatMap(toApiError(cause, request), (error) => answerRefusal(request, error, requestId, state.taken))
        const finish = (response: HttpServerResponse.HttpServerResponse) => {
          const seconds = Number(clock.unsafeCurrentTimeNanos() - startNanos) / 1e9
          const answer = HttpServerResponse.setHeader(response, "x-request-id", requestId)
          const logged = logRequest(request.method, routeOf(request.method, request.url), response.status, requestId, seconds, minimumLevel)
          return logged === null ? Effect.succeed(answer) : Effect.as(logged, answer)
        }
        // Nothing is logged at all under LogLevel.None: no annotation, and the answer and the
        // refusal are finished in one match (one step fewer than a catch, then a flatMap).
        if (minimumLevel._tag === "None") {
          return Effect.matchCauseEffect(checked, { onFailure: (cause) => Effect.flatMap(refuse(cause), finish), onSuccess: finish })
        }
        return Effect.flatMap(Effect.annotateLogs(Effect.catchAllCause(checked, refuse), "request_id", requestId), finish)
      })
  })
)
