import { Effect, Layer } from "effect"
import type { Merchant } from "../domain/Merchant.ts"
import type { PaymentEvent } from "../domain/Payment.ts"
import type { EventType } from "../domain/Payment.ts"
import {
  type Attempt,
  type Delivery,
  deliveryIdOf,
  type DeliveryOrder,
  type DeliveryStatus,
  eventPayload,
  isOpen
} from "../domain/Webhook.ts"
import { isoAt } from "../platform/IsoTime.ts"
import { MinHeap } from "../platform/MinHeap.ts"
import type { PageRequest } from "./Store.ts"
import {
  emptyCounts,
  type Lease,
  leaseLost,
  recorded,
  recordedWithSuccessor,
  WebhookStore,
  type WebhookStoreShape
} from "./WebhookStore.ts"

/** A delivery without its payload. */
export type DeliveryRecord = Omit<Delivery, "payload">

/**
 * A stored delivery as the simulator's end-of-run audit reads it: no payload, read from the row's
 * compact form without rebuilding the delivery.
 */
export interface DeliveryAudit {
  readonly id: string
  readonly eventId: string
  readonly eventType: EventType
  readonly url: string
  readonly status: DeliveryStatus
  readonly order: DeliveryOrder | null
  readonly createdAt: number
  readonly firstFailedAt: number | null
  readonly attempts: ReadonlyArray<AttemptAudit>
}

export interface AttemptAudit {
  readonly attempt: number
  readonly at: number
  readonly responseStatus: number | null
  readonly error: string | null
}

const auditOf = (d: DeliveryRecord): DeliveryAudit => ({
  id: d.id,
  eventId: d.eventId,
  eventType: d.eventType,
  url: d.url,
  status: d.status,
  order: d.order,
  createdAt: d.createdAt,
  firstFailedAt: d.firstFailedAt,
  attempts: d.attempts.map((a) => ({
    attempt: a.attempt,
    at: a.at,
    responseStatus: a.responseStatus,
    error: a.error
  }))
})

/**
 * An ended delivery of an event the store holds is kept in as few fields as rebuild it exactly
 * (on its row: see `DeliveryRow`): the event gives the merchant, event id and type, order and
 * payload; the row keeps its id, URL, status and createdAt, and `times`: completedAt and
 * firstFailedAt (ms, NaN for null), then per attempt its time, response status (NaN: none),
 * duration and error (an index into the interned error texts, -1: none).
 */
type EndedStatus = "succeeded" | "failed"

/** Error texts of attempts, each kept once (a few distinct ones: "HTTP 503: ...", timeouts). */
export interface ErrorTexts {
  readonly texts: Array<string>
  readonly ids: Map<string, number>
}

/** A time as a compact row's `times` keeps it: NaN for null. */
const timeOrNaN = (at: number | null) => (at === null ? Number.NaN : at)
const timeOrNull = (at: number) => (Number.isNaN(at) ? null : at)

/** The payload of a delivery of `source`, as the service makes it (`Webhooks.deliveryBuilder`). */
const payloadOf = (source: PaymentEvent) => eventPayload(source, isoAt(source.createdAt))

/** What an ended delivery keeps in its compact form (see `rebuild`). */
interface EndedDelivery {
  readonly id: string
  readonly url: string
  readonly status: EndedStatus
  readonly createdAt: number
  /** When it completed and first failed (ms), then each attempt's time, status, duration and error text id. */
  readonly times: ReadonlyArray<number>
  /** The event it delivers. */
  readonly source: PaymentEvent
  readonly errors: ErrorTexts
}

/** An ended delivery rebuilt from its compact form: with its payload, or as the record without one. */
const rebuild = (
  { createdAt, errors, id, source, status, times: t, url }: EndedDelivery,
  payload: string | undefined
): Delivery | DeliveryRecord => {
  const attempts: Array<Attempt> = []
  for (let i = 2; i < t.length; i += 4) {
    attempts.push({
      attempt: attempts.length + 1,
      at: t[i]!,
      responseStatus: Number.isNaN(t[i + 1]!) ? null : t[i + 1]!,
      durationMs: t[i + 2]!,
      error: t[i + 3]! < 0 ? null : errors.texts[t[i + 3]!]!
    })
  }
  const common = {
    id,
    merchantId: source.merchantId,
    eventId: source.id,
    eventType: source.type,
    url
  }
  const rest = {
    status,
    attempts,
    nextAttemptAt: null,
    firstFailedAt: timeOrNull(t[1]!),
    createdAt,
    completedAt: timeOrNull(t[0]!),
    order: { paymentId: source.paymentId, sequence: source.sequence }
  }
  return payload === undefined ? { ...common, ...rest } : { ...common, payload, ...rest }
}

