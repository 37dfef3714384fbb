/**
 * The wire as the driver sees it: a client that sends one request and tells what became of it.
 * Its own module so that the clients (Transport.ts, NetClient.ts) and what records their requests
 * share it without importing each other.
 */
import type { WireRequest, WireResponse } from "./Contract.ts"

/** What became of one request on the wire. */
export type WireOutcome =
  /**
   * `socketWaitMs`: from the send to a socket ready to write on (waiting in the client's queue
   * for a free socket, and the connect of a new one); the rest of the exchange is the service's time.
   * Absent from clients that do not measure it.
   */
  | { readonly _tag: "Answered"; readonly response: WireResponse; readonly socketWaitMs?: number }
  /** The connection was refused: nothing was sent (no process listens there), so it may go elsewhere. */
  | { readonly _tag: "Refused" }
  /** Sent (or perhaps sent), then no answer: reset, dropped or timed out. Its outcome is unknown. */
  | { readonly _tag: "Lost" }

/** The wire alone: one request and what became of it. */
export interface WireClient {
  send(request: WireRequest): Promise<WireOutcome>
  close(): void
}
