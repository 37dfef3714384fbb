import { createHmac } from "node:crypto"
import { request } from "node:http"

/** The signature header the service's dispatcher writes: HMAC-SHA256 of `t.body` under `secret`. */
export const signedWith = (secret: string) => (body: string, t: number) =>
  `t=${t},v1=${createHmac("sha256", secret).update(`${t}.${body}`).digest("hex")}`

/**
 * POSTs an event to a webhook endpoint as the service's dispatcher does (its headers, attempt
 * number and signature); resolves with the status, or null when the connection dropped.
 */
export const postEvent = (
  url: string,
  event: { readonly id: string },
  attempt: number,
  signature: (body: string, t: number) => string
) =>
  new Promise<number | null>((done) => {
    const body = JSON.stringify(event)
    const t = Math.floor(Date.now() / 1000)
    const target = new URL(url)
    const sent = request({
      host: target.hostname,
      port: target.port,
      path: target.pathname,
      method: "POST",
      headers: {
        "content-type": "application/json",
        "x-service-signature": signature(body, t),
        "x-service-event-id": event.id,
        "x-service-delivery-id": `whd_${event.id}`,
        "x-service-delivery-attempt": String(attempt)
      }
    }, (response) => {
      response.resume()
      response.on("end", () => done(response.statusCode ?? null))
    })
    sent.on("error", () => done(null))
    sent.end(body)
  })
