import { Effect } from "effect"
import type { FraudCase } from "../../src/domain/Fraud.ts"
import type { Account, LedgerEntry } from "../../src/domain/Ledger.ts"
import type { Change, Payment, PaymentEvent, PaymentStatus } from "../../src/domain/Payment.ts"
import { memoryOperations, type MemoryState } from "../../src/store/MemoryStore.ts"
import type { CommandKey, StoreShape } from "../../src/store/Store.ts"
import { grownTo } from "../engine/Columns.ts"
import { chargedBackCents, disputeLedger, disputeTransitions } from "./DisputeLaws.ts"
import {
  changeBug,
  decisionBug,
  needsLockingPath,
  type PlantedBug,
  resumedCreateBug,
  storeBug,
  storedChangeBug
} from "./PlantedBugs.ts"

/**
 * The auditor: an independent reference model of CONTRACT sections 5–7. It sees every decision
 * the store commits (continuous checks), every response the merchants receive, and the whole
 * store at the end. It never reuses the domain's own rules: the transition table and the ledger
 * equations below are written out again from the contract.
 */
export interface Violation {
  readonly invariant: string
  readonly message: string
  readonly atMs: number
}

/** (from, to, event) triples of CONTRACT section 6; "-" is a change without an event. */
const transitions = new Set([
  "null>pending:payment.initiated",
  "pending>authorized:payment.authorized",
  "pending>failed:payment.authorization_failed",
  "authorized>authorized:payment.fraud_passed",
  "authorized>authorized:-", // held for review (case opened) or a case labelled
  "authorized>blocked:payment.fraud_blocked",
  "authorized>captured:payment.captured",
  "authorized>voided:payment.voided",
  "captured>captured:payment.partially_refunded",
  "settled>settled:payment.partially_refunded",
  "captured>refunded:payment.refunded",
  "settled>refunded:payment.refunded",
  "captured>settled:payment.settled",
  "refunded>refunded:-", // settlement sweeps a payment refunded before the cut-off
  "blocked>blocked:-", // a fraud case of a blocked payment labelled
  "voided>voided:-",
  "captured>captured:-",
  "settled>settled:-",
  "failed>failed:-", // the cancel a payment with no answer in time owed, sent and answered
  // A refund the processor failed after accepting it (docs/api.md): taken back.
  "refunded>captured:payment.refund_failed",
  "refunded>settled:payment.refund_failed",
  "captured>captured:payment.refund_failed",
  "settled>settled:payment.refund_failed",
  // With a remote processor (docs/api.md, "Unknown outcomes at the processor"): an operation with no
  // answer in time, or one the processor refused once it answered, in any status.
  ...(["authorized", "captured", "settled", "refunded", "voided", "blocked", "failed"] as const).flatMap((status) => [
    `${status}>${status}:payment.processor_outcome_unknown`,
    `${status}>${status}:payment.processor_operation_refused`
  ]),
  ...disputeTransitions
])

/**
 * The same table as nested maps, from → to → event types ("-": none), so a decision's steps are
 * looked up without building a key string per step (the string is built only for a message).
 */
const transitionTable = new Map<string, Map<string, Set<string>>>()
for (const key of transitions) {
  const [from, rest] = key.split(">") as [string, string]
  const [to, type] = rest.split(":") as [string, string]
  let byTo = transitionTable.get(from)
  if (byTo === undefined) transitionTable.set(from, byTo = new Map())
  let types = byTo.get(to)
  if (types === undefined) byTo.set(to, types = new Set())
  types.add(type)
}
const legal = (from: string, to: string, type: string) => transitionTable.get(from)?.get(to)?.has(type) === true

const terminal: ReadonlySet<PaymentStatus> = new Set<PaymentStatus>(["refunded", "voided", "blocked", "failed"])

/** Fixed part of the processing fee per currency (docs/api.md), written out again from the documentation. */
const fixedFeeCents: Record<string, number> = { USD: 30, EUR: 25, GBP: 20, CAD: 30, AUD: 30, JPY: 0 }

/**
 * Minor units in one major unit (docs/api.md: money in integer minor units; JPY has none below
 * the yen, every other currency of the service a hundredth).
 */
const minorUnitsPerMajor = (currency: string) => (currency === "JPY" ? 1 : 100)

/**
 * The largest amount, in major units, up to which `tok_risk_review` never passes
 * (docs/fraud-model.md, `sandboxReviewMaximumMajor`: "never passes for amounts up to 1,000.00").
 */
const sandboxReviewMaximumMajor = 1_000

/**
 * The bands the sandbox tokens are documented to land in (docs/fraud-model.md): `tok_risk_review`
 * never passes up to `sandboxReviewMaximumMajor` (a larger amount may take it under 0.50),
 * `tok_risk_highest` is blocked at any amount.
 */
const sandboxBands = (payment: Payment): ReadonlyArray<string> | undefined =>
  payment.cardToken === "tok_risk_highest"
    ? ["blocked"]
    : payment.cardToken === "tok_risk_review" &&
        payment.amountCents <= sandboxReviewMaximumMajor * minorUnitsPerMajor(payment.currency)
    ? ["review", "blocked"]
    : undefined

/**
 * The model's features as docs/fraud-model.md lists them ("Features"): a case explains the
 * output with one contribution for each, and for nothing else.
 */
const documentedFeatures: ReadonlySet<string> = new Set([
  "network_risk_logit",
  "amount_log10",
  "amount_vs_merchant_log10",
  "card_attempts_last_hour",
  "card_attempts_last_day",
  "card_declines_last_day",
  "card_first_seen",
  "new_card_above_usual_log10",
  "country_mismatch",
  "night_utc",
  "card_brand_mastercard",
  "card_brand_amex",
  "card_brand_other",
  "currency_EUR",
  "currency_GBP",
  "currency_CAD",
  "currency_AUD",
  "currency_JPY"
])

/** One contribution a documented feature, each once. */
const explainsEachFeatureOnce = (explanations: ReadonlyArray<{ readonly feature: string }>) => {
  if (explanations.length !== documentedFeatures.size) return false
  const seen = new Set<string>()
  for (const e of explanations) {
    if (!documentedFeatures.has(e.feature) || seen.has(e.feature)) return false
    seen.add(e.feature)
  }
  return true
}

export interface AuditRules {
  readonly reviewThreshold: number
  readonly blockThreshold: number
}
export const defaultRules: AuditRules = { reviewThreshold: 0.5, blockThreshold: 0.8 }

const debitNormal: ReadonlySet<Account> = new Set<Account>(["card_network", "cardholder_authorizations"])

