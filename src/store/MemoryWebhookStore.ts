import { Effect, Layer } from "effect"
import type { Merchant } from "../domain/Merchant.ts"
import type { PaymentEvent } from "../domain/Payment.ts"
import { type Delivery, eventPayload, isOpen } from "../domain/Webhook.ts"
import { MinHeap } from "../platform/MinHeap.ts"
import type { MemoryState } from "./MemoryStore.ts"
import type { PageRequest } from "./Store.ts"
import { emptyCounts, WebhookStore, type WebhookStoreShape } from "./WebhookStore.ts"

interface DeliveryRow {
  /** The delivery; once it has ended and its payload is its event's body, with an empty payload (see `source`). */
  delivery: Delivery
  leaseToken: string | null
  leaseUntil: string | null
  /** The event the delivery was made from (null: a test event, or unknown). */
  readonly source: PaymentEvent | null
  /**
   * The payload was dropped when the delivery ended: it is `eventPayload(source)`, byte for
   * byte (checked before dropping), so reads rebuild it. An ended delivery is only read again
   * (GET, a resend), never sent as it is; half a million payloads would otherwise stay in memory
   * for 100,000 simulated payments, where PostgreSQL keeps them on disk.
   */
  payloadDropped: boolean
}

/** The webhook part of the memory store's state (kept in MemoryState so a "restart" keeps it). */
export interface WebhookMemoryState {
  readonly deliveries: Map<string, DeliveryRow>
  readonly deliveryByEvent: Set<string>
  readonly previousSecrets: Map<string, { readonly secret: string; readonly until: string }>
  /**
   * When each open delivery next needs the dispatcher (its attempt time, or its lease expiry),
   * as a min-heap by (at, id). Entries go stale when a delivery changes; they are dropped
   * when they surface, so claiming costs O(k log n) instead of a scan of every delivery.
   */
  readonly due: MinHeap<DueEntry>
  /** Open ordered deliveries by payment and URL: a delivery waits while an earlier one is open. */
  readonly openInOrder: Map<string, Set<DeliveryRow>>
}

interface DueEntry {
  readonly at: string
  readonly id: string
}

const before = (a: DueEntry, b: DueEntry) => a.at < b.at || (a.at === b.at && a.id < b.id)

export const emptyWebhookState = (): WebhookMemoryState => ({
  deliveries: new Map(),
  deliveryByEvent: new Set(),
  previousSecrets: new Map(),
  due: new MinHeap(before),
  openInOrder: new Map()
})

const newestFirst = (a: Delivery, b: Delivery) =>
  a.createdAt < b.createdAt ? 1 : a.createdAt > b.createdAt ? -1 : a.id < b.id ? 1 : a.id > b.id ? -1 : 0

const paginate = <A>(rows: ReadonlyArray<A>, page: PageRequest) => ({
  items: rows.slice((page.page - 1) * page.perPage, page.page * page.perPage),
  totalCount: rows.length
})

const leaseLive = (row: DeliveryRow, now: string) => row.leaseUntil !== null && row.leaseUntil > now
/** When an open delivery next needs the dispatcher: its attempt time, or its lease's end if later. */
const dueAt = (row: DeliveryRow) =>
  row.leaseUntil !== null && row.leaseUntil > row.delivery.nextAttemptAt! ? row.leaseUntil : row.delivery.nextAttemptAt!

