import type { LedgerEntry } from "../../src/domain/Ledger.ts"
import type { Payment, PaymentEvent } from "../../src/domain/Payment.ts"
import type { DeliveryAudit } from "../../src/store/MemoryWebhookStore.ts"
import { auditDeliveries, type AuditedDelivery, type HeldSlots, type Receipts } from "../world/Endpoints.ts"
import type { Expectation } from "../world/Workload.ts"
import { type Auditor, chartPosition, chartSize } from "./Auditor.ts"

/**
 * The auditor's end-of-run laws read through the public API instead of the store: what a
 * harness pointed at a real deployment can know. The laws themselves are the auditor's
 * (`Auditor.checkTrace`, `auditLedger`, `checkQuiescent`) and the endpoints' (`auditDeliveries`),
 * fed with records built from the API's JSON; only what the store answered directly (every
 * payment, its balances, its deliveries) is read here over HTTP, page by page.
 *
 * What the API does not show is not checked here (the simulator checks it in-process): event
 * sequence numbers (the API lists events in order), the committed-versus-stored comparison, a
 * refunded payment's settlement sweep, fee and fraud-band exactness.
 */

/** One GET with a merchant's key: the answer, or null when none came. */
export type ApiGet = (
  path: string,
  apiKey: string
) => Promise<{ readonly status: number; readonly body: string } | null>

interface ApiDispute {
  readonly status: "open" | "won" | "lost"
  readonly reason: string
  readonly amount_cents: number
  readonly opened_at: string
  readonly resolved_at: string | null
}

export interface ApiTransaction {
  readonly id: string
  readonly merchant_id: string
  readonly status: Payment["status"]
  readonly amount_cents: number
  readonly currency: Payment["currency"]
  readonly captured_amount_cents: number
  readonly refunded_amount_cents: number
  readonly fee_cents: number
  readonly capture_method: Payment["captureMethod"]
  readonly idempotency_key: string | null
  readonly fraud_score: number | null
  readonly fraud_explanations?: ReadonlyArray<ApiExplanation> | null
  readonly fraud_case_id: string | null
  readonly metadata?: Readonly<Record<string, string>> | null
  readonly failure_code: string | null
  readonly dispute: ApiDispute | null
  readonly created_at: string
  readonly updated_at: string
}

interface ApiExplanation {
  readonly feature: string
  readonly value: number
  readonly contribution: number
}

interface ApiFraudCase {
  readonly risk_score: number
  readonly base_value: number | null
  readonly model_output: number | null
  readonly explanations: ReadonlyArray<ApiExplanation>
}

interface ApiEvent {
  readonly id: string
  readonly type: PaymentEvent["type"]
  readonly created_at: string
  readonly data: {
    readonly status: Payment["status"]
    readonly amount_cents: number
    readonly captured_amount_cents: number
    readonly refunded_amount_cents: number
  }
}

interface ApiLedgerEntry {
  readonly id: string
  readonly transaction_id: string
  readonly group_id: string
  readonly account: LedgerEntry["account"]
  readonly direction: LedgerEntry["direction"]
  readonly amount_cents: number
  readonly currency: LedgerEntry["currency"]
  readonly created_at: string
}

interface ApiDelivery {
  readonly id: string
  readonly event_id: string
  readonly event_type: PaymentEvent["type"]
  readonly url: string
  readonly status: DeliveryAudit["status"]
  /** `cut`: recorded as cut off by a lost instance (CONTRACT.md section 8); absent from a service that does not record cuts. */
  readonly attempts: ReadonlyArray<
    {
      readonly attempt: number
      readonly at: string
      readonly response_status: number | null
      readonly error: string | null
      readonly cut?: boolean
    }
  >
  readonly created_at: string
}

export interface ApiBalance {
  readonly currency: string
  readonly pending: number
  readonly available: number
  readonly reserved: number
}

