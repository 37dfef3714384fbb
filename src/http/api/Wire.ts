import { type FraudCase, modelOutput } from "../../domain/Fraud.ts"
import type { LedgerEntry } from "../../domain/Ledger.ts"
import type { ApiKey } from "../../domain/Merchant.ts"
import type { Merchant } from "../../domain/Merchant.ts"
import type { Currency } from "../../domain/Money.ts"
import { disputeSnapshot, type Payment, type PaymentEvent } from "../../domain/Payment.ts"
import type { Delivery } from "../../domain/Webhook.ts"
import { isoAt, isoOrNull } from "../../platform/IsoTime.ts"
import type { AnalyticsReport, CurrencyFigures, FraudStatsReport } from "../../services/Analytics.ts"
import type { PageOf, PageRequest } from "../../store/Store.ts"
import type * as S from "./Schemas.ts"
import type * as W from "./WebhookSchemas.ts"

/**
 * Domain records to their JSON shapes (CONTRACT sections 2, 4, 6, 7, 9). The shapes are defined
 * once, by the response schemas of Schemas.ts and WebhookSchemas.ts (the OpenAPI document's);
 * each mapping here is typed by its schema, so a field added, renamed or dropped on one side
 * and not the other fails the typecheck. Times are epoch milliseconds inside and ISO 8601 text
 * here, at the wire (`isoAt`). (The hottest responses are rendered from these
 * mappings with JSON.stringify, not encoded through the schemas.)
 */

/** A time that may be absent, as the wire writes it. */
export { isoOrNull }

export const transaction = (p: Payment): typeof S.Transaction.Encoded => ({
  id: p.id,
  merchant_id: p.merchantId,
  status: p.status,
  amount_cents: p.amountCents,
  currency: p.currency,
  captured_amount_cents: p.capturedAmountCents,
  refunded_amount_cents: p.refundedAmountCents,
  fee_cents: p.feeCents,
  card_brand: p.cardBrand,
  card_last_four: p.cardLastFour,
  capture_method: p.captureMethod,
  idempotency_key: p.idempotencyKey,
  // Rendered as JSON at once and never changed: no copies of the record's own objects.
  metadata: p.metadata,
  fraud_score: p.fraudScore,
  fraud_model_version: p.fraudModelVersion,
  fraud_explanations: p.fraudExplanations,
  fraud_case_id: p.fraudCaseId,
  failure_code: p.failureCode,
  failure_message: p.failureMessage,
  dispute: disputeSnapshot(p.dispute),
  processor_pending: p.processorPending === null ? null : {
    operation: p.processorPending.operation,
    outcome: p.processorPending.outcome,
    amount_cents: p.processorPending.amountCents,
    since: isoAt(p.processorPending.since)
  },
  created_at: isoAt(p.createdAt),
  updated_at: isoAt(p.updatedAt)
})

export const event = (e: PaymentEvent): typeof S.Event.Encoded => ({
  id: e.id,
  type: e.type,
  created_at: isoAt(e.createdAt),
  data: e.data
})

export const ledgerEntry = (e: LedgerEntry): typeof S.LedgerEntry.Encoded => ({
  id: e.id,
  transaction_id: e.paymentId,
  group_id: e.groupId,
  account: e.account,
  direction: e.direction,
  amount_cents: e.amountCents,
  currency: e.currency,
  created_at: isoAt(e.createdAt)
})

export const merchant = (m: Merchant): typeof S.Merchant.Encoded => ({
  id: m.id,
  name: m.name,
  webhook_url: m.webhookUrl,
  webhook_secret: m.webhookSecret,
  created_at: isoAt(m.createdAt),
  updated_at: isoAt(m.updatedAt)
})

export const apiKey = (k: ApiKey): typeof S.ApiKey.Encoded => ({
  id: k.id,
  name: k.name,
  prefix: k.prefix,
  last_four: k.lastFour,
  status: k.status,
  created_at: isoAt(k.createdAt),
  last_used_at: isoOrNull(k.lastUsedAt),
  revoked_at: isoOrNull(k.revokedAt)
})

export const apiKeyCreated = (k: ApiKey, secret: string): typeof S.ApiKeyCreated.Encoded => ({
  id: k.id,
  name: k.name,
  key: secret,
  prefix: k.prefix,
  last_four: k.lastFour,
  status: k.status,
  created_at: isoAt(k.createdAt)
})

