import * as PgClient from "@effect/sql-pg/PgClient"
import { Cause, Context, Effect, Exit, Layer, ManagedRuntime } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import * as Dispute from "../../src/domain/Dispute.ts"
import { defaultThresholds, sigmoid, verdict } from "../../src/domain/Fraud.ts"
import * as Ledger from "../../src/domain/Ledger.ts"
import type { Currency } from "../../src/domain/Money.ts"
import { disputeFeeCents } from "../../src/domain/Money.ts"
import * as Payment from "../../src/domain/Payment.ts"
import { layerMemory } from "../../src/store/MemoryStore.ts"
import {
  type AnalyticsInterval,
  type CardTokenDisputeQuery,
  type IdempotencyClaim,
  type OpenOutcome,
  Store
} from "../../src/store/Store.ts"
import { accepted, createInput } from "../domain/fixtures.ts"
import { freshDatabase, pgStoreLayer } from "../support/database.ts"
import {
  apiKeyFor,
  applied,
  apply,
  eventsOf,
  givenMerchant,
  givenPayment,
  ledgerOf,
  merchantFor,
  runner,
  type Step,
  steps,
  type TestWorld,
  testWorld,
  toCaptured
} from "./harness.ts"

const allPages = { page: 1, perPage: 100 }
const at = (t: number, plusMs: number) => t + plusMs
/** An ISO 8601 text's time: the tests write their instants as text, the store takes them in ms. */
const ms = (iso: string) => Date.parse(iso)
const seconds = (n: number) => n * 1_000
const hours = (n: number) => n * 3_600_000
/** A claim of `key` at `now` for the world's merchant: a 30 s lease and a day to live unless given. */
const claimAt = (
  w: TestWorld,
  key: string,
  fingerprint: string,
  now: number,
  leaseMs = seconds(30),
  ttlMs = hours(24)
) =>
  ({
    merchantId: w.merchantId,
    key,
    fingerprint,
    now,
    lockedUntil: at(now, leaseMs),
    expiresAt: at(now, ttlMs)
  }) satisfies IdempotencyClaim

/**
 * A create decided whole before it is written, as the write-once path has it: created, then `path`
 * run at one later time; the pending payment and the change from nothing to where the flow left it.
 */
const decidedCreate = (w: TestWorld, input: Partial<Payment.CreateInput>, path: ReadonlyArray<Step>) => {
  const created = accepted(Payment.create(createInput(w.merchantId, input), w.context()))
  const ctx = w.context()
  const flow = Payment.sequence(created.payment, path.map((step) => (p: Payment.Payment) => step(p, null, ctx)))
  if (!flow.ok) throw new Error("the flow was refused")
  return { created, change: Payment.followedBy(created, flow.change) }
}

/**
 * The behaviour every Store adapter must share. Tests may share one database, so each uses its
 * own merchants and ids; the few queries that span merchants (firstMerchant, paymentsInFlight,
 * settleablePayments, purgeIdempotencyKeys) use time windows no other test touches.
 */