/** The chart of accounts (CONTRACT section 7), written out again; running balances are kept in this order. */
const accountIndex = new Map<string, number>(
  [
    "card_network",
    "merchant_pending",
    "merchant_available",
    "merchant_reserved",
    "fee_revenue",
    "authorization_holds",
    "cardholder_authorizations"
  ]
    .map((account, i) => [account, i])
)

/** The chart's size: each payment keeps this many running balances. */
const chart = accountIndex.size
/** The chart's size, for a caller of `auditLedger` (its balances array). */
export const chartSize = chart

/** Each account's position in the chart. */
const at = Object.fromEntries(accountIndex) as Readonly<Record<Account, number>>
/** Each account's position in the balances `auditLedger` leaves. */
export const chartPosition = at

/** `debitNormal` by chart position, so a posting looks its account up once. */
const debitNormalAt: ReadonlyArray<boolean> = [...accountIndex.keys()].map((account) =>
  debitNormal.has(account as Account)
)

/**
 * Posts an entry to the running balances at `base` (the chart in order). An account outside the
 * chart (only a bug posts one) is not kept: `ledger-account` reports it (`checkLedgerGroup`), and
 * the chart equations miss its money when its other side is in the chart.
 */
const post = (balances: Float64Array, base: number, entry: LedgerEntry) => {
  const i = accountIndex.get(entry.account)
  if (i === undefined) return
  balances[base + i] = balances[base + i]! +
    ((entry.direction === "debit") === debitNormalAt[i]! ? 1 : -1) * entry.amountCents
}

/** A column of numbers that grows as slots are added (doubling; new numbers 0). */
const grown = (column: Float64Array, size: number) => grownTo(column, size, (n) => new Float64Array(n))

/**
 * Ids committed over the run (event or ledger entry ids), in commit order, each with its
 * payment's slot: one run-wide log rather than an array a payment (whose first push reserves 17
 * places). The end of the run groups it by slot (`grouped`). The ids are the strings the store
 * holds too: a pointer an id.
 */
class IdLog {
  readonly ids: Array<string> = []
  private slots = new Int32Array(0)

  add(slot: number, id: string) {
    const i = this.ids.length
    this.slots = grownTo(this.slots, i + 1, (n) => new Int32Array(n))
    this.slots[i] = slot
    this.ids.push(id)
  }

  /**
   * The log grouped by slot, each slot's ids still in commit order (a counting sort): the ids of
   * slot s are `ids[order[k]]` for k from `start[s]` to `start[s + 1]`.
   */
  grouped(slotCount: number) {
    const n = this.ids.length
    const start = new Int32Array(slotCount + 1)
    for (let i = 0; i < n; i++) {
      const after = this.slots[i]! + 1
      start[after] = start[after]! + 1
    }
    for (let s = 1; s <= slotCount; s++) start[s] = start[s]! + start[s - 1]!
    const next = start.slice(0, slotCount)
    const order = new Int32Array(n)
    for (let i = 0; i < n; i++) {
      const slot = this.slots[i]!
      order[next[slot]!] = i
      next[slot] = next[slot]! + 1
    }
    const ids = this.ids
    return {
      /** The stored rows carry exactly the ids committed for the slot (-1: none was), in order. */
      same: (slot: number, stored: ReadonlyArray<{ readonly id: string }>) => {
        if (slot < 0) return false
        const from = start[slot]!
        if (start[slot + 1]! - from !== stored.length) return false
        for (let k = 0; k < stored.length; k++) if (stored[k]!.id !== ids[order[from + k]!]) return false
        return true
      },
      /** The slot's ids, for a message. */
      of: (slot: number) => {
        const list: Array<string> = []
        if (slot >= 0) { for (let k = start[slot]!; k < start[slot + 1]!; k++) list.push(ids[order[k]!]!) }
        return list
      }
    }
  }
}

/**
 * What the auditor keeps of the payments: per payment, what was committed (event and ledger ids
 * in order, the last version) and its running balances of the reference ledger. In columns, one
 * slot a payment (numbered as first committed), not objects a payment: 100,000 payments kept five
 * small long-lived objects each (a record, two id arrays, balances and their array), each copied
 * by the collector as it aged; numbers in typed arrays are never scanned.
 */
class CommittedPayments {
  private readonly slots = new Map<string, number>()
  /** The last committed version of each slot. */
  versions: Float64Array = new Float64Array(0)
  /** The running balances, `chart` numbers a slot (from `slot * chart`, in the chart's order). */
  balances: Float64Array = new Float64Array(0)
  readonly events = new IdLog()
  readonly ledger = new IdLog()

  /** Slots made (payments with a commit). */
  get count() {
    return this.slots.size
  }

  /** The payment's slot (-1: nothing of it was committed). */
  slotOf(paymentId: string) {
    return this.slots.get(paymentId) ?? -1
  }

  /** The payment's slot, made on its first commit. */
  slotFor(paymentId: string) {
    let slot = this.slots.get(paymentId)
    if (slot === undefined) {
      slot = this.slots.size
      this.slots.set(paymentId, slot)
      this.versions = grown(this.versions, this.count)
      this.balances = grown(this.balances, this.count * chart)
    }
    return slot
  }
}

/** What `checkEventsExact` compares a new payment's first change with: the record before it was created. */
const beforeCreation = {
  status: "pending",
  fraudVerdict: null,
  capturedAmountCents: 0,
  refundedAmountCents: 0
} as const
/** Scratch lists of the checks of one change (see their uses): no list allocated a change. */
const expectedScratch: Array<string> = []
const groupScratch: Array<string> = []
const sumScratch: Array<number> = []

/** A number written with at most 6 decimals (as it reads back from its millionths). */
const isSixDecimals = (x: number) => Number.isFinite(x) && Math.round(x * 1e6) / 1e6 === x

/** Whether `score` is exactly `1 / (1 + Math.exp(-k / 1e6))` for an integer k (its log-odds, rounded, and both neighbours tried). */
const isSigmoidOfMillionths = (score: number) => {
  const k = Math.round(Math.log(score / (1 - score)) * 1e6)
  for (let d = -1; d <= 1; d++) if (1 / (1 + Math.exp(-(k + d) / 1e6)) === score) return true
  return false
}

/** The fields the amount laws read. */
export interface AmountFields {
  readonly id: string
  readonly status: string
  readonly amountCents: number
  readonly capturedAmountCents: number
  readonly refundedAmountCents: number
  readonly failureCode: string | null
}

/** The message of a check that passed: never built (see `Auditor.check`). */
export const passed = () => ""

