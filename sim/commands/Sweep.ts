import { Effect, Option } from "effect"
import { Argument, Command, Flag } from "effect/cli"
import { readFileSync } from "node:fs"
import { createRequire } from "node:module"
import { availableParallelism } from "node:os"
import { pathToFileURL } from "node:url"
import { Worker } from "node:worker_threads"
import * as Cli from "../../src/platform/Cli.ts"
import { userPath } from "../checks/Replay.ts"
import { defaultOptions, replayCommand, type SimOptions } from "../engine/Options.ts"
import { parseShard, type Shard, shardOf } from "../engine/Shard.ts"
import { drawSwarm, swarmOptions } from "../engine/Swarm.ts"
import { scenarioFlags, scenarioOptions } from "./main.ts"

/**
 * `npm run sim:sweep -- --seeds 1..500 [--jobs N] [--json] [--swarm] [--shard I/N] [any scenario flag of npm run sim]`
 * `npm run sim:sweep -- merge [--json] shard-0.json shard-1.json ...`
 *
 * Runs one simulation per seed in worker threads (one per core by default), shows progress on
 * stderr, and ends with a table of the failed seeds (first violated law, replay command) and a
 * summary. A seed's run depends only on its options, never on which worker ran it or what that
 * worker ran before, so each seed's result (and trace hash: `--json`) is the same whatever
 * `--jobs` is. Defaults for each seed: the 1,500-payment, 30-hour scenario with default faults
 * (20 merchants, webhooks on); `--payments`, `--hours`, `--merchants`, `--faults`, `--mix`,
 * `--planted-bug`, ... change it. Exits 1 when any seed fails, 2 on bad arguments.
 */

export interface SeedOutcome {
  readonly seed: number
  readonly ok: boolean
  /** The first invariant violated (`crashed` when the run threw, `worker-died` when its worker did). */
  readonly firstViolation: string | null
  readonly message: string | null
  readonly violations: number
  readonly traceHash: string
  readonly wallMs: number
}

export interface SweepConfig {
  /** The seeds this sweep runs (its shard of `allSeeds`). */
  readonly seeds: ReadonlyArray<number>
  readonly jobs: number
  /** Every option but the seed (and, with `swarm`, but the faults and the mix). */
  readonly base: SimOptions
  readonly json: boolean
  /** `--swarm`: each seed draws its faults and workload mix (sim/engine/Swarm.ts). */
  readonly swarm: boolean
  /** `--seeds` as given, and every seed it names (all shards together). */
  readonly seedsText: string
  readonly allSeeds: ReadonlyArray<number>
  /** `--shard I/N` (0 ≤ I < N): this sweep runs the seeds at positions I, I+N, ... of `allSeeds` (null: all). */
  readonly shard: Shard | null
}

/** The options one seed of a sweep runs. */
export const seedOptions = (config: Pick<SweepConfig, "base" | "swarm">, seed: number): SimOptions =>
  config.swarm ? swarmOptions(config.base, seed) : { ...config.base, seed }

export interface SweepProgress {
  readonly done: number
  readonly total: number
  readonly failed: number
  readonly elapsedMs: number
}

export interface SweepResult {
  readonly config: SweepConfig
  /** One per seed, in the order of `config.seeds`. */
  readonly outcomes: ReadonlyArray<SeedOutcome>
  readonly wallMs: number
}

/**
 * The worker's entry: tsx's loader registered inside the worker, then sim/commands/sweep-worker.ts, or the
 * bundled sweep-worker.mjs when sim/commands/launch.mjs bundled the sweep. (On
 * Node 20 a worker started on a .ts file with `execArgv: ["--import", "tsx"]`, or inheriting the
 * parent's, fails with "Unknown file extension .ts": the preload does not reach the worker's
 * entry. Registering from an eval'd bootstrap does.)
 */
const workerBootstrap = () => {
  // An eval'd worker has a global `__filename` ("[worker eval]"), which @effect/platform-node 4
  // would take for its module's path (`createRequire(typeof __filename === "string" ? ...)`):
  // it is removed before anything is imported.
  const clean = "delete globalThis.__filename; delete globalThis.__dirname; "
  // Bundled by sim/commands/launch.mjs: the worker's bundle sits next to this code, no loader needed.
  if (import.meta.url.endsWith(".mjs")) {
    return `${clean}import(${JSON.stringify(new URL("./sweep-worker.mjs", import.meta.url).href)})`
  }
  const tsx = pathToFileURL(createRequire(import.meta.url).resolve("tsx/esm/api")).href
  const entry = new URL("./sweep-worker.ts", import.meta.url).href
  return `${clean}import(${JSON.stringify(tsx)}).then(({ register }) => { register(); return import(${
    JSON.stringify(entry)
  }) })`
}

