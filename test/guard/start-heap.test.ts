import { execFileSync } from "node:child_process"
import { readFileSync } from "node:fs"
import { resolve } from "node:path"
import { expect, it } from "vitest"

// `npm start` bounds the service's whole V8 heap, not only its old generation. Node 24 sizes the
// young generation by itself at up to 64 MB semi-spaces (192 MB of young generation beside the
// 192 MB old space), four times Node 20's, and the service's RSS under load grew with it
// (docs/performance.md); `--max-semi-space-size=16` keeps Node 20's size.

const root = resolve(import.meta.dirname, "../..")
const start: string = JSON.parse(readFileSync(resolve(root, "package.json"), "utf8")).scripts.start

/** The V8 flags `npm start` gives node, with PAYMENTS_HEAP_MB at its default. */
const startFlags = () => {
  const words = start.replace("${PAYMENTS_HEAP_MB:-192}", "192").split(/\s+/)
  expect(words[0]).toBe("node")
  return words.slice(1, words.indexOf("--import"))
}

it("npm start's heap, old and young generations together, is at most 240 MB", () => {
  const flags = startFlags()
  expect(flags).toContain("--max-old-space-size=192")
  const limit = Number(execFileSync(process.execPath, [...flags, "-p", "require('node:v8').getHeapStatistics().heap_size_limit"], { encoding: "utf8" }))
  expect(limit / 2 ** 20).toBeLessThanOrEqual(240)
})
