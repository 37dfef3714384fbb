import { existsSync, readdirSync, readFileSync } from "node:fs"
import { dirname, join, normalize } from "node:path"
import ts from "typescript"
import { describe, expect, it } from "vitest"

// No two files of src/, sim/, bench/ or scripts/ import each other, directly or around a loop:
// the rooms (docs/architecture.md) only mean something if dependencies run one way. Every import
// counts, type-only ones and dynamic `import("...")` too. A type-only cycle is erased at run time,
// but the two files still cannot be read, moved or tested apart, and it becomes a run-time cycle
// the first time a value is imported along the same edge; a dynamic import is no way out either
// (it only postpones the cycle to when the import runs). A cycle is broken by moving the type or
// constant both sides need to a module both depend on. And src/ imports nothing of the others:
// the service runs in the simulator and under the harness without knowing it.

const root = join(import.meta.dirname, "../..")
const roots = ["src", "sim", "bench", "scripts"] as const
const sourcePattern = /\.(ts|mts|mjs|js)$/

const sourceFiles = (directory: string): Array<string> =>
  readdirSync(join(root, directory), { withFileTypes: true }).flatMap((entry) => {
    const path = join(directory, entry.name)
    if (entry.isDirectory()) return entry.name === "node_modules" || entry.name === "results" ? [] : sourceFiles(path)
    return sourcePattern.test(entry.name) ? [path] : []
  })

/** Relative import specifiers of a source text: imports and re-exports (type-only ones too), `import("...")` and `require("...")`. */
const relativeImports = (text: string): Array<string> =>
  ts.preProcessFile(text, true, true).importedFiles.map((file) => file.fileName).filter((name) => name.startsWith("."))

/** Each file's imports of other files of the set (paths relative to the checkout, with `/`). */
const importGraph = (sources: ReadonlyMap<string, string>): Map<string, Array<string>> => {
  const graph = new Map<string, Array<string>>()
  for (const [file, text] of sources) {
    const targets = relativeImports(text).map((specifier) => normalize(join(dirname(file), specifier)))
      // `./x.js` may name `./x.ts` (TypeScript's own convention); this code base names `.ts` itself.
      .map((target) => sources.has(target) ? target : target.replace(/\.js$/, ".ts"))
      .filter((target) => sources.has(target))
    graph.set(file, [...new Set(targets)])
  }
  return graph
}

/**
 * One cycle per group of files that reach one another (Tarjan's strongly connected components),
 * as the files around it: `[a, b, c, a]`. Sorted, so a failure reads the same on every run.
 */
const importCycles = (graph: ReadonlyMap<string, ReadonlyArray<string>>): Array<Array<string>> => {
  const index = new Map<string, number>()
  const lowest = new Map<string, number>()
  const stack: Array<string> = []
  const onStack = new Set<string>()
  const groups: Array<Array<string>> = []
  const visit = (file: string) => {
    index.set(file, index.size)
    lowest.set(file, index.get(file)!)
    stack.push(file)
    onStack.add(file)
    for (const target of graph.get(file) ?? []) {
      if (!index.has(target)) {
        visit(target)
        lowest.set(file, Math.min(lowest.get(file)!, lowest.get(target)!))
      } else if (onStack.has(target)) {
        lowest.set(file, Math.min(lowest.get(file)!, index.get(target)!))
      }
    }
    if (lowest.get(file) !== index.get(file)) return
    const group: Array<string> = []
    let member: string
    do {
      member = stack.pop()!
      onStack.delete(member)
      group.push(member)
    } while (member !== file)
    if (group.length > 1 || (graph.get(file) ?? []).includes(file)) groups.push(group)
  }
  for (const file of [...graph.keys()].sort()) if (!index.has(file)) visit(file)
  // Within a group, the shortest way from its first file back to itself (breadth first).
  return groups.map((group) => {
    const members = new Set(group)
    const start = [...group].sort()[0]!
    const cameFrom = new Map<string, string>()
    const queue = [start]
    while (queue.length > 0) {
      const file = queue.shift()!
      for (const target of [...(graph.get(file) ?? [])].sort()) {
        if (!members.has(target)) continue
        if (target === start) {
          const cycle = [start]
          for (let at: string | undefined = file; at !== undefined && at !== start; at = cameFrom.get(at)) {
            cycle.splice(1, 0, at)
          }
          return [...cycle, start]
        }
        if (!cameFrom.has(target)) {
          cameFrom.set(target, file)
          queue.push(target)
        }
      }
    }
    return [start, start]
  }).sort((a, b) => a[0]!.localeCompare(b[0]!))
}

const describeCycle = (cycle: ReadonlyArray<string>) => cycle.join(" → ")

describe("import cycles", () => {
  it("are found and named, type-only, re-exported and dynamic imports included", () => {
    const planted = new Map([
      ["sim/engine/A.ts", `import type { B } from "./B.ts"\nexport const a = 1`],
      ["sim/engine/B.ts", `export { c as b } from "../world/C.ts"\nexport type B = number`],
      ["sim/world/C.ts", `export const c = () => import("../engine/A.ts")`],
      ["sim/world/D.ts", `import { a } from "../engine/A.ts"\nimport { Effect } from "effect"`],
      ["src/Self.ts", `import * as self from "./Self.ts"`]
    ])
    expect(importCycles(importGraph(planted)).map(describeCycle)).toEqual([
      "sim/engine/A.ts → sim/engine/B.ts → sim/world/C.ts → sim/engine/A.ts",
      "src/Self.ts → src/Self.ts"
    ])
  })

  const files = roots.flatMap((directory) => existsSync(join(root, directory)) ? sourceFiles(directory) : [])
  const sources = new Map(files.map((file) => [normalize(file), readFileSync(join(root, file), "utf8")]))
  const graph = importGraph(sources)

  it(`there are none between the files of ${roots.join("/, ")}/`, () => {
    // The walk sees the tree: the simulator's run imports its world, the launcher the bundler.
    expect(sources.size).toBeGreaterThan(100)
    expect(graph.get(normalize("sim/engine/Simulator.ts"))).toContain(normalize("sim/world/Workload.ts"))
    expect(graph.get(normalize("sim/commands/launch.mjs"))).toContain(normalize("scripts/bundle.mjs"))
    expect(importCycles(graph).map(describeCycle), "import cycles").toEqual([])
  })

  it("src/ imports nothing of sim/, bench/ or scripts/ (the service does not know it is simulated or measured)", () => {
    const outward = [...graph].flatMap(([file, targets]) =>
      file.startsWith(normalize("src/"))
        ? targets.filter((target) => !target.startsWith(normalize("src/"))).map((target) => `${file} → ${target}`)
        : []
    )
    expect(outward).toEqual([])
  })
})
