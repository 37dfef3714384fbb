/**
 * The harness's command line, read in one place: every flag checked, a clear message and exit
 * code 2 for a bad one.
 */
import type { LoadModel } from "./LoadModel.ts"
import { type Objective, parseSlo } from "./Slo.ts"

export const usage = `Usage:
  npm run harness -- [options]            drive a scenario against a service, write a report
  npm run harness -- merge A.json B.json ... [--report DIR]
                                          combine the results of several shards into one report

Options:
  --target URL          the service to drive (default: start one on its own embedded PostgreSQL)
  --keys FILE           with --target: merchants' API keys, one sk_live_... a line
  --rate N              open model: N requests per second (default 50); scripts start at N
                        divided by the requests a script sends
  --arrival constant|poisson
                        open model: gaps between starts, constant or exponential (seeded)
  --connections N       closed model: N scripts at a time, as fast as they go (instead of --rate)
  --duration S          seconds of load (default 30)
  --max-requests N      also stop starting scripts once N requests were sent
  --merchants N         merchants the scenario uses (default: one per 20 requests/s of --rate,
                        at least 5)
  --seed S              seed of the scenario's and the arrivals' random choices (default 1)
  --scenario NAME       merchants (default) | health | any bench/harness/scenarios/NAME.ts
  --shard I/N           this process is shard I (0 to N-1) of N; each keeps its own merchants
  --webhook-host H      host the scenario's webhook endpoints listen on and register (default 127.0.0.1)
  --report DIR          where the JSON result and the HTML page go (default bench/results/harness)
  --slo LIST            objectives, e.g. "p99<250ms,errors<0.1%,rate>100": exit 1 when one is missed
  --timeout MS          client timeout of one request (default 10000)
  --sockets N           keep-alive sockets to the target (default 64)
  --drain S             seconds the scenario may take to drain after the load (default 120)
  --profile DIR         without --target: run the service under V8's CPU profiler, its profile
                        written to DIR when it stops (read it with bench/profile.ts)
  --statements N        without --target: the N statements that took PostgreSQL longest during the
                        load (pg_stat_statements), with their calls per request
  --progress            the live progress line even when stderr is not a terminal
  --help                this text

Exit codes: 0 every law held and every objective was met; 1 a law was violated or an objective
missed; 2 bad command line.`

export interface RunOptions {
  readonly command: "run"
  readonly targetUrl: string | null
  readonly keysFile: string | null
  readonly model: LoadModel
  readonly durationSeconds: number
  readonly maxRequests: number | null
  readonly merchants: number
  readonly seed: number
  readonly scenario: string
  readonly shard: { readonly index: number; readonly count: number }
  readonly webhookHost: string
  readonly reportDirectory: string
  readonly sloText: string | null
  readonly slo: ReadonlyArray<Objective>
  readonly timeoutMs: number
  readonly sockets: number
  readonly drainSeconds: number
  readonly profileDirectory: string | null
  /** How many of the statements that took PostgreSQL longest to list (0: none). */
  readonly statements: number
  readonly progress: boolean
}

export interface MergeOptions {
  readonly command: "merge"
  readonly files: ReadonlyArray<string>
  readonly reportDirectory: string
}

export type Parsed = RunOptions | MergeOptions | { readonly command: "help" } | { readonly command: "error"; readonly message: string }

const defaultReportDirectory = "bench/results/harness"

/** Flags that take a value, and the check each value must pass. */
const valueFlags = [
  "target", "keys", "rate", "arrival", "connections", "duration", "max-requests", "merchants", "seed", "scenario",
  "shard", "webhook-host", "report", "slo", "timeout", "sockets", "drain", "profile",
  "statements"
] as const
type ValueFlag = (typeof valueFlags)[number]
const switchFlags = ["progress", "help"] as const

class BadFlag extends Error {}

/**
 * Merchants when `--merchants` is not given: one per 20 requests a second of the open model, at
 * least 5. A merchant's webhook endpoint is worked by at most 8 attempts at a time, and one
 * attempt in fifty waits out the 2 s timeout: a few merchants at hundreds of requests a second
 * would measure one endpoint's queue, not the service.
 */
export const defaultMerchants = (model: LoadModel) => (model.kind === "open" ? Math.max(5, Math.ceil(model.rate / 20)) : 5)

const whole = (flag: string, text: string, min: number, max: number) => {
  if (!/^\d+$/.test(text) || Number(text) < min || Number(text) > max) {
    throw new BadFlag(`--${flag} must be a whole number from ${min} to ${max}, not '${text}'`)
  }
  return Number(text)
}
const positive = (flag: string, text: string, max: number) => {
  const value = /^\d+(\.\d+)?$/.test(text) ? Number(text) : Number.NaN
  if (!(value > 0 && value <= max)) throw new BadFlag(`--${flag} must be a number above 0 and at most ${max}, not '${text}'`)
  return value
}

