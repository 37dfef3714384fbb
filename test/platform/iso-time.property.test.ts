import * as fc from "fast-check"
import { describe, expect, it } from "vitest"
import { isoText } from "../../src/domain/Time.ts"
import { isoAt } from "../../src/platform/IsoTime.ts"

// The fast path (a second's prefix kept for recent seconds and days) gives exactly what `Date`
// gives, whatever was written before.

const toIso = (ms: number) => {
  try {
    return new Date(ms).toISOString()
  } catch (error) {
    return error instanceof RangeError ? "RangeError" : "other"
  }
}
const isoAtOrError = (ms: number) => {
  try {
    return isoAt(ms)
  } catch (error) {
    return error instanceof RangeError ? "RangeError" : "other"
  }
}

/** Times around now (many sharing seconds and last digits), anywhere, fractional, and out of range. */
const times = fc.oneof(
  fc.integer({ min: 1_767_571_200_000, max: 1_767_571_200_000 + 5_000 }),
  fc.integer({ min: -62_198_755_200_000, max: 253_402_300_799_999 }),
  fc.double({ min: -1e16, max: 1e16, noNaN: false }),
  fc.constantFrom(0, -1, 253_402_300_800_000, 8.64e15, -8.64e15, 8.64e15 + 1, Number.NaN, Infinity)
)

describe("ISO timestamps", () => {
  it("isoAt is toISOString, in any sequence of writes", () => {
    fc.assert(
      fc.property(fc.array(times, { maxLength: 60 }), (sequence) => {
        for (const ms of sequence) expect(isoAtOrError(ms)).toBe(toIso(ms))
      }),
      { numRuns: 2000 }
    )
  })

  it("the domain's plain isoText and the platform's memoized isoAt agree", () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 4_102_444_800_000 }), (ms) => isoText(ms) === isoAt(ms)),
      { numRuns: 2000 }
    )
  })
})
