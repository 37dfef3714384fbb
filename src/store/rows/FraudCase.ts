import type { Explanation, FraudCase, FraudCaseStatus, Priority } from "../../domain/Fraud.ts"
import { ms, msOrNull, type Timestamp, timestamp, timestampOrNull } from "./Timestamps.ts"

/** A `fraud_cases` row as PostgreSQL returns it. */
export interface FraudCaseRow {
  readonly id: string
  readonly payment_id: string
  readonly merchant_id: string
  readonly status: FraudCaseStatus
  readonly priority: Priority
  readonly risk_score: number
  readonly model_version: string
  readonly base_value: number | null
  readonly explanations: ReadonlyArray<Explanation>
  readonly notes: string | null
  readonly reviewed_at: Timestamp | null
  readonly created_at: Timestamp
  readonly updated_at: Timestamp
}

export const toFraudCase = (r: FraudCaseRow): FraudCase => ({
  id: r.id,
  paymentId: r.payment_id,
  merchantId: r.merchant_id,
  status: r.status,
  priority: r.priority,
  riskScore: r.risk_score,
  modelVersion: r.model_version,
  baseValue: r.base_value ?? null,
  explanations: r.explanations,
  notes: r.notes,
  reviewedAt: msOrNull(r.reviewed_at),
  createdAt: ms(r.created_at),
  updatedAt: ms(r.updated_at)
})

/** A case as its row's columns (`explanations` as a value: the caller encodes it for its statement). */
export const fraudCaseColumns = (c: FraudCase) => ({
  payment_id: c.paymentId,
  merchant_id: c.merchantId,
  id: c.id,
  status: c.status,
  priority: c.priority,
  risk_score: c.riskScore,
  model_version: c.modelVersion,
  base_value: c.baseValue,
  explanations: c.explanations,
  notes: c.notes,
  reviewed_at: timestampOrNull(c.reviewedAt),
  created_at: timestamp(c.createdAt),
  updated_at: timestamp(c.updatedAt)
})