/**
 * The record as the auditor reads it. The API does not show the fraud verdict: it follows from
 * the score and the case (no score: not screened; a case on an authorized payment: held);
 * nor `settled_at`: a `settled` payment has one.
 */
export const paymentOfApi = (t: ApiTransaction): Payment => {
  const verdict = t.fraud_score === null
    ? null
    : t.status === "blocked"
    ? "blocked"
    : t.fraud_case_id !== null && t.status === "authorized"
    ? "review"
    : "passed"
  return {
    id: t.id,
    merchantId: t.merchant_id,
    status: t.status,
    amountCents: t.amount_cents,
    currency: t.currency,
    capturedAmountCents: t.captured_amount_cents,
    refundedAmountCents: t.refunded_amount_cents,
    feeCents: t.fee_cents,
    captureMethod: t.capture_method,
    idempotencyKey: t.idempotency_key,
    fraudScore: t.fraud_score,
    fraudVerdict: verdict,
    fraudCaseId: t.fraud_case_id,
    failureCode: t.failure_code,
    settledAt: t.status === "settled" ? Date.parse(t.updated_at) : null,
    dispute: t.dispute === null ? null : {
      status: t.dispute.status,
      reason: t.dispute.reason,
      amountCents: t.dispute.amount_cents,
      openedAt: Date.parse(t.dispute.opened_at),
      resolvedAt: t.dispute.resolved_at === null ? null : Date.parse(t.dispute.resolved_at)
    },
    createdAt: Date.parse(t.created_at),
    updatedAt: Date.parse(t.updated_at)
  } as unknown as Payment
}

/** Events as listed (oldest first), numbered in that order. */
const eventsOfApi = (t: ApiTransaction, events: ReadonlyArray<ApiEvent>): Array<PaymentEvent> =>
  events.map((e, i) => ({
    id: e.id,
    paymentId: t.id,
    merchantId: t.merchant_id,
    type: e.type,
    sequence: i + 1,
    data: e.data as unknown as PaymentEvent["data"],
    createdAt: Date.parse(e.created_at)
  }))

/** Entries as listed; the merchant is the one whose key read them (another merchant's are never shown). */
const ledgerOfApi = (t: ApiTransaction, entries: ReadonlyArray<ApiLedgerEntry>): Array<LedgerEntry> =>
  entries.map((e) => ({
    id: e.id,
    groupId: e.group_id,
    paymentId: e.transaction_id,
    merchantId: t.merchant_id,
    account: e.account,
    direction: e.direction,
    amountCents: e.amount_cents,
    currency: e.currency,
    createdAt: Date.parse(e.created_at)
  }))

export interface WitnessMerchant {
  readonly id: string
  /** A key the run never rotates (reads). */
  readonly readKey: string
  /** The endpoint URL the run registered (null: none; its events are not delivered). */
  readonly webhookUrl: string | null
  /** The balances read before the run (a merchant with history), by currency. */
  readonly balancesBefore: ReadonlyArray<ApiBalance>
}

