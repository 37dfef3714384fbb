import { Effect } from "effect"
import { lookup } from "node:dns/promises"
import { isIP } from "node:net"
import { isPublicAddress } from "../domain/Network.ts"
import * as E from "./ApiError.ts"

const param = "webhook_url"

/**
 * A webhook URL must be absolute http(s), without credentials, and (unless private URLs are
 * allowed) every address its host resolves to must be public. Checked again at delivery time,
 * since DNS can change.
 */
export const validateWebhookUrl = (text: string, allowPrivate: boolean): Effect.Effect<URL, E.ApiError> =>
  Effect.gen(function*() {
    let url: URL
    try {
      url = new URL(text)
    } catch {
      return yield* Effect.fail(E.validationFailed(param, "webhook_url must be an absolute http or https URL."))
    }
    if (url.protocol !== "http:" && url.protocol !== "https:") {
      return yield* Effect.fail(E.validationFailed(param, "webhook_url must be an absolute http or https URL."))
    }
    if (url.username !== "" || url.password !== "") {
      return yield* Effect.fail(E.validationFailed(param, "webhook_url must not carry credentials."))
    }
    if (allowPrivate) return url
    const host = url.hostname.replace(/^\[|\]$/g, "")
    const addresses = isIP(host) !== 0
      ? [host]
      : yield* Effect.tryPromise(() => lookup(host, { all: true, verbatim: true })).pipe(
        Effect.map((found) => found.map((a) => a.address)),
        Effect.timeout("5 seconds"),
        Effect.mapError(() => E.validationFailed(param, `webhook_url host '${host}' could not be resolved.`))
      )
    if (addresses.length === 0 || !addresses.every(isPublicAddress)) {
      return yield* Effect.fail(E.validationFailed(
        param,
        `webhook_url host '${host}' resolves to a loopback, private or link-local address; set WEBHOOK_ALLOW_PRIVATE_URLS=true to allow it.`
      ))
    }
    return url
  })
