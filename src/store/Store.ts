import { Context, Data, type Effect } from "effect"
import type { FraudCase, FraudCaseStatus, FraudHistory, Priority } from "../domain/Fraud.ts"
import type { Balance, LedgerEntry } from "../domain/Ledger.ts"
import type { ApiKey, Merchant, MerchantWithSecret } from "../domain/Merchant.ts"
import type { Change, Decision, Payment, PaymentEvent, PaymentStatus } from "../domain/Payment.ts"

/** The database could not be reached or failed; callers answer 503 and the client may retry. */
export class StoreUnavailable extends Data.TaggedError("StoreUnavailable")<{ readonly cause: unknown }> {}

export interface PageRequest {
  readonly page: number
  readonly perPage: number
}
export interface PageOf<A> {
  readonly items: ReadonlyArray<A>
  readonly totalCount: number
}

export interface PaymentFilter {
  readonly status?: PaymentStatus | undefined
  readonly createdFrom?: number | undefined
  readonly createdTo?: number | undefined
  readonly minAmountCents?: number | undefined
  readonly maxAmountCents?: number | undefined
}

export interface FraudCaseFilter {
  readonly status?: FraudCaseStatus | undefined
  readonly priority?: Priority | undefined
}

/** Marks a payment command with the idempotency key of the request that carried it. */
export interface CommandKey {
  readonly merchantId: string
  readonly key: string
}

export type UpdateOutcome =
  | { readonly _tag: "Applied"; readonly change: Change }
  | { readonly _tag: "Refused"; readonly decision: Extract<Decision, { ok: false }>; readonly payment: Payment }
  | { readonly _tag: "NotFound" }
  /** The command carrying this idempotency key already committed (a retry after a crash). */
  | { readonly _tag: "AlreadyApplied"; readonly payment: Payment }

export type InsertOutcome =
  | { readonly _tag: "Inserted" }
  /** A payment with this merchant's idempotency key exists already. */
  | { readonly _tag: "Exists"; readonly payment: Payment }

export interface IdempotencyClaim {
  readonly merchantId: string
  readonly key: string
  readonly fingerprint: string
  readonly now: number
  readonly lockedUntil: number
  readonly expiresAt: number
  /**
   * The service process making the claim (`ServiceInstance`), or null/absent. A claim whose
   * owner has stopped beating (`heartbeat`) is taken over at once instead of after its lease.
   */
  readonly owner?: string | null
}

/**
 * The create path's first round trip: the payment and its first event, the request's
 * idempotency claim, and the card's earlier attempts for the fraud model, in one commit.
 */
export interface OpenPayment {
  /** The `create` decision (a pending payment and its `payment.created` event). */
  readonly change: Change
  /**
   * Claimed in the same commit, already applied to the new payment. Only a key never seen (or
   * purged) is claimed here; any other state of the key is `KeyTaken` and nothing is written.
   * A caller that sees `Opened` holds the key. One interrupted while the statement runs (a hang-up
   * during PostgreSQL's group commit) never sees it: the store releases that claim itself, as it
   * does for a caller answered 503 at its deadline.
   */
  readonly claim: IdempotencyClaim | null
  /** What the fraud model needs to know of the card's and the merchant's past, read in the same statement. */
  readonly history: HistoryWindows
  /** The instance that runs the new payment's flow (`ServiceInstance`); null or absent: none named. */
  readonly flowOwner?: string | null | undefined
}

/**
 * A create whose outcome is known before anything is written (an acquirer that answers at once:
 * the sandbox): the first of its two round trips reads, and writes nothing. It finds whether the
 * request's key is known already (`KeyTaken`, with its stored response when finished, as
 * `openPayment` answers) and reads the payment's history for the fraud model. The payment is then
 * written once, with its outcome (`CreatedCommit`).
 */
export interface CreateRead {
  /** The pending payment of the `create` decision: its id, merchant, card, currency and creation time. */
  readonly payment: Payment
  /** The request's key, looked up (not claimed: `CreatedCommit` claims it with the payment). */
  readonly claim: IdempotencyClaim | null
  readonly history: HistoryWindows
}

/**
 * The second round trip of a create read with `CreateRead`: the request's key, claimed already
 * finished (its response stored), and the new payment as its flow left it, with every event from
 * `payment.created` on, its ledger and its fraud case, in one commit; or nothing, when the key was
 * claimed meanwhile (a racing request with the same key): the answer is then false.
 */