export class Auditor {
  readonly violations: Array<Violation> = []
  checks = 0
  /** The create keys that made a payment, by merchant (no joined key string a payment). */
  private readonly createKeys = new Map<string, Set<string>>()
  /** Per payment, what was committed and the running balances of the reference ledger. */
  private readonly committed = new CommittedPayments()
  /** The slot in `committed` that the last decision updated, and its payment. */
  private lastId: string | null = null
  private lastSlot = -1
  /** Fraud cases as committed: id → status (a case is reviewed once, from `open`). */
  private readonly caseStatus = new Map<string, string>()
  /** Command idempotency keys that took effect (merchant + key). */
  private readonly appliedCommandKeys = new Map<string, Set<string>>()

  constructor(
    private readonly clockMs: () => number,
    private readonly onViolation: (violation: Violation) => void = () => {},
    private readonly rules: AuditRules = defaultRules
  ) {}

  get failed() {
    return this.violations.length > 0
  }

  fail(invariant: string, message: string) {
    const violation = { invariant, message, atMs: this.clockMs() }
    this.violations.push(violation)
    this.onViolation(violation)
  }

  /** Told of every committed change (the processor laws follow which payments our books hold authorized). */
  onCommitted: ((before: Payment | null, after: Payment) => void) | undefined = undefined

  /** `message` is called only when the check fails (callers that pass `passed` build none). */
  check(condition: boolean, invariant: string, message: () => string) {
    this.checks++
    if (!condition) this.fail(invariant, message())
  }

  /** Counts one check and returns its condition: for hot paths that build their message only on a failure. */
  private counted(condition: boolean) {
    this.checks++
    return condition
  }

  // -------------------------------------------------------------------------------------------
  // Continuous: every committed decision

  /** Checks a decision about to be committed, against the record it was made on. */
  onChange(before: Payment | null, change: Change, commandKey?: CommandKey) {
    const after = change.payment
    this.onCommitted?.(before, after)
    this.checkSteps(before, change)
    if (before !== null) this.checkUpdate(before, change)
    else if (after.idempotencyKey !== null) this.checkCreateKey(after, after.idempotencyKey)
    this.checkAmounts(after)
    this.checkEventsExact(before, change)
    this.checkTerminal(before, change)
    this.checkFee(after)
    this.checkFraud(before, change)
    if (commandKey !== undefined) this.checkCommandKeyOnce(change, commandKey)
    this.recordCommitted(before, change)
  }

  /** Each event a legal step in sequence, the status reached a legal one, the version moved on. */
  private checkSteps(before: Payment | null, change: Change) {
    const after = change.payment
    const id = after.id
    // A change may chain several steps (authorize → screen → capture in one unit of work): each
    // event is one step, so walk them through the transition table in sequence order.
    let status: PaymentStatus | "null" = before?.status ?? "null"
    let sequence = before?.version ?? 0
    // The checks on this path (every committed decision) count and test in place (`counted`),
    // with the message built only on a failure: a closure per check allocated ~200 a payment.
    for (const event of change.events) {
      const to = event.data.status
      if (!this.counted(legal(status, to, event.type))) {
        this.fail("transition", `payment ${id}: illegal transition ${status}>${to}:${event.type}`)
      }
      if (!this.counted(event.sequence > sequence && event.sequence <= after.version)) {
        this.fail(
          "event-sequence",
          `payment ${id}: event ${event.type} has sequence ${event.sequence} after ${sequence} (version ${after.version})`
        )
      }
      this.checkEvent(after, event)
      status = to
      sequence = event.sequence
    }
    if (!this.counted(status === after.status || legal(status, after.status, "-"))) {
      this.fail("transition", `payment ${id}: illegal transition ${status}>${after.status} without an event`)
    }
    if (!this.counted(after.version > (before?.version ?? 0))) {
      this.fail("version", `payment ${id}: version ${before?.version} → ${after.version}`)
    }
  }

  /** An update keeps the payment's immutable fields, and moves no money without an event (but a sweep's). */
  private checkUpdate(before: Payment, change: Change) {
    const after = change.payment
    const id = after.id
    if (
      !this.counted(
        before.amountCents === after.amountCents && before.currency === after.currency &&
          before.merchantId === after.merchantId &&
          before.captureMethod === after.captureMethod && before.idempotencyKey === after.idempotencyKey &&
          before.id === id
      )
    ) this.fail("immutable-fields", `payment ${id}: an immutable field changed`)
    if (change.events.length === 0 && change.ledger.length > 0) {
      this.check(
        after.status === "refunded" && before.settledAt === null && after.settledAt !== null,
        "silent-money",
        () => `payment ${id}: money moved without an event (${before.status} → ${after.status})`
      )
    }
  }

  /** A create's idempotency key made one transaction of its merchant. */
  private checkCreateKey(after: Payment, idempotencyKey: string) {
    let keys = this.createKeys.get(after.merchantId)
    if (keys === undefined) this.createKeys.set(after.merchantId, keys = new Set())
    // A key already there leaves the set as it was: one look-up in a set of every create key of
    // the merchant, not a test and then an insertion (the final audit names both transactions).
    const size = keys.size
    keys.add(idempotencyKey)
    if (!this.counted(keys.size > size)) {
      this.fail(
        "one-transaction-per-key",
        `idempotency key ${idempotencyKey} of ${after.merchantId}: second transaction ${after.id}`
      )
    }
  }

  /** A command's idempotency key takes effect once. */
  private checkCommandKeyOnce(change: Change, commandKey: CommandKey) {
    let applied = this.appliedCommandKeys.get(commandKey.merchantId)
    if (applied === undefined) this.appliedCommandKeys.set(commandKey.merchantId, applied = new Set())
    // As for create keys: one look-up (the set only grows when the key is new).
    const size = applied.size
    applied.add(commandKey.key)
    if (!this.counted(applied.size > size)) {
      this.fail(
        "command-key-once",
        `payment ${change.payment.id}: idempotency key ${commandKey.key} took effect a second time (${
          change.events.map((e) => e.type).join(", ") || "no event"
        })`
      )
    }
  }

