import { Context, Effect, type Fiber } from "effect"
import { HttpServerRequest } from "effect/http/HttpServerRequest"
import type { ApiKey, Merchant } from "../../domain/Merchant.ts"

/** The authenticated caller: the merchant that owns the API key, and the key itself. */
export interface Caller {
  readonly merchant: Merchant
  readonly apiKey: ApiKey
}

/**
 * The request being served, recorded once by the edge on the request itself (a property under a
 * private key, read back through the request in the fiber's context: setting a fiber-local value
 * would copy the fiber's whole set of them on every request, and providing it, or the caller as a
 * context service, would add a provide to every request):
 * - `id`: echoed in `X-Request-Id` and in error bodies;
 * - `body`: the body as the edge parsed it (`undefined`: no body), so nothing parses it again for the fingerprint;
 * - `keyHandled`: whether the handler's `idempotent` (src/http/edge/Idempotency.ts) took charge of the key. When it did not (the
 *   edge refused the body or its decoding failed), the edge stores the refusal itself;
 * - `caller`: set by the Authentication middleware once the key is checked (null before).
 */
export interface RequestState {
  readonly id: string
  body: { readonly text: string; readonly value: unknown } | undefined
  keyHandled: boolean
  caller: Caller | null
}

/**
 * Each request's state, kept on the request object the fibers serving it find in their context,
 * under a key private to this module: a `WeakMap` entry per request cost ~2 µs to add (its
 * table grows with every request still alive until a collection), a property ~20 ns.
 */
const stateKey: unique symbol = Symbol("payments/RequestState")

interface WithState {
  [stateKey]?: RequestState
}

/** Outside any request (or for one the edge never saw), a state of its own: no caller, no key handled. */
const unknownState = (): RequestState => ({ id: "req_unknown", body: undefined, keyHandled: false, caller: null })

/** Records the state of `request` (the edge, once per request, before anything reads it). */
export const setRequestState = (request: HttpServerRequest, state: RequestState): void => {
  ;(request as WithState)[stateKey] = state
}

/** The state of the request the fiber serves. */
export const requestStateOf = (fiber: Fiber.Fiber<unknown, unknown>): RequestState => {
  const request = Context.getOrUndefined(fiber.context, HttpServerRequest)
  if (request === undefined) return unknownState()
  let state = (request as WithState)[stateKey]
  if (state === undefined) {
    state = unknownState()
    ;(request as WithState)[stateKey] = state
  }
  return state
}

/** Reading the caller where there is none: only endpoints behind Authentication have one. */
export const noCaller: Effect.Effect<never> = Effect.die(
  new Error("no authenticated caller: the endpoint is not behind Authentication")
)

/**
 * Runs `f` with the authenticated caller. Only endpoints behind the
 * Authentication middleware have a caller; anywhere else it is a defect.
 */
export const withCaller = <A, E, R>(f: (caller: Caller) => Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.withFiber((fiber) => {
    const caller = requestStateOf(fiber).caller
    return caller === null ? noCaller : f(caller)
  })

/** The authenticated caller of the request (a defect outside Authentication, as `withCaller`). */
export const CurrentMerchant: Effect.Effect<Caller> = withCaller(Effect.succeed)
