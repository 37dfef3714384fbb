/**
 * Scenarios by name: `health` is built in (it measures the driver itself); any other name is the
 * module bench/harness/scenarios/NAME.ts, which exports `makeScenario(): Scenario`. Modules are
 * imported when asked for, so the driver builds and runs without them.
 */
import { existsSync } from "node:fs"
import { join } from "node:path"
import { pathToFileURL } from "node:url"
import type { Scenario, SetupContext, Transport } from "./Contract.ts"

/** GET /healthz once per script, no laws: the cost of the driver and the HTTP stack alone. */
export const healthScenario = (): Scenario => {
  let transport: Transport | null = null
  return {
    name: "health",
    requestsPerScript: 1,
    setup: async (context: SetupContext) => {
      transport = context.transport
    },
    runScript: async (_index, intendedStartMs) => {
      await transport!.send({ method: "GET", path: "/healthz", headers: {}, body: null }, intendedStartMs)
    },
    drain: async () => {},
    checkLaws: async () => [],
    close: async () => {}
  }
}

export const scenarioDirectory = join(import.meta.dirname, "scenarios")

export const loadScenario = async (name: string): Promise<Scenario> => {
  if (name === "health") return healthScenario()
  if (!/^[a-z][a-z0-9-]{0,63}$/.test(name)) throw new Error(`no scenario '${name}'`)
  const file = join(scenarioDirectory, `${name}.ts`)
  if (!existsSync(file)) throw new Error(`no scenario '${name}': ${file} does not exist (built in: health)`)
  const module = await import(pathToFileURL(file).href) as { makeScenario?: () => Scenario }
  if (typeof module.makeScenario !== "function") throw new Error(`${file} does not export makeScenario(): Scenario`)
  return module.makeScenario()
}