export const storeContract = (name: string, makeLayer: () => Layer.Layer<Store, unknown>) =>
  describe(`store contract: ${name}`, () => {
    const run = runner(makeLayer)

    describe("merchants", () => {
      it("inserts, reads and updates a merchant; firstMerchant is the oldest one", () =>
        run(Effect.gen(function*() {
          const store = yield* Store
          const w = testWorld("1971-01-01T00:00:00.000Z")
          const older = merchantFor(w, w.mintId("merchant"), ms("1971-01-01T00:00:00.000Z"))
          const newer = merchantFor(w, w.mintId("merchant"), ms("1971-01-02T00:00:00.000Z"))
          const firstKey = apiKeyFor(w, newer.id, newer.createdAt)
          yield* store.insertMerchant(newer, firstKey)
          yield* store.insertMerchant(older, apiKeyFor(w, older.id, older.createdAt))

          expect(yield* store.getMerchant(newer.id)).toEqual(newer)
          expect(yield* store.getMerchant("mer_unknown")).toBeNull()
          expect(yield* store.firstMerchant()).toEqual(older)
          // The merchant's first key is stored with it.
          expect(yield* store.findApiKeyByHash(firstKey.keyHash)).toEqual(firstKey)
          const usedAt = ms("1971-01-03T00:00:00.000Z")
          expect(yield* store.useApiKey(firstKey.keyHash, usedAt, at(usedAt, -seconds(60)))).toEqual({
            key: { ...firstKey, lastUsedAt: usedAt },
            merchant: newer
          })

          const renamed = { ...newer, name: "Renamed Ltd", webhookUrl: null, updatedAt: ms("1971-01-03T00:00:00.000Z") }
          yield* store.updateMerchant(renamed)
          expect(yield* store.getMerchant(newer.id)).toEqual(renamed)
          expect(yield* store.getMerchant(older.id)).toEqual(older)
        })))
    })

    describe("api keys", () => {
      it("finds a key by hash, and by id only for its own merchant", () =>
        run(Effect.gen(function*() {
          const store = yield* Store
          const w = testWorld()
          const { apiKey } = yield* givenMerchant(w)
          const other = yield* givenMerchant(w, w.mintId("merchant"))
          const second = apiKeyFor(w, w.merchantId, w.clock.advance())
          yield* store.insertApiKey(second)

          expect(yield* store.findApiKeyByHash(second.keyHash)).toEqual(second)
          expect(yield* store.findApiKeyByHash("sha256_of_nothing")).toBeNull()
          expect(yield* store.getApiKey(w.merchantId, apiKey.id)).toEqual(apiKey)
          expect(yield* store.getApiKey(other.merchant.id, apiKey.id)).toBeNull()
          expect(yield* store.getApiKey(w.merchantId, "key_unknown")).toBeNull()
        })))

      it("useApiKey: the key with its merchant in one call, last_used_at written at most once an interval, never for a revoked key", () =>
        run(Effect.gen(function*() {
          const store = yield* Store
          const w = testWorld()
          const { apiKey, merchant } = yield* givenMerchant(w)
          const other = apiKeyFor(w, w.merchantId, w.clock.advance())
          yield* store.insertApiKey(other)
          const use = (now: number) => store.useApiKey(apiKey.keyHash, now, at(now, -seconds(60)))
          const stored = () => store.getApiKey(w.merchantId, apiKey.id)

          // Never used: written, and the key returned carries the time.
          const t0 = w.clock.advance()
          expect(yield* use(t0)).toEqual({ key: { ...apiKey, lastUsedAt: t0 }, merchant })
          expect(yield* stored()).toEqual({ ...apiKey, lastUsedAt: t0 })
          // Used within the interval: read as it is, not written.
          expect(yield* use(at(t0, seconds(59)))).toEqual({ key: { ...apiKey, lastUsedAt: t0 }, merchant })
          expect(yield* stored()).toEqual({ ...apiKey, lastUsedAt: t0 })
          // An interval later (last used at or before `touchBefore`): written.
          const t1 = at(t0, seconds(60))
          expect(yield* use(t1)).toEqual({ key: { ...apiKey, lastUsedAt: t1 }, merchant })
          expect(yield* stored()).toEqual({ ...apiKey, lastUsedAt: t1 })
          // Only that key.
          expect(yield* store.getApiKey(w.merchantId, other.id)).toEqual(other)
          // Unknown: nothing.
          expect(yield* store.useApiKey("0".repeat(64), t1, t0)).toBeNull()

          // Revoked: found as it is (the caller refuses it), never written.
          const t2 = at(t1, hours(1))
          expect(yield* store.rotateApiKey(w.merchantId, apiKey.id, apiKeyFor(w, w.merchantId, t2), t2)).toBe("rotated")
          const revoked = { ...apiKey, status: "revoked" as const, revokedAt: t2, lastUsedAt: t1 }
          expect(yield* use(at(t2, hours(1)))).toEqual({ key: revoked, merchant })
          expect(yield* stored()).toEqual(revoked)
        })))

      it("lists keys newest first, ties broken by id descending (byte order), page by page", () =>
        run(Effect.gen(function*() {
          const store = yield* Store
          const w = testWorld()
          const { apiKey: first } = yield* givenMerchant(w)
          const t1 = w.clock.advance(), t2 = w.clock.advance(), t3 = w.clock.advance()
          const k1 = apiKeyFor(w, w.merchantId, t1)
          // Two keys created in the same millisecond whose ids differ only in case: "a" (0x61) sorts after "B" (0x42).
          const tieUpper = apiKeyFor(w, w.merchantId, t2, `${w.mintId("apiKey")}B`)
          const tieLower = apiKeyFor(w, w.merchantId, t2, `${tieUpper.id.slice(0, -1)}a`)
          const k4 = apiKeyFor(w, w.merchantId, t3)
          for (const key of [tieUpper, k4, k1, tieLower]) yield* store.insertApiKey(key)

          const ids = (keys: ReadonlyArray<{ readonly id: string }>) => keys.map((k) => k.id)
          const page = (n: number) => store.listApiKeys(w.merchantId, { page: n, perPage: 2 })
          expect(ids((yield* page(1)).items)).toEqual([k4.id, tieLower.id])
          expect(ids((yield* page(2)).items)).toEqual([tieUpper.id, k1.id])
          expect(ids((yield* page(3)).items)).toEqual([first.id])
          expect((yield* page(4)).items).toEqual([])
          expect((yield* page(3)).totalCount).toBe(5)
          expect((yield* store.listApiKeys(w.merchantId, allPages)).items[0]).toEqual(k4)
        })))

      it("rotates a key atomically: old revoked, new active; not_found across merchants; a revoked key does not rotate", () =>
        run(Effect.gen(function*() {
          const store = yield* Store
          const w = testWorld()
          const { apiKey } = yield* givenMerchant(w)
          const other = yield* givenMerchant(w, w.mintId("merchant"))
          const now = w.clock.advance()
          const replacement = apiKeyFor(w, w.merchantId, now)

          expect(yield* store.rotateApiKey(other.merchant.id, apiKey.id, apiKeyFor(w, other.merchant.id, now), now))
            .toBe("not_found")
          expect(yield* store.getApiKey(w.merchantId, apiKey.id)).toEqual(apiKey)

          expect(yield* store.rotateApiKey(w.merchantId, apiKey.id, replacement, now)).toBe("rotated")
          expect(yield* store.getApiKey(w.merchantId, apiKey.id)).toEqual({
            ...apiKey,
            status: "revoked",
            revokedAt: now
          })
          expect(yield* store.findApiKeyByHash(replacement.keyHash)).toEqual(replacement)

          const again = apiKeyFor(w, w.merchantId, w.clock.advance())
          expect(yield* store.rotateApiKey(w.merchantId, apiKey.id, again, again.createdAt)).toBe("revoked")
          expect(yield* store.findApiKeyByHash(again.keyHash)).toBeNull()
          expect((yield* store.listApiKeys(w.merchantId, allPages)).totalCount).toBe(2)
          expect(yield* store.rotateApiKey(w.merchantId, "key_unknown", again, again.createdAt)).toBe("not_found")
        })))
    })

    describe("payments", () => {
      it("inserts one payment per merchant idempotency key; the same key elsewhere is another payment", () =>
        run(Effect.gen(function*() {
          const store = yield* Store
          const w = testWorld()
          yield* givenMerchant(w)
          const other = yield* givenMerchant(w, w.mintId("merchant"))
          const input = { idempotencyKey: "order-1", metadata: { order: "1", note: "first" } }
          const original = accepted(
            Payment.create(createInput(w.merchantId, { ...input, amountCents: 1_000 }), w.context())
          )
          const retry = accepted(
            Payment.create(createInput(w.merchantId, { ...input, amountCents: 2_000 }), w.context())
          )
          const elsewhere = accepted(Payment.create(createInput(other.merchant.id, input), w.context()))

          expect(yield* store.insertPayment(original)).toEqual({ _tag: "Inserted" })
          expect(yield* store.insertPayment(retry)).toEqual({ _tag: "Exists", payment: original.payment })
          expect(yield* store.insertPayment(elsewhere)).toEqual({ _tag: "Inserted" })

          expect(yield* store.getPayment(w.merchantId, original.payment.id)).toEqual(original.payment)
          expect(yield* store.getPayment(w.merchantId, retry.payment.id)).toBeNull()
          expect(yield* store.listEvents(w.merchantId, original.payment.id)).toEqual(original.events)
          expect((yield* store.listPayments(w.merchantId, {}, allPages)).totalCount).toBe(1)

          // Without a key, every insert is a payment of its own.
          for (let i = 0; i < 2; i++) {
            const unkeyed = accepted(Payment.create(createInput(w.merchantId), w.context()))
            expect(yield* store.insertPayment(unkeyed)).toEqual({ _tag: "Inserted" })
          }
          expect((yield* store.listPayments(w.merchantId, {}, allPages)).totalCount).toBe(3)
        })))

      it("reads a payment, its events and its ledger only for its own merchant", () =>
        run(Effect.gen(function*() {
          const store = yield* Store
          const w = testWorld()
          yield* givenMerchant(w)
          const other = yield* givenMerchant(w, w.mintId("merchant"))
          const { payment, changes } = yield* givenPayment(w, { path: toCaptured() })

          expect(yield* store.getPayment(w.merchantId, payment.id)).toEqual(payment)
          expect(yield* store.getPayment(null, payment.id)).toEqual(payment)
          expect(yield* store.getPayment(other.merchant.id, payment.id)).toBeNull()
          expect(yield* store.getPayment(w.merchantId, "pay_unknown")).toBeNull()
          expect(yield* store.listEvents(other.merchant.id, payment.id)).toEqual([])
          expect(yield* store.listLedger(other.merchant.id, payment.id)).toEqual([])
          expect(yield* store.listLedger(w.merchantId, payment.id)).toEqual(ledgerOf(changes))
        })))

      it("lists payments newest first (ties by id), filtered by status, creation time and amount, page by page", () =>
        run(Effect.gen(function*() {
          const store = yield* Store
          const w = testWorld()
          yield* givenMerchant(w)
          const other = yield* givenMerchant(w, w.mintId("merchant"))
          yield* givenPayment(w, { merchantId: other.merchant.id })
          // Amounts 100..600, created one second apart; the odd ones are declined.
          const created: Array<Payment.Payment> = []
          for (let i = 1; i <= 6; i++) {
            const path = i % 2 === 1 ? [steps.decline] : []
            created.push((yield* givenPayment(w, { input: { amountCents: i * 100 }, path })).payment)
          }
          const [p1, p2, p3, p4, p5, p6] = created.map((p) => p.id) as [string, string, string, string, string, string]
          const ids = (filter: Parameters<typeof store.listPayments>[1], page = allPages) =>
            Effect.map(store.listPayments(w.merchantId, filter, page), (result) => ({
              ids: result.items.map((p) => p.id),
              total: result.totalCount
            }))

          expect(yield* ids({})).toEqual({ ids: [p6, p5, p4, p3, p2, p1], total: 6 })
          expect((yield* store.listPayments(w.merchantId, {}, allPages)).items[0]).toEqual(created[5])
          expect(yield* ids({ status: "failed" })).toEqual({ ids: [p5, p3, p1], total: 3 })
          expect(yield* ids({ status: "pending" })).toEqual({ ids: [p6, p4, p2], total: 3 })
          expect(yield* ids({ status: "captured" })).toEqual({ ids: [], total: 0 })
          // Bounds are inclusive.
          expect(yield* ids({ createdFrom: created[1]!.createdAt, createdTo: created[3]!.createdAt })).toEqual({
            ids: [p4, p3, p2],
            total: 3
          })
          expect(yield* ids({ minAmountCents: 200, maxAmountCents: 400 })).toEqual({ ids: [p4, p3, p2], total: 3 })
          expect(yield* ids({ status: "failed", minAmountCents: 300 })).toEqual({ ids: [p5, p3], total: 2 })
          expect(yield* ids({}, { page: 2, perPage: 4 })).toEqual({ ids: [p2, p1], total: 6 })
          expect(yield* ids({}, { page: 3, perPage: 4 })).toEqual({ ids: [], total: 6 })

          // Two payments created in the same millisecond: the larger id (byte order) comes first.
          const sameTime = w.clock.advance()
          const tie = (suffix: string) => {
            const base = accepted(Payment.create(createInput(w.merchantId), { now: sameTime, mintId: w.mintId }))
            return { ...base, payment: { ...base.payment, id: `${p6}${suffix}` }, events: [] }
          }
          yield* store.insertPayment(tie("B"))
          yield* store.insertPayment(tie("a"))
          expect((yield* ids({}, { page: 1, perPage: 2 })).ids).toEqual([`${p6}a`, `${p6}B`])
        })))
    })

    describe("updatePayment", () => {
      it("Applied commits the payment, its event and its ledger group together", () =>
        run(Effect.gen(function*() {
          const store = yield* Store
          const w = testWorld()
          yield* givenMerchant(w)
          const { payment, changes } = yield* givenPayment(w, { input: { captureMethod: "manual" } })

          const outcome = yield* apply(w, { merchantId: w.merchantId, paymentId: payment.id }, steps.authorize)
          expect(outcome._tag).toBe("Applied")
          if (outcome._tag !== "Applied") return
          changes.push(outcome.change)
          expect(yield* store.getPayment(w.merchantId, payment.id)).toEqual(outcome.change.payment)
          expect(yield* store.listEvents(w.merchantId, payment.id)).toEqual(eventsOf(changes))
          expect(yield* store.listLedger(w.merchantId, payment.id)).toEqual(ledgerOf(changes))

          for (const step of [steps.screen(0.1), steps.capture(6_000), steps.refund(1_000)]) {
            changes.push(yield* applied(w, w.merchantId, payment.id, step))
          }
          const events = yield* store.listEvents(w.merchantId, payment.id)
          expect(events.map((e) => [e.sequence, e.type])).toEqual([
            [1, "payment.initiated"],
            [2, "payment.authorized"],
            [3, "payment.fraud_passed"],
            [4, "payment.captured"],
            [5, "payment.partially_refunded"]
          ])
          expect(events).toEqual(eventsOf(changes))
          const ledger = yield* store.listLedger(w.merchantId, payment.id)
          expect(ledger).toEqual(ledgerOf(changes))
          expect(Ledger.isBalanced(ledger)).toBe(true)
          expect(yield* store.getPayment(w.merchantId, payment.id)).toMatchObject({
            status: "captured",
            version: 5,
            capturedAmountCents: 6_000,
            refundedAmountCents: 1_000
          })
        })))

      it("Refused changes nothing", () =>
        run(Effect.gen(function*() {
          const store = yield* Store
          const w = testWorld()
          yield* givenMerchant(w)
          const { payment, changes } = yield* givenPayment(w, { path: [steps.authorize] })

          const outcome = yield* apply(w, { merchantId: w.merchantId, paymentId: payment.id }, steps.capture())
          expect(outcome).toMatchObject({
            _tag: "Refused",
            payment,
            decision: { ok: false, refusal: { _tag: "InvalidState", status: "authorized" } }
          })
          const tooMuch = yield* apply(w, { merchantId: w.merchantId, paymentId: payment.id }, (p, _, ctx) =>
            Payment.capture({ ...p, fraudVerdict: "passed" }, 999_999, ctx))
          expect(tooMuch).toMatchObject({ _tag: "Refused", decision: { refusal: { _tag: "InvalidAmount" } } })

          expect(yield* store.getPayment(w.merchantId, payment.id)).toEqual(payment)
          expect(yield* store.listEvents(w.merchantId, payment.id)).toEqual(eventsOf(changes))
          expect(yield* store.listLedger(w.merchantId, payment.id)).toEqual(ledgerOf(changes))
        })))

      it("NotFound for another merchant's payment or an unknown id, without asking the domain", () =>
        run(Effect.gen(function*() {
          const store = yield* Store
          const w = testWorld()
          yield* givenMerchant(w)
          const other = yield* givenMerchant(w, w.mintId("merchant"))
          const { payment } = yield* givenPayment(w)
          let asked = 0
          const decide = (p: Payment.Payment) => {
            asked++
            return Payment.voidAuthorization(p, w.context())
          }
          expect(yield* store.updatePayment({ merchantId: other.merchant.id, paymentId: payment.id }, decide)).toEqual({
            _tag: "NotFound"
          })
          expect(yield* store.updatePayment({ merchantId: null, paymentId: "pay_unknown" }, decide)).toEqual({
            _tag: "NotFound"
          })
          expect(asked).toBe(0)
          expect(yield* store.getPayment(w.merchantId, payment.id)).toEqual(payment)
        })))

      it("a command carrying a claimed idempotency key applies once; its retry is AlreadyApplied", () =>
        run(Effect.gen(function*() {
          const store = yield* Store
          const w = testWorld()
          yield* givenMerchant(w)
          const { payment } = yield* givenPayment(w, { path: toCaptured() })
          const now = w.clock.now()
          const claim = (key: string): IdempotencyClaim => ({
            merchantId: w.merchantId,
            key,
            fingerprint: `POST /refund ${key}`,
            now,
            lockedUntil: at(now, seconds(30)),
            expiresAt: at(now, hours(24))
          })
          expect(yield* store.claimIdempotencyKey(claim("refund-1"))).toEqual({ _tag: "Claimed" })
          const target = {
            merchantId: w.merchantId,
            paymentId: payment.id,
            commandKey: { merchantId: w.merchantId, key: "refund-1" }
          }

          const first = yield* apply(w, target, steps.refund(1_000))
          expect(first._tag).toBe("Applied")
          const afterFirst = yield* store.getPayment(w.merchantId, payment.id)
          expect(afterFirst?.refundedAmountCents).toBe(1_000)

          const retry = yield* apply(w, target, steps.refund(1_000))
          expect(retry).toEqual({ _tag: "AlreadyApplied", payment: afterFirst })
          expect(yield* store.getPayment(w.merchantId, payment.id)).toEqual(afterFirst)

          // Another key is another command.
          yield* store.claimIdempotencyKey(claim("refund-2"))
          const second = yield* apply(
            w,
            { ...target, commandKey: { merchantId: w.merchantId, key: "refund-2" } },
            steps.refund(1_000)
          )
          expect(second._tag).toBe("Applied")
          const refunds = (yield* store.listEvents(w.merchantId, payment.id)).filter((e) =>
            e.type === "payment.partially_refunded"
          )
          expect(refunds).toHaveLength(2)
        })))

      it("a decision that does not follow from the locked record is a defect and commits nothing", () =>
        run(Effect.gen(function*() {
          const store = yield* Store
          const w = testWorld()
          yield* givenMerchant(w)
          const { payment, changes } = yield* givenPayment(w)
          const exit = yield* Effect.exit(
            store.updatePayment({ merchantId: w.merchantId, paymentId: payment.id }, (p) => {
              const decision = Payment.applyAuthorization(p, { _tag: "Approved", networkRiskSignal: 0 }, w.context())
              // Its event claims a sequence the record already used.
              return decision.ok
                ? {
                  ok: true,
                  change: {
                    ...decision.change,
                    events: decision.change.events.map((e) => ({ ...e, sequence: p.version }))
                  }
                }
                : decision
            })
          )
          expect(Exit.isFailure(exit) && Cause.hasDies(exit.cause)).toBe(true)
          expect(yield* store.getPayment(w.merchantId, payment.id)).toEqual(payment)
          expect(yield* store.listEvents(w.merchantId, payment.id)).toEqual(eventsOf(changes))
          expect(yield* store.listLedger(w.merchantId, payment.id)).toEqual([])
        })))
    })

    describe("fraud cases", () => {
      it("opens a case with the assessment, filters cases, and updates the case with the review", () =>
        run(Effect.gen(function*() {
          const store = yield* Store
          const w = testWorld()
          yield* givenMerchant(w)
          const other = yield* givenMerchant(w, w.mintId("merchant"))
          yield* givenPayment(w, { path: toCaptured() }) // passed: no case
          const held = yield* givenPayment(w, {
            input: { amountCents: 5_000 },
            path: [steps.authorize, steps.screen(0.6)]
          })
          const blocked = yield* givenPayment(w, {
            input: { amountCents: 5_000 },
            path: [steps.authorize, steps.screen(0.95)]
          })
          const heldCase = held.changes.at(-1)!.fraudCase!
          const blockedCase = blocked.changes.at(-1)!.fraudCase!
          expect(heldCase).toMatchObject({ status: "open", priority: "low", paymentId: held.payment.id })
          expect(blockedCase).toMatchObject({ status: "open", priority: "critical", paymentId: blocked.payment.id })
          expect(held.payment.fraudCaseId).toBe(heldCase.id)

          expect(yield* store.getFraudCase(w.merchantId, heldCase.id)).toEqual(heldCase)
          expect(yield* store.getFraudCase(other.merchant.id, heldCase.id)).toBeNull()
          expect(yield* store.getFraudCase(w.merchantId, "fc_unknown")).toBeNull()
          const ids = (filter: Parameters<typeof store.listFraudCases>[1]) =>
            Effect.map(
              store.listFraudCases(w.merchantId, filter, allPages),
              (page) => ({ ids: page.items.map((c) => c.id), total: page.totalCount })
            )
          expect(yield* ids({})).toEqual({ ids: [blockedCase.id, heldCase.id], total: 2 })
          expect(yield* ids({ status: "open", priority: "low" })).toEqual({ ids: [heldCase.id], total: 1 })
          expect(yield* ids({ priority: "critical" })).toEqual({ ids: [blockedCase.id], total: 1 })
          expect(yield* ids({ status: "false_positive" })).toEqual({ ids: [], total: 0 })
          expect((yield* store.listFraudCases(other.merchant.id, {}, allPages)).totalCount).toBe(0)

          const review = yield* applied(
            w,
            w.merchantId,
            held.payment.id,
            steps.review("false_positive", "known customer")
          )
          expect(review.events.map((e) => e.type)).toEqual(["payment.fraud_passed"])
          const reviewed = yield* store.getFraudCase(w.merchantId, heldCase.id)
          expect(reviewed).toEqual(review.fraudCase)
          expect(reviewed).toMatchObject({
            status: "false_positive",
            notes: "known customer",
            reviewedAt: review.payment.updatedAt
          })
          expect((yield* store.getPayment(w.merchantId, held.payment.id))?.fraudVerdict).toBe("passed")
          expect(yield* ids({ status: "open" })).toEqual({ ids: [blockedCase.id], total: 1 })
          expect(yield* ids({ status: "false_positive" })).toEqual({ ids: [heldCase.id], total: 1 })

          // A second review of the same case is refused and changes nothing.
          const again = yield* apply(
            w,
            { merchantId: w.merchantId, paymentId: held.payment.id },
            steps.review("confirmed_fraud", null)
          )
          expect(again._tag).toBe("Refused")
          expect(yield* store.getFraudCase(w.merchantId, heldCase.id)).toEqual(reviewed)
        })))

      it("keeps a score as the very double it was given: the payment's, its events' and its case's", () =>
        run(Effect.gen(function*() {
          const store = yield* Store
          const w = testWorld()
          yield* givenMerchant(w)
          // Scores as the model gives them (sigmoid of an output in millionths, not rounded), the
          // ends of the range and doubles with 17 significant digits; passed, held and blocked.
          const scores = [
            sigmoid(-1.234567),
            sigmoid(0.575),
            sigmoid(1.386294),
            sigmoid(2.197225),
            sigmoid(-30),
            sigmoid(30),
            0.1 + 0.2,
            0.5 - Number.EPSILON / 4,
            0.8 - Number.EPSILON / 2,
            1 - Number.EPSILON / 2,
            Number.MIN_VALUE * 2 ** 52
          ]
          for (const score of scores) {
            const { payment } = yield* givenPayment(w, { path: [steps.authorize, steps.screen(score)] })
            const stored = (yield* store.getPayment(w.merchantId, payment.id))!
            expect(stored.fraudScore).toBe(score)
            expect(stored.fraudVerdict).toBe(verdict(score, defaultThresholds))
            for (const event of yield* store.listEvents(w.merchantId, payment.id)) {
              if (event.data.fraud_score !== null) expect(event.data.fraud_score).toBe(score)
            }
            if (stored.fraudCaseId !== null) {
              expect((yield* store.getFraudCase(w.merchantId, stored.fraudCaseId))!.riskScore).toBe(score)
            }
          }
          const listed = (yield* store.listFraudCases(w.merchantId, {}, allPages)).items.map((c) => c.riskScore)
          expect(listed.sort()).toEqual(scores.filter((score) => score >= defaultThresholds.review).sort())
        })))
    })

    describe("balances", () => {
      it("equal Ledger.balanceOf over every ledger entry of the merchant, per currency", () =>
        run(Effect.gen(function*() {
          const store = yield* Store
          const w = testWorld()
          yield* givenMerchant(w)
          const other = yield* givenMerchant(w, w.mintId("merchant"))
          const usd = { currency: "USD" as const }
          const paths = [
            // settled, then partly refunded out of available
            { input: usd, path: [...toCaptured(), steps.settle, steps.refund(2_000)] },
            // captured and partly refunded, still pending
            { input: usd, path: [...toCaptured(7_000), steps.refund(500)] },
            // refunded before the cut-off, then swept: the merchant owes the fee
            { input: usd, path: [...toCaptured(), steps.refund(), steps.settle] },
            { input: { currency: "EUR" as const, amountCents: 4_321 }, path: toCaptured() },
            { input: { currency: "JPY" as const, amountCents: 5_000 }, path: [...toCaptured(), steps.settle] },
            // an open authorization only: holds, no merchant money
            { input: { currency: "GBP" as const }, path: [steps.authorize] },
            { input: usd, path: [steps.authorize, steps.voidIt] }
          ]
          const entries: Array<Ledger.LedgerEntry> = []
          for (const options of paths) {
            const { payment } = yield* givenPayment(w, options)
            entries.push(...(yield* store.listLedger(w.merchantId, payment.id)))
          }
          yield* givenPayment(w, { merchantId: other.merchant.id, path: toCaptured() })

          // Currencies in which the merchant's own accounts have moved, in code order.
          const merchantAccounts: ReadonlyArray<Ledger.Account> = [
            "merchant_pending",
            "merchant_available",
            "merchant_reserved"
          ]
          const currencies = [
            ...new Set(entries.filter((e) => merchantAccounts.includes(e.account)).map((e) => e.currency))
          ].sort()
          const expected = currencies.map((currency: Currency): Ledger.Balance => {
            const of = entries.filter((e) => e.currency === currency)
            return {
              currency,
              pending: Ledger.balanceOf(of, "merchant_pending"),
              available: Ledger.balanceOf(of, "merchant_available"),
              reserved: Ledger.balanceOf(of, "merchant_reserved")
            }
          })
          expect(currencies).toEqual(["EUR", "JPY", "USD"])
          expect(yield* store.balances(w.merchantId)).toEqual(expected)
          // Spelled out for USD: pending 7,000 − 233 fee − 500; available 10,000 − 320 − 2,000, and −320.
          expect(expected.find((b) => b.currency === "USD")).toEqual({
            currency: "USD",
            pending: 6_267,
            available: 7_360,
            reserved: 0
          })
          expect(yield* store.balances("mer_without_entries")).toEqual([])
        })))
    })

    describe("work queues", () => {
      it("claimFlows: payments with a next step, least recently touched first, before the cut-off, up to the limit", () =>
        run(Effect.gen(function*() {
          const store = yield* Store
          const w = testWorld("1990-01-01T00:00:00.000Z")
          yield* givenMerchant(w)
          const pending = yield* givenPayment(w)
          const toScreen = yield* givenPayment(w, { path: [steps.authorize] })
          const toCapture = yield* givenPayment(w, { path: [steps.authorize, steps.screen(0.1)] })
          // Finished, or waiting for someone else: not in flight.
          yield* givenPayment(w, { input: { captureMethod: "manual" }, path: [steps.authorize, steps.screen(0.1)] })
          yield* givenPayment(w, { path: [steps.authorize, steps.screen(0.6)] })
          yield* givenPayment(w, { path: toCaptured() })
          yield* givenPayment(w, { path: [steps.decline] })
          yield* givenPayment(w, { path: [steps.authorize, steps.screen(0.95)] })
          // Leaves flight when captured.
          const done = yield* givenPayment(w, { path: [steps.authorize] })
          yield* applied(w, w.merchantId, done.payment.id, steps.screen(0.1))
          yield* applied(w, w.merchantId, done.payment.id, steps.capture())

          const cutoff = ms("1990-12-31T00:00:00.000Z")
          const expected = [pending, toScreen, toCapture].map((p) => p.payment.id)
          const inFlight = (staleBefore: number, limit: number) =>
            store.claimFlows({ owner: null, now: cutoff, staleBefore, takeOver: false, limit })
          expect(yield* inFlight(cutoff, 100)).toEqual(expected)
          expect(yield* inFlight(cutoff, 2)).toEqual(expected.slice(0, 2))
          expect(yield* inFlight(toScreen.payment.updatedAt, 100)).toEqual([pending.payment.id])
          expect(yield* inFlight(pending.payment.updatedAt, 100)).toEqual([])

          // Touched at the same millisecond: ties by id, byte order ("B" before "a").
          const sameTime = ms("1989-06-01T00:00:00.000Z")
          for (const suffix of ["a", "B"]) {
            const base = accepted(Payment.create(createInput(w.merchantId), { now: sameTime, mintId: w.mintId }))
            yield* store.insertPayment({ ...base, payment: { ...base.payment, id: `pay_1989_${suffix}` }, events: [] })
          }
          expect(yield* inFlight(ms("1989-12-31T00:00:00.000Z"), 100)).toEqual(["pay_1989_B", "pay_1989_a"])
        })))

      it("claimFlows: an owner's flows are resumed by another instance only once it stops beating, and then by one only", () =>
        run(Effect.gen(function*() {
          const store = yield* Store
          const w = testWorld("1991-01-01T00:00:00.000Z")
          yield* givenMerchant(w)
          const t0 = w.clock.advance()
          const [a, b, c] = ["ins_flows_a", "ins_flows_b", "ins_flows_c"]
          yield* store.heartbeat(a, at(t0, seconds(5)))
          for (const instance of [b, c]) yield* store.heartbeat(instance, at(t0, seconds(60)))
          const base = accepted(Payment.create(createInput(w.merchantId), { now: t0, mintId: w.mintId }))
          const ofA = { ...base, payment: { ...base.payment, id: "pay_flow_of_a" }, events: [] }
          expect(yield* store.insertPayment(ofA, a)).toEqual({ _tag: "Inserted" })
          // (Payments of other tests, in flight with no owner, may be claimed too: only this one is looked at.)
          const ours = (ids: ReadonlyArray<string>) => ids.filter((id) => id === ofA.payment.id)
          const claim = (owner: string, now: number, takeOver: boolean) =>
            Effect.map(
              store.claimFlows({ owner, now, staleBefore: ms("1900-01-01T00:00:00.000Z"), takeOver, limit: 100 }),
              ours
            )
          // A beats: nobody takes its flow over, however long it has been in flight.
          expect(yield* claim(b, at(t0, seconds(4)), true)).toEqual([])
          // Its own pass, stale-only, finds nothing young.
          expect(yield* claim(a, at(t0, seconds(4)), true)).toEqual([])
          // A stopped beating: a pass without takeOver leaves it; the leader's takes it, once.
          expect(yield* claim(b, at(t0, seconds(6)), false)).toEqual([])
          expect(yield* claim(b, at(t0, seconds(6)), true)).toEqual(["pay_flow_of_a"])
          expect(yield* claim(c, at(t0, seconds(6)), true)).toEqual([])
          // Now B's: stale for B itself only.
          expect(
            ours(
              yield* store.claimFlows({
                owner: b,
                now: at(t0, seconds(6)),
                staleBefore: at(t0, seconds(6)),
                takeOver: false,
                limit: 100
              })
            )
          )
            .toEqual(["pay_flow_of_a"])
          expect(
            ours(
              yield* store.claimFlows({
                owner: c,
                now: at(t0, seconds(6)),
                staleBefore: at(t0, seconds(6)),
                takeOver: false,
                limit: 100
              })
            )
          )
            .toEqual([])
          // A flow nobody owns (a process without an identity, or a row from before owners were
          // recorded) is the leader's at once; then it is owned.
          const orphan = { ...base, payment: { ...base.payment, id: "pay_flow_of_nobody" }, events: [] }
          expect(yield* store.insertPayment(orphan)).toEqual({ _tag: "Inserted" })
          const orphans = (ids: ReadonlyArray<string>) => ids.filter((id) => id === orphan.payment.id)
          const leaderPass = (owner: string) =>
            store.claimFlows({
              owner,
              now: at(t0, seconds(7)),
              staleBefore: ms("1900-01-01T00:00:00.000Z"),
              takeOver: true,
              limit: 100
            })
          expect(orphans(yield* leaderPass(c))).toEqual(["pay_flow_of_nobody"])
          expect(orphans(yield* leaderPass(b))).toEqual([])
        })))

      it("lead: one holder per role; taken over once the holder stops beating, and given up by resign", () =>
        run(Effect.gen(function*() {
          const store = yield* Store
          const t0 = ms("1992-01-01T00:00:00.000Z")
          const [a, b] = ["ins_lead_a", "ins_lead_b"]
          const role = "jobs_contract"
          yield* store.heartbeat(a, at(t0, seconds(5)))
          yield* store.heartbeat(b, at(t0, seconds(9)))
          expect(yield* store.lead(role, a, t0)).toBe(true)
          expect(yield* store.lead(role, b, t0)).toBe(false)
          expect(yield* store.lead(role, a, at(t0, seconds(4)))).toBe(true)
          expect(yield* store.lead(role, b, at(t0, seconds(4)))).toBe(false)
          // A stopped beating at +5 s.
          expect(yield* store.lead(role, b, at(t0, seconds(5)))).toBe(true)
          expect(yield* store.lead(role, a, at(t0, seconds(5)))).toBe(false)
          // B resigns: the next asker takes the role at once.
          yield* store.resign(role, a)
          expect(yield* store.lead(role, b, at(t0, seconds(6)))).toBe(true)
          yield* store.resign(role, b)
          yield* store.heartbeat(a, at(t0, seconds(20)))
          expect(yield* store.lead(role, a, at(t0, seconds(7)))).toBe(true)
        })))

      it("paymentsCreatedBetween: every merchant's payments of a period, oldest first, page by page", () =>
        run(Effect.gen(function*() {
          const store = yield* Store
          const w = testWorld("1975-03-01T00:00:00.000Z")
          yield* givenMerchant(w)
          const from = w.clock.advance()
          // None captured: settleablePayments' test reads every captured payment before its cut-off.
          const first = yield* givenPayment(w, {
            input: { captureMethod: "manual" },
            path: [steps.authorize, steps.screen(0.1)]
          })
          const second = yield* givenPayment(w, { path: [steps.authorize, steps.voidIt] })
          const other = testWorld("1975-03-01T00:00:30.000Z")
          yield* givenMerchant(other)
          const third = yield* givenPayment(other, { path: [] })
          const to = at(from, hours(1))
          const ids = (payments: ReadonlyArray<{ readonly id: string }>) => payments.map((p) => p.id)
          const all = yield* store.paymentsCreatedBetween({ from, to, after: null, limit: 100 })
          const expected = [first, second, third].map((p) => p.payment).sort((
            a,
            b
          ) => (a.createdAt < b.createdAt ? -1 : a.createdAt > b.createdAt ? 1 : a.id < b.id ? -1 : 1))
          expect(ids(all)).toEqual(ids(expected))
          expect(all.find((p) => p.id === second.payment.id)?.status).toBe("voided")
          const page = yield* store.paymentsCreatedBetween({ from, to, after: null, limit: 2 })
          const rest = yield* store.paymentsCreatedBetween({
            from,
            to,
            after: { createdAt: page[1]!.createdAt, id: page[1]!.id },
            limit: 2
          })
          expect([...ids(page), ...ids(rest)]).toEqual(ids(expected))
          expect(yield* store.paymentsCreatedBetween({ from: to, to: at(to, hours(1)), after: null, limit: 100 }))
            .toEqual([])
        })))

      it("settleablePayments: captured (or refunded) before the cut-off and not yet settled", () =>
        run(Effect.gen(function*() {
          const store = yield* Store
          const w = testWorld("1980-01-01T00:00:00.000Z")
          yield* givenMerchant(w)
          const captured = yield* givenPayment(w, { path: toCaptured() })
          const refunded = yield* givenPayment(w, { path: [...toCaptured(), steps.refund()] })
          const partlyRefunded = yield* givenPayment(w, { path: [...toCaptured(), steps.refund(10)] })
          // Not settleable: settled already (and refunded afterwards), never captured.
          yield* givenPayment(w, { path: [...toCaptured(), steps.settle] })
          yield* givenPayment(w, { path: [...toCaptured(), steps.settle, steps.refund()] })
          yield* givenPayment(w, { input: { captureMethod: "manual" }, path: [steps.authorize, steps.screen(0.1)] })
          yield* givenPayment(w, { path: [steps.authorize, steps.voidIt] })
          const cutoff = w.clock.advance()
          const late = yield* givenPayment(w, { path: toCaptured() })

          const expected = [captured, refunded, partlyRefunded].map((p) => p.payment.id).sort()
          expect([...(yield* store.settleablePayments(cutoff, 100))].sort()).toEqual(expected)
          const limited = yield* store.settleablePayments(cutoff, 2)
          expect(limited).toHaveLength(2)
          for (const id of limited) expect(expected).toContain(id)
          expect([...(yield* store.settleablePayments(at(cutoff, hours(1)), 100))].sort()).toEqual(
            [...expected, late.payment.id].sort()
          )

          // Settling removes a payment from the queue.
          yield* applied(w, w.merchantId, captured.payment.id, steps.settle)
          expect([...(yield* store.settleablePayments(cutoff, 100))].sort()).toEqual(
            [refunded, partlyRefunded].map((p) => p.payment.id).sort()
          )

          // Nothing is due before the first capture; once the due ones are settled, a sweep of the
          // same cut-off again (as every service start does) finds nothing, and the next still finds the late one.
          expect(yield* store.settleablePayments(ms("1979-12-31T00:00:00.000Z"), 100)).toEqual([])
          for (const p of [refunded, partlyRefunded]) yield* applied(w, w.merchantId, p.payment.id, steps.settle)
          expect(yield* store.settleablePayments(cutoff, 100)).toEqual([])
          expect(yield* store.settleablePayments(at(cutoff, hours(1)), 100)).toEqual([late.payment.id])
        })))

      it("fraudHistory: the card's attempts, declines and first sighting, the merchant's usual amount, whatever order they arrived in", () =>
        run(Effect.gen(function*() {
          const store = yield* Store
          const w = testWorld()
          yield* givenMerchant(w)
          const other = yield* givenMerchant(w, w.mintId("merchant"))
          const t0 = w.clock.now()
          const t = (minutes: number) => at(t0, seconds(minutes * 60))
          const insert = (
            merchantId: string,
            cardToken: string,
            createdAt: number,
            input: Partial<Payment.CreateInput> = {}
          ) =>
            Effect.map(
              store.insertPayment(
                accepted(
                  Payment.create(createInput(merchantId, { cardToken, ...input }), { now: createdAt, mintId: w.mintId })
                )
              ),
              () => undefined
            )
          // Concurrent creates may commit out of their creation order. Times in minutes after t0.
          for (const n of [30, 10, 20, 100]) yield* insert(w.merchantId, "tok_velocity", t(n), { amountCents: n * 100 })
          const declined = accepted(
            Payment.create(createInput(w.merchantId, { cardToken: "tok_velocity", amountCents: 5_000 }), {
              now: t(50),
              mintId: w.mintId
            })
          )
          yield* store.insertPayment(declined)
          yield* applied(w, w.merchantId, declined.payment.id, steps.decline)
          yield* insert(w.merchantId, "tok_other", t(40), { amountCents: 4_000, currency: "EUR" })
          yield* insert(other.merchant.id, "tok_velocity", t(40))
          const windows = (now: number, dayLimit = 50, amountWindow = 50) => ({
            merchantId: w.merchantId,
            cardToken: "tok_velocity",
            currency: "USD",
            until: now,
            excludePaymentId: "pay_none",
            hourSince: at(now, -3_600_000),
            daySince: at(now, -86_400_000),
            dayLimit,
            amountWindow
          })

          // At t0+60: 10, 20, 30, 50 (declined) within the hour; 100 is later and never counts.
          expect(yield* store.fraudHistory(windows(t(60)))).toEqual({
            cardAttemptsLastHour: 4,
            cardAttemptsLastDay: 4,
            cardDeclinesLastDay: 1,
            cardSeenBefore: true,
            merchantAmountCount: 4,
            merchantAmountSumCents: 1_000 + 2_000 + 3_000 + 5_000
          })
          // At t0+85: the hour holds 30 and 50; the day all four.
          expect(yield* store.fraudHistory(windows(t(85)))).toMatchObject({
            cardAttemptsLastHour: 2,
            cardAttemptsLastDay: 4,
            cardDeclinesLastDay: 1
          })
          // Bounded: the newest `dayLimit` card attempts, the newest `amountWindow` amounts.
          expect(yield* store.fraudHistory(windows(t(60), 2, 3))).toEqual({
            cardAttemptsLastHour: 2,
            cardAttemptsLastDay: 2,
            cardDeclinesLastDay: 1,
            cardSeenBefore: true,
            merchantAmountCount: 3,
            merchantAmountSumCents: 2_000 + 3_000 + 5_000
          })
          // The payment itself never counts; a day later the card is still known, with nothing recent.
          expect(
            yield* store.fraudHistory({
              ...windows(t(10)),
              excludePaymentId: (yield* store.listPayments(w.merchantId, { createdFrom: t(10), createdTo: t(10) }, {
                page: 1,
                perPage: 5
              })).items[0]!.id
            })
          )
            .toEqual({
              cardAttemptsLastHour: 0,
              cardAttemptsLastDay: 0,
              cardDeclinesLastDay: 0,
              cardSeenBefore: false,
              merchantAmountCount: 0,
              merchantAmountSumCents: 0
            })
          expect(yield* store.fraudHistory(windows(t(60 * 24 * 2)))).toMatchObject({
            cardAttemptsLastDay: 0,
            cardSeenBefore: true,
            merchantAmountCount: 5
          })
          expect(yield* store.fraudHistory({ ...windows(t(60)), cardToken: "tok_unused" })).toMatchObject({
            cardAttemptsLastDay: 0,
            cardSeenBefore: false
          })
          expect(yield* store.fraudHistory({ ...windows(t(60)), currency: "EUR" })).toMatchObject({
            merchantAmountCount: 1,
            merchantAmountSumCents: 4_000
          })
        })))
    })

    describe("fraud statistics", () => {
      it("fraudStats: cases by status and priority, blocked money per currency, score histogram and figures per model", () =>
        run(Effect.gen(function*() {
          const store = yield* Store
          const w = testWorld()
          yield* givenMerchant(w)
          yield* givenPayment(w, { path: toCaptured() }) // 0.1
          yield* givenPayment(w, { input: { amountCents: 700 }, path: [steps.authorize, steps.screen(0.3)] })
          yield* givenPayment(w, {
            input: { amountCents: 900 },
            path: [steps.authorize, steps.screen(0.6), steps.review("confirmed_fraud", null)]
          })
          yield* givenPayment(w, {
            input: { amountCents: 1_100 },
            path: [steps.authorize, steps.screen(0.7), steps.review("false_positive", null)]
          })
          yield* givenPayment(w, {
            input: { amountCents: 2_500, currency: "EUR" },
            path: [steps.authorize, steps.screen(0.95)]
          })
          yield* givenPayment(w, { input: { amountCents: 3_000 }, path: [steps.authorize, steps.screen(1)] })
          yield* givenPayment(w, { path: [steps.decline] })
          // Approved, not screened yet; and not decided yet.
          yield* givenPayment(w, { path: [steps.authorize] })
          yield* givenPayment(w, { path: [] })
          const stats = yield* store.fraudStats(w.merchantId)
          expect(stats.casesByStatus).toEqual({ open: 2, confirmed_fraud: 1, false_positive: 1 })
          expect(stats.approvedCount).toBe(7)
          expect(stats.screenedCount).toBe(6)
          expect(stats.blocked).toEqual([{ currency: "EUR", count: 1, amountCents: 2_500 }, {
            currency: "USD",
            count: 2,
            amountCents: 3_900
          }])
          // Scores 0.1, 0.3, 0.6, 0.7, 0.95 and 1.0 (the last bin includes 1).
          expect(stats.scoreHistogram).toEqual([0, 1, 0, 1, 0, 0, 1, 1, 0, 2])
          expect(stats.byModel).toEqual([{
            modelVersion: "test-model",
            screenedCount: 6,
            blockedCount: 3,
            casesByStatus: { open: 2, confirmed_fraud: 1, false_positive: 1 }
          }])
        })))
    })

    describe("analytics", () => {
      it("aggregates a merchant's payments per currency within a creation window", () =>
        run(Effect.gen(function*() {
          const store = yield* Store
          const w = testWorld()
          yield* givenMerchant(w)
          const other = yield* givenMerchant(w, w.mintId("merchant"))
          const first = yield* givenPayment(w, { path: [...toCaptured(), steps.refund(1_000)] })
          yield* givenPayment(w, { path: [steps.decline] })
          yield* givenPayment(w, { path: [steps.authorize, steps.screen(0.95)] })
          yield* givenPayment(w, { input: { amountCents: 500 } })
          const eur = yield* givenPayment(w, { input: { currency: "EUR", amountCents: 2_000 }, path: toCaptured() })
          yield* givenPayment(w, { merchantId: other.merchant.id, path: toCaptured() })

          expect(yield* store.analytics(w.merchantId, null, null)).toEqual([
            {
              currency: "EUR",
              transactionCount: 1,
              volumeCents: 2_000,
              capturedCents: 2_000,
              refundedCents: 0,
              feesCents: eur.payment.feeCents,
              decidedCount: 1,
              approvedCount: 1,
              blockedCount: 0,
              capturedCount: 1,
              disputedCount: 0
            },
            {
              currency: "USD",
              transactionCount: 4,
              volumeCents: 30_500,
              capturedCents: 10_000,
              refundedCents: 1_000,
              feesCents: first.payment.feeCents,
              decidedCount: 3,
              approvedCount: 2,
              blockedCount: 1,
              capturedCount: 1,
              disputedCount: 0
            }
          ])
          const window = yield* store.analytics(w.merchantId, eur.payment.createdAt, null)
          expect(window.map((r) => [r.currency, r.transactionCount])).toEqual([["EUR", 1]])
          const before = yield* store.analytics(w.merchantId, null, first.payment.createdAt)
          expect(before.map((r) => [r.currency, r.transactionCount])).toEqual([["USD", 1]])
        })))

      it("analyticsSeries: the same aggregates per currency and UTC hour, day or ISO week, by currency then period", () =>
        run(Effect.gen(function*() {
          const store = yield* Store
          const w = testWorld()
          yield* givenMerchant(w)
          const create = (now: number, input: Partial<Payment.CreateInput>) =>
            Effect.map(
              store.insertPayment(
                accepted(Payment.create(createInput(w.merchantId, input), { now, mintId: w.mintId }))
              ),
              () => undefined
            )
          // 2026-03-01 is a Sunday: its week starts on Monday 2026-02-23; 2026-03-02 starts the next.
          yield* create(ms("2026-03-01T22:30:00.000Z"), { amountCents: 1_000 })
          yield* create(ms("2026-03-01T22:59:59.999Z"), { amountCents: 2_000 })
          yield* create(ms("2026-03-01T23:00:00.000Z"), { amountCents: 4_000, currency: "EUR" })
          yield* create(ms("2026-03-02T01:10:00.000Z"), { amountCents: 8_000 })
          const series = (interval: AnalyticsInterval, from: number | null = null, to: number | null = null) =>
            Effect.map(
              store.analyticsSeries(w.merchantId, interval, from, to),
              (rows) => rows.map((r) => [r.currency, r.periodStart, r.transactionCount, r.volumeCents])
            )

          expect(yield* series("hour")).toEqual([
            ["EUR", ms("2026-03-01T23:00:00.000Z"), 1, 4_000],
            ["USD", ms("2026-03-01T22:00:00.000Z"), 2, 3_000],
            ["USD", ms("2026-03-02T01:00:00.000Z"), 1, 8_000]
          ])
          expect(yield* series("day")).toEqual([
            ["EUR", ms("2026-03-01T00:00:00.000Z"), 1, 4_000],
            ["USD", ms("2026-03-01T00:00:00.000Z"), 2, 3_000],
            ["USD", ms("2026-03-02T00:00:00.000Z"), 1, 8_000]
          ])
          expect(yield* series("week")).toEqual([
            ["EUR", ms("2026-02-23T00:00:00.000Z"), 1, 4_000],
            ["USD", ms("2026-02-23T00:00:00.000Z"), 2, 3_000],
            ["USD", ms("2026-03-02T00:00:00.000Z"), 1, 8_000]
          ])
          expect(yield* series("day", ms("2026-03-01T22:45:00.000Z"), ms("2026-03-01T23:59:59.999Z"))).toEqual([
            ["EUR", ms("2026-03-01T00:00:00.000Z"), 1, 4_000],
            ["USD", ms("2026-03-01T00:00:00.000Z"), 1, 2_000]
          ])
          // Windows inside one hour, open on one side, or ending on an hour's last millisecond.
          expect(yield* series("hour", ms("2026-03-01T22:40:00.000Z"), ms("2026-03-01T22:59:59.999Z"))).toEqual([[
            "USD",
            ms("2026-03-01T22:00:00.000Z"),
            1,
            2_000
          ]])
          expect(yield* series("day", null, ms("2026-03-01T22:59:59.998Z"))).toEqual([[
            "USD",
            ms("2026-03-01T00:00:00.000Z"),
            1,
            1_000
          ]])
          expect(yield* series("week", ms("2026-03-01T23:00:00.000Z"), null)).toEqual([
            ["EUR", ms("2026-02-23T00:00:00.000Z"), 1, 4_000],
            ["USD", ms("2026-03-02T00:00:00.000Z"), 1, 8_000]
          ])
          const totals = (from: number | null, to: number | null) =>
            Effect.map(
              store.analytics(w.merchantId, from, to),
              (rows) => rows.map((r) => [r.currency, r.transactionCount, r.volumeCents])
            )
          expect(yield* totals(ms("2026-03-01T22:30:00.001Z"), ms("2026-03-02T01:10:00.000Z"))).toEqual([[
            "EUR",
            1,
            4_000
          ], [
            "USD",
            2,
            10_000
          ]])
          expect(yield* totals(ms("2026-03-01T22:30:00.000Z"), ms("2026-03-02T01:09:59.999Z"))).toEqual([[
            "EUR",
            1,
            4_000
          ], [
            "USD",
            2,
            3_000
          ]])
          expect(yield* totals(ms("2026-03-02T02:00:00.000Z"), null)).toEqual([])
          // Every figure of the totals, per period: a pending payment is neither decided nor approved.
          expect((yield* store.analyticsSeries(w.merchantId, "week", null, null))[0]).toEqual({
            currency: "EUR",
            periodStart: ms("2026-02-23T00:00:00.000Z"),
            transactionCount: 1,
            volumeCents: 4_000,
            capturedCents: 0,
            refundedCents: 0,
            feesCents: 0,
            decidedCount: 0,
            approvedCount: 0,
            blockedCount: 0,
            capturedCount: 0,
            disputedCount: 0
          })
        })))
    })

    describe("operations awaiting a remote processor", () => {
      it("processor_pending is stored by commitChange and updatePayment, read back whole, and keeps the payment in flight until it clears", () =>
        run(Effect.gen(function*() {
          const store = yield* Store
          const w = testWorld()
          yield* givenMerchant(w)
          const given = yield* givenPayment(w, {
            input: { captureMethod: "manual" },
            path: [steps.authorize, steps.screen(0.1)]
          })
          const captured = accepted(Payment.capture(given.payment, 6_000, w.context()))
          const owed = Payment.owingFor(given.payment, captured, w.context())
          expect(owed.payment.processorPending).toMatchObject({
            operation: "capture",
            outcome: "owed",
            amountCents: 6_000
          })
          expect(owed.events).toEqual([])
          expect(owed.ledger).toEqual([])
          expect(yield* store.commitChange({ before: given.payment, change: owed, response: null })).toBe(true)
          expect(yield* store.getPayment(null, given.payment.id)).toEqual(owed.payment)
          const asked = owed.payment.processorPending!
          const unknown = yield* applied(
            w,
            w.merchantId,
            given.payment.id,
            (p, _, ctx) => Payment.processorOutcomeUnknown(p, asked, ctx)
          )
          expect(unknown.payment.processorPending).toEqual({ ...asked, outcome: "unknown" })
          expect((yield* store.readForCommand!({ merchantId: null, paymentId: given.payment.id }))?.payment).toEqual(
            unknown.payment
          )
          const far = ms("2999-01-01T00:00:00.000Z")
          expect(yield* store.claimFlows({ owner: null, now: far, staleBefore: far, takeOver: false, limit: 100 }))
            .toContain(given.payment.id)
          const answered = yield* applied(
            w,
            w.merchantId,
            given.payment.id,
            (p, _, ctx) => Payment.processorAnswered(p, asked, ctx)
          )
          expect(answered.payment).toMatchObject({
            status: "captured",
            capturedAmountCents: 6_000,
            processorPending: null
          })
          expect(yield* store.getPayment(null, given.payment.id)).toEqual(answered.payment)
          expect((yield* store.listEvents(w.merchantId, given.payment.id)).map((e) => e.type).slice(-2)).toEqual([
            "payment.processor_outcome_unknown",
            "payment.captured"
          ])
          expect(yield* store.claimFlows({ owner: null, now: far, staleBefore: far, takeOver: false, limit: 100 })).not
            .toContain(given.payment.id)
        })))
    })

    describe("disputes", () => {
      const open = (
        id: string,
        amountCents?: number
      ) => ((p: Payment.Payment, _: unknown, ctx: Payment.Context) =>
        Dispute.apply(p, {
          acquirerDisputeId: id,
          paymentId: p.id,
          action: { _tag: "Open", reason: "fraudulent", amountCents }
        }, ctx))
      const resolve = (
        id: string,
        outcome: Dispute.DisputeOutcome
      ) => ((p: Payment.Payment, _: unknown, ctx: Payment.Context) =>
        Dispute.apply(p, { acquirerDisputeId: id, paymentId: p.id, action: { _tag: "Resolve", outcome } }, ctx))

      it("a dispute is stored with the payment, by updatePayment and by commitChange, and read back whole", () =>
        run(Effect.gen(function*() {
          const store = yield* Store
          const w = testWorld()
          yield* givenMerchant(w)
          const given = yield* givenPayment(w, { path: toCaptured() })
          const opened = yield* applied(w, w.merchantId, given.payment.id, open("dp_contract", 4_000))
          expect(opened.payment.dispute).toMatchObject({
            acquirerDisputeId: "dp_contract",
            status: "open",
            amountCents: 4_000
          })
          expect(yield* store.getPayment(w.merchantId, given.payment.id)).toEqual(opened.payment)
          const read = yield* store.readForCommand!({ merchantId: null, paymentId: given.payment.id })
          expect(read?.payment).toEqual(opened.payment)

          const lost = accepted(Dispute.apply(opened.payment, {
            acquirerDisputeId: "dp_contract",
            paymentId: given.payment.id,
            action: { _tag: "Resolve", outcome: "lost" }
          }, w.context()))
          expect(yield* store.commitChange({ before: opened.payment, change: lost, response: null })).toBe(true)
          expect(yield* store.getPayment(null, given.payment.id)).toEqual(lost.payment)
          expect((yield* store.listEvents(w.merchantId, given.payment.id)).map((e) => e.type).slice(-2)).toEqual([
            "payment.dispute_opened",
            "payment.dispute_resolved"
          ])
          const [balance] = yield* store.balances(w.merchantId)
          expect(balance).toEqual({
            currency: "USD",
            pending: 10_000 - given.payment.feeCents - 0 - 4_000 - disputeFeeCents.USD,
            available: 0,
            reserved: 0
          })
          // Counted: analytics' disputed payments, fraud statistics' lost disputes.
          const [row] = yield* store.analytics(w.merchantId, null, null)
          expect(row).toMatchObject({ capturedCount: 1, disputedCount: 1 })
          expect((yield* store.fraudStats(w.merchantId)).lostDisputeCount).toBe(1)
        })))

      it("paymentsByCardTokenAndDispute: payments of the tokens without a dispute (statuses, captured before) or with one open (opened before)", () =>
        run(Effect.gen(function*() {
          const store = yield* Store
          const w = testWorld("1985-01-01T00:00:00.000Z")
          yield* givenMerchant(w)
          const toOpen = yield* givenPayment(w, { input: { cardToken: "tok_dispute_won" }, path: toCaptured() })
          const settledToOpen = yield* givenPayment(w, {
            input: { cardToken: "tok_dispute_lost" },
            path: [...toCaptured(), steps.settle]
          })
          const opened = yield* givenPayment(w, {
            input: { cardToken: "tok_dispute_lost" },
            path: [...toCaptured(), open("dp_s1")]
          })
          const resolved = yield* givenPayment(w, {
            input: { cardToken: "tok_dispute_won" },
            path: [...toCaptured(), open("dp_s2"), resolve("dp_s2", "won")]
          })
          // Not asked for: another token; never captured; fully refunded (a status not asked for).
          const visa = yield* givenPayment(w, { path: toCaptured() })
          yield* givenPayment(w, {
            input: { cardToken: "tok_dispute_won", captureMethod: "manual" },
            path: [steps.authorize, steps.screen(0.1)]
          })
          yield* givenPayment(w, { input: { cardToken: "tok_dispute_won" }, path: [...toCaptured(), steps.refund()] })
          const later = w.clock.advance()
          const ids = (payments: ReadonlyArray<Payment.Payment>) => payments.map((p) => p.id)
          const epoch = ms("1970-01-01T00:00:00.000Z")
          const query = (
            capturedBefore: number,
            openedBefore: number,
            changes: Partial<CardTokenDisputeQuery> = {}
          ): CardTokenDisputeQuery => ({
            cardTokens: ["tok_dispute_won", "tok_dispute_lost"],
            undisputedStatuses: ["captured", "settled"],
            capturedBefore,
            openedBefore,
            ...changes
          })

          const due = yield* store.paymentsByCardTokenAndDispute(query(later, later), 100)
          expect(ids(due)).toEqual([toOpen, settledToOpen, opened].map((p) => p.payment.id))
          expect(due[2]!.dispute?.status).toBe("open")
          expect(ids(yield* store.paymentsByCardTokenAndDispute(query(later, epoch), 100))).toEqual(
            [toOpen, settledToOpen].map((p) => p.payment.id)
          )
          expect(ids(yield* store.paymentsByCardTokenAndDispute(query(ms("1970-01-01T00:00:00.000Z"), later), 100)))
            .toEqual([opened.payment.id])
          expect(ids(yield* store.paymentsByCardTokenAndDispute(query(later, later), 1))).toEqual([toOpen.payment.id])
          // The caller's tokens and statuses, nothing of its own.
          expect(
            ids(
              yield* store.paymentsByCardTokenAndDispute(query(later, later, { cardTokens: ["tok_dispute_lost"] }), 100)
            )
          )
            .toEqual([settledToOpen, opened].map((p) => p.payment.id))
          expect(
            ids(
              yield* store.paymentsByCardTokenAndDispute(query(later, epoch, { undisputedStatuses: ["settled"] }), 100)
            )
          )
            .toEqual([settledToOpen.payment.id])
          // (The PostgreSQL suite shares its database: other tests' tok_visa payments are found too.)
          expect(
            ids(yield* store.paymentsByCardTokenAndDispute(query(later, epoch, { cardTokens: ["tok_visa"] }), 1_000))
          ).toContain(visa.payment.id)
          // A token that is not one (it would be written into SQL) is the caller's defect.
          const malformed = yield* Effect.exit(
            store.paymentsByCardTokenAndDispute(query(later, later, { cardTokens: ["tok_x') OR (1=1"] }), 100)
          )
          expect(Exit.isFailure(malformed) && Cause.hasDies(malformed.cause)).toBe(true)
          expect(resolved.payment.dispute?.status).toBe("won")
        })))
    })

    describe("idempotency keys", () => {
      it("claims a key; the same request while in flight is InProgress, another request is a Mismatch, a finished one replays", () =>
        run(Effect.gen(function*() {
          const store = yield* Store
          const w = testWorld()
          const t0 = w.clock.now()
          expect(yield* store.claimIdempotencyKey(claimAt(w, "k", "fp-1", t0))).toEqual({ _tag: "Claimed" })
          expect(yield* store.claimIdempotencyKey(claimAt(w, "k", "fp-1", at(t0, seconds(1))))).toEqual({
            _tag: "InProgress"
          })
          expect(yield* store.claimIdempotencyKey(claimAt(w, "k", "fp-2", at(t0, seconds(1))))).toEqual({
            _tag: "Mismatch"
          })
          // Keys are per merchant.
          expect(yield* store.claimIdempotencyKey({ ...claimAt(w, "k", "fp-2", t0), merchantId: "mer_elsewhere" }))
            .toEqual({ _tag: "Claimed" })

          const body = "{\"transaction\":{\"id\":\"pay_1\",\"amount_cents\":1000,\"note\":\"ünïcode ✓\"}}"
          yield* store.completeIdempotencyKey(w.merchantId, "k", 201, body)
          expect(yield* store.claimIdempotencyKey(claimAt(w, "k", "fp-1", at(t0, seconds(2))))).toEqual({
            _tag: "Replay",
            status: 201,
            body
          })
          expect(yield* store.claimIdempotencyKey(claimAt(w, "k", "fp-1", at(t0, hours(1))))).toEqual({
            _tag: "Replay",
            status: 201,
            body
          })
          expect(yield* store.claimIdempotencyKey(claimAt(w, "k", "fp-2", at(t0, seconds(2))))).toEqual({
            _tag: "Mismatch"
          })
        })))

      it("a lease that ran out is claimed again (resume); a key past its expiry is claimed fresh", () =>
        run(Effect.gen(function*() {
          const store = yield* Store
          const w = testWorld()
          const t0 = w.clock.now()
          yield* store.claimIdempotencyKey(claimAt(w, "crashed", "fp-1", t0))
          expect(yield* store.claimIdempotencyKey(claimAt(w, "crashed", "fp-1", at(t0, seconds(30))))).toEqual({
            _tag: "Claimed"
          })
          // The resumed claim holds a new lease.
          expect(yield* store.claimIdempotencyKey(claimAt(w, "crashed", "fp-1", at(t0, seconds(31))))).toEqual({
            _tag: "InProgress"
          })
          expect(yield* store.claimIdempotencyKey(claimAt(w, "crashed", "fp-2", at(t0, seconds(90))))).toEqual({
            _tag: "Mismatch"
          })

          yield* store.claimIdempotencyKey(claimAt(w, "old", "fp-1", t0, seconds(30), hours(24)))
          yield* store.completeIdempotencyKey(w.merchantId, "old", 200, "{}")
          const expiry = at(t0, hours(24))
          expect(yield* store.claimIdempotencyKey(claimAt(w, "old", "fp-1", at(expiry, -1)))).toEqual({
            _tag: "Replay",
            status: 200,
            body: "{}"
          })
          // At expiry the key is free again, for any request, and starts over in progress.
          expect(yield* store.claimIdempotencyKey(claimAt(w, "old", "fp-2", expiry))).toEqual({ _tag: "Claimed" })
          expect(yield* store.claimIdempotencyKey(claimAt(w, "old", "fp-2", at(expiry, seconds(1))))).toEqual({
            _tag: "InProgress"
          })
          expect(yield* store.claimIdempotencyKey(claimAt(w, "old", "fp-1", at(expiry, seconds(1))))).toEqual({
            _tag: "Mismatch"
          })
        })))

      it("release forgets a claim that moved no money, keeps one that did, and never forgets a stored response", () =>
        run(Effect.gen(function*() {
          const store = yield* Store
          const w = testWorld()
          yield* givenMerchant(w)
          const t0 = w.clock.now()

          yield* store.claimIdempotencyKey(claimAt(w, "failed", "fp-1", t0))
          yield* store.releaseIdempotencyKey(w.merchantId, "failed")
          expect(yield* store.claimIdempotencyKey(claimAt(w, "failed", "fp-2", at(t0, 1)))).toEqual({ _tag: "Claimed" })

          // A refund that committed before its request failed: the retry resumes and finds it applied.
          const { payment } = yield* givenPayment(w, { path: toCaptured() })
          yield* store.claimIdempotencyKey(claimAt(w, "moved", "fp-1", t0))
          const target = {
            merchantId: w.merchantId,
            paymentId: payment.id,
            commandKey: { merchantId: w.merchantId, key: "moved" }
          }
          expect((yield* apply(w, target, steps.refund(100)))._tag).toBe("Applied")
          yield* store.releaseIdempotencyKey(w.merchantId, "moved")
          expect(yield* store.claimIdempotencyKey(claimAt(w, "moved", "fp-2", at(t0, 1)))).toEqual({ _tag: "Mismatch" })
          expect(yield* store.claimIdempotencyKey(claimAt(w, "moved", "fp-1", at(t0, 1)))).toEqual({ _tag: "Claimed" })
          expect((yield* apply(w, target, steps.refund(100)))._tag).toBe("AlreadyApplied")
          expect((yield* store.getPayment(w.merchantId, payment.id))?.refundedAmountCents).toBe(100)

          // A late release (from a request whose lease had run out) leaves the finished response alone.
          yield* store.claimIdempotencyKey(claimAt(w, "done", "fp-1", t0))
          yield* store.completeIdempotencyKey(w.merchantId, "done", 201, "{\"ok\":true}")
          yield* store.releaseIdempotencyKey(w.merchantId, "done")
          expect(yield* store.claimIdempotencyKey(claimAt(w, "done", "fp-1", at(t0, 1)))).toEqual({
            _tag: "Replay",
            status: 201,
            body: "{\"ok\":true}"
          })
        })))

      it("a created payment holds its key: a retry after a failed request resumes it, an expired key creates anew", () =>
        run(Effect.gen(function*() {
          const store = yield* Store
          const w = testWorld("1976-01-01T00:00:00.000Z")
          yield* givenMerchant(w)
          const t0 = w.clock.now()
          const keyed = (key: string) =>
            accepted(Payment.create(createInput(w.merchantId, { idempotencyKey: key }), w.context()))

          // The create committed, then its request failed (503): the claim is kept for the retry.
          yield* store.claimIdempotencyKey(claimAt(w, "order-1", "fp-1", t0, seconds(30), hours(1)))
          const first = keyed("order-1")
          expect(yield* store.insertPayment(first)).toEqual({ _tag: "Inserted" })
          yield* store.releaseIdempotencyKey(w.merchantId, "order-1")
          expect(yield* store.claimIdempotencyKey(claimAt(w, "order-1", "fp-1", at(t0, 1), seconds(30), hours(1))))
            .toEqual({ _tag: "Claimed" })
          expect(yield* store.insertPayment(keyed("order-1"))).toEqual({ _tag: "Exists", payment: first.payment })

          // Past IDEMPOTENCY_TTL the key may be reused, and then it creates a new payment.
          yield* store.completeIdempotencyKey(w.merchantId, "order-1", 201, "{}")
          const later = at(t0, hours(2))
          expect(yield* store.claimIdempotencyKey(claimAt(w, "order-1", "fp-2", later, seconds(30), hours(1)))).toEqual(
            { _tag: "Claimed" }
          )
          w.clock.advance(hours(2))
          const second = keyed("order-1")
          expect(yield* store.insertPayment(second)).toEqual({ _tag: "Inserted" })
          // Both keep the key they were created with.
          expect((yield* store.getPayment(w.merchantId, first.payment.id))?.idempotencyKey).toBe("order-1")
          expect((yield* store.getPayment(w.merchantId, second.payment.id))?.idempotencyKey).toBe("order-1")

          // Purging an expired key releases its payment too.
          yield* store.completeIdempotencyKey(w.merchantId, "order-1", 201, "{}")
          expect(yield* store.purgeIdempotencyKeys(at(later, hours(1)))).toBeGreaterThanOrEqual(1)
          w.clock.advance(hours(2))
          expect((yield* store.insertPayment(keyed("order-1")))._tag).toBe("Inserted")
        })))

      it("a claim whose process stopped beating is taken over at once; a live process's claim, or one without an owner, waits for its lease", () =>
        run(Effect.gen(function*() {
          const store = yield* Store
          const w = testWorld()
          const t0 = w.clock.now()
          const alive = w.mintId("request").replace("req_", "ins_")
          const other = w.mintId("request").replace("req_", "ins_")
          yield* store.heartbeat(alive, at(t0, seconds(5)))
          const owned = (key: string, now: number, owner: string | null) => ({ ...claimAt(w, key, "fp-1", now), owner })

          expect(yield* store.claimIdempotencyKey(owned("owned", t0, alive))).toEqual({ _tag: "Claimed" })
          // Its process still beats: the claim is in flight.
          expect(yield* store.claimIdempotencyKey(owned("owned", at(t0, seconds(4)), other))).toEqual({
            _tag: "InProgress"
          })
          // Its last beat ran out (killed): the retry takes the claim over, its lease notwithstanding.
          expect(yield* store.claimIdempotencyKey(owned("owned", at(t0, seconds(5)), other))).toEqual({
            _tag: "Claimed"
          })
          // Now the new owner holds it; it never beat here, so its lease decides.
          expect(yield* store.claimIdempotencyKey(owned("owned", at(t0, seconds(6)), alive))).toEqual({
            _tag: "InProgress"
          })
          // A process that stopped gracefully says so: its claims are free at once.
          yield* store.heartbeat(alive, at(t0, seconds(7)))
          expect(yield* store.claimIdempotencyKey(owned("second", at(t0, seconds(6)), alive))).toEqual({
            _tag: "Claimed"
          })
          yield* store.heartbeat(alive, at(t0, seconds(7)))
          expect(yield* store.claimIdempotencyKey(owned("second", at(t0, seconds(7)), other))).toEqual({
            _tag: "Claimed"
          })

          // Without an owner (the simulator, tests), only the lease counts.
          expect(yield* store.claimIdempotencyKey(owned("anonymous", t0, null))).toEqual({ _tag: "Claimed" })
          expect(yield* store.claimIdempotencyKey(owned("anonymous", at(t0, seconds(29)), other))).toEqual({
            _tag: "InProgress"
          })
          expect(yield* store.claimIdempotencyKey(owned("anonymous", at(t0, seconds(30)), other))).toEqual({
            _tag: "Claimed"
          })
        })))

      it("openPayment: claims a new key, inserts the payment and counts the card's earlier attempts, in one commit", () =>
        run(Effect.gen(function*() {
          const store = yield* Store
          const w = testWorld()
          yield* givenMerchant(w)
          const t0 = w.clock.now()
          const open = (key: string | null, fingerprint = "fp-1") => {
            const change = accepted(
              Payment.create(createInput(w.merchantId, { idempotencyKey: key, cardToken: "tok_velocity" }), w.context())
            )
            const now = change.payment.createdAt
            return {
              change,
              outcome: store.openPayment({
                change,
                claim: key === null ? null : claimAt(w, key, fingerprint, now),
                history: { hourSince: at(t0, -1), daySince: at(t0, -1), dayLimit: 2, amountWindow: 50 }
              })
            }
          }

          const first = open(null)
          const counts = (
            outcome: OpenOutcome
          ) => (outcome._tag === "Opened"
            ? [outcome.history.cardAttemptsLastHour, outcome.history.cardSeenBefore]
            : null)
          expect(counts(yield* first.outcome)).toEqual([0, false])
          expect(yield* store.getPayment(w.merchantId, first.change.payment.id)).toEqual(first.change.payment)
          expect(yield* store.listEvents(w.merchantId, first.change.payment.id)).toEqual(first.change.events)
          expect(counts(yield* open(null).outcome)).toEqual([1, true])
          // Capped at the limit.
          expect(counts(yield* open(null).outcome)).toEqual([2, true])
          expect(counts(yield* open(null).outcome)).toEqual([2, true])

          // With a key: claimed for this request and already applied to the payment.
          const keyed = open("order-9")
          expect((yield* keyed.outcome)._tag).toBe("Opened")
          expect(yield* store.claimIdempotencyKey(claimAt(w, "order-9", "fp-1", at(keyed.change.payment.createdAt, 1))))
            .toEqual({ _tag: "InProgress" })
          expect(yield* store.claimIdempotencyKey(claimAt(w, "order-9", "fp-2", at(keyed.change.payment.createdAt, 1))))
            .toEqual({ _tag: "Mismatch" })
          // A known key is never claimed here, whatever its state: nothing is written.
          const again = open("order-9")
          expect(yield* again.outcome).toEqual({ _tag: "KeyTaken" })
          expect(yield* store.getPayment(w.merchantId, again.change.payment.id)).toBeNull()
          // After a failed request the claim is released; the retry resumes the same payment.
          yield* store.releaseIdempotencyKey(w.merchantId, "order-9")
          expect(yield* store.claimIdempotencyKey(claimAt(w, "order-9", "fp-1", at(keyed.change.payment.createdAt, 2))))
            .toEqual({ _tag: "Claimed" })
          expect(yield* store.insertPayment(open("order-9").change)).toEqual({
            _tag: "Exists",
            payment: keyed.change.payment
          })
        })))

      it("commitChange: commits a change with its response if the version has not moved, else nothing", () =>
        run(Effect.gen(function*() {
          const store = yield* Store
          const w = testWorld()
          yield* givenMerchant(w)
          const change = accepted(Payment.create(createInput(w.merchantId, { idempotencyKey: "order-1" }), w.context()))
          const payment = change.payment
          const claim = claimAt(w, "order-1", "fp-1", payment.createdAt)
          expect(
            (yield* store.openPayment({
              change,
              claim,
              history: { hourSince: payment.createdAt, daySince: payment.createdAt, dayLimit: 5, amountWindow: 5 }
            }))._tag
          ).toBe("Opened")

          const ctx = w.context()
          const flow = Payment.sequence(payment, toCaptured().map((step) => (p: Payment.Payment) => step(p, null, ctx)))
          if (!flow.ok) throw new Error("the flow was refused")
          // A racing command moved the payment first: nothing of this change is written.
          const racing = yield* apply(w, { merchantId: w.merchantId, paymentId: payment.id }, steps.authorize)
          expect(racing._tag).toBe("Applied")
          const body = "{\"transaction\":{\"id\":\"x\"}}"
          const response = { merchantId: w.merchantId, key: "order-1", status: 201, body }
          expect(yield* store.commitChange({ before: payment, change: flow.change, response })).toBe(false)
          expect(yield* store.claimIdempotencyKey(claimAt(w, "order-1", "fp-1", at(payment.createdAt, 1)))).toEqual({
            _tag: "InProgress"
          })

          // On the current record it commits whole: payment, events, ledger, and the stored response.
          const current = (yield* store.getPayment(w.merchantId, payment.id))!
          const later = w.context()
          const rest = Payment.sequence(
            current,
            toCaptured().slice(1).map((step) => (p: Payment.Payment) => step(p, null, later))
          )
          if (!rest.ok) throw new Error("the flow was refused")
          expect(yield* store.commitChange({ before: current, change: rest.change, response })).toBe(true)
          expect(yield* store.getPayment(w.merchantId, payment.id)).toEqual(rest.change.payment)
          const events = yield* store.listEvents(w.merchantId, payment.id)
          expect(events).toEqual([
            ...change.events,
            ...(racing._tag === "Applied" ? racing.change.events : []),
            ...rest.change.events
          ])
          expect(yield* store.listLedger(w.merchantId, payment.id)).toEqual(
            [...(racing._tag === "Applied" ? racing.change.ledger : []), ...rest.change.ledger]
          )
          expect(yield* store.claimIdempotencyKey(claimAt(w, "order-1", "fp-1", at(payment.createdAt, 2)))).toEqual({
            _tag: "Replay",
            status: 201,
            body
          })
          // The create path's first round trip reads the stored response of a taken key (a replay in
          // one round trip), with its fingerprint for the caller to compare; past its expiry, not.
          const again = accepted(Payment.create(createInput(w.merchantId, { idempotencyKey: "order-1" }), w.context()))
          const reopen = (now: number) =>
            store.openPayment({
              change: again,
              claim: claimAt(w, "order-1", "fp-2", now),
              history: { hourSince: now, daySince: now, dayLimit: 5, amountWindow: 5 }
            })
          expect(yield* reopen(at(payment.createdAt, 3))).toEqual({
            _tag: "KeyTaken",
            finished: { fingerprint: "fp-1", status: 201, body }
          })
          expect(yield* reopen(at(payment.createdAt, hours(25)))).toEqual({ _tag: "KeyTaken" })
          expect(yield* store.getPayment(w.merchantId, again.payment.id)).toBeNull()
          // The same change again: the version moved.
          expect(yield* store.commitChange({ before: current, change: rest.change, response: null })).toBe(false)
        })))

      it("readForCreate and insertCreated: a create read without writing, then written once with its outcome, its key claimed finished", () =>
        run(Effect.gen(function*() {
          const store = yield* Store
          const w = testWorld()
          yield* givenMerchant(w)
          const t0 = w.clock.now()
          const windows = { hourSince: at(t0, -1), daySince: at(t0, -1), dayLimit: 5, amountWindow: 50 }
          /** A create decided whole: its pending payment, and the flow (screened as `score`) on it. */
          const decided = (key: string | null, score: number) =>
            decidedCreate(
              w,
              { idempotencyKey: key, cardToken: "tok_once" },
              score < 0.5 ? toCaptured() : [steps.authorize, steps.screen(score)]
            )
          const read = (payment: Payment.Payment, key: string | null, fingerprint = "fp-1") =>
            store.readForCreate({
              payment,
              claim: key === null ? null : claimAt(w, key, fingerprint, payment.createdAt),
              history: windows
            })
          const cardSeen = (outcome: OpenOutcome) =>
            outcome._tag === "Opened" ? [outcome.history.cardAttemptsLastDay, outcome.history.cardSeenBefore] : null

          // Unkeyed: read (nothing written), then written whole as the flow left it.
          const first = decided(null, 0.1)
          expect(cardSeen(yield* read(first.created.payment, null))).toEqual([0, false])
          expect(yield* store.getPayment(w.merchantId, first.change.payment.id)).toBeNull()
          expect(yield* store.insertCreated({ change: first.change, claim: null, response: null })).toBe(true)
          expect(yield* store.getPayment(w.merchantId, first.change.payment.id)).toEqual(first.change.payment)
          expect(first.change.payment.status).toBe("captured")
          expect(yield* store.listEvents(w.merchantId, first.change.payment.id)).toEqual(first.change.events)
          expect(yield* store.listLedger(w.merchantId, first.change.payment.id)).toEqual(first.change.ledger)

          // Keyed, held for review: its case is written with it, and the key is claimed finished.
          const keyed = decided("order-once", 0.6)
          expect(cardSeen(yield* read(keyed.created.payment, "order-once"))).toEqual([1, true])
          const body = "{\"transaction\":{\"id\":\"once\"}}"
          const claim = claimAt(w, "order-once", "fp-1", keyed.created.payment.createdAt)
          const response = { merchantId: w.merchantId, key: "order-once", status: 201, body }
          expect(yield* store.insertCreated({ change: keyed.change, claim, response })).toBe(true)
          const fraudCase = keyed.change.fraudCase!
          expect(yield* store.getFraudCase(w.merchantId, fraudCase.id)).toEqual(fraudCase)
          expect(yield* store.getPayment(w.merchantId, keyed.change.payment.id)).toEqual(keyed.change.payment)
          expect(yield* store.claimIdempotencyKey(claimAt(w, "order-once", "fp-1", at(claim.now, 1)))).toEqual({
            _tag: "Replay",
            status: 201,
            body
          })
          expect(yield* store.claimIdempotencyKey(claimAt(w, "order-once", "fp-2", at(claim.now, 1)))).toEqual({
            _tag: "Mismatch"
          })
          // Its retry reads the stored response in the first round trip; past its expiry the key is only taken.
          const retry = decided("order-once", 0.1)
          expect(yield* read(retry.created.payment, "order-once", "fp-2")).toEqual({
            _tag: "KeyTaken",
            finished: { fingerprint: "fp-1", status: 201, body }
          })
          expect(
            yield* store.readForCreate({
              payment: retry.created.payment,
              claim: claimAt(w, "order-once", "fp-1", at(claim.now, hours(25))),
              history: windows
            })
          ).toEqual({ _tag: "KeyTaken" })
          // A racing request that read the key free writes nothing once the key is claimed.
          expect(
            yield* store.insertCreated({
              change: retry.change,
              claim: claimAt(w, "order-once", "fp-1", retry.created.payment.createdAt),
              response
            })
          ).toBe(false)
          expect(yield* store.getPayment(w.merchantId, retry.change.payment.id)).toBeNull()
          expect(yield* store.listEvents(w.merchantId, retry.change.payment.id)).toEqual([])
          // A key in progress (a command's claim, or a create's on the general path) is taken too.
          yield* store.claimIdempotencyKey(claimAt(w, "order-busy", "fp-1", t0))
          const busy = decided("order-busy", 0.1)
          expect(yield* read(busy.created.payment, "order-busy")).toEqual({ _tag: "KeyTaken" })
          expect(
            yield* store.insertCreated({
              change: busy.change,
              claim: claimAt(w, "order-busy", "fp-1", busy.created.payment.createdAt),
              response: { ...response, key: "order-busy" }
            })
          ).toBe(false)
          expect(yield* store.getPayment(w.merchantId, busy.change.payment.id)).toBeNull()
        })))

      it("purge deletes the keys expired by a time and says how many", () =>
        run(Effect.gen(function*() {
          const store = yield* Store
          const w = testWorld("1975-01-01T00:00:00.000Z")
          const t0 = w.clock.now()
          yield* store.claimIdempotencyKey(claimAt(w, "a", "fp", t0, seconds(30), hours(1)))
          yield* store.claimIdempotencyKey(claimAt(w, "b", "fp", t0, seconds(30), hours(2)))
          yield* store.completeIdempotencyKey(w.merchantId, "b", 200, "{}")
          yield* store.claimIdempotencyKey(claimAt(w, "c", "fp", t0, seconds(30), hours(3)))

          expect(yield* store.purgeIdempotencyKeys(at(t0, hours(2)))).toBe(2)
          expect(yield* store.purgeIdempotencyKeys(at(t0, hours(2)))).toBe(0)
          // "c" is still there, in flight.
          expect(yield* store.claimIdempotencyKey(claimAt(w, "c", "fp", at(t0, seconds(1))))).toEqual({
            _tag: "InProgress"
          })
          expect(yield* store.claimIdempotencyKey(claimAt(w, "b", "fp-other", at(t0, seconds(1))))).toEqual({
            _tag: "Claimed"
          })
        })))
    })
  })

