import { Effect, Layer } from "effect"
import type { FraudCase, FraudCaseStatus, FraudHistory } from "../domain/Fraud.ts"
import type { Account, Balance, LedgerEntry } from "../domain/Ledger.ts"
import { balanceOf } from "../domain/Ledger.ts"
import type { ApiKey, Merchant } from "../domain/Merchant.ts"
import type { Currency } from "../domain/Money.ts"
import type { Change, Payment, PaymentEvent } from "../domain/Payment.ts"
import { followsFrom, isSettleable, nextStep } from "../domain/Payment.ts"
import { MinHeap } from "../platform/MinHeap.ts"
import { emptyWebhookState, memoryWebhookOperations, type WebhookMemoryState } from "./MemoryWebhookStore.ts"
import type {
  AnalyticsRow,
  FraudCaseFilter,
  HistoryQuery,
  HistoryWindows,
  IdempotencyClaim,
  OpenOutcome,
  PageOf,
  PageRequest,
  PaymentFilter,
  StoreShape
} from "./Store.ts"
import { isCardTokenDisputeQuery, maximumSeriesRows, modelStats, periodStart, Store, unrecordedModel } from "./Store.ts"
import { WebhookStore } from "./WebhookStore.ts"

interface IdempotencyRow {
  owner?: string | null
  fingerprint: string
  state: "in_progress" | "completed"
  lockedUntil: number
  expiresAt: number
  status: number | null
  body: string | null
  appliedTo: string | null
}

/** A key claimed by a request, in progress (already applied to a payment when the claim came with it). */
const claimRow = (claim: IdempotencyClaim, appliedTo: string | null): IdempotencyRow => ({
  owner: claim.owner ?? null,
  fingerprint: claim.fingerprint,
  state: "in_progress",
  lockedUntil: claim.lockedUntil,
  expiresAt: claim.expiresAt,
  status: null,
  body: null,
  appliedTo
})

/** Newest first, ties broken by id (descending), the order of every list (CONTRACT section 2). */
const newestFirst = <A extends { readonly createdAt: number; readonly id: string }>(a: A, b: A) =>
  a.createdAt < b.createdAt ? 1 : a.createdAt > b.createdAt ? -1 : a.id < b.id ? 1 : a.id > b.id ? -1 : 0

const paginate = <A>(rows: ReadonlyArray<A>, page: PageRequest): PageOf<A> => ({
  items: rows.slice((page.page - 1) * page.perPage, page.page * page.perPage),
  totalCount: rows.length
})

export interface MemoryState {
  readonly merchants: Map<string, Merchant>
  readonly apiKeys: Map<string, ApiKey>
  readonly apiKeysByHash: Map<string, string>
  readonly payments: Map<string, Payment>
  readonly paymentsByIdempotencyKey: ScopedMap<string>
  readonly events: Map<string, Array<PaymentEvent>>
  readonly ledger: Map<string, Array<LedgerEntry>>
  readonly ledgerByMerchant: Map<string, Array<LedgerEntry>>
  readonly fraudCases: Map<string, FraudCase>
  readonly inFlight: Set<string>
  /** Idempotency rows by merchant, then key. */
  readonly idempotency: ScopedMap<IdempotencyRow>
  /** Each payment's place in `payments` (the order of its first commit), for the settlement index. */
  readonly paymentOrder: Map<string, number>
  /**
   * The settlement index: every payment that became settleable (settled ones leave when a sweep
   * meets them). A sweep with nothing due costs O(due), not O(index): entries wait in
   * `settleableByCapture` (by capture time) until a sweep's cut-off passes them, then move to
   * `settleableDue` (in `payments` order, so a sweep takes them in the order a scan of every
   * payment did), where they stay until settled.
   */
  readonly settleableIds: Map<string, Settleable>
  /** An item per waiting entry and capture time it had (stale items are skipped when they surface). */
  readonly settleableByCapture: OrderedQueue<CaptureItem>
  /**
   * Entries some cut-off passed, in `payments` order, from `head` on (a batch's sweep keeps what
   * it met at the end of what it scanned and moves `head` on: no shift of the rest per batch).
   */
  readonly settleableDue: { readonly entries: Array<Settleable | undefined>; head: number }
  /** Every idempotency row as it was set, by expiry: the purge pops what expired instead of scanning every key. */
  readonly idempotencyExpiries: OrderedQueue<Expiry>
  readonly outbox: Array<PaymentEvent>
  /** Service processes and the time each said it is alive until (idempotency claims' owners). */
  readonly instances: Map<string, number>
  /** The instance running each in-flight payment's flow, where one is named (`Store.claimFlows`). */
  readonly flowOwners: Map<string, string>
  /** The holder of each role (`Store.lead`). */
  readonly leaders: Map<string, string>
  /** Payments per merchant and card token, and per merchant and currency, oldest first (fraud history). */
  /** (By merchant, then card token or currency: no key text built and hashed per look-up.) */
  readonly cardAttempts: Map<string, Map<string, Sightings>>
  readonly merchantAmounts: Map<string, Map<string, Sightings>>
  /** Webhook deliveries and rotated secrets (MemoryWebhookStore). */
  readonly webhooks: WebhookMemoryState
}

/**
 * A priority queue for items that nearly always arrive in order (an expiry is now plus a fixed
 * TTL; a capture time is now): those go to a plain FIFO, any other to a heap, and the smaller
 * head of the two comes out. Same order as one heap of everything (`before` is a strict total
 * order), without a heap's sift of ~2 log n comparisons per item that leaves. Not a heap of its
 * own: the late items go to the one heap, `MinHeap`.
 */
export class OrderedQueue<A> {
  private inOrder: Array<A> = []
  private head = 0
  private readonly others: MinHeap<A>

  constructor(private readonly before: (a: A, b: A) => boolean) {
    this.others = new MinHeap(before)
  }

  get size(): number {
    return this.inOrder.length - this.head + this.others.size
  }