export interface WitnessInput {
  readonly auditor: Auditor
  readonly get: ApiGet
  readonly merchants: ReadonlyArray<WitnessMerchant>
  /** Payments created since (ISO): the run's. */
  readonly sinceIso: string
  /** What each merchant was told about its payments (sim/world/Workload.ts). */
  readonly expectations: ReadonlyArray<Expectation>
  /** What reached the endpoints; null: no webhooks checked. */
  readonly webhooks: {
    readonly receipts: Receipts
    readonly scheduleMs: ReadonlyArray<number>
    readonly timeoutMs: number
    readonly toleranceMs: number
    /** When a service process died or stalled (epoch ms; absent: never): a retry due then may come late. */
    readonly faultsMs?: ReadonlyArray<number>
    /**
     * The witness of each endpoint's backlog (`HeldSlots`, as the receiver saw its POSTs) and the
     * attempts the service works at once per endpoint: with it a retry may be later than
     * `toleranceMs` only while the endpoint held that many (`auditDeliveries`'s `backlog`).
     */
    readonly backlog?: { readonly held: HeldSlots; readonly concurrency: number }
    /** How far two instances' clocks may disagree (absent: 0). */
    readonly clockToleranceMs?: number
    /** When the endpoint saw each attempt end (`auditDeliveries`'s `attemptEndedAtMs`); absent: not read. */
    readonly attemptEndedAtMs?: (deliveryId: string, attempt: number) => number
  } | null
  /** Reads at once (the laws' reads are a burst after the run). */
  readonly concurrency: number
  /**
   * Whether a settlement cut-off passed since the run's payments were made: "none" (the reader
   * knows, e.g. the harness set the cut-off away from the run) makes every payment's ledger
   * checked account by account as unsettled but for a `settled` one, a `refunded` one included;
   * "unknown" (absent) leaves a `refunded` payment's settlement open (the API shows no
   * `settled_at`): one of pending and available holds its net, the other nothing.
   */
  readonly cutoffPassed?: "none" | "unknown"
  /**
   * One payment per key as the client knows its keys (sim/world/Workload.ts `auditCreateKeys`), given
   * the run's payments as the API lists them. Absent: not checked.
   */
  readonly auditCreateKeys?: (
    payments: Iterable<
      {
        readonly id: string
        readonly merchantId: string
        readonly idempotencyKey: string | null
        readonly metadata: Readonly<Record<string, string>> | null
      }
    >
  ) => void
}

export interface Witnessed {
  readonly payments: number
  readonly events: number
  readonly deliveries: number
  /** Event id → its payment; delivery id → its event (to name the payment of a webhook violation). */
  readonly paymentOfEvent: ReadonlyMap<string, string>
  readonly eventOfDelivery: ReadonlyMap<string, string>
  /** The run's payments as the API showed them at the end. */
  readonly finals: ReadonlyMap<string, ApiTransaction>
  /** Does the service record cut attempts (a `cut` field on its attempts)? And how many it recorded. */
  readonly recordsCuts: boolean
  readonly cutAttempts: number
}

const is2xx = (status: number | null) => status !== null && status >= 200 && status < 300

/** Pages of a list, read until the last (`meta.has_more`), each read tried again a few times. */
const reader = (get: ApiGet) => {
  const read = async <A>(path: string, apiKey: string): Promise<A> => {
    for (let attempt = 0;; attempt++) {
      const answer = await get(path, apiKey)
      if (answer !== null && answer.status === 200) return JSON.parse(answer.body) as A
      if (attempt >= 5) {
        throw new Error(
          `GET ${path} answered ${answer === null ? "nothing" : `${answer.status} ${answer.body.slice(0, 200)}`}`
        )
      }
      await new Promise((resolve) => setTimeout(resolve, 200 * (attempt + 1)))
    }
  }
  const pages = async <A>(path: string, field: string, apiKey: string): Promise<Array<A>> => {
    const all: Array<A> = []
    for (let page = 1;; page++) {
      const body = await read<Record<string, unknown> & { meta: { has_more: boolean } }>(
        `${path}${path.includes("?") ? "&" : "?"}per_page=100&page=${page}`,
        apiKey
      )
      all.push(...(body[field] as Array<A>))
      if (!body.meta.has_more) return all
    }
  }
  return { read, pages }
}

type Moved = { pending: number; available: number; reserved: number }

/** Adds what a payment's entries moved on the merchant's accounts (its `balances`, by chart position) to its currency's sum. */
const addMoved = (
  moved: Map<string, Moved>,
  currency: string,
  entries: ReadonlyArray<LedgerEntry>,
  balances: Float64Array
) => {
  if (
    !entries.some((e) =>
      e.account === "merchant_pending" || e.account === "merchant_available" || e.account === "merchant_reserved"
    )
  ) return
  const sum = moved.get(currency) ?? { pending: 0, available: 0, reserved: 0 }
  moved.set(currency, {
    pending: sum.pending + balances[chartPosition.merchant_pending]!,
    available: sum.available + balances[chartPosition.merchant_available]!,
    reserved: sum.reserved + balances[chartPosition.merchant_reserved]!
  })
}

