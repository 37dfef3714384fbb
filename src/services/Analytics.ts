import { Context, Effect, Layer } from "effect"
import type { FraudCaseStatus, Priority } from "../domain/Fraud.ts"
import {
  type AnalyticsInterval,
  type AnalyticsRow,
  maximumSeriesRows,
  type ModelStatsRow,
  Store,
  type StoreUnavailable
} from "../store/Store.ts"
import { InvalidInput } from "./Errors.ts"

// ---------------------------------------------------------------------------------------------
// The rates (docs/api.md, "Rates"): each defined here once, and every figure of that name, in
// analytics and in fraud statistics, per currency or per period or per model, is this function
// of that scope's counts. A rate is a ratio of counts (unitless, so counts of several currencies
// may be added) or of money in one currency (never added across currencies); null when its
// denominator is 0; rounded to six decimal places.

const ratio = (numerator: number, denominator: number): number | null =>
  denominator === 0 ? null : Math.round((numerator / denominator) * 1e6) / 1e6

/** Payments the card network approved, of those it decided on (approved or declined; not `pending`). */
export const approvalRate = (counts: { readonly approved: number; readonly decided: number }) =>
  ratio(counts.approved, counts.decided)

/** Payments the fraud screening blocked, of those the card network approved (all of which are screened). */
export const fraudRate = (counts: { readonly blocked: number; readonly approved: number }) =>
  ratio(counts.blocked, counts.approved)

/** Payments whose dispute was lost (fraud the screening let through), of those the card network approved. */
export const lostDisputeRate = (counts: { readonly lost: number; readonly approved: number }) =>
  ratio(counts.lost, counts.approved)

/** Money refunded, of the money captured: minor units of ONE currency. */
export const refundRate = (money: { readonly refundedCents: number; readonly capturedCents: number }) =>
  ratio(money.refundedCents, money.capturedCents)

/** Payments disputed, of those with captured money. */
export const disputeRate = (counts: { readonly disputed: number; readonly captured: number }) =>
  ratio(counts.disputed, counts.captured)

/** Reviewed fraud cases confirmed as fraud, of all reviewed (confirmed or false positive). */
export const reviewPrecision = (cases: Readonly<Record<FraudCaseStatus, number>>) =>
  ratio(cases.confirmed_fraud, cases.confirmed_fraud + cases.false_positive)

// ---------------------------------------------------------------------------------------------

/** One currency's figures over a window or a period: money in that currency's minor units. */
export interface CurrencyFigures extends
  Pick<
    AnalyticsRow,
    "currency" | "transactionCount" | "volumeCents" | "capturedCents" | "refundedCents" | "feesCents"
  >
{
  /** captured − refunded − fees. */
  readonly revenueCents: number
  readonly approvalRate: number | null
  readonly fraudRate: number | null
  readonly refundRate: number | null
  readonly disputeRate: number | null
}

export interface PeriodFigures extends CurrencyFigures {
  readonly periodStart: number
}

export interface AnalyticsWindow {
  /** Epoch milliseconds, inclusive; null: unbounded. */
  readonly from: number | null
  readonly to: number | null
  /** With an interval, the figures per currency and period too. */
  readonly interval: AnalyticsInterval | null
}

export interface AnalyticsReport extends AnalyticsWindow {
  /** Counts and count rates of every currency together (unitless). */
  readonly transactionCount: number
  readonly approvalRate: number | null
  readonly fraudRate: number | null
  readonly disputeRate: number | null
  /** The refund rate of the window's only currency; null when its payments are in several (see `byCurrency`). */
  readonly refundRate: number | null
  readonly byCurrency: ReadonlyArray<CurrencyFigures>
  readonly series: ReadonlyArray<PeriodFigures>
}

export interface ModelFigures {
  readonly modelVersion: string
  readonly screenedCount: number
  readonly blockedCount: number
  /** `fraudRate` over the payments this model screened (the approved payments it saw). */
  readonly fraudRate: number | null
  readonly casesByStatus: Readonly<Record<FraudCaseStatus, number>>
  readonly reviewPrecision: number | null
}

export interface FraudStatsReport {
  readonly casesByStatus: Readonly<Record<FraudCaseStatus, number>>
  readonly casesByPriority: Readonly<Record<Priority, number>>
  readonly approvedCount: number
  readonly screenedCount: number
  readonly blockedCount: number
  readonly blockedByCurrency: ReadonlyArray<
    { readonly currency: string; readonly count: number; readonly amountCents: number }
  >
  readonly lostDisputeCount: number
  readonly fraudRate: number | null
  readonly lostDisputeRate: number | null
  readonly reviewPrecision: number | null
  /** Screened payments in ten score bins of 0.1 (the last includes 1.0). */
  readonly scoreHistogram: ReadonlyArray<number>
  readonly byModel: ReadonlyArray<ModelFigures>
}