  push(item: A): void {
    const n = this.inOrder.length
    if (n === this.head || !this.before(item, this.inOrder[n - 1]!)) this.inOrder.push(item)
    else this.others.push(item)
  }

  peek(): A | undefined {
    const first = this.head < this.inOrder.length ? this.inOrder[this.head] : undefined
    const other = this.others.peek()
    if (first === undefined) return other
    return other !== undefined && this.before(other, first) ? other : first
  }

  pop(): A | undefined {
    const first = this.head < this.inOrder.length ? this.inOrder[this.head] : undefined
    const other = this.others.peek()
    if (first === undefined || (other !== undefined && this.before(other, first))) return this.others.pop()
    this.inOrder[this.head++] = undefined as A
    // Drop the consumed front now and then (amortized: at most one copy per item).
    if (this.head === this.inOrder.length) {
      this.inOrder = []
      this.head = 0
    } else if (this.head >= 1024 && this.head * 2 >= this.inOrder.length) {
      this.inOrder = this.inOrder.slice(this.head)
      this.head = 0
    }
    return first
  }
}

export const emptyState = (): MemoryState => ({
  merchants: new Map(),
  apiKeys: new Map(),
  apiKeysByHash: new Map(),
  payments: new Map(),
  paymentsByIdempotencyKey: new ScopedMap(),
  events: new Map(),
  ledger: new Map(),
  ledgerByMerchant: new Map(),
  fraudCases: new Map(),
  inFlight: new Set(),
  idempotency: new ScopedMap(),
  idempotencyExpiries: new OrderedQueue(expiresFirst),
  paymentOrder: new Map(),
  settleableIds: new Map(),
  settleableByCapture: new OrderedQueue(capturedFirst),
  settleableDue: { entries: [], head: 0 },
  outbox: [],
  instances: new Map(),
  flowOwners: new Map(),
  leaders: new Map(),
  cardAttempts: new Map(),
  merchantAmounts: new Map(),
  webhooks: emptyWebhookState()
})

/** A payment in the settlement index. */
export interface Settleable {
  readonly order: number
  readonly id: string
  /** The payment's, kept current by every commit of it while indexed: a sweep skips the not yet due without a look-up. */
  capturedAt: number | null
  /** In `settleableDue` (else waiting in `settleableByCapture`, when it has a capture time). */
  due: boolean
}

/** A waiting entry as it was when pushed: current while the entry waits and has this capture time. */
export interface CaptureItem {
  readonly capturedAt: number
  readonly entry: Settleable
}
const paymentsOrder = (a: Settleable, b: Settleable) => a.order - b.order
const capturedFirst = (a: CaptureItem, b: CaptureItem) =>
  a.capturedAt < b.capturedAt || (a.capturedAt === b.capturedAt && a.entry.order < b.entry.order)

/** An idempotency row's expiry, as set (a row replaced later leaves a stale entry, skipped when it surfaces). */
export interface Expiry {
  readonly expiresAt: number
  readonly merchantId: string
  readonly key: string
}
const expiresFirst = (a: Expiry, b: Expiry) =>
  a.expiresAt < b.expiresAt ||
  (a.expiresAt === b.expiresAt && (a.merchantId < b.merchantId || (a.merchantId === b.merchantId && a.key < b.key)))

/**
 * Values by merchant, then key: a look-up builds no `merchant + key` text (a new string to
 * flatten and hash on every call of the request path) and searches one merchant's keys.
 */
export class ScopedMap<V> {
  private readonly byMerchant = new Map<string, Map<string, V>>()
  get(merchantId: string, key: string): V | undefined {
    return this.byMerchant.get(merchantId)?.get(key)
  }
  has(merchantId: string, key: string): boolean {
    return this.byMerchant.get(merchantId)?.has(key) ?? false
  }
  set(merchantId: string, key: string, value: V): void {
    inner(this.byMerchant, merchantId).set(key, value)
  }
  delete(merchantId: string, key: string): void {
    this.byMerchant.get(merchantId)?.delete(key)
  }
  /** Every entry as (merchant, key, value), merchant by merchant (audits: the simulator's liveness check). */
  *entries(): Generator<readonly [string, string, V]> {
    for (const [merchantId, values] of this.byMerchant) {
      for (const [key, value] of values) yield [merchantId, key, value]
    }
  }
}

/** The accounts a merchant's balance is made of; authorization holds are not money owed yet. */
const merchantAccounts: ReadonlySet<Account> = new Set<Account>([
  "merchant_pending",
  "merchant_available",
  "merchant_reserved"
])

/**
 * A history list (a card's payments at a merchant, or a merchant's in a currency), ordered by
 * creation time, then id (PostgreSQL's order in `historyColumns`), as parallel arrays: a scan
 * reads numbers side by side, not a sighting object per payment spread through the heap.
 */
export class Sightings {
  // (Replaced while short, see `insert`.)
  times: Array<number> = []
  ids: Array<string> = []
  /**
   * Card lists: 1 while the payment's status is "failed" (kept by `commit`), else 0. Merchant
   * lists: the running total of the amounts (index i: rows 0..i; amounts never change).
   */
  values: Array<number> = []

  /** Where (time, id) goes: after every row before it (concurrent creates may commit out of order). */
  placeOf(time: number, id: string): number {
    let at = this.times.length
    const times = this.times
    while (at > 0 && (time < times[at - 1]! || (time === times[at - 1]! && id < this.ids[at - 1]!))) at--
    return at
  }

  /** The row of payment `id` created at `time`, or -1. */
  indexOf(time: number, id: string): number {
    const at = this.placeOf(time, id) - 1
    return at >= 0 && this.ids[at] === id ? at : -1
  }

