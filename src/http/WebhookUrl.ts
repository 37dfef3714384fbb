import { Effect } from "effect"
import { isIP } from "node:net"
import { isPublicAddress } from "../domain/Network.ts"
import * as E from "./ApiError.ts"

const param = "webhook_url"

/** Names that always mean this machine (RFC 6761 section 6.3), whatever a resolver says. */
const isLocalhostName = (host: string) => {
  const name = host.toLowerCase().replace(/\.$/, "")
  return name === "localhost" || name.endsWith(".localhost") || name === "localhost.localdomain"
}

/**
 * A webhook URL must be absolute http(s), without credentials, and (unless private URLs are
 * allowed) its host must not be a loopback, private or link-local address literal nor a
 * localhost name. Nothing is resolved here: a name that does not resolve yet (offline, or a
 * host set up later) is accepted, because the addresses a name resolves to are checked where
 * they matter, on every connection (src/platform/WebhookTransport.ts), since DNS can change.
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
    // WHATWG URL parsing has already turned every IPv4 spelling (decimal, octal, hex, short) into a dotted quad.
    const host = url.hostname.replace(/^\[|\]$/g, "")
    const literal = isIP(host) !== 0
    if (isLocalhostName(host) || (literal && !isPublicAddress(host))) {
      return yield* Effect.fail(E.validationFailed(
        param,
        `webhook_url host '${host}' is a loopback, private or link-local address; set WEBHOOK_ALLOW_PRIVATE_URLS=true to allow it.`
      ))
    }
    return url
  })