/**
 * Law `balances`: a merchant's balance by type, read through the API, is what it was before the
 * run plus what the run's ledger entries moved (`when`: which reading it is, for the message).
 */
const checkBalances = async (
  auditor: Auditor,
  read: ReturnType<typeof reader>["read"],
  merchant: WitnessMerchant,
  moved: ReadonlyMap<string, Moved>,
  when: string
) => {
  const after = (await read<{ balances: Array<ApiBalance> }>("/api/v1/merchants/me/balance", merchant.readKey)).balances
  for (
    const currency of new Set([
      ...after.map((b) => b.currency),
      ...merchant.balancesBefore.map((b) => b.currency),
      ...moved.keys()
    ])
  ) {
    const now = after.find((b) => b.currency === currency) ?? { pending: 0, available: 0, reserved: 0 }
    const before = merchant.balancesBefore.find((b) => b.currency === currency) ??
      { pending: 0, available: 0, reserved: 0 }
    const sum = moved.get(currency) ?? { pending: 0, available: 0, reserved: 0 }
    auditor.check(
      now.pending - before.pending === sum.pending && now.available - before.available === sum.available &&
        now.reserved - before.reserved === sum.reserved,
      "balances",
      () =>
        `merchant ${merchant.id} ${currency}${when}: balance ${JSON.stringify(now)} (before the run ${
          JSON.stringify(before)
        }) but the run's entries sum to ${JSON.stringify(sum)}`
    )
  }
}

/**
 * The ledger law after a settlement the reader ran itself with the cut-off at that moment
 * (`payments settle`), once nothing else moved: every payment with money captured was swept (a
 * `captured` one is `settled` now, a `refunded` one swept though its status stays), so each
 * account is checked as settled (`merchant_pending` 0, `merchant_available` the net), and the
 * balances by type are again the sums of the entries (`balancesBefore`: the merchant's before
 * the run). Payments read through the API, as `witnessThroughApi` reads them.
 */
export const witnessSettledLedger = async (input: {
  readonly auditor: Auditor
  readonly get: ApiGet
  readonly merchants: ReadonlyArray<WitnessMerchant>
  readonly sinceIso: string
  readonly settledAtIso: string
  readonly concurrency: number
}): Promise<{ readonly payments: number }> => {
  const { auditor } = input
  const { read, pages } = reader(input.get)
  let payments = 0
  for (const merchant of input.merchants) {
    const transactions = await pages<ApiTransaction>(
      `/api/v1/transactions?from=${encodeURIComponent(input.sinceIso)}`,
      "transactions",
      merchant.readKey
    )
    const moved = new Map<string, Moved>()
    await pool(transactions, input.concurrency, async (t) => {
      const ledgerList = await read<{ ledger_entries: Array<ApiLedgerEntry> }>(
        `/api/v1/transactions/${t.id}/ledger`,
        merchant.readKey
      )
      const swept = t.captured_amount_cents > 0
      auditor.check(
        !swept || t.status === "settled" || t.status === "refunded",
        "settled-by-cut-off",
        () =>
          `payment ${t.id}: captured ${t.captured_amount_cents} before the settlement at ${input.settledAtIso}, still ${t.status} after it`
      )
      const record = paymentOfApi(t)
      const payment: Payment = swept && record.settledAt === null
        ? { ...record, settledAt: Date.parse(input.settledAtIso) }
        : record
      const balances = new Float64Array(chartSize)
      const entries = ledgerOfApi(t, ledgerList.ledger_entries)
      auditor.auditLedger(payment, entries, balances, true)
      payments++
      addMoved(moved, t.currency, entries, balances)
    })
    await checkBalances(auditor, read, merchant, moved, " after the settlement")
  }
  return { payments }
}

