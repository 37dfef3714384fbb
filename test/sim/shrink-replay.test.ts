import { execFile } from "node:child_process"
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import { describe, expect, it } from "vitest"
import { parseReplay, readReplayFile, replayFormat } from "../../sim/checks/Replay.ts"
import { defaultMix, defaultOptions, type SimOptions } from "../../sim/engine/Options.ts"
import { runSimulation } from "../../sim/engine/Simulator.ts"

const root = resolve(import.meta.dirname, "../..")
/** Each test runs a few dozen small simulations, some in child processes: minutes on a busy two-core host. */
const slow = 300_000

/**
 * Runs `npm run sim -- ARGS` as a user would (without npm's own start-up), asynchronously: the
 * test process stays free to run a simulation meanwhile.
 */
const sim = (args: ReadonlyArray<string>) =>
  new Promise<{ status: number | null; stdout: string; stderr: string }>((resolvePromise) => {
    execFile(process.execPath, ["--import", "tsx", "sim/commands/main.ts", ...args], {
      cwd: root,
      encoding: "utf8",
      env: { ...process.env, INIT_CWD: root },
      maxBuffer: 64 * 1024 * 1024
    }, (error, stdout, stderr) => {
      resolvePromise({
        status: error === null ? 0 : typeof error.code === "number" ? error.code : null,
        stdout,
        stderr
      })
    })
  })

/** A small run the planted refund bug breaks (as in simulator.test.ts). */
const failing: SimOptions = {
  ...defaultOptions,
  seed: 7,
  merchants: 2,
  payments: 40,
  hours: 3,
  plantedBug: "refund-over-remainder",
  mix: { ...defaultMix, refund: 0.9, overRefund: 0.5 }
}

describe("shrinking and replay", () => {
  it(
    "shrinks a planted bug's scenario to a smaller one that breaks the same law, and its file replays it",
    async () => {
      const dir = mkdtempSync(join(tmpdir(), "sim-shrink-"))
      const shrinkTo = (out: string) =>
        sim([
          "--seed",
          "7",
          "--merchants",
          "2",
          "--payments",
          "40",
          "--hours",
          "3",
          "--planted-bug",
          "refund-over-remainder",
          "--mix",
          JSON.stringify({ refund: 0.9, overRefund: 0.5 }),
          "--shrink",
          "--shrink-runs",
          "60",
          "--out",
          out
        ])
      // The same failing run shrunk twice (in two processes, the test's own thread stays free).
      const [a, b] = [join(dir, "a.json"), join(dir, "b.json")]
      const [first, second] = await Promise.all([shrinkTo(a), shrinkTo(b)])
      expect(first.status).toBe(1)
      expect(first.stdout).toContain("[refunds-within-capture]")
      expect(first.stdout).toMatch(/shrunk in \d+ runs: .* breaks \[refunds-within-capture\] first/)
      expect(first.stdout).toContain(`written ${a}`)
      expect(first.stdout).toContain(`replay: npm run sim -- --replay ${a}`)
      expect(second.status).toBe(1)
      // Deterministic: the same failure shrinks to the same bytes.
      expect(readFileSync(b, "utf8")).toBe(readFileSync(a, "utf8"))

      const file = readReplayFile(a)
      expect(file.firstViolation).toBe("refunds-within-capture")
      expect(file.shrunkFrom).toMatchObject({
        merchants: failing.merchants,
        payments: failing.payments,
        hours: failing.hours
      })
      const s = file.options
      expect(s.merchants).toBeLessThanOrEqual(failing.merchants)
      expect(s.payments).toBeLessThan(failing.payments)
      expect(s.hours).toBeLessThanOrEqual(failing.hours)
      expect({ seed: s.seed, plantedBug: s.plantedBug, mix: s.mix }).toEqual({
        seed: failing.seed,
        plantedBug: failing.plantedBug,
        mix: failing.mix
      })
      expect(runSimulation(file.options).violations[0]?.invariant).toBe("refunds-within-capture")

      const replayed = await sim(["--replay", a])
      expect(replayed.status).toBe(1)
      expect(replayed.stdout).toContain("[refunds-within-capture]")
      expect(replayed.stdout).toContain("replay: first violation refunds-within-capture, as recorded")
    },
    slow
  )

  it("refuses a bad replay file with a clear error naming each problem (exit 2)", async () => {
    const good = { format: replayFormat, firstViolation: null, options: { ...defaultOptions, payments: 5 } }
    expect(parseReplay(JSON.stringify(good)).options.payments).toBe(5)

    const errorOf = (value: unknown) => {
      try {
        parseReplay(typeof value === "string" ? value : JSON.stringify(value))
      } catch (error) {
        return (error as Error).message
      }
      throw new Error("accepted")
    }
    expect(errorOf("{not json")).toContain("not JSON")
    expect(errorOf([1])).toContain("must be a JSON object")
    expect(errorOf({ ...good, format: "v0" })).toContain(`format: must be "${replayFormat}"`)
    expect(errorOf({ ...good, extra: 1 })).toContain("extra: unknown field")
    expect(errorOf({ ...good, options: { ...good.options, speed: 3 } })).toContain("options.speed: unknown field")
    const { hours: _hours, ...withoutHours } = good.options
    expect(errorOf({ ...good, options: withoutHours })).toContain("options.hours: missing")
    expect(errorOf({ ...good, options: { ...good.options, merchants: 0 } })).toContain(
      "options.merchants: must be an integer ≥ 1, got 0"
    )
    expect(errorOf({ ...good, options: { ...good.options, payments: 1.5 } })).toContain(
      "options.payments: must be an integer ≥ 0, got 1.5"
    )
    expect(errorOf({ ...good, options: { ...good.options, webhooks: "yes" } })).toContain(
      "options.webhooks: must be true or false"
    )
    expect(errorOf({ ...good, options: { ...good.options, plantedBug: "nope" } })).toContain(
      "options.plantedBug: must be one of none, "
    )
    expect(errorOf({ ...good, options: { ...good.options, faults: { ...good.options.faults, crashesPerHour: -1 } } }))
      .toContain("options.faults.crashesPerHour: must be a finite number ≥ 0, got -1")
    expect(errorOf({ ...good, options: { ...good.options, mix: { ...good.options.mix, refnd: 0.5 } } })).toContain(
      "options.mix.refnd: unknown field"
    )
    // Every problem at once, not only the first.
    const several = errorOf({ ...good, options: { ...good.options, merchants: -1, hours: "2" } })
    expect(several).toContain("options.merchants")
    expect(several).toContain("options.hours")

    const dir = mkdtempSync(join(tmpdir(), "sim-replay-"))
    const bad = join(dir, "bad.json")
    writeFileSync(bad, JSON.stringify({ ...good, options: { ...good.options, payments: -3 } }))
    const [refused, missing, mixed] = await Promise.all([
      sim(["--replay", bad]),
      sim(["--replay", join(dir, "absent.json")]),
      sim(["--replay", bad, "--payments", "10"])
    ])
    expect(refused.status).toBe(2)
    expect(refused.stderr).toContain(`${bad}: invalid replay file`)
    expect(refused.stderr).toContain("options.payments: must be an integer ≥ 0, got -3")
    expect(refused.stdout).toBe("")

    expect(missing.status).toBe(2)
    expect(missing.stderr).toContain("cannot read")

    expect(mixed.status).toBe(2)
    expect(mixed.stderr).toContain("--replay takes every option from its file")
  }, slow)
})