/**
 * The `times` of an ended delivery of `source` (its other kept fields are the delivery's own), or
 * null when it would not rebuild exactly (field by field, as `rebuild` makes it): checked on the
 * delivery itself, with no rebuild.
 */
const compact = (
  delivery: Delivery,
  source: PaymentEvent,
  errors: ErrorTexts,
  sourcePayload: string | null
): Array<number> | null => {
  const status = delivery.status
  if (status !== "succeeded" && status !== "failed") return null
  const order = delivery.order
  if (
    delivery.nextAttemptAt !== null || order === null || order.paymentId !== source.paymentId ||
    order.sequence !== source.sequence ||
    delivery.merchantId !== source.merchantId || delivery.eventId !== source.id || delivery.eventType !== source.type
  ) return null
  const attempts = delivery.attempts
  const times = new Array<number>(2 + 4 * attempts.length)
  let i = 2
  for (let n = 0; n < attempts.length; n++) {
    const attempt = attempts[n]!
    const at = attempt.at
    const status = attempt.responseStatus
    // A time or duration that is not equal to itself (NaN) would not compare equal once rebuilt.
    // (A delivery with a cut attempt, which a takeover leaves, rare, is kept whole.)
    if (
      at !== at || attempt.attempt !== n + 1 || attempt.durationMs !== attempt.durationMs ||
      (status !== null && !(status === status))
    ) return null
    if (attempt.cut !== undefined) return null
    let error = -1
    if (attempt.error !== null) {
      error = errors.ids.get(attempt.error) ?? errors.texts.length
      if (error === errors.texts.length) {
        errors.texts.push(attempt.error)
        errors.ids.set(attempt.error, error)
      }
    }
    times[i++] = at
    times[i++] = status ?? Number.NaN
    times[i++] = attempt.durationMs
    times[i++] = error
  }
  if (sourcePayload !== null ? delivery.payload !== sourcePayload : delivery.payload !== payloadOf(source)) {
    return null
  }
  times[0] = timeOrNaN(delivery.completedAt)
  times[1] = timeOrNaN(delivery.firstFailedAt)
  return times
}

/**
 * A row's delivery kept as it is (open, or ended but not kept compact), with its lease: what
 * only a delivery the dispatcher may still send needs. Dropped when the delivery is kept compact.
 */
class Live {
  leaseToken: string | null = null
  /** When the lease ends (-Infinity: no lease). */
  leaseUntil = Number.NEGATIVE_INFINITY
  /** The instance holding the lease (null: none named). */
  leaseOwner: string | null = null
  /**
   * The source event's payload text, while the row is kept whole, when the delivery was inserted
   * with it (checked then, as the event's text was just written: no second JSON text at the end).
   */
  sourcePayload: string | null = null
  /** Its `nextAttemptAt` (NaN: none, so never due); set by `keep`. */
  nextAttemptAt: number = Number.NaN

  constructor(public current: Delivery) {
    this.keep(current)
  }

  keep(delivery: Delivery) {
    this.current = delivery
    this.nextAttemptAt = timeOrNaN(delivery.nextAttemptAt)
  }
}

/**
 * One stored delivery. While it is open it is kept as it is (`live`: the dispatcher reads and
 * sends it). Once it has ended (succeeded, or failed for good) it is only read again (a GET, a
 * resend, an audit), so when it is a delivery of an event the store holds it is kept compact (the
 * fields below on the row itself, no lease, no boxed numbers) and rebuilt on read, exactly:
 * half a million deliveries with their payloads and attempt objects would otherwise stay in memory
 * for 100,000 simulated payments, where PostgreSQL keeps them on disk.
 */
