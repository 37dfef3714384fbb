import { readdirSync, readFileSync } from "node:fs"
import { join, resolve } from "node:path"
import { describe, expect, it } from "vitest"

/**
 * The laws stand apart from the code they check: the simulator's and the harness's law code
 * imports from `src/domain`, `src/services` and `src/workers` only types and a short list of
 * documented constants. A law that called the implementation's own rule (`isSettleable`,
 * `nextCutoffMs`) to learn what should have happened would agree with every bug in that rule;
 * sim/checks/Reference.ts restates such rules from the documents instead.
 */

const root = resolve(import.meta.dirname, "../..")

/** The law code: the simulator's checks and webhook audit, and the harness's scenario laws. */
const lawFiles = [
  ...readdirSync(join(root, "sim/checks")).filter((f) => f.endsWith(".ts")).map((f) => `sim/checks/${f}`),
  "sim/world/Endpoints.ts",
  "bench/harness/scenarios/merchants.ts"
]

/** What law code may take from the implementation besides types: data the documents publish, and formatting. */
export const allowed: Readonly<Record<string, ReadonlyArray<string>>> = {
  // An instant as the API writes it (ISO 8601 with milliseconds): formatting, no rule.
  "domain/Time.ts": ["isoAt"],
  // The currencies' minor units (CONTRACT section 1) and the published model's parameters
  // (docs/fraud-model.md), which the explanation law adds up by itself.
  "domain/Fraud.ts": ["minorUnitsPerMajor", "model"],
  // The documented dispute reasons (docs/api.md), which the harness sends.
  "domain/Dispute.ts": ["disputeReasons"]
}

const importPattern = /import\s+(type\s+)?\{([^}]*)\}\s+from\s+"([^"]+)"|import\s+(type\s+)?\*\s+as\s+\w+\s+from\s+"([^"]+)"|import\s+(type\s+)?\w+\s+from\s+"([^"]+)"/g
const checked = /src\/(domain|services|workers)\/(.+\.ts)$/

/** Every value a source text imports from the checked layers that the allow-list does not name. */
export const forbiddenImports = (text: string): Array<string> => {
  const found: Array<string> = []
  for (const match of text.matchAll(importPattern)) {
    const [, typeOnly, names, from, starType, starFrom, defaultType, defaultFrom] = match
    const source = from ?? starFrom ?? defaultFrom ?? ""
    const layer = checked.exec(source)
    if (layer === null) continue
    const module = `${layer[1]}/${layer[2]}`
    if (starFrom !== undefined) {
      if (starType === undefined) found.push(`* from ${module}`)
      continue
    }
    if (defaultFrom !== undefined) {
      if (defaultType === undefined) found.push(`default from ${module}`)
      continue
    }
    if (typeOnly !== undefined) continue
    for (const specifier of (names ?? "").split(",").map((n) => n.trim()).filter((n) => n !== "")) {
      if (specifier.startsWith("type ")) continue
      const name = specifier.split(/\s+as\s+/)[0]!.trim()
      if (!(allowed[module] ?? []).includes(name)) found.push(`${name} from ${module}`)
    }
  }
  return found
}

describe("the laws stand apart from the code they check", () => {
  it("law code imports from src/domain, src/services and src/workers only types and the documented constants allowed", () => {
    const offences: Record<string, Array<string>> = {}
    for (const file of lawFiles) {
      const found = forbiddenImports(readFileSync(join(root, file), "utf8"))
      if (found.length > 0) offences[file] = found
    }
    expect(offences).toEqual({})
  })

  it("the guard sees a law asking the implementation", () => {
    expect(forbiddenImports(`import { isSettleable } from "../../src/domain/Payment.ts"`)).toEqual(["isSettleable from domain/Payment.ts"])
    expect(forbiddenImports(`import { nextCutoffMs as cutoff } from "../../src/workers/Workers.ts"`)).toEqual(["nextCutoffMs from workers/Workers.ts"])
    expect(forbiddenImports(`import * as Payment from "../../src/domain/Payment.ts"`)).toEqual(["* from domain/Payment.ts"])
    expect(forbiddenImports(`import { type Payment, isoAt } from "../../src/domain/Time.ts"`)).toEqual([])
    expect(forbiddenImports(`import type { Payment } from "../../src/domain/Payment.ts"`)).toEqual([])
  })
})