export interface CreatedCommit {
  /** The payment as its flow left it, and everything the create and the flow wrote, in order. */
  readonly change: Change
  readonly claim: IdempotencyClaim | null
  /** The response stored under the claimed key (never null when `claim` is not). */
  readonly response: StoredResponse | null
  /** The instance that runs the payment's flow when it is still in flight (`ServiceInstance`). */
  readonly flowOwner?: string | null | undefined
}

/** `Store.claimFlows`' question: which payments left in flight an instance is to resume. */
export interface FlowClaim {
  /** The claiming instance (named as each claimed payment's flow owner), or null: a process without one. */
  readonly owner: string | null
  readonly now: number
  /**
   * Payments owned by `owner` or by nobody count when last touched before this (a flow that
   * stopped on an error, or of a process without an identity).
   */
  readonly staleBefore: number
  /**
   * Also, however recent, payments no live instance owns: another instance that has stopped beating
   * at `now`, or none named (a row of a process without an identity, or from before owners were
   * recorded). The leader's pass.
   */
  readonly takeOver: boolean
  readonly limit: number
}

/** The windows of `FraudHistory` (src/domain/Fraud.ts), as times and bounds. */
export interface HistoryWindows {
  /** Card attempts since then count as "last hour"... */
  readonly hourSince: number
  /** ...and since then as "last day" (with the declines among them), the newest `dayLimit` at most. */
  readonly daySince: number
  readonly dayLimit: number
  /** The merchant's newest this many payments in the currency give its usual amount. */
  readonly amountWindow: number
}

/** The history of one payment: only payments created at or before `until`, never the payment itself. */
export interface HistoryQuery extends HistoryWindows {
  readonly merchantId: string
  readonly cardToken: string
  readonly currency: string
  readonly until: number
  readonly excludePaymentId: string
}

/** A finished response to store under a merchant's key (its body sealed when it carries a secret). */
export interface StoredResponse {
  readonly merchantId: string
  readonly key: string
  readonly status: number
  readonly body: string
}

/** A response stored under a key, with the fingerprint of the request that made it. */
export interface FinishedResponse {
  readonly fingerprint: string
  readonly status: number
  readonly body: string
}

export type OpenOutcome =
  | { readonly _tag: "Opened"; readonly history: FraudHistory }
  /**
   * The key is known already: nothing was written. With `finished`, the key holds a stored
   * response (live, not expired) read in the same round trip, so a replay needs no other;
   * otherwise the caller takes the general idempotent path.
   */
  | { readonly _tag: "KeyTaken"; readonly finished?: FinishedResponse }

/**
 * A change to a payment decided without a lock, on the record as the caller last committed it
 * (`before`): it commits only if the stored payment's version is still `before.version`.
 */
export interface ChangeCommit {
  readonly before: Payment
  readonly change: Change
  /** The command's idempotency key, marked as applied to the payment in the same commit (never with `response`). */
  readonly commandKey?: CommandKey | undefined
  /** A finished response stored under the request's key in the same commit. */
  readonly response: StoredResponse | null
}

export type ClaimOutcome =
  | { readonly _tag: "Claimed" }
  | { readonly _tag: "Replay"; readonly status: number; readonly body: string }
  | { readonly _tag: "InProgress" }
  | { readonly _tag: "Mismatch" }

/** Per-currency aggregates over payments created in a window (analytics). */
export interface AnalyticsRow {
  readonly currency: string
  readonly transactionCount: number
  readonly volumeCents: number
  readonly capturedCents: number
  readonly refundedCents: number
  readonly feesCents: number
  /** Payments the network decided on (approved or declined): everything but `pending`. */
  readonly decidedCount: number
  /** Payments the network approved. */
  readonly approvedCount: number
  readonly blockedCount: number
  /** Payments with captured money, and those of them that were disputed (analytics' dispute rate). */
  readonly capturedCount: number
  readonly disputedCount: number
}

export type AnalyticsInterval = "hour" | "day" | "week"

/** One period of one currency (analytics series); periods without payments are absent. */
export interface AnalyticsPeriodRow extends AnalyticsRow {
  /** Start of the period, UTC: the hour, the day (00:00) or the ISO week (Monday 00:00). */
  readonly periodStart: number
}