export class DeliveryRow {
  /** The entry of the due heap the row counts on (see `schedule`), while it is in the heap. */
  entry: DueEntry | null = null
  private live: Live | null
  // While compact (`live` null): what it keeps besides its id and event (see `EndedStatus`).
  private endedUrl: string = ""
  private endedStatus: EndedStatus = "succeeded"
  private endedCreatedAt = 0
  private times: Array<number> = noTimes

  constructor(
    readonly id: string,
    delivery: Delivery,
    /** The event the delivery was made from (null: a test event, or unknown). */
    private readonly source: PaymentEvent | null,
    private readonly errors: ErrorTexts
  ) {
    const live = this.live = new Live(delivery)
    if (source !== null && delivery.payload === payloadOf(source)) live.sourcePayload = delivery.payload
  }

  /** Stores the delivery as it is now. */
  set(delivery: Delivery) {
    const live = this.live
    const times = this.source === null
      ? null
      : compact(delivery, this.source, this.errors, live === null ? null : live.sourcePayload)
    if (times === null) {
      if (live === null) this.live = new Live(delivery)
      else live.keep(delivery)
    } else {
      // (The callers clear the lease next: a compact row has none.)
      this.live = null
      this.endedUrl = delivery.url
      // (compact keeps only an ended delivery.)
      this.endedStatus = delivery.status as EndedStatus
      this.endedCreatedAt = delivery.createdAt
      this.times = times
    }
  }

  /** `until` null: no lease. */
  setLease(token: string | null, until: number | null, owner: string | null = null) {
    const live = this.live
    if (live === null) {
      // A compact row has no lease to clear (one to set would need the row whole: never asked).
      if (token === null && until === null) return
      throw new Error("store: a lease on an ended delivery")
    }
    live.leaseOwner = owner
    live.leaseToken = token
    live.leaseUntil = until ?? Number.NEGATIVE_INFINITY
  }

  get leaseToken(): string | null {
    return this.live === null ? null : this.live.leaseToken
  }
  get leaseOwner(): string | null {
    return this.live === null ? null : this.live.leaseOwner
  }
  /** When the lease ends (-Infinity: no lease). */
  get leaseUntil(): number {
    return this.live === null ? Number.NEGATIVE_INFINITY : this.live.leaseUntil
  }
  /** While open: its `nextAttemptAt` (NaN: none). */
  get nextAttemptAt(): number {
    return this.live === null ? Number.NaN : this.live.nextAttemptAt
  }

  /** The delivery, payload included. */
  get delivery(): Delivery {
    return this.live !== null ? this.live.current : (this.rebuild(payloadOf(this.source!)) as Delivery)
  }

  /** The delivery without its payload (cheaper for an ended one). */
  get record(): DeliveryRecord {
    return this.live !== null ? this.live.current : this.rebuild(undefined)
  }

  /** The delivery as the simulator's audit reads it (the same fields as `record`). */
  get audit(): DeliveryAudit {
    if (this.live !== null) return auditOf(this.live.current)
    const source = this.source!
    const t = this.times
    const attempts: Array<AttemptAudit> = []
    for (let i = 2; i < t.length; i += 4) {
      attempts.push({
        attempt: attempts.length + 1,
        at: t[i]!,
        responseStatus: Number.isNaN(t[i + 1]!) ? null : t[i + 1]!,
        error: t[i + 3]! < 0 ? null : this.errors.texts[t[i + 3]!]!
      })
    }
    return {
      id: this.id,
      eventId: source.id,
      eventType: source.type,
      url: this.endedUrl,
      status: this.endedStatus,
      order: { paymentId: source.paymentId, sequence: source.sequence },
      createdAt: this.endedCreatedAt,
      firstFailedAt: timeOrNull(t[1]!),
      attempts
    }
  }

