import { Effect } from "effect"
import * as fc from "fast-check"
import { describe, expect, it } from "vitest"
import type { Payment, PaymentStatus } from "../../src/domain/Payment.ts"
import { isSettleable } from "../../src/domain/Payment.ts"
import { MinHeap } from "../../src/platform/MinHeap.ts"
import { emptyState, memoryOperations, OrderedQueue } from "../../src/store/MemoryStore.ts"

/**
 * The memory store's indexes (settlement index, fraud history's declines) against a naive model
 * over every payment, for random sequences of commits and sweeps: captures out of creation order,
 * cut-offs going back, small limits, payments leaving and rejoining the settleable set.
 */
const minute = (n: number) => Date.UTC(2030, 0, 1) + n * 60_000

const base = (id: string, card: string, createdAt: number): Payment => ({
  id,
  merchantId: "mer_1",
  status: "pending",
  amountCents: 1_000,
  currency: "USD",
  cardToken: card,
  idempotencyKey: null,
  fraudVerdict: null,
  fraudCaseId: null,
  captureMethod: "manual",
  version: 1,
  createdAt,
  updatedAt: createdAt,
  capturedAt: null,
  settledAt: null
} as unknown as Payment)

type Op =
  | { readonly _tag: "create"; readonly card: number; readonly at: number }
  | {
    readonly _tag: "change"
    readonly pick: number
    readonly status: PaymentStatus
    readonly capturedAt: number | null
    readonly settled: boolean
  }
  | { readonly _tag: "sweep"; readonly cutoff: number; readonly limit: number }
  | { readonly _tag: "history"; readonly pick: number }

const op: fc.Arbitrary<Op> = fc.oneof(
  fc.record({
    _tag: fc.constant("create" as const),
    card: fc.integer({ min: 0, max: 2 }),
    at: fc.integer({ min: 0, max: 60 })
  }),
  fc.record({
    _tag: fc.constant("change" as const),
    pick: fc.nat(),
    // Mostly settleable (captured or refunded, not settled), some leaving and rejoining the set.
    status: fc.constantFrom<PaymentStatus>(
      "captured",
      "captured",
      "captured",
      "refunded",
      "failed",
      "pending",
      "authorized",
      "settled"
    ),
    capturedAt: fc.option(fc.integer({ min: 0, max: 60 }), { nil: null, freq: 6 }),
    settled: fc.integer({ min: 0, max: 5 }).map((n) => n === 0)
  }),
  fc.record({
    _tag: fc.constant("sweep" as const),
    cutoff: fc.integer({ min: 0, max: 70 }),
    limit: fc.integer({ min: 1, max: 4 })
  }),
  fc.record({ _tag: fc.constant("history" as const), pick: fc.nat() })
)

describe("memory store indexes", () => {
  it("settleablePayments and the history's declines answer as a scan of every payment does", () => {
    // Sweeps that found several payments (their order is checked) and declines counted: the runs test something.
    let several = 0
    let declined = 0
    fc.assert(
      fc.property(fc.array(op, { minLength: 60, maxLength: 150 }), (ops) => {
        const state = emptyState()
        const store = memoryOperations(state)
        const order: Array<string> = []
        for (const o of ops) {
          if (o._tag === "create") {
            const id = `pay_${order.length.toString().padStart(3, "0")}`
            const payment = base(id, `tok_${o.card}`, minute(o.at))
            Effect.runSync(store.insertPayment({ payment, events: [], ledger: [], fraudCase: null }))
            order.push(id)
          } else if (o._tag === "change" && order.length > 0) {
            const before = state.payments.get(order[o.pick % order.length]!)!
            const payment = {
              ...before,
              status: o.status,
              version: before.version + 1,
              capturedAt: o.capturedAt === null ? null : minute(o.capturedAt),
              settledAt: o.settled ? minute(61) : null
            }
            const done = Effect.runSync(
              store.commitChange({
                before,
                change: { payment, events: [], ledger: [], fraudCase: null },
                response: null
              })
            )
            expect(done).toBe(true)
          } else if (o._tag === "sweep") {
            const cutoff = minute(o.cutoff)
            const expected = order
              .map((id) => state.payments.get(id)!)
              .filter((p) => isSettleable(p) && p.capturedAt !== null && p.capturedAt < cutoff)
              .slice(0, o.limit)
              .map((p) => p.id)
            expect(Effect.runSync(store.settleablePayments(cutoff, o.limit))).toEqual(expected)
            if (expected.length > 1) several++
          } else if (o._tag === "history" && order.length > 0) {
            const payment = state.payments.get(order[o.pick % order.length]!)!
            const until = minute(70)
            const found = Effect.runSync(store.fraudHistory({
              merchantId: "mer_1",
              cardToken: payment.cardToken,
              currency: "USD",
              until,
              excludePaymentId: "pay_none",
              hourSince: minute(0),
              daySince: minute(0),
              dayLimit: 1_000,
              amountWindow: 10
            }))
            const declines = order.map((id) => state.payments.get(id)!).filter((p) =>
              p.cardToken === payment.cardToken && p.status === "failed"
            )
            expect(found.cardDeclinesLastDay).toBe(declines.length)
            if (declines.length > 0) declined++
          }
        }
      }),
      { numRuns: 300, seed: 42 }
    )
    expect(several).toBeGreaterThan(100)
    expect(declined).toBeGreaterThan(100)
  })
})

