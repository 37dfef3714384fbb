import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import * as Payment from "../../src/domain/Payment.ts"
import { afterAttempt, type Delivery, eventPayload, newDelivery } from "../../src/domain/Webhook.ts"
import { layerMemory } from "../../src/store/MemoryStore.ts"
import { Store } from "../../src/store/Store.ts"
import {
  type Lease,
  leaseLost,
  recorded,
  type RecordOutcome,
  WebhookStore,
  type WebhookStoreShape
} from "../../src/store/WebhookStore.ts"
import { accepted, createInput } from "../domain/fixtures.ts"
import { freshDatabase, pgStoreLayer } from "../support/database.ts"
import { apiKeyFor, merchantFor, testWorld } from "./harness.ts"

const at = (minute: number) => Date.UTC(2026, 10, 22, 4, minute)
const merchant = {
  id: "mer_c",
  name: "C",
  webhookUrl: "http://example.com/h",
  webhookSecret: "whsec_c",
  createdAt: at(0),
  updatedAt: at(0)
}
const apiKey = {
  id: "key_c",
  merchantId: "mer_c",
  name: "k",
  keyHash: "hash_c",
  prefix: "sk_live_abcd",
  lastFour: "abcd",
  status: "active" as const,
  createdAt: at(0),
  lastUsedAt: null,
  revokedAt: null
}
const delivery = (n: number) => {
  const event: Pick<Payment.PaymentEvent, "id" | "type" | "data"> = {
    id: `evt_${n}`,
    type: "payment.captured",
    data: {
      id: "pay_x",
      merchant_id: "mer_c",
      status: "captured",
      amount_cents: 1,
      currency: "USD",
      captured_amount_cents: 1,
      refunded_amount_cents: 0,
      fraud_score: null,
      failure_code: null,
      dispute: null
    }
  }
  return newDelivery({
    id: `whd_${n}`,
    merchantId: "mer_c",
    url: "http://example.com/h",
    now: at(n),
    event,
    payload: eventPayload(event, new Date(at(n)).toISOString())
  })
}

/** The successor's id a record answered, or the outcome's tag when it claimed none. */
const successorOf = (
  outcome: RecordOutcome
) => (outcome._tag === "RecordedWithSuccessor" ? outcome.successor.id : outcome._tag)

/** A poll that drains nothing (no batch): its claim alone, of up to `limit` deliveries due at `now` under `lease`. */
const claim = (store: WebhookStoreShape, now: number, lease: Lease, limit: number) =>
  Effect.map(
    store.poll({ drainLimit: 1, drainBatches: 0, build: () => null, now, lease: () => lease, claimLimit: limit }),
    (polled) => polled.claimed
  )