  get merchantId() {
    return this.live !== null ? this.live.current.merchantId : this.source!.merchantId
  }
  get eventId() {
    return this.live !== null ? this.live.current.eventId : this.source!.id
  }
  get status(): DeliveryStatus {
    return this.live !== null ? this.live.current.status : this.endedStatus
  }
  get createdAt(): number {
    return this.live !== null ? this.live.current.createdAt : this.endedCreatedAt
  }
  /** Its place in its payment's order (only asked of an ordered delivery). */
  get sequence() {
    const live = this.live
    return live !== null ? live.current.order?.sequence ?? this.source!.sequence : this.source!.sequence
  }
  get url(): string {
    return this.live !== null ? this.live.current.url : this.endedUrl
  }
  /** The delivery rebuilt from the compact form (only while compact). */
  private rebuild(payload: string | undefined) {
    return rebuild({
      id: this.id,
      url: this.endedUrl,
      status: this.endedStatus,
      createdAt: this.endedCreatedAt,
      times: this.times,
      source: this.source!,
      errors: this.errors
    }, payload)
  }
  /**
   * The payment whose order it is in (null: unordered); its order is with the deliveries of that
   * payment to the same URL. (The payment id, already hashed by every map it keys, is the key of
   * the lists by order: no key text built and hashed per look-up.)
   */
  get orderPaymentId(): string | null {
    const live = this.live
    if (live === null) return this.source!.paymentId
    const d = live.current
    return d.order === null ? null : d.order.paymentId
  }
  /** Still has an attempt ahead of it (only an open delivery is kept as it is). */
  get open() {
    return this.live !== null && isOpen(this.live.current)
  }
  /** When an open delivery next needs the dispatcher: its attempt time, or its lease's end if later. */
  get dueAt() {
    const live = this.live!
    return live.leaseUntil > live.nextAttemptAt ? live.leaseUntil : live.nextAttemptAt
  }
}

/** The times of a row not kept compact (never read). */
const noTimes: Array<number> = []

/**
 * What the webhook store works on of the memory store's state (`MemoryState`, ./MemoryStore.ts,
 * which holds this and passes itself): the merchants (URLs and signing secrets), the outbox the
 * main store's commits fill, and the webhook part below.
 */
export interface SharedState {
  readonly merchants: Map<string, Merchant>
  readonly outbox: Array<PaymentEvent>
  readonly webhooks: WebhookMemoryState
  /** Service processes and the time each said it is alive until (leases' owners); absent: none beat. */
  readonly instances?: Map<string, number>
}

/** The webhook part of the memory store's state (kept in MemoryState so a "restart" keeps it). */
export interface WebhookMemoryState {
  readonly deliveries: Map<string, DeliveryRow>
  /**
   * One delivery per event (PostgreSQL's UNIQUE event_id) is kept by `deliveries` itself: the
   * service's deliveries have their event's id (`deliveryIdOf`), so a second delivery of an event
   * comes under the first one's id. Here are the events of the others only: a delivery stored
   * under an id of its own (tests make such), or whose row an id clash replaced. Empty in the
   * service, where a second table of every event (half a million keys at 100,000 payments) cost
   * a look-up that mostly misses the processor's caches per delivery.
   */
  readonly eventsOfOtherIds: Set<string>
  /**
   * The rows under a lease, by id: exactly those whose `leaseToken` is not null. An attempt's
   * renewal and record (and a give-back) look its row up here: a table of the few thousand rows
   * claimed at most, not of every delivery ever made (half a million at 100,000 payments, where a
   * look-up mostly misses the processor's caches).
   */
  readonly leased: Map<string, DeliveryRow>
  readonly previousSecrets: Map<string, { readonly secret: string; readonly until: number }>
  /**
   * When each open delivery next needs the dispatcher (its attempt time, or its lease expiry),
   * as a min-heap by (at, id). Entries go stale when a delivery changes; they are dropped
   * when they surface, so claiming costs O(k log n) instead of a scan of every delivery.
   */
  readonly due: MinHeap<DueEntry>
  /**
   * Open ordered deliveries by payment (to any URL: a payment's events usually go to one): a
   * delivery waits while an earlier one of its payment to its URL is open.
   */
  readonly openInOrder: Map<string, Array<DeliveryRow>>
  /**
   * Due deliveries found waiting for an earlier one of their payment and URL, by payment: out of
   * `due` until an open delivery of the key ends, then scheduled again. (Put back into `due`
   * instead, each would be popped and pushed by every claim while it waits: a payment whose
   * endpoint is down for hours keeps its later events waiting that long.)
   */
  readonly parked: Map<string, Array<DeliveryRow>>
  readonly errors: ErrorTexts
  /**
   * A delivery was inserted under an id already stored (the map's entry replaced): due entries
   * made before then may name a row the map no longer holds, so they are looked up by id from
   * then on, as the store did before entries kept their row.
   */
  replacedIds: boolean
}