// ---------------------------------------------------------------------------------------------

storeContract("memory", () => layerMemory)

describe("PostgreSQL adapter", () => {
  type PgServices = Store | PgClient.PgClient
  let runtime: ManagedRuntime.ManagedRuntime<PgServices, unknown> | undefined
  let services: Context.Context<PgServices> | undefined
  const layer = () => Layer.succeedContext(services!)

  beforeAll(async () => {
    runtime = ManagedRuntime.make(pgStoreLayer(await freshDatabase("store_contract")))
    services = await runtime.context()
  })
  afterAll(() => runtime?.dispose())

  storeContract("PostgreSQL", layer)

  describe("PostgreSQL only", () => {
    const run = runner(layer)

    it("write-once creates sharing a statement: a unit whose key is taken writes nothing, the others all their rows and outbox rows", () =>
      run(Effect.gen(function*() {
        const sql = yield* PgClient.PgClient
        const store = yield* Store
        const w = testWorld()
        yield* givenMerchant(w)
        /** A create captured whole; its flow's steps one second after its creation (one time for all of them). */
        const decided = (key: string, currency: Currency) =>
          decidedCreate(w, { idempotencyKey: key, cardToken: "tok_batch", currency }, toCaptured()).change
        const changes = [
          decided("batch-a", "USD"),
          decided("batch-b", "EUR"),
          decided("batch-taken", "GBP"),
          decided("batch-c", "GBP")
        ]
        yield* store.claimIdempotencyKey(claimAt(w, "batch-taken", "fp-1", w.clock.now()))
        // The first goes out alone; the three that wait for it share the next statement.
        const outcomes = yield* Effect.all(
          changes.map((change) => {
            const key = change.payment.idempotencyKey!
            return store.insertCreated({
              change,
              claim: claimAt(w, key, "fp-1", change.payment.createdAt),
              response: { merchantId: w.merchantId, key, status: 201, body: `{"key":"${key}"}` }
            })
          }),
          { concurrency: "unbounded" }
        )
        expect(outcomes).toEqual([true, true, false, true])
        // b and c were written by one statement (one transaction), the taken key's unit between them.
        const writers = yield* sql<{ id: string; writer: string }>`
          SELECT id, xmin::text AS writer FROM payments WHERE id IN ${sql.in(changes.map((c) => c.payment.id))}`
        const writerOf = (i: number) => writers.find((r) => r.id === changes[i]!.payment.id)?.writer
        expect(writerOf(1)).toBe(writerOf(3))
        expect(writerOf(0)).not.toBe(writerOf(1))
        for (const [i, change] of changes.entries()) {
          const written = i !== 2
          const id = change.payment.id
          expect(yield* store.getPayment(w.merchantId, id)).toEqual(written ? change.payment : null)
          expect(yield* store.listEvents(w.merchantId, id)).toEqual(written ? change.events : [])
          expect(yield* store.listLedger(w.merchantId, id)).toEqual(written ? change.ledger : [])
          const outbox = yield* sql<{ sequence: number; merchant_id: string; created_at: Date }>`
            SELECT sequence, merchant_id, created_at FROM webhook_outbox WHERE payment_id = ${id} ORDER BY sequence`
          expect(outbox.map((r) => [r.sequence, r.merchant_id, r.created_at.getTime()])).toEqual(
            written ? change.events.map((e) => [e.sequence, w.merchantId, e.createdAt]) : []
          )
        }
      })))

    it("payment_events and ledger_entries are append-only: UPDATE, DELETE and TRUNCATE fail", () =>
      run(Effect.gen(function*() {
        const sql = yield* PgClient.PgClient
        const w = testWorld()
        yield* givenMerchant(w)
        const { payment } = yield* givenPayment(w, { path: toCaptured() })
        const statements = [
          sql`UPDATE payment_events SET type = 'payment.voided' WHERE payment_id = ${payment.id}`,
          sql`DELETE FROM payment_events WHERE payment_id = ${payment.id}`,
          sql`TRUNCATE payment_events CASCADE`,
          sql`UPDATE ledger_entries SET amount_cents = amount_cents + 1 WHERE payment_id = ${payment.id}`,
          sql`DELETE FROM ledger_entries WHERE payment_id = ${payment.id}`,
          sql`TRUNCATE ledger_entries`
        ]
        for (const statement of statements) {
          const error = yield* Effect.flip(statement)
          expect(error._tag).toBe("SqlError")
          // Effect 4's SqlError: its reason holds PostgreSQL's error (message, SQLSTATE code) as its cause.
          expect(String((error.reason.cause as Error).message)).toMatch(/append-only/)
        }
        const store = yield* Store
        expect(yield* store.listEvents(w.merchantId, payment.id)).toHaveLength(4)
        expect(yield* store.listLedger(w.merchantId, payment.id)).toHaveLength(8)
      })))

    it("a row naming a payment, merchant or event that does not exist is refused by its statement; payments and merchants are never removed", () =>
      run(Effect.gen(function*() {
        const sql = yield* PgClient.PgClient
        const w = testWorld()
        yield* givenMerchant(w)
        const { payment } = yield* givenPayment(w, { path: toCaptured() })
        const sqlstate = (error: { readonly reason: { readonly cause: unknown } }) =>
          (error.reason.cause as { readonly code?: string }).code
        const orphans = [
          sql`INSERT INTO payment_events (id, payment_id, type, sequence, data, created_at)
            VALUES ('evt_orphan', 'pay_missing', 'payment.created', 1, '{}', now())`,
          sql`INSERT INTO ledger_entries (id, group_id, payment_id, merchant_id, account, direction, amount_cents, currency, created_at)
            VALUES ('led_a', 'grp_orphan', 'pay_missing', ${w.merchantId}, 'customer_funds', 'debit', 5, 'USD', now()),
              ('led_b', 'grp_orphan', 'pay_missing', ${w.merchantId}, 'merchant_pending', 'credit', 5, 'USD', now())`,
          sql`INSERT INTO fraud_cases (id, payment_id, merchant_id, status, priority, risk_score, model_version, explanations, created_at, updated_at)
            VALUES ('fc_orphan', 'pay_missing', ${w.merchantId}, 'open', 'low', 0.5, 'm', '[]', now(), now())`,
          sql`INSERT INTO webhook_outbox (event_id, payment_id, sequence, merchant_id, created_at)
            VALUES ('evt_missing', ${payment.id}, 99, ${w.merchantId}, now())`,
          sql`INSERT INTO payments (id, merchant_id, status, amount_cents, currency, captured_amount_cents, refunded_amount_cents,
              fee_cents, card_brand, card_last_four, card_token, capture_method, metadata, in_flight, version, created_at, updated_at)
            VALUES ('pay_orphan', 'mer_missing', 'pending', 100, 'USD', 0, 0, 0, 'visa', '4242', 'tok_visa', 'automatic', '{}',
              true, 1, now(), now())`
        ]
        for (const statement of orphans) {
          expect(sqlstate(yield* Effect.flip(statement))).toBe("23503")
        }
        for (
          const statement of [
            sql`DELETE FROM payments WHERE id = ${payment.id}`,
            sql`TRUNCATE payments CASCADE`,
            sql`DELETE FROM merchants WHERE id = ${w.merchantId}`,
            sql`TRUNCATE merchants CASCADE`
          ]
        ) {
          const error = yield* Effect.flip(statement)
          expect(String((error.reason.cause as Error).message)).toMatch(/never removed/)
        }
        const store = yield* Store
        expect(yield* store.getPayment(w.merchantId, payment.id)).not.toBeNull()
        expect(yield* store.listEvents(w.merchantId, payment.id)).toHaveLength(4)
      })))

    it("an unbalanced ledger group is refused by the statement that inserts it", () =>
      run(Effect.gen(function*() {
        const sql = yield* PgClient.PgClient
        const store = yield* Store
        const w = testWorld()
        yield* givenMerchant(w)
        const { payment } = yield* givenPayment(w, { path: toCaptured() })
        const entry = (groupId: string, direction: Ledger.Direction, amountCents: number) => ({
          id: w.mintId("ledgerEntry"),
          group_id: groupId,
          payment_id: payment.id,
          merchant_id: w.merchantId,
          account: direction === "debit" ? "merchant_pending" : "merchant_available",
          direction,
          amount_cents: amountCents,
          currency: "USD",
          created_at: new Date(w.clock.advance()).toISOString()
        })
        const count = (groupId: string) =>
          Effect.map(
            sql`SELECT count(*)::int AS n FROM ledger_entries WHERE group_id = ${groupId}`,
            (rows) => rows[0]!.n
          )
        const refusal = (exit: Exit.Exit<unknown, unknown>) =>
          Exit.isFailure(exit)
            ? (Cause.squash(exit.cause) as { reason?: { cause?: { message?: string } } }).reason?.cause?.message
            : undefined

        // A group is checked by the statement that inserts it (once per statement, not per row).
        const balanced = w.mintId("ledgerGroup")
        yield* sql`INSERT INTO ledger_entries ${
          sql.insert([entry(balanced, "debit", 50), entry(balanced, "credit", 50)])
        }`
        expect(yield* count(balanced)).toBe(2)

        const unbalanced = w.mintId("ledgerGroup")
        const exit = yield* Effect.exit(
          sql`INSERT INTO ledger_entries ${
            sql.insert([entry(unbalanced, "debit", 50), entry(unbalanced, "credit", 49)])
          }`
        )
        expect(refusal(exit)).toMatch(/ledger group .* does not balance/)
        expect(yield* count(unbalanced)).toBe(0)

        // So a group cannot be written entry by entry either: every statement inserts whole groups.
        const split = w.mintId("ledgerGroup")
        const splitExit = yield* Effect.exit(sql.withTransaction(Effect.all([
          sql`INSERT INTO ledger_entries ${sql.insert(entry(split, "debit", 50))}`,
          sql`INSERT INTO ledger_entries ${sql.insert(entry(split, "credit", 50))}`
        ])))
        expect(refusal(splitExit)).toMatch(/ledger group .* does not balance/)
        expect(yield* count(split)).toBe(0)

        // The one-statement commit of the create path: nothing of the change is written.
        const fresh = yield* givenPayment(w, { path: [] })
        const ctx = w.context()
        const flow = Payment.sequence(
          fresh.payment,
          toCaptured().map((step) => (p: Payment.Payment) => step(p, null, ctx))
        )
        if (!flow.ok) throw new Error("the flow was refused")
        const change = { ...flow.change, ledger: flow.change.ledger.slice(0, 1) }
        const viaCommit = yield* Effect.exit(store.commitChange({ before: fresh.payment, change, response: null }))
        expect(Exit.isFailure(viaCommit) && Cause.hasDies(viaCommit.cause)).toBe(true)
        expect((yield* store.getPayment(w.merchantId, fresh.payment.id))!.version).toBe(fresh.payment.version)

        // Through the store: the whole decision is rolled back and the failure is a defect.
        const before = yield* store.getPayment(w.merchantId, payment.id)
        const viaStore = yield* Effect.exit(
          store.updatePayment({ merchantId: w.merchantId, paymentId: payment.id }, (p) => {
            const decision = Payment.refund(p, 100, w.context())
            return decision.ok
              ? { ok: true, change: { ...decision.change, ledger: decision.change.ledger.slice(0, 1) } }
              : decision
          })
        )
        expect(Exit.isFailure(viaStore) && Cause.hasDies(viaStore.cause)).toBe(true)
        expect(yield* store.getPayment(w.merchantId, payment.id)).toEqual(before)
        expect((yield* store.listEvents(w.merchantId, payment.id)).map((e) => e.type)).not.toContain(
          "payment.partially_refunded"
        )
      })))

    it("group commit: concurrent units share statements, and one bad unit fails alone", () =>
      run(Effect.gen(function*() {
        const store = yield* Store
        const sql = yield* PgClient.PgClient
        const w = testWorld()
        yield* givenMerchant(w)
        const opening = (amountCents: number) => {
          const change = accepted(Payment.create(createInput(w.merchantId, { amountCents: 1_000 }), w.context()))
          // The database refuses an amount of 0 (a CHECK constraint); the domain never makes one.
          const bad = amountCents === 0
          const payment = bad ? { ...change.payment, amountCents: 0 } : change.payment
          return {
            change: { ...change, payment },
            claim: null,
            history: { hourSince: payment.createdAt, daySince: payment.createdAt, dayLimit: 5, amountWindow: 5 }
          }
        }
        const units = [1, 2, 3, 0, 5, 6, 7, 8].map((n) => opening(n === 0 ? 0 : 1_000))
        const before = Number(
          (yield* sql`SELECT count(*)::int AS n FROM payments WHERE merchant_id = ${w.merchantId}`)[0]!.n
        )
        const exits = yield* Effect.all(units.map((u) => Effect.exit(store.openPayment(u))), {
          concurrency: "unbounded"
        })
        expect(exits.map((e) => (Exit.isSuccess(e) ? e.value._tag : Cause.hasDies(e.cause) ? "died" : "failed")))
          .toEqual(
            ["Opened", "Opened", "Opened", "died", "Opened", "Opened", "Opened", "Opened"]
          )
        const after = Number(
          (yield* sql`SELECT count(*)::int AS n FROM payments WHERE merchant_id = ${w.merchantId}`)[0]!.n
        )
        expect(after - before).toBe(7)

        // The same for the commits: one change with an unbalanced ledger group, among good ones.
        const ctx = w.context()
        const commits = units.filter((_, i) => i !== 3).map((u, i) => {
          const flow = Payment.sequence(
            u.change.payment,
            toCaptured().map((step) => (p: Payment.Payment) => step(p, null, ctx))
          )
          if (!flow.ok) throw new Error("the flow was refused")
          const change = i === 2 ? { ...flow.change, ledger: flow.change.ledger.slice(1) } : flow.change
          return { before: u.change.payment, change, response: null }
        })
        const committed = yield* Effect.all(commits.map((c) => Effect.exit(store.commitChange(c))), {
          concurrency: "unbounded"
        })
        expect(committed.map((e) => (Exit.isSuccess(e) ? e.value : "died"))).toEqual([
          true,
          true,
          "died",
          true,
          true,
          true,
          true
        ])
        for (const [i, c] of commits.entries()) {
          expect((yield* store.getPayment(w.merchantId, c.change.payment.id))!.status).toBe(
            i === 2 ? "pending" : "captured"
          )
        }
      })))

    it("two concurrent refunds of 60 on a captured 100: exactly one applies (row lock), in every one of 8 races", () =>
      run(Effect.gen(function*() {
        const store = yield* Store
        const sql = yield* PgClient.PgClient
        const w = testWorld()
        yield* givenMerchant(w)
        for (let race = 0; race < 8; race++) {
          const { payment } = yield* givenPayment(w, { input: { amountCents: 100 }, path: toCaptured() })
          const refund60 = apply(w, { merchantId: w.merchantId, paymentId: payment.id }, steps.refund(60))
          // Open connections first, so neither transaction waits for one and both reach the row together.
          yield* Effect.all(Array.from({ length: 4 }, () => sql`SELECT 1`), { concurrency: 4 })

          const outcomes = yield* Effect.all([refund60, refund60], { concurrency: 2 })
          expect(outcomes.map((o) => o._tag).sort()).toEqual(["Applied", "Refused"])
          expect(outcomes.find((o) => o._tag === "Refused")).toMatchObject({
            decision: { refusal: { _tag: "InvalidAmount" } },
            payment: { refundedAmountCents: 60 }
          })
          expect(yield* store.getPayment(w.merchantId, payment.id)).toMatchObject({
            status: "captured",
            refundedAmountCents: 60,
            version: payment.version + 1
          })
          const ledger = yield* store.listLedger(w.merchantId, payment.id)
          expect(Ledger.balanceOf(ledger, "card_network")).toBe(40)
          expect(
            (yield* store.listEvents(w.merchantId, payment.id)).filter((e) => e.type === "payment.partially_refunded")
          ).toHaveLength(1)
        }
      })))
  })
})
