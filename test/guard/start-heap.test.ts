import { execFileSync } from "node:child_process"
import { expect, it } from "vitest"
import { startNodeFlags } from "../../bench/host.ts"

// `npm start` bounds the service's whole V8 heap, not only its old generation: 192 MB of old space
// and 32 MB semi-spaces (96 MB of young generation), 288 MB in all. Node 24 would size the young
// generation by itself at up to 64 MB semi-spaces, 192 MB beside the 192 MB old space: the service
// then spent nearly five times the CPU a request and its RSS passed 300 MB; at 16 MB semi-spaces it
// spent about a sixth more CPU a request than at 32 (docs/performance.md).

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

it("npm start's heap, old and young generations together, is at most 288 MB", () => {
  const flags = startFlags()
  expect(flags).toContain("--max-old-space-size=192")
  const limit = Number(
    execFileSync(process.execPath, [...flags, "-p", "require('node:v8').getHeapStatistics().heap_size_limit"], {
      encoding: "utf8"
    })
  )
  expect(limit / 2 ** 20).toBeLessThanOrEqual(288)
})