interface DueEntry {
  readonly at: number
  readonly id: string
  /** The row it was made for (the map's row of `id`, unless `replacedIds`). */
  readonly row: DeliveryRow
}

const before = (a: DueEntry, b: DueEntry) => a.at < b.at || (a.at === b.at && a.id < b.id)

export const emptyWebhookState = (): WebhookMemoryState => ({
  deliveries: new Map(),
  eventsOfOtherIds: new Set(),
  leased: new Map(),
  previousSecrets: new Map(),
  due: new MinHeap(before),
  openInOrder: new Map(),
  parked: new Map(),
  errors: { texts: [], ids: new Map() },
  replacedIds: false
})

const newestFirst = (a: DeliveryRow, b: DeliveryRow) =>
  a.createdAt < b.createdAt ? 1 : a.createdAt > b.createdAt ? -1 : a.id < b.id ? 1 : a.id > b.id ? -1 : 0

const paginate = <A>(rows: ReadonlyArray<A>, page: PageRequest) => ({
  items: rows.slice((page.page - 1) * page.perPage, page.page * page.perPage),
  totalCount: rows.length
})

/**
 * Takes `row` out of a (short) list of rows, keeping the others in order; false when absent.
 * The lists of rows by payment and URL hold a few rows each: arrays, not sets.
 */
const removeFrom = (rows: Array<DeliveryRow>, row: DeliveryRow) => {
  const index = rows.indexOf(row)
  if (index < 0) return false
  rows.splice(index, 1)
  return true
}

const leaseLive = (row: DeliveryRow, now: number) => row.leaseUntil > now

/**
 * A merchant's signing secrets at `now`: the current one, then the previous one while its
 * overlap lasts: what `renewLease` answers; the simulated endpoints call it directly on every POST
 * they verify, without a fiber.
 */
export const signingSecretsOf = (state: SharedState, merchantId: string, now: number): ReadonlyArray<string> => {
  const merchant = state.merchants.get(merchantId)
  // (Held as given: never sealed here, so never null; see docs/operations.md, "Webhook signing secrets at rest".)
  if (merchant === undefined || merchant.webhookSecret === null) return []
  const previous = state.webhooks.previousSecrets.get(merchantId)
  return previous !== undefined && previous.until > now
    ? [merchant.webhookSecret, previous.secret]
    : [merchant.webhookSecret]
}

/** What a caller of the memory webhook store may watch (the simulator counts lost leases). */
export interface MemoryWebhookObserver {
  /** A renewal found its lease gone (expired, or another claim's): the attempt is not made. */
  readonly leaseLost?: () => void
}

/**
 * The webhook store over `state`. Every operation is one synchronous step, so atomic by
 * construction. `observer` is told of events inside the operation itself, so watching them adds
 * nothing to the caller's effect.
 */