/** The heap limits of the `sim` script in package.json (`--max-old-space-size=12288 --max-semi-space-size=64`). */
const workerLimits = { maxOldGenerationSizeMb: 12_288, maxYoungGenerationSizeMb: 3 * 64 }

/** `1..500`, `7`, `1,5,9`, `1..10,20..30`: seeds in the order given, each once. */
export const parseSeeds = (text: string): ReadonlyArray<number> => {
  const seeds: Array<number> = []
  const seen = new Set<number>()
  const seed = (part: string, s: string) => {
    const n = Number(s)
    if (s.trim() === "" || !Number.isSafeInteger(n) || n < 0) {
      throw new Error(
        `--seeds: '${part}' is not a seed, a range A..B or a comma-separated list of them (seeds are integers ≥ 0)`
      )
    }
    return n
  }
  for (const part of text.split(",").map((p) => p.trim())) {
    const range = part.split("..")
    if (range.length > 2) throw new Error(`--seeds: '${part}' is not a seed or a range A..B`)
    const from = seed(part, range[0]!)
    const to = range.length === 2 ? seed(part, range[1]!) : from
    if (to < from) throw new Error(`--seeds: '${part}' ends before it starts`)
    if (to - from >= 1_000_000) throw new Error(`--seeds: '${part}' has more than a million seeds`)
    for (let n = from; n <= to; n++) {
      if (!seen.has(n)) seeds.push(n)
      seen.add(n)
    }
  }
  return seeds
}

/** The scenario of each seed unless flags change it (the 1,500-payment, 30-hour scenario with default faults). */
export const sweepDefaults: SimOptions = { ...defaultOptions, payments: 1_500, hours: 30 }

/** Flags of `npm run sim` that name one run: refused here, with the reason. */
const notInSweep = {
  seed: "--seed",
  shrink: "--shrink",
  shrinkRuns: "--shrink-runs",
  out: "--out",
  replay: "--replay",
  checkDeterminism: "--check-determinism"
} as const
const refused = (name: string) => Cli.text(name, "not a sweep option").pipe(Flag.optional, Flag.withHidden)
const refusedToggle = (name: string) => Cli.toggle(name, "not a sweep option").pipe(Flag.withHidden)

const sweepFlags = {
  seeds: Cli.text("seeds", "the seeds: 7, 1..500, 1,5,9 or 1..10,20..30 (required)").pipe(Flag.optional),
  jobs: Cli.integer("jobs", "worker threads", {
    min: 1,
    default: availableParallelism(),
    shown: `one per core, ${availableParallelism()} here`
  }),
  shard: Cli.text(
    "shard",
    "I/N (0 <= I < N): run the seeds at positions I, I+N, I+2N, ... of --seeds, to merge with `sim:sweep merge` (default: all)"
  ).pipe(Flag.optional),
  json: Cli.toggle(
    "json",
    "print every seed's outcome and trace hash as JSON instead of the table (what `merge` reads)"
  ),
  ...scenarioFlags(sweepDefaults),
  seed: refused("seed"),
  shrink: refusedToggle("shrink"),
  shrinkRuns: refused("shrink-runs"),
  out: refused("out"),
  replay: refused("replay"),
  checkDeterminism: refusedToggle("check-determinism")
}

type SweepInput = Command.Command.Config.Infer<typeof sweepFlags>

const describeSweep = Command.withDescription(
  "Run one simulation per seed in worker threads (progress on stderr), then a table of the failed seeds with the law each broke first " +
    "and its replay command. Any scenario flag of `npm run sim` changes every seed's run. Exits 0 when every seed passed, 1 when one failed, 2 on bad arguments."
)

