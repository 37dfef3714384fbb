import { getResponse } from "msw"
import { createHmac } from "node:crypto"
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"
import type { Faults, Processor, StripeEvent } from "./Processor.ts"

/**
 * The sandbox processor served over HTTP on 127.0.0.1: each request is handed to the msw
 * handlers of ./Processor.ts through msw's own `getResponse` (no other dependency), a network
 * error among their answers becomes a reset connection, and a few admin routes switch faults
 * (`GET|POST /__faults`), advance disputes (`POST /__advance`) and show what it holds
 * (`GET /__intents`, `GET /__events`). Its events (disputes) are sent as Stripe sends them, signed
 * (`Stripe-Signature: t=…,v1=…`) with the endpoint's secret, to a configured URL.
 */

export interface WebhookTarget {
  readonly url: string
  readonly secret: string
}

export interface ServerOptions {
  readonly processor: Processor
  /** 0: any free port. */
  readonly port: number
  readonly webhook?: WebhookTarget
  /** How often disputes are advanced (0: only by `POST /__advance`). */
  readonly tickMs?: number
  readonly random?: () => number
  readonly log?: (line: string) => void
}

export interface RunningProcessor {
  readonly port: number
  readonly url: string
  readonly close: () => Promise<void>
}

const maxBodyBytes = 1_000_000

const readBody = (request: IncomingMessage): Promise<Buffer> =>
  new Promise((resolve, reject) => {
    const chunks: Array<Buffer> = []
    let size = 0
    request.on("data", (chunk: Buffer) => {
      size += chunk.length
      if (size > maxBodyBytes) request.destroy(new Error("body too large"))
      else chunks.push(chunk)
    })
    request.on("end", () => resolve(Buffer.concat(chunks)))
    request.on("error", reject)
  })

const json = (response: ServerResponse, status: number, body: unknown) => {
  response.writeHead(status, { "content-type": "application/json" })
  response.end(JSON.stringify(body))
}

const faultNames = ["errorRate", "lostAnswerRate", "latencyMs", "duplicateRate", "searchLagMs"] as const

/** A partial `Faults` from an admin request's JSON, or the sentence saying what is wrong with it. */
export const parseFaults = (body: unknown): Partial<Faults> | string => {
  if (typeof body !== "object" || body === null) return "expected a JSON object"
  const faults: Record<string, number> = {}
  for (const [name, value] of Object.entries(body)) {
    if (!(faultNames as ReadonlyArray<string>).includes(name)) {
      return `unknown fault ${name} (known: ${faultNames.join(", ")})`
    }
    const isRate = name.endsWith("Rate")
    if (typeof value !== "number" || value < 0 || (isRate && value > 1) || (!isRate && value > 600_000)) {
      return `${name} must be ${isRate ? "a number from 0 to 1" : "a number of milliseconds from 0 to 600000"}`
    }
    faults[name] = value
  }
  return faults
}

/** `t=<seconds>,v1=<HMAC-SHA256 of "t.body" in hex>`, as Stripe signs. */
export const stripeSignature = (secret: string, timestampSeconds: number, body: string) =>
  `t=${timestampSeconds},v1=${createHmac("sha256", secret).update(`${timestampSeconds}.${body}`).digest("hex")}`

const sendWebhook = async (target: WebhookTarget, event: StripeEvent, log: (line: string) => void) => {
  const body = JSON.stringify(event)
  for (let attempt = 1; attempt <= 3; attempt++) {
    try {
      const response = await fetch(target.url, {
        method: "POST",
        headers: {
          "content-type": "application/json",
          "stripe-signature": stripeSignature(target.secret, Math.floor(Date.now() / 1000), body)
        },
        body,
        signal: AbortSignal.timeout(10_000)
      })
      await response.arrayBuffer()
      if (response.ok) return
      log(`webhook ${event.type} ${event.id}: ${target.url} answered ${response.status} (attempt ${attempt})`)
    } catch (error) {
      log(
        `webhook ${event.type} ${event.id}: ${
          error instanceof Error ? error.message : String(error)
        } (attempt ${attempt})`
      )
    }
    await new Promise((resolve) => setTimeout(resolve, 1_000 * attempt))
  }
}