  /** Adds a row; `amount` null: a card list's row (`failed` its flag), else a merchant list's. */
  insert(time: number, id: string, failed: number, amount: number | null): void {
    const at = this.placeOf(time, id)
    const values = this.values
    const n = this.times.length
    if (at === n) {
      const value = amount === null ? failed : (n === 0 ? 0 : values[n - 1]!) + amount
      if (n >= shortList) {
        this.times.push(time)
        this.ids.push(id)
        values.push(value)
        return
      }
      // Most lists (a card's payments at a merchant) stay short: a push onto a full array would
      // leave ~16 empty slots in each of the three for the whole run; a short one is copied.
      this.times = this.times.concat([time])
      this.ids = this.ids.concat([id])
      this.values = values.concat([value])
      return
    }
    this.times.splice(at, 0, time)
    this.ids.splice(at, 0, id)
    if (amount === null) values.splice(at, 0, failed)
    else {
      values.splice(at, 0, (at === 0 ? 0 : values[at - 1]!) + amount)
      for (let i = at + 1; i < values.length; i++) values[i] = values[i]! + amount
    }
  }

  /** The number of rows created at or before `until`: they are the first ones. */
  countUntil(until: number): number {
    const n = this.times.length
    const times = this.times
    if (n === 0 || times[n - 1]! <= until) return n
    let lo = 0
    let hi = n - 1
    // times[hi] > until; find the first such.
    while (lo < hi) {
      const mid = (lo + hi) >>> 1
      if (times[mid]! > until) hi = mid
      else lo = mid + 1
    }
    return lo
  }
}

/** Lists shorter than this grow by a copy of exactly their length plus one (`Sightings.insert`). */
const shortList = 8

/** The inner map of `outer`'s `key`, made when missing. */
const inner = <A>(outer: Map<string, Map<string, A>>, key: string): Map<string, A> => {
  let map = outer.get(key)
  if (map === undefined) outer.set(key, map = new Map())
  return map
}

/** The list of `key` in `outer`, made when missing. */
const sightingsOf = (outer: Map<string, Sightings>, key: string): Sightings => {
  let list = outer.get(key)
  if (list === undefined) outer.set(key, list = new Sightings())
  return list
}

/**
 * Appends to one payment's list (its events, its ledger entries: a few each), keeping the list
 * exactly as long as it is: a push onto a full array grows it by half plus 16 slots, empty
 * slots 100,000 lists would keep for the whole run.
 */
const appendTo = <A>(map: Map<string, Array<A>>, key: string, values: ReadonlyArray<A>) => {
  if (values.length === 0) return
  const list = map.get(key)
  map.set(key, list === undefined ? values.slice() : list.concat(values))
}

const pushTo = <A>(map: Map<string, Array<A>>, key: string, values: ReadonlyArray<A>) => {
  if (values.length === 0) return
  const list = map.get(key)
  if (list === undefined) map.set(key, values.slice())
  else for (let i = 0; i < values.length; i++) list.push(values[i]!)
}

/**
 * The in-memory adapter over `state`: used by the simulator and fast tests. Every operation runs
 * synchronously inside one `Effect.sync`, so it is atomic by construction; the simulator keeps
 * `state` to "restart" a service on the same data.
 */