/** The sweep a parsed command line asks for; throws an Error with one line for the user when the flags do not fit together. */
export const interpretSweep = (input: SweepInput): SweepConfig => {
  for (const [key, flag] of Object.entries(notInSweep)) {
    const value = input[key as keyof typeof notInSweep]
    if (typeof value === "boolean" ? value : Option.isSome(value)) {
      throw new Error(
        `${flag} is not a sweep option (sweep seeds with --seeds; shrink or replay one failed seed with npm run sim)`
      )
    }
  }
  const seedsText = Cli.given(input.seeds)
  if (seedsText === undefined) throw new Error("--seeds is required, e.g. --seeds 1..500")
  const seeds = parseSeeds(seedsText)
  const shardText = Cli.given(input.shard)
  const shard = shardText === undefined ? null : parseShard(shardText)
  if (input.swarm && (Option.isSome(input.faults) || Option.isSome(input.mix))) {
    throw new Error("--swarm draws each seed's faults and workload mix; remove --faults and --mix")
  }
  // The swarm draw happens per seed (seedOptions), not once for the base.
  const base = scenarioOptions({ ...input, swarm: false }, sweepDefaults)
  const mine = shardOf(seeds, shard)
  return {
    seeds: mine,
    jobs: Math.max(1, Math.min(input.jobs, mine.length)),
    base,
    json: input.json,
    swarm: input.swarm,
    seedsText,
    allSeeds: seeds,
    shard
  }
}

/** `npm run sim:sweep` arguments (without node and the script); throws an Error with one line for the user when they are wrong. */
export const parseSweepArguments = (argv: ReadonlyArray<string>): SweepConfig =>
  interpretSweep(Cli.parseSync(Command.make("sim:sweep", sweepFlags).pipe(describeSweep), argv))

/**
 * Runs every seed of `config` in `config.jobs` worker threads. Seeds are handed out one at a
 * time as workers free up; a worker that dies (out of memory, say) fails its seed and is
 * replaced.
 */
export const runSweep = (config: SweepConfig, onProgress?: (progress: SweepProgress) => void): Promise<SweepResult> => {
  const start = performance.now()
  const outcomes = new Map<number, SeedOutcome>()
  const total = config.seeds.length
  let next = 0
  let failed = 0
  let live = 0
  return new Promise((resolve) => {
    const finish = () => {
      const wallMs = performance.now() - start
      resolve({ config, outcomes: config.seeds.map((seed) => outcomes.get(seed)!), wallMs })
    }
    if (total === 0) return finish()
    const record = (outcome: SeedOutcome) => {
      outcomes.set(outcome.seed, outcome)
      if (!outcome.ok) failed++
      onProgress?.({ done: outcomes.size, total, failed, elapsedMs: performance.now() - start })
    }
    const spawn = () => {
      const worker = new Worker(workerBootstrap(), { eval: true, resourceLimits: workerLimits })
      live++
      let current: number | undefined
      const feed = () => {
        if (next >= total) {
          current = undefined
          void worker.terminate()
          return
        }
        current = config.seeds[next++]!
        worker.postMessage(seedOptions(config, current) satisfies SimOptions)
      }
      worker.on("message", (outcome: SeedOutcome) => {
        record(outcome)
        feed()
      })
      worker.on("error", (error) => {
        if (current !== undefined) {
          record({
            seed: current,
            ok: false,
            firstViolation: "worker-died",
            message: error.message,
            violations: 1,
            traceHash: "",
            wallMs: 0
          })
          current = undefined
          if (next < total) spawn()
        }
      })
      worker.on("exit", () => {
        live--
        if (live === 0) finish()
      })
      feed()
    }
    for (let i = 0; i < config.jobs; i++) spawn()
  })
}

const duration = (ms: number) => {
  const s = Math.round(ms / 1000)
  return s < 60
    ? `${s}s`
    : s < 3600
    ? `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s`
    : `${Math.floor(s / 3600)}h${String(Math.floor(s / 60) % 60).padStart(2, "0")}m`
}

export const formatProgress = (p: SweepProgress, width = 30): string => {
  const filled = Math.round((p.done / p.total) * width)
  const eta = p.done === 0 ? "?" : duration((p.elapsedMs / p.done) * (p.total - p.done))
  return `[${"#".repeat(filled)}${
    ".".repeat(width - filled)
  }] ${p.done}/${p.total} seeds  ${p.failed} failed  elapsed ${duration(p.elapsedMs)}  ETA ${eta}`
}

/**
 * Progress on stderr: redrawn in place on a terminal, otherwise a line at each tenth of the
 * seeds (and at the end), so that logs stay short.
 */
export const progressReporter = (stream: NodeJS.WriteStream = process.stderr): (p: SweepProgress) => void => {
  let lastTenth = 0
  return (p) => {
    if (p.total === 0) return
    if (stream.isTTY) {
      stream.write(`\r\x1b[K${formatProgress(p)}${p.done === p.total ? "\n" : ""}`)
      return
    }
    const tenth = Math.floor((p.done * 10) / p.total)
    if (tenth > lastTenth || p.done === p.total) {
      lastTenth = tenth
      stream.write(`${formatProgress(p)}\n`)
    }
  }
}

