import { Clock, Context, Effect, Exit, Fiber, FiberMap, Layer, Option } from "effect"
import type { Payment } from "../domain/Payment.ts"
import { type CallbackTimer, callbackTimerOf } from "../platform/Timers.ts"

/** What a flow ends with: the payment as it left it (nothing when it stopped early or does not say). */
export type FlowEnd = Payment | void

/**
 * One actor per active payment: commands for the same payment run one at a time in this process
 * (the row lock in the store keeps separate processes from interleaving), and the automatic
 * flow of each payment runs as a supervised fiber, at most one per payment.
 */
export interface PaymentActorsShape {
  /** Runs `body` alone among this payment's commands (first come, first served). */
  readonly serialize: <A, E, R>(paymentId: string, body: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>
  /** Starts the payment's flow unless it is running already; returns its fiber. */
  readonly startFlow: (paymentId: string, flow: Effect.Effect<FlowEnd>) => Effect.Effect<Fiber.Fiber<FlowEnd>>
  /** Waits until the flow's fiber ends, at most `timeoutMs` (the flow itself goes on). */
  readonly awaitFlow: (flow: Fiber.Fiber<FlowEnd>, timeoutMs: number) => Effect.Effect<void>
  readonly activeFlows: Effect.Effect<number>
}

export class PaymentActors extends Context.Service<PaymentActors, PaymentActorsShape>()("payments/PaymentActors") {}

/** A command waiting for a payment's lock; `handed` once the lock is its own. */
interface Waiter {
  handed: boolean
  readonly wake: () => void
}

/**
 * A payment's lock while a command holds it: the commands waiting for it, in arrival order.
 * Absent from the map when free, so an idle payment costs nothing.
 */
interface Lock {
  readonly waiting: Array<Waiter>
}

export const make = Effect.gen(function*() {
  const flows = yield* FiberMap.make<string, FlowEnd>()
  const locks = new Map<string, Lock>()
  // The clock's callback timer, looked up once as the webhook dispatcher does (null under TestClock).
  const timer = yield* Clock.clockWith(callbackTimerOf)

  /** Hands the lock to the next waiting command, or frees it. */
  const release = (paymentId: string, lock: Lock) => {
    const next = lock.waiting.shift()
    if (next === undefined) {
      locks.delete(paymentId)
      return
    }
    next.handed = true
    next.wake()
  }

  /** Waits (interruptibly) until `release` hands the lock to `waiter`. */
  const waitFor = (lock: Lock, waiter: { handed: boolean }) =>
    Effect.callback<void>((resume) => {
      const queued: Waiter = Object.assign(waiter, { wake: () => resume(Effect.void) })
      lock.waiting.push(queued)
      return Effect.sync(() => {
        const index = lock.waiting.indexOf(queued)
        if (index >= 0) lock.waiting.splice(index, 1)
      })
    })

  // A hot path (docs/architecture.md): every command and every step of a payment's flow. A free
  // lock is taken synchronously, the common case; the lock is released exactly once, on any exit
  // of the command; a command interrupted while waiting leaves the queue, or, when the lock was
  // handed to it in the same instant, passes it on.
  const serialize = <A, E, R>(paymentId: string, body: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
    Effect.uninterruptibleMask((restore) => {
      const run = (lock: Lock) =>
        Effect.matchCauseEffect(restore(body), {
          onFailure: (cause) => {
            release(paymentId, lock)
            return Effect.failCause(cause)
          },
          onSuccess: (value) => {
            release(paymentId, lock)
            return Effect.succeed(value)
          }
        })
      const held = locks.get(paymentId)
      if (held === undefined) {
        const lock: Lock = { waiting: [] }
        locks.set(paymentId, lock)
        return run(lock)
      }
      const waiter = { handed: false }
      return Effect.flatMap(Effect.exit(restore(waitFor(held, waiter))), (waited) => {
        if (Exit.isSuccess(waited)) return run(held)
        if (waiter.handed) release(paymentId, held)
        return Effect.failCause(waited.cause)
      })
    })

  // A hot path (docs/architecture.md): every create and released review that waits for its flow.
  // One `Effect.callback` on the fiber's exit and the clock's callback timer, where
  // `Effect.timeoutOption(Fiber.await(flow))` races two forked fibers.
  const awaitWithTimer = (flow: Fiber.Fiber<FlowEnd>, timeoutMs: number, timer: CallbackTimer) =>
    Effect.callback<void>((resume) => {
      let removeObserver = () => {}
      const cancelTimer = timer(timeoutMs, () => {
        removeObserver()
        resume(Effect.void)
      })
      // Called at once when the flow has ended already.
      removeObserver = flow.addObserver(() => {
        cancelTimer()
        resume(Effect.void)
      })
      return Effect.sync(() => {
        cancelTimer()
        removeObserver()
      })
    })

  const awaitFlow = (flow: Fiber.Fiber<FlowEnd>, timeoutMs: number): Effect.Effect<void> =>
    timer === null
      // A clock without a callback timer (TestClock).
      ? Effect.asVoid(Effect.timeoutOption(Fiber.await(flow), timeoutMs))
      : awaitWithTimer(flow, timeoutMs, timer)

  return PaymentActors.of({
    awaitFlow,
    serialize,
    // The running flow when there is one: a create retried, a review or a recovery pass waits
    // for it. (`FiberMap.run` with `onlyIfMissing` answers then with one shared, already
    // interrupted fiber, started on Effect's default scheduler: in production the wait ended at
    // once with the payment still in flight, and in the simulator, whose loop never yields to
    // that scheduler, it lasted the whole request deadline.)
    startFlow: (paymentId, flow) =>
      Effect.suspend(() => {
        const running = FiberMap.getUnsafe(flows, paymentId)
        return Option.isSome(running)
          ? Effect.succeed(running.value as Fiber.Fiber<FlowEnd>)
          : FiberMap.run(flows, paymentId, flow, { onlyIfMissing: true })
      }),
    activeFlows: FiberMap.size(flows)
  })
})

export const layer = Layer.effect(PaymentActors, make)
