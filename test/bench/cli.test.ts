import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { describe, expect, it } from "vitest"
import { runNode } from "../support/node.ts"

// bench, bench:report and fraud:train as a person meets them: --help, one line and exit 2 for a
// bad invocation (before any service or database starts), --json for scripts.

const slow = 120_000

const run = (script: string, args: ReadonlyArray<string>) =>
  runNode(["--import", "tsx", script, ...args], { timeoutMs: 60_000 })

describe("bench, bench:report and fraud:train on the command line", () => {
  it("--help names every flag with its default", async () => {
    const [bench, report, train] = await Promise.all([
      run("bench/run.ts", ["--help"]),
      run("bench/report.ts", ["--help"]),
      run("scripts/fraud-train.ts", ["--help"])
    ])
    for (const help of [bench, report, train]) expect(help.code, help.stderr).toBe(0)
    expect(bench.stdout).toMatch(/--duration integer\s+.*\(default: 10\)/)
    expect(bench.stdout).toMatch(/--connections integer\s+.*\(default: 64\)/)
    expect(bench.stdout).toMatch(/--rate integer\s+offered rate/)
    expect(bench.stdout).toMatch(/--scenario choice\s+.*\(default: create\).*analytics/)
    for (
      const flag of [
        "--url",
        "--no-baselines",
        "--cards",
        "--profile",
        "--node-flags",
        "--service-dir",
        "--entry",
        "--label",
        "--statements",
        "--payments",
        "--json"
      ]
    ) {
      expect(bench.stdout).toContain(flag)
    }
    expect(report.stdout).toMatch(/--out string\s+.*\(default: bench\/results\/report.html\)/)
    expect(train.stdout).toMatch(/--seed integer\s+.*\(default: 11\)/)
  }, slow)

  it("refuses a bad flag with one line and exit code 2, starting nothing", async () => {
    const cases: ReadonlyArray<readonly [string, ReadonlyArray<string>, string]> = [
      ["bench/run.ts", ["--duration", "abc"], `--duration: "abc". expected a number`],
      ["bench/run.ts", ["--duration", "121"], "--duration"],
      ["bench/run.ts", ["--scenario", "nope"], "--scenario"],
      ["bench/run.ts", ["--rate", "-5"], "--rate"],
      ["bench/run.ts", ["--bogus"], "Unrecognized flag: --bogus"],
      ["bench/report.ts", ["--bogus"], "Unrecognized flag: --bogus"],
      ["scripts/fraud-train.ts", ["--seed", "-1"], `--seed: "-1". expected a value greater than or equal to 0`]
    ]
    const runs = await Promise.all(cases.map(([script, args]) => run(script, args)))
    for (const [index, result] of runs.entries()) {
      const [script, args, message] = cases[index]!
      expect(result.code, `${script} ${args.join(" ")}`).toBe(2)
      expect(result.stdout).toBe("")
      expect(result.stderr.trim().split("\n")).toHaveLength(1)
      expect(result.stderr).toContain(message)
    }
  }, slow)

  it("bench --rate offers a fixed rate and reports the achieved one beside it; --json prints the results", async () => {
    const [json, table] = [
      await run("bench/run.ts", [
        "--scenario",
        "health",
        "--duration",
        "2",
        "--connections",
        "4",
        "--rate",
        "40",
        "--json"
      ]),
      await run("bench/run.ts", ["--scenario", "health", "--duration", "1", "--connections", "2", "--rate", "30"])
    ]
    expect(json.code, json.stderr).toBe(0)
    const report = JSON.parse(json.stdout)
    expect(report).toMatchObject({ scenario: "health", offered_rate: 40, connections: 4, duration_s: 2 })
    // Closed-loop /healthz runs at thousands a second on this machine; offered 40/s, it stays in the
    // tens. autocannon sends each second's share in bursts, and on a busy host a late timer sends
    // the next burst early (133 requests in 2 s were seen): the bound says the rate was offered, not
    // how exactly a loaded host kept it.
    // WAL per request beside statements and commits: a number (a health check writes next to none).
    expect(typeof report.service.per_request.wal_bytes).toBe("number")
    expect(report.service.per_request.wal_bytes).toBeGreaterThanOrEqual(0)
    expect(report.service.rps).toBeGreaterThan(10)
    expect(report.service.rps).toBeLessThanOrEqual(40 * 2.5)
    expect(table.code, table.stderr).toBe(0)
    expect(table.stdout).toMatch(/requests\/s\s+[\d.]+ achieved of 30 offered/)
    expect(table.stdout).toMatch(/WAL bytes per request\s+\d+/)
  }, 240_000)

  it(
    "bench:wal counts what a create writes: WAL bytes, full-page images, index entries, updates, per create",
    async () => {
      const result = await run("bench/wal.ts", ["--creates", "20", "--warmup", "10", "--batch", "5", "--json"])
      expect(result.code, result.stderr).toBe(0)
      const report = JSON.parse(result.stdout)
      expect(report).toMatchObject({ creates: 20, warmup: 10, batch: 5 })
      const p = report.per_create
      // Every create inserts a payment, its events and ledger entries and a key, each with index entries.
      expect(p.wal_bytes).toBeGreaterThan(1_000)
      expect(p.index_entries).toBeGreaterThan(5)
      expect(p.heap_inserts).toBeGreaterThan(5)
      expect(p.statements).toBeCloseTo(0.4)
      // The first statement only reads: its transaction writes no commit record.
      expect(p.commits).toBeCloseTo(0.2)
      expect(p.fpi_bytes).toBeLessThanOrEqual(p.wal_bytes)
      expect(report.tables.map((t: { table: string }) => t.table)).toEqual(
        expect.arrayContaining(["payments", "ledger_entries", "idempotency_keys"])
      )
      expect(report.wal_by_kind.some((k: { kind: string }) => k.kind === "Btree/INSERT_LEAF")).toBe(true)
    },
    slow
  )

  it("bench:report --json prints what it wrote, as JSON", async () => {
    const directory = mkdtempSync(join(tmpdir(), "bench-report-"))
    try {
      const out = join(directory, "report.html")
      const result = await run("bench/report.ts", ["--json", "--out", out])
      expect(result.code, result.stderr).toBe(0)
      const parsed = JSON.parse(result.stdout)
      expect(parsed.out).toBe(out)
      expect(Array.isArray(parsed.runs)).toBe(true)
    } finally {
      rmSync(directory, { recursive: true, force: true })
    }
  }, slow)
})
