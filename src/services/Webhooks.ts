import { Clock, Context, Effect, Layer } from "effect"
import type { Merchant, MerchantWithSecret } from "../domain/Merchant.ts"
import { webhookSecretPrefix } from "../domain/Merchant.ts"
import type { EventType, PaymentEvent } from "../domain/Payment.ts"
import type { Delivery, DeliveryStats, DeliveryStatus } from "../domain/Webhook.ts"
import { deliveryIdOf, eventPayload, newDelivery, resend, sampleEvent } from "../domain/Webhook.ts"
import { Ids } from "../platform/Ids.ts"
import { isoAt } from "../platform/IsoTime.ts"
import type { PageOf, PageRequest, StoreUnavailable } from "../store/Store.ts"
import { Store } from "../store/Store.ts"
import { WebhookStore } from "../store/WebhookStore.ts"
import { InvalidState, NotFound } from "./Errors.ts"

/** How long a rotated-out signing secret keeps signing beside the new one. */
export const secretGraceMs = 24 * 3_600_000
const dayMs = 24 * 3_600_000

export interface WebhookStatus {
  readonly merchant: Merchant
  readonly stats: DeliveryStats
}

export interface WebhooksShape {
  /** The delivery of an outbox event at `now` (null: the merchant has no webhook_url), for a store's `poll` or `drainOutbox`. */
  readonly deliveryBuilder: (now: number) => (event: PaymentEvent, merchant: Merchant) => Delivery | null
  /** A sample event of `eventType` sent through the same pipeline. */
  readonly sendTest: (
    merchantId: string,
    eventType: EventType
  ) => Effect.Effect<Delivery, NotFound | InvalidState | StoreUnavailable>
  readonly list: (
    merchantId: string,
    filter: { readonly status?: DeliveryStatus | undefined },
    page: PageRequest
  ) => Effect.Effect<PageOf<Delivery>, StoreUnavailable>
  readonly get: (merchantId: string, deliveryId: string) => Effect.Effect<Delivery, NotFound | StoreUnavailable>
  readonly status: (merchantId: string) => Effect.Effect<WebhookStatus, NotFound | StoreUnavailable>
  /** Sends a `failed` delivery again now. */
  readonly retry: (
    merchantId: string,
    deliveryId: string
  ) => Effect.Effect<Delivery, NotFound | InvalidState | StoreUnavailable>
  /** A new signing secret; the old one keeps signing beside it for 24 hours. */
  readonly rotateSecret: (
    merchantId: string
  ) => Effect.Effect<
    { readonly merchant: MerchantWithSecret; readonly previousExpiresAt: number },
    NotFound | StoreUnavailable
  >
  /** Tells the dispatcher new work may be due (it also polls). */
  readonly wake: Effect.Effect<void>
  /** Waits for the next `wake` (the dispatcher's side). */
  readonly awaitWake: Effect.Effect<void>
  /**
   * Tells the dispatcher that a commit in this process wrote payment events (and so, for a
   * merchant with a URL, outbox rows): it polls soon instead of at its next interval, as a
   * `LISTEN/NOTIFY` would. Commits of other processes are found by the poll.
   */
  readonly eventsCommitted: Effect.Effect<void>
  /** Waits for the next `eventsCommitted` (the dispatcher's side). */
  readonly awaitEventsCommitted: Effect.Effect<void>
  /** The signals behind `wake` and `eventsCommitted`, for one wait on both and a timer (the dispatcher's poller). */
  readonly wakeSignal: Signal
  readonly eventsSignal: Signal
}

export interface Signal {
  readonly offer: Effect.Effect<void>
  /** `offer` as a plain call, for code that runs already (a commit's callback). */
  readonly notify: () => void
  readonly take: Effect.Effect<void>
  /** Takes a pending offer, if there is one (true), without waiting. */
  readonly tryTake: () => boolean
  /**
   * Calls `waiter` at the next offer (unless removed first with the function returned), as a
   * `take` waiting would be resumed: the first registered first. A pending offer is not looked at:
   * `tryTake` first.
   */
  readonly listen: (waiter: () => void) => () => void
}

export class Webhooks extends Context.Service<Webhooks, WebhooksShape>()("payments/Webhooks") {}

/**
 * A wake-up signal, as a `Queue.sliding<void>(1)` behaves, for less work per wait (the
 * dispatcher waits on two of them between every pair of polls): an offer resumes the waiter that
 * came first, or, with none waiting, is kept (one at most) for the next wait. A waiter
 * interrupted before it resumed leaves nothing behind.
 */