export const memoryOperations = (state: MemoryState): StoreShape => {
  /** Whether `instanceId` beats at `now` (one never heard of, or forgotten, does not). */
  const isAlive = (instanceId: string, now: number) => {
    const aliveUntil = state.instances.get(instanceId)
    return aliveUntil !== undefined && aliveUntil > now
  }
  /** `previous`: the payment as it was before this change (undefined: a new payment, `remember`ed next). */
  const commit = (change: Change, previous: Payment | undefined) => {
    const payment = change.payment
    const failed = payment.status === "failed"
    if (previous !== undefined && (previous.status === "failed") !== failed) markFailed(payment, failed)
    // A payment committed before (`previous`) has its place already; a new one is new to `payments`
    // (which never loses one) iff it is new to `paymentOrder`: its size says so, no look-up.
    const known = state.payments.size
    state.payments.set(payment.id, payment)
    if (previous === undefined && state.payments.size !== known) {
      state.paymentOrder.set(payment.id, state.paymentOrder.size)
    }
    if (isSettleable(payment)) indexSettleable(payment)
    if (nextStep(payment) === null) {
      state.inFlight.delete(payment.id)
      state.flowOwners.delete(payment.id)
    } else state.inFlight.add(payment.id)
    appendTo(state.events, payment.id, change.events)
    appendTo(state.ledger, payment.id, change.ledger)
    pushTo(state.ledgerByMerchant, payment.merchantId, change.ledger)
    // Only a merchant with a webhook URL has deliveries to make (CONTRACT section 7).
    if (change.events.length > 0 && (state.merchants.get(payment.merchantId)?.webhookUrl ?? null) !== null) {
      state.outbox.push(...change.events)
    }
    if (change.fraudCase !== null) state.fraudCases.set(change.fraudCase.id, change.fraudCase)
  }
  /** Keeps the payment's card row's `failed` (rare: a decline, near the end of its card's list). */
  const markFailed = (payment: Payment, failed: boolean) => {
    const card = state.cardAttempts.get(payment.merchantId)?.get(payment.cardToken)
    if (card === undefined) return
    const at = card.indexOf(payment.createdAt, payment.id)
    if (at >= 0) card.values[at] = failed ? 1 : 0
  }
  /** A payment that became settleable joins the index, waiting for a cut-off to pass its capture time. */
  const indexSettleable = (payment: Payment) => {
    const capturedAt = payment.capturedAt
    let entry = state.settleableIds.get(payment.id)
    if (entry !== undefined) {
      if (entry.capturedAt === capturedAt) return
      entry.capturedAt = capturedAt
    } else {
      entry = { order: state.paymentOrder.get(payment.id)!, id: payment.id, capturedAt, due: false }
      state.settleableIds.set(payment.id, entry)
    }
    // A due entry's sweep reads its current capture time; a waiting one waits under it.
    if (!entry.due && capturedAt !== null) state.settleableByCapture.push({ capturedAt, entry })
  }
  const releaseHold = (merchantId: string, idempotencyKey: string, before: number) => {
    const held = state.paymentsByIdempotencyKey.get(merchantId, idempotencyKey)
    if (held !== undefined && state.payments.get(held)!.createdAt < before) {
      state.paymentsByIdempotencyKey.delete(merchantId, idempotencyKey)
    }
  }
  /**
   * The rows of `historyColumns`, counted without building lists: the card's newest rows created
   * at or before `until` (never the payment itself) since `daySince`, at most `dayLimit`, and
   * whether it has any such row at all; the merchant's newest `amountWindow` in the currency,
   * counted and summed from the running totals. The excluded payment's row (when it is in a list)
   * is found once, by its creation time: the scans compare indexes, not ids.
   */
  const history = (
    query: HistoryQuery,
    card: Sightings | undefined = state.cardAttempts.get(query.merchantId)?.get(query.cardToken),
    amounts: Sightings | undefined = state.merchantAmounts.get(query.merchantId)?.get(query.currency)
  ): FraudHistory => {
    const { cardToken, currency, excludePaymentId, merchantId, until } = query
    const windows: HistoryWindows = query
    let hour = 0
    let day = 0
    let declines = 0
    let seen = false
    // The payment itself, when stored (a create asks before it is).
    const excluded = card === undefined && amounts === undefined ? undefined : state.payments.get(excludePaymentId)
    if (card !== undefined) {
      const skip = excluded === undefined || excluded.merchantId !== merchantId || excluded.cardToken !== cardToken
        ? -1
        : card.indexOf(excluded.createdAt, excluded.id)
      const top = card.countUntil(until) - 1
      const { daySince, hourSince } = windows
      const dayLimit = windows.dayLimit
      const failed = card.values
      const times = card.times
      for (let i = top; i >= 0; i--) {
        if (i === skip) continue
        seen = true
        // Older than the day (the list is sorted), or the day's count is full: nothing more counts.
        const t = times[i]!
        if (t < daySince || day >= dayLimit) break
        day++
        if (t >= hourSince) hour++
        declines += failed[i]!
      }
    }
    let count = 0
    let sum = 0
    if (amounts !== undefined) {
      const rows = amounts.countUntil(until)
      const skip = excluded === undefined || excluded.merchantId !== merchantId || excluded.currency !== currency
        ? -1
        : amounts.indexOf(excluded.createdAt, excluded.id)
      const totals = amounts.values
      const window = windows.amountWindow
      // The newest `window` rows of the first `rows`, the excluded one passed over.
      const counted = skip >= 0 && skip < rows ? rows - 1 : rows
      count = counted < window ? counted : window
      if (count > 0) {
        // Rows from `from` to rows - 1 hold the count (and the excluded row when it is among them).
        const from = skip >= 0 && skip < rows && skip >= rows - count ? rows - count - 1 : rows - count
        sum = totals[rows - 1]! - (from > 0 ? totals[from - 1]! : 0)
        if (from <= skip && skip < rows) sum -= totals[skip]! - (skip > 0 ? totals[skip - 1]! : 0)
      }
    }
    return {
      cardAttemptsLastHour: hour,
      cardAttemptsLastDay: day,
      cardDeclinesLastDay: declines,
      cardSeenBefore: seen,
      merchantAmountCount: count,
      merchantAmountSumCents: sum
    }
  }
  /** Adds a new payment to its history lists (`card`, `amounts`: those lists, when known to exist). */
  const remember = (payment: Payment, card: Sightings | undefined, amounts: Sightings | undefined) => {
    const time = payment.createdAt
    ;(card ?? sightingsOf(inner(state.cardAttempts, payment.merchantId), payment.cardToken))
      .insert(time, payment.id, payment.status === "failed" ? 1 : 0, null)
    ;(amounts ?? sightingsOf(inner(state.merchantAmounts, payment.merchantId), payment.currency))
      .insert(time, payment.id, 0, payment.amountCents)
  }
  /**
   * A create's key as its first round trip finds it: null when never seen (or purged); else
   * taken, with its stored response when finished and live.
   */
  const keyTaken = (claim: IdempotencyClaim): OpenOutcome | null => {
    const known = state.idempotency.get(claim.merchantId, claim.key)
    if (known !== undefined && known.state === "completed" && known.expiresAt > claim.now) {
      return {
        _tag: "KeyTaken",
        finished: { fingerprint: known.fingerprint, status: known.status!, body: known.body! }
      }
    }
    return known !== undefined || state.paymentsByIdempotencyKey.has(claim.merchantId, claim.key)
      ? { _tag: "KeyTaken" }
      : null
  }
  /** Sets an idempotency row, its expiry queued for the purge. */
  const setIdempotency = (merchantId: string, key: string, row: IdempotencyRow) => {
    state.idempotency.set(merchantId, key, row)
    state.idempotencyExpiries.push({ expiresAt: row.expiresAt, merchantId, key })
  }
  /** Per-currency aggregates of a merchant's payments in a window, grouped by `keyOf` (sorted by it). */
  const aggregate = (
    merchantId: string,
    createdFrom: number | null,
    createdTo: number | null,
    keyOf: (p: Payment) => string
  ) => {
    const rows = new Map<string, AnalyticsRow>()
    for (const p of state.payments.values()) {
      if (p.merchantId !== merchantId) continue
      if ((createdFrom !== null && p.createdAt < createdFrom) || (createdTo !== null && p.createdAt > createdTo)) {
        continue
      }
      const key = keyOf(p)
      const row = rows.get(key) ?? {
        currency: p.currency,
        transactionCount: 0,
        volumeCents: 0,
        capturedCents: 0,
        refundedCents: 0,
        feesCents: 0,
        decidedCount: 0,
        approvedCount: 0,
        blockedCount: 0,
        capturedCount: 0,
        disputedCount: 0
      }
      rows.set(key, {
        ...row,
        transactionCount: row.transactionCount + 1,
        volumeCents: row.volumeCents + p.amountCents,
        capturedCents: row.capturedCents + p.capturedAmountCents,
        refundedCents: row.refundedCents + p.refundedAmountCents,
        feesCents: row.feesCents + p.feeCents,
        decidedCount: row.decidedCount + (p.status === "pending" ? 0 : 1),
        approvedCount: row.approvedCount + (p.status === "pending" || p.status === "failed" ? 0 : 1),
        blockedCount: row.blockedCount + (p.status === "blocked" ? 1 : 0),
        capturedCount: row.capturedCount + (p.capturedAmountCents > 0 ? 1 : 0),
        disputedCount: row.disputedCount + (p.dispute === null ? 0 : 1)
      })
    }
    return [...rows.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
  }
  const ownPayment = (merchantId: string | null, paymentId: string) => {
    const payment = state.payments.get(paymentId)
    return payment === undefined || (merchantId !== null && payment.merchantId !== merchantId) ? null : payment
  }

  return {
    insertMerchant: (merchant, apiKey) =>
      Effect.sync(() => {
        state.merchants.set(merchant.id, merchant)
        state.apiKeys.set(apiKey.id, apiKey)
        state.apiKeysByHash.set(apiKey.keyHash, apiKey.id)
      }),
    getMerchant: (id) => Effect.sync(() => state.merchants.get(id) ?? null),
    updateMerchant: (merchant) =>
      Effect.sync(() => {
        const current = state.merchants.get(merchant.id)
        if (current === undefined) return
        const { name, webhookUrl, updatedAt } = merchant
        state.merchants.set(merchant.id, { ...current, name, webhookUrl, updatedAt })
      }),
    firstMerchant: () => Effect.sync(() => [...state.merchants.values()].sort((a, b) => -newestFirst(a, b))[0] ?? null),

    insertApiKey: (apiKey) =>
      Effect.sync(() => {
        state.apiKeys.set(apiKey.id, apiKey)
        state.apiKeysByHash.set(apiKey.keyHash, apiKey.id)
      }),
    getApiKey: (merchantId, keyId) =>
      Effect.sync(() => {
        const found = state.apiKeys.get(keyId)
        return found === undefined || found.merchantId !== merchantId ? null : found
      }),
    findApiKeyByHash: (keyHash) =>
      Effect.sync(() => {
        const id = state.apiKeysByHash.get(keyHash)
        return id === undefined ? null : state.apiKeys.get(id) ?? null
      }),
    useApiKey: (keyHash, now, touchBefore) =>
      Effect.sync(() => {
        const id = state.apiKeysByHash.get(keyHash)
        let key = id === undefined ? undefined : state.apiKeys.get(id)
        const merchant = key === undefined ? undefined : state.merchants.get(key.merchantId)
        if (key === undefined || merchant === undefined) return null
        if (key.status === "active" && (key.lastUsedAt === null || key.lastUsedAt <= touchBefore)) {
          key = { ...key, lastUsedAt: now }
          state.apiKeys.set(key.id, key)
        }
        return { key, merchant }
      }),
    listApiKeys: (merchantId, page) =>
      Effect.sync(() =>
        paginate([...state.apiKeys.values()].filter((k) => k.merchantId === merchantId).sort(newestFirst), page)
      ),
    rotateApiKey: (merchantId, keyId, replacement, now) =>
      Effect.sync(() => {
        const current = state.apiKeys.get(keyId)
        if (current === undefined || current.merchantId !== merchantId) return "not_found" as const
        if (current.status === "revoked") return "revoked" as const
        state.apiKeys.set(keyId, { ...current, status: "revoked", revokedAt: now })
        state.apiKeys.set(replacement.id, replacement)
        state.apiKeysByHash.set(replacement.keyHash, replacement.id)
        return "rotated" as const
      }),

    insertPayment: (change, flowOwner = null) =>
      Effect.sync(() => {
        const payment = change.payment
        if (payment.idempotencyKey !== null) {
          const existing = state.paymentsByIdempotencyKey.get(payment.merchantId, payment.idempotencyKey)
          if (existing !== undefined) return { _tag: "Exists" as const, payment: state.payments.get(existing)! }
          state.paymentsByIdempotencyKey.set(payment.merchantId, payment.idempotencyKey, payment.id)
          // The request's claim now stands for a created payment: a retry resumes it, never creates another.
          const claim = state.idempotency.get(payment.merchantId, payment.idempotencyKey)
          if (claim !== undefined && claim.state === "in_progress") claim.appliedTo = payment.id
        }
        commit(change, undefined)
        remember(payment, undefined, undefined)
        if (flowOwner !== null) state.flowOwners.set(payment.id, flowOwner)
        return { _tag: "Inserted" as const }
      }),
    openPayment: (open) =>
      Effect.sync(() => {
        const payment = open.change.payment
        const claim = open.claim
        if (claim !== null) {
          const taken = keyTaken(claim)
          if (taken !== null) return taken
          setIdempotency(claim.merchantId, claim.key, claimRow(claim, payment.id))
          state.paymentsByIdempotencyKey.set(claim.merchantId, claim.key, payment.id)
        }
        // The payment's history lists, looked up once: its history reads them, and it is
        // remembered in the very same lists (nothing changes them between).
        const card = state.cardAttempts.get(payment.merchantId)?.get(payment.cardToken)
        const amounts = state.merchantAmounts.get(payment.merchantId)?.get(payment.currency)
        const found = history(
          {
            ...open.history,
            merchantId: payment.merchantId,
            cardToken: payment.cardToken,
            currency: payment.currency,
            until: payment.createdAt,
            excludePaymentId: payment.id
          },
          card,
          amounts
        )
        commit(open.change, undefined)
        remember(payment, card, amounts)
        if (open.flowOwner !== undefined && open.flowOwner !== null) state.flowOwners.set(payment.id, open.flowOwner)
        return { _tag: "Opened" as const, history: found }
      }),
    readForCreate: ({ claim, history: windows, payment }) =>
      Effect.sync(() => {
        if (claim !== null) {
          const taken = keyTaken(claim)
          if (taken !== null) return taken
        }
        const found = history({
          ...windows,
          merchantId: payment.merchantId,
          cardToken: payment.cardToken,
          currency: payment.currency,
          until: payment.createdAt,
          excludePaymentId: payment.id
        })
        return { _tag: "Opened" as const, history: found }
      }),
    insertCreated: ({ change, claim, flowOwner, response }) =>
      Effect.sync(() => {
        const payment = change.payment
        if (claim !== null) {
          if (keyTaken(claim) !== null) return false
          setIdempotency(claim.merchantId, claim.key, {
            ...claimRow(claim, payment.id),
            state: "completed",
            lockedUntil: claim.now,
            status: response?.status ?? null,
            body: response?.body ?? null
          })
          // Claimed finished with the payment: the key's row keeps it one payment a key, nothing holds it.
        }
        commit(change, undefined)
        remember(payment, undefined, undefined)
        if (flowOwner !== undefined && flowOwner !== null && nextStep(payment) !== null) {
          state.flowOwners.set(payment.id, flowOwner)
        }
        return true
      }),
    readForCommand: ({ merchantId, paymentId, commandKey }) =>
      Effect.sync(() => {
        const payment = ownPayment(merchantId, paymentId)
        if (payment === null) return null
        const keyRow = commandKey === undefined
          ? undefined
          : state.idempotency.get(commandKey.merchantId, commandKey.key)
        return {
          payment,
          fraudCase: payment.fraudCaseId === null ? null : state.fraudCases.get(payment.fraudCaseId) ?? null,
          alreadyApplied: keyRow?.appliedTo === payment.id
        }
      }),
    commitChange: ({ before, change, response, commandKey }) =>
      Effect.sync(() => {
        const current = state.payments.get(before.id)
        if (current === undefined || current.version !== before.version) return false
        if (!followsFrom(current, change)) {
          throw new Error("store: a change must follow from the record it was decided on")
        }
        commit(change, current)
        if (response !== null) {
          const row = state.idempotency.get(response.merchantId, response.key)
          if (row !== undefined && row.state === "in_progress") {
            Object.assign(row, { state: "completed", status: response.status, body: response.body })
          }
        }
        if (commandKey !== undefined) {
          const row = state.idempotency.get(commandKey.merchantId, commandKey.key)
          if (row !== undefined) {
            row.appliedTo = change.payment.id
          }
        }
        return true
      }),
    getPayment: (merchantId, paymentId) => Effect.sync(() => ownPayment(merchantId, paymentId)),
    listPayments: (merchantId, filter: PaymentFilter, page) =>
      Effect.sync(() => {
        const rows = [...state.payments.values()].filter((p) =>
          p.merchantId === merchantId &&
          (filter.status === undefined || p.status === filter.status) &&
          (filter.createdFrom === undefined || p.createdAt >= filter.createdFrom) &&
          (filter.createdTo === undefined || p.createdAt <= filter.createdTo) &&
          (filter.minAmountCents === undefined || p.amountCents >= filter.minAmountCents) &&
          (filter.maxAmountCents === undefined || p.amountCents <= filter.maxAmountCents)
        )
        return paginate(rows.sort(newestFirst), page)
      }),
    updatePayment: (target, decide) =>
      Effect.sync(() => {
        const payment = ownPayment(target.merchantId, target.paymentId)
        if (payment === null) return { _tag: "NotFound" as const }
        const keyRow = target.commandKey === undefined
          ? undefined
          : state.idempotency.get(target.commandKey.merchantId, target.commandKey.key)
        if (keyRow?.appliedTo === payment.id) return { _tag: "AlreadyApplied" as const, payment }
        const fraudCase = payment.fraudCaseId === null ? null : state.fraudCases.get(payment.fraudCaseId) ?? null
        const decision = decide(payment, fraudCase)
        if (!decision.ok) return { _tag: "Refused" as const, decision, payment }
        if (!followsFrom(payment, decision.change)) {
          throw new Error("store: a decision must follow from the locked record")
        }
        commit(decision.change, payment)
        if (keyRow !== undefined) keyRow.appliedTo = payment.id
        return { _tag: "Applied" as const, change: decision.change }
      }),
    listEvents: (merchantId, paymentId) =>
      Effect.sync(() => (ownPayment(merchantId, paymentId) === null ? [] : [...(state.events.get(paymentId) ?? [])])),
    listLedger: (merchantId, paymentId) =>
      Effect.sync(() => (ownPayment(merchantId, paymentId) === null ? [] : [...(state.ledger.get(paymentId) ?? [])])),
    balances: (merchantId) =>
      Effect.sync(() => {
        const byCurrency = new Map<Currency, Array<LedgerEntry>>()
        for (const entry of state.ledgerByMerchant.get(merchantId) ?? []) {
          if (merchantAccounts.has(entry.account)) pushTo(byCurrency, entry.currency, [entry])
        }
        return [...byCurrency.entries()]
          .sort(([a], [b]) => a.localeCompare(b))
          .map(([currency, entries]): Balance => ({
            currency,
            pending: balanceOf(entries, "merchant_pending"),
            available: balanceOf(entries, "merchant_available"),
            reserved: balanceOf(entries, "merchant_reserved")
          }))
      }),
    claimFlows: ({ limit, now, owner, staleBefore, takeOver }) =>
      Effect.sync(() => {
        // One pass over the set (the recovery worker asks often; most payments in flight are recent).
        const stale: Array<Payment> = []
        for (const id of state.inFlight) {
          const p = state.payments.get(id)!
          const flowOwner = state.flowOwners.get(id) ?? null
          const claimable = (flowOwner === null || flowOwner === owner) && p.updatedAt < staleBefore
            || takeOver && flowOwner !== owner && (flowOwner === null || !isAlive(flowOwner, now))
          if (claimable) stale.push(p)
        }
        if (stale.length === 0) return []
        stale.sort((
          a,
          b
        ) => (a.updatedAt < b.updatedAt ? -1 : a.updatedAt > b.updatedAt ? 1 : a.id < b.id ? -1 : a.id > b.id ? 1 : 0))
        const ids: Array<string> = []
        for (let i = 0; i < stale.length && i < limit; i++) ids.push(stale[i]!.id)
        for (const id of ids) {
          if (owner === null) state.flowOwners.delete(id)
          else state.flowOwners.set(id, owner)
        }
        return ids
      }),
    paymentsCreatedBetween: ({ after, from, limit, to }) =>
      Effect.sync(() =>
        [...state.payments.values()]
          .filter((p) =>
            p.createdAt >= from && p.createdAt < to &&
            (after === null || p.createdAt > after.createdAt || (p.createdAt === after.createdAt && p.id > after.id))
          )
          .sort((
            a,
            b
          ) => (a.createdAt < b.createdAt
            ? -1
            : a.createdAt > b.createdAt
            ? 1
            : a.id < b.id
            ? -1
            : a.id > b.id
            ? 1
            : 0)
          )
          .slice(0, limit)
      ),
    settleablePayments: (capturedBefore, limit) =>
      Effect.sync(() => {
        // Entries this cut-off passed join the due ones (every indexed entry captured before the
        // cut-off is due now), in `payments` order.
        const due = state.settleableDue
        const list = due.entries
        const waiting = state.settleableByCapture
        const joined = list.length
        for (let top = waiting.peek(); top !== undefined && top.capturedAt < capturedBefore; top = waiting.peek()) {
          waiting.pop()
          const entry = top.entry
          // Stale: settled and dropped, due already, or captured at another time since.
          if (entry.due || entry.capturedAt !== top.capturedAt || state.settleableIds.get(entry.id) !== entry) continue
          entry.due = true
          list.push(entry)
        }
        if (list.length > joined) {
          if (due.head > 0) {
            list.copyWithin(0, due.head)
            list.length -= due.head
            due.head = 0
          }
          // (All defined: only the slots before `head` are cleared.)
          if (list.length > 1) (list as Array<Settleable>).sort(paymentsOrder)
        }
        // The due ones in `payments` order: the ids a scan of every payment found, first ones first.
        // Settled payments met on the way leave it (settlement is final: never settleable again).
        const ids: Array<string> = []
        const kept: Array<Settleable> = []
        let at = due.head
        for (; at < list.length && ids.length < limit; at++) {
          const entry = list[at]!
          // Not due at this cut-off (while settleable its entry has its current capture time); a
          // settled one is dropped by a later sweep it is due for.
          if (entry.capturedAt === null || entry.capturedAt >= capturedBefore) {
            kept.push(entry)
            continue
          }
          const payment = state.payments.get(entry.id)!
          if (!isSettleable(payment)) {
            state.settleableIds.delete(entry.id)
            continue
          }
          kept.push(entry)
          if (payment.capturedAt !== null && payment.capturedAt < capturedBefore) ids.push(payment.id)
        }
        // What it kept, in order, ends where the scan ended; the rest of the list stays put.
        let head = at - kept.length
        for (let i = due.head; i < head; i++) list[i] = undefined
        for (let k = 0; k < kept.length; k++) list[head + k] = kept[k]
        if (head === list.length) {
          list.length = 0
          head = 0
        } else if (head > 1024 && head * 2 > list.length) {
          list.copyWithin(0, head)
          list.length -= head
          head = 0
        }
        due.head = head
        return ids
      }),
    paymentsByCardTokenAndDispute: (query, limit) =>
      Effect.sync(() => {
        if (!isCardTokenDisputeQuery(query)) {
          throw new Error(`not a card token query: ${JSON.stringify(query.cardTokens)}`)
        }
        return [...state.payments.values()]
          .filter((p) =>
            query.cardTokens.includes(p.cardToken) && p.capturedAt !== null &&
            (p.dispute === null
              ? query.undisputedStatuses.includes(p.status) && p.capturedAt < query.capturedBefore
              : p.dispute.status === "open" && p.dispute.openedAt < query.openedBefore)
          )
          .sort((a, b) => (a.capturedAt! < b.capturedAt!
            ? -1
            : a.capturedAt! > b.capturedAt!
            ? 1
            : a.id < b.id
            ? -1
            : a.id > b.id
            ? 1
            : 0)
          )
          .slice(0, limit)
      }),
    analytics: (merchantId, createdFrom, createdTo) =>
      Effect.sync(() => aggregate(merchantId, createdFrom, createdTo, (p) => p.currency).map(([, row]) => row)),
    analyticsSeries: (merchantId, interval, createdFrom, createdTo) =>
      Effect.sync(() =>
        // The key sorts as (currency, period): the period's ms, padded to a fixed width.
        aggregate(
          merchantId,
          createdFrom,
          createdTo,
          (p) => `${p.currency} ${String(periodStart(p.createdAt, interval)).padStart(16, "0")}`
        ).map(([key, row]) => ({ ...row, periodStart: Number(key.slice(4)) }))
          .slice(0, maximumSeriesRows + 1)
      ),
    fraudStats: (merchantId) =>
      Effect.sync(() => {
        const casesByStatus = { open: 0, confirmed_fraud: 0, false_positive: 0 }
        const casesByPriority = { low: 0, medium: 0, high: 0, critical: 0 }
        for (const c of state.fraudCases.values()) {
          if (c.merchantId !== merchantId) continue
          casesByStatus[c.status]++
          casesByPriority[c.priority]++
        }
        let screenedCount = 0
        let lostDisputeCount = 0
        const blocked = new Map<string, { currency: string; count: number; amountCents: number }>()
        const scoreHistogram = Array.from({ length: 10 }, () => 0)
        const models: Array<{ version: string; screened: number; blocked: number }> = []
        const modelCases: Array<{ version: string; status: FraudCaseStatus; count: number }> = []
        for (const c of state.fraudCases.values()) {
          if (c.merchantId === merchantId) modelCases.push({ version: c.modelVersion, status: c.status, count: 1 })
        }
        let approvedCount = 0
        for (const p of state.payments.values()) {
          if (p.merchantId !== merchantId) continue
          if (p.status !== "pending" && p.status !== "failed") approvedCount++
          if (p.fraudScore === null) continue
          screenedCount++
          scoreHistogram[Math.min(Math.floor(p.fraudScore * 10), 9)]!++
          models.push({
            version: p.fraudModelVersion ?? unrecordedModel,
            screened: 1,
            blocked: p.status === "blocked" ? 1 : 0
          })
          if (p.dispute?.status === "lost") lostDisputeCount++
          if (p.status !== "blocked") continue
          const row = blocked.get(p.currency) ?? { currency: p.currency, count: 0, amountCents: 0 }
          blocked.set(p.currency, { ...row, count: row.count + 1, amountCents: row.amountCents + p.amountCents })
        }
        return {
          casesByStatus,
          casesByPriority,
          approvedCount,
          screenedCount,
          lostDisputeCount,
          blocked: [...blocked.values()].sort((a, b) => (a.currency < b.currency ? -1 : 1)),
          scoreHistogram,
          byModel: modelStats(models, modelCases)
        }
      }),
    fraudHistory: (q) => Effect.sync(() => history(q)),

    getFraudCase: (merchantId, caseId) =>
      Effect.sync(() => {
        const found = state.fraudCases.get(caseId)
        return found === undefined || found.merchantId !== merchantId ? null : found
      }),
    listFraudCases: (merchantId, filter: FraudCaseFilter, page) =>
      Effect.sync(() =>
        paginate(
          [...state.fraudCases.values()]
            .filter((c) =>
              c.merchantId === merchantId &&
              (filter.status === undefined || c.status === filter.status) &&
              (filter.priority === undefined || c.priority === filter.priority)
            )
            .sort(newestFirst),
          page
        )
      ),

    claimIdempotencyKey: (claim) =>
      Effect.sync(() => {
        const row = state.idempotency.get(claim.merchantId, claim.key)
        const fresh = () => claimRow(claim, null)
        if (row === undefined || row.expiresAt <= claim.now) {
          // A key claimed afresh (new, or expired) no longer holds the payment it created before.
          releaseHold(claim.merchantId, claim.key, claim.now)
          setIdempotency(claim.merchantId, claim.key, fresh())
          return { _tag: "Claimed" as const }
        }
        if (row.fingerprint !== claim.fingerprint) return { _tag: "Mismatch" as const }
        if (row.state === "completed") return { _tag: "Replay" as const, status: row.status!, body: row.body! }
        // The holder is gone when its process stopped beating (killed), whatever its lease says.
        const ownerAliveUntil = row.owner === undefined || row.owner === null
          ? undefined
          : state.instances.get(row.owner)
        const ownerGone = ownerAliveUntil !== undefined && ownerAliveUntil <= claim.now
        if (row.lockedUntil > claim.now && !ownerGone) return { _tag: "InProgress" as const }
        // The holder's lease ran out or its process died: this request resumes the same operation.
        row.lockedUntil = claim.lockedUntil
        row.owner = claim.owner ?? null
        return { _tag: "Claimed" as const }
      }),
    completeIdempotencyKey: (merchantId, key, status, body) =>
      Effect.sync(() => {
        const row = state.idempotency.get(merchantId, key)
        if (row !== undefined) Object.assign(row, { state: "completed", status, body })
      }),
    releaseIdempotencyKey: (merchantId, key) =>
      Effect.sync(() => {
        const row = state.idempotency.get(merchantId, key)
        // A finished response stays (a late release may come from a request whose lease ran out).
        if (row === undefined || row.state !== "in_progress") return
        // A command that already moved money keeps its claim, so a retry finds it applied.
        if (row.appliedTo === null) state.idempotency.delete(merchantId, key)
        else row.lockedUntil = Number.NEGATIVE_INFINITY
      }),
    heartbeat: (instanceId, aliveUntil) => Effect.sync(() => void state.instances.set(instanceId, aliveUntil)),
    lead: (role, instanceId, now) =>
      Effect.sync(() => {
        const holder = state.leaders.get(role)
        if (holder === undefined || holder === instanceId || !isAlive(holder, now)) state.leaders.set(role, instanceId)
        return state.leaders.get(role) === instanceId
      }),
    resign: (role, instanceId) =>
      Effect.sync(() => {
        if (state.leaders.get(role) === instanceId) state.leaders.delete(role)
      }),
    purgeIdempotencyKeys: (expiredBefore) =>
      Effect.sync(() => {
        // Every row with expiresAt <= expiredBefore has an entry at or before it in the queue
        // (a row's expiry never changes once set); an entry whose row was replaced or deleted since is stale.
        let purged = 0
        const queue = state.idempotencyExpiries
        while (queue.size > 0 && queue.peek()!.expiresAt <= expiredBefore) {
          const { merchantId, key } = queue.pop()!
          const row = state.idempotency.get(merchantId, key)
          if (row === undefined || row.expiresAt > expiredBefore) continue
          state.idempotency.delete(merchantId, key)
          releaseHold(merchantId, key, expiredBefore)
          purged++
        }
        return purged
      })
  }
}

/** A memory store over existing state: the simulator's "restart" keeps the data, drops the rest. */
export const layerMemoryFrom = (state: MemoryState) =>
  Layer.merge(
    Layer.succeed(Store, memoryOperations(state)),
    Layer.succeed(WebhookStore, memoryWebhookOperations(state))
  )
/** Store and WebhookStore over a fresh state. */
export const layerMemory = Layer.unwrap(Effect.sync(() => layerMemoryFrom(emptyState())))