/** At most this many rows in a series; more is refused (narrow the window or widen the interval). */
export const maximumSeriesRows = 5_000

/** The start of the UTC period holding `at` (the same as PostgreSQL's date_trunc(unit, t, 'UTC')). */
export const periodStart = (at: number, interval: AnalyticsInterval): number => {
  const t = new Date(at)
  const day = Date.UTC(t.getUTCFullYear(), t.getUTCMonth(), t.getUTCDate())
  if (interval === "hour") return day + t.getUTCHours() * 3_600_000
  if (interval === "day") return day
  const sinceMonday = (t.getUTCDay() + 6) % 7
  return day - sinceMonday * 86_400_000
}

/** `Store.paymentsByCardTokenAndDispute`'s question. */
export interface CardTokenDisputeQuery {
  /** At most `maximumQueryCardTokens`, each `tok_` and 1 to 64 letters, digits or underscores (as CONTRACT section 6 allows). */
  readonly cardTokens: ReadonlyArray<string>
  readonly undisputedStatuses: ReadonlyArray<PaymentStatus>
  readonly capturedBefore: number
  readonly openedBefore: number
}

export const maximumQueryCardTokens = 16

/** Whether `query` is one a store answers (a malformed one is the caller's defect). */
export const isCardTokenDisputeQuery = (query: CardTokenDisputeQuery) =>
  query.cardTokens.length >= 1 && query.cardTokens.length <= maximumQueryCardTokens &&
  query.cardTokens.every((token) => /^tok_[A-Za-z0-9_]{1,64}$/.test(token))

/** Fraud aggregates of one merchant (CONTRACT section 9). */
export interface FraudStatsRow {
  readonly casesByStatus: Readonly<Record<FraudCaseStatus, number>>
  readonly casesByPriority: Readonly<Record<Priority, number>>
  /** Payments the card network approved (every status but `pending` and `failed`). */
  readonly approvedCount: number
  /** Payments that went through fraud screening. */
  readonly screenedCount: number
  readonly blocked: ReadonlyArray<{ readonly currency: string; readonly count: number; readonly amountCents: number }>
  /** Screened payments whose dispute was lost: fraud the screening let through. */
  readonly lostDisputeCount: number
  /** Screened payments by score, ten bins of 0.1 (the last includes 1.0). */
  readonly scoreHistogram: ReadonlyArray<number>
  /** Per model version (payments screened before versions were recorded: `unrecorded`), by version. */
  readonly byModel: ReadonlyArray<ModelStatsRow>
}

export interface ModelStatsRow {
  readonly modelVersion: string
  readonly screenedCount: number
  readonly blockedCount: number
  readonly casesByStatus: Readonly<Record<FraudCaseStatus, number>>
}

/** The model-version label of payments screened before the version was recorded on them. */
export const unrecordedModel = "unrecorded"

/** Merges per-version payment counts and case counts into `ModelStatsRow`s, by version (both stores). */
export const modelStats = (
  payments: ReadonlyArray<{ readonly version: string; readonly screened: number; readonly blocked: number }>,
  cases: ReadonlyArray<{ readonly version: string; readonly status: FraudCaseStatus; readonly count: number }>
): Array<ModelStatsRow> => {
  const rows = new Map<
    string,
    {
      modelVersion: string
      screenedCount: number
      blockedCount: number
      casesByStatus: Record<FraudCaseStatus, number>
    }
  >()
  const row = (version: string) => {
    const found = rows.get(version) ??
      {
        modelVersion: version,
        screenedCount: 0,
        blockedCount: 0,
        casesByStatus: { open: 0, confirmed_fraud: 0, false_positive: 0 }
      }
    rows.set(version, found)
    return found
  }
  for (const p of payments) {
    Object.assign(row(p.version), {
      screenedCount: row(p.version).screenedCount + p.screened,
      blockedCount: row(p.version).blockedCount + p.blocked
    })
  }
  for (const c of cases) row(c.version).casesByStatus[c.status] += c.count
  return [...rows.values()].sort((
    a,
    b
  ) => (a.modelVersion < b.modelVersion ? -1 : a.modelVersion > b.modelVersion ? 1 : 0))
}

export type RotateOutcome = "rotated" | "not_found" | "revoked"

export type StoreEffect<A> = Effect.Effect<A, StoreUnavailable>

