import { Clock, Effect } from "effect"
import * as TestClock from "effect/testing/TestClock"
import { describe, expect, it } from "vitest"
import { VirtualTime } from "../../sim/engine/VirtualTime.ts"
import { callbackTimerOf } from "../../src/platform/Timers.ts"

describe("callbackTimerOf: a timer without a fiber, from the clock's own scheduler", () => {
  it("on the simulator's virtual clock: fires at its time in the wake-up order, and a cancelled one never fires", () => {
    const time = new VirtualTime(1_000)
    const timer = Effect.runSync(callbackTimerOf(time.clock))!
    expect(timer).not.toBeNull()
    const fired: Array<string> = []
    timer(500, () => fired.push(`a@${time.nowMs}`))
    const cancel = timer(200, () => fired.push(`b@${time.nowMs}`))
    time.at(1_500, () => fired.push(`sleep@${time.nowMs}`))
    timer(0, () => fired.push(`c@${time.nowMs}`))
    cancel()
    time.run()
    expect(fired).toEqual(["c@1000", "a@1500", "sleep@1500"])
  })

  it("on Effect's default clock: setTimeout, as its sleep", async () => {
    const timer = Effect.runSync(Clock.clockWith(callbackTimerOf))!
    expect(timer).not.toBeNull()
    const fired = await new Promise<boolean>((resolve) => {
      const cancel = timer(5, () => resolve(false))
      cancel()
      timer(1, () => resolve(true))
    })
    expect(fired).toBe(true)
  })

  it("none on TestClock (the caller falls back to sleep and a race)", async () => {
    const timer = await Effect.runPromise(Clock.clockWith(callbackTimerOf).pipe(Effect.provide(TestClock.layer())))
    expect(timer).toBeNull()
  })
})
