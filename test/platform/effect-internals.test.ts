import { Clock, Data, Deferred, Effect, Fiber } from "effect"
import * as TestClock from "effect/testing/TestClock"
import { describe, expect, it } from "vitest"
import { hasPendingInterrupt, instructionOf, isDefaultClock, withoutStack } from "../../src/platform/EffectInternals.ts"
import { callbackTimerOf } from "../../src/platform/Timers.ts"

// Guards of what src/platform/EffectInternals.ts relies on in Effect's implementation. A failure
// here after an upgrade of `effect` means that module must change, not the test.
describe("Effect internals this project relies on", () => {
  it("the default clock is recognised by its class, and TestClock is not", async () => {
    expect(isDefaultClock(Effect.runSync(Clock.clockWith(Effect.succeed)))).toBe(true)
    const testClock = await Effect.runPromise(Clock.clockWith(Effect.succeed).pipe(Effect.provide(TestClock.layer())))
    expect(isDefaultClock(testClock)).toBe(false)
    expect(await Effect.runPromise(Clock.clockWith(callbackTimerOf))).not.toBeNull()
  })

  it("an Effect error class built without a stack has no frames; the same class otherwise has them", () => {
    class Plain extends Data.TaggedError("Plain")<{ readonly detail: string }> {}
    class Quiet extends withoutStack(Data.TaggedError("Quiet")<{ readonly detail: string }>) {}
    const frames = (error: Error) => (error.stack ?? "").split("\n").filter((line) => /^\s+at /.test(line)).length
    const limit = Error.stackTraceLimit
    expect(frames(new Plain({ detail: "x" }))).toBeGreaterThan(0)
    const quiet = new Quiet({ detail: "x" })
    expect(frames(quiet)).toBe(0)
    expect(quiet.detail).toBe("x")
    expect(quiet._tag).toBe("Quiet")
    expect(Error.stackTraceLimit).toBe(limit)
  })

  it("an interrupt asked of an uninterruptible fiber is visible as pending until the fiber ends", async () => {
    await Effect.runPromise(Effect.gen(function*() {
      const gate = yield* Deferred.make<void>()
      const started = yield* Deferred.make<void>()
      const fiber = yield* Effect.forkChild(
        Effect.uninterruptible(Effect.andThen(Deferred.succeed(started, undefined), Deferred.await(gate)))
      )
      yield* Deferred.await(started)
      expect(hasPendingInterrupt(fiber)).toBe(false)
      fiber.interruptUnsafe()
      yield* Effect.yieldNow
      expect(hasPendingInterrupt(fiber)).toBe(true)
      yield* Deferred.succeed(gate, undefined)
      yield* Fiber.await(fiber)
    }))
  })

  it("an instruction tells its kind and the function it carries", () => {
    const thunk = () => 1
    expect(instructionOf(Effect.sync(thunk))).toEqual({ kind: "Sync", fn: thunk })
    const next = (n: number) => Effect.succeed(n + 1)
    expect(instructionOf(Effect.flatMap(Effect.sync(thunk), next))).toEqual({ kind: "OnSuccess", fn: next })
    expect(instructionOf(Effect.suspend(() => Effect.void)).kind).toBe("Suspend")
  })
})
