import { execFileSync } from "node:child_process"
import { expect, it } from "vitest"
import { startNodeFlags } from "../../bench/host.ts"

// `npm start` bounds the service's whole V8 heap, not only its old generation. Node 24 sizes the
// young generation by itself at up to 64 MB semi-spaces (192 MB of young generation beside the
// 192 MB old space), four times Node 20's, and the service's RSS under load grew with it
// (docs/performance.md); `--max-semi-space-size=16` keeps Node 20's size.

/** The V8 flags `npm start` gives node, with PAYMENTS_HEAP_MB at its default (the benchmarks and the harness start the service with them too). */
const startFlags = () => {
  const configured = process.env.PAYMENTS_HEAP_MB
  delete process.env.PAYMENTS_HEAP_MB
  try {
    return startNodeFlags()
  } finally {
    if (configured !== undefined) process.env.PAYMENTS_HEAP_MB = configured
  }
}

it("npm start's heap, old and young generations together, is at most 240 MB", () => {
  const flags = startFlags()
  expect(flags).toContain("--max-old-space-size=192")
  const limit = Number(
    execFileSync(process.execPath, [...flags, "-p", "require('node:v8').getHeapStatistics().heap_size_limit"], {
      encoding: "utf8"
    })
  )
  expect(limit / 2 ** 20).toBeLessThanOrEqual(240)
})
