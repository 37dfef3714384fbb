import { Effect, Layer, Result } from "effect"
import { describe, expect, it } from "vitest"
import * as Analytics from "../../src/services/Analytics.ts"
import {
  type AnalyticsPeriodRow,
  type AnalyticsRow,
  maximumSeriesRows,
  Store,
  type StoreShape
} from "../../src/store/Store.ts"

// The Analytics service over a store that answers fixed aggregates: the rules of the figures
// (docs/api.md, "Rates"), apart from how each store computes its aggregates (the contract suite).

const row = (currency: string, fields: Partial<AnalyticsRow> = {}): AnalyticsRow => ({
  currency,
  transactionCount: 10,
  volumeCents: 10_000,
  capturedCents: 8_000,
  refundedCents: 2_000,
  feesCents: 300,
  decidedCount: 10,
  approvedCount: 8,
  blockedCount: 2,
  capturedCount: 6,
  disputedCount: 3,
  ...fields
})

const serviceOver = (totals: ReadonlyArray<AnalyticsRow>, periods: ReadonlyArray<AnalyticsPeriodRow>) =>
  Analytics.layer.pipe(Layer.provide(Layer.succeed(Store, {
    analytics: () => Effect.succeed(totals),
    analyticsSeries: () => Effect.succeed(periods)
  } as unknown as StoreShape)))

const analytics = (
  totals: ReadonlyArray<AnalyticsRow>,
  periods: ReadonlyArray<AnalyticsPeriodRow>,
  interval: "day" | null
) =>
  Effect.runPromise(
    Effect.flatMap(Analytics.Analytics, (service) =>
      Effect.result(service.analytics("mer_1", { from: null, to: null, interval }))).pipe(
        Effect.provide(serviceOver(totals, periods))
      )
  )

describe("Analytics", () => {
  it("count rates over every currency; money rates per currency only, never summed across currencies", async () => {
    const report = await analytics(
      [row("JPY", { refundedCents: 500, capturedCents: 1_000 }), row("USD", { approvedCount: 2, blockedCount: 1 })],
      [],
      null
    )
    if (Result.isFailure(report)) throw new Error("refused")
    const r = report.success
    // Counts add up: 18 approved of 20 decided, 3 blocked of 10 approved, 6 disputed of 12 captured.
    expect(r).toMatchObject({ transactionCount: 20, approvalRate: 0.5, fraudRate: 0.3, disputeRate: 0.5 })
    // 500 yen of 1,000 and 2,000 cents of 8,000: two rates, no third made of yen plus cents.
    expect(r.refundRate).toBeNull()
    expect(r.byCurrency.map((c) => [c.currency, c.refundRate, c.fraudRate])).toEqual([["JPY", 0.5, 0.25], [
      "USD",
      0.25,
      0.5
    ]])
    expect(r.byCurrency[1]!.revenueCents).toBe(8_000 - 2_000 - 300)
  })

  it("one currency: the top-level refund rate is that currency's", async () => {
    const report = await analytics([row("EUR")], [], null)
    expect(Result.isSuccess(report) && report.success.refundRate).toBe(0.25)
  })

  it("a rate with nothing to divide by is null", async () => {
    const report = await analytics(
      [row("EUR", { decidedCount: 0, approvedCount: 0, blockedCount: 0, capturedCents: 0, capturedCount: 0 })],
      [],
      null
    )
    expect(Result.isSuccess(report) && report.success.byCurrency[0]).toMatchObject({
      approvalRate: null,
      fraudRate: null,
      refundRate: null,
      disputeRate: null
    })
  })

  it(`a series of more than ${maximumSeriesRows} periods is refused on interval`, async () => {
    const periods = Array.from(
      { length: maximumSeriesRows + 1 },
      (_, i) => ({ ...row("USD"), periodStart: i * 3_600_000 })
    )
    const refused = await analytics([row("USD")], periods, "day")
    expect(Result.isFailure(refused) && refused.failure).toMatchObject({ _tag: "InvalidInput", param: "interval" })
    const accepted = await analytics([row("USD")], periods.slice(0, maximumSeriesRows), "day")
    expect(Result.isSuccess(accepted) && accepted.success.series).toHaveLength(maximumSeriesRows)
  })

  it("fraud statistics: fraud_rate is blocked / approved, as in analytics; lost disputes have a rate of their own", async () => {
    const stats = await Effect.runPromise(
      Effect.flatMap(Analytics.Analytics, (service) => service.fraudStats("mer_1")).pipe(
        Effect.provide(Analytics.layer.pipe(Layer.provide(Layer.succeed(Store, {
          fraudStats: () =>
            Effect.succeed({
              casesByStatus: { open: 1, confirmed_fraud: 3, false_positive: 1 },
              casesByPriority: { low: 1, medium: 1, high: 2, critical: 1 },
              approvedCount: 40,
              screenedCount: 40,
              blocked: [{ currency: "EUR", count: 2, amountCents: 900 }, {
                currency: "USD",
                count: 2,
                amountCents: 1_000
              }],
              lostDisputeCount: 1,
              scoreHistogram: [30, 5, 1, 0, 0, 1, 1, 0, 1, 1],
              byModel: [{
                modelVersion: "m1",
                screenedCount: 40,
                blockedCount: 4,
                casesByStatus: { open: 1, confirmed_fraud: 3, false_positive: 1 }
              }]
            })
        } as unknown as StoreShape))))
      )
    )
    expect(stats).toMatchObject({ blockedCount: 4, fraudRate: 0.1, lostDisputeRate: 0.025, reviewPrecision: 0.75 })
    expect(stats.byModel[0]).toMatchObject({ fraudRate: 0.1, reviewPrecision: 0.75 })
  })
})
