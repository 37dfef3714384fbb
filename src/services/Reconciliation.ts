import { Context, Data, Effect, Layer } from "effect"
import { Acquirer, type ProcessorCallError } from "../acquirer/Acquirer.ts"
import type { Payment } from "../domain/Payment.ts"
import { type Difference, type ProcessorAmounts, reconcile, type ReconciledField } from "../domain/Reconciliation.ts"
import * as Metrics from "../platform/Metrics.ts"
import { Store, type StoreUnavailable } from "../store/Store.ts"

/** The configured acquirer keeps no records to reconcile with (the in-process sandbox, the simulated network). */
export class NoProcessor extends Data.TaggedError("NoProcessor")<{}> {}

export interface Report {
  readonly fromMs: number
  readonly toMs: number
  /** Our payments of the period, and the processor's records of it. */
  readonly ours: number
  readonly processor: number
  readonly differences: ReadonlyArray<Difference>
}

export interface ReconciliationShape {
  /**
   * Compares the processor's records of `[fromMs, toMs)` with the books, payment by payment
   * (authorized, captured, refunded, cancelled), and reports every difference: returned, logged
   * one line each, and counted in `reconciliation_differences`.
   */
  readonly run: (
    period: { readonly fromMs: number; readonly toMs: number }
  ) => Effect.Effect<Report, NoProcessor | ProcessorCallError | StoreUnavailable>
}

export class Reconciliation extends Context.Service<Reconciliation, ReconciliationShape>()("payments/Reconciliation") {}

const pageSize = 500
const fields: ReadonlyArray<ReconciledField> = [
  "authorized",
  "captured",
  "refunded",
  "cancelled",
  "missing_at_processor",
  "unknown_to_us"
]

export const make = Effect.gen(function*() {
  const store = yield* Store
  const acquirer = yield* Acquirer

  /** Every payment of the period, page by page. */
  const oursBetween = (from: number, to: number) =>
    Effect.gen(function*() {
      const all: Array<Payment> = []
      let after: { readonly createdAt: number; readonly id: string } | null = null
      while (true) {
        const page: ReadonlyArray<Payment> = yield* store.paymentsCreatedBetween({ from, to, after, limit: pageSize })
        all.push(...page)
        if (page.length < pageSize) return all
        const last: Payment = page[page.length - 1]!
        after = { createdAt: last.createdAt, id: last.id }
      }
    })

  const run: ReconciliationShape["run"] = ({ fromMs, toMs }) =>
    Effect.gen(function*() {
      const operations = acquirer.operations
      if (operations === undefined) return yield* Effect.fail(new NoProcessor())
      const processor: ReadonlyArray<ProcessorAmounts> = yield* operations.payments({ fromMs, toMs })
      const ours = yield* oursBetween(fromMs, toMs)
      // The processor's clock and ours differ a little at the period's edges: a record it has
      // that our period lacks is looked up by id before it counts as unknown to us.
      const known = new Set(ours.map((p) => p.id))
      const edges: Array<Payment> = []
      for (const record of processor) {
        if (known.has(record.paymentId)) continue
        const payment = yield* store.getPayment(null, record.paymentId)
        if (payment !== null) edges.push(payment)
      }
      const differences = reconcile([...ours, ...edges], processor)
      for (const field of fields) {
        Metrics.record(
          Metrics.reconciliationDifferences(field),
          differences.filter((d) => d.field === field).length
        )
      }
      for (const d of differences) {
        yield* Effect.logWarning(
          `reconciliation: payment ${d.paymentId} ${d.field}: ours ${String(d.ours)}, processor ${String(d.processor)}`
        ).pipe(
          Effect.annotateLogs({ payment_id: d.paymentId, field: d.field })
        )
      }
      return { fromMs, toMs, ours: ours.length, processor: processor.length, differences }
    }).pipe(
      Effect.tap(() => Effect.sync(() => Metrics.record(Metrics.reconciliationRuns("ok"), 1))),
      Effect.tapError(() => Effect.sync(() => Metrics.record(Metrics.reconciliationRuns("failed"), 1)))
    )

  return { run } satisfies ReconciliationShape
})

export const layer = Layer.effect(Reconciliation, make)
