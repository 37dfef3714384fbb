import { createServer, type IncomingMessage } from "node:http"
import type { AddressInfo } from "node:net"

/** A notification as a processor POSTed it: the raw body and its `Stripe-Signature` header. */
export interface CaughtNotification {
  readonly body: string
  readonly signature: string
}

/**
 * A webhook endpoint on 127.0.0.1 that keeps what the sandbox processor POSTs to it, so a test can
 * wait for the notifications and deliver them (again) where it wants.
 */
export const startNotificationReceiver = async () => {
  const caught: Array<CaughtNotification> = []
  let waiting: Array<() => void> = []
  const server = createServer((request: IncomingMessage, response) => {
    const chunks: Array<Buffer> = []
    request.on("data", (chunk: Buffer) => chunks.push(chunk))
    request.on("end", () => {
      caught.push({
        body: Buffer.concat(chunks).toString("utf8"),
        signature: String(request.headers["stripe-signature"])
      })
      response.end("ok")
      for (const wake of waiting.splice(0)) wake()
    })
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  return {
    url: (path = "/") => `http://127.0.0.1:${(server.address() as AddressInfo).port}${path}`,
    caught: caught as ReadonlyArray<CaughtNotification>,
    /** The first `count` notifications, once that many arrived. */
    first: async (count: number) => {
      while (caught.length < count) await new Promise<void>((wake) => waiting.push(wake))
      return caught.slice(0, count)
    },
    close: async () => {
      waiting = []
      server.closeAllConnections()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    }
  }
}
