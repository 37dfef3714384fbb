import type { Dispute } from "../../domain/DisputeRecord.ts"
import type { Explanation, Verdict } from "../../domain/Fraud.ts"
import type { Currency } from "../../domain/Money.ts"
import type { CaptureMethod, CardBrand, Payment, PaymentStatus, ProcessorPending } from "../../domain/Payment.ts"
import { nextStep } from "../../domain/Payment.ts"
import { isoAt } from "../../platform/IsoTime.ts"
import { ms, msOrNull, type Timestamp, timestamp, timestampOrNull } from "./Timestamps.ts"

/** A payment's dispute as its `dispute` jsonb column keeps it: its times as ISO text (queries compare `dispute->>'openedAt'`). */
export type DisputeJson = Omit<Dispute, "openedAt" | "resolvedAt"> & {
  readonly openedAt: string
  readonly resolvedAt: string | null
}

/** A payment's `processor_pending` jsonb column: its `since` as ISO text. */
export type PendingJson = Omit<ProcessorPending, "since"> & { readonly since: string }

/** A `payments` row as PostgreSQL returns it (`to_jsonb` gives the same, its times as text). */
export interface PaymentRow {
  readonly id: string
  readonly merchant_id: string
  readonly status: PaymentStatus
  readonly amount_cents: number
  readonly currency: Currency
  readonly captured_amount_cents: number
  readonly refunded_amount_cents: number
  readonly fee_cents: number
  readonly card_brand: CardBrand
  readonly card_last_four: string
  readonly card_token: string
  readonly capture_method: CaptureMethod
  readonly idempotency_key: string | null
  readonly metadata: Readonly<Record<string, string>>
  readonly fraud_score: number | null
  readonly fraud_verdict: Verdict | null
  readonly fraud_case_id: string | null
  readonly failure_code: string | null
  readonly failure_message: string | null
  readonly network_risk_signal: number | null
  readonly processor_reference: string | null
  readonly processor_pending: PendingJson | null
  readonly failed_refunds: ReadonlyArray<string> | null
  readonly version: number
  readonly created_at: Timestamp
  readonly updated_at: Timestamp
  readonly captured_at: Timestamp | null
  readonly settled_at: Timestamp | null
  readonly dispute: DisputeJson | null
  readonly fraud_model_version: string | null
  readonly fraud_explanations: ReadonlyArray<StoredExplanation> | null
}

/**
 * An explanation as a payment's row keeps it: `[feature, value, contribution]`, the names said
 * once here rather than in each of a payment's five (a third of the jsonb's bytes). Rows written
 * before keep the object, which reads the same.
 */
export type StoredExplanation = readonly [feature: string, value: number, contribution: number] | Explanation

export const explanationsColumn = (explanations: ReadonlyArray<Explanation> | null) =>
  explanations === null ? null : explanations.map((e) => [e.feature, e.value, e.contribution] as const)
export const toExplanations = (
  stored: ReadonlyArray<StoredExplanation> | null | undefined
): ReadonlyArray<Explanation> | null =>
  stored === null || stored === undefined
    ? null
    : stored.map((e): Explanation =>
      Array.isArray(e) ? { feature: e[0], value: e[1], contribution: e[2] } : e as Explanation
    )

export const disputeColumn = (d: Dispute | null): DisputeJson | null =>
  d === null ? null : { ...d, openedAt: isoAt(d.openedAt), resolvedAt: timestampOrNull(d.resolvedAt) }
export const toDispute = (d: DisputeJson | null | undefined): Dispute | null =>
  d === null || d === undefined
    ? null
    : { ...d, openedAt: Date.parse(d.openedAt), resolvedAt: d.resolvedAt === null ? null : Date.parse(d.resolvedAt) }

export const pendingColumn = (p: ProcessorPending | null): PendingJson | null =>
  p === null ? null : { ...p, since: isoAt(p.since) }
export const toPending = (p: PendingJson | null | undefined): ProcessorPending | null =>
  p === null || p === undefined ? null : { ...p, since: Date.parse(p.since) }

export const toPayment = (r: PaymentRow): Payment => ({
  id: r.id,
  merchantId: r.merchant_id,
  status: r.status,
  amountCents: r.amount_cents,
  currency: r.currency,
  capturedAmountCents: r.captured_amount_cents,
  refundedAmountCents: r.refunded_amount_cents,
  feeCents: r.fee_cents,
  cardBrand: r.card_brand,
  cardLastFour: r.card_last_four,
  cardToken: r.card_token,
  captureMethod: r.capture_method,
  idempotencyKey: r.idempotency_key,
  metadata: r.metadata,
  fraudScore: r.fraud_score,
  fraudVerdict: r.fraud_verdict,
  fraudCaseId: r.fraud_case_id,
  failureCode: r.failure_code,
  failureMessage: r.failure_message,
  networkRiskSignal: r.network_risk_signal,
  processorReference: r.processor_reference ?? null,
  processorPending: toPending(r.processor_pending),
  failedRefunds: r.failed_refunds ?? [],
  version: r.version,
  createdAt: ms(r.created_at),
  updatedAt: ms(r.updated_at),
  capturedAt: msOrNull(r.captured_at),
  settledAt: msOrNull(r.settled_at),
  dispute: toDispute(r.dispute),
  fraudModelVersion: r.fraud_model_version ?? null,
  fraudExplanations: toExplanations(r.fraud_explanations)
})

/** The columns a change to a payment may write (everything else is fixed at creation). */
export const changingColumns = (p: Payment) => ({
  status: p.status,
  captured_amount_cents: p.capturedAmountCents,
  refunded_amount_cents: p.refundedAmountCents,
  fee_cents: p.feeCents,
  fraud_score: p.fraudScore,
  fraud_verdict: p.fraudVerdict,
  fraud_case_id: p.fraudCaseId,
  failure_code: p.failureCode,
  failure_message: p.failureMessage,
  network_risk_signal: p.networkRiskSignal,
  processor_reference: p.processorReference,
  processor_pending: pendingColumn(p.processorPending) as unknown,
  failed_refunds: p.failedRefunds.length === 0 ? null : p.failedRefunds as unknown,
  in_flight: nextStep(p) !== null,
  version: p.version,
  updated_at: timestamp(p.updatedAt),
  captured_at: timestampOrNull(p.capturedAt),
  settled_at: timestampOrNull(p.settledAt),
  dispute: disputeColumn(p.dispute) as unknown,
  fraud_model_version: p.fraudModelVersion,
  fraud_explanations: explanationsColumn(p.fraudExplanations) as unknown
})

/** A payment as its row's columns (metadata as a plain object). */
export const paymentColumns = (p: Payment) => ({
  id: p.id,
  merchant_id: p.merchantId,
  amount_cents: p.amountCents,
  currency: p.currency,
  card_brand: p.cardBrand,
  card_last_four: p.cardLastFour,
  card_token: p.cardToken,
  capture_method: p.captureMethod,
  idempotency_key: p.idempotencyKey,
  metadata: p.metadata as unknown,
  created_at: timestamp(p.createdAt),
  ...changingColumns(p)
})