/**
 * `fraudHistory` against the definition (PostgreSQL's `historyColumns`): payments of two
 * merchants, cards and currencies created out of order, with equal times, statuses moving in and
 * out of "failed", and queries with any bounds, limits and excluded payment (stored or not).
 */
describe("memory store fraud history", () => {
  const time = fc.integer({ min: 0, max: 40 })
  type HistoryOp =
    | {
      readonly _tag: "create"
      readonly merchant: number
      readonly card: number
      readonly currency: number
      readonly at: number
      readonly amount: number
      readonly failed: boolean
    }
    | { readonly _tag: "change"; readonly pick: number; readonly failed: boolean }
    | {
      readonly _tag: "history"
      readonly merchant: number
      readonly card: number
      readonly currency: number
      readonly pick: number | null
      readonly until: number
      readonly day: number
      readonly hour: number
      readonly dayLimit: number
      readonly amountWindow: number
    }
  const historyOp: fc.Arbitrary<HistoryOp> = fc.oneof(
    {
      weight: 3,
      arbitrary: fc.record({
        _tag: fc.constant("create" as const),
        merchant: fc.integer({ min: 0, max: 1 }),
        card: fc.integer({ min: 0, max: 2 }),
        currency: fc.integer({ min: 0, max: 1 }),
        at: time,
        amount: fc.integer({ min: 1, max: 10_000 }),
        failed: fc.boolean()
      })
    },
    { weight: 1, arbitrary: fc.record({ _tag: fc.constant("change" as const), pick: fc.nat(), failed: fc.boolean() }) },
    {
      weight: 2,
      arbitrary: fc.record({
        _tag: fc.constant("history" as const),
        merchant: fc.integer({ min: 0, max: 1 }),
        card: fc.integer({ min: 0, max: 3 }),
        currency: fc.integer({ min: 0, max: 2 }),
        pick: fc.option(fc.nat(), { nil: null }),
        until: time,
        day: time,
        hour: time,
        dayLimit: fc.integer({ min: 1, max: 8 }),
        amountWindow: fc.integer({ min: 1, max: 8 })
      })
    }
  )
  it("answers as the definition does", () => {
    fc.assert(
      fc.property(fc.array(historyOp, { minLength: 20, maxLength: 120 }), (ops) => {
        const state = emptyState()
        const store = memoryOperations(state)
        const order: Array<string> = []
        for (const o of ops) {
          if (o._tag === "create") {
            const id = `pay_${(order.length * 7919 % 1000).toString().padStart(3, "0")}_${order.length}`
            const payment = {
              ...base(id, `tok_${o.card}`, minute(o.at)),
              merchantId: `mer_${o.merchant}`,
              currency: o.currency === 0 ? "USD" : "EUR",
              amountCents: o.amount,
              status: o.failed ? "failed" : "pending"
            } as Payment
            Effect.runSync(store.insertPayment({ payment, events: [], ledger: [], fraudCase: null }))
            order.push(id)
          } else if (o._tag === "change" && order.length > 0) {
            const before = state.payments.get(order[o.pick % order.length]!)!
            const payment = {
              ...before,
              status: o.failed ? "failed" : "authorized",
              version: before.version + 1
            } as Payment
            expect(
              Effect.runSync(
                store.commitChange({
                  before,
                  change: { payment, events: [], ledger: [], fraudCase: null },
                  response: null
                })
              )
            ).toBe(true)
          } else if (o._tag === "history") {
            const q = {
              merchantId: `mer_${o.merchant}`,
              cardToken: `tok_${o.card}`,
              currency: ["USD", "EUR", "GBP"][o.currency]!,
              until: minute(o.until),
              excludePaymentId: o.pick === null || order.length === 0 ? "pay_none" : order[o.pick % order.length]!,
              hourSince: minute(o.hour),
              daySince: minute(o.day),
              dayLimit: o.dayLimit,
              amountWindow: o.amountWindow
            }
            const newestFirst = (a: Payment, b: Payment) =>
              a.createdAt < b.createdAt ? 1 : a.createdAt > b.createdAt ? -1 : a.id < b.id ? 1 : a.id > b.id ? -1 : 0
            const earlier = [...state.payments.values()]
              .filter((p) => p.merchantId === q.merchantId && p.createdAt <= q.until && p.id !== q.excludePaymentId)
              .sort(newestFirst)
            const card = earlier.filter((p) => p.cardToken === q.cardToken)
            const day = card.filter((p) => p.createdAt >= q.daySince).slice(0, q.dayLimit)
            const amounts = earlier.filter((p) => p.currency === q.currency).slice(0, q.amountWindow)
            expect(Effect.runSync(store.fraudHistory(q))).toEqual({
              cardAttemptsLastHour: day.filter((p) => p.createdAt >= q.hourSince).length,
              cardAttemptsLastDay: day.length,
              cardDeclinesLastDay: day.filter((p) => p.status === "failed").length,
              cardSeenBefore: card.length > 0,
              merchantAmountCount: amounts.length,
              merchantAmountSumCents: amounts.reduce((sum, p) => sum + p.amountCents, 0)
            })
          }
        }
      }),
      { numRuns: 400, seed: 42 }
    )
  })
})