export const memoryWebhookOperations = (
  state: SharedState,
  observer: MemoryWebhookObserver = {}
): WebhookStoreShape => {
  const w = state.webhooks
  const onLeaseLost = observer.leaseLost
  /** Sets or clears a row's lease, keeping `leased` true. */
  const setLease = (row: DeliveryRow, token: string | null, until: number | null, owner: string | null = null) => {
    row.setLease(token, until, owner)
    if (token === null) w.leased.delete(row.id)
    else w.leased.set(row.id, row)
  }
  /**
   * Records when a (changed) delivery next needs attention; finished ones need none. An open row
   * keeps one entry it counts on (`row.entry`) at or before its due time: when its due time moved
   * later (a claim's lease renewed, a retry due after the lease would have ended) that entry
   * stays, and is moved on to the due time when it surfaces, instead of a new entry per change.
   */
  const schedule = (row: DeliveryRow) => {
    if (!row.open) return
    const dueAt = row.dueAt
    if (row.entry !== null && row.entry.at <= dueAt) return
    w.due.push(row.entry = { at: dueAt, id: row.id, row })
  }
  /** Takes the top entry out of the heap (the caller has it). */
  const popDue = (top: DueEntry, row: DeliveryRow | undefined) => {
    w.due.pop()
    if (row !== undefined && row.entry === top) row.entry = null
  }
  /** The row an entry is for: its own, with no look-up by id (unless an id was ever stored twice). */
  const rowOf = (entry: DueEntry) => (w.replacedIds ? w.deliveries.get(entry.id) : entry.row)
  /** The earliest entry that still describes its delivery, dropping stale ones on the way. */
  const peekDue = (): DueEntry | undefined => {
    while (w.due.size > 0) {
      const top = w.due.peek()!
      const row = rowOf(top)
      if (row !== undefined && row.open && row.dueAt === top.at) return top
      const counted = row !== undefined && row.entry === top
      popDue(top, row)
      // The entry its row counted on, surfacing before the row is due: moved on to the due time.
      if (counted) schedule(row!)
    }
    return undefined
  }
  /** Keeps `openInOrder` true after a row's delivery changed (or appeared). */
  const track = (row: DeliveryRow) => {
    const paymentId = row.orderPaymentId
    if (paymentId === null) return
    const open = w.openInOrder.get(paymentId)
    if (row.open) {
      if (open === undefined) w.openInOrder.set(paymentId, [row])
      else if (!open.includes(row)) open.push(row)
    } else if (open !== undefined && removeFrom(open, row)) {
      if (open.length === 0) w.openInOrder.delete(paymentId)
      // An open delivery of the payment and URL ended: the ones parked behind it are due again
      // (one still behind another open delivery is parked again by the claim that finds it).
      // (Nearly always none parked at all: no look-up then.)
      const parked = w.parked.size === 0 ? undefined : w.parked.get(paymentId)
      if (parked !== undefined) {
        const url = row.url
        let kept = 0
        for (const waiting of parked) {
          if (waiting.url === url) schedule(waiting)
          else parked[kept++] = waiting
        }
        if (kept === 0) w.parked.delete(paymentId)
        else parked.length = kept
      }
    }
  }
  /** An earlier delivery of the same payment to the same URL is still open. */
  const waitsForEarlier = (row: DeliveryRow, paymentId: string) => {
    const open = w.openInOrder.get(paymentId)
    if (open === undefined) return false
    const sequence = row.sequence
    const url = row.url
    for (const other of open) {
      if (other.sequence < sequence && other.url === url) return true
    }
    return false
  }
  const insert = (delivery: Delivery, source: PaymentEvent | null) => {
    const id = delivery.id
    const eventId = delivery.eventId
    // (The look-up and the insert below find the same entry of the map: one cache miss, not two.)
    const existing = w.deliveries.get(id)
    if (existing !== undefined && existing.eventId === eventId) return false
    const others = w.eventsOfOtherIds
    if (id !== deliveryIdOf(eventId)) {
      // An id of its own: the event's delivery may be under either kind of id.
      if (others.has(eventId) || w.deliveries.get(deliveryIdOf(eventId))?.eventId === eventId) return false
      others.add(eventId)
    } else if (others.size > 0 && others.has(eventId)) return false
    const row = new DeliveryRow(id, delivery, source, w.errors)
    w.deliveries.set(id, row)
    if (existing !== undefined) {
      // An id clash (of ids made by hand): the map's entry is replaced, the event it was for
      // still has had its delivery.
      w.replacedIds = true
      others.add(existing.eventId)
      // The row replaced may hold a lease: the new one holds none.
      w.leased.delete(id)
    }
    track(row)
    schedule(row)
    return true
  }
  /** Drains up to `limit` outbox events into deliveries (those created pushed onto `created`, when given); the number drained. */
  const drain = (
    limit: number,
    build: (event: PaymentEvent, merchant: Merchant) => Delivery | null,
    created: Array<Delivery> | null
  ) => {
    const events = state.outbox.splice(0, limit)
    for (const event of events) {
      const merchant = state.merchants.get(event.merchantId)
      const delivery = merchant === undefined ? null : build(event, merchant)
      if (delivery !== null && insert(delivery, delivery.eventId === event.id ? event : null)) created?.push(delivery)
    }
    return events.length
  }
  /** Whether the instance `owner` beats at `now` (one never heard of does not). */
  const ownerAlive = (owner: string, now: number) => {
    const aliveUntil = state.instances?.get(owner)
    return aliveUntil !== undefined && aliveUntil > now
  }
  /**
   * A poll's claim at `now`, under the lease `makeLease` makes at its first claim (none made when
   * nothing is claimed). Rows under a live lease whose owner has stopped beating are taken over
   * first (found among the leased rows, which are few); then the due heap's. A row claimed while
   * it still holds an instance's token (its lease ended or its owner stopped) is `takenOver`; one
   * whose lease named no instance is claimed as if never leased.
   */
  const claim = (now: number, makeLease: () => Lease, limit: number, takenOver: Set<string>) => {
    const claimed: Array<Delivery> = []
    let lease: Lease | null = null
    const take = (row: DeliveryRow) => {
      if (row.leaseToken !== null && row.leaseOwner !== null) takenOver.add(row.id)
      if (lease === null) lease = makeLease()
      setLease(row, lease.token, lease.until, lease.owner ?? null)
      schedule(row)
      claimed.push(row.delivery)
    }
    if (state.instances !== undefined && state.instances.size > 0) {
      for (const row of [...w.leased.values()]) {
        if (claimed.length >= limit) break
        const owner = row.leaseOwner
        if (owner === null || !leaseLive(row, now) || ownerAlive(owner, now) || !(row.nextAttemptAt <= now)) {
          continue
        }
        const paymentId = row.orderPaymentId
        if (paymentId !== null && waitsForEarlier(row, paymentId)) continue
        take(row)
      }
    }
    while (claimed.length < limit) {
      const top = peekDue()
      if (top === undefined || top.at > now) break
      const row = rowOf(top)!
      popDue(top, row)
      if (leaseLive(row, now)) {
        schedule(row)
        continue
      }
      // Due, but behind an earlier open delivery of its payment: parked until one ends.
      const paymentId = row.orderPaymentId
      if (paymentId !== null && waitsForEarlier(row, paymentId)) {
        const parked = w.parked.get(paymentId)
        if (parked === undefined) w.parked.set(paymentId, [row])
        else if (!parked.includes(row)) parked.push(row)
        continue
      }
      take(row)
    }
    return claimed
  }
  /** `recordAttempt`'s successor claim: the next of the ended delivery's payment to its URL. */
  const claimNext = (delivery: Delivery, now: number, lease: Lease): Delivery | null => {
    if (delivery.order === null) return null
    const paymentId = delivery.order.paymentId
    const open = w.openInOrder.get(paymentId)
    if (open === undefined) return null
    const url = delivery.url
    let next: DeliveryRow | null = null
    for (const other of open) {
      const sequence = other.sequence
      if (sequence > delivery.order.sequence && other.url === url && (next === null || sequence < next.sequence)) {
        next = other
      }
    }
    if (next === null) return null
    // A row still holding an instance's token (a cut lease) is left to a poll, which records the cut.
    if (
      next.nextAttemptAt > now || leaseLive(next, now) || (next.leaseToken !== null && next.leaseOwner !== null)
    ) return null
    if (waitsForEarlier(next, paymentId)) return null
    setLease(next, lease.token, lease.until, lease.owner ?? null)
    schedule(next)
    return next.delivery
  }
  const own = (merchantId: string, id: string) => {
    const row = w.deliveries.get(id)
    return row === undefined || row.merchantId !== merchantId ? null : row
  }
  return {
    drainOutbox: (limit, build) =>
      Effect.sync(() => {
        const created: Array<Delivery> = []
        return { drained: drain(limit, build, created), created }
      }),
    poll: (input) =>
      Effect.sync(() => {
        let drained = 0
        for (let batch = 0; batch < input.drainBatches; batch++) {
          const taken = drain(input.drainLimit, input.build, null)
          drained += taken
          if (taken < input.drainLimit) break
        }
        const takenOver = new Set<string>()
        const claimed = claim(input.now, input.lease, input.claimLimit, takenOver)
        const secrets = new Map<string, ReadonlyArray<string>>()
        for (const delivery of claimed) {
          if (!secrets.has(delivery.merchantId)) {
            secrets.set(delivery.merchantId, signingSecretsOf(state, delivery.merchantId, input.now))
          }
        }
        const next = peekDue()
        return { drained, claimed, secrets, nextDueAt: next === undefined ? null : next.at, takenOver }
      }),
    insertDelivery: (delivery) => Effect.sync(() => void insert(delivery, null)),
    getDelivery: (merchantId, id) =>
      Effect.sync(() => {
        const row = own(merchantId, id)
        return row === null ? null : row.delivery
      }),
    listDeliveries: (merchantId, filter, page) =>
      Effect.sync(() => {
        const rows = [...w.deliveries.values()]
          .filter((row) =>
            row.merchantId === merchantId && (filter.status === undefined || row.status === filter.status)
          )
          .sort(newestFirst)
        const found = paginate(rows, page)
        return { items: found.items.map((row) => row.delivery), totalCount: found.totalCount }
      }),
    renewLease: (id, token, now, until) =>
      Effect.sync(() => {
        // A row not in `leased` holds no lease: no token matches it.
        const row = w.leased.get(id)
        if (row === undefined || row.leaseToken !== token || !leaseLive(row, now)) {
          onLeaseLost?.()
          return null
        }
        setLease(row, token, until, row.leaseOwner)
        schedule(row)
        return signingSecretsOf(state, row.merchantId, now)
      }),
    recordAttempt: (delivery, _attempt, token, successor) =>
      Effect.sync(() => {
        const row = w.leased.get(delivery.id)
        if (row === undefined || row.leaseToken !== token) return leaseLost
        row.set(delivery)
        setLease(row, null, null)
        track(row)
        schedule(row)
        const next = successor === undefined ? null : claimNext(delivery, successor.now, successor.lease)
        return next === null ? recorded : recordedWithSuccessor(next)
      }),
    releaseLease: (id, token, cutAt) =>
      Effect.sync(() => {
        const row = w.leased.get(id)
        if (row !== undefined && row.leaseToken === token) {
          if (cutAt === undefined) setLease(row, null, null)
          else if (cutAt < row.leaseUntil) setLease(row, token, cutAt, row.leaseOwner)
          schedule(row)
        }
      }),
    backlog: (now) =>
      Effect.sync(() => {
        let open = 0
        let due = 0
        let oldestDueAt = Number.POSITIVE_INFINITY
        for (const row of w.deliveries.values()) {
          if (!row.open) continue
          open++
          const at = row.nextAttemptAt
          if (at <= now && !leaseLive(row, now)) {
            due++
            if (at < oldestDueAt) oldestDueAt = at
          }
        }
        return { open, due, oldestDueAt: due === 0 ? null : oldestDueAt }
      }),
    nextDueAt: () => Effect.sync(() => peekDue()?.at ?? null),
    resend: (merchantId, id, decide) =>
      Effect.sync(() => {
        const row = own(merchantId, id)
        if (row === null) return { _tag: "NotFound" as const }
        const current = row.delivery
        const next = decide(current)
        if (next === null) return { _tag: "Refused" as const, delivery: current }
        row.set(next)
        setLease(row, null, null)
        track(row)
        schedule(row)
        return { _tag: "Resent" as const, delivery: next }
      }),
    stats: (merchantId, since) =>
      Effect.sync(() => {
        const counts = emptyCounts()
        const attempts: Array<{ at: number; ok: boolean }> = []
        for (const row of w.deliveries.values()) {
          if (row.merchantId !== merchantId) continue
          const delivery = row.record
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
    rotateSecret: (merchantId, secret, previousUntil, now) =>
      Effect.sync(() => {
        const merchant = state.merchants.get(merchantId)
        if (merchant === undefined) return null
        const updated: Merchant = { ...merchant, webhookSecret: secret, updatedAt: now }
        state.merchants.set(merchantId, updated)
        if (merchant.webhookSecret === null) w.previousSecrets.delete(merchantId)
        else w.previousSecrets.set(merchantId, { secret: merchant.webhookSecret, until: previousUntil })
        return updated
      })
  }
}

export const layerMemoryFrom = (state: SharedState) => Layer.succeed(WebhookStore, memoryWebhookOperations(state))