/** Runs `work` over `items`, `concurrency` at a time. */
const pool = async <A>(items: ReadonlyArray<A>, concurrency: number, work: (item: A) => Promise<void>) => {
  let next = 0
  const worker = async () => {
    while (next < items.length) await work(items[next++]!)
  }
  await Promise.all(Array.from({ length: Math.max(1, Math.min(concurrency, items.length)) }, worker))
}

/**
 * A stored delivery as the audit reads it, with its place in its payment's order; null when its
 * event is not one of the run's payments. Counts its cut attempts into `cuts`.
 */
const deliveryOfApi = (
  d: ApiDelivery,
  order: ReadonlyMap<string, { readonly paymentId: string; readonly sequence: number }>,
  cuts: { recorded: boolean; attempts: number }
): AuditedDelivery | null => {
  const place = order.get(d.event_id)
  if (place === undefined) return null
  const attempts = [...d.attempts].sort((a, b) => a.attempt - b.attempt).map((a) => {
    if (a.cut !== undefined) cuts.recorded = true
    if (a.cut === true) cuts.attempts++
    return {
      attempt: a.attempt,
      at: Date.parse(a.at),
      responseStatus: a.response_status,
      error: a.error,
      cut: a.cut === true
    }
  })
  const firstFailed = attempts.find((a) => !a.cut && !is2xx(a.responseStatus))
  return {
    id: d.id,
    eventId: d.event_id,
    eventType: d.event_type,
    url: d.url,
    status: d.status,
    order: place,
    createdAt: Date.parse(d.created_at),
    firstFailedAt: firstFailed === undefined ? null : firstFailed.at,
    attempts
  }
}

/** Every answer a merchant got is what the final record says (unless the answer never came). */
const checkMoneyAsAnswered = (
  auditor: Auditor,
  expectations: ReadonlyArray<Expectation>,
  finals: ReadonlyMap<string, ApiTransaction>
) => {
  for (const expected of expectations) {
    const t = finals.get(expected.paymentId)
    if (t === undefined) {
      auditor.fail(
        "money-as-answered",
        `payment ${expected.paymentId}: created for the merchant, not listed by the API`
      )
      continue
    }
    if (expected.uncertain) continue
    if (expected.capturedCents !== null) {
      auditor.check(
        t.captured_amount_cents === expected.capturedCents,
        "money-as-answered",
        () => `payment ${t.id}: captured ${t.captured_amount_cents}, the merchant was told ${expected.capturedCents}`
      )
    }
    auditor.check(
      t.refunded_amount_cents === expected.refundedCents,
      "money-as-answered",
      () => `payment ${t.id}: refunded ${t.refunded_amount_cents}, the merchant was told ${expected.refundedCents}`
    )
  }
}

/**
 * The webhook laws over the stored deliveries and what reached the endpoints: the delivery audit,
 * every event delivered, nothing left pending, nothing recorded as answered that was sent again
 * after its 2xx, and every success acknowledged by an endpoint.
 */
