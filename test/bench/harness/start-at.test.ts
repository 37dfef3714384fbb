import { describe, expect, it } from "vitest"
import { parseArguments, parseStartAt, startAtProblem } from "../../../bench/harness/Cli.ts"
import { VirtualClock, waitUntilEpoch } from "../../../bench/harness/Clock.ts"
import { type Io, main } from "../../../bench/harness/main.ts"

const noon = Date.UTC(2030, 0, 1, 12, 0, 0)
const error = (argv: Array<string>) => {
  const parsed = parseArguments(argv)
  return parsed.command === "error" ? parsed.message : `parsed as ${parsed.command}`
}

describe("--start-at", () => {
  it("reads an ISO time with its zone, or milliseconds since the epoch", () => {
    expect(parseStartAt("2030-01-01T12:00:00Z")).toBe(noon)
    expect(parseStartAt("2030-01-01T12:00Z")).toBe(noon)
    expect(parseStartAt("2030-01-01t12:00:00.250z")).toBe(noon + 250)
    expect(parseStartAt("2030-01-01T14:00:00+02:00")).toBe(noon)
    expect(parseStartAt(String(noon))).toBe(noon)
    expect(parseArguments(["--start-at", "2030-01-01T12:00:00Z"])).toMatchObject({ command: "run", startAtMs: noon })
    expect(parseArguments([])).toMatchObject({ command: "run", startAtMs: null })
  })

  it("refuses a time it would have to guess at", () => {
    expect(error(["--start-at", "2030-01-01T12:00:00"])).toBe(
      "--start-at must be an ISO time with its zone (2030-01-01T12:00:00Z, 2030-01-01T14:00:00+02:00) or milliseconds since the epoch, not '2030-01-01T12:00:00': without a zone each machine would read it in its own"
    )
    expect(error(["--start-at", "1893499200"])).toBe(
      "--start-at 1893499200 reads as seconds since the epoch: give milliseconds (1893499200000) or an ISO time"
    )
    for (
      const bad of [
        "tomorrow",
        "2030-02-30T12:00:00Z",
        "2030-13-01T12:00:00Z",
        "2030-01-01T24:00:00Z",
        "2030-01-01T12:60:00Z",
        "2030-01-01 12:00:00Z",
        "-5",
        "1.5e12"
      ]
    ) {
      expect(error(["--start-at", bad]), bad).toContain("--start-at must be an ISO time with its zone")
    }
  })

  it("refuses, when the shard starts, a time past by more than a few seconds or more than a day ahead", () => {
    expect(startAtProblem(noon, noon - 60_000)).toBeNull()
    expect(startAtProblem(noon, noon + 4_999)).toBeNull()
    expect(startAtProblem(noon, noon + 5_001)).toBe(
      "--start-at 2030-01-01T12:00:00.000Z is 5.0 s in the past (at most 5 s allowed): this shard would start apart from the others; give every shard a time still ahead"
    )
    expect(startAtProblem(noon + 86_400_001, noon)).toBe("--start-at 2030-01-02T12:00:00.001Z is more than 24 h ahead")
  })

  it("a run given a past time exits 2 before setting anything up", async () => {
    const lines: Array<string> = []
    const io: Io = { log: (line) => lines.push(line), out: (line) => lines.push(line), progress: null }
    expect(
      await main(["--scenario", "health", "--target", "http://127.0.0.1:9", "--start-at", "2001-01-01T00:00:00Z"], io)
    ).toBe(2)
    expect(lines).toHaveLength(1)
    expect(lines[0]).toMatch(/^harness: --start-at 2001-01-01T00:00:00.000Z is \d+\.\d s in the past/)
  })

  it("waits on the clock until the wall clock reads the time, a minute at most between readings", async () => {
    const clock = new VirtualClock(0)
    const base = noon - 150_000
    // A wall clock that runs 1 ms slow per second of the harness's own clock: the wait follows the wall clock.
    const wall = () => base + Math.floor(clock.now() * 0.999)
    const sleeps: Array<number> = []
    const counting = { now: () => clock.now(), sleep: (ms: number) => (sleeps.push(ms), clock.sleep(ms)) }
    const late = await clock.run(waitUntilEpoch(noon, counting, wall))
    expect(wall()).toBeGreaterThanOrEqual(noon)
    expect(late).toBe(0)
    // Two minutes of a minute each, then what the wall clock says is left (120 ms more than the
    // harness's clock would have said), then the last 31 ms.
    expect(sleeps).toEqual([60_000, 60_000, 30_120, 31])
    // A time already past: at once, saying how late.
    expect(await clock.run(waitUntilEpoch(noon, clock, () => noon + 2_500))).toBe(2_500)
  })
})