/** Every operation is one synchronous step, so atomic by construction. */
export const memoryWebhookOperations = (state: MemoryState): WebhookStoreShape => {
  const w = state.webhooks
  /** Records when a (changed) delivery next needs attention; finished ones need none. */
  const schedule = (row: DeliveryRow) => {
    if (isOpen(row.delivery)) w.due.push({ at: dueAt(row), id: row.delivery.id })
  }
  /** The earliest entry that still describes its delivery, dropping stale ones on the way. */
  const peekDue = (): DueEntry | undefined => {
    while (w.due.size > 0) {
      const top = w.due.peek()!
      const row = w.deliveries.get(top.id)
      if (row !== undefined && isOpen(row.delivery) && dueAt(row) === top.at) return top
      w.due.pop()
    }
    return undefined
  }
  const orderKey = (delivery: Delivery) => (delivery.order === null ? null : `${delivery.order.paymentId} ${delivery.url}`)
  /** Keeps `openInOrder` true after a row's delivery changed (or appeared). */
  const track = (row: DeliveryRow) => {
    const key = orderKey(row.delivery)
    if (key === null) return
    const open = w.openInOrder.get(key)
    if (isOpen(row.delivery)) {
      if (open === undefined) w.openInOrder.set(key, new Set([row]))
      else open.add(row)
    } else if (open !== undefined) {
      open.delete(row)
      if (open.size === 0) w.openInOrder.delete(key)
    }
  }
  /** An earlier delivery of the same payment to the same URL is still open. */
  const waitsForEarlier = (row: DeliveryRow) => {
    const key = orderKey(row.delivery)
    if (key === null) return false
    const sequence = row.delivery.order!.sequence
    for (const other of w.openInOrder.get(key) ?? []) {
      if (other.delivery.order!.sequence < sequence) return true
    }
    return false
  }
  /** The delivery with its payload (rebuilt from its event if it was dropped). */
  const full = (row: DeliveryRow): Delivery =>
    row.payloadDropped ? { ...row.delivery, payload: eventPayload(row.source!) } : row.delivery
  /** Stores a delivery that changed; one that has ended keeps no payload its event can rebuild. */
  const store = (row: DeliveryRow, delivery: Delivery) => {
    row.payloadDropped = false
    row.delivery = delivery
    if (isOpen(delivery) || row.source === null || delivery.payload !== eventPayload(row.source)) return
    row.delivery = { ...delivery, payload: "" }
    row.payloadDropped = true
  }
  const insert = (delivery: Delivery, source: PaymentEvent | null) => {
    if (w.deliveryByEvent.has(delivery.eventId)) return false
    w.deliveryByEvent.add(delivery.eventId)
    const row: DeliveryRow = { delivery, leaseToken: null, leaseUntil: null, source, payloadDropped: false }
    w.deliveries.set(delivery.id, row)
    track(row)
    schedule(row)
    return true
  }
  const own = (merchantId: string, id: string) => {
    const row = w.deliveries.get(id)
    return row === undefined || row.delivery.merchantId !== merchantId ? null : row
  }
  return {
    drainOutbox: (limit, build) =>
      Effect.sync(() => {
        const events = state.outbox.splice(0, limit)
        const created: Array<Delivery> = []
        for (const event of events) {
          const merchant = state.merchants.get(event.merchantId)
          const delivery = merchant === undefined ? null : build(event, merchant)
          if (delivery !== null && insert(delivery, delivery.eventId === event.id ? event : null)) created.push(delivery)
        }
        return { drained: events.length, created }
      }),
    insertDelivery: (delivery) => Effect.sync(() => void insert(delivery, null)),
    getDelivery: (merchantId, id) =>
      Effect.sync(() => {
        const row = own(merchantId, id)
        return row === null ? null : full(row)
      }),
    listDeliveries: (merchantId, filter, page) =>
      Effect.sync(() => {
        const rows = [...w.deliveries.values()]
          .filter(({ delivery: d }) => d.merchantId === merchantId && (filter.status === undefined || d.status === filter.status))
          .sort((a, b) => newestFirst(a.delivery, b.delivery))
        const found = paginate(rows, page)
        return { items: found.items.map(full), totalCount: found.totalCount }
      }),
    claimDue: (now, lease, limit) =>
      Effect.sync(() => {
        const claimed: Array<Delivery> = []
        const waiting: Array<DueEntry> = []
        while (claimed.length < limit) {
          const top = peekDue()
          if (top === undefined || top.at > now) break
          w.due.pop()
          const row = w.deliveries.get(top.id)!
          if (leaseLive(row, now)) continue
          // Due, but behind an earlier open delivery of its payment: it stays due for a later claim.
          if (waitsForEarlier(row)) {
            waiting.push(top)
            continue
          }
          row.leaseToken = lease.token
          row.leaseUntil = lease.until
          schedule(row)
          claimed.push(full(row))
        }
        for (const entry of waiting) w.due.push(entry)
        return claimed
      }),
    renewLease: (id, token, now, until) =>
      Effect.sync(() => {
        const row = w.deliveries.get(id)
        if (row === undefined || row.leaseToken !== token || !leaseLive(row, now)) return false
        row.leaseUntil = until
        schedule(row)
        return true
      }),
    recordAttempt: (delivery, _attempt, token) =>
      Effect.sync(() => {
        const row = w.deliveries.get(delivery.id)
        if (row === undefined || row.leaseToken !== token) return false
        store(row, delivery)
        row.leaseToken = null
        row.leaseUntil = null
        track(row)
        schedule(row)
        return true
      }),
    releaseLease: (id, token) =>
      Effect.sync(() => {
        const row = w.deliveries.get(id)
        if (row !== undefined && row.leaseToken === token) {
          row.leaseToken = null
          row.leaseUntil = null
          schedule(row)
        }
      }),
    backlog: (now) =>
      Effect.sync(() => {
        let open = 0
        let due = 0
        let oldestDueAt: string | null = null
        for (const row of w.deliveries.values()) {
          if (!isOpen(row.delivery)) continue
          open++
          const at = row.delivery.nextAttemptAt!
          if (at <= now && !leaseLive(row, now)) {
            due++
            if (oldestDueAt === null || at < oldestDueAt) oldestDueAt = at
          }
        }
        return { open, due, oldestDueAt }
      }),
    nextDueAt: () => Effect.sync(() => peekDue()?.at ?? null),
    resend: (merchantId, id, decide) =>
      Effect.sync(() => {
        const row = own(merchantId, id)
        if (row === null) return { _tag: "NotFound" as const }
        const current = full(row)
        const next = decide(current)
        if (next === null) return { _tag: "Refused" as const, delivery: current }
        store(row, next)
        row.leaseToken = null
        row.leaseUntil = null
        track(row)
        schedule(row)
        return { _tag: "Resent" as const, delivery: next }
      }),
    stats: (merchantId, since) =>
      Effect.sync(() => {
        const counts = emptyCounts()
        const attempts: Array<{ at: string; ok: boolean }> = []
        for (const { delivery } of w.deliveries.values()) {
          if (delivery.merchantId !== merchantId) continue
          counts[delivery.status]++
          for (const a of delivery.attempts) attempts.push({ at: a.at, ok: a.error === null })
        }
        attempts.sort((a, b) => (a.at < b.at ? -1 : a.at > b.at ? 1 : 0))
        const recent = attempts.filter((a) => a.at >= since)
        const lastSuccess = attempts.filter((a) => a.ok).at(-1)?.at ?? null
        const lastFailure = attempts.filter((a) => !a.ok).at(-1)?.at ?? null
        return {
          counts,
          attemptsLastDay: recent.length,
          successfulAttemptsLastDay: recent.filter((a) => a.ok).length,
          lastSuccessAt: lastSuccess,
          lastFailureAt: lastFailure,
          consecutiveFailures: attempts.filter((a) => !a.ok && (lastSuccess === null || a.at > lastSuccess)).length
        }
      }),
    signingSecrets: (merchantId, now) =>
      Effect.sync(() => {
        const merchant = state.merchants.get(merchantId)
        if (merchant === undefined) return []
        const previous = w.previousSecrets.get(merchantId)
        return previous !== undefined && previous.until > now ? [merchant.webhookSecret, previous.secret] : [merchant.webhookSecret]
      }),
    rotateSecret: (merchantId, secret, previousUntil, now) =>
      Effect.sync(() => {
        const merchant = state.merchants.get(merchantId)
        if (merchant === undefined) return null
        const updated: Merchant = { ...merchant, webhookSecret: secret, updatedAt: now }
        state.merchants.set(merchantId, updated)
        w.previousSecrets.set(merchantId, { secret: merchant.webhookSecret, until: previousUntil })
        return updated
      })
  }
}

export const layerMemoryFrom = (state: MemoryState) => Layer.succeed(WebhookStore, memoryWebhookOperations(state))