const auditWebhooks = (
  auditor: Auditor,
  webhooks: NonNullable<WitnessInput["webhooks"]>,
  deliveries: ReadonlyArray<AuditedDelivery>,
  allEvents: ReadonlyArray<{ readonly event: ApiEvent; readonly paymentId: string; readonly delivered: boolean }>
) => {
  const nowMs = Date.now()
  const audited = auditDeliveries(auditor, () => deliveries, {
    nowMs,
    scheduleMs: webhooks.scheduleMs,
    timeoutMs: webhooks.timeoutMs,
    toleranceMs: webhooks.toleranceMs,
    crashesMs: webhooks.faultsMs ?? [],
    ...(webhooks.backlog === undefined
      ? {}
      : { backlog: webhooks.backlog, networkToleranceMs: webhooks.toleranceMs }),
    clockToleranceMs: webhooks.clockToleranceMs ?? 0,
    ...(webhooks.attemptEndedAtMs === undefined ? {} : { attemptEndedAtMs: webhooks.attemptEndedAtMs }),
    receipts: webhooks.receipts,
    unansweredMayBeLost: true
  })
  for (const { event, paymentId, delivered } of allEvents) {
    if (!delivered) continue
    auditor.check(
      audited.hasStoredDelivery(event.id),
      "webhook-every-event-delivered",
      () => `event ${event.id} (${event.type} of ${paymentId}) has no delivery`
    )
  }
  // Nothing left pending once the run drained (a delivery still open is reported with its age).
  for (const d of deliveries) {
    auditor.check(
      d.status === "succeeded" || d.status === "failed",
      "webhook-drained",
      () =>
        `delivery ${d.id} (event ${d.eventId} of ${d.order?.paymentId}): still ${d.status} after the drain, ${d.attempts.length} attempts`
    )
  }
  // An attempt after a 2xx the endpoint wrote: the service must have recorded the acknowledged
  // attempt as unanswered (its timeout fired before the answer reached it, or it was cut off),
  // never as a 2xx. (The same number sent again is `webhook-once-per-attempt`'s to judge: what
  // the service recorded under it may be the second sending's answer.)
  const byId = new Map(deliveries.map((d) => [d.id, d]))
  for (const { deliveryId, attempt, next } of webhooks.receipts.retriedAfterAck) {
    if (next === attempt) continue
    const d = byId.get(deliveryId)
    const recorded = d?.attempts.find((a) => a.attempt === attempt)
    auditor.check(
      recorded === undefined || !is2xx(recorded.responseStatus),
      "webhook-nothing-after-2xx",
      () =>
        `delivery ${deliveryId}: attempt ${next} arrived after attempt ${attempt}, which the service recorded as answered ${recorded?.responseStatus}`
    )
  }
  // A delivery that succeeded was acknowledged by the endpoint (its 2xx was written there).
  for (const d of deliveries) {
    if (d.status !== "succeeded") continue
    const slot = webhooks.receipts.ofDelivery(d.id)
    auditor.check(
      slot >= 0 && !Number.isNaN(webhooks.receipts.ackedAtMs[slot]!),
      "webhook-every-event-delivered",
      () => `delivery ${d.id} (event ${d.eventId}) succeeded, but no endpoint answered it with a 2xx`
    )
  }
}