  /**
   * Records the change as committed (its version, events, ledger entries and balances) and checks
   * what follows from the record last committed: the version it was decided on, the ledger's laws.
   */
  private recordCommitted(before: Payment | null, change: Change) {
    const after = change.payment
    const id = after.id
    // A payment's changes often come one after another (a third of them, seed 1): the last
    // slot is kept at hand, sparing a look-up in the map of every payment of the run.
    const committed = this.committed
    let slot = this.lastId === id ? this.lastSlot : -1
    if (slot < 0) {
      slot = committed.slotFor(id)
      this.lastId = id
      this.lastSlot = slot
    }
    // A change follows from the record last committed (one decided on an older one, after another
    // process moved the payment, must be decided again: the store's version check). (0: a payment
    // this auditor has not seen committed, as in unit tests that start mid-way.)
    const lastVersion = committed.versions[slot]!
    if (before !== null && lastVersion !== 0 && !this.counted(lastVersion === before.version)) {
      this.fail(
        "version",
        `payment ${id}: a change decided on version ${before.version} committed over version ${lastVersion}`
      )
    }
    for (const event of change.events) committed.events.add(slot, event.id)
    for (const entry of change.ledger) committed.ledger.add(slot, entry.id)
    committed.versions[slot] = after.version
    this.checkLedgerGroup(after, change.ledger)
    const balances = committed.balances
    const base = slot * chart
    for (const entry of change.ledger) post(balances, base, entry)
    this.checkLedgerEquations(after, balances, base, "after a decision")
  }

  /**
   * Each state change emits exactly its documented event, once, in order, and nothing emits an
   * event without a change: the events a change must carry are derived from the difference
   * between the record before and after (CONTRACT section 6), independently of the domain.
   */
  private checkEventsExact(before: Payment | null, change: Change) {
    const after = change.payment
    const from = before ?? beforeCreation
    // (One list reused by every change: the auditor runs one decision at a time.)
    const expected = expectedScratch
    expected.length = 0
    if (before === null) expected.push("payment.initiated")
    if (from.status === "pending" && after.status !== "pending") {
      expected.push(after.status === "failed" ? "payment.authorization_failed" : "payment.authorized")
    }
    if (from.fraudVerdict !== "passed" && after.fraudVerdict === "passed") expected.push("payment.fraud_passed")
    if (from.status !== "blocked" && after.status === "blocked") expected.push("payment.fraud_blocked")
    if (from.capturedAmountCents === 0 && after.capturedAmountCents > 0) expected.push("payment.captured")
    if (from.status !== "voided" && after.status === "voided") expected.push("payment.voided")
    if (after.refundedAmountCents > from.refundedAmountCents) {
      expected.push(after.status === "refunded" ? "payment.refunded" : "payment.partially_refunded")
    }
    if (after.refundedAmountCents < from.refundedAmountCents) expected.push("payment.refund_failed")
    if (from.status !== "settled" && after.status === "settled") expected.push("payment.settled")
    const disputeBefore = before?.dispute?.status ?? null
    const disputeAfter = after.dispute?.status ?? null
    if (disputeBefore === null && disputeAfter !== null) expected.push("payment.dispute_opened")
    if (disputeAfter !== null && disputeAfter !== "open" && disputeBefore !== disputeAfter) {
      expected.push("payment.dispute_resolved")
    }
    // An operation at the processor (docs/api.md): no answer in time is said once; an answer that
    // it did not happen (a capture or refund that moved nothing, or a cancel refused) is said too.
    const pendingBefore = before?.processorPending ?? null
    const pendingAfter = after.processorPending
    if (pendingAfter?.outcome === "unknown" && pendingBefore?.outcome !== "unknown") {
      expected.push("payment.processor_outcome_unknown")
    }
    if (pendingBefore !== null && pendingAfter === null) {
      const refused = pendingBefore.operation === "capture"
        ? after.capturedAmountCents === from.capturedAmountCents
        : pendingBefore.operation === "refund"
        ? after.refundedAmountCents === from.refundedAmountCents
        : change.events.some((e) => e.type === "payment.processor_operation_refused")
      if (refused) expected.push("payment.processor_operation_refused")
    }
    const events = change.events
    let same = events.length === expected.length
    for (let i = 0; same && i < events.length; i++) same = events[i]!.type === expected[i]
    if (!this.counted(same)) {
      this.fail(
        "event-per-change",
        `payment ${after.id} (${before?.status ?? "new"} → ${after.status}): events [${
          events.map((e) => e.type).join(", ")
        }], the change calls for [${expected.join(", ")}]`
      )
    }
    // A change carries a handful of events: comparing each pair beats building a set.
    let distinct = true
    for (let i = 1; distinct && i < events.length; i++) {
      for (let j = 0; j < i; j++) if (events[i]!.id === events[j]!.id) distinct = false
    }
    if (!this.counted(distinct)) this.fail("event-per-change", `payment ${after.id}: one event id twice in a change`)
  }

  /**
   * Terminal states are final: a refunded, voided, blocked or failed payment never changes again
   * (but for the settlement sweep, case labels, and a refund the processor failed later).
   */
  private checkTerminal(before: Payment | null, change: Change) {
    if (before === null || !terminal.has(before.status)) return
    const after = change.payment
    // A refund the processor failed after accepting it takes a refunded payment back (docs/api.md).
    if (
      before.status === "refunded" && change.events.length === 1 && change.events[0]!.type === "payment.refund_failed"
    ) return
    const sweep = before.status === "refunded" && before.settledAt === null && after.settledAt !== null
    this.check(
      after.status === before.status && after.capturedAmountCents === before.capturedAmountCents &&
        after.refundedAmountCents === before.refundedAmountCents && after.feeCents === before.feeCents &&
        (change.ledger.length === 0 || sweep),
      "terminal-final",
      () =>
        `payment ${after.id}: terminal status ${before.status} changed (→ ${after.status}, ${change.ledger.length} ledger entries)`
    )
  }

  /** The processing fee (CONTRACT: fees are entries too): 2.9% rounded half up, plus a fixed part per currency, never above the capture. */
  private checkFee(p: Payment) {
    const expected = p.capturedAmountCents === 0
      ? 0
      : Math.min(
        p.capturedAmountCents,
        Math.floor((p.capturedAmountCents * 29 + 500) / 1000) + (fixedFeeCents[p.currency] ?? Number.NaN)
      )
    if (!this.counted(p.feeCents === expected)) {
      this.fail(
        "fee-exact",
        `payment ${p.id}: fee ${p.feeCents} on ${p.capturedAmountCents} ${p.currency}, expected ${expected}`
      )
    }
  }

