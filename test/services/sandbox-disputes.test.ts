import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Layer } from "effect"
import * as TestClock from "effect/testing/TestClock"
import * as Acquirer from "../../src/acquirer/Acquirer.ts"
import { ServicesLive } from "../../src/App.ts"
import * as Config from "../../src/platform/Config.ts"
import * as Ids from "../../src/platform/Ids.ts"
import { Merchants } from "../../src/services/Merchants.ts"
import { Payments } from "../../src/services/Payments.ts"
import { emptyState, layerMemoryFrom } from "../../src/store/MemoryStore.ts"
import * as SandboxDisputes from "../../src/workers/SandboxDisputes.ts"
import { createInput } from "../domain/fixtures.ts"

// The sandbox network's dispute worker under Effect's TestClock: virtual time drives it.

const config = Config.defaultsWith({ sandboxDisputeOpenAfterMs: 30_000, sandboxDisputeResolveAfterMs: 60_000 })
const services = ServicesLive.pipe(
  Layer.provideMerge(layerMemoryFrom(emptyState())),
  Layer.provideMerge(Layer.mergeAll(Ids.layerSeeded(13), Acquirer.layerSandbox, Config.layerWith(config)))
)

describe("sandbox dispute worker", () => {
  it.effect("opens the dispute SANDBOX_DISPUTE_OPEN_AFTER after capture and resolves it SANDBOX_DISPUTE_RESOLVE_AFTER later", () =>
    Effect.gen(function*() {
      const payments = yield* Payments
      const merchantId = (yield* (yield* Merchants).create({ name: "Sandbox", webhookUrl: null })).merchant.id
      const won = (yield* payments.create(createInput(merchantId, { cardToken: "tok_dispute_won" }))).payment
      const lost = (yield* payments.create(createInput(merchantId, { cardToken: "tok_dispute_lost" }))).payment
      const plain = (yield* payments.create(createInput(merchantId))).payment
      expect([won.status, lost.status]).toEqual(["captured", "captured"])
      yield* Layer.build(SandboxDisputes.layer)
      const disputeOf = (id: string) => Effect.map(payments.get(merchantId, id), (p) => p.dispute?.status ?? null)

      // The worker looks every 5 s: a dispute opens within one poll of being due.
      yield* TestClock.adjust(Duration.seconds(29))
      expect(yield* disputeOf(won.id)).toBeNull()
      yield* TestClock.adjust(Duration.seconds(6))
      expect([yield* disputeOf(won.id), yield* disputeOf(lost.id), yield* disputeOf(plain.id)]).toEqual([
        "open",
        "open",
        null
      ])
      yield* TestClock.adjust(Duration.seconds(55))
      expect(yield* disputeOf(won.id)).toBe("open")
      yield* TestClock.adjust(Duration.seconds(10))
      expect([yield* disputeOf(won.id), yield* disputeOf(lost.id), yield* disputeOf(plain.id)]).toEqual([
        "won",
        "lost",
        null
      ])
      const types = (yield* payments.events(merchantId, lost.id)).map((e) => e.type)
      expect(types.filter((t) => t.startsWith("payment.dispute"))).toEqual([
        "payment.dispute_opened",
        "payment.dispute_resolved"
      ])
    }).pipe(Effect.provide(services)))
})
