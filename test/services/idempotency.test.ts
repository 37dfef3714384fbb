import { describe, expect, it } from "@effect/vitest"
import { Clock, Data, Effect, Layer } from "effect"
import * as Acquirer from "../../src/acquirer/Acquirer.ts"
import { ServicesLive } from "../../src/App.ts"
import * as Config from "../../src/platform/Config.ts"
import * as Ids from "../../src/platform/Ids.ts"
import { isSealed } from "../../src/platform/Sealing.ts"
import { Create, Idempotency, type KeyedRequest, type Reply } from "../../src/services/Idempotency.ts"
import { Merchants } from "../../src/services/Merchants.ts"
import { emptyState, layerMemoryFrom } from "../../src/store/MemoryStore.ts"
import { Store } from "../../src/store/Store.ts"
import { createInput } from "../domain/fixtures.ts"

// The Idempotency service on its own (CONTRACT section 5), over the memory store: what its one
// entry point answers for each state of a key. The HTTP answers are test/http/idempotency.test.ts's.

const services = ServicesLive.pipe(
  Layer.provideMerge(layerMemoryFrom(emptyState())),
  Layer.provideMerge(Layer.mergeAll(Ids.layerSeeded(7), Acquirer.layerSandbox, Config.layerWith(Config.defaults)))
)

class Refusal extends Data.TaggedError("Refusal")<{ readonly status: number }> {}

const requestOf = (merchantId: string, key: string | null, fingerprint = "fp-1"): KeyedRequest<Refusal> => ({
  merchantId,
  key,
  keyParam: "X-Idempotency-Key",
  fingerprint,
  finalReply: (error) => (error.status < 500 ? { status: error.status, body: `{"refused":${error.status}}` } : null)
})

const newMerchant = Effect.flatMap(Merchants, (m) => m.create({ name: "Idempotent Shop", webhookUrl: null })).pipe(
  Effect.map((created) => created.merchant.id)
)

/** A command that counts its runs and answers `reply` (or fails with `refusal`). */
const counted = (runs: { count: number }, outcome: Reply | Refusal) =>
  Effect.suspend(() => {
    runs.count++
    return outcome instanceof Refusal ? Effect.fail(outcome) : Effect.succeed(outcome)
  })

describe("the Idempotency service", () => {
  it.effect("runs a command once under a key and replays its reply; another request under the key is key_reused", () =>
    Effect.gen(function*() {
      const idempotency = yield* Idempotency
      const merchantId = yield* newMerchant
      const runs = { count: 0 }
      const command = counted(runs, { status: 200, body: `{"ok":true}` })
      const first = yield* idempotency.run(requestOf(merchantId, "k-1"), command)
      const again = yield* idempotency.run(requestOf(merchantId, "k-1"), command)
      expect(first).toEqual({ status: 200, body: `{"ok":true}` })
      expect(again).toEqual({ status: 200, body: `{"ok":true}`, headers: { "idempotent-replayed": "true" } })
      expect(runs.count).toBe(1)
      const reused = yield* Effect.flip(idempotency.run(requestOf(merchantId, "k-1", "fp-2"), command))
      expect(reused).toMatchObject({ _tag: "IdempotencyRefused", reason: "key_reused", keyParam: "X-Idempotency-Key" })
      // Without a key the command simply runs.
      yield* idempotency.run(requestOf(merchantId, null), command)
      expect(runs.count).toBe(2)
    }).pipe(Effect.provide(services)))

  it.effect("stores a final refusal and replays it; a refusal that is not final releases the key for the retry", () =>
    Effect.gen(function*() {
      const idempotency = yield* Idempotency
      const merchantId = yield* newMerchant
      const runs = { count: 0 }
      const final = counted(runs, new Refusal({ status: 422 }))
      expect(yield* idempotency.run(requestOf(merchantId, "k-final"), final)).toEqual({
        status: 422,
        body: `{"refused":422}`
      })
      expect((yield* idempotency.run(requestOf(merchantId, "k-final"), final)).headers).toEqual({
        "idempotent-replayed": "true"
      })
      expect(runs.count).toBe(1)
      const unavailable = counted(runs, new Refusal({ status: 503 }))
      expect(yield* Effect.flip(idempotency.run(requestOf(merchantId, "k-503"), unavailable))).toEqual(
        new Refusal({ status: 503 })
      )
      const ok = counted(runs, { status: 200, body: "{}" })
      expect(yield* idempotency.run(requestOf(merchantId, "k-503"), ok)).toEqual({ status: 200, body: "{}" })
      expect(runs.count).toBe(3)
    }).pipe(Effect.provide(services)))

  it.effect("a keyed create commits its claim and its stored response with the payment; the retry is replayed from the first round trip", () =>
    Effect.gen(function*() {
      const idempotency = yield* Idempotency
      const store = yield* Store
      const merchantId = yield* newMerchant
      const create = new Create(
        createInput(merchantId, { amountCents: 2_500, idempotencyKey: "order-1" }),
        (payment) => ({ status: 201, body: JSON.stringify({ id: payment.id, status: payment.status }) })
      )
      const first = yield* idempotency.run(requestOf(merchantId, "order-1"), create)
      expect(first.status).toBe(201)
      const again = yield* idempotency.run(requestOf(merchantId, "order-1"), create)
      expect(again).toEqual({ ...first, headers: { "idempotent-replayed": "true" } })
      const page = yield* store.listPayments(merchantId, {}, { page: 1, perPage: 10 })
      expect(page.items).toHaveLength(1)
      expect(yield* Effect.flip(idempotency.run(requestOf(merchantId, "order-1", "fp-other"), create))).toMatchObject({
        reason: "key_reused"
      })
    }).pipe(Effect.provide(services)))

  it.effect("a stored response that carries a secret is sealed, and replayed in the clear", () =>
    Effect.gen(function*() {
      const idempotency = yield* Idempotency
      const merchantId = yield* newMerchant
      const store = yield* Store
      const secret = { status: 201, body: `{"api_key":{"key":"sk_live_${"a".repeat(32)}"}}` }
      yield* idempotency.run(requestOf(merchantId, "k-secret"), Effect.succeed(secret))
      // Asked again at the service's time: the stored response, as the store holds it.
      const now = yield* Clock.currentTimeMillis
      const stored = yield* store.claimIdempotencyKey({
        merchantId,
        key: "k-secret",
        fingerprint: "fp-1",
        now,
        lockedUntil: now,
        expiresAt: now
      })
      expect(stored).toMatchObject({ _tag: "Replay" })
      expect(stored._tag === "Replay" && isSealed(stored.body)).toBe(true)
      expect((yield* idempotency.run(requestOf(merchantId, "k-secret"), Effect.succeed(secret))).body).toBe(secret.body)
    }).pipe(Effect.provide(services)))
})