  /**
   * Fraud: a screening puts the payment in the band its thresholds say, with a case opened
   * exactly when it is held or blocked; a review decides a held payment as documented (confirmed:
   * blocked, hold released; false positive: passed) and only labels any other; a case is
   * reviewed once.
   */
  private checkFraud(before: Payment | null, change: Change) {
    const after = change.payment
    const fraudCase: FraudCase | null = change.fraudCase
    // A create written once (`insertCreated`) is screened in its first commit: no record before it.
    if ((before === null || before.fraudVerdict === null) && after.fraudVerdict !== null) {
      const score = after.fraudScore ?? Number.NaN
      const band = score < this.rules.reviewThreshold
        ? "passed"
        : score < this.rules.blockThreshold
        ? "review"
        : "blocked"
      // Counted and tested in place (`counted`): the message is built only on a failure.
      if (!this.counted(after.fraudVerdict === band)) {
        this.fail(
          "fraud-band",
          `payment ${after.id}: score ${score} screened ${after.fraudVerdict}, its band is ${band}`
        )
      }
      const bandsOfToken = sandboxBands(after)
      if (!this.counted(bandsOfToken === undefined || bandsOfToken.includes(band))) {
        this.fail(
          "fraud-band",
          `payment ${after.id}: ${after.cardToken} scored ${score} (${band}), documented ${bandsOfToken?.join(" or ")}`
        )
      }
      const opened = fraudCase !== null && fraudCase.status === "open" && fraudCase.id === after.fraudCaseId &&
        fraudCase.paymentId === after.id && fraudCase.riskScore === after.fraudScore
      if (!this.counted(band === "passed" ? fraudCase === null && after.fraudCaseId === null : opened)) {
        this.fail(
          "fraud-case",
          `payment ${after.id}: screened ${band} with case ${
            JSON.stringify(fraudCase?.status ?? null)
          } (${after.fraudCaseId})`
        )
      }
      this.checkFraudExplanation(after.id, score, after.fraudExplanations ?? [], fraudCase)
    }
    if (fraudCase === null) return
    const previous = this.caseStatus.get(fraudCase.id)
    if (fraudCase.status !== "open") {
      this.check(
        previous === "open",
        "fraud-review",
        () => `fraud case ${fraudCase.id}: reviewed from ${previous ?? "nowhere"} to ${fraudCase.status}`
      )
      if (before !== null) {
        const held = before.status === "authorized" && before.fraudVerdict === "review"
        const ok = !held
          ? after.status === before.status && after.fraudVerdict === before.fraudVerdict
          : fraudCase.status === "confirmed_fraud"
          ? after.status === "blocked" && after.fraudVerdict === "blocked"
          : after.status === "authorized" && after.fraudVerdict === "passed"
        this.check(
          ok,
          "fraud-review",
          () =>
            `payment ${after.id} (${before.status}, verdict ${before.fraudVerdict}): review ${fraudCase.status} left it ${after.status}, verdict ${after.fraudVerdict}`
        )
      }
    }
    this.caseStatus.set(fraudCase.id, fraudCase.status)
  }

  /**
   * The fraud explanation of a screened payment, with the arithmetic docs/fraud-model.md states
   * (written out again here, as `Fraud.modelOutput` and `Fraud.sigmoid` define it): the score is
   * `1 / (1 + Math.exp(-output))` of a model output with 6 decimals, bit for bit; the record's
   * explanations are the largest |contribution| first, each with 6 decimals; and with a case
   * (every held or blocked payment), `base value + Σ contributions = output` summed in whole
   * millionths over one contribution per model feature, `score = sigmoid(output)`, the case's
   * score the payment's, and the record's explanations the case's first ones. `modelOutput` is
   * the output as the API shows it (the harness), null when the reader has none (the store).
   */
  checkFraudExplanation(
    paymentId: string,
    score: number | null,
    explanations: ReadonlyArray<{ readonly feature: string; readonly value: number; readonly contribution: number }>,
    fraudCase: {
      readonly riskScore: number
      readonly baseValue: number | null
      readonly explanations: ReadonlyArray<
        { readonly feature: string; readonly value: number; readonly contribution: number }
      >
    } | null,
    modelOutput: number | null = null
  ) {
    const bad = (why: string) => this.fail("fraud-explanation", `payment ${paymentId}: ${why}`)
    if (!this.counted(typeof score === "number" && score >= 0 && score <= 1)) {
      return bad(`score ${score} is not a probability`)
    }
    const s = score as number
    if (!this.counted(s === 1 || s === 0 || isSigmoidOfMillionths(s))) {
      bad(`score ${s} is not 1 / (1 + e^-output) of any output with 6 decimals`)
    }
    for (let i = 0; i < explanations.length; i++) {
      const e = explanations[i]!
      const previous = explanations[i - 1]
      const ordered = previous === undefined || Math.abs(previous.contribution) >= Math.abs(e.contribution)
      if (!this.counted(isSixDecimals(e.contribution) && isSixDecimals(e.value) && ordered)) {
        bad(
          `explanation ${i} ${JSON.stringify(e)} after ${
            JSON.stringify(previous ?? null)
          }: not 6 decimals, or not largest |contribution| first`
        )
      }
    }
    if (fraudCase === null) return
    const base = fraudCase.baseValue
    if (!this.counted(base !== null && isSixDecimals(base) && explainsEachFeatureOnce(fraudCase.explanations))) {
      return bad(
        `case base value ${base} with contributions of [${
          fraudCase.explanations.map((e) => e.feature).join(", ")
        }] (docs/fraud-model.md lists ${documentedFeatures.size} features, one contribution each)`
      )
    }
    let millionths = Math.round(base! * 1e6)
    for (const e of fraudCase.explanations) millionths += Math.round(e.contribution * 1e6)
    const output = millionths / 1e6
    if (!this.counted(1 / (1 + Math.exp(-output)) === s && fraudCase.riskScore === s)) {
      bad(
        `base ${base} + Σ contributions = ${output}, whose sigmoid is ${
          1 / (1 + Math.exp(-output))
        }; case score ${fraudCase.riskScore}, payment score ${s}`
      )
    }
    if (modelOutput !== null && !this.counted(Math.round(modelOutput * 1e6) === millionths)) {
      bad(`model_output ${modelOutput}, base + Σ contributions ${output}`)
    }
    let same = explanations.length === Math.min(fraudCase.explanations.length, explanations.length)
    for (let i = 0; same && i < explanations.length; i++) {
      const a = explanations[i]!
      const b = fraudCase.explanations[i]!
      same = a.feature === b.feature && a.value === b.value && a.contribution === b.contribution
    }
    if (!this.counted(same)) bad(`the record's explanations are not the case's first ${explanations.length}`)
  }