export const summarize = (result: SweepResult) => {
  const failed = result.outcomes.filter((o) => !o.ok).length
  const payments = result.outcomes.length * result.config.base.payments
  return {
    seeds: result.outcomes.length,
    ok: result.outcomes.length - failed,
    failed,
    jobs: result.config.jobs,
    wallSeconds: Number((result.wallMs / 1000).toFixed(2)),
    paymentsPerSecond: Math.round(payments / (result.wallMs / 1000))
  }
}

/** The table of failed seeds and the summary line (stdout). */
export const formatSweep = (result: SweepResult): string => {
  const lines: Array<string> = []
  const failures = result.outcomes.filter((o) => !o.ok)
  const s = summarize(result)
  const o = result.config.base
  lines.push(
    s.failed === 0
      ? `PASS  ${s.seeds} seed${s.seeds === 1 ? "" : "s"}: every law held`
      : `FAIL  ${s.failed} of ${s.seeds} seeds broke a law`
  )
  lines.push(
    `scenario: ${o.merchants} merchants, ${o.payments} payments, ${o.hours} h, webhooks ${o.webhooks ? "on" : "off"}${
      o.plantedBug === "none" ? "" : `, planted bug ${o.plantedBug}`
    }` +
      `${result.config.swarm ? ", swarm (faults and workload drawn per seed)" : ""}${
        result.config.shard === null
          ? ""
          : `, shard ${result.config.shard.index}/${result.config.shard.count} of --seeds ${result.config.seedsText}`
      }`
  )
  if (failures.length > 0) {
    lines.push("")
    lines.push(Cli.table(
      ["seed", "first violated law", "replay"],
      failures.map((f) => {
        const swarm = result.config.swarm
          ? ` (swarm: ${drawSwarm(f.seed).classes.join(" ") || "no faults"}; or --seed ${f.seed} --swarm)`
          : ""
        return [f.seed, f.firstViolation ?? "", `${replayCommand(seedOptions(result.config, f.seed))}${swarm}`]
      }),
      "    "
    ))
    lines.push("")
    lines.push("add --shrink to a replay command to reduce that seed to a minimal replay file")
  }
  lines.push("")
  lines.push(
    `seeds ${s.seeds}  ok ${s.ok}  failed ${s.failed}  jobs ${s.jobs}  wall ${
      duration(result.wallMs)
    } (${s.wallSeconds} s)  ${s.paymentsPerSecond} payments/s`
  )
  return lines.join("\n")
}

/** `--json`: every seed's outcome with its trace hash, and the summary. */
export const sweepJson = (result: SweepResult) => {
  const { seed: _seed, ...scenario } = result.config.base
  const c = result.config
  return {
    scenario,
    swarm: c.swarm,
    seedsText: c.seedsText,
    shard: c.shard === null ? null : `${c.shard.index}/${c.shard.count}`,
    seeds: result.outcomes.map((o) => ({
      seed: o.seed,
      ok: o.ok,
      firstViolation: o.firstViolation,
      message: o.message,
      traceHash: o.traceHash,
      wallMs: Math.round(o.wallMs)
    })),
    summary: summarize(result)
  }
}

type SweepJson = ReturnType<typeof sweepJson>

/**
 * `npm run sim:sweep -- merge [--json] FILE...`: the `--json` outputs of the shards of one sweep
 * (same scenario, same `--seeds`, shards 0..N-1 each once) as one sweep's result, seeds in the order
 * `--seeds` named them: the table (or JSON) one unsharded sweep prints, but for its wall time
 * (the longest shard's) and jobs (all shards' together).
 */