/**
 * Persistence. Rules never live here: every change to a payment is a pure `Decision` made by the
 * domain on the freshly locked record, which the store commits whole (payment row, events,
 * ledger entries, webhook outbox rows, fraud case) or not at all.
 */
export interface StoreShape {
  readonly insertMerchant: (merchant: MerchantWithSecret, apiKey: ApiKey) => StoreEffect<void>
  readonly getMerchant: (id: string) => StoreEffect<Merchant | null>
  /** Writes the merchant's settings (name, webhook_url); the signing secret changes only by rotation. */
  readonly updateMerchant: (merchant: Merchant) => StoreEffect<void>
  readonly firstMerchant: () => StoreEffect<Merchant | null>

  readonly insertApiKey: (apiKey: ApiKey) => StoreEffect<void>
  readonly getApiKey: (merchantId: string, keyId: string) => StoreEffect<ApiKey | null>
  readonly findApiKeyByHash: (keyHash: string) => StoreEffect<ApiKey | null>
  /**
   * The key with this hash and its merchant, in one call (the authentication hot path). When the
   * key is active and its last_used_at is null or not after `touchBefore`, last_used_at becomes
   * `now` in the same call, and the key returned carries it: a key in use is written at most once
   * per interval, whichever process serves it, and a look-up never needs a second call to record
   * the use. A revoked key is returned as it is, never written.
   */
  readonly useApiKey: (
    keyHash: string,
    now: number,
    touchBefore: number
  ) => StoreEffect<{ readonly key: ApiKey; readonly merchant: Merchant } | null>
  readonly listApiKeys: (merchantId: string, page: PageRequest) => StoreEffect<PageOf<ApiKey>>
  /** Revokes `keyId` and inserts `replacement` atomically. */
  readonly rotateApiKey: (
    merchantId: string,
    keyId: string,
    replacement: ApiKey,
    now: number
  ) => StoreEffect<RotateOutcome>