export const makeSignal = (): Signal => {
  let pending = false
  const waiters = new Set<() => void>()
  const notify = () => {
    for (const waiter of waiters) {
      waiters.delete(waiter)
      waiter()
      return
    }
    pending = true
  }
  const offer = Effect.sync(notify)
  const tryTake = () => {
    if (!pending) return false
    pending = false
    return true
  }
  const listen = (waiter: () => void) => {
    waiters.add(waiter)
    return () => void waiters.delete(waiter)
  }
  const take = Effect.suspend(() =>
    tryTake() ? Effect.void : Effect.callback<void>((resume) => {
      const remove = listen(() => resume(Effect.void))
      return Effect.sync(remove)
    })
  )
  return { offer, notify, take, tryTake, listen }
}

export const layer = Layer.effect(
  Webhooks,
  Effect.gen(function*() {
    const store = yield* Store
    const webhookStore = yield* WebhookStore
    const ids = yield* Ids
    const signal = makeSignal()
    const wake = signal.offer
    const committed = makeSignal()

    const merchantOf = (merchantId: string) =>
      Effect.flatMap(
        store.getMerchant(merchantId),
        (merchant) =>
          merchant === null
            ? Effect.fail(new NotFound({ resource: "merchant", id: merchantId }))
            : Effect.succeed(merchant)
      )
    const get = (merchantId: string, deliveryId: string) =>
      Effect.flatMap(
        webhookStore.getDelivery(merchantId, deliveryId),
        (delivery) =>
          delivery === null
            ? Effect.fail(new NotFound({ resource: "delivery", id: deliveryId }))
            : Effect.succeed(delivery)
      )

    // A delivery's id is its event's (`deliveryIdOf`): no id drawn per delivery, and a second
    // delivery of an event has the first one's id.
    // The payload is wire text: the event's time written as the API writes it.
    const deliveryBuilder = (now: number) => (event: PaymentEvent, merchant: Merchant): Delivery | null =>
      merchant.webhookUrl === null
        ? null
        : newDelivery({
          id: deliveryIdOf(event.id),
          merchantId: merchant.id,
          url: merchant.webhookUrl,
          event,
          payload: eventPayload(event, isoAt(event.createdAt)),
          now,
          order: { paymentId: event.paymentId, sequence: event.sequence }
        })

    return Webhooks.of({
      deliveryBuilder,
      sendTest: (merchantId, eventType) =>
        Effect.gen(function*() {
          const merchant = yield* merchantOf(merchantId)
          if (merchant.webhookUrl === null) {
            return yield* new InvalidState({
              status: "no_webhook_url",
              message: "The merchant has no webhook_url; set one with PATCH /api/v1/merchants/me first."
            })
          }
          const now = yield* Clock.currentTimeMillis
          const event = sampleEvent({
            eventId: ids.mint("event"),
            paymentId: `pay_test_${ids.mint("payment").slice(4)}`,
            merchantId,
            type: eventType,
            now
          })
          const delivery = newDelivery({
            id: deliveryIdOf(event.id),
            merchantId,
            url: merchant.webhookUrl,
            event,
            payload: eventPayload(event, isoAt(event.createdAt)),
            now
          })
          yield* webhookStore.insertDelivery(delivery)
          yield* wake
          return delivery
        }),
      list: (merchantId, filter, page) => webhookStore.listDeliveries(merchantId, filter, page),
      get,
      status: (merchantId) =>
        Effect.gen(function*() {
          const merchant = yield* merchantOf(merchantId)
          const now = yield* Clock.currentTimeMillis
          const stats = yield* webhookStore.stats(merchantId, now - dayMs)
          return { merchant, stats }
        }),
      retry: (merchantId, deliveryId) =>
        Effect.gen(function*() {
          const now = yield* Clock.currentTimeMillis
          const outcome = yield* webhookStore.resend(merchantId, deliveryId, (delivery) => resend(delivery, now))
          if (outcome._tag === "NotFound") return yield* new NotFound({ resource: "delivery", id: deliveryId })
          if (outcome._tag === "Refused") {
            return yield* new InvalidState({
              status: outcome.delivery.status,
              message: `The delivery is ${outcome.delivery.status}; only a failed delivery can be retried.`
            })
          }
          yield* wake
          return outcome.delivery
        }),
      rotateSecret: (merchantId) =>
        Effect.gen(function*() {
          const now = yield* Clock.currentTimeMillis
          const previousExpiresAt = now + secretGraceMs
          const secret = ids.secret(webhookSecretPrefix)
          const merchant = yield* webhookStore.rotateSecret(merchantId, secret, previousExpiresAt, now)
          if (merchant === null) return yield* new NotFound({ resource: "merchant", id: merchantId })
          return { merchant: { ...merchant, webhookSecret: secret }, previousExpiresAt }
        }),
      wake,
      awaitWake: signal.take,
      eventsCommitted: committed.offer,
      awaitEventsCommitted: committed.take,
      wakeSignal: signal,
      eventsSignal: committed
    })
  })
)
