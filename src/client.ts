import { Effect, Layer } from "effect"
import { FetchHttpClient, HttpClient, HttpClientRequest, type HttpClientResponse } from "effect/http"
import { HttpApiClient } from "effect/http-api"
import { PaymentsApi } from "./http/api/Api.ts"
import { ApiError, type ErrorType } from "./http/api/ApiError.ts"

/**
 * The typed client of the Payments API, derived from the same HttpApi as the server and the
 * OpenAPI document: `client.transactions.create({ payload, headers })`, `client.transactions.refund(...)`,
 * ... with the request and response types of src/http/api/Schemas.ts. Failures are the CONTRACT
 * errors (`ApiError`, with `status`, `code`, `message`, `param`) in the error channel: the API
 * declares no error schemas (its refusals render themselves), so the client reads every answer
 * of status 400 or more as the error envelope before the API's decoding sees it.
 *
 *   const client = yield* makeClient({ baseUrl: "http://127.0.0.1:3000", apiKey: "sk_live_..." })
 *   const { transaction } = yield* client.transactions.create({ payload: {...}, headers: { "x-idempotency-key": "order-1" } })
 *
 * It needs an `HttpClient` (`FetchHttpClient.layer`, or `NodeHttpClient.layer` from @effect/platform-node).
 */
export const makeClient = (options: { readonly baseUrl: string; readonly apiKey: string }) =>
  HttpApiClient.make(PaymentsApi, {
    baseUrl: options.baseUrl,
    transformClient: (client) =>
      client.pipe(
        HttpClient.mapRequest(HttpClientRequest.bearerToken(options.apiKey)),
        // The refusal is an ApiError in the failure channel, which the client's type (HttpClientError) does not name.
        HttpClient.transformResponse(
          Effect.flatMap((response) => (response.status < 400 ? Effect.succeed(response) : refusal(response)))
        )
      ) as HttpClient.HttpClient
  })

/** An answer of status 400 or more as the `ApiError` its CONTRACT envelope describes. */
const refusal = (response: HttpClientResponse.HttpClientResponse) =>
  Effect.flatMap(Effect.orElseSucceed(response.json, () => undefined), (body) => {
    const error = (body as { readonly error?: Record<string, unknown> } | undefined)?.error
    const text = (key: string) => (typeof error?.[key] === "string" ? (error[key] as string) : undefined)
    return Effect.fail(
      new ApiError(
        response.status,
        (text("type") ?? "api_error") as ErrorType,
        text("code") ?? "unknown",
        text("message") ?? "",
        { param: text("param") }
      )
    )
  })

export type PaymentsClient = Effect.Success<ReturnType<typeof makeClient>>

/** The client as a service over the platform's fetch. */
export const layerFetch = FetchHttpClient.layer satisfies Layer.Layer<HttpClient.HttpClient>

export { verifyWebhookSignature } from "./domain/Webhook.ts"
export { ApiError } from "./http/api/ApiError.ts"
export { PaymentsApi }