export const parseArguments = (argv: ReadonlyArray<string>): Parsed => {
  try {
    if (argv[0] === "merge") return parseMerge(argv.slice(1))
    const values = new Map<ValueFlag, string>()
    const switches = new Set<string>()
    for (let i = 0; i < argv.length; i++) {
      const argument = argv[i]!
      if (!argument.startsWith("--")) throw new BadFlag(`unexpected argument '${argument}'`)
      const [name, inline] = argument.slice(2).split(/=(.*)/s, 2) as [string, string | undefined]
      if ((switchFlags as ReadonlyArray<string>).includes(name)) {
        if (inline !== undefined) throw new BadFlag(`--${name} takes no value`)
        switches.add(name)
        continue
      }
      if (!(valueFlags as ReadonlyArray<string>).includes(name)) throw new BadFlag(`unknown flag --${name}`)
      const value = inline ?? argv[++i]
      if (value === undefined || (inline === undefined && value.startsWith("--"))) throw new BadFlag(`--${name} needs a value`)
      if (values.has(name as ValueFlag)) throw new BadFlag(`--${name} given twice`)
      values.set(name as ValueFlag, value)
    }
    if (switches.has("help")) return { command: "help" }
    const get = (flag: ValueFlag) => values.get(flag)

    if (get("rate") !== undefined && get("connections") !== undefined) throw new BadFlag("--rate and --connections exclude each other: open or closed model")
    if (get("arrival") !== undefined && get("connections") !== undefined) throw new BadFlag("--arrival is for the open model (--rate), not --connections")
    const arrival = get("arrival") ?? "constant"
    if (arrival !== "constant" && arrival !== "poisson") throw new BadFlag(`--arrival must be constant or poisson, not '${arrival}'`)
    const model: LoadModel = get("connections") !== undefined
      ? { kind: "closed", connections: whole("connections", get("connections")!, 1, 10_000) }
      : { kind: "open", rate: positive("rate", get("rate") ?? "50", 1_000_000), arrival }

    const targetText = get("target")
    let targetUrl: string | null = null
    if (targetText !== undefined) {
      let url: URL
      try {
        url = new URL(targetText)
      } catch {
        throw new BadFlag(`--target must be a URL such as http://127.0.0.1:3000, not '${targetText}'`)
      }
      if (url.protocol !== "http:" && url.protocol !== "https:") throw new BadFlag(`--target must be an http or https URL, not '${targetText}'`)
      if (url.search !== "" || url.hash !== "" || url.username !== "" || url.password !== "") throw new BadFlag("--target must be a base URL without query, fragment or credentials")
      targetUrl = url.toString().replace(/\/$/, "")
    }
    const scenario = get("scenario") ?? "merchants"
    if (!/^[a-z][a-z0-9-]{0,63}$/.test(scenario)) throw new BadFlag(`--scenario must be a name such as merchants or health, not '${scenario}'`)
    const keysFile = get("keys") ?? null
    if (keysFile !== null && targetUrl === null) throw new BadFlag("--keys goes with --target (without it the harness creates its own merchants)")
    if (get("profile") !== undefined && targetUrl !== null) throw new BadFlag("--profile profiles the service the harness starts: it does not go with --target")
    if (get("statements") !== undefined && targetUrl !== null) throw new BadFlag("--statements reads the database the harness starts: it does not go with --target")
    if (targetUrl !== null && keysFile === null && scenario !== "health") throw new BadFlag("--target needs --keys FILE: the merchants' API keys, one a line (see docs/harness.md)")

    const shardText = get("shard") ?? "0/1"
    const shard = /^(\d+)\/(\d+)$/.exec(shardText)
    if (shard === null || Number(shard[2]) < 1 || Number(shard[1]) >= Number(shard[2]) || Number(shard[2]) > 10_000) {
      throw new BadFlag(`--shard must be I/N with 0 <= I < N (e.g. 0/4 ... 3/4), not '${shardText}'`)
    }
    const sloText = get("slo") ?? null
    let slo: ReadonlyArray<Objective> = []
    if (sloText !== null) {
      const parsed = parseSlo(sloText)
      if ("error" in parsed) throw new BadFlag(parsed.error)
      slo = parsed.objectives
    }
    const webhookHost = get("webhook-host") ?? "127.0.0.1"
    if (!/^[A-Za-z0-9.:[\]-]{1,253}$/.test(webhookHost)) throw new BadFlag(`--webhook-host must be a host name or address, not '${webhookHost}'`)
    return {
      command: "run",
      targetUrl,
      keysFile,
      model,
      durationSeconds: positive("duration", get("duration") ?? "30", 86_400),
      maxRequests: get("max-requests") === undefined ? null : whole("max-requests", get("max-requests")!, 1, 1_000_000_000),
      merchants: whole("merchants", get("merchants") ?? String(defaultMerchants(model)), 1, 100_000),
      seed: whole("seed", get("seed") ?? "1", 0, 2 ** 32 - 1),
      scenario,
      shard: { index: Number(shard[1]), count: Number(shard[2]) },
      webhookHost,
      reportDirectory: get("report") ?? defaultReportDirectory,
      sloText,
      slo,
      timeoutMs: whole("timeout", get("timeout") ?? "10000", 1, 600_000),
      sockets: whole("sockets", get("sockets") ?? "64", 1, 10_000),
      drainSeconds: positive("drain", get("drain") ?? "120", 86_400),
      profileDirectory: get("profile") ?? null,
      statements: whole("statements", get("statements") ?? "0", 0, 1000),
      progress: switches.has("progress")
    }
  } catch (error) {
    if (error instanceof BadFlag) return { command: "error", message: error.message }
    throw error
  }
}

const parseMerge = (argv: ReadonlyArray<string>): Parsed => {
  const files: Array<string> = []
  let reportDirectory = defaultReportDirectory
  for (let i = 0; i < argv.length; i++) {
    const argument = argv[i]!
    if (argument === "--report") {
      const value = argv[++i]
      if (value === undefined || value.startsWith("--")) throw new BadFlag("--report needs a value")
      reportDirectory = value
    } else if (argument === "--help") {
      return { command: "help" }
    } else if (argument.startsWith("--")) {
      throw new BadFlag(`merge: unknown flag ${argument} (merge takes result files and --report DIR)`)
    } else {
      files.push(argument)
    }
  }
  if (files.length === 0) throw new BadFlag("merge needs at least one result file (the JSON each shard wrote)")
  return { command: "merge", files, reportDirectory }
}
