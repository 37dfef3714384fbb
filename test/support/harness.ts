import { spawn } from "node:child_process"
import { Agent, request as httpRequest } from "node:http"
import { resolve } from "node:path"
import type { Transport, WireRequest, WireResponse } from "../../bench/harness/Contract.ts"
import { freePort } from "../../src/platform/Database.ts"
import { eventually } from "./app.ts"
import { type ServiceProcess, serviceEnv } from "./service.ts"

/**
 * A small keep-alive Transport for the harness's scenarios in tests (the harness's own, with
 * latency recording, is bench/harness/Transport.ts): resolves null when the connection drops or
 * `timeoutMs` passes, as the Contract says. Counts what it sent.
 */
export const testTransport = (baseUrl: string, timeoutMs = 15_000): Transport & { readonly sent: () => number; readonly close: () => void } => {
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
        const request = httpRequest({ agent, host: url.hostname, port: url.port, method: wire.method, path: wire.path, headers }, (response) => {
          const chunks: Array<Buffer> = []
          response.on("data", (chunk: Buffer) => chunks.push(chunk))
          response.on("end", () => {
            const out: Record<string, string> = {}
            for (const [name, value] of Object.entries(response.headers)) if (typeof value === "string") out[name] = value
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

const root = resolve(import.meta.dirname, "../..")

/**
 * The service as `src/main.ts serve` runs it, or (with `entry`) a test entry point that builds
 * the same layers with a planted bug (test/support/planted-serve.ts).
 */
export const startServiceEntry = async (entry: string, databaseUrl: string, extra: Record<string, string>): Promise<ServiceProcess> => {
  const port = await freePort()
  const child = spawn(process.execPath, ["--import", "tsx", entry, "serve"], {
    cwd: root,
    env: serviceEnv(databaseUrl, { PORT: String(port), ...extra }),
    stdio: ["ignore", "ignore", "pipe"]
  })
  let output = ""
  child.stderr!.on("data", (chunk: Buffer) => (output += chunk.toString()))
  const exited = new Promise<number | string>((done) => child.once("close", (code, signal) => done(code ?? signal ?? "unknown")))
  const baseUrl = `http://127.0.0.1:${port}`
  await eventually(async () => {
    if (child.exitCode !== null) throw new Error(`the service exited ${child.exitCode}: ${output}`)
    const ready = await fetch(`${baseUrl}/readyz`).catch(() => null)
    return ready?.status === 200 ? true : undefined
  }, { timeoutMs: 60_000, intervalMs: 100, what: "the service to be ready" })
  return { child, baseUrl, port, stderr: () => output, exited }
}