  /** Every event belongs to the payment; the one stamped with the final version carries the committed record. */
  private checkEvent(payment: Payment, event: PaymentEvent) {
    if (
      !this.counted(
        event.paymentId === payment.id && event.merchantId === payment.merchantId &&
          event.data.amount_cents === payment.amountCents &&
          (event.sequence !== payment.version || (event.data.status === payment.status &&
            event.data.captured_amount_cents === payment.capturedAmountCents &&
            event.data.refunded_amount_cents === payment.refundedAmountCents))
      )
    ) {
      this.fail(
        "event-snapshot",
        `payment ${payment.id}: event ${event.type} (sequence ${event.sequence}) does not carry the committed record`
      )
    }
  }

  checkAmounts(
    p: {
      readonly id: string
      readonly status: PaymentStatus
      readonly amountCents: number
      readonly capturedAmountCents: number
      readonly refundedAmountCents: number
      readonly feeCents?: number
      readonly failureCode: string | null
      readonly dispute?: Payment["dispute"]
    }
  ) {
    this.checkAmountsOf(p, chargedBackCents(p))
    // Captured money is refunded or disputed, never both: an open dispute holds its amount and a
    // lost one gave it back to the cardholder, so neither may also be refunded (a won one returned it).
    const dispute = p.dispute
    const disputed = dispute === undefined || dispute === null || dispute.status === "won" ? 0 : dispute.amountCents
    if (!this.counted(p.refundedAmountCents + disputed <= p.capturedAmountCents)) {
      this.fail(
        "refunds-and-disputes-within-capture",
        `payment ${p.id}: refunded ${p.refundedAmountCents} + disputed ${disputed} (${dispute?.status}) > captured ${p.capturedAmountCents}`
      )
    }
    if (p.feeCents !== undefined) {
      if (!this.counted(p.feeCents >= 0 && p.feeCents <= p.capturedAmountCents)) {
        this.fail("fee-within-capture", `payment ${p.id}: fee ${p.feeCents}`)
      }
    }
  }

  /**
   * The amount laws of a payment's amounts: a record's, or a merchant's answer's (its few fields
   * only, not a record of the store's names), with what a lost dispute charged back.
   */
  checkAmountsOf(amounts: AmountFields, chargedBack = 0) {
    const { amountCents, capturedAmountCents, failureCode, id, refundedAmountCents, status } = amounts
    if (!this.counted(refundedAmountCents >= 0 && refundedAmountCents <= capturedAmountCents)) {
      this.fail(
        "refunds-within-capture",
        `payment ${id}: refunded ${refundedAmountCents} > captured ${capturedAmountCents}`
      )
    }
    if (!this.counted(capturedAmountCents >= 0 && capturedAmountCents <= amountCents)) {
      this.fail(
        "capture-within-authorization",
        `payment ${id}: captured ${capturedAmountCents} > authorized ${amountCents}`
      )
    }
    const captured = status === "captured" || status === "settled" || status === "refunded"
    if (!this.counted(captured === (capturedAmountCents > 0))) {
      this.fail("captured-amount", `payment ${id}: status ${status} with captured ${capturedAmountCents}`)
    }
    // A lost dispute returns money without a refund and leaves the status as it was (sim/world/Disputes.ts).
    const returned = captured && refundedAmountCents + chargedBack === capturedAmountCents
    if (!this.counted(status === "refunded" ? returned : !returned || chargedBack > 0)) {
      this.fail(
        "refunded-status",
        `payment ${id}: status ${status} with refunded ${refundedAmountCents} of ${capturedAmountCents}`
      )
    }
    if (!this.counted((status === "failed") === (failureCode !== null))) {
      this.fail("failure-code", `payment ${id}: status ${status}, failure code ${failureCode}`)
    }
  }

  private checkLedgerGroup(payment: Payment, entries: ReadonlyArray<LedgerEntry>) {
    // Groups in order of first appearance with their running sums (a change posts one or two
    // groups), in two lists reused by every call (the auditor checks one thing at a time).
    const groups = groupScratch
    const sums = sumScratch
    groups.length = 0
    sums.length = 0
    for (const entry of entries) {
      if (
        !this.counted(
          Number.isSafeInteger(entry.amountCents) && entry.amountCents > 0 && entry.currency === payment.currency &&
            entry.paymentId === payment.id
        )
      ) {
        this.fail("ledger-entry", `payment ${payment.id}: malformed ledger entry ${entry.id}`)
      }
      // The entry posts to the payment's own chart: one of its accounts (a look-up by name) of
      // the payment's merchant (the chart is kept per merchant and currency; the currency is
      // `ledger-entry`'s). A balanced pair elsewhere would pass every equation, which read only
      // the chart (`post` does not keep other accounts).
      if (!this.counted(accountIndex.has(entry.account) && entry.merchantId === payment.merchantId)) {
        this.fail(
          "ledger-account",
          `payment ${payment.id} of ${payment.merchantId}: ledger entry ${entry.id} (${entry.direction}) posts to ${entry.account} of ${entry.merchantId}, outside the chart`
        )
      }
      const signed = entry.direction === "debit" ? entry.amountCents : -entry.amountCents
      const i = groups.indexOf(entry.groupId)
      if (i === -1) {
        groups.push(entry.groupId)
        sums.push(signed)
      } else sums[i] = sums[i]! + signed
    }
    for (let i = 0; i < groups.length; i++) {
      if (!this.counted(sums[i] === 0)) {
        this.fail("ledger-balanced", `payment ${payment.id}: ledger group ${groups[i]} off by ${sums[i]}`)
      }
    }
  }

