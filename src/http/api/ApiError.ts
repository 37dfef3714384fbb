import { Data, Effect } from "effect"
import * as Respondable from "effect/http/HttpServerRespondable"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import { withoutStack } from "../../platform/EffectInternals.ts"
import type { InvalidInput, InvalidState, NotFound, ProcessorUnavailable } from "../../services/Errors.ts"
import type { StoreUnavailable } from "../../store/Store.ts"
import { requestStateOf } from "../edge/RequestState.ts"
import { error as errorExample } from "./Examples.ts"

export type ErrorType =
  | "invalid_request_error"
  | "authentication_error"
  | "idempotency_error"
  | "rate_limit_error"
  | "api_error"

/** Every error the API answers with (CONTRACT section 3). Rendered by the edge middleware. */
export class ApiError extends withoutStack(Data.Error<{}>) {
  // `Data.Error<{}>` takes no fields: the message is set below, the rest are own properties.
  readonly _tag = "ApiError"
  /** The field the error is about (`param` in the envelope). */
  readonly param?: string
  /** Headers the answer carries beside the envelope (`Retry-After` and the rate limit's). */
  readonly headers?: Readonly<Record<string, string>>
  constructor(
    readonly status: number,
    readonly type: ErrorType,
    readonly code: string,
    message: string,
    details: { readonly param?: string | undefined; readonly headers?: Readonly<Record<string, string>> } = {}
  ) {
    super()
    this.message = message
    this.param = details.param
    this.headers = details.headers
  }

  /**
   * A handler's or a middleware's refusal, answered by the HttpApi itself (it declares no error
   * schemas, so it asks the error to render itself), with the request's id from its state.
   */
  [Respondable.symbol]() {
    return Effect.withFiber((fiber) => Effect.succeed(this.render(requestStateOf(fiber).id)))
  }

  render(requestId: string) {
    const body = JSON.stringify(this.body(requestId))
    return this.headers === undefined
      ? HttpServerResponse.text(body, { status: this.status, contentType: "application/json" })
      : HttpServerResponse.text(body, { status: this.status, contentType: "application/json", headers: this.headers })
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
  new ApiError(
    401,
    "authentication_error",
    "authentication_required",
    "Send an API key as 'Authorization: Bearer sk_live_...'."
  )
/** An Authorization header that holds no API key: another scheme, or a token not of a key's shape (`sk_live_` + letters and digits). */
export const malformedApiKey = () =>
  new ApiError(
    401,
    "authentication_error",
    "authentication_required",
    "The API key is not valid: the Authorization header must be 'Bearer sk_live_...' with the key exactly as it was issued."
  )
export const invalidApiKey = () =>
  new ApiError(
    401,
    "authentication_error",
    "invalid_api_key",
    "The API key is not valid: it is unknown or has been revoked."
  )
export const notFound = (what: string) => new ApiError(404, "invalid_request_error", "not_found", `No such ${what}.`)
export const routeNotFound = (method: string, path: string) =>
  new ApiError(404, "invalid_request_error", "not_found", `No route for ${method} ${path}.`)
export const methodNotAllowed = (method: string, path: string, allowed: ReadonlyArray<string>) =>
  new ApiError(
    405,
    "invalid_request_error",
    "method_not_allowed",
    `${method} is not allowed on ${path}; it accepts ${allowed.join(", ")}.`,
    { headers: { allow: allowed.join(", ") } }
  )
export const invalidState = (message: string) => new ApiError(409, "invalid_request_error", "invalid_state", message)
export const idempotencyInProgress = (retryAfterSeconds: number) =>
  new ApiError(
    409,
    "idempotency_error",
    "idempotency_in_progress",
    "A request with this idempotency key is still being processed; retry later.",
    { headers: { "retry-after": String(retryAfterSeconds) } }
  )
export const bodyTooLarge = (limitBytes: number) =>
  new ApiError(
    413,
    "invalid_request_error",
    "body_too_large",
    `The request body is over the limit of ${limitBytes} bytes.`
  )
export const unsupportedMediaType = () =>
  new ApiError(
    415,
    "invalid_request_error",
    "unsupported_media_type",
    "A request body must be sent with 'Content-Type: application/json'."
  )
/** A body sent compressed (or in any coding but identity): refused, never decoded. */
export const unsupportedContentEncoding = (coding: string) =>
  new ApiError(
    415,
    "invalid_request_error",
    "unsupported_media_type",
    `A request body must be sent without Content-Encoding (this one says '${
      coding.slice(0, 40)
    }'): send it uncompressed.`
  )
export const validationFailed = (param: string | undefined, message: string) =>
  new ApiError(422, "invalid_request_error", "validation_failed", message, { param })
/** `param`: where the key came from, the `X-Idempotency-Key` header or a body field (`transaction.idempotency_key`). */
export const idempotencyKeyReused = (param: string) =>
  new ApiError(
    422,
    "idempotency_error",
    "idempotency_key_reused",
    `The idempotency key in ${param} was already used with a different request (method, path or body); send a new key with a new request.`,
    { param }
  )
export const rateLimited = (limit: number, retryAfterSeconds: number) =>
  new ApiError(429, "rate_limit_error", "rate_limited", "Too many requests for this API key; slow down.", {
    headers: {
      "retry-after": String(retryAfterSeconds),
      "x-ratelimit-limit": String(limit),
      "x-ratelimit-remaining": "0"
    }
  })
export const internalError = () =>
  new ApiError(500, "api_error", "internal_error", "Something went wrong on our side; it has been logged.")
export const serviceUnavailable = () =>
  new ApiError(
    503,
    "api_error",
    "service_unavailable",
    "The service cannot reach its database right now; retry with the same idempotency key.",
    { headers: { "retry-after": "1" } }
  )

/** The card processor's answer to an operation is not known: nothing was booked, and a retry repeats it at most once. */
export const processorUnavailable = (operation: string) =>
  new ApiError(
    503,
    "api_error",
    "service_unavailable",
    `The card processor did not answer the ${operation} in time, so its outcome is not known yet and nothing was booked; the service keeps asking under the same processor idempotency key (it happens at most once) and the transaction's processor_pending says so meanwhile. Read the transaction, or retry with the same idempotency key, to see the outcome.`,
    { headers: { "retry-after": "1" } }
  )

// ---------------------------------------------------------------------------------------------
// From the application's outcomes

export type ServiceError = NotFound | InvalidState | InvalidInput | StoreUnavailable | ProcessorUnavailable

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
    case "ProcessorUnavailable":
      return processorUnavailable(error.operation)
  }
}

