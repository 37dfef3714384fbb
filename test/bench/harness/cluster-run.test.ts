import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { describe, expect, it } from "vitest"
import { parseArguments, type RunOptions } from "../../../bench/harness/Cli.ts"
import { type Io, runHarness } from "../../../bench/harness/main.ts"
import { planFaults } from "../../../bench/harness/Nemesis.ts"

/**
 * The cluster end to end, kept short: two service processes on one embedded PostgreSQL, the
 * driver alone (the health scenario) spreading requests over them, and the nemesis pausing one,
 * pausing the database and killing one with real signals, each fault on the report's timeline.
 */
describe("the harness on a cluster it breaks", () => {
  it(
    "starts two instances, pauses one, pauses the database, kills one and starts it again, and reports each fault",
    async () => {
      const argv = [
        "--scenario",
        "health",
        "--instances",
        "2",
        "--nemesis",
        "kill,pause,db-pause",
        "--nemesis-every",
        "2s",
        "--rate",
        "100",
        "--duration",
        "8",
        "--seed",
        "11"
      ]
      const parsed = parseArguments(argv)
      if (parsed.command !== "run") throw new Error(JSON.stringify(parsed))
      const options = parsed as RunOptions
      // Seed 11 draws one of each kind, in this order, a second each (half the period).
      expect(
        planFaults(options.nemesis!, { seed: 11, instances: 2, durationMs: 8_000 }).map((
          f
        ) => [f.kind, f.instance, f.atMs, f.lengthMs])
      )
        .toEqual([["pause", 1, 2_000, 1_000], ["db-pause", null, 4_000, 1_000], ["kill", 1, 6_000, 1_000]])
      const directory = mkdtempSync(join(tmpdir(), "payments-harness-cluster-"))
      const lines: Array<string> = []
      const io: Io = { log: (line) => lines.push(line), out: (line) => lines.push(line), progress: null }
      try {
        const { result, files } = await runHarness({ ...options, reportDirectory: directory }, io)
        expect(result.config).toMatchObject({ instances: 2, nemesis: "kill,pause,db-pause every 2s" })
        expect(result.config.target.split(",")).toHaveLength(2)
        const faults = result.faults ?? []
        expect(faults.map((f) => [f.kind, f.instance]), lines.join("\n")).toEqual([["pause", 1], ["db-pause", null], [
          "kill",
          1
        ]])
        expect(faults[0]!.notes).toEqual([
          expect.stringMatching(/^pid \d+ stopped$/),
          expect.stringMatching(/^pid \d+ continued$/)
        ])
        expect(faults[1]!.notes).toEqual([
          expect.stringMatching(/^\d+ PostgreSQL processes stopped$/),
          expect.stringMatching(/^\d+ PostgreSQL processes continued$/)
        ])
        expect(faults[2]!.notes).toEqual([
          expect.stringMatching(/^pid \d+ killed$/),
          expect.stringMatching(/^pid \d+ ready on port \d+$/)
        ])
        for (const fault of faults) {
          expect(fault.end_s).toBeGreaterThanOrEqual(fault.start_s)
          expect(fault.start_s).toBeGreaterThanOrEqual(fault.planned_s - 0.01)
          expect(fault.availability.requests).toBeGreaterThan(0)
        }
        // The paused instance's requests waited; once one was dead, its connections were refused and
        // went on to the other: no request was refused, and none lost but those the kill caught on the wire.
        const overall = result.availability!.overall
        expect(overall).toMatchObject({ requests: result.requests, refused: 0, server_errors: 0 })
        expect(overall.answered + overall.dropped).toBe(result.requests)
        expect(overall.dropped).toBeLessThanOrEqual(10)
        expect(result.availability?.moved_on_refusal).toBeGreaterThan(0)
        expect(result.passed).toBe(true)
        expect(readFileSync(files[1]!, "utf8")).toContain("<title>kill instance 1")
        // Each instance has its own log.
        for (const instance of [0, 1]) {
          expect(existsSync(files[0]!.replace(/\.json$/, `.service-${instance}.log`)))
            .toBe(true)
        }
      } finally {
        rmSync(directory, { recursive: true, force: true })
      }
    },
    180_000
  )
})
