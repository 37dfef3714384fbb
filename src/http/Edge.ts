import { HttpApiBuilder, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { HttpApiDecodeError } from "@effect/platform/HttpApiError"
import { Cause, Effect, FiberRef, Metric, Option } from "effect"
import { httpRequests } from "../platform/Metrics.ts"
import { Ids } from "../platform/Ids.ts"
import * as E from "./ApiError.ts"
import { PaymentsApi } from "./Api.ts"

export const maximumBodyBytes = 64 * 1024

/** The id of the request being served; echoed in `X-Request-Id` and in error bodies. */
export const currentRequestId = FiberRef.unsafeMake("req_unknown")

export const jsonResponse = (status: number, body: string, headers: Readonly<Record<string, string>> = {}) =>
  HttpServerResponse.text(body, { status, contentType: "application/json", headers })

export const renderError = (error: E.ApiError, requestId: string) =>
  jsonResponse(error.status, JSON.stringify(error.body(requestId)), error.headers ?? {})

const issueMessage = (issue: { readonly _tag: string; readonly message: string }, param: string | undefined) => {
  const field = param ?? "The request"
  if (issue._tag === "Missing") return `${field} is required.`
  if (issue._tag === "Unexpected") return `${field} is not a recognised field.`
  const text = issue.message.replace(/^Expected /, "must be ").replace(/, actual .*$/s, "")
  return `${field} ${text}${text.endsWith(".") ? "" : "."}`
}

/** Schema decode failures become 422 `validation_failed` naming the first offending field. */
const fromDecodeError = (error: HttpApiDecodeError) => {
  const issue = error.issues[0]
  if (issue === undefined) return E.validationFailed(undefined, "The request is invalid.")
  const param = issue.path.length === 0 ? undefined : issue.path.map(String).join(".")
  if (param === undefined) {
    return E.validationFailed(undefined, "The request body is missing or is not a JSON object of the documented shape.")
  }
  return E.validationFailed(param, issueMessage(issue, param))
}

const toApiError = (cause: Cause.Cause<unknown>, request: HttpServerRequest.HttpServerRequest) =>
  Effect.gen(function*() {
    const failure = Cause.failureOption(cause)
    if (Option.isSome(failure)) {
      const error = failure.value
      if (error instanceof E.ApiError) return error
      if (error instanceof HttpApiDecodeError) return fromDecodeError(error)
      const tag = (error as { _tag?: string })?._tag
      if (tag === "RouteNotFound") return E.routeNotFound(request.method, new URL(request.url, "http://x").pathname)
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

/** Reads and checks the body before routing: size (413), media type (415) and JSON syntax (400). */
const checkBody = (request: HttpServerRequest.HttpServerRequest) =>
  Effect.gen(function*() {
    if (request.method !== "POST" && request.method !== "PATCH" && request.method !== "PUT") return
    const declaredLength = request.headers["content-length"]
    if (declaredLength !== undefined && Number(declaredLength) > maximumBodyBytes) {
      return yield* Effect.fail(E.bodyTooLarge(maximumBodyBytes))
    }
    // Chunked bodies have no declared length: the read itself stops at the limit.
    const text = yield* request.text.pipe(
      HttpServerRequest.withMaxBodySize(Option.some(maximumBodyBytes)),
      Effect.mapError(() => E.bodyTooLarge(maximumBodyBytes))
    )
    if (text.length === 0) return
    if (!hasJsonContentType(request)) return yield* Effect.fail(E.unsupportedMediaType())
    try {
      JSON.parse(text)
    } catch (error) {
      return yield* Effect.fail(E.invalidJson(error instanceof Error ? error.message : "it could not be parsed."))
    }
  })

/**
 * The API-level middleware: it wraps routing, so it sees every failure before HttpApi would
 * encode it, and answers all of them with the CONTRACT envelope.
 */
export const layer = HttpApiBuilder.middleware(
  PaymentsApi,
  Effect.gen(function*() {
    const ids = yield* Ids
    return (app) =>
      Effect.gen(function*() {
        const request = yield* HttpServerRequest.HttpServerRequest
        const requestId = ids.mint("request")
        const response = yield* Effect.zipRight(checkBody(request), app).pipe(
          Effect.locally(currentRequestId, requestId),
          Effect.catchAllCause((cause) =>
            Cause.isInterruptedOnly(cause)
              ? Effect.failCause(cause)
              : Effect.map(toApiError(cause, request), (error) => renderError(error, requestId))
          )
        )
        yield* Metric.increment(Metric.tagged(httpRequests, "status", String(response.status)))
        return HttpServerResponse.setHeader(response, "x-request-id", requestId)
      })
  }),
  { withContext: true }
)