const webhookStoreContract = (name: string, layer: () => Layer.Layer<Store | WebhookStore, unknown>) =>
  describe(`WebhookStore contract: ${name}`, () => {
    it.effect("claims are exclusive until the lease expires; only the holder records", () =>
      Effect.gen(function*() {
        yield* Effect.flatMap(Store, (s) => s.insertMerchant(merchant, apiKey))
        const store = yield* WebhookStore
        yield* store.insertDelivery(delivery(1))
        yield* store.insertDelivery(delivery(1)) // one delivery per event
        yield* store.insertDelivery({ ...delivery(1), id: "whd_other" }) // under any id
        yield* store.insertDelivery(delivery(2))
        expect((yield* store.listDeliveries("mer_c", {}, { page: 1, perPage: 10 })).items.map((d) => d.id)).toEqual([
          "whd_2",
          "whd_1"
        ])
        expect(yield* claim(store, at(0), { token: "a", until: at(10) }, 10)).toHaveLength(0)
        const claimedA = yield* claim(store, at(1), { token: "a", until: at(10) }, 10)
        expect(claimedA.map((d) => d.id)).toEqual(["whd_1"])
        expect(yield* claim(store, at(5), { token: "b", until: at(15) }, 10)).toHaveLength(1) // whd_2 only
        expect(yield* store.nextDueAt()).toBe(at(10))
        // A dies; after its lease, C takes whd_1 over and A can no longer renew or record.
        const claimedC = yield* claim(store, at(10), { token: "c", until: at(20) }, 10)
        expect(claimedC.map((d) => d.id)).toEqual(["whd_1"])
        expect(yield* store.renewLease("whd_1", "a", at(10), at(30))).toBeNull()
        const failed = afterAttempt(
          claimedC[0]!,
          at(11),
          { _tag: "Failed", error: "connection error", durationMs: 5 },
          [60_000],
          at(11)
        )
        expect(yield* store.recordAttempt(failed.delivery, failed.attempt, "a")).toEqual(leaseLost)
        // Renewed: the answer is the merchant's signing secrets.
        expect(yield* store.renewLease("whd_1", "c", at(11), at(21))).toEqual(["whsec_c"])
        expect(yield* store.recordAttempt(failed.delivery, failed.attempt, "c")).toEqual(recorded)
        const stored = (yield* store.getDelivery("mer_c", "whd_1"))!
        expect(stored).toEqual(failed.delivery)
        expect(stored.status).toBe("retrying")
        expect(stored.nextAttemptAt).toBe(at(12))
        expect(yield* store.getDelivery("mer_other", "whd_1")).toBeNull()
        expect((yield* store.listDeliveries("mer_c", { status: "retrying" }, { page: 1, perPage: 10 })).totalCount)
          .toBe(1)
        const stats = yield* store.stats("mer_c", at(0))
        expect(stats).toMatchObject({
          attemptsLastDay: 1,
          successfulAttemptsLastDay: 0,
          lastFailureAt: at(11),
          lastSuccessAt: null,
          consecutiveFailures: 1
        })
        expect(stats.counts).toEqual({ pending: 1, retrying: 1, succeeded: 0, failed: 0 })
        // Before any rotation only the current secret signs (the renewal at minute 11 above).
        yield* store.rotateSecret("mer_c", "whsec_new", at(30), at(20))
        // A renewal answers the secrets that sign at its `now`: both during the rotation's overlap.
        expect((yield* claim(store, at(25), { token: "d", until: at(27) }, 10)).map((d) => d.id).sort()).toEqual([
          "whd_1",
          "whd_2"
        ])
        expect(yield* store.renewLease("whd_2", "d", at(26), at(28))).toEqual(["whsec_new", "whsec_c"])
        expect(yield* store.renewLease("whd_2", "d", at(28), at(29))).toBeNull()
        // Up to the overlap's last instant both sign; from its end (exclusive), the new one alone.
        // A poll answers them too, for the merchants of what it claimed, at its `now`.
        const polledE = yield* store.poll({
          drainLimit: 1,
          drainBatches: 0,
          build: () => null,
          now: at(28),
          lease: () => ({ token: "e", until: at(40) }),
          claimLimit: 10
        })
        expect(polledE.claimed.map((d) => d.id).sort()).toEqual(["whd_1", "whd_2"])
        expect([...polledE.secrets]).toEqual([["mer_c", ["whsec_new", "whsec_c"]]])
        expect(yield* store.renewLease("whd_1", "e", at(29), at(40))).toEqual(["whsec_new", "whsec_c"])
        expect(yield* store.renewLease("whd_1", "e", at(30), at(40))).toEqual(["whsec_new"])
        // A poll that claims nothing answers no secrets.
        expect([
          ...(yield* store.poll({
            drainLimit: 1,
            drainBatches: 0,
            build: () => null,
            now: at(31),
            lease: () => ({ token: "f", until: at(50) }),
            claimLimit: 10
          })).secrets
        ]).toEqual([])
        const polledG = yield* store.poll({
          drainLimit: 1,
          drainBatches: 0,
          build: () => null,
          now: at(40),
          lease: () => ({ token: "g", until: at(50) }),
          claimLimit: 10
        })
        expect(polledG.claimed).toHaveLength(2)
        expect([...polledG.secrets]).toEqual([["mer_c", ["whsec_new"]]])
      }).pipe(Effect.provide(layer())))

    it.effect("an instance's lease is taken over once it stops beating, and reported as cut; a lease naming no instance is not", () =>
      Effect.gen(function*() {
        const main = yield* Store
        yield* main.insertMerchant(merchant, apiKey)
        const store = yield* WebhookStore
        const polled = (now: number, lease: Lease) =>
          store.poll({ drainLimit: 1, drainBatches: 0, build: () => null, now, lease: () => lease, claimLimit: 10 })
        yield* store.insertDelivery(delivery(1))
        yield* main.heartbeat("ins_a", at(5))
        yield* main.heartbeat("ins_b", at(50))
        const byA = yield* polled(at(1), { token: "a", until: at(30), owner: "ins_a" })
        expect(byA.claimed.map((d) => d.id)).toEqual(["whd_1"])
        expect([...byA.takenOver]).toEqual([])
        // A beats until minute 5: its lease holds, whatever B asks.
        expect((yield* polled(at(4), { token: "b", until: at(34), owner: "ins_b" })).claimed).toEqual([])
        // A stopped beating: B takes the delivery over long before A's lease would end, as cut.
        const byB = yield* polled(at(6), { token: "b", until: at(36), owner: "ins_b" })
        expect(byB.claimed.map((d) => d.id)).toEqual(["whd_1"])
        expect([...byB.takenOver]).toEqual(["whd_1"])
        expect(yield* store.renewLease("whd_1", "a", at(6), at(40))).toBeNull()
        // A stop that cuts B's attempt gives the lease back as cut: the next claim records it.
        yield* store.releaseLease("whd_1", "b", at(7))
        const afterCut = yield* polled(at(7), { token: "c", until: at(37), owner: "ins_b" })
        expect([...afterCut.takenOver]).toEqual(["whd_1"])
        // A plain give-back (nothing was sent): claimed as if never leased.
        yield* store.releaseLease("whd_1", "c")
        const afterRelease = yield* polled(at(8), { token: "d", until: at(9) })
        expect(afterRelease.claimed.map((d) => d.id)).toEqual(["whd_1"])
        expect([...afterRelease.takenOver]).toEqual([])
        // A lease that names no instance ends at its time, and is not reported as cut.
        expect((yield* polled(at(8), { token: "e", until: at(40) })).claimed).toEqual([])
        const afterEnd = yield* polled(at(9), { token: "e", until: at(40) })
        expect(afterEnd.claimed.map((d) => d.id)).toEqual(["whd_1"])
        expect([...afterEnd.takenOver]).toEqual([])
      }).pipe(Effect.provide(layer())))

    it.effect("claims a payment's delivery only when no earlier one of that payment to that URL is open", () =>
      Effect.gen(function*() {
        yield* Effect.flatMap(Store, (s) => s.insertMerchant(merchant, apiKey))
        const store = yield* WebhookStore
        const ordered = (n: number, paymentId: string, sequence: number, url = "http://example.com/h") => ({
          ...delivery(n),
          url,
          order: { paymentId, sequence }
        })
        // Payment A: sequences 1, 2, 3; payment B: 1; an unordered (test) event; A's sequence 2 to another URL.
        for (
          const d of [
            ordered(3, "pay_a", 3),
            ordered(2, "pay_a", 2),
            ordered(1, "pay_a", 1),
            ordered(4, "pay_b", 1),
            delivery(5),
            ordered(6, "pay_a", 2, "http://other.example/h")
          ]
        ) {
          yield* store.insertDelivery(d)
        }
        expect((yield* store.getDelivery("mer_c", "whd_2"))!.order).toEqual({ paymentId: "pay_a", sequence: 2 })
        const first = yield* claim(store, at(10), { token: "a", until: at(100) }, 10)
        expect(first.map((d) => d.id).sort()).toEqual(["whd_1", "whd_4", "whd_5", "whd_6"])
        // A's first fails and will be retried a minute later: A's second still waits.
        const failed = afterAttempt(
          first.find((d) => d.id === "whd_1")!,
          at(10),
          { _tag: "Failed", error: "connection error", durationMs: 5 },
          [60_000],
          at(10)
        )
        expect(yield* store.recordAttempt(failed.delivery, failed.attempt, "a")).toEqual(recorded)
        expect(yield* claim(store, at(10), { token: "b", until: at(100) }, 10)).toEqual([])
        const retried = yield* claim(store, at(11), { token: "c", until: at(100) }, 10)
        expect(retried.map((d) => d.id)).toEqual(["whd_1"])
        // It fails for good: the next one goes (and only the next one).
        const gaveUp = afterAttempt(retried[0]!, at(11), { _tag: "Failed", error: "connection error", durationMs: 5 }, [
          60_000
        ], at(11))
        expect(gaveUp.delivery.status).toBe("failed")
        expect(yield* store.recordAttempt(gaveUp.delivery, gaveUp.attempt, "c")).toEqual(recorded)
        const next = yield* claim(store, at(11), { token: "d", until: at(100) }, 10)
        expect(next.map((d) => d.id)).toEqual(["whd_2"])
        const delivered = afterAttempt(
          next[0]!,
          at(11),
          { _tag: "Answered", status: 200, snippet: "", durationMs: 5 },
          [60_000],
          at(11)
        )
        expect(yield* store.recordAttempt(delivered.delivery, delivered.attempt, "d")).toEqual(recorded)
        expect((yield* claim(store, at(11), { token: "e", until: at(100) }, 10)).map((d) => d.id)).toEqual(["whd_3"])
        // Open: whd_3..6, all leased, so none is due.
        expect(yield* store.backlog(at(40))).toEqual({ open: 4, due: 0, oldestDueAt: null })
        expect(yield* store.backlog(at(100))).toEqual({ open: 4, due: 4, oldestDueAt: at(3) })
      }).pipe(Effect.provide(layer())))

    it.effect("attempts recorded at the same time (one statement on PostgreSQL) each get their own outcome and their own successor", () =>
      Effect.gen(function*() {
        yield* Effect.flatMap(Store, (s) => s.insertMerchant(merchant, apiKey))
        const store = yield* WebhookStore
        const payments = Array.from({ length: 8 }, (_, p) => p)
        // Eight payments of two events each, and one unordered delivery.
        for (const p of payments) {
          yield* store.insertDelivery({ ...delivery(10 + 2 * p), order: { paymentId: `pay_${p}`, sequence: 1 } })
          yield* store.insertDelivery({ ...delivery(11 + 2 * p), order: { paymentId: `pay_${p}`, sequence: 2 } })
        }
        yield* store.insertDelivery(delivery(26))
        const firsts = yield* claim(store, at(30), { token: "a", until: at(100) }, 20)
        expect(firsts.map((d) => d.id).sort()).toEqual([...payments.map((p) => `whd_${10 + 2 * p}`), "whd_26"].sort())
        const answered = (d: Delivery) =>
          afterAttempt(d, at(31), { _tag: "Answered", status: 200, snippet: "", durationMs: 5 }, [60_000], at(31))
        // All at once: the even payments' holder is "a"; the odd ones are recorded with a wrong token.
        const outcomes = yield* Effect.all(
          firsts.map((d) => {
            const done = answered(d)
            const odd = d.order !== null && Number(d.order.paymentId.slice(4)) % 2 === 1
            return store.recordAttempt(done.delivery, done.attempt, odd ? "wrong" : "a", {
              now: at(31),
              lease: { token: `s_${d.id}`, until: at(100) }
            })
          }),
          { concurrency: "unbounded" }
        )
        const byId = new Map(firsts.map((d, i) => [d.id, outcomes[i]!]))
        for (const p of payments) {
          const outcome = byId.get(`whd_${10 + 2 * p}`)
          if (p % 2 === 1) expect(outcome).toEqual(leaseLost)
          else expect(successorOf(outcome!)).toBe(`whd_${11 + 2 * p}`)
        }
        expect(byId.get("whd_26")).toEqual(recorded)
        // Each successor is leased to the token given with its own predecessor.
        for (const p of payments.filter((p) => p % 2 === 0)) {
          expect(yield* store.renewLease(`whd_${11 + 2 * p}`, `s_whd_${10 + 2 * p}`, at(32), at(100))).toEqual([
            "whsec_c"
          ])
        }
        // The wrong token recorded nothing: those deliveries are still open under "a", their successors unclaimed.
        for (const p of payments.filter((p) => p % 2 === 1)) {
          expect((yield* store.getDelivery("mer_c", `whd_${10 + 2 * p}`))!.attempts).toEqual([])
          expect(yield* store.renewLease(`whd_${11 + 2 * p}`, `s_whd_${10 + 2 * p}`, at(32), at(100))).toBeNull()
        }
        expect((yield* store.stats("mer_c", at(0))).attemptsLastDay).toBe(5)
      }).pipe(Effect.provide(layer())))

    it.effect("the successor of an ended delivery is claimed at once: next in its payment's order to its URL, due, unleased", () =>
      Effect.gen(function*() {
        yield* Effect.flatMap(Store, (s) => s.insertMerchant(merchant, apiKey))
        const store = yield* WebhookStore
        const ordered = (n: number, paymentId: string, sequence: number, url = "http://example.com/h") => ({
          ...delivery(n),
          url,
          order: { paymentId, sequence }
        })
        for (
          const d of [
            ordered(1, "pay_a", 1),
            ordered(2, "pay_a", 2),
            ordered(3, "pay_a", 3),
            ordered(4, "pay_b", 1),
            delivery(5),
            ordered(6, "pay_a", 2, "http://other.example/h")
          ]
        ) {
          yield* store.insertDelivery(d)
        }
        const lease = (token: string) => ({ token, until: at(100) })
        const first = yield* claim(store, at(10), lease("a"), 10)
        expect(first.map((d) => d.id).sort()).toEqual(["whd_1", "whd_4", "whd_5", "whd_6"])
        const byId = (id: string) => first.find((d) => d.id === id)!
        const answered = (d: Delivery, now: number) =>
          afterAttempt(d, now, { _tag: "Answered", status: 200, snippet: "", durationMs: 5 }, [60_000], now)
        /** Records `d` answered 2xx by the holder of `token`, claiming its successor at `now` in the same call. */
        const succeed = (d: Delivery, token: string, now: number, successorLease: Lease) =>
          Effect.gen(function*() {
            const done = answered(d, now)
            return yield* store.recordAttempt(done.delivery, done.attempt, token, { now, lease: successorLease })
          })
        // While pay_a's first is open, its second is not claimed: an attempt that leaves the first
        // open (retrying at once) claims no successor, and the poll that takes the first again
        // leaves the second.
        const retry = afterAttempt(
          byId("whd_1"),
          at(10),
          { _tag: "Failed", error: "connection error", durationMs: 5 },
          [0],
          at(10)
        )
        expect(retry.delivery.status).toBe("retrying")
        expect(yield* store.recordAttempt(retry.delivery, retry.attempt, "a", { now: at(10), lease: lease("s") }))
          .toEqual(recorded)
        const again = yield* claim(store, at(10), lease("a"), 10)
        expect(again.map((d) => d.id)).toEqual(["whd_1"])
        const done1 = answered(again[0]!, at(10))
        const second = yield* store.recordAttempt(done1.delivery, done1.attempt, "a", {
          now: at(10),
          lease: lease("s")
        })
        expect(successorOf(second)).toBe("whd_2")
        if (second._tag !== "RecordedWithSuccessor") return
        expect(yield* store.getDelivery("mer_c", "whd_1")).toEqual(done1.delivery)
        // Claimed under the lease: only its holder renews it, recording the first again (its lease is
        // gone) claims nothing, and a poll gets neither it nor the third, which waits for it.
        expect(yield* store.renewLease("whd_2", "t", at(10), at(100))).toBeNull()
        expect(yield* store.renewLease("whd_2", "s", at(10), at(100))).toEqual(["whsec_c"])
        expect(yield* store.recordAttempt(done1.delivery, done1.attempt, "a", { now: at(10), lease: lease("t") }))
          .toEqual(leaseLost)
        expect(yield* claim(store, at(10), lease("u"), 10)).toEqual([])
        // Recording with a successor claims it in the same call: none for a wrong token (nothing
        // recorded) nor when the successor is not due (the third is due at minute 3 only).
        const done2 = answered(second.successor, at(2))
        expect(yield* store.recordAttempt(done2.delivery, done2.attempt, "x", { now: at(10), lease: lease("v") }))
          .toEqual(leaseLost)
        expect(yield* store.recordAttempt(done2.delivery, done2.attempt, "s", { now: at(2), lease: lease("v") }))
          .toEqual(recorded)
        expect(yield* store.getDelivery("mer_c", "whd_2")).toEqual(done2.delivery)
        // The third is now due, unleased and first of its payment to its URL, yet nothing claims it as
        // the successor of another payment's only one, of an unordered one, nor across URLs.
        expect(yield* succeed(byId("whd_4"), "a", at(10), lease("w"))).toEqual(recorded)
        expect(yield* succeed(byId("whd_5"), "a", at(10), lease("w"))).toEqual(recorded)
        expect(yield* succeed(byId("whd_6"), "a", at(10), lease("w"))).toEqual(recorded)
        // ... and it is claimable: the poll takes it (alone).
        const third = yield* claim(store, at(10), lease("v"), 10)
        expect(third.map((d) => d.id)).toEqual(["whd_3"])
        // A resent earlier one that ends while the third is held claims no successor: a lease is not
        // taken over before it ends.
        const resent = yield* store.resend(
          "mer_c",
          "whd_2",
          (d) => ({ ...d, status: "retrying", nextAttemptAt: at(10), completedAt: null })
        )
        expect(resent._tag).toBe("Resent")
        const redo = yield* claim(store, at(10), lease("y"), 10)
        expect(redo.map((d) => d.id)).toEqual(["whd_2"])
        expect(yield* succeed(redo[0]!, "y", at(10), lease("z"))).toEqual(recorded)
        expect(yield* store.renewLease("whd_3", "z", at(10), at(100))).toBeNull()
        // Nothing after the last of a payment.
        const done3 = afterAttempt(
          third[0]!,
          at(10),
          { _tag: "Failed", error: "connection error", durationMs: 5 },
          [],
          at(10)
        )
        expect(done3.delivery.status).toBe("failed")
        expect(yield* store.recordAttempt(done3.delivery, done3.attempt, "v", { now: at(10), lease: lease("w") }))
          .toEqual(recorded)
        // whd_3 ended (failed) with its attempt above: nothing is open.
        expect(yield* store.backlog(at(10))).toEqual({ open: 0, due: 0, oldestDueAt: null })
      }).pipe(Effect.provide(layer())))

    it.effect("a poll drains the outbox in full batches, claims what is due and tells when work is due next", () =>
      Effect.gen(function*() {
        const w = testWorld()
        const owner = merchantFor(w)
        yield* Effect.flatMap(Store, (s) => s.insertMerchant(owner, apiKeyFor(w, owner.id, owner.createdAt)))
        for (const amountCents of [1_000, 2_000, 3_000]) {
          const change = accepted(Payment.create(createInput(owner.id, { amountCents }), w.context()))
          yield* Effect.flatMap(Store, (s) => s.insertPayment(change))
        }
        const store = yield* WebhookStore
        const now = w.clock.now()
        const nowMs = now
        const build = (event: Payment.PaymentEvent, m: { readonly id: string; readonly webhookUrl: string | null }) =>
          m.id !== owner.id ? null : newDelivery({
            id: w.mintId("webhookDelivery"),
            merchantId: m.id,
            url: m.webhookUrl!,
            event,
            payload: eventPayload(event, new Date(event.createdAt).toISOString()),
            now,
            order: { paymentId: event.paymentId, sequence: event.sequence }
          })
        const leases: Array<string> = []
        const lease = (token: string, until: number) => () => {
          leases.push(token)
          return { token, until }
        }
        // Batches of two: two full ones would drain four; the second (one event) ends the drain.
        const first = yield* store.poll({
          drainLimit: 2,
          drainBatches: 10,
          build,
          now,
          lease: lease("a", nowMs + 60_000),
          claimLimit: 2
        })
        expect(first.drained).toBe(3)
        expect(first.claimed).toHaveLength(2)
        expect(leases).toEqual(["a"])
        // The third is due now (beyond the claim's limit).
        expect(first.nextDueAt).toBe(nowMs)
        const second = yield* store.poll({
          drainLimit: 2,
          drainBatches: 10,
          build,
          now,
          lease: lease("b", nowMs + 30_000),
          claimLimit: 2
        })
        expect(second.drained).toBe(0)
        expect(second.claimed.map((d) => d.merchantId)).toEqual([owner.id])
        expect([...first.claimed, ...second.claimed].map((d) => d.payload).sort()).toEqual(
          (yield* store.listDeliveries(owner.id, {}, { page: 1, perPage: 10 })).items.map((d) => d.payload).sort()
        )
        // Everything is leased: work is due next when the first lease ends.
        expect(second.nextDueAt).toBe(nowMs + 30_000)
        expect(
          (yield* store.poll({ drainLimit: 2, drainBatches: 1, build, now, lease: lease("c", now), claimLimit: 2 }))
            .claimed
        ).toEqual([])
        // Claimed deliveries read as stored, an attempt's record included.
        for (const d of first.claimed) expect(d).toEqual(yield* store.getDelivery(owner.id, d.id))
        const failedAt = nowMs + 1_234
        const failed = afterAttempt(
          first.claimed[0]!,
          failedAt,
          { _tag: "Answered", status: 503, snippet: "busy", durationMs: 17 },
          [60_000],
          failedAt
        )
        expect(yield* store.recordAttempt(failed.delivery, failed.attempt, "a")).toEqual(recorded)
        const retryMs = nowMs + 61_234
        const third = yield* store.poll({
          drainLimit: 2,
          drainBatches: 1,
          build,
          now: retryMs,
          lease: lease("d", retryMs + 5_000),
          claimLimit: 10
        })
        expect(third.claimed.map((d) => d.id).sort()).toEqual(
          [...first.claimed, ...second.claimed].map((d) => d.id).sort()
        )
        expect(third.claimed.find((d) => d.id === failed.delivery.id)).toEqual(failed.delivery)
        expect(third.nextDueAt).toBe(retryMs + 5_000)
      }).pipe(Effect.provide(layer())))

    it.effect("an ended delivery reads back with its exact payload, and a resend sends that payload again", () =>
      Effect.gen(function*() {
        const w = testWorld()
        const owner = merchantFor(w)
        yield* Effect.flatMap(Store, (s) => s.insertMerchant(owner, apiKeyFor(w, owner.id, owner.createdAt)))
        for (const amountCents of [1_000, 2_000]) {
          const change = accepted(Payment.create(createInput(owner.id, { amountCents }), w.context()))
          yield* Effect.flatMap(Store, (s) => s.insertPayment(change))
        }
        const store = yield* WebhookStore
        const now = w.clock.now()
        const { created } = yield* store.drainOutbox(100, (event, m) =>
          m.id !== owner.id ? null : newDelivery({
            id: w.mintId("webhookDelivery"),
            merchantId: m.id,
            url: m.webhookUrl!,
            event,
            payload: eventPayload(event, new Date(event.createdAt).toISOString()),
            now,
            order: { paymentId: event.paymentId, sequence: event.sequence }
          }))
        const mine = created.filter((d) => d.merchantId === owner.id)
        expect(mine).toHaveLength(2)
        const claimed = (yield* claim(store, now, { token: "t", until: at(59) }, 100)).filter((d) =>
          d.merchantId === owner.id
        )
        expect(claimed.map((d) => d.payload).sort()).toEqual(mine.map((d) => d.payload).sort())
        const [first, second] = claimed
        const succeeded = afterAttempt(
          first!,
          now,
          { _tag: "Answered", status: 200, snippet: "", durationMs: 5 },
          [],
          now
        )
        const failed = afterAttempt(
          second!,
          now,
          { _tag: "Answered", status: 500, snippet: "", durationMs: 5 },
          [],
          now
        )
        expect([succeeded.delivery.status, failed.delivery.status]).toEqual(["succeeded", "failed"])
        expect(yield* store.recordAttempt(succeeded.delivery, succeeded.attempt, "t")).toEqual(recorded)
        expect(yield* store.recordAttempt(failed.delivery, failed.attempt, "t")).toEqual(recorded)
        expect(yield* store.getDelivery(owner.id, first!.id)).toEqual(succeeded.delivery)
        expect(yield* store.getDelivery(owner.id, second!.id)).toEqual(failed.delivery)
        const listed = (yield* store.listDeliveries(owner.id, {}, { page: 1, perPage: 10 })).items
        expect([...listed].sort((a, b) => (a.id < b.id ? -1 : 1))).toEqual(
          [succeeded.delivery, failed.delivery].sort((a, b) => (a.id < b.id ? -1 : 1))
        )
        const resent = yield* store.resend(
          owner.id,
          second!.id,
          (d) => ({ ...d, status: "retrying", nextAttemptAt: now, completedAt: null })
        )
        expect(resent._tag).toBe("Resent")
        const again = (yield* claim(store, now, { token: "u", until: at(59) }, 100)).filter((d) =>
          d.merchantId === owner.id
        )
        expect(again.map((d) => d.payload)).toEqual([second!.payload])
      }).pipe(Effect.provide(layer())))
  })

webhookStoreContract("memory", () => layerMemory)
webhookStoreContract(
  "postgres",
  () =>
    Layer.unwrap(
      Effect.map(Effect.promise(() => freshDatabase("whcontract")), (url) => pgStoreLayer(url).pipe(Layer.orDie))
    )
)
