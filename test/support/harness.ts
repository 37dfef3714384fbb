import { Agent, request as httpRequest } from "node:http"
import type { Transport, WireRequest, WireResponse } from "../../bench/harness/Contract.ts"
import { type ServiceProcess, startService } from "./service.ts"

/**
 * A small keep-alive Transport for the harness's scenarios in tests (the harness's own, with
 * latency recording, is bench/harness/Transport.ts): resolves null when the connection drops or
 * `timeoutMs` passes, as the Contract says. Counts what it sent.
 */
export const testTransport = (
  baseUrl: string,
  timeoutMs = 15_000
): Transport & { readonly sent: () => number; readonly close: () => void } => {
  const agent = new Agent({ keepAlive: true, maxSockets: 32 })
  const url = new URL(baseUrl)
  let sent = 0
  return {
    sent: () => sent,
    close: () => agent.destroy(),
    send: (wire: WireRequest): Promise<WireResponse | null> =>
      new Promise((done) => {
        sent++
        const headers: Record<string, string> = { ...wire.headers }
        if (wire.body !== null) headers["content-length"] = String(Buffer.byteLength(wire.body))
        const request = httpRequest({
          agent,
          host: url.hostname,
          port: url.port,
          method: wire.method,
          path: wire.path,
          headers
        }, (response) => {
          const chunks: Array<Buffer> = []
          response.on("data", (chunk: Buffer) => chunks.push(chunk))
          response.on("end", () => {
            const out: Record<string, string> = {}
            for (const [name, value] of Object.entries(response.headers)) {
              if (typeof value === "string") out[name] = value
            }
            done({ status: response.statusCode ?? 0, headers: out, body: Buffer.concat(chunks).toString("utf8") })
          })
          response.on("error", () => done(null))
        })
        request.setTimeout(timeoutMs, () => request.destroy())
        request.on("error", () => done(null))
        request.end(wire.body ?? undefined)
      })
  }
}

/**
 * The service as `src/main.ts serve` runs it, or (with `entry`) a test entry point that builds
 * the same layers with a planted bug (bench/harness/PlantedService.ts).
 */
export const startServiceEntry = (
  entry: string,
  databaseUrl: string,
  extra: Record<string, string>
): Promise<ServiceProcess> => startService(databaseUrl, extra, entry)