describe("OrderedQueue (idempotency expiries, captures waiting for settlement)", () => {
  it("comes out in the order of one heap of everything, for any mix of in-order and late items", () => {
    type Item = { readonly at: number; readonly key: number }
    const before = (a: Item, b: Item) => a.at < b.at || (a.at === b.at && a.key < b.key)
    const step = fc.oneof(
      fc.record({
        push: fc.constant(true as const),
        ahead: fc.integer({ min: -3, max: 5 }),
        key: fc.integer({ min: 0, max: 9 })
      }),
      fc.record({ push: fc.constant(false as const), pops: fc.integer({ min: 1, max: 3 }) })
    )
    fc.assert(
      fc.property(fc.array(step, { maxLength: 3_000 }), (steps) => {
        const queue = new OrderedQueue<Item>(before)
        const heap = new MinHeap<Item>(before)
        let now = 0
        for (const s of steps) {
          if (s.push) {
            now = Math.max(0, now + s.ahead)
            const item = { at: now, key: s.key }
            queue.push(item)
            heap.push(item)
          } else {
            for (let i = 0; i < s.pops; i++) {
              // Items equal under the order are interchangeable (the same key and time): compared by value.
              expect(queue.peek()).toEqual(heap.peek())
              expect(queue.pop()).toEqual(heap.pop())
            }
          }
          expect(queue.size).toBe(heap.size)
        }
        while (heap.size > 0) expect(queue.pop()).toEqual(heap.pop())
        expect(queue.pop()).toBeUndefined()
      }),
      { numRuns: 200 }
    )
  })

  it("keeps its order across the compaction of a long in-order run", () => {
    type Item = { readonly at: number; readonly key: number }
    const before = (a: Item, b: Item) => a.at < b.at || (a.at === b.at && a.key < b.key)
    const queue = new OrderedQueue<Item>(before)
    for (let i = 0; i < 5_000; i++) queue.push({ at: i, key: 0 })
    for (let i = 0; i < 3_000; i++) expect(queue.pop()!.at).toBe(i)
    queue.push({ at: 10, key: 1 })
    for (let i = 5_000; i < 6_000; i++) queue.push({ at: i, key: 0 })
    expect(queue.pop()).toEqual({ at: 10, key: 1 })
    for (let i = 3_000; i < 6_000; i++) expect(queue.pop()!.at).toBe(i)
    expect(queue.size).toBe(0)
  })
})
