import * as fc from "fast-check"
import { describe, expect, it } from "vitest"
import { addMs as plainAddMs } from "../../src/domain/Time.ts"
import { addMs, canonicalIsoMs, isoAt, isoMs } from "../../src/platform/IsoTime.ts"

// The fast paths (a second's prefix, parsing digit by digit, texts remembered by their last two
// digits) give exactly what `Date` gives, whatever was written or read before.

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

/** Texts: written by `isoAt`, written then changed by one character, and other forms `Date.parse` reads. */
const texts = fc.oneof(
  times.map(toIso).filter((s) => s !== "RangeError"),
  fc.tuple(
    times.map(toIso).filter((s) => s !== "RangeError"),
    fc.nat(30),
    fc.constantFrom("0", "9", "5", ":", "-", "Z", "T", ".", "x", " ")
  ).map(
    ([s, i, c]) => s.slice(0, i % (s.length + 1)) + c + s.slice((i % (s.length + 1)) + 1)
  ),
  fc.constantFrom(
    "2026-01-05T00:00:00Z",
    "2026-01-05",
    "2026-02-30T00:00:00.000Z",
    "0099-01-01T00:00:00.000Z",
    "0100-01-01T00:00:00.000Z",
    "+010000-01-01T00:00:00.000Z",
    "",
    "garbage"
  )
)

type Step = { readonly write: number } | { readonly read: string }
const steps = fc.array(fc.oneof(times.map((write): Step => ({ write })), texts.map((read): Step => ({ read }))), {
  maxLength: 60
})

describe("ISO timestamps", () => {
  it("isoAt is toISOString and isoMs is Date.parse, in any sequence of writes and reads", () => {
    fc.assert(
      fc.property(steps, (sequence) => {
        for (const step of sequence) {
          if ("write" in step) {
            const written = isoAtOrError(step.write)
            expect(written).toBe(toIso(step.write))
            if (written !== "RangeError") expect(isoMs(written)).toBe(Date.parse(written))
          } else {
            expect(isoMs(step.read)).toEqual(Date.parse(step.read))
            const canonical = canonicalIsoMs(step.read)
            if (canonical !== undefined) {
              expect(canonical).toBe(Date.parse(step.read))
              expect(isoAt(canonical)).toBe(step.read)
            }
          }
        }
      }),
      { numRuns: 2000 }
    )
  })

  it("a text with the same last digits as one remembered is parsed, not taken for it", () => {
    const first = isoAt(1_767_571_200_042)
    expect(isoMs(first)).toBe(1_767_571_200_042)
    expect(isoMs("2026-01-05T00:00:01.042Z")).toBe(1_767_571_201_042)
    expect(isoMs("2026-01-05T00:00:00.042Z")).toBe(1_767_571_200_042)
    expect(canonicalIsoMs("2026-01-05T00:00:00.042+")).toBeUndefined()
    expect(addMs(first, 1_000)).toBe("2026-01-05T00:00:01.042Z")
  })

  it("the domain's plain addMs and the platform's memoized one agree", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 4_102_444_800_000 }),
        fc.integer({ min: -86_400_000, max: 86_400_000 }),
        (ms, delta) => {
          const iso = new Date(ms).toISOString()
          return plainAddMs(iso, delta) === addMs(iso, delta)
        }
      ),
      { numRuns: 2000 }
    )
  })
})
