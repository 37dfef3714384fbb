import { createServer, IncomingMessage, ServerResponse } from "node:http"
import type { Duplex } from "node:stream"
import { makeIds, pooledRandomBytes } from "../../platform/Ids.ts"

/**
 * Node's `ServerResponse` with one change: the callback of `end(body, callback)` is called also
 * when the response closes without finishing (the client hung up), not only on `finish`.
 *
 * Node calls that callback on `finish` alone, and a response whose connection closed before the
 * answer was flushed never finishes: the callback is lost. @effect/platform-node writes every
 * answer with `end(body, callback)` inside an `Effect.callback` and waits for that callback, in the
 * request's uninterruptible tail (`HttpApp.toHandled` runs uninterruptibly; only the route
 * handler is made interruptible). A client that hung up as its handler was answering (its
 * interrupt reached the fiber after the handler's interruptible part, so it was only recorded)
 * left the request's fiber waiting for ever on a closed connection: in flight past
 * REQUEST_DEADLINE (which bounds only the wait for a flow) and through the whole SHUTDOWN_GRACE
 * at a stop (docs/operations.md). The platform interrupts a request on `close` only while
 * `writableEnded` is false, which cannot help a fiber that is uninterruptible or already in `end`.
 */
export class HangUpSafeResponse<Request extends IncomingMessage = IncomingMessage> extends ServerResponse<Request> {
  override end(...args: Array<unknown>): this {
    const at = args.findIndex((arg) => typeof arg === "function")
    if (at === -1) return super.end(...(args as [unknown]))
    const callback = args[at] as (error?: Error) => void
    let called = false
    const once = (error?: Error) => {
      if (called) return
      called = true
      this.off("close", onClose)
      callback(error)
    }
    const onClose = () => once()
    const closedAlready = this.destroyed
    if (!closedAlready) this.once("close", onClose)
    args[at] = once
    super.end(...(args as [unknown]))
    // Closed before `end`: no `finish` and no `close` will come.
    if (closedAlready) process.nextTick(once)
    return this
  }
}

/** What a request Node's parser refused is answered with (CONTRACT section 3's envelope), by the parser's error code. */
const parserRefusal = (
  code: string | undefined
): { readonly status: number; readonly reason: string; readonly code: string; readonly message: string } => {
  switch (code) {
    case "HPE_HEADER_OVERFLOW":
      return {
        status: 431,
        reason: "Request Header Fields Too Large",
        code: "headers_too_large",
        message: "The request's headers are over the server's limit (16 KiB)."
      }
    case "HPE_CHUNK_EXTENSIONS_OVERFLOW":
      return {
        status: 413,
        reason: "Payload Too Large",
        code: "body_too_large",
        message: "The request's chunk extensions are over the server's limit."
      }
    case "ERR_HTTP_REQUEST_TIMEOUT":
      return {
        status: 408,
        reason: "Request Timeout",
        code: "request_timeout",
        message: "The request did not arrive whole in time."
      }
    default:
      return {
        status: 400,
        reason: "Bad Request",
        code: "malformed_request",
        message: "The HTTP request could not be parsed (request line, headers or framing)."
      }
  }
}

/**
 * Answers a request Node's HTTP parser refused (a malformed request line, headers too large) with
 * the JSON error envelope and `Connection: close`, where Node would write a bare status line: no
 * handler ever sees such a request, so this is the edge for it. A connection already unwritable
 * (reset) is only closed.
 */
const answerClientError = (mintRequestId: () => string) => (error: Error & { code?: string }, socket: Duplex) => {
  if (error.code === "ECONNRESET" || !socket.writable) {
    socket.destroy()
    return
  }
  const refusal = parserRefusal(error.code)
  const requestId = mintRequestId()
  const body = JSON.stringify({
    error: { type: "invalid_request_error", code: refusal.code, message: refusal.message, request_id: requestId }
  })
  socket.end(
    `HTTP/1.1 ${refusal.status} ${refusal.reason}\r\ncontent-type: application/json\r\ncontent-length: ${
      Buffer.byteLength(body)
    }\r\n` +
      `x-request-id: ${requestId}\r\nconnection: close\r\n\r\n${body}`
  )
}

/**
 * The service's HTTP server: Node's, with `HangUpSafeResponse` for its responses and the JSON
 * envelope for what its parser refuses.
 */
export const createHttpServer = () => {
  const ids = makeIds(pooledRandomBytes(), Date.now)
  const server = createServer({ ServerResponse: HangUpSafeResponse })
  server.on("clientError", answerClientError(() => ids.mint("request")))
  return server
}
