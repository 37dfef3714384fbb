import { readdirSync, readFileSync, statSync } from "node:fs"
import { join, relative } from "node:path"
import { describe, expect, it } from "vitest"

/**
 * Nothing in src/ may reach for real time or real randomness except through src/platform/
 * (Clock, Random and Ids services), or the simulator could not replay a seed.
 */
const forbidden: ReadonlyArray<readonly [string, RegExp]> = [
  ["Date.now", /\bDate\.now\s*\(/],
  ["new Date() without an argument", /\bnew Date\s*\(\s*\)/],
  ["Math.random", /\bMath\.random\s*\(/],
  ["crypto.randomUUID", /\brandomUUID\s*\(/],
  ["setTimeout", /\bsetTimeout\s*\(/],
  ["setInterval", /\bsetInterval\s*\(/]
]

const root = join(import.meta.dirname, "../..")
const sourceFiles = (dir: string): Array<string> =>
  readdirSync(dir).flatMap((name) => {
    const path = join(dir, name)
    if (statSync(path).isDirectory()) return sourceFiles(path)
    return path.endsWith(".ts") ? [path] : []
  })

/** Comments may mention the forbidden calls (to explain why they are not used). */
const withoutComments = (text: string) => text.replace(/\/\*[\s\S]*?\*\//g, "").replace(/(^|[^:"'`])\/\/.*$/gm, "$1")

describe("determinism lint", () => {
  // The sandbox processor's server is a stand-in for Stripe run as a process of its own (on real
  // time, as Stripe is): the service and the simulator never run it.
  const files = sourceFiles(join(root, "src")).filter((path) => {
    const inSrc = relative(join(root, "src"), path)
    return !inSrc.startsWith("platform") && !inSrc.startsWith(join("acquirer", "sandbox-processor", "Server.ts"))
  })

  it("scans the source tree", () => {
    expect(files.length).toBeGreaterThan(10)
  })

  it.each(files.map((path) => [relative(root, path), path]))("%s uses no real time or randomness", (_name, path) => {
    const lines = withoutComments(readFileSync(path, "utf8")).split("\n")
    const hits = lines.flatMap((line, index) =>
      forbidden.filter(([, pattern]) => pattern.test(line)).map(([what]) =>
        `line ${index + 1}: ${what}: ${line.trim()}`
      )
    )
    expect(hits).toEqual([])
  })
})