/** A merchant's figures: analytics of its payments and statistics of its fraud screening. */
export interface AnalyticsShape {
  readonly analytics: (
    merchantId: string,
    window: AnalyticsWindow
  ) => Effect.Effect<AnalyticsReport, InvalidInput | StoreUnavailable>
  readonly fraudStats: (merchantId: string) => Effect.Effect<FraudStatsReport, StoreUnavailable>
}

export class Analytics extends Context.Service<Analytics, AnalyticsShape>()("payments/Analytics") {}

/** A store row's figures in its currency (the totals of a currency, or one period of it). */
export const currencyFigures = (row: AnalyticsRow): CurrencyFigures => ({
  currency: row.currency,
  transactionCount: row.transactionCount,
  volumeCents: row.volumeCents,
  capturedCents: row.capturedCents,
  refundedCents: row.refundedCents,
  feesCents: row.feesCents,
  revenueCents: row.capturedCents - row.refundedCents - row.feesCents,
  approvalRate: approvalRate({ approved: row.approvedCount, decided: row.decidedCount }),
  fraudRate: fraudRate({ blocked: row.blockedCount, approved: row.approvedCount }),
  refundRate: refundRate(row),
  disputeRate: disputeRate({ disputed: row.disputedCount, captured: row.capturedCount })
})

/** The totals of every currency: count rates over the summed counts; money only per currency. */
export const analyticsReport = (
  window: AnalyticsWindow,
  rows: ReadonlyArray<AnalyticsRow>,
  periods: ReadonlyArray<AnalyticsRow & { readonly periodStart: number }>
): AnalyticsReport => {
  const sum = (pick: (row: AnalyticsRow) => number) => rows.reduce((total, row) => total + pick(row), 0)
  const byCurrency = rows.map(currencyFigures)
  return {
    ...window,
    transactionCount: sum((r) => r.transactionCount),
    approvalRate: approvalRate({ approved: sum((r) => r.approvedCount), decided: sum((r) => r.decidedCount) }),
    fraudRate: fraudRate({ blocked: sum((r) => r.blockedCount), approved: sum((r) => r.approvedCount) }),
    disputeRate: disputeRate({ disputed: sum((r) => r.disputedCount), captured: sum((r) => r.capturedCount) }),
    refundRate: byCurrency.length === 1 ? byCurrency[0]!.refundRate : null,
    byCurrency,
    series: periods.map((period) => ({ ...currencyFigures(period), periodStart: period.periodStart }))
  }
}

const modelFigures = (model: ModelStatsRow): ModelFigures => ({
  modelVersion: model.modelVersion,
  screenedCount: model.screenedCount,
  blockedCount: model.blockedCount,
  fraudRate: fraudRate({ blocked: model.blockedCount, approved: model.screenedCount }),
  casesByStatus: model.casesByStatus,
  reviewPrecision: reviewPrecision(model.casesByStatus)
})

export const layer = Layer.effect(
  Analytics,
  Effect.gen(function*() {
    const store = yield* Store
    return Analytics.of({
      analytics: (merchantId, window) =>
        Effect.gen(function*() {
          const rows = yield* store.analytics(merchantId, window.from, window.to)
          const periods = window.interval === null
            ? []
            : yield* store.analyticsSeries(merchantId, window.interval, window.from, window.to)
          if (periods.length > maximumSeriesRows) {
            return yield* new InvalidInput({
              param: "interval",
              message:
                `The series would have more than ${maximumSeriesRows} periods; narrow from/to or use a longer interval.`
            })
          }
          return analyticsReport(window, rows, periods)
        }),
      fraudStats: (merchantId) =>
        Effect.map(store.fraudStats(merchantId), (stats): FraudStatsReport => {
          const blockedCount = stats.blocked.reduce((total, row) => total + row.count, 0)
          return {
            casesByStatus: stats.casesByStatus,
            casesByPriority: stats.casesByPriority,
            approvedCount: stats.approvedCount,
            screenedCount: stats.screenedCount,
            blockedCount,
            blockedByCurrency: stats.blocked,
            lostDisputeCount: stats.lostDisputeCount,
            fraudRate: fraudRate({ blocked: blockedCount, approved: stats.approvedCount }),
            lostDisputeRate: lostDisputeRate({ lost: stats.lostDisputeCount, approved: stats.approvedCount }),
            reviewPrecision: reviewPrecision(stats.casesByStatus),
            scoreHistogram: stats.scoreHistogram,
            byModel: stats.byModel.map(modelFigures)
          }
        })
    })
  })
)
