import { Clock, Duration, Effect, Layer, Schedule } from "effect"
import { sandboxDisputableStatuses, sandboxDisputeNotification, sandboxDisputeTokens } from "../acquirer/Acquirer.ts"
import { AppConfig } from "../platform/Config.ts"
import * as Instance from "../platform/Instance.ts"
import { Payments } from "../services/Payments.ts"
import { Store } from "../store/Store.ts"

/** How often the sandbox network looks for disputes to open or resolve. */
export const sandboxDisputePollInterval = Duration.seconds(5)
/** Payments handled per pass; the rest wait for the next one. */
const passLimit = 100

/**
 * One pass of the sandbox network's disputes (docs/api.md): every `tok_dispute_won` /
 * `tok_dispute_lost` payment still captured or settled (a fully refunded one has nothing left to
 * dispute) and captured `SANDBOX_DISPUTE_OPEN_AFTER` ago gets its dispute opened,
 * and every such dispute open for `SANDBOX_DISPUTE_RESOLVE_AFTER` is resolved with the token's
 * outcome: as notifications through `Payments.applyDisputeNotification`, the path a real
 * acquirer's notifications take, so a pass repeated after a crash changes nothing twice.
 * Returns how many notifications changed a payment.
 */
export const sandboxDisputePass = Effect.gen(function*() {
  const store = yield* Store
  const payments = yield* Payments
  const config = yield* AppConfig
  const now = yield* Clock.currentTimeMillis
  const due = yield* store.paymentsByCardTokenAndDispute({
    cardTokens: Object.keys(sandboxDisputeTokens),
    undisputedStatuses: sandboxDisputableStatuses,
    capturedBefore: now - config.sandboxDisputeOpenAfterMs,
    openedBefore: now - config.sandboxDisputeResolveAfterMs
  }, passLimit)
  let applied = 0
  for (const payment of due) {
    const notification = sandboxDisputeNotification(payment)
    if (notification === null) continue
    const outcome = yield* payments.applyDisputeNotification(notification).pipe(
      // A payment that no longer fits (refunded meanwhile) is skipped; an outage ends the pass.
      Effect.catchTags({
        InvalidState: (refusal) =>
          Effect.as(Effect.logWarning(`sandbox dispute of ${payment.id} refused: ${refusal.message}`), null),
        InvalidInput: (refusal) =>
          Effect.as(Effect.logWarning(`sandbox dispute of ${payment.id} refused: ${refusal.message}`), null),
        NotFound: () => Effect.succeed(null)
      })
    )
    if (outcome?.applied === true) applied++
  }
  return applied
})

/**
 * The sandbox network's dispute worker: serving processes only, on the leader among them
 * (src/platform/Instance.ts); Effect's Clock, so virtual time drives it in tests. A remote
 * processor (ACQUIRER=stripe) sends its own disputes as notifications: the worker is off then.
 */
export const layer = Layer.effectDiscard(
  Effect.gen(function*() {
    const context = yield* Effect.context<Store | Payments | AppConfig>()
    if ((yield* AppConfig).acquirer !== "sandbox") return
    yield* Effect.forkScoped(Instance.whileLeading(
      sandboxDisputePass.pipe(
        Effect.provide(context),
        Effect.catch((error) => Effect.logWarning("sandbox dispute pass failed", error)),
        Effect.repeat(Schedule.spaced(sandboxDisputePollInterval)),
        Effect.asVoid
      )
    ))
  })
)