  /**
   * Inserts a new payment (its `create` decision); one per live merchant idempotency key. An
   * in-progress claim of that key is marked applied in the same transaction; a key claimed
   * afresh after it expired no longer holds the payment it created before.
   */
  readonly insertPayment: (change: Change, flowOwner?: string | null) => StoreEffect<InsertOutcome>
  /** See `CreateRead`: a create's first round trip when its outcome is known before it writes. */
  readonly readForCreate: (read: CreateRead) => StoreEffect<OpenOutcome>
  /** See `CreatedCommit`: the payment written once, with its outcome; false when its key was taken meanwhile. */
  readonly insertCreated: (commit: CreatedCommit) => StoreEffect<boolean>
  /** See `OpenPayment`: one round trip for a new payment. */
  readonly openPayment: (open: OpenPayment) => StoreEffect<OpenOutcome>
  /**
   * Commits a change decided on an unlocked record (see `ChangeCommit`) with everything it
   * implies, in one round trip; false when another command moved the payment first (nothing was
   * written: decide again on the locked record with `updatePayment`).
   */
  readonly commitChange: (commit: ChangeCommit) => StoreEffect<boolean>
  readonly getPayment: (merchantId: string | null, paymentId: string) => StoreEffect<Payment | null>
  /**
   * One unlocked read for a command: the payment (of this merchant, when given), its fraud case,
   * and whether `commandKey` already applied to it. The command then commits with
   * `commitChange` (version-checked), falling back to `updatePayment` when the version moved.
   * Optional: without it (the simulator's store with a planted bug, which lives on the locking
   * path), every command takes `updatePayment`.
   */
  readonly readForCommand?: (target: {
    readonly merchantId: string | null
    readonly paymentId: string
    readonly commandKey?: CommandKey | undefined
  }) => StoreEffect<
    { readonly payment: Payment; readonly fraudCase: FraudCase | null; readonly alreadyApplied: boolean } | null
  >
  readonly listPayments: (merchantId: string, filter: PaymentFilter, page: PageRequest) => StoreEffect<PageOf<Payment>>
  /**
   * Locks the payment (row lock on PostgreSQL), asks `decide` for the change and commits it with
   * everything it implies. With `commandKey`, a command already committed under that key is
   * reported as `AlreadyApplied` instead of being applied twice.
   */
  readonly updatePayment: (
    target: {
      readonly merchantId: string | null
      readonly paymentId: string
      readonly commandKey?: CommandKey | undefined
    },
    decide: (payment: Payment, fraudCase: FraudCase | null) => Decision
  ) => StoreEffect<UpdateOutcome>
  readonly listEvents: (merchantId: string, paymentId: string) => StoreEffect<ReadonlyArray<PaymentEvent>>
  readonly listLedger: (merchantId: string, paymentId: string) => StoreEffect<ReadonlyArray<LedgerEntry>>
  readonly balances: (merchantId: string) => StoreEffect<ReadonlyArray<Balance>>
  /**
   * Payments whose automatic flow has a next step and no live owner but the claimer (see
   * `FlowClaim`), least recently touched first; each becomes the claimer's in the same call, so two
   * instances never resume one payment, and a flow whose owner still beats is never resumed by another.
   */
  readonly claimFlows: (claim: FlowClaim) => StoreEffect<ReadonlyArray<string>>
  /** Payments the settlement run has to sweep: captured before the cut-off and not yet settled. */
  readonly settleablePayments: (capturedBefore: number, limit: number) => StoreEffect<ReadonlyArray<string>>
  /**
   * Every merchant's payments created in `[from, to)`, oldest first (then by id), `limit` at a
   * time after `after` (the last one of the previous page): reconciliation's input.
   */
  readonly paymentsCreatedBetween: (window: {
    readonly from: number
    readonly to: number
    readonly after: { readonly createdAt: number; readonly id: string } | null
    readonly limit: number
  }) => StoreEffect<ReadonlyArray<Payment>>
  /**
   * Captured payments made with one of `query.cardTokens` whose dispute may change: those
   * without a dispute, in one of `undisputedStatuses`, captured before `capturedBefore`, and
   * those whose dispute is open and opened before `openedBefore`; oldest capture first (ties by
   * id). The caller (the sandbox network's worker) decides which tokens and times those are.
   */
  readonly paymentsByCardTokenAndDispute: (
    query: CardTokenDisputeQuery,
    limit: number
  ) => StoreEffect<ReadonlyArray<Payment>>
  readonly analytics: (
    merchantId: string,
    createdFrom: number | null,
    createdTo: number | null
  ) => StoreEffect<ReadonlyArray<AnalyticsRow>>
  /** The same aggregates per currency and period, by currency then period; at most `maximumSeriesRows + 1` rows. */
  readonly analyticsSeries: (
    merchantId: string,
    interval: AnalyticsInterval,
    createdFrom: number | null,
    createdTo: number | null
  ) => StoreEffect<ReadonlyArray<AnalyticsPeriodRow>>
  readonly fraudStats: (merchantId: string) => StoreEffect<FraudStatsRow>
  /** The fraud model's history of a payment (the same figures `openPayment` reads). */
  readonly fraudHistory: (query: HistoryQuery) => StoreEffect<FraudHistory>

  readonly getFraudCase: (merchantId: string, caseId: string) => StoreEffect<FraudCase | null>
  readonly listFraudCases: (
    merchantId: string,
    filter: FraudCaseFilter,
    page: PageRequest
  ) => StoreEffect<PageOf<FraudCase>>

  /** Claims an idempotency key for a request, or says why not (replay, in flight, different request). */
  readonly claimIdempotencyKey: (claim: IdempotencyClaim) => StoreEffect<ClaimOutcome>
  readonly completeIdempotencyKey: (merchantId: string, key: string, status: number, body: string) => StoreEffect<void>
  /** Forgets a claim whose request ended in 429 or 5xx, so a retry runs again. */
  readonly releaseIdempotencyKey: (merchantId: string, key: string) => StoreEffect<void>
  readonly purgeIdempotencyKeys: (expiredBefore: number) => StoreEffect<number>
  /** A service process says it is alive until `aliveUntil` (an earlier time: it has stopped). */
  readonly heartbeat: (instanceId: string, aliveUntil: number) => StoreEffect<void>
  /**
   * Takes or keeps `role` for `instanceId` at `now`: it is taken when nobody holds it or its
   * holder has stopped beating (alive until `now` or earlier); true when `instanceId` holds it after
   * the call.
   */
  readonly lead: (role: string, instanceId: string, now: number) => StoreEffect<boolean>
  /** Gives `role` up if `instanceId` holds it (a graceful stop), so another takes it at its next beat. */
  readonly resign: (role: string, instanceId: string) => StoreEffect<void>
}

export class Store extends Context.Service<Store, StoreShape>()("payments/Store") {}
