/**
 * The service with a bug planted on purpose, to prove that the harness's laws catch it over real
 * HTTP (`npm run harness -- --planted-bug NAME`, embedded only; test/harness/). The same layers as
 * `src/main.ts serve` without the demo merchant (src/App.ts), with sim/checks/PlantedBugs.ts's
 * wrappers where the simulator puts them: between the domain's decisions and the store, inside the
 * store (`storeBug`), the webhook store (`webhookStoreBug`), the webhook transport
 * (`transportBug`) and the rate limiter (`rateLimiterBug`). The service code is not edited, and
 * nothing in `src/` reaches this file: a production build never runs it.
 *
 * Bugs of the simulator's own world (its clocks, faults, caches and freezes) find nothing to wrap
 * here: the service then runs as it is.
 */
import { NodeRuntime } from "@effect/platform-node"
import { Context, Effect, Layer } from "effect"
import {
  changeBug,
  decisionBug,
  isPlantedBug,
  needsLockingPath,
  type PlantedBug,
  rateLimiterBug,
  resumedCreateBug,
  storeBug,
  storedChangeBug,
  transportBug,
  webhookStoreBug
} from "../../sim/checks/PlantedBugs.ts"
import { Acquirer, type AcquirerShape, operationKeys } from "../../src/acquirer/Acquirer.ts"
import * as Stripe from "../../src/acquirer/Stripe.ts"
import { InfrastructureLive, serverLayerWith, ServicesLive, teardown } from "../../src/App.ts"
import type { Change } from "../../src/domain/Payment.ts"
import * as RateLimiter from "../../src/http/edge/RateLimiter.ts"
import * as Config from "../../src/platform/Config.ts"
import * as Instance from "../../src/platform/Instance.ts"
import { WebhookTransport } from "../../src/platform/WebhookTransport.ts"
import { Payments } from "../../src/services/Payments.ts"
import { Store, type StoreShape } from "../../src/store/Store.ts"
import { WebhookStore } from "../../src/store/WebhookStore.ts"
import * as SandboxDisputes from "../../src/workers/SandboxDisputes.ts"
import * as WebhookDispatcher from "../../src/workers/WebhookDispatcher.ts"
import * as Workers from "../../src/workers/Workers.ts"

/** The variable naming the bug (`Embedded.ts` sets it from `--planted-bug`). */
export const plantedBugVariable = "HARNESS_PLANTED_BUG"

/**
 * The store with the bug between the decisions and the commits, as sim/checks/Auditor.ts
 * `auditedStore` places it (without the auditor): every commit path (create, open, a command's
 * optimistic commit, the locking path) carries the change the bug makes.
 */
export const plantedStore = (bug: PlantedBug, inner: StoreShape): StoreShape => {
  const store = storeBug(bug, inner)
  const planted = (before: Parameters<typeof changeBug>[1], change: Change) =>
    storedChangeBug(bug, changeBug(bug, before, change))
  return {
    ...store,
    insertPayment: (change, flowOwner) => store.insertPayment(planted(null, resumedCreateBug(bug, change)), flowOwner),
    openPayment: (open) => store.openPayment({ ...open, change: planted(null, open.change) }),
    commitChange: (commit) => store.commitChange({ ...commit, change: planted(commit.before, commit.change) }),
    // Decision-level bugs need the refused decision: commands take the locking path with them.
    readForCommand: needsLockingPath(bug) ? undefined : store.readForCommand,
    updatePayment: (target, decide) =>
      store.updatePayment(target, (payment, fraudCase) => {
        const decision = decisionBug(bug, decide)(payment, fraudCase)
        return decision.ok ? { ok: true, change: planted(payment, decision.change) } : decision
      })
  }
}

/**
 * The Stripe connector with the bug `authorize-retry-new-key` (ACQUIRER=stripe, `--processor`):
 * an authorization asked again after an unknown outcome goes under a new idempotency key (the
 * attempt number in it), so the processor makes a second authorization. Other bugs leave it be.
 */
const plantedAcquirer = (bug: PlantedBug, config: Config.AppConfigShape, acquirer: AcquirerShape): AcquirerShape => {
  if (bug !== "authorize-retry-new-key" || config.stripe === null) return acquirer
  const asked = new Map<string, number>()
  const authorizeKey = (paymentId: string) => {
    const n = asked.get(paymentId) ?? 0
    asked.set(paymentId, n + 1)
    return n === 0 ? operationKeys.authorize(paymentId) : `${operationKeys.authorize(paymentId)}:${n}`
  }
  return Stripe.make({ ...config.stripe, defaultTimeoutMs: config.acquirerTimeoutMs, authorizeKey })
}

/** The production infrastructure with the bug's wrappers in its store, webhook store, webhook transport and acquirer. */
const plantedInfrastructure = (bug: PlantedBug) =>
  InfrastructureLive.pipe(
    Layer.flatMap((context) => {
      const config = Context.get(context, Config.AppConfig)
      const withStore = Context.add(context, Store, plantedStore(bug, Context.get(context, Store)))
      const withWebhooks = Context.add(
        withStore,
        WebhookStore,
        webhookStoreBug(bug, Context.get(context, WebhookStore), { scheduleMs: config.webhookRetryScheduleMs })
      )
      const withAcquirer = Context.add(
        withWebhooks,
        Acquirer,
        plantedAcquirer(bug, config, Context.get(context, Acquirer))
      )
      return Layer.succeedContext(
        Context.add(withAcquirer, WebhookTransport, transportBug(bug, Context.get(context, WebhookTransport)))
      )
    })
  )

const app = (bug: PlantedBug, config: Config.AppConfigShape) =>
  Layer.mergeAll(
    serverLayerWith(config.port, config.host, rateLimiterBug(bug, config.rateLimitPerSecond) ?? RateLimiter.layer),
    Workers.layer,
    WebhookDispatcher.layer,
    SandboxDisputes.layer
  ).pipe(
    Layer.provideMerge(ServicesLive),
    Layer.provideMerge(Instance.layer),
    Layer.provideMerge(plantedInfrastructure(bug))
  )

/** `payments settle --json` with the bug planted: the settlement now, its count printed as JSON. */
const settle = (bug: PlantedBug) =>
  Effect.flatMap(Payments, (payments) => payments.settle(Date.now())).pipe(
    Effect.flatMap((settled) => Effect.sync(() => process.stdout.write(`${JSON.stringify({ settled })}\n`))),
    Effect.provide(ServicesLive.pipe(Layer.provideMerge(plantedInfrastructure(bug))))
  )

if (process.argv[1]?.endsWith("harness/PlantedService.ts")) {
  const bug = process.env[plantedBugVariable] ?? ""
  if (!isPlantedBug(bug)) {
    throw new Error(`${plantedBugVariable}: no planted bug '${bug}' (sim/checks/PlantedBugs.ts lists them)`)
  }
  if (process.argv[2] === "settle") NodeRuntime.runMain(settle(bug), { teardown })
  else {NodeRuntime.runMain(
      Effect.flatMap(Config.AppConfig, (config) => Layer.launch(app(bug, config))).pipe(Effect.provide(Config.layer)),
      { teardown }
    )}
}