const admin = async (options: ServerOptions, request: IncomingMessage, response: ServerResponse, path: string) => {
  const { processor } = options
  if (path === "/__faults" && request.method === "GET") return json(response, 200, processor.faults())
  if (path === "/__faults" && request.method === "POST") {
    let body: unknown
    try {
      body = JSON.parse((await readBody(request)).toString("utf8"))
    } catch {
      return json(response, 400, { error: "the body is not JSON" })
    }
    const faults = parseFaults(body)
    return typeof faults === "string"
      ? json(response, 400, { error: faults })
      : json(response, 200, processor.setFaults(faults))
  }
  if (path === "/__advance" && request.method === "POST") {
    processor.advance()
    return json(response, 200, { events: processor.events().length })
  }
  if (path === "/__intents" && request.method === "GET") return json(response, 200, processor.intents())
  if (path === "/__events" && request.method === "GET") return json(response, 200, processor.events())
  return json(response, 404, { error: `no admin route ${request.method} ${path}` })
}

const serve =
  (options: ServerOptions, base: () => string) => async (request: IncomingMessage, response: ServerResponse) => {
    const path = (request.url ?? "/").split("?")[0]!
    if (path.startsWith("/__")) return admin(options, request, response, path)
    const body = request.method === "GET" || request.method === "HEAD" ? undefined : await readBody(request)
    const headers = new Headers()
    for (const [name, value] of Object.entries(request.headers)) {
      if (typeof value === "string") headers.set(name, value)
      else if (Array.isArray(value)) { for (const item of value) headers.append(name, item) }
    }
    const mocked = await getResponse(
      options.processor.handlers,
      new Request(`${base()}${request.url ?? "/"}`, {
        method: request.method ?? "GET",
        headers,
        ...(body === undefined ? {} : { body: new Uint8Array(body) })
      })
    )
    if (mocked === undefined) {
      return json(response, 404, {
        error: { type: "invalid_request_error", message: `Unrecognized request URL (${request.method}: ${path}).` }
      })
    }
    // A network error (the fault that loses an answer): the client sees its connection reset.
    if (mocked.type === "error") return void request.socket.destroy()
    response.writeHead(mocked.status, Object.fromEntries(mocked.headers))
    response.end(Buffer.from(await mocked.arrayBuffer()))
  }

export const startProcessorServer = (options: ServerOptions): Promise<RunningProcessor> =>
  new Promise((resolve, reject) => {
    const log = options.log ?? ((line: string) => process.stderr.write(`${line}\n`))
    const random = options.random ?? Math.random
    let url = ""
    const handle = serve(options, () => url)
    const server: Server = createServer((request, response) => {
      handle(request, response).catch((error) => {
        log(`sandbox processor: ${error instanceof Error ? error.message : String(error)}`)
        if (!response.headersSent) {
          json(response, 500, { error: { type: "api_error", message: "sandbox processor failure" } })
        } else response.destroy()
      })
    })
    const target = options.webhook
    if (target !== undefined) {
      options.processor.onEvent((event) => {
        const copies = random() < options.processor.faults().duplicateRate ? 2 : 1
        for (let i = 0; i < copies; i++) void sendWebhook(target, event, log)
      })
    }
    const tick = options.tickMs !== undefined && options.tickMs > 0
      ? setInterval(() => options.processor.advance(), options.tickMs)
      : null
    tick?.unref()
    server.on("error", reject)
    server.listen(options.port, "127.0.0.1", () => {
      const port = (server.address() as AddressInfo).port
      url = `http://127.0.0.1:${port}`
      resolve({
        port,
        url,
        close: () =>
          new Promise<void>((done) => {
            if (tick !== null) clearInterval(tick)
            server.closeAllConnections()
            server.close(() => done())
          })
      })
    })
  })
