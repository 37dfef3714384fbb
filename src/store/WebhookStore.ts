import { Context } from "effect"
import type { Merchant } from "../domain/Merchant.ts"
import type { PaymentEvent } from "../domain/Payment.ts"
import type { Attempt, Delivery, DeliveryStats, DeliveryStatus } from "../domain/Webhook.ts"
import type { PageOf, PageRequest, StoreEffect } from "./Store.ts"

export interface Lease {
  /** Names the holder; only the holder may record an attempt. */
  readonly token: string
  readonly until: number
  /**
   * The instance holding it (`ServiceInstance`; null or absent: none named). Once that instance
   * stops beating, the lease is taken over at once, however long it had to run.
   */
  readonly owner?: string | null
}

export interface PollInput {
  readonly drainLimit: number
  readonly drainBatches: number
  readonly build: (event: PaymentEvent, merchant: Merchant) => Delivery | null
  readonly now: number
  /** Makes the claim's lease: called once, after the outbox is drained. */
  readonly lease: () => Lease
  readonly claimLimit: number
}

export interface PollResult {
  readonly drained: number
  readonly claimed: ReadonlyArray<Delivery>
  /**
   * The signing secrets at `now` of each claimed delivery's merchant, by merchant id, as
   * `renewLease` answers them: an attempt that starts soon after the claim signs with these.
   */
  readonly secrets: ReadonlyMap<string, ReadonlyArray<string>>
  /** The earliest moment work becomes due after the claim (null: none), as the store's `nextDueAt` answers it. */
  readonly nextDueAt: number | null
  /**
   * The claimed deliveries taken over from an instance's lease that was cut (the instance stopped
   * beating, its lease ran out, or a stop cut its attempt): their attempt may have reached the
   * endpoint, and the dispatcher records it as cut (`cutAttempt`) before it sends the next one. A
   * lease that named no instance is taken over when it ends, as if never held.
   */
  readonly takenOver: ReadonlySet<string>
}

/**
 * What `recordAttempt` answers, in its precedence: the lease was lost (nothing recorded); the
 * attempt was recorded; recorded, and the payment's next delivery claimed under the successor lease.
 */
export type RecordOutcome =
  | { readonly _tag: "LeaseLost" }
  | { readonly _tag: "Recorded" }
  | { readonly _tag: "RecordedWithSuccessor"; readonly successor: Delivery }

/** The outcomes without a payload, made once (an adapter answers one per attempt). */
export const leaseLost: RecordOutcome = { _tag: "LeaseLost" }
export const recorded: RecordOutcome = { _tag: "Recorded" }
export const recordedWithSuccessor = (successor: Delivery): RecordOutcome => ({
  _tag: "RecordedWithSuccessor",
  successor
})

export type ResendOutcome =
  | { readonly _tag: "NotFound" }
  | { readonly _tag: "Refused"; readonly delivery: Delivery }
  | { readonly _tag: "Resent"; readonly delivery: Delivery }

/**
 * Webhook persistence: deliveries, their attempts and leases, and the merchant's previous
 * signing secret during a rotation. Rules live in domain/Webhook.ts: the store commits the
 * deliveries the domain built, and hands out due work under a lease so that several
 * dispatchers (processes) never attempt the same delivery at once.
 */
