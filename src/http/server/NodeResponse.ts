import { createServer, IncomingMessage, ServerResponse } from "node:http"

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

/** The service's HTTP server: Node's, with `HangUpSafeResponse` for its responses. */
export const createHttpServer = () => createServer({ ServerResponse: HangUpSafeResponse })
