/**
 * A/B: two services (two checkouts, or two entry points of one) measured by `bench/run.ts`
 * alternately, round after round, each run on its own fresh embedded PostgreSQL. The order
 * alternates too (A then B, then B then A), so a drift of the host over the session weighs on
 * both. Prints, per scenario, each side's figures and the B ÷ A ratios as min / median / max over
 * the rounds; writes everything to bench/results/ab-<time>.json.
 *
 *   npm run bench:ab -- --a-dir . --b-dir ../other-checkout [--rounds 3] [--scenarios create,read]
 *                       [--duration 10] [--connections 64] [--cards 0] [--a-entry src/main.ts] [--b-entry src/main.ts]
 *                       [--a-node-flags "..."] [--b-node-flags "..."] [--a-label a] [--b-label b] [--json]
 *
 * Bounded: each run is bounded by bench/run.ts's own watchdog, and there are rounds × scenarios × 2 runs.
 */
import { Command, Flag } from "effect/cli"
import { spawnSync } from "node:child_process"
import { mkdirSync, readFileSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import * as Cli from "../src/platform/Cli.ts"
import { benchScenarios } from "./scenarioNames.ts"

const knownScenarios: ReadonlyArray<string> = benchScenarios

const abCommand = Command.make("bench:ab", {
  aDir: Cli.text("a-dir", "side A's checkout", { default: "." }),
  bDir: Cli.text("b-dir", "side B's checkout", { default: "." }),
  aEntry: Cli.text("a-entry", "side A's entry point", { default: "src/main.ts" }),
  bEntry: Cli.text("b-entry", "side B's entry point", { default: "src/main.ts" }),
  aNodeFlags: Cli.text("a-node-flags", "side A's V8/Node flags (default: those of npm start)").pipe(Flag.optional),
  bNodeFlags: Cli.text("b-node-flags", "side B's V8/Node flags (default: those of npm start)").pipe(Flag.optional),
  aLabel: Cli.text("a-label", "side A's name in the tables", { default: "a" }),
  bLabel: Cli.text("b-label", "side B's name in the tables", { default: "b" }),
  rounds: Cli.integer("rounds", "rounds, each running every scenario on both sides (order alternating)", {
    min: 1,
    max: 10,
    default: 3
  }),
  scenarios: Cli.text("scenarios", `comma-separated scenarios of npm run bench (${knownScenarios.join(", ")})`, {
    default: "create,read"
  }),
  duration: Cli.integer("duration", "seconds of load per run", { min: 1, max: 120, default: 10 }),
  connections: Cli.integer("connections", "connections per run", { min: 1, max: 256, default: 64 }),
  cards: Cli.integer(
    "cards",
    "distinct card tokens the creates cycle through, on both sides (0: all tok_visa, the fraud history's worst case)",
    { min: 0, default: 0 }
  ),
  json: Cli.toggle("json", "print the results (what bench/results/ab-*.json holds) as JSON instead of the tables")
}).pipe(Command.withDescription(
  "Measure two services (two checkouts, or two entry points) with npm run bench, alternately, round after round, each on a fresh embedded PostgreSQL; " +
    "prints each side's figures and the B ÷ A ratios (min / median / max over the rounds). Exits 1 when a ledger audit failed, 2 on bad arguments."
))

const flags = Cli.parseOrExit(abCommand, process.argv.slice(2))
const rounds = flags.rounds
const scenarios = flags.scenarios.split(",").filter((s) => s !== "")
const unknownScenarios = scenarios.filter((s) => !knownScenarios.includes(s))
if (scenarios.length === 0 || unknownScenarios.length > 0) {
  console.error(
    `bench:ab: --scenarios: unknown '${unknownScenarios.join(",")}' (one or more of ${
      knownScenarios.join(", ")
    }, comma-separated)`
  )
  process.exit(Cli.usageExitCode)
}
const duration = String(flags.duration)
const connections = String(flags.connections)
const cards = String(flags.cards)
const sides = [
  { label: flags.aLabel, dir: flags.aDir, entry: flags.aEntry, nodeFlags: Cli.given(flags.aNodeFlags) },
  { label: flags.bLabel, dir: flags.bDir, entry: flags.bEntry, nodeFlags: Cli.given(flags.bNodeFlags) }
] as const

interface Run {
  readonly round: number
  readonly scenario: string
  readonly label: string
  readonly rps: number
  readonly p50: number
  readonly p99: number
  readonly serviceCpuMs: number | null
  readonly postgresCpuMs: number | null
  readonly statements: number | null
  readonly commits: number | null
  readonly walBytes: number | null
  readonly rssMb: number
  readonly statusCodes: Record<string, number>
  readonly auditOk: boolean
  readonly file: string
}

const runOnce = (round: number, scenario: string, side: (typeof sides)[number]): Run => {
  process.stderr.write(`\n=== round ${round}, ${scenario}, ${side.label} (${side.dir} ${side.entry})\n`)
  const result = spawnSync(process.execPath, [
    "--import",
    "tsx",
    "bench/run.ts",
    "--scenario",
    scenario,
    "--duration",
    duration,
    "--connections",
    connections,
    "--cards",
    cards,
    "--no-baselines",
    "--service-dir",
    side.dir,
    "--entry",
    side.entry,
    ...(side.nodeFlags === undefined ? [] : [`--node-flags=${side.nodeFlags}`]),
    "--label",
    side.label
  ], { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"], timeout: (Number(duration) * 4 + 360) * 1000 })
  process.stderr.write(result.stdout ?? "")
  const file = /results: (\S+)/.exec(result.stdout ?? "")?.[1]
  if (file === undefined) {
    throw new Error(`bench/run.ts wrote no result for ${side.label} ${scenario} (exit ${result.status})`)
  }
  const report = JSON.parse(readFileSync(file, "utf8"))
  const audit = report.audit
  return {
    round,
    scenario,
    label: side.label,
    rps: report.service.rps,
    p50: report.service.latency.p50,
    p99: report.service.latency.p99,
    serviceCpuMs: report.service.per_request.service_cpu_ms,
    postgresCpuMs: report.service.per_request.postgres_cpu_ms,
    statements: report.service.per_request.statements,
    commits: report.service.per_request.commits,
    // Results of a bench from before the WAL counter have none.
    walBytes: report.service.per_request.wal_bytes ?? null,
    rssMb: report.service.rss_peak_mb,
    statusCodes: report.service.statusCodes,
    auditOk: audit.unbalanced_groups === 0 && audit.pending_payments === 0 && audit.double_captures === 0 &&
      audit.over_refunded === 0,
    file
  }
}

const runs: Array<Run> = []
for (let round = 1; round <= rounds; round++) {
  for (const scenario of scenarios) {
    const order = round % 2 === 1 ? [sides[0], sides[1]] : [sides[1], sides[0]]
    for (const side of order) runs.push(runOnce(round, scenario, side))
  }
}

const spread = (values: ReadonlyArray<number>) => {
  const sorted = [...values].sort((a, b) => a - b)
  const median = sorted.length % 2 === 1
    ? sorted[(sorted.length - 1) / 2]!
    : (sorted[sorted.length / 2 - 1]! + sorted[sorted.length / 2]!) / 2
  return { min: sorted[0]!, median, max: sorted[sorted.length - 1]! }
}
const figure = (value: number, digits: number) => (Number.isFinite(value) ? value.toFixed(digits) : "n/a")
const show = (s: { min: number; median: number; max: number }, digits: number) =>
  `${figure(s.min, digits)} / ${figure(s.median, digits)} / ${figure(s.max, digits)}`

const metrics: ReadonlyArray<readonly [string, (run: Run) => number | null, number]> = [
  ["req/s", (r) => r.rps, 0],
  ["p50 ms", (r) => r.p50, 0],
  ["p99 ms", (r) => r.p99, 0],
  ["service CPU ms/request", (r) => r.serviceCpuMs, 3],
  ["PostgreSQL CPU ms/request", (r) => r.postgresCpuMs, 3],
  ["statements/request", (r) => r.statements, 2],
  ["commits/request", (r) => r.commits, 2],
  ["WAL bytes/request", (r) => r.walBytes, 0],
  ["RSS peak MB", (r) => r.rssMb, 0]
]

const summary: Record<string, unknown> = {}
const tables: Array<string> = []
for (const scenario of scenarios) {
  const lines: Array<string> = [
    `\n${scenario}: ${rounds} rounds, ${duration} s each, ${connections} connections${
      flags.cards > 0 ? `, ${cards} card tokens` : ""
    } (min / median / max)`
  ]
  const rows: Record<string, unknown> = {}
  const cells: Array<Array<string>> = []
  for (const [name, pick, digits] of metrics) {
    const of = (label: string) => runs.filter((r) => r.scenario === scenario && r.label === label).map(pick)
    const a = of(sides[0].label)
    const b = of(sides[1].label)
    if (a.some((v) => v === null) || b.some((v) => v === null)) continue
    const ratios = a.map((value, i) => (b[i] as number) / (value as number))
    const row = { a: spread(a as Array<number>), b: spread(b as Array<number>), ratio: spread(ratios) }
    rows[name] = row
    cells.push([name, show(row.a, digits), show(row.b, digits), show(row.ratio, 2)])
  }
  lines.push(
    Cli.table(["", sides[0].label, sides[1].label, `${sides[1].label} ÷ ${sides[0].label} (same round)`], cells, "  ")
  )
  const audits = runs.filter((r) => r.scenario === scenario).every((r) => r.auditOk)
  lines.push(`  ledger audits: ${audits ? "all passed" : "FAILED in some run"}`)
  summary[scenario] = rows
  tables.push(lines.join("\n"))
}

mkdirSync("bench/results", { recursive: true })
const file = join("bench/results", `ab-${new Date().toISOString().replace(/[:.]/g, "-")}.json`)
const results = { date: new Date().toISOString(), rounds, duration, connections, cards, sides, runs, summary }
writeFileSync(file, JSON.stringify(results, null, 2) + "\n")
if (flags.json) console.log(JSON.stringify(results, null, 2))
else console.log(`${tables.join("\n")}\n\nresults: ${file}`)
if (runs.some((r) => !r.auditOk)) process.exitCode = 1
