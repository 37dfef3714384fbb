import { Context, Effect } from "effect"
import { HttpServerRequest, type HttpServerResponse } from "effect/http"
import { hash as oneShotHash } from "node:crypto"
import {
  type Create,
  Idempotency,
  type IdempotencyRefused,
  type IdempotencyShape,
  type KeyedRequest,
  type Reply
} from "../../services/Idempotency.ts"
import type { CommandKey, StoreUnavailable } from "../../store/Store.ts"
import * as E from "../api/ApiError.ts"
import { jsonResponse } from "./JsonResponse.ts"
import { noCaller, type RequestState, requestStateOf } from "./RequestState.ts"

/**
 * The HTTP side of idempotency (CONTRACT section 5; the rules are the Idempotency service's):
 * the request's key (the `X-Idempotency-Key` header, or a body field that must agree with it), its
 * fingerprint (method, path and body), the refusals and replies as HTTP answers, and refusals of
 * the edge itself stored under their key (`storeRefusal`).
 */

const keyPattern = /^[\x20-\x7e]{1,255}$/

export const isWellFormedKey = (key: string) => keyPattern.test(key)

/** Key order does not make two requests different: the fingerprint hashes canonical JSON. */
const canonical = (value: unknown): string => {
  if (Array.isArray(value)) {
    let text = "["
    for (let i = 0; i < value.length; i++) text += (i === 0 ? "" : ",") + canonical(value[i])
    return text + "]"
  }
  if (value !== null && typeof value === "object") {
    const keys = Object.keys(value).sort()
    let text = "{"
    for (let i = 0; i < keys.length; i++) {
      const k = keys[i]!
      text += (i === 0 ? "" : ",") + JSON.stringify(k) + ":" + canonical((value as Record<string, unknown>)[k])
    }
    return text + "}"
  }
  return JSON.stringify(value)
}

/**
 * Method, path and body; a body that does not parse counts byte for byte. `parsed` is the body
 * as the edge already parsed it, when it was this very text.
 */
export const fingerprintOf = (
  method: string,
  url: string,
  text: string,
  parsed?: { readonly text: string; readonly value: unknown }
) => {
  // The request fingerprinted last, and its fingerprint (one, not a cache): a retry or a racing
  // twin sent right after carries the very same method, target and body (~17% of keyed requests
  // in the simulator), and its fingerprint is the same.
  if (text === lastText && url === lastUrl && method === lastMethod) return lastFingerprint
  const fingerprint = computeFingerprint(method, url, text, parsed)
  lastMethod = method
  lastUrl = url
  lastText = text
  lastFingerprint = fingerprint
  return fingerprint
}

let lastMethod: string | null = null
let lastUrl = ""
let lastText = ""
let lastFingerprint = ""

const computeFingerprint = (
  method: string,
  url: string,
  text: string,
  parsed?: { readonly text: string; readonly value: unknown }
) => {
  let body = text
  if (parsed !== undefined && parsed.text === text) body = canonical(parsed.value)
  else if (text !== "") {
    try {
      body = canonical(JSON.parse(text))
    } catch {
      body = `raw:${text}`
    }
  }
  return oneShotHash("sha256", `${method} ${pathnameOf(url)}\n${body}`, "hex")
}

/** Non-empty segments of unreserved characters, no dots: the URL parser would give the path back as it is. */
const plainPath = /^(?:\/[A-Za-z0-9_~-]+)+\/?$/

/** The request target's path as the WHATWG URL parser normalizes it (without parsing the plain ones every route has). */
export const pathnameOf = (url: string) => (plainPath.test(url) ? url : new URL(url, "http://x").pathname)

const replayUnavailable = () =>
  E.invalidState(
    "The response to this request carried a secret and can no longer be shown: it was sealed with a response encryption key " +
      "this service no longer has. List your API keys (or read the merchant) and rotate the one this request created."
  )

/** The service's refusals, and the store's failures, as the API answers them; the handler's own as they are. */
const asApiError = (error: E.ApiError | IdempotencyRefused | StoreUnavailable): E.ApiError => {
  switch (error._tag) {
    case "ApiError":
      return error
    case "StoreUnavailable":
      return E.toApiError(error)
    case "IdempotencyRefused":
      return error.reason === "in_progress"
        ? E.idempotencyInProgress(1)
        : error.reason === "key_reused"
        ? E.idempotencyKeyReused(error.keyParam)
        : replayUnavailable()
  }
}

const isFinal = (error: E.ApiError) => error.status !== 429 && error.status < 500

/** A refusal as the reply stored under its key when it is final (CONTRACT section 5: all but 429 and 5xx). */
const finalReplyOf = (requestId: string) => (error: E.ApiError | StoreUnavailable): Reply | null =>
  error._tag === "ApiError" && isFinal(error)
    ? { status: error.status, body: JSON.stringify(error.body(requestId)), headers: error.headers }
    : null

const respond = (reply: Reply) => jsonResponse(reply.status, reply.body, reply.headers)

/** Where the request's key came from, for a refusal that names it: the header when it was sent. */
const keyParamOf = (request: HttpServerRequest.HttpServerRequest, options: IdempotencyOptions) =>
  request.headers["x-idempotency-key"] !== undefined ? "X-Idempotency-Key" : (options.bodyKeyParam ?? "idempotency_key")