  /**
   * The ledger of one payment must say what its record says (CONTRACT section 7), account by
   * account: a sum of accounts would hide money posted to the wrong one. Where the payment's
   * merchant money is follows from its record alone (docs/architecture.md, ledger): in
   * `merchant_pending` until the payment is settled (a refund, a dispute and its fee before
   * settlement are taken from pending), then all of it in `merchant_available` (settlement moves
   * what is pending; what comes after is taken from available), so one account holds the net and
   * the other nothing. `settledKnown` false: the reader cannot tell whether a `refunded` payment
   * was swept (the API shows no settled_at), so either account may hold it, the other nothing.
   */
  private checkLedgerEquations(p: Payment, balances: Float64Array, base: number, when: string, settledKnown = true) {
    const dispute = disputeLedger(p)
    const net = p.capturedAmountCents - p.feeCents - p.refundedAmountCents + dispute.merchant
    const held = p.status === "authorized" ? p.amountCents : 0
    // The chart's running balances read by position (the chart is fixed: no look-up by name).
    const a = balances
    this.equation(
      p,
      when,
      "card_network",
      a[base + at.card_network]!,
      p.capturedAmountCents - p.refundedAmountCents + dispute.cardNetwork
    )
    const pending = a[base + at.merchant_pending]!
    const available = a[base + at.merchant_available]!
    if (!settledKnown && p.settledAt === null) {
      // Swept or not, all of it in one of the two: the other holds nothing.
      const whole = (pending === net && available === 0) || (pending === 0 && available === net)
      if (!this.counted(whole)) {
        this.fail(
          "ledger-matches-record",
          `payment ${p.id} (${p.status}) ${when}: merchant_pending is ${pending} and merchant_available ${available}, expected ${net} in one of them (settled or not) and 0 in the other`
        )
      }
    } else {
      const settled = p.settledAt !== null
      this.equation(
        p,
        when,
        settled ? "merchant_pending (settled)" : "merchant_pending (before settlement)",
        pending,
        settled ? 0 : net
      )
      this.equation(
        p,
        when,
        settled ? "merchant_available (settled)" : "merchant_available (before settlement)",
        available,
        settled ? net : 0
      )
    }
    this.equation(p, when, "fee_revenue", a[base + at.fee_revenue]!, p.feeCents + dispute.feeRevenue)
    this.equation(p, when, "authorization_holds", a[base + at.authorization_holds]!, held)
    this.equation(p, when, "cardholder_authorizations", a[base + at.cardholder_authorizations]!, held)
    this.equation(p, when, "merchant_reserved", a[base + at.merchant_reserved]!, dispute.reserved)
  }

  private equation(p: Payment, when: string, account: string, actual: number, expected: number) {
    if (!this.counted(actual === expected)) {
      this.fail(
        "ledger-matches-record",
        `payment ${p.id} (${p.status}) ${when}: ${account} is ${actual}, expected ${expected}`
      )
    }
  }

  // -------------------------------------------------------------------------------------------
  // At the end: the whole store

  /** Final audit once the run has quiesced. Returns the number of payments audited. */
  audit(state: MemoryState) {
    const balancesByMerchant = new Map<string, Map<string, { pending: number; available: number; reserved: number }>>()
    /** Payment per create key, by merchant then key (no joined key string a payment). */
    const keys = new Map<string, Map<string, string>>()
    // The committed ids grouped by payment, in commit order.
    const committed = this.committed
    const committedEvents = committed.events.grouped(committed.count)
    const committedLedger = committed.ledger.grouped(committed.count)
    /** One payment's balances recomputed from its stored entries (the chart in order; reused). */
    const balances = new Float64Array(chart)
    // The checks a payment count and test in place (`counted`), the message built only on a failure.
    for (const payment of state.payments.values()) {
      const events = state.events.get(payment.id) ?? []
      this.checkTrace(payment, events)
      const entries = state.ledger.get(payment.id) ?? []
      // What the store holds is exactly what was committed: every event and entry once, in order.
      const slot = committed.slotOf(payment.id)
      if (!this.counted(committedEvents.same(slot, events))) {
        this.fail(
          "event-stream-stored",
          `payment ${payment.id}: stored events [${events.map((e) => e.id).join(" ")}], committed [${
            slot < 0 ? "" : committedEvents.of(slot).join(" ")
          }]`
        )
      }
      const version = slot < 0 ? undefined : committed.versions[slot]
      if (!this.counted(committedLedger.same(slot, entries) && version === payment.version)) {
        this.fail(
          "ledger-stored",
          `payment ${payment.id} v${payment.version}: stored ledger [${
            entries.map((e) => e.id).join(" ")
          }], committed [${slot < 0 ? "" : committedLedger.of(slot).join(" ")}] v${version}`
        )
      }
      this.auditLedger(payment, entries, balances)
      const byCurrency = balancesByMerchant.get(payment.merchantId) ?? new Map()
      balancesByMerchant.set(payment.merchantId, byCurrency)
      const sum = byCurrency.get(payment.currency) ?? { pending: 0, available: 0, reserved: 0 }
      // A currency shows in the balances once merchant money moved in it (holds alone do not count).
      const merchantMoney = entries.some((e) =>
        e.account === "merchant_pending" || e.account === "merchant_available" || e.account === "merchant_reserved"
      )
      // The chart's balances read by position, as the equations read them.
      const a = balances
      if (merchantMoney) {
        byCurrency.set(payment.currency, {
          pending: sum.pending + a[at.merchant_pending]!,
          available: sum.available + a[at.merchant_available]!,
          reserved: sum.reserved + a[at.merchant_reserved]!
        })
      }
      if (payment.idempotencyKey !== null) {
        let ofMerchant = keys.get(payment.merchantId)
        if (ofMerchant === undefined) keys.set(payment.merchantId, ofMerchant = new Map())
        const existing = ofMerchant.get(payment.idempotencyKey)
        if (!this.counted(existing === undefined)) {
          this.fail(
            "one-transaction-per-key",
            `idempotency key ${payment.idempotencyKey}: transactions ${existing} and ${payment.id}`
          )
        }
        ofMerchant.set(payment.idempotencyKey, payment.id)
      }
      this.checkQuiescent(payment)
    }
    // Balances the API reports are the sums of the entries (CONTRACT section 7).
    const store = memoryOperations(state)
    for (const merchantId of state.merchants.keys()) {
      const reported = Effect.runSync(store.balances(merchantId))
      const expected = balancesByMerchant.get(merchantId) ?? new Map()
      for (const row of reported) {
        const sum = expected.get(row.currency) ?? { pending: 0, available: 0, reserved: 0 }
        this.check(
          row.pending === sum.pending && row.available === sum.available && row.reserved === sum.reserved,
          "balances",
          () =>
            `merchant ${merchantId} ${row.currency}: balance ${JSON.stringify(row)} but entries sum to ${
              JSON.stringify(sum)
            }`
        )
      }
      this.check(
        reported.length === expected.size,
        "balances",
        () => `merchant ${merchantId}: ${reported.length} currencies reported, ${expected.size} in the ledger`
      )
    }
    return { payments: state.payments.size }
  }

  /**
   * The laws of one payment's final ledger, whoever read it (the store at the end of a run, or
   * the harness through the API): every group balances, every entry on the payment's chart, the
   * chart's balances what the record says (CONTRACT section 7; `settledKnown` false when the
   * reader cannot tell whether a refunded payment was swept), and the record's amounts. Leaves
   * the payment's chart balances in `balances` (the chart in order).
   */
  auditLedger(payment: Payment, entries: ReadonlyArray<LedgerEntry>, balances: Float64Array, settledKnown = true) {
    this.checkLedgerGroup(payment, entries)
    balances.fill(0)
    for (const entry of entries) post(balances, 0, entry)
    this.checkLedgerEquations(payment, balances, 0, "at the end", settledKnown)
    this.checkAmounts(payment)
  }