export const mergeShards = (files: ReadonlyArray<SweepJson>): SweepResult => {
  if (files.length === 0) throw new Error("merge: name the shards' --json files")
  const first = files[0]!
  const scenario = JSON.stringify(first.scenario)
  const counts = new Set<number>()
  const taken = new Set<number>()
  const outcomes = new Map<number, SeedOutcome>()
  for (const file of files) {
    if (
      JSON.stringify(file.scenario) !== scenario || file.swarm !== first.swarm || file.seedsText !== first.seedsText
    ) {
      throw new Error("merge: the files are not shards of one sweep (scenario, --swarm or --seeds differ)")
    }
    const shard = file.shard === null
      ? { index: 0, count: 1 }
      : parseShard(file.shard, "a file's shard (numbered from 0)")
    counts.add(shard.count)
    if (taken.has(shard.index)) throw new Error(`merge: shard ${shard.index}/${shard.count} given twice`)
    taken.add(shard.index)
    for (const o of file.seeds) outcomes.set(o.seed, { ...o, violations: o.ok ? 0 : 1 })
  }
  const count = [...counts][0]!
  if (counts.size !== 1 || taken.size !== count) {
    throw new Error(
      `merge: expected shards 0..${[...counts].map((n) => n - 1).join("|")} each once, got ${
        [...taken].sort((a, b) => a - b).join(", ")
      }`
    )
  }
  const allSeeds = parseSeeds(first.seedsText)
  const missing = allSeeds.filter((seed) => !outcomes.has(seed))
  if (missing.length > 0) {
    throw new Error(
      `merge: no outcome for seed(s) ${missing.slice(0, 10).join(", ")}${missing.length > 10 ? ", ..." : ""}`
    )
  }
  const base = { ...(first.scenario as Omit<SimOptions, "seed">), seed: 0 } as SimOptions
  return {
    config: {
      seeds: allSeeds,
      jobs: files.reduce((jobs, file) => jobs + file.summary.jobs, 0),
      base,
      json: false,
      swarm: first.swarm,
      seedsText: first.seedsText,
      allSeeds,
      shard: null
    },
    outcomes: allSeeds.map((seed) => outcomes.get(seed)!),
    wallMs: Math.max(...files.map((file) => file.summary.wallSeconds * 1000))
  }
}

const message = (error: unknown) => String(error instanceof Error ? error.message : error)

/** Prints a sweep's result (table or JSON); fails with exit code 1 when a seed failed. */
const finish = (result: SweepResult, json: boolean) =>
  Effect.suspend(() => {
    console.log(json ? JSON.stringify(sweepJson(result), null, 2) : formatSweep(result))
    return result.outcomes.some((o) => !o.ok) ? Effect.fail(Cli.exitWith(1)) : Effect.void
  })

const merge = Command.make(
  "merge",
  {
    files: Argument.String("file").pipe(
      Argument.withDescription("the --json outputs of the shards (sim:sweep --shard I/N --json)"),
      Argument.variadic({ min: 1 })
    ),
    json: Cli.toggle("json", "print the merged result as JSON instead of the table")
  },
  ({ files, json }) =>
    Effect.suspend(() => {
      let result: SweepResult
      try {
        result = mergeShards(files.map((path) => JSON.parse(readFileSync(userPath(path), "utf8")) as SweepJson))
      } catch (error) {
        return Effect.fail(Cli.usageError(`sim:sweep merge: ${message(error)}`))
      }
      return finish(result, json)
    })
).pipe(
  Command.withDescription(
    "The --json results of the shards of one sweep as the result of one unsharded sweep (table, or --json). Exits 1 when a seed failed."
  )
)

const sweep = Command.make("sim:sweep", sweepFlags, (input) =>
  Effect.gen(function*() {
    let config: SweepConfig
    try {
      config = interpretSweep(input)
    } catch (error) {
      return yield* Cli.usageError(`sim:sweep: ${message(error)}`)
    }
    const report = progressReporter()
    const start = performance.now()
    let last: SweepProgress = { done: 0, total: config.seeds.length, failed: 0, elapsedMs: 0 }
    process.stderr.write(
      `sweeping ${config.seeds.length} seeds${
        config.shard === null ? "" : ` (shard ${config.shard.index}/${config.shard.count} of ${config.allSeeds.length})`
      }${config.swarm ? ", swarm" : ""} in ${config.jobs} worker thread(s)\n`
    )
    // On a terminal the bar also moves between seeds (elapsed, ETA), redrawn every second.
    const ticker = process.stderr.isTTY
      ? setInterval(() => report({ ...last, elapsedMs: performance.now() - start }), 1000)
      : undefined
    if (process.stderr.isTTY) report(last)
    const result = yield* Effect.promise(() =>
      runSweep(config, (p) => {
        last = p
        report(p)
      })
    ).pipe(Effect.ensuring(Effect.sync(() => clearInterval(ticker))))
    yield* finish(result, config.json)
  })).pipe(describeSweep, Command.withSubcommands([merge]))

export const main = () => Cli.runMain(Cli.run(sweep, process.argv.slice(2)))

if (process.argv[1]?.endsWith("Sweep.ts")) main()
