import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber, Scope } from "effect"
import { VirtualTime } from "../../sim/engine/VirtualTime.ts"
import * as PaymentActors from "../../src/services/PaymentActors.ts"

// The per-payment mutex of PaymentActors.serialize: one command at a time per payment, first
// come first served, released on every exit, never left held by a command that was interrupted.

/** A command that records its start, waits for its gate, then records its end. */
const gated = (log: Array<string>, name: string, gate: Deferred.Deferred<void>) =>
  Effect.andThen(
    Effect.sync(() => log.push(`${name} start`)),
    Effect.ensuring(Deferred.await(gate), Effect.sync(() => log.push(`${name} end`)))
  )

/** Lets every runnable fiber run until it suspends. */
const settle = Effect.repeat(Effect.yieldNow, { times: 20 })

describe("PaymentActors.serialize", () => {
  it.effect("runs one command at a time per payment, in arrival order; other payments are not held up", () =>
    Effect.gen(function*() {
      const actors = yield* PaymentActors.make
      const log: Array<string> = []
      const gates = yield* Effect.all([
        Deferred.make<void>(),
        Deferred.make<void>(),
        Deferred.make<void>(),
        Deferred.make<void>()
      ])
      const first = yield* Effect.forkChild(actors.serialize("pay_1", gated(log, "a", gates[0])))
      yield* settle
      const second = yield* Effect.forkChild(actors.serialize("pay_1", gated(log, "b", gates[1])))
      yield* settle
      const third = yield* Effect.forkChild(actors.serialize("pay_1", gated(log, "c", gates[2])))
      const other = yield* Effect.forkChild(actors.serialize("pay_2", gated(log, "x", gates[3])))
      yield* settle
      expect(log).toEqual(["a start", "x start"])
      yield* Deferred.succeed(gates[0], undefined)
      yield* settle
      expect(log).toEqual(["a start", "x start", "a end", "b start"])
      yield* Deferred.succeed(gates[3], undefined)
      yield* settle
      yield* Deferred.succeed(gates[1], undefined)
      yield* settle
      yield* Deferred.succeed(gates[2], undefined)
      yield* Fiber.joinAll([first, second, third, other])
      expect(log).toEqual(["a start", "x start", "a end", "b start", "x end", "b end", "c start", "c end"])
    }))

  it.effect("a failing or interrupted holder releases the lock", () =>
    Effect.gen(function*() {
      const actors = yield* PaymentActors.make
      const failed = yield* Effect.exit(actors.serialize("pay_1", Effect.fail("refused")))
      expect(failed).toEqual(Exit.fail("refused"))
      const gate = yield* Deferred.make<void>()
      const holder = yield* Effect.forkChild(actors.serialize("pay_1", Deferred.await(gate)))
      yield* settle
      const waiting = yield* Effect.forkChild(actors.serialize("pay_1", Effect.succeed("ran")))
      yield* settle
      expect(waiting.pollUnsafe()).toBeUndefined()
      yield* Fiber.interrupt(holder)
      expect(yield* Fiber.join(waiting)).toBe("ran")
      expect(yield* actors.serialize("pay_1", Effect.succeed("free"))).toBe("free")
    }))

  it.effect("a command interrupted while waiting never holds the lock, and the queue goes on without it", () =>
    Effect.gen(function*() {
      const actors = yield* PaymentActors.make
      const log: Array<string> = []
      const gate = yield* Deferred.make<void>()
      const holder = yield* Effect.forkChild(actors.serialize("pay_1", gated(log, "a", gate)))
      yield* settle
      const leaving = yield* Effect.forkChild(actors.serialize("pay_1", Effect.sync(() => log.push("b ran"))))
      const staying = yield* Effect.forkChild(actors.serialize("pay_1", Effect.sync(() => log.push("c ran"))))
      yield* settle
      yield* Fiber.interrupt(leaving)
      yield* Deferred.succeed(gate, undefined)
      yield* Fiber.join(holder)
      yield* Fiber.join(staying)
      expect(log).toEqual(["a start", "a end", "c ran"])
    }))

  it.effect("a waiter interrupted in the instant the lock is handed to it passes the lock on", () =>
    Effect.gen(function*() {
      const actors = yield* PaymentActors.make
      const gate = yield* Deferred.make<void>()
      const waiters: Array<Fiber.Fiber<unknown>> = []
      // The holder ends, its release hands the lock to the first waiter, and in the same step,
      // before that waiter runs, it is interrupted.
      const holder = yield* Effect.forkChild(
        actors.serialize("pay_1", Deferred.await(gate)).pipe(
          Effect.andThen(Effect.withFiber((fiber) => Effect.sync(() => waiters[0]!.interruptUnsafe(fiber.id))))
        )
      )
      yield* settle
      waiters.push(yield* Effect.forkChild(actors.serialize("pay_1", Effect.never)))
      const next = yield* Effect.forkChild(actors.serialize("pay_1", Effect.succeed("next ran")))
      yield* settle
      yield* Deferred.succeed(gate, undefined)
      yield* Fiber.join(holder)
      expect(Exit.hasInterrupts(yield* Fiber.await(waiters[0]!))).toBe(true)
      expect(yield* Fiber.join(next)).toBe("next ran")
    }))
})

