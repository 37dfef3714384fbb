import { Effect, Exit } from "effect"
import { describe, expect, it } from "vitest"
import { noFaults } from "../../sim/engine/Options.ts"
import { Prng } from "../../sim/engine/Prng.ts"
import { type Fence, fenced } from "../../sim/world/Service.ts"
import { faultyStore } from "../../sim/world/StoreFaults.ts"
import type { StoreShape } from "../../src/store/Store.ts"
import type { WebhookStoreShape } from "../../src/store/WebhookStore.ts"

// The main store checks an instance's fence in the step of its fault wrapper (sim/world/StoreFaults.ts
// `fencedBy`: the fence, the refusal draw and the operation in one step); the webhook store sits
// behind `fenced` (sim/world/Service.ts). Either way, a call of an instance that died interrupts its
// caller and touches nothing, even when the call's effect was built before the crash: the
// operation is neither built nor run, and no fault is drawn (the draws of the live instances
// stay where they are).

/** A store whose every operation records that it was built and that it ran. */
const spyOn = <S extends object>(names: ReadonlyArray<string>) => {
  const built: Array<string> = []
  const ran: Array<string> = []
  const shape: Record<string, unknown> = {}
  for (const name of names) {
    shape[name] = (..._args: Array<unknown>) => {
      built.push(name)
      return Effect.sync(() => {
        ran.push(name)
        return name === "insertPayment" ? { _tag: "Inserted" } : null
      })
    }
  }
  return { shape: shape as S, built, ran }
}

const mainNames = ["getMerchant", "useApiKey", "insertPayment", "commitChange", "completeIdempotencyKey"]

describe("stores behind an instance's fence", () => {
  it("a main store call built before the crash and run after it interrupts, runs nothing and draws nothing", () => {
    const spy = spyOn<StoreShape>(mainNames)
    const prng = Prng.derive(1, "store")
    const twin = Prng.derive(1, "store")
    // Every fault armed and likely: a draw, had one been made, would show in the stats and the stream.
    const faults = { ...noFaults, storeUnavailable: 0.5, storeLostCommit: 0.5, crashAfterCommit: 0.5 }
    const faulty = faultyStore({
      store: spy.shape,
      prng,
      faults,
      window: { startMs: 0, endMs: 0 },
      hooks: {
        armed: () => true,
        nowMs: () => 0,
        crashAfterCommit: () => false,
        record: () => {}
      },
      splitCommits: {}
    })
    const fence: Fence = { dead: false, held: null }
    const store = faulty.fencedBy(fence)

    // Built while alive (one of each kind: a read, a plain write, a commit whose outcome is
    // looked at, a commit whose crash is drawn before it runs); nothing is built or drawn yet.
    const calls = [
      store.getMerchant("mer_1"),
      store.useApiKey("hash_1", Date.UTC(2026, 0, 5), Date.UTC(2026, 0, 4, 23, 59)),
      store.insertPayment({ payment: { id: "pay_1" } } as unknown as Parameters<StoreShape["insertPayment"]>[0]),
      store.completeIdempotencyKey("mer_1", "idem_1", 201, "{}")
    ]
    expect(spy.built).toEqual([])
    fence.dead = true
    for (const call of calls) {
      const exit = Effect.runSyncExit(call as Effect.Effect<unknown, unknown>)
      expect(Exit.hasInterrupts(exit)).toBe(true)
    }
    expect(spy.built).toEqual([])
    expect(spy.ran).toEqual([])
    expect(faulty.stats.operations).toBe(0)
    expect(prng.next32()).toBe(twin.next32())

    // Another instance's fence is its own: its calls run (and draw) as before.
    const live = faulty.fencedBy({ dead: false, held: null })
    Effect.runSyncExit(live.getMerchant("mer_1"))
    expect(spy.ran).toEqual(["getMerchant"])
    expect(faulty.stats.operations).toBe(1)
  })

  it("a webhook store call built before the crash and run after it interrupts and runs nothing", () => {
    const spy = spyOn<WebhookStoreShape>(["renewLease", "recordAttempt", "poll", "releaseLease"])
    const fence: Fence = { dead: false, held: null }
    const store = fenced(spy.shape, fence)
    const alive = Effect.runSyncExit(store.releaseLease("whd_0", "token"))
    expect(Exit.isSuccess(alive)).toBe(true)
    expect(spy.ran).toEqual(["releaseLease"])

    const calls = [
      store.renewLease("whd_1", "token", Date.UTC(2026, 0, 5), Date.UTC(2026, 0, 5, 0, 1)),
      store.releaseLease("whd_1", "token")
    ]
    fence.dead = true
    for (const call of calls) {
      expect(Exit.hasInterrupts(Effect.runSyncExit(call as Effect.Effect<unknown, unknown>))).toBe(true)
    }
    expect(spy.built).toEqual(["releaseLease"])
    expect(spy.ran).toEqual(["releaseLease"])
  })
})
