import { describe, expect, it } from "vitest"
import { idTimeMs } from "../../src/domain/Ids.ts"
import { makeIds, seededBytes, sfc32 } from "../../src/platform/Ids.ts"

/**
 * The seeded generator behind the simulator's randomness and its ids: one seed must give the same
 * sequence on every machine and in every version, or a seed (and a replay file) no longer
 * reproduces its run. The expected values are those of the reference sfc32 (splitmix32 seeding,
 * state in plain uint32 arithmetic).
 */
describe("sfc32: the seeded generator", () => {
  it("draws the reference sequence, early and 100,000 draws in", () => {
    const reference: Record<number, ReadonlyArray<number>> = {
      1: [587941090, 3698788925, 2524488572, 3535790054, 330041027, 2125978803, 1112819093, 1554127126, 1879782832],
      0xdeadbeef: [
        3664269045,
        2410741774,
        632354693,
        2669692859,
        2039993387,
        1691691096,
        4024867171,
        2980924946,
        1081172264
      ]
    }
    for (const [seed, expected] of Object.entries(reference)) {
      const next = sfc32(Number(seed))
      const drawn: Array<number> = []
      for (let i = 0; i < 8; i++) drawn.push(next())
      for (let i = 0; i < 99_992; i++) next()
      drawn.push(next())
      expect(drawn).toEqual(expected)
    }
  })

  it("gives seeded ids that repeat with their seed and differ across seeds", () => {
    const mint = (seed: number) => {
      const ids = makeIds(seededBytes(seed), () => 1_795_000_000_000)
      return [ids.mint("payment"), ids.mint("request"), ids.secret("sk_live_")]
    }
    expect(mint(7)).toEqual(mint(7))
    expect(mint(7)).not.toEqual(mint(8))
    expect(mint(7)[0]).toMatch(/^pay_[0-9a-z]{9}[A-Za-z0-9]{14}$/)
    expect(idTimeMs(mint(7)[0]!)).toBe(1_795_000_000_000)
  })
})

describe("time-ordered ids", () => {
  it("sort by the millisecond they were minted, in code-point order and in the default collation", () => {
    let now = 0
    const ids = makeIds(seededBytes(3), () => now)
    const minted: Array<string> = []
    // From the epoch through the years the service runs to the last millisecond the body holds.
    for (
      const ms of [0, 1, 35, 36, 1_295, 1_296, 1_795_000_000_000, 1_795_000_000_001, 2_821_109_907_456, 36 ** 9 - 1]
    ) {
      now = ms
      minted.push(ids.mint("payment"))
      expect(idTimeMs(minted.at(-1)!)).toBe(ms)
    }
    expect([...minted].sort()).toEqual(minted)
    expect([...minted].sort((a, b) => a.localeCompare(b, "en"))).toEqual(minted)
    expect(minted.every((id) => id.length === "pay_".length + 9 + 14)).toBe(true)
  })

  it("keep their random part: ids minted in the same millisecond differ", () => {
    const ids = makeIds(seededBytes(5), () => 1_795_000_000_000)
    const minted = new Set(Array.from({ length: 10_000 }, () => ids.mint("event")))
    expect(minted.size).toBe(10_000)
  })
})