  /** Quiescence: nothing is left half-way through its automatic flow. */
  checkQuiescent(payment: Pick<Payment, "id" | "status" | "fraudVerdict" | "captureMethod">) {
    const waiting = payment.status === "pending" ||
      (payment.status === "authorized" &&
        (payment.fraudVerdict === null || (payment.fraudVerdict === "passed" && payment.captureMethod === "automatic")))
    if (!this.counted(!waiting)) {
      this.fail(
        "no-pending-after-quiesce",
        `payment ${payment.id} still in flight (${payment.status}, verdict ${payment.fraudVerdict}) after the run quiesced`
      )
    }
  }

  /** The event stream of a payment is a legal trace of the transition table ending in its status. */
  checkTrace(payment: Payment, events: ReadonlyArray<PaymentEvent>) {
    let status: PaymentStatus | "null" = "null"
    let sequence = 0
    // The table as nested maps (`legal`): no key string an event.
    for (let i = 0; i < events.length; i++) {
      const event = events[i]!
      if (!this.counted(legal(status, event.data.status, event.type))) {
        this.fail("event-trace", `payment ${payment.id}: event ${event.type} takes ${status} to ${event.data.status}`)
      }
      if (!this.counted(event.sequence > sequence)) {
        this.fail("event-order", `payment ${payment.id}: event sequence ${event.sequence} after ${sequence}`)
      }
      status = event.data.status
      sequence = event.sequence
    }
    if (!this.counted(status === payment.status)) {
      this.fail("trace-matches-status", `payment ${payment.id}: events end in ${status}, record says ${payment.status}`)
    }
  }
}

/**
 * A commit of the audited store split in two, for the fault wrapper below it (sim/world/StoreFaults.ts)
 * to finish in its own continuation: `effect` commits, `seen` is the auditor's look at the
 * outcome. One Effect step then serves the audit and the fault decision (a tap of its own cost
 * two steps a commit).
 */
export type SplitCommit = (args: ReadonlyArray<unknown>) => {
  readonly effect: Effect.Effect<unknown, unknown>
  readonly seen: (outcome: unknown) => void
}

/**
 * The store as the simulator provides it: the memory store, with the auditor watching every
 * decision it commits, and (only when asked) a planted bug (sim/checks/PlantedBugs.ts) between the
 * domain and the store, or inside the store. `commits` holds the commits the auditor sees after
 * the fact (create, open, change) split for the fault wrapper; `store` runs them whole.
 */
export const auditedStore = (
  inner: StoreShape,
  auditor: Auditor,
  plantedBug: PlantedBug
): {
  readonly store: StoreShape
  readonly commits: Readonly<Record<"insertPayment" | "openPayment" | "insertCreated" | "commitChange", SplitCommit>>
} => {
  const store = storeBug(plantedBug, inner)
  const planted = (before: Payment | null, change: Change) => changeBug(plantedBug, before, change)
  const stored = (change: Change) => storedChangeBug(plantedBug, change)
  // Payments a planted bug created without their key (`resumedCreateBug`): keyless from then on,
  // in what the store holds and what the auditor sees, as if the service never knew the key.
  const keyless = new Set<string>()
  const withoutKey = (
    payment: Payment
  ): Payment => (payment.idempotencyKey === null ? payment : { ...payment, idempotencyKey: null })
  const commits = {
    insertPayment: (args: ReadonlyArray<unknown>) => {
      const decided = resumedCreateBug(plantedBug, args[0] as Change)
      if (decided !== args[0]) keyless.add(decided.payment.id)
      const change = planted(null, decided)
      return {
        effect: store.insertPayment(stored(change)),
        seen: (outcome: unknown) => {
          if ((outcome as { _tag: string })._tag === "Inserted") auditor.onChange(null, change)
        }
      }
    },
    openPayment: (args: ReadonlyArray<unknown>) => {
      const open = args[0] as Parameters<StoreShape["openPayment"]>[0]
      const change = planted(null, open.change)
      return {
        effect: store.openPayment({ ...open, change: stored(change) }),
        seen: (outcome: unknown) => {
          if ((outcome as { _tag: string })._tag === "Opened") auditor.onChange(null, change)
        }
      }
    },
    insertCreated: (args: ReadonlyArray<unknown>) => {
      const created = args[0] as Parameters<StoreShape["insertCreated"]>[0]
      const change = planted(null, created.change)
      return {
        effect: store.insertCreated({ ...created, change: stored(change) }),
        seen: (written: unknown) => {
          if (written === true) auditor.onChange(null, change)
        }
      }
    },
    commitChange: (args: ReadonlyArray<unknown>) => {
      const given = args[0] as Parameters<StoreShape["commitChange"]>[0]
      const commit = keyless.size === 0 || !keyless.has(given.before.id)
        ? given
        : {
          ...given,
          before: withoutKey(given.before),
          change: { ...given.change, payment: withoutKey(given.change.payment) }
        }
      const change = planted(commit.before, commit.change)
      return {
        effect: store.commitChange({ ...commit, change: stored(change) }),
        seen: (committed: unknown) => {
          if (committed === true) auditor.onChange(commit.before, change, commit.commandKey)
        }
      }
    }
  }
  const whole = (split: SplitCommit) => (...args: Array<unknown>) => {
    const { effect, seen } = split(args)
    return Effect.map(effect, (outcome) => {
      seen(outcome)
      return outcome
    })
  }
  return {
    commits,
    store: {
      ...store,
      insertPayment: whole(commits.insertPayment) as StoreShape["insertPayment"],
      openPayment: whole(commits.openPayment) as StoreShape["openPayment"],
      insertCreated: whole(commits.insertCreated) as StoreShape["insertCreated"],
      commitChange: whole(commits.commitChange) as StoreShape["commitChange"],
      // Decision-level bugs need the refused decision: with one planted, commands take the
      // locking path (a store without optimistic reads) and meet it there.
      readForCommand: needsLockingPath(plantedBug) ? undefined : store.readForCommand,
      updatePayment: (target, decide) =>
        store.updatePayment(target, (payment, fraudCase) => {
          const decision = decisionBug(plantedBug, decide)(payment, fraudCase)
          if (!decision.ok) return decision
          const change = planted(payment, decision.change)
          auditor.onChange(payment, change, target.commandKey)
          return { ok: true, change: stored(change) }
        })
    }
  }
}
