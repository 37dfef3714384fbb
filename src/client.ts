import { FetchHttpClient, HttpClient, HttpClientRequest } from "effect/http"
import { HttpApiClient } from "effect/http-api"
import { Effect, Layer } from "effect"
import { PaymentsApi } from "./http/api/Api.ts"

/**
 * The typed client of the Payments API, derived from the same HttpApi as the server and the
 * OpenAPI document: `client.transactions.create({ payload, headers })`, `client.transactions.refund(...)`,
 * ... with the request and response types of src/http/Schemas.ts. The API declares no error
 * schemas (its refusals render themselves), so a refusal reaches the client as an
 * `HttpClientError` whose response carries the CONTRACT error body (`{"error": {...}}`).
 *
 *   const client = yield* makeClient({ baseUrl: "http://127.0.0.1:3000", apiKey: "sk_live_..." })
 *   const { transaction } = yield* client.transactions.create({ payload: {...}, headers: { "x-idempotency-key": "order-1" } })
 *
 * It needs an `HttpClient` (`FetchHttpClient.layer`, or `NodeHttpClient.layer` from @effect/platform-node).
 */
export const makeClient = (options: { readonly baseUrl: string; readonly apiKey: string }) =>
  HttpApiClient.make(PaymentsApi, {
    baseUrl: options.baseUrl,
    transformClient: HttpClient.mapRequest(HttpClientRequest.bearerToken(options.apiKey))
  })

export type PaymentsClient = Effect.Success<ReturnType<typeof makeClient>>

/** The client as a service over the platform's fetch. */
export const layerFetch = FetchHttpClient.layer satisfies Layer.Layer<HttpClient.HttpClient>

export { ApiError } from "./http/api/ApiError.ts"
export { verifyWebhookSignature } from "./domain/Webhook.ts"
export { PaymentsApi }
