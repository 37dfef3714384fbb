import { HttpApiSchema } from "@effect/platform"
import { Effect, Schema } from "effect"
import { YieldableError } from "effect/Cause"
import { type InvalidInput, type InvalidState, type NotFound, withoutStack } from "../services/Errors.ts"
import type { StoreUnavailable } from "../store/Store.ts"
import { error as errorExample } from "./Examples.ts"

export type ErrorType =
  | "invalid_request_error"
  | "authentication_error"
  | "idempotency_error"
  | "rate_limit_error"
  | "api_error"

/** Every error the API answers with (CONTRACT section 3). Rendered by the edge middleware. */
export class ApiError extends withoutStack(YieldableError) {
  readonly _tag = "ApiError"
  constructor(
    readonly status: number,
    readonly type: ErrorType,
    readonly code: string,
    override readonly message: string,
    readonly param?: string,
    readonly headers?: Readonly<Record<string, string>>
  ) {
    super(message)
  }

  body(requestId: string) {
    return {
      error: {
        type: this.type,
        code: this.code,
        message: this.message,
        ...(this.param === undefined ? {} : { param: this.param }),
        request_id: requestId
      }
    }
  }
}

export const invalidJson = (detail: string) =>
  new ApiError(400, "invalid_request_error", "invalid_json", `The request body is not valid JSON: ${detail}`)
/** No Authorization header (or an empty one). */
export const authenticationRequired = () =>
  new ApiError(401, "authentication_error", "authentication_required", "Send an API key as 'Authorization: Bearer sk_live_...'.")
/** An Authorization header that holds no API key: another scheme, or a token not of a key's shape (`sk_live_` + letters and digits). */
export const malformedApiKey = () =>
  new ApiError(
    401,
    "authentication_error",
    "authentication_required",
    "The API key is not valid: the Authorization header must be 'Bearer sk_live_...' with the key exactly as it was issued."
  )
export const invalidApiKey = () =>
  new ApiError(401, "authentication_error", "invalid_api_key", "The API key is not valid: it is unknown or has been revoked.")
export const notFound = (what: string) => new ApiError(404, "invalid_request_error", "not_found", `No such ${what}.`)
export const routeNotFound = (method: string, path: string) =>
  new ApiError(404, "invalid_request_error", "not_found", `No route for ${method} ${path}.`)
export const methodNotAllowed = (method: string, path: string, allowed: ReadonlyArray<string>) =>
  new ApiError(
    405,
    "invalid_request_error",
    "method_not_allowed",
    `${method} is not allowed on ${path}; it accepts ${allowed.join(", ")}.`,
    undefined,
    { allow: allowed.join(", ") }
  )
export const invalidState = (message: string) => new ApiError(409, "invalid_request_error", "invalid_state", message)
export const idempotencyInProgress = (retryAfterSeconds: number) =>
  new ApiError(
    409,
    "idempotency_error",
    "idempotency_in_progress",
    "A request with this idempotency key is still being processed; retry later.",
    undefined,
    { "retry-after": String(retryAfterSeconds) }
  )
export const bodyTooLarge = (limitBytes: number) =>
  new ApiError(413, "invalid_request_error", "body_too_large", `The request body is over the limit of ${limitBytes} bytes.`)
export const unsupportedMediaType = () =>
  new ApiError(415, "invalid_request_error", "unsupported_media_type", "A request body must be sent with 'Content-Type: application/json'.")
export const validationFailed = (param: string | undefined, message: string) =>
  new ApiError(422, "invalid_request_error", "validation_failed", message, param)
/** `param`: where the key came from, the `X-Idempotency-Key` header or a body field (`transaction.idempotency_key`). */
export const idempotencyKeyReused = (param: string) =>
  new ApiError(
    422,
    "idempotency_error",
    "idempotency_key_reused",
    `The idempotency key in ${param} was already used with a different request (method, path or body); send a new key with a new request.`,
    param
  )
export const rateLimited = (limit: number, retryAfterSeconds: number) =>
  new ApiError(429, "rate_limit_error", "rate_limited", "Too many requests for this API key; slow down.", undefined, {
    "retry-after": String(retryAfterSeconds),
    "x-ratelimit-limit": String(limit),
    "x-ratelimit-remaining": "0"
  })
export const internalError = () =>
  new ApiError(500, "api_error", "internal_error", "Something went wrong on our side; it has been logged.")
export const serviceUnavailable = () =>
  new ApiError(
    503,
    "api_error",
    "service_unavailable",
    "The service cannot reach its database right now; retry with the same idempotency key.",
    undefined,
    { "retry-after": "1" }
  )

// ---------------------------------------------------------------------------------------------
// From the application's outcomes

export type ServiceError = NotFound | InvalidState | InvalidInput | StoreUnavailable

/** Application outcomes to CONTRACT errors (the one mapping every handler uses). */
export const toApiError = (error: ServiceError): ApiError => {
  switch (error._tag) {
    case "NotFound":
      return notFound(error.resource)
    case "InvalidState":
      return invalidState(error.message)
    case "InvalidInput":
      return validationFailed(error.param, error.message)
    case "StoreUnavailable":
      return serviceUnavailable()
  }
}

export const mapErrors = <A, E extends ServiceError, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, ApiError, R> =>
  Effect.mapError(effect, toApiError)

/** `mapErrors` and the answer made of the success, in one step (the handlers' hot paths). */
export const answer = <A, B, E extends ServiceError, R>(effect: Effect.Effect<A, E, R>, f: (a: A) => B): Effect.Effect<B, ApiError, R> =>
  Effect.matchEffect(effect, { onFailure: (error) => Effect.fail(toApiError(error)), onSuccess: (a) => Effect.succeed(f(a)) })

// ---------------------------------------------------------------------------------------------
// Documentation: one response schema per status, all encoding to `{"error": {...}}`.

export const ErrorBody = Schema.Struct({
  type: Schema.Literal("invalid_request_error", "authentication_error", "idempotency_error", "rate_limit_error", "api_error"),
  code: Schema.String,
  message: Schema.String,
  param: Schema.optional(Schema.String),
  request_id: Schema.String
})
const ErrorEnvelope = Schema.Struct({ error: ErrorBody }).annotations({ examples: [errorExample] })

const errorResponse = (status: number, description: string) =>
  Schema.transform(
    ErrorEnvelope,
    Schema.declare((u): u is ApiError => u instanceof ApiError && u.status === status),
    {
      strict: true,
      decode: (encoded) =>
        new ApiError(status, encoded.error.type, encoded.error.code, encoded.error.message, encoded.error.param),
      encode: (error) => error.body("req_unknown")
    }
  ).annotations({ ...HttpApiSchema.annotations({ status }), identifier: `Error${status}`, description })

export const errorResponses = [
  errorResponse(400, "invalid_json: the body is not parseable JSON (or not valid UTF-8)"),
  errorResponse(401, "authentication_required / invalid_api_key"),
  errorResponse(404, "not_found: no such record for this merchant, or no such route"),
  errorResponse(409, "invalid_state / idempotency_in_progress"),
  errorResponse(413, "body_too_large: over 64 KiB; the answer closes the connection"),
  errorResponse(415, "unsupported_media_type: a body without Content-Type: application/json"),
  errorResponse(422, "validation_failed / idempotency_key_reused"),
  errorResponse(429, "rate_limited"),
  errorResponse(500, "internal_error"),
  errorResponse(503, "service_unavailable")
] as const