export const witnessThroughApi = async (input: WitnessInput): Promise<Witnessed> => {
  const { auditor } = input
  const { read, pages } = reader(input.get)
  const paymentOfEvent = new Map<string, string>()
  const eventOfDelivery = new Map<string, string>()
  const deliveries: Array<AuditedDelivery> = []
  const cuts = { recorded: false, attempts: 0 }
  const allEvents: Array<{ readonly event: ApiEvent; readonly paymentId: string; readonly delivered: boolean }> = []
  const finals = new Map<string, ApiTransaction>()
  let events = 0
  const balances = new Float64Array(chartSize)
  for (const merchant of input.merchants) {
    const transactions = await pages<ApiTransaction>(
      `/api/v1/transactions?from=${encodeURIComponent(input.sinceIso)}`,
      "transactions",
      merchant.readKey
    )
    /** Merchant money moved by the run's payments, by currency (`balances`: the delta since the run began). */
    const moved = new Map<string, Moved>()
    const byKey = new Map<string, string>()
    const fraudCases = new Map(
      (await pages<ApiFraudCase & { readonly id: string }>("/api/v1/fraud/cases", "fraud_cases", merchant.readKey)).map(
        (c) => [c.id, c]
      )
    )
    const order = new Map<string, { readonly paymentId: string; readonly sequence: number }>()
    await pool(transactions, input.concurrency, async (t) => {
      const [eventList, ledgerList] = await Promise.all([
        read<{ events: Array<ApiEvent> }>(`/api/v1/transactions/${t.id}/events`, merchant.readKey),
        read<{ ledger_entries: Array<ApiLedgerEntry> }>(`/api/v1/transactions/${t.id}/ledger`, merchant.readKey)
      ])
      // The fraud explanation of every screened payment: the record's, and its case's in full.
      if (t.fraud_score !== null) {
        const c = t.fraud_case_id === null ? null : fraudCases.get(t.fraud_case_id) ?? null
        auditor.check(
          t.fraud_case_id === null || c !== null,
          "fraud-explanation",
          () => `payment ${t.id}: its fraud case ${t.fraud_case_id} is not listed`
        )
        auditor.checkFraudExplanation(
          t.id,
          t.fraud_score,
          t.fraud_explanations ?? [],
          c === null ? null : { riskScore: c.risk_score, baseValue: c.base_value, explanations: c.explanations },
          c?.model_output ?? null
        )
      }
      const payment = paymentOfApi(t)
      const stream = eventsOfApi(t, eventList.events)
      events += stream.length
      finals.set(t.id, t)
      stream.forEach((e, i) => {
        paymentOfEvent.set(e.id, t.id)
        order.set(e.id, { paymentId: t.id, sequence: i + 1 })
        allEvents.push({ event: eventList.events[i]!, paymentId: t.id, delivered: merchant.webhookUrl !== null })
      })
      auditor.checkTrace(payment, stream)
      // The last event carries the record as its last change left it (every change of status or money has one).
      const last = eventList.events[eventList.events.length - 1]?.data
      auditor.check(
        last !== undefined && last.status === t.status && last.captured_amount_cents === t.captured_amount_cents &&
          last.refunded_amount_cents === t.refunded_amount_cents,
        "trace-matches-status",
        () =>
          `payment ${t.id}: the last event says ${
            JSON.stringify(last)
          }, the record ${t.status} ${t.captured_amount_cents}/${t.refunded_amount_cents}`
      )
      const entries = ledgerOfApi(t, ledgerList.ledger_entries)
      // The API shows no settled_at: a `refunded` payment may have been swept or not (a `settled` one was, any other not).
      auditor.auditLedger(payment, entries, balances, input.cutoffPassed === "none" || payment.status !== "refunded")
      auditor.checkQuiescent(payment)
      addMoved(moved, t.currency, entries, balances)
      if (t.idempotency_key !== null) {
        const other = byKey.get(t.idempotency_key)
        auditor.check(
          other === undefined,
          "one-transaction-per-key",
          () => `idempotency key ${t.idempotency_key} of ${merchant.id}: transactions ${other} and ${t.id}`
        )
        byKey.set(t.idempotency_key, t.id)
      }
    })
    // Balance by type equals the sum of the ledger: what the run's payments moved, over what was there before.
    await checkBalances(auditor, read, merchant, moved, "")
    if (input.webhooks !== null && merchant.webhookUrl !== null) {
      const stored = await pages<ApiDelivery>("/api/v1/webhooks/deliveries", "deliveries", merchant.readKey)
      for (const d of stored) {
        const delivery = deliveryOfApi(d, order, cuts)
        if (delivery === null) continue // not an event of the run's payments
        eventOfDelivery.set(d.id, d.event_id)
        deliveries.push(delivery)
      }
    }
  }
  input.auditCreateKeys?.(
    Array.from(
      finals.values(),
      (t) => ({ id: t.id, merchantId: t.merchant_id, idempotencyKey: t.idempotency_key, metadata: t.metadata ?? null })
    )
  )
  checkMoneyAsAnswered(auditor, input.expectations, finals)
  if (input.webhooks !== null) auditWebhooks(auditor, input.webhooks, deliveries, allEvents)
  return {
    payments: finals.size,
    events,
    deliveries: deliveries.length,
    paymentOfEvent,
    eventOfDelivery,
    finals,
    recordsCuts: cuts.recorded,
    cutAttempts: cuts.attempts
  }
}
