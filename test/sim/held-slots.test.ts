import * as fc from "fast-check"
import { describe, expect, it } from "vitest"
import { HeldSlots } from "../../sim/world/Endpoints.ts"

// The witness of an endpoint's backlog (sim/world/Endpoints.ts `HeldSlots`): the least number of
// POSTs holding a slot at any moment of a span, which `webhook-schedule` reads to allow a retry to
// be late only while its dispatcher had no slot free. Held against counting at every moment that
// can differ: the span's start and each start and end of a hold inside it (holds are half-open:
// one ending when another starts leaves the count as it was).

const leastByCounting = (spans: ReadonlyArray<readonly [number, number]>, fromMs: number, toMs: number) => {
  const moments = [fromMs, ...spans.flatMap(([a, b]) => [a, b])].filter((t) => t >= fromMs && t < toMs)
  let least = Number.POSITIVE_INFINITY
  for (const t of moments) least = Math.min(least, spans.filter(([a, b]) => a <= t && t < b).length)
  return least
}

describe("HeldSlots: the least number of slots held over a span", () => {
  it("equals counting at every moment where the count can change", () => {
    const hold = fc.tuple(fc.integer({ min: 0, max: 200 }), fc.integer({ min: 1, max: 40 }))
    fc.assert(
      fc.property(
        fc.array(hold, { maxLength: 40 }),
        fc.integer({ min: 0, max: 220 }),
        fc.integer({ min: 1, max: 60 }),
        (holds, fromMs, lengthMs) => {
          // Arrivals in time order, as the endpoints record them.
          const spans = [...holds].sort((x, y) => x[0] - y[0]).map(([start, heldMs]) =>
            [start, start + heldMs] as const
          )
          const held = new HeldSlots()
          for (const [a, b] of spans) held.hold("u", a, b)
          expect(held.leastHeld("u", fromMs, fromMs + lengthMs)).toBe(leastByCounting(spans, fromMs, fromMs + lengthMs))
        }
      ),
      { numRuns: 500, seed: 1 }
    )
  })

  it("a hold ending as another starts keeps the count; a gap does not", () => {
    const held = new HeldSlots()
    held.hold("u", 0, 10)
    held.hold("u", 10, 20)
    held.hold("v", 0, 5)
    held.hold("v", 6, 20)
    expect(held.leastHeld("u", 0, 20)).toBe(1)
    expect(held.leastHeld("v", 0, 20)).toBe(0)
    expect(held.leastHeld("w", 0, 20)).toBe(0)
  })
})