/** A key in the body too (the create's `transaction.idempotency_key`): it counts as the header does, and both must agree. */
export interface IdempotencyOptions {
  readonly bodyKey?: string | undefined
  readonly bodyKeyParam?: string
}

/** The request's idempotency key (header or body field), checked: the key, undefined without one, or the refusal. */
const requestKey = (
  request: HttpServerRequest.HttpServerRequest,
  options: IdempotencyOptions
): string | undefined | E.ApiError => {
  const headerKey = request.headers["x-idempotency-key"]
  if (headerKey !== undefined && !isWellFormedKey(headerKey)) {
    return E.validationFailed("X-Idempotency-Key", "X-Idempotency-Key must be 1 to 255 printable ASCII characters.")
  }
  if (headerKey !== undefined && options.bodyKey !== undefined && headerKey !== options.bodyKey) {
    return E.validationFailed(
      options.bodyKeyParam ?? "idempotency_key",
      "The X-Idempotency-Key header and the idempotency_key field differ."
    )
  }
  return headerKey ?? options.bodyKey
}

/** Runs `f` on the body's text: as the edge read it (no step of its own), or read again (cached) when the edge saw no body. */
const withBodyText = <A, E, R>(
  request: HttpServerRequest.HttpServerRequest,
  current: RequestState,
  f: (text: string) => Effect.Effect<A, E, R>
) => current.body !== undefined ? f(current.body.text) : Effect.flatMap(Effect.orElseSucceed(request.text, () => ""), f)

/**
 * A keyed write of the authenticated caller's merchant (`merchantId`): a command, run with its
 * `CommandKey` when the request has a key, or a `Create`.
 */
export type Operation = (
  merchantId: string,
  commandKey: CommandKey | undefined
) => Effect.Effect<Reply, E.ApiError | StoreUnavailable> | Create

/** The one way a handler runs a write: `operation` under the request's idempotency key, through the Idempotency service. */
export const idempotent = (
  options: IdempotencyOptions,
  operation: Operation
): Effect.Effect<
  HttpServerResponse.HttpServerResponse,
  E.ApiError,
  HttpServerRequest.HttpServerRequest | Idempotency
> =>
  Effect.withFiber((fiber) => {
    const current = requestStateOf(fiber)
    if (current.caller === null) return noCaller
    current.keyHandled = true
    const request = Context.getUnsafe(fiber.context, HttpServerRequest.HttpServerRequest)
    const idempotency = Context.getUnsafe(fiber.context, Idempotency)
    const key = requestKey(request, options)
    if (key instanceof E.ApiError) return Effect.fail(key)
    const merchantId = current.caller.merchant.id
    const keyed = (fingerprint: string, keyOrNull: string | null): KeyedRequest<E.ApiError | StoreUnavailable> => ({
      merchantId,
      key: keyOrNull,
      keyParam: keyParamOf(request, options),
      fingerprint,
      finalReply: finalReplyOf(current.id)
    })
    if (key === undefined) return answer(idempotency, keyed("", null), operation(merchantId, undefined))
    return withBodyText(request, current, (text) =>
      answer(
        idempotency,
        keyed(fingerprintOf(request.method, request.url, text, current.body), key),
        operation(merchantId, { merchantId, key })
      ))
  })

const answer = (
  idempotency: IdempotencyShape,
  request: KeyedRequest<E.ApiError | StoreUnavailable>,
  operation: Effect.Effect<Reply, E.ApiError | StoreUnavailable> | Create
) =>
  Effect.matchEffect(idempotency.run(request, operation), {
    onFailure: (error) => Effect.fail(asApiError(error)),
    onSuccess: (reply) => Effect.succeed(respond(reply))
  })

/** What `storeRefusal` needs: the request, its refusal and id, and the merchant of its API key (null: none). */
export interface Refusal {
  readonly request: HttpServerRequest.HttpServerRequest
  readonly error: E.ApiError
  readonly requestId: string
  readonly merchantOf: Effect.Effect<string | null>
  readonly idempotency: IdempotencyShape
}

/**
 * A request the edge refused before any handler ran (400 invalid_json, 413, 415, 422 from
 * decoding, 404 of an unknown route) still carries its idempotency key: the refusal is a finished
 * response, stored and replayed like any other (CONTRACT section 5). Null when there is nothing
 * to do: not a write, no well-formed key, not final, or no merchant to scope the key to (looked
 * up only when everything else holds).
 */
export const storeRefusal = (
  { error, idempotency, merchantOf, request, requestId }: Refusal
): Effect.Effect<HttpServerResponse.HttpServerResponse | null, E.ApiError> =>
  Effect.gen(function*() {
    const key = request.headers["x-idempotency-key"]
    if (request.method === "GET" || key === undefined || !isWellFormedKey(key) || !isFinal(error)) return null
    const merchantId = yield* merchantOf
    if (merchantId === null) return null
    // The edge read the body already (the read is cached); one over the limit was never read whole.
    const text = error.code === "body_too_large"
      ? `over the limit, ${request.headers["content-length"] ?? "chunked"}`
      : yield* Effect.orElseSucceed(request.text, () => "")
    const reply = finalReplyOf(requestId)(error)!
    const keyed: KeyedRequest<never> = {
      merchantId,
      key,
      keyParam: "X-Idempotency-Key",
      fingerprint: fingerprintOf(request.method, request.url, text),
      finalReply: () => null
    }
    return respond(yield* Effect.mapError(idempotency.run(keyed, Effect.succeed(reply)), asApiError))
  })