describe("PaymentActors.awaitFlow on a clock with a callback timer (the simulator's)", () => {
  /** Runs `body` under virtual time from 0 until everything settled; returns its result and when it ended. */
  const runVirtual = <A>(body: (actors: PaymentActors.PaymentActorsShape, time: VirtualTime) => Effect.Effect<A>) => {
    const time = new VirtualTime(0)
    const runtime = time.runtime(1)
    let result: { readonly value: A; readonly atMs: number } | undefined
    const scope = Effect.runSync(Scope.make())
    Effect.runForkWith(runtime)(
      Effect.flatMap(
        Scope.provide(PaymentActors.make, scope),
        (actors) =>
          Effect.tap(body(actors, time), (value) => Effect.sync(() => void (result = { value, atMs: time.nowMs })))
      )
    )
    time.run()
    return { result, time }
  }

  it("returns when the flow ends, before the timeout, and leaves no timer behind", () => {
    const { result, time } = runVirtual((actors) =>
      Effect.gen(function*() {
        const flow = yield* actors.startFlow("pay_1", Effect.sleep(3_000))
        yield* actors.awaitFlow(flow, 5_000)
        return flow.pollUnsafe() !== undefined
      })
    )
    expect(result).toEqual({ value: true, atMs: 3_000 })
    // A timer left armed would have moved virtual time on to 5 s.
    expect(time.nowMs).toBe(3_000)
  })

  it("returns at the timeout while the flow goes on", () => {
    const ended: Array<number> = []
    const { result, time } = runVirtual((actors, time) =>
      Effect.gen(function*() {
        const flow = yield* actors.startFlow(
          "pay_1",
          Effect.andThen(Effect.sleep(9_000), Effect.sync(() => void ended.push(time.nowMs)))
        )
        yield* actors.awaitFlow(flow, 5_000)
        return flow.pollUnsafe() === undefined
      })
    )
    expect(result).toEqual({ value: true, atMs: 5_000 })
    expect(ended).toEqual([9_000])
    expect(time.nowMs).toBe(9_000)
  })

  it("returns at once for a flow that has ended", () => {
    const { result } = runVirtual((actors) =>
      Effect.gen(function*() {
        const flow = yield* actors.startFlow("pay_1", Effect.void)
        yield* Fiber.await(flow)
        yield* actors.awaitFlow(flow, 5_000)
        return "done"
      })
    )
    expect(result).toEqual({ value: "done", atMs: 0 })
  })

  it("an interrupted wait cancels its timer and stops observing the flow", () => {
    const { result, time } = runVirtual((actors) =>
      Effect.gen(function*() {
        const flow = yield* actors.startFlow("pay_1", Effect.sleep(1_000))
        const waiting = yield* Effect.forkChild(actors.awaitFlow(flow, 5_000))
        yield* Effect.sleep(100)
        yield* Fiber.interrupt(waiting)
        yield* Fiber.await(flow)
        return Exit.hasInterrupts(yield* Fiber.await(waiting))
      })
    )
    expect(result).toEqual({ value: true, atMs: 1_000 })
    expect(time.nowMs).toBe(1_000)
  })
})

describe("PaymentActors.startFlow", () => {
  it.effect("with a flow already running for the payment, answers that flow (a second start does not start another, and awaiting it waits for it)", () =>
    Effect.gen(function*() {
      const actors = yield* PaymentActors.make
      const gate = yield* Deferred.make<void>()
      let runs = 0
      const flow = Effect.andThen(Effect.sync(() => runs++), Deferred.await(gate))
      const first = yield* actors.startFlow("pay_1", flow)
      yield* settle
      const second = yield* actors.startFlow("pay_1", flow)
      expect(second).toBe(first)
      const waiting = yield* Effect.forkChild(Fiber.await(second))
      yield* settle
      // Not answered at once with an interrupted stand-in: the wait lasts as long as the flow.
      expect(waiting.pollUnsafe()).toBeUndefined()
      yield* Deferred.succeed(gate, undefined)
      expect(Exit.isSuccess(yield* Fiber.join(waiting))).toBe(true)
      expect(runs).toBe(1)
      // Once it has ended, a start runs a new flow.
      yield* actors.startFlow("pay_1", Effect.sync(() => void runs++)).pipe(Effect.flatMap(Fiber.await))
      expect(runs).toBe(2)
    }))
})
