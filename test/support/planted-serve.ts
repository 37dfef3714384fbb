/**
 * The service with a planted bug, for tests that prove the harness catches it over HTTP: the
 * same layers as `src/main.ts serve` (src/App.ts `AppLive`, without the demo merchant), the
 * store wrapped by sim/checks/PlantedBugs.ts's `decisionBug` (`PLANTED_BUG`, default
 * `refund-over-remainder`: a refund checked against an inflated capture, so one above the
 * remainder is accepted). The service code is not edited: the bug sits between the domain's
 * decision and the store, where the simulator plants it.
 */
import { NodeRuntime } from "@effect/platform-node"
import { Context, Effect, Layer } from "effect"
import { InfrastructureLive, ServicesLive, serverLayer, teardown } from "../../src/App.ts"
import * as Config from "../../src/platform/Config.ts"
import * as Instance from "../../src/platform/Instance.ts"
import { Store } from "../../src/store/Store.ts"
import * as SandboxDisputes from "../../src/workers/SandboxDisputes.ts"
import * as WebhookDispatcher from "../../src/workers/WebhookDispatcher.ts"
import * as Workers from "../../src/workers/Workers.ts"
import { decisionBug, isPlantedBug } from "../../sim/checks/PlantedBugs.ts"

const bug = process.env.PLANTED_BUG ?? "refund-over-remainder"
if (!isPlantedBug(bug)) throw new Error(`PLANTED_BUG: no planted bug ${bug}`)

const planted = InfrastructureLive.pipe(
  Layer.flatMap((context) => {
    const store = Context.get(context, Store)
    return Layer.succeedContext(Context.add(context, Store, {
      ...store,
      // Decision-level bugs need the refused decision: commands take the locking path.
      readForCommand: undefined,
      updatePayment: (target, decide) => store.updatePayment(target, decisionBug(bug, decide))
    }))
  })
)

const app = (port: number) =>
  Layer.mergeAll(serverLayer(port, "127.0.0.1"), Workers.layer, WebhookDispatcher.layer, SandboxDisputes.layer).pipe(
    Layer.provideMerge(ServicesLive),
    Layer.provideMerge(Instance.layer),
    Layer.provideMerge(planted)
  )

NodeRuntime.runMain(
  Effect.flatMap(Config.AppConfig, (config) => Layer.launch(app(config.port))).pipe(Effect.provide(Config.layer)),
  { teardown }
)
