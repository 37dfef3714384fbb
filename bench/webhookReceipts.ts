/**
 * What the webhook bench's receivers saw, held against what the dispatcher recorded. Delivery is
 * at least once: a receiver can get an attempt whose answer does not reach the dispatcher in time
 * (it times out, or the connection fails after the request arrived), and the retry brings the
 * event again. Those receipts are allowed and counted apart; a receipt no recorded failure
 * explains is a duplicate, a bug. Pure: the bench and its test feed it plain records.
 */
import type { Delivery } from "../src/domain/Webhook.ts"

/** One POST as a receiver got it (its headers, and when it came and was answered). */
export interface Receipt {
  readonly eventId: string
  readonly deliveryId: string
  /** `X-Service-Delivery-Attempt`. */
  readonly attempt: number
  readonly receivedMs: number
  /** When the receiver wrote its answer (null: not answered yet when the run ended). */
  readonly answeredMs: number | null
}

export type DuplicateKind =
  /** A second POST carrying an attempt number the same delivery already sent. */
  | "same_attempt_twice"
  /** The event came under a second delivery id, or the store holds two deliveries for it. */
  | "second_delivery_for_event"
  /** An attempt made after an earlier attempt of the delivery was recorded with a 2xx. */
  | "attempt_after_2xx"
  /** A later attempt although the attempt the receiver got before it is not recorded as failed. */
  | "unexplained"

export interface ReceiptCounts {
  /** Events to live endpoints. */
  readonly expected: number
  /** Of those, received at least once within the run. */
  readonly delivered: number
  /** Of those, whose delivery is recorded `succeeded` (a 2xx came back in time). */
  readonly acknowledged: number
  /** Events to live endpoints never received within the run (not "lost": the run ended first). */
  readonly notDeliveredWithinRun: number
  /** Receipts beyond an event's first after an attempt the receiver got but that timed out (at-least-once). */
  readonly redeliveredAfterTimeout: number
  /** ...after an attempt the receiver got but recorded as another failure, e.g. a connection error after the request arrived. */
  readonly redeliveredAfterOtherFailure: number
  /** Receipts that at-least-once does not explain: bugs. */
  readonly duplicates: Readonly<Record<DuplicateKind, number>> & { readonly total: number }
  /** Every attempt the receiver got that is recorded as timed out (retried or not yet): when it started and was answered (ms). */
  readonly timedOutReceived: ReadonlyArray<{ readonly startedMs: number; readonly answeredMs: number | null }>
  /** A line for each of the first duplicates, to find the cause. */
  readonly examples: ReadonlyArray<string>
}

const isTimeout = (error: string | null) => error !== null && error.startsWith("timeout")
const is2xx = (status: number | null) => status !== null && status >= 200 && status < 300

/**
 * Classifies every receipt beyond the first of its event (by attempt number).
 * `liveEventIds`: the events sent to endpoints that listen; `deliveries`: the store's, at the end.
 */