export interface WebhookStoreShape {
  /**
   * Takes up to `limit` events from the outbox, asks `build` for each one's delivery (null: the
   * merchant has no webhook_url, the event is dropped) and commits both atomically.
   */
  readonly drainOutbox: (
    limit: number,
    build: (event: PaymentEvent, merchant: Merchant) => Delivery | null
  ) => StoreEffect<{ readonly drained: number; readonly created: ReadonlyArray<Delivery> }>
  readonly insertDelivery: (delivery: Delivery) => StoreEffect<void>
  readonly getDelivery: (merchantId: string, deliveryId: string) => StoreEffect<Delivery | null>
  readonly listDeliveries: (
    merchantId: string,
    filter: { readonly status?: DeliveryStatus | undefined },
    page: PageRequest
  ) => StoreEffect<PageOf<Delivery>>
  /**
   * One dispatcher poll in one call: drains the outbox as `drainOutbox` does (batches of
   * `drainLimit` events while they come full, at most `drainBatches`; none with 0), then leases,
   * under the lease `lease` makes once the outbox is drained (it mints a token: a store that
   * claims nothing may leave it uncalled), up to `claimLimit` deliveries due at
   * `now` that no live lease holds (FOR UPDATE SKIP LOCKED; a lease is live until it ends, or
   * until its owner stops beating), in due-time order, skipping one whose
   * payment has an earlier delivery to the same URL still open (or an earlier event still in the
   * outbox); and tells when work is due next after that claim, as `nextDueAt` would.
   */
  readonly poll: (input: PollInput) => StoreEffect<PollResult>
  /**
   * Extends a lease its holder still has (unexpired at `now`) and answers the signing secrets of
   * the delivery's merchant at `now`, read in the same call: what the attempt signs with, the
   * current one first, then a rotated-out one still in its grace period. Null when the lease was
   * lost.
   */
  readonly renewLease: (
    deliveryId: string,
    token: string,
    now: number,
    until: number
  ) => StoreEffect<ReadonlyArray<string> | null>
  /**
   * Commits an attempt and the delivery's new state, releasing the lease: `LeaseLost` (nothing
   * recorded) when `token` no longer holds it. With `successor` (for a delivery that has ended),
   * then, in the same call, leases under `successor.lease` the next delivery of its payment to its
   * URL, if that one is due at `successor.now`, no live lease holds it and no earlier one of its
   * payment is open (or still in the outbox), so the payment's next event goes at once without a
   * poll: `RecordedWithSuccessor` with it; `Recorded` when none was claimed (never one for an
   * unordered delivery, nor for one still open).
   */
  readonly recordAttempt: (
    delivery: Delivery,
    attempt: Attempt,
    token: string,
    successor?: { readonly now: number; readonly lease: Lease }
  ) => StoreEffect<RecordOutcome>
  /**
   * Gives a lease back. With `cutAt`, the holder's attempt was cut in the middle (a stop): the lease
   * ends at `cutAt` but stays named, so the next claim takes it over as cut (`PollResult.takenOver`);
   * without, nothing was sent and the delivery is claimed as if never leased.
   */
  readonly releaseLease: (deliveryId: string, token: string, cutAt?: number) => StoreEffect<void>
  /**
   * For the gauges: deliveries open (pending or retrying), how many of them are due at `now` and
   * unleased, and the earliest due time among those (null: none).
   */
  readonly backlog: (
    now: number
  ) => StoreEffect<{ readonly open: number; readonly due: number; readonly oldestDueAt: number | null }>
  /** The earliest moment work becomes due: an attempt time or a lease expiry (null: none). */
  readonly nextDueAt: () => StoreEffect<number | null>
  /** Changes an unleased delivery with `decide` (null refuses), for a manual resend. */
  readonly resend: (
    merchantId: string,
    deliveryId: string,
    decide: (delivery: Delivery) => Delivery | null
  ) => StoreEffect<ResendOutcome>
  readonly stats: (merchantId: string, since: number) => StoreEffect<DeliveryStats>
  /** Replaces the signing secret; the old one keeps signing until `previousUntil`. */
  readonly rotateSecret: (
    merchantId: string,
    secret: string,
    previousUntil: number,
    now: number
  ) => StoreEffect<Merchant | null>
}

export class WebhookStore extends Context.Service<WebhookStore, WebhookStoreShape>()("payments/WebhookStore") {}

export const emptyCounts = (): Record<DeliveryStatus, number> => ({ pending: 0, retrying: 0, succeeded: 0, failed: 0 })