export const fraudCase = (c: FraudCase): typeof S.FraudCase.Encoded => ({
  id: c.id,
  transaction_id: c.paymentId,
  status: c.status,
  priority: c.priority,
  risk_score: c.riskScore,
  model_version: c.modelVersion,
  base_value: c.baseValue,
  model_output: c.baseValue === null ? null : modelOutput(c.baseValue, c.explanations),
  explanations: c.explanations.map((e) => ({ ...e })),
  notes: c.notes,
  reviewed_at: isoOrNull(c.reviewedAt),
  created_at: isoAt(c.createdAt)
})

export const delivery = (d: Delivery): typeof W.Delivery.Encoded => ({
  id: d.id,
  event_id: d.eventId,
  event_type: d.eventType,
  url: d.url,
  status: d.status,
  attempts: d.attempts.map((a) => ({
    attempt: a.attempt,
    at: isoAt(a.at),
    response_status: a.responseStatus,
    duration_ms: a.durationMs,
    error: a.error,
    cut: a.cut === true
  })),
  next_attempt_at: isoOrNull(d.nextAttemptAt),
  created_at: isoAt(d.createdAt),
  completed_at: isoOrNull(d.completedAt)
})

const currencyFigures = (f: CurrencyFigures): typeof S.CurrencyAnalytics.Encoded => ({
  currency: f.currency as Currency,
  transaction_count: f.transactionCount,
  volume_cents: f.volumeCents,
  captured_cents: f.capturedCents,
  refunded_cents: f.refundedCents,
  fees_cents: f.feesCents,
  revenue_cents: f.revenueCents,
  approval_rate: f.approvalRate,
  fraud_rate: f.fraudRate,
  refund_rate: f.refundRate,
  dispute_rate: f.disputeRate
})

export const analytics = (r: AnalyticsReport): typeof S.Analytics.Encoded => ({
  from: isoOrNull(r.from),
  to: isoOrNull(r.to),
  transaction_count: r.transactionCount,
  approval_rate: r.approvalRate,
  fraud_rate: r.fraudRate,
  refund_rate: r.refundRate,
  dispute_rate: r.disputeRate,
  by_currency: r.byCurrency.map(currencyFigures),
  interval: r.interval,
  series: r.series.map((period) => ({ ...currencyFigures(period), period_start: isoAt(period.periodStart) }))
})

export const fraudStats = (r: FraudStatsReport): typeof S.FraudStats.Encoded => ({
  cases: {
    total: r.casesByStatus.open + r.casesByStatus.confirmed_fraud + r.casesByStatus.false_positive,
    by_status: r.casesByStatus,
    by_priority: r.casesByPriority
  },
  approved_count: r.approvedCount,
  screened_count: r.screenedCount,
  blocked: {
    count: r.blockedCount,
    by_currency: r.blockedByCurrency.map((row) => ({
      currency: row.currency,
      count: row.count,
      amount_cents: row.amountCents
    }))
  },
  lost_dispute_count: r.lostDisputeCount,
  fraud_rate: r.fraudRate,
  lost_dispute_rate: r.lostDisputeRate,
  review_precision: r.reviewPrecision,
  score_histogram: r.scoreHistogram.map((count, bin) => ({ from: bin / 10, to: (bin + 1) / 10, count })),
  by_model_version: r.byModel.map((m) => ({
    model_version: m.modelVersion,
    screened_count: m.screenedCount,
    blocked_count: m.blockedCount,
    fraud_rate: m.fraudRate,
    cases: {
      total: m.casesByStatus.open + m.casesByStatus.confirmed_fraud + m.casesByStatus.false_positive,
      by_status: m.casesByStatus
    },
    review_precision: m.reviewPrecision
  }))
})

export const meta = (page: PageRequest, result: PageOf<unknown>): typeof S.ListMeta.Encoded => {
  const totalPages = Math.ceil(result.totalCount / page.perPage)
  return {
    page: page.page,
    per_page: page.perPage,
    total_count: result.totalCount,
    total_pages: totalPages,
    has_more: page.page < totalPages
  }
}

export const pageRequest = (
  params: { readonly page?: number | undefined; readonly per_page?: number | undefined }
): PageRequest => ({
  page: params.page ?? 1,
  perPage: params.per_page ?? 20
})