export const classifyReceipts = (
  receipts: ReadonlyArray<Receipt>,
  deliveries: ReadonlyArray<Delivery>,
  liveEventIds: ReadonlySet<string>,
  exampleLimit = 10
): ReceiptCounts => {
  const deliveriesOfEvent = new Map<string, Array<Delivery>>()
  for (const d of deliveries) {
    const list = deliveriesOfEvent.get(d.eventId)
    if (list === undefined) deliveriesOfEvent.set(d.eventId, [d])
    else list.push(d)
  }
  const deliveryById = new Map(deliveries.map((d) => [d.id, d]))
  const receiptsOfEvent = new Map<string, Array<Receipt>>()
  for (const r of receipts) {
    const list = receiptsOfEvent.get(r.eventId)
    if (list === undefined) receiptsOfEvent.set(r.eventId, [r])
    else list.push(r)
  }

  const duplicates: Record<DuplicateKind, number> = {
    same_attempt_twice: 0,
    second_delivery_for_event: 0,
    attempt_after_2xx: 0,
    unexplained: 0
  }
  const examples: Array<string> = []
  const duplicate = (kind: DuplicateKind, text: () => string) => {
    duplicates[kind]++
    if (examples.length < exampleLimit) examples.push(`${kind}: ${text()}`)
  }
  let redeliveredAfterTimeout = 0
  let redeliveredAfterOtherFailure = 0
  const timedOutReceived: Array<{ startedMs: number; answeredMs: number | null }> = []
  const describe = (d: Delivery | undefined) =>
    d === undefined
      ? "no delivery record"
      : `recorded attempts ${
        JSON.stringify(d.attempts.map((a) => [a.attempt, a.responseStatus ?? a.error]))
      }, status ${d.status}`

  for (const r of receipts) {
    const recorded = deliveryById.get(r.deliveryId)?.attempts.find((a) => a.attempt === r.attempt)
    if (recorded !== undefined && isTimeout(recorded.error)) {
      timedOutReceived.push({ startedMs: recorded.at, answeredMs: r.answeredMs })
    }
  }
  for (const [eventId, stored] of deliveriesOfEvent) {
    if (stored.length > 1) {
      duplicate(
        "second_delivery_for_event",
        () => `${eventId} has ${stored.length} deliveries in the store (${stored.map((d) => d.id).join(", ")})`
      )
    }
  }
  for (const [eventId, arrived] of receiptsOfEvent) {
    // By attempt number (then arrival): an attempt that timed out can still reach the receiver
    // after the retry that followed it did.
    const list = [...arrived].sort((a, b) => a.attempt - b.attempt || a.receivedMs - b.receivedMs)
    const first = list[0]!
    const seenAttempts = new Set<number>([first.attempt])
    let previous = first
    for (const r of list.slice(1)) {
      const delivery = deliveryById.get(r.deliveryId)
      if (r.deliveryId !== first.deliveryId) {
        duplicate("second_delivery_for_event", () => `${eventId} came as ${first.deliveryId} and as ${r.deliveryId}`)
      } else if (seenAttempts.has(r.attempt)) {
        duplicate(
          "same_attempt_twice",
          () => `${r.deliveryId} attempt ${r.attempt} received twice; ${describe(delivery)}`
        )
      } else if (
        delivery !== undefined && delivery.attempts.some((a) => a.attempt < r.attempt && is2xx(a.responseStatus))
      ) {
        duplicate("attempt_after_2xx", () => `${r.deliveryId} attempt ${r.attempt} after a 2xx; ${describe(delivery)}`)
      } else {
        // The attempt the receiver got before this one: its failure, as recorded, explains the retry.
        const before = delivery?.attempts.find((a) => a.attempt === previous.attempt)
        if (before !== undefined && isTimeout(before.error)) {
          redeliveredAfterTimeout++
        } else if (before !== undefined && !is2xx(before.responseStatus)) {
          redeliveredAfterOtherFailure++
        } else {
          duplicate(
            "unexplained",
            () =>
              `${r.deliveryId} attempt ${r.attempt} after attempt ${previous.attempt} the receiver got; ${
                describe(delivery)
              }`
          )
        }
      }
      seenAttempts.add(r.attempt)
      previous = r
    }
  }

  let delivered = 0
  let acknowledged = 0
  for (const eventId of liveEventIds) {
    if (receiptsOfEvent.has(eventId)) delivered++
    if ((deliveriesOfEvent.get(eventId) ?? []).some((d) => d.status === "succeeded")) acknowledged++
  }
  const total = duplicates.same_attempt_twice + duplicates.second_delivery_for_event + duplicates.attempt_after_2xx +
    duplicates.unexplained
  return {
    expected: liveEventIds.size,
    delivered,
    acknowledged,
    notDeliveredWithinRun: liveEventIds.size - delivered,
    redeliveredAfterTimeout,
    redeliveredAfterOtherFailure,
    duplicates: { ...duplicates, total },
    timedOutReceived,
    examples
  }
}

/** The bench's exit status: 1 on a duplicate (a bug), else 2 when a live event was not acknowledged within the run, else 0. */
export const exitStatus = (counts: ReceiptCounts) =>
  counts.duplicates.total > 0 ? 1 : counts.acknowledged < counts.expected ? 2 : 0