export const mapErrors = <A, E extends ServiceError, R>(
  effect: Effect.Effect<A, E, R>
): Effect.Effect<A, ApiError, R> => Effect.mapError(effect, toApiError)

/** `mapErrors` and the answer made of the success, in one match. */
export const answer = <A, B, E extends ServiceError, R>(
  effect: Effect.Effect<A, E, R>,
  f: (a: A) => B
): Effect.Effect<B, ApiError, R> =>
  Effect.matchEffect(effect, {
    onFailure: (error) => Effect.fail(toApiError(error)),
    onSuccess: (a) => Effect.succeed(f(a))
  })

// ---------------------------------------------------------------------------------------------
// Documentation: every status the API answers errors with, all with the body `{"error": {...}}`.

/** The statuses of CONTRACT section 3, each with what it means, as the OpenAPI document lists them. */
export const errorStatuses: ReadonlyArray<readonly [number, string]> = [
  [400, "invalid_json: the body is not parseable JSON (or not valid UTF-8)"],
  [401, "authentication_required / invalid_api_key"],
  [404, "not_found: no such record for this merchant, or no such route"],
  [409, "invalid_state / idempotency_in_progress"],
  [413, "body_too_large: over 64 KiB; the answer closes the connection"],
  [415, "unsupported_media_type: a body without Content-Type: application/json, or with a Content-Encoding"],
  [422, "validation_failed / idempotency_key_reused"],
  [429, "rate_limited"],
  [500, "internal_error"],
  [503, "service_unavailable"]
]

const errorEnvelopeSchema = {
  type: "object",
  required: ["error"],
  additionalProperties: false,
  properties: {
    error: {
      type: "object",
      required: ["type", "code", "message", "request_id"],
      additionalProperties: false,
      properties: {
        type: {
          type: "string",
          enum: ["invalid_request_error", "authentication_error", "idempotency_error", "rate_limit_error", "api_error"]
        },
        code: { type: "string" },
        message: { type: "string" },
        param: { type: "string" },
        request_id: { type: "string" }
      }
    }
  },
  examples: [errorExample]
}

/**
 * Adds the error answers to an OpenAPI document made by the HttpApi: the handlers' refusals are
 * `ApiError`s that render themselves (Respondable), so the HttpApi declares no error schemas;
 * every operation lists every status of CONTRACT section 3 with the one error envelope, and
 * HttpApi's own 400 decode error (never sent: decode failures answer 422) is left out.
 */
export const documentErrors = (spec: Record<string, any>): void => {
  spec.components ??= {}
  spec.components.schemas ??= {}
  spec.components.schemas.Error = errorEnvelopeSchema
  for (const name of Object.keys(spec.components.schemas)) {
    if (name.startsWith("HttpApi") && name !== "Error") delete spec.components.schemas[name]
  }
  for (const path of Object.values<any>(spec.paths ?? {})) {
    for (const operation of Object.values<any>(path)) {
      if (operation?.responses === undefined) continue
      for (const [status, description] of errorStatuses) {
        operation.responses[String(status)] = {
          description,
          content: { "application/json": { schema: { $ref: "#/components/schemas/Error" } } }
        }
      }
    }
  }
}

/**
 * A handler's or a middleware's effect with its `ApiError` refusals out of its typed error
 * channel: the HttpApi declares no error schemas on this port, and it answers any failure that
 * is `Respondable` (as ApiError is) by rendering it, so the refusal still reaches the client.
 */
export const asAnswered = <A, R>(effect: Effect.Effect<A, ApiError, R>): Effect.Effect<A, never, R> =>
  effect as unknown as Effect.Effect<A, never, R>
