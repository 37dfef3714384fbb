import { Effect, FiberRef } from "effect"
import type { ApiKey, Merchant } from "../domain/Merchant.ts"

/** The authenticated caller: the merchant that owns the API key, and the key itself. */
export interface Caller {
  readonly merchant: Merchant
  readonly apiKey: ApiKey
}

/**
 * The request being served, set once by the edge on the request's own fiber (one fiber-local
 * value; providing it, or the caller as a context service, would cost an acquire/use/release of
 * ~20 Effect steps each on every request):
 * - `id`: echoed in `X-Request-Id` and in error bodies;
 * - `body`: the body as the edge parsed it (`undefined`: no body), so nothing parses it again for the fingerprint;
 * - `taken`: whether the handler's own idempotency wrapper took the key. When it did not (the
 *   edge refused the body or its decoding failed), the edge stores the refusal itself;
 * - `caller`: set by the Authentication middleware once the key is checked (null before).
 */
export interface RequestState {
  readonly id: string
  body: { readonly text: string; readonly value: unknown } | undefined
  taken: boolean
  caller: Caller | null
}

export const currentRequest = FiberRef.unsafeMake<RequestState>({ id: "req_unknown", body: undefined, taken: false, caller: null })

/**
 * The authenticated caller of the request. Only endpoints behind the Authentication middleware
 * have one; reading it anywhere else is a defect.
 */
export const CurrentMerchant: Effect.Effect<Caller> = FiberRef.getWith(
  currentRequest,
  (state) => (state.caller === null ? Effect.dieMessage("no authenticated caller: the endpoint is not behind Authentication") : Effect.succeed(state.caller))
)

/** Records the authenticated caller on the request (the Authentication middleware does). */
export const setCaller = (caller: Caller): Effect.Effect<void> =>
  FiberRef.getWith(currentRequest, (state) => {
    state.caller = caller
    return Effect.void
  })
