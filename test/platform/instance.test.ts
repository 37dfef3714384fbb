import { describe, expect, it } from "@effect/vitest"
import { Effect, Exit, Layer, Ref, Scope } from "effect"
import { TestClock } from "effect/testing"
import * as Instance from "../../src/platform/Instance.ts"
import { emptyState, memoryOperations } from "../../src/store/MemoryStore.ts"
import { Store, type StoreShape, StoreUnavailable } from "../../src/store/Store.ts"

/**
 * Instances on one store (src/platform/Instance.ts): one leads, its once-only jobs run while it
 * does, and the role moves when it stops (gracefully at once; cut off once its beats lapse).
 * Virtual time: the beats and the hand-over are exact.
 */

/** A store that fails every call while `cut` is set (an instance cut off from the database). */
const cuttable = (store: StoreShape, cut: { value: boolean }): StoreShape =>
  new Proxy(store, {
    get: (target, name) => {
      const member = target[name as keyof StoreShape] as unknown
      if (typeof member !== "function") return member
      return (...args: Array<unknown>) =>
        cut.value
          ? Effect.fail(new StoreUnavailable({ cause: "cut off" }))
          : (member as (...xs: Array<unknown>) => unknown)(...args)
    }
  })

/** A job that counts its starts and whether it runs now, and runs until it is interrupted. */
const countingJob = (runs: Ref.Ref<number>, running: Ref.Ref<boolean>) =>
  Effect.andThen(
    Effect.andThen(Ref.update(runs, (n) => n + 1), Ref.set(running, true)),
    Effect.ensuring(Effect.never, Ref.set(running, false))
  )

const startInstance = (id: string, store: StoreShape, runs: Ref.Ref<number>, running: Ref.Ref<boolean>) =>
  Effect.gen(function*() {
    const scope = yield* Scope.make()
    const context = yield* Layer.buildWithScope(
      Instance.layerWithId(id).pipe(Layer.provide(Layer.succeed(Store, store))),
      scope
    )
    yield* Effect.forkIn(Effect.provideContext(Instance.whileLeading(countingJob(runs, running)), context), scope)
    return scope
  })

describe("instances and the leader", () => {
  it.effect("one leads; a leader cut off steps down and another takes the role once its beats lapse; a graceful stop hands it over at once", () =>
    Effect.gen(function*() {
      const state = emptyState()
      const cutA = { value: false }
      const runsA = yield* Ref.make(0)
      const runsB = yield* Ref.make(0)
      const runningA = yield* Ref.make(false)
      const runningB = yield* Ref.make(false)
      const a = yield* startInstance("ins_a", cuttable(memoryOperations(state), cutA), runsA, runningA)
      const b = yield* startInstance("ins_b", memoryOperations(state), runsB, runningB)
      const running = Effect.all([Ref.get(runningA), Ref.get(runningB)])
      yield* TestClock.adjust(10)
      expect([yield* Ref.get(runsA), yield* Ref.get(runsB)]).toEqual([1, 0])
      expect(state.leaders.get(Instance.jobsRole)).toBe("ins_a")

      // A is cut off at 10 ms: its last beat said alive until 5 s. B takes the role at its first
      // beat after that; A has stepped down by then (its job interrupted, not run twice).
      yield* TestClock.adjust(10_000 - 10)
      cutA.value = true
      yield* TestClock.adjust(4_000)
      expect(state.leaders.get(Instance.jobsRole)).toBe("ins_a")
      expect(yield* running).toEqual([true, false])
      yield* TestClock.adjust(2_000)
      expect(state.leaders.get(Instance.jobsRole)).toBe("ins_b")
      expect([yield* Ref.get(runsA), yield* Ref.get(runsB)]).toEqual([1, 1])
      expect(yield* running).toEqual([false, true])

      // A is back: B keeps the role while it beats.
      cutA.value = false
      yield* TestClock.adjust(5_000)
      expect(state.leaders.get(Instance.jobsRole)).toBe("ins_b")
      // B stops gracefully: it resigns, and A takes the role at its next beat.
      yield* Scope.close(b, Exit.void)
      yield* TestClock.adjust(1_000)
      expect(state.leaders.get(Instance.jobsRole)).toBe("ins_a")
      expect([yield* Ref.get(runsA), yield* Ref.get(runsB)]).toEqual([2, 1])
      expect(yield* running).toEqual([true, false])
      yield* Scope.close(a, Exit.void)
      expect(state.leaders.has(Instance.jobsRole)).toBe(false)
    }))

  it.effect("without an instance (the simulator, a test of one service) a job simply runs", () =>
    Effect.gen(function*() {
      const runs = yield* Ref.make(0)
      yield* Effect.forkChild(Instance.whileLeading(countingJob(runs, yield* Ref.make(false))))
      yield* TestClock.adjust(1)
      expect(yield* Ref.get(runs)).toBe(1)
    }))
})
