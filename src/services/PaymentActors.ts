import { Context, Effect, Fiber, FiberMap, Layer } from "effect"

/**
 * One actor per active payment: commands for the same payment run one at a time in this process
 * (the row lock in the store keeps separate processes from interleaving), and the automatic
 * flow of each payment runs as a supervised fiber, at most one per payment.
 */
export interface PaymentActorsShape {
  /** Runs `effect` alone among this payment's commands. */
  readonly serialize: <A, E, R>(paymentId: string, effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>
  /** Starts the payment's flow unless it is running already; returns its fiber. */
  readonly startFlow: (paymentId: string, flow: Effect.Effect<void>) => Effect.Effect<Fiber.RuntimeFiber<void>>
  readonly activeFlows: Effect.Effect<number>
}

export class PaymentActors extends Context.Tag("payments/PaymentActors")<PaymentActors, PaymentActorsShape>() {}

export const make = Effect.gen(function*() {
  const flows = yield* FiberMap.make<string, void>()
  const locks = new Map<string, { readonly semaphore: Effect.Semaphore; users: number }>()

  const serialize = <A, E, R>(paymentId: string, effect: Effect.Effect<A, E, R>) =>
    Effect.acquireUseRelease(
      Effect.sync(() => {
        let lock = locks.get(paymentId)
        if (lock === undefined) {
          lock = { semaphore: Effect.unsafeMakeSemaphore(1), users: 0 }
          locks.set(paymentId, lock)
        }
        lock.users++
        return lock
      }),
      (lock) => lock.semaphore.withPermits(1)(effect),
      (lock) =>
        Effect.sync(() => {
          if (--lock.users === 0) locks.delete(paymentId)
        })
    )

  return PaymentActors.of({
    serialize,
    startFlow: (paymentId, flow) => FiberMap.run(flows, paymentId, flow, { onlyIfMissing: true }),
    activeFlows: FiberMap.size(flows)
  })
})

export const layer = Layer.scoped(PaymentActors, make)
