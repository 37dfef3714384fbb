/**
 * The harness's command line, read in one place: effect/cli reads the flags and writes --help
 * (src/platform/Cli.ts, as every command of the project); each value is then checked here, with
 * a clear message and exit code 2 for a bad one.
 */
import { Argument, Command, Flag } from "effect/cli"
import { isPlantedBug, plantedBugNames } from "../../sim/checks/PlantedBugs.ts"
import { maxShards, parseShard, type Shard } from "../../sim/engine/Shard.ts"
import * as Cli from "../../src/platform/Cli.ts"
import { parseDurationMs } from "../../src/platform/Config.ts"
import { type CapacitySearch, defaultSearch } from "./Capacity.ts"
import type { LoadModel } from "./LoadModel.ts"
import { faultKinds, type NemesisOptions } from "./Nemesis.ts"
import { type Objective, parseSloFlags, sloSeparator } from "./Slo.ts"
import { parseStages, peakPerS, totalDurationMs } from "./Stages.ts"

export interface RunOptions {
  readonly command: "run"
  readonly targetUrl: string | null
  readonly keysFile: string | null
  readonly model: LoadModel
  readonly durationSeconds: number
  /** `--warmup`: requests issued in this first part of the load are recorded, not judged (0: none). */
  readonly warmupMs: number
  readonly maxRequests: number | null
  readonly merchants: number
  readonly seed: number
  readonly scenario: string
  readonly shard: Shard
  readonly webhookHost: string
  /** `--webhook-port`: the webhook receiver's port (0: any free one). */
  readonly webhookPort: number
  /** `--webhook-url`: the base URL the receiver is registered under (null: `http://<webhookHost>:<port>`). */
  readonly webhookUrl: string | null
  /** `--start-at`: when the load starts, ms since the epoch, once set up (null: as soon as set up). */
  readonly startAtMs: number | null
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
  /** `--prometheus-port`: serve the harness's own metrics on 127.0.0.1 at this port (null: none). */
  readonly prometheusPort: number | null
  /** `--find-capacity`: the search's steps (bench/harness/Capacity.ts); null without it. */
  readonly findCapacity: { readonly stepMs: number; readonly search: CapacitySearch } | null
  /** `--abort-on-fail`: stop the load once an objective is lost for good (bench/harness/Abort.ts). */
  readonly abortOnFail: boolean
  /** `--allow-saturation`: an open-model run that fell behind its offered rate passes (docs/harness.md). */
  readonly allowSaturation: boolean
  // The cluster: several instances, and the faults among them (bench/harness/Nemesis.ts).
  /** Every instance `--target` names, in its order (`targetUrl` is the first); empty without it. */
  readonly targetUrls: ReadonlyArray<string>
  /** Without --target: how many service processes the harness starts on its one database. */
  readonly instances: number
  /** `--nemesis`: the faults and their period; null without it. */
  readonly nemesis: NemesisOptions | null
  /** Without --target: a bug of sim/checks/PlantedBugs.ts planted in the service the harness starts (tests of the laws); null: none. */
  readonly plantedBug: string | null
  /** `--processor`: the service the harness starts talks to the sandbox processor over HTTP (ACQUIRER=stripe); null: the in-process sandbox. */
  readonly processor: { readonly lostAnswerRate: number } | null
}

export interface MergeOptions {
  readonly command: "merge"
  readonly files: ReadonlyArray<string>
  readonly reportDirectory: string
}

export type Parsed = RunOptions | MergeOptions | KeysOptions | { readonly command: "help"; readonly text: string } | {
  readonly command: "error"
  readonly message: string
}

const defaultReportDirectory = "bench/results/harness"

/** A flag with a value, read as text: its check below gives the message a person needs. */
const value = (name: string, description: string) => Cli.text(name, description).pipe(Flag.optional)

const runFlags = {
  target: value(
    "target",
    "the service to drive, or its instances as URLs separated by commas, requests spread over them in turn (default: start it on its own embedded PostgreSQL)"
  ),
  keys: value(
    "keys",
    "with --target: this shard's own keys file, one sk_live_... a line, every key driven by this shard only; or a directory of `keys`'s files (DIR/shard-I.keys)"
  ),
  rate: value(
    "rate",
    "open model: N requests per second; scripts start at N divided by the requests a script sends (default: 50)"
  ),
  arrival: value(
    "arrival",
    "open model: gaps between starts, constant or poisson (exponential, seeded) (default: constant)"
  ),
  connections: value("connections", "closed model: N scripts at a time, as fast as they go (instead of --rate)"),
  duration: value("duration", "seconds of load (default: 30)"),
  stages: value(
    "stages",
    "open model: the offered rate as stages instead of --rate and --duration, DURATION:RATE a plateau, DURATION:FROM-TO a linear ramp, e.g. \"30s:0-200,60s:200,30s:200-0\""
  ),
  warmup: value(
    "warmup",
    "requests whose intended start falls in this first part of the load, e.g. 10s, are recorded but left out of the objectives and the saturation verdict (default: none)"
  ),
  "max-requests": value("max-requests", "also stop starting scripts once N requests were sent (default: no limit)"),
  merchants: value("merchants", "merchants the scenario uses (default: one per 20 requests/s of --rate, at least 5)"),
  seed: value("seed", "seed of the scenario's and the arrivals' random choices (default: 1)"),
  scenario: value("scenario", "merchants, health, or any bench/harness/scenarios/NAME.ts (default: merchants)"),
  shard: value(
    "shard",
    "I/N: this process is shard I (0 to N-1) of N; each keeps its own merchants (with --keys: its own file) (default: 0/1)"
  ),
  "webhook-host": value(
    "webhook-host",
    "host the scenario's webhook endpoints listen on and, without --webhook-url, register (default: 127.0.0.1)"
  ),
  "webhook-port": value(
    "webhook-port",
    "port they listen on, e.g. the one a firewall or NAT forwards (default: any free port)"
  ),
  "webhook-url": value(
    "webhook-url",
    "base URL they are registered under (URL/m/<j>; {shard} stands for the shard's index), for a receiver the target reaches through NAT, a proxy or another host; needs --webhook-port (default: http://<webhook-host>:<port>)"
  ),
  "start-at": value(
    "start-at",
    "ISO time with its zone (2030-01-01T12:00:00Z) or epoch ms: set up, then start the load at that moment, so that shards start together (default: once set up)"
  ),
  report: value("report", `where the JSON result and the HTML page go (default: ${defaultReportDirectory})`),
  slo: Cli.text(
    "slo",
    "objectives, e.g. \"p99<250ms,errors<0.1%,rate>100\", or on one route as the report names it, \"POST /api/v1/transactions:p99<300ms,errors<0.1%\"; may be given several times: exit 1 when one is missed (default: none)"
  ).pipe(Flag.atLeast(0)),
  timeout: value("timeout", "client timeout of one request, ms (default: 10000)"),
  sockets: value("sockets", "keep-alive sockets to the target (default: 64)"),
  drain: value("drain", "seconds the scenario may take to drain after the load (default: 120)"),
  profile: value(
    "profile",
    "without --target: run the service under V8's CPU profiler, its profile written to DIR when it stops (read it with bench/profile.ts)"
  ),
  statements: value(
    "statements",
    "without --target: the N statements that took PostgreSQL longest during the load, with their calls per request (default: 0)"
  ),
  progress: Cli.toggle(
    "progress",
    "the live progress line every second even when stderr is not a terminal (default there: every 5 s)"
  ),
  "prometheus-port": value(
    "prometheus-port",
    "serve the harness's own metrics (offered and achieved rate, latency per route, answers by status, laws violated) in the Prometheus text format at http://127.0.0.1:N/metrics during the run (default: none)"
  ),
  "find-capacity": Cli.toggle(
    "find-capacity",
    "open model: step the offered rate from --rate (default 50) ×1.5 a step until an --slo objective is missed or the service falls behind, then bisect 3 times (12 steps at most); report the highest rate that met every objective and plot latency against offered rate"
  ),
  "step-duration": value("step-duration", "with --find-capacity: each step's load, e.g. 10s or 1m (default: 10s)"),
  "abort-on-fail": Cli.toggle(
    "abort-on-fail",
    "stop the load once an --slo objective is lost for good (missed whatever the planned requests still to come do), drain, check the laws and exit 1 (docs/harness.md)"
  ),
  "allow-saturation": Cli.toggle(
    "allow-saturation",
    "open model: pass a run whose achieved rate fell under 97% of the offered one, or whose driver fell behind (default: such a run fails)"
  ),
  instances: value(
    "instances",
    "without --target: start the service N times on its one embedded PostgreSQL, each on its own port, requests spread over them in turn (default: 1)"
  ),
  nemesis: value(
    "nemesis",
    "without --target: faults to inject during the load, any of kill (kill -9, then a restart on the same port), pause (SIGSTOP, then SIGCONT) and db-pause (SIGSTOP of every PostgreSQL process), separated by commas"
  ),
  processor: value(
    "processor",
    "without --target: the service runs with ACQUIRER=stripe against the sandbox processor the harness serves on 127.0.0.1, losing this share of its answers after acting (0 to 0.5, e.g. 0.05); the laws then also read the processor: one authorization per payment, and payments reconcile finding no difference (default: the in-process sandbox)"
  ),
  "planted-bug": value(
    "planted-bug",
    "without --target, for testing the laws: start the service with this bug of sim/checks/PlantedBugs.ts planted (bench/harness/PlantedService.ts; e.g. retry-from-last-attempt, refund-posting-inverted); the run must fail naming its law (default: none)"
  ),
  "nemesis-every": value(
    "nemesis-every",
    "with --nemesis: one fault every DURATION of load, on an instance drawn from --seed, e.g. 15s or 500ms (default: 15s)"
  )
}
type ValueFlag = Exclude<
  keyof typeof runFlags,
  "progress" | "allow-saturation" | "abort-on-fail" | "find-capacity" | "slo"
>

const description =
  "Drive a scenario's merchants, webhook endpoints and laws over real HTTP against a service (one it starts on its own embedded PostgreSQL, or --target), " +
  "under an open (--rate) or closed (--connections) load model; write a JSON result and an HTML page. " +
  "Exits 0 when every law held and every objective was met, 1 when a law was violated or an objective missed, 2 on a bad command line."

const mergeCommand = Command.make("merge", {
  files: Argument.String("file").pipe(
    Argument.withDescription("the JSON result each shard wrote"),
    Argument.variadic({ min: 1 })
  ),
  report: value("report", `where the merged JSON result and HTML page go (default: ${defaultReportDirectory})`)
}).pipe(
  Command.withDescription(
    "Combine the results of several shards into one report (exit 1 when a law broke or an objective was missed in any)."
  )
)

// ---------------------------------------------------------------------------------------------
// `keys`: merchants for the shards of a run against a target, one keys file each (KeyFile.ts).

export interface KeysOptions {
  readonly command: "keys"
  readonly merchants: number
  readonly shards: number
  readonly outDirectory: string
  /** Base of the webhook URLs registered with the merchants (`{shard}` stands for the shard's index); null: none. */
  readonly webhookUrl: string | null
}

const keysCommand = Command.make("keys", {
  merchants: value("merchants", "merchants to create (required)"),
  shards: value("shards", "shards to deal them to, one keys file each: merchant k goes to shard k mod N (default: 1)"),
  out: value(
    "out",
    "directory of the keys files, shard-0.keys to shard-<N-1>.keys (required; files already there are not overwritten)"
  ),
  "webhook-url": value(
    "webhook-url",
    "register URL/m/<j> as the webhook URL of merchant j of a shard's file, as a run with --webhook-url URL does ({shard} in URL stands for the shard's index) (default: none)"
  )
}).pipe(
  Command.withDescription(
    "Create merchants in the database DATABASE_URL names, as `payments merchant create` does (the same variables: RESPONSE_ENCRYPTION_KEY as the deployment has it), " +
      "and write one keys file per shard for --keys. Exits 2 when DATABASE_URL is not set."
  )
)

// ---------------------------------------------------------------------------------------------

const harnessCommand = Command.make("harness", runFlags).pipe(
  Command.withDescription(description),
  Command.withSubcommands([mergeCommand, keysCommand])
)

class BadFlag extends Error {}

/**
 * Merchants when `--merchants` is not given: one per 20 requests a second of the open model, at
 * least 5. A merchant's webhook endpoint is worked by at most 8 attempts at a time, and one
 * attempt in fifty waits out the 2 s timeout: a few merchants at hundreds of requests a second
 * would measure one endpoint's queue, not the service.
 */
export const defaultMerchants = (
  model: LoadModel
) => (model.kind === "open" ? Math.max(5, Math.ceil(model.rate / 20)) : 5)

const whole = (flag: string, text: string, min: number, max: number) => {
  if (!/^\d+$/.test(text) || Number(text) < min || Number(text) > max) {
    throw new BadFlag(`--${flag} must be a whole number from ${min} to ${max}, not '${text}'`)
  }
  return Number(text)
}
const positive = (flag: string, text: string, max: number) => {
  const value = /^\d+(\.\d+)?$/.test(text) ? Number(text) : Number.NaN
  if (!(value > 0 && value <= max)) {
    throw new BadFlag(`--${flag} must be a number above 0 and at most ${max}, not '${text}'`)
  }
  return value
}

/** `I/N` as every sharded command reads it (sim/engine/Shard.ts), refused as a bad flag. */
const shardFlag = (text: string, flag = "--shard") => {
  try {
    return parseShard(text, flag)
  } catch (error) {
    throw new BadFlag(error instanceof Error ? error.message : String(error))
  }
}

/**
 * Merchants for a capacity search: one per 20 requests a second of the highest rate it may
 * reach, at least 5, at most 40 (40 merchants' keys allow 4,000 requests a second under the
 * production rate limit, far past what one machine serves).
 */
export const capacityMerchants = (search: CapacitySearch) =>
  Math.min(40, Math.max(5, Math.ceil((search.startPerS * search.growth ** (search.maxSteps - 1)) / 20)))

/** `--find-capacity` and `--step-duration`: steps of the open model at rates of its own. */
const capacityFlags = (given: boolean, get: (flag: ValueFlag) => string | undefined, model: LoadModel) => {
  if (!given) {
    if (get("step-duration") !== undefined) throw new BadFlag("--step-duration goes with --find-capacity")
    return null
  }
  for (const other of ["connections", "stages", "duration", "max-requests"] as const) {
    if (get(other) !== undefined) {
      throw new BadFlag(`--find-capacity steps the open model's rate itself: it does not go with --${other}`)
    }
  }
  const text = get("step-duration") ?? "10s"
  const stepMs = parseDurationMs(text)
  if (stepMs === null || stepMs < 1_000 || stepMs > 3_600_000) {
    throw new BadFlag(`--step-duration must be a duration from 1s to 1h such as 10s, not '${text}'`)
  }
  const startPerS = model.kind === "open" ? model.rate : 50
  return { stepMs, search: { startPerS, ...defaultSearch } }
}

/** `--abort-on-fail` needs objectives to lose, and a planned count to lose them against. */
const abortFlag = (
  given: boolean,
  slo: ReadonlyArray<Objective>,
  model: LoadModel,
  maxRequests: string | undefined
) => {
  if (!given) return false
  if (slo.length === 0) throw new BadFlag("--abort-on-fail stops the load when an --slo objective is lost: give --slo")
  if (model.kind === "closed" && maxRequests === undefined) {
    throw new BadFlag(
      "--abort-on-fail needs a planned count of requests: the open model (--rate, --stages) or --max-requests"
    )
  }
  return true
}

/** `--warmup DURATION`: a first part of the load, shorter than the load. */
const warmupFlag = (text: string | undefined, durationSeconds: number) => {
  if (text === undefined) return 0
  const ms = parseDurationMs(text)
  if (ms === null) throw new BadFlag(`--warmup must be a duration such as 10s or 500ms, not '${text}'`)
  if (ms >= durationSeconds * 1000) {
    throw new BadFlag(`--warmup ${text} leaves nothing of the ${durationSeconds} s load to judge`)
  }
  return ms
}

/** `--stages`: the open model along a curve; it replaces --rate and --duration, and is no closed model. */
const stagesModel = (get: (flag: ValueFlag) => string | undefined, arrival: "constant" | "poisson"): LoadModel => {
  for (const other of ["rate", "duration", "connections"] as const) {
    if (get(other) !== undefined) {
      throw new BadFlag(`--stages gives the rate and the duration: it does not go with --${other}`)
    }
  }
  const parsed = parseStages(get("stages")!, 1_000_000)
  if ("error" in parsed) throw new BadFlag(parsed.error)
  if (totalDurationMs(parsed.stages) > 86_400_000) throw new BadFlag("--stages: the stages last more than 24 h in all")
  return { kind: "open", rate: peakPerS(parsed.stages), arrival, stages: parsed.stages }
}

// The cluster's flags: --target as a list, --instances, --nemesis and --nemesis-every.

/** `--target`: one base URL, or several separated by commas (the instances of one service). */
const parseTargets = (text: string): Array<string> => {
  const urls = text.split(",").map((part) => part.trim())
  if (urls.length > 64) throw new BadFlag(`--target names at most 64 instances, not ${urls.length}`)
  return urls.map((part) => {
    let url: URL
    try {
      url = new URL(part)
    } catch {
      throw new BadFlag(
        `--target must be a URL such as http://127.0.0.1:3000, or URLs separated by commas, not '${part}'`
      )
    }
    if (url.protocol !== "http:" && url.protocol !== "https:") {
      throw new BadFlag(`--target must be an http or https URL, not '${part}'`)
    }
    if (url.search !== "" || url.hash !== "" || url.username !== "" || url.password !== "") {
      throw new BadFlag("--target must be a base URL without query, fragment or credentials")
    }
    return url.toString().replace(/\/$/, "")
  })
}

const parseNemesis = (
  kindsText: string | undefined,
  everyText: string | undefined,
  remote: boolean
): NemesisOptions | null => {
  if (kindsText === undefined) {
    if (everyText !== undefined) throw new BadFlag("--nemesis-every goes with --nemesis (the faults to inject)")
    return null
  }
  // Kills and pauses need a hold on the processes, which only the harness that started them has.
  if (remote) {
    throw new BadFlag(
      "--nemesis kills and pauses processes the harness started: it does not go with --target (run it embedded, with --instances)"
    )
  }
  const kinds = [...new Set(kindsText.split(",").map((kind) => kind.trim()))]
  for (const kind of kinds) {
    if (!(faultKinds as ReadonlyArray<string>).includes(kind)) {
      throw new BadFlag(`--nemesis must be faults among ${faultKinds.join(", ")} separated by commas, not '${kind}'`)
    }
  }
  const text = everyText ?? "15s"
  const everyMs = parseDurationMs(text)
  if (everyMs === null || everyMs < 1_000 || everyMs > 3_600_000) {
    throw new BadFlag(`--nemesis-every must be a duration from 1s to 1h such as 15s or 1500ms, not '${text}'`)
  }
  return { kinds: kinds as NemesisOptions["kinds"], everyMs }
}

const parsePlantedBug = (name: string | undefined, remote: boolean): string | null => {
  if (name === undefined) return null
  if (remote) {
    throw new BadFlag("--planted-bug plants a bug in the service the harness starts: it does not go with --target")
  }
  if (!isPlantedBug(name)) {
    throw new BadFlag(
      `--planted-bug must name a bug of sim/checks/PlantedBugs.ts (${plantedBugNames.join(", ")}), not '${name}'`
    )
  }
  return name
}

const parseProcessor = (text: string | undefined, remote: boolean): { readonly lostAnswerRate: number } | null => {
  if (text === undefined) return null
  if (remote) {
    throw new BadFlag(
      "--processor points the service the harness starts at its sandbox processor: it does not go with --target"
    )
  }
  const rate = /^\d+(\.\d+)?$/.test(text) ? Number(text) : Number.NaN
  if (!(rate >= 0 && rate <= 0.5)) {
    throw new BadFlag(`--processor must be the share of answers lost, from 0 to 0.5 such as 0.05, not '${text}'`)
  }
  return { lostAnswerRate: rate }
}

const clusterOptions = (get: (flag: ValueFlag) => string | undefined, targetUrls: ReadonlyArray<string>) => {
  const remote = targetUrls.length > 0
  if (get("instances") !== undefined && remote) {
    throw new BadFlag(
      "--instances starts the service N times: it does not go with --target (name each instance in --target, separated by commas)"
    )
  }
  return {
    targetUrls,
    instances: whole("instances", get("instances") ?? "1", 1, 16),
    nemesis: parseNemesis(get("nemesis"), get("nemesis-every"), remote),
    plantedBug: parsePlantedBug(get("planted-bug"), remote),
    processor: parseProcessor(get("processor"), remote)
  }
}

/** `merge`, parsed on its own: the run's flags do not apply to it. */
const parseMerge = (argv: ReadonlyArray<string>): Parsed => {
  const merge = Cli.parseOnly(mergeCommand, argv)
  switch (merge._tag) {
    case "Help":
      return { command: "help", text: merge.text }
    case "Invalid":
      return { command: "error", message: `merge: ${merge.message}` }
    case "Parsed":
      return {
        command: "merge",
        files: merge.input.files,
        reportDirectory: Cli.given(merge.input.report) ?? defaultReportDirectory
      }
  }
}

/** The load model (open, closed or staged), `--find-capacity`'s search, and how long the load lasts. */
const loadFlags = (get: (flag: ValueFlag) => string | undefined, findCapacityGiven: boolean) => {
  if (get("rate") !== undefined && get("connections") !== undefined) {
    throw new BadFlag("--rate and --connections exclude each other: open or closed model")
  }
  if (get("arrival") !== undefined && get("connections") !== undefined) {
    throw new BadFlag("--arrival is for the open model (--rate), not --connections")
  }
  const arrival = get("arrival") ?? "constant"
  if (arrival !== "constant" && arrival !== "poisson") {
    throw new BadFlag(`--arrival must be constant or poisson, not '${arrival}'`)
  }
  const model: LoadModel = get("stages") !== undefined
    ? stagesModel(get, arrival)
    : get("connections") !== undefined
    ? { kind: "closed", connections: whole("connections", get("connections")!, 1, 10_000) }
    : { kind: "open", rate: positive("rate", get("rate") ?? "50", 1_000_000), arrival }
  const findCapacity = capacityFlags(findCapacityGiven, get, model)
  const durationSeconds = findCapacity !== null
    ? (findCapacity.stepMs * findCapacity.search.maxSteps) / 1000
    : model.kind === "open" && model.stages
    ? totalDurationMs(model.stages) / 1000
    : positive("duration", get("duration") ?? "30", 86_400)
  return { model, findCapacity, durationSeconds }
}

/** The flags that go with `--target` (a service the harness did not start) and those that do not. */
const checkTargetFlags = (
  get: (flag: ValueFlag) => string | undefined,
  { keysFile, scenario, targetUrl }: {
    readonly targetUrl: string | null
    readonly keysFile: string | null
    readonly scenario: string
  }
) => {
  if (keysFile !== null && targetUrl === null) {
    throw new BadFlag("--keys goes with --target (without it the harness creates its own merchants)")
  }
  if (get("profile") !== undefined && targetUrl !== null) {
    throw new BadFlag("--profile profiles the service the harness starts: it does not go with --target")
  }
  if (get("statements") !== undefined && targetUrl !== null) {
    throw new BadFlag("--statements reads the database the harness starts: it does not go with --target")
  }
  if (targetUrl !== null && keysFile === null && scenario !== "health") {
    throw new BadFlag("--target needs --keys FILE: the merchants' API keys, one a line (see docs/harness.md)")
  }
}

/** `--slo`, as given (for the report) and parsed. */
const sloFlags = (texts: ReadonlyArray<string>) => {
  const sloTexts = texts.map((text) => text.trim())
  const sloText = sloTexts.length === 0 ? null : sloTexts.join(sloSeparator)
  let slo: ReadonlyArray<Objective> = []
  if (sloText !== null) {
    const parsed = parseSloFlags(sloTexts)
    if ("error" in parsed) throw new BadFlag(parsed.error)
    slo = parsed.objectives
  }
  return { sloText, slo }
}

export const parseArguments = (argv: ReadonlyArray<string>): Parsed => {
  if (argv[0] === "keys") return parseKeys(argv.slice(1))
  if (argv[0] === "merge") return parseMerge(argv.slice(1))
  const outcome = Cli.parseOnly(harnessCommand, argv)
  switch (outcome._tag) {
    case "Help":
      return { command: "help", text: outcome.text }
    case "Invalid":
      return { command: "error", message: outcome.message }
    case "Parsed":
      break
  }
  const values = outcome.input as Command.Command.Config.Infer<typeof runFlags>
  try {
    const get = (flag: ValueFlag) => Cli.given(values[flag])
    const { model, findCapacity, durationSeconds } = loadFlags(get, values["find-capacity"])
    const targetText = get("target")
    const targetUrls = targetText === undefined ? [] : parseTargets(targetText)
    const targetUrl: string | null = targetUrls[0] ?? null
    const cluster = clusterOptions(get, targetUrls)
    const scenario = get("scenario") ?? "merchants"
    if (!/^[a-z][a-z0-9-]{0,63}$/.test(scenario)) {
      throw new BadFlag(`--scenario must be a name such as merchants or health, not '${scenario}'`)
    }
    const keysFile = get("keys") ?? null
    checkTargetFlags(get, { targetUrl, keysFile, scenario })

    const shard = shardFlag(get("shard") ?? "0/1")
    const { sloText, slo } = sloFlags(values.slo)
    const webhookHost = get("webhook-host") ?? "127.0.0.1"
    if (!/^[A-Za-z0-9.:[\]-]{1,253}$/.test(webhookHost)) {
      throw new BadFlag(`--webhook-host must be a host name or address, not '${webhookHost}'`)
    }
    return {
      command: "run",
      targetUrl,
      keysFile,
      model,
      durationSeconds,
      // With --find-capacity the warm-up is each step's.
      warmupMs: warmupFlag(get("warmup"), findCapacity === null ? durationSeconds : findCapacity.stepMs / 1000),
      maxRequests: get("max-requests") === undefined
        ? null
        : whole("max-requests", get("max-requests")!, 1, 1_000_000_000),
      merchants: whole(
        "merchants",
        get("merchants") ??
          String(findCapacity === null ? defaultMerchants(model) : capacityMerchants(findCapacity.search)),
        1,
        100_000
      ),
      seed: whole("seed", get("seed") ?? "1", 0, 2 ** 32 - 1),
      scenario,
      shard,
      webhookHost,
      ...placementFlags(get, shard),
      reportDirectory: get("report") ?? defaultReportDirectory,
      sloText,
      slo,
      timeoutMs: whole("timeout", get("timeout") ?? "10000", 1, 600_000),
      sockets: whole("sockets", get("sockets") ?? "64", 1, 10_000),
      drainSeconds: positive("drain", get("drain") ?? "120", 86_400),
      profileDirectory: get("profile") ?? null,
      statements: whole("statements", get("statements") ?? "0", 0, 1000),
      progress: values.progress,
      allowSaturation: values["allow-saturation"],
      findCapacity,
      abortOnFail: abortFlag(values["abort-on-fail"], slo, model, get("max-requests")),
      prometheusPort: get("prometheus-port") === undefined
        ? null
        : whole("prometheus-port", get("prometheus-port")!, 1, 65_535),
      ...cluster
    }
  } catch (error) {
    if (error instanceof BadFlag) return { command: "error", message: error.message }
    throw error
  }
}

// ---------------------------------------------------------------------------------------------
// `keys`, and the flags that place a shard among the others: its webhook receiver, its start.

/**
 * A webhook base URL given on the command line: http(s), no query, fragment or credentials, no
 * trailing slash. `placeholder` is allowed in it (and checked in its place as a digit).
 */
const webhookBaseUrl = (flag: string, text: string, placeholder: string | null = null) => {
  let url: URL
  try {
    url = new URL(placeholder === null ? text : text.replaceAll(placeholder, "0"))
  } catch {
    throw new BadFlag(`--${flag} must be a URL such as http://203.0.113.7:9000, not '${text}'`)
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw new BadFlag(`--${flag} must be an http or https URL, not '${text}'`)
  }
  if (url.search !== "" || url.hash !== "" || url.username !== "" || url.password !== "") {
    throw new BadFlag(`--${flag} must be a base URL without query, fragment or credentials`)
  }
  return text.replace(/\/+$/, "")
}

const parseKeys = (argv: ReadonlyArray<string>): Parsed => {
  const outcome = Cli.parseOnly(keysCommand, argv)
  switch (outcome._tag) {
    case "Help":
      return { command: "help", text: outcome.text }
    case "Invalid":
      return { command: "error", message: `keys: ${outcome.message}` }
    case "Parsed":
      break
  }
  try {
    const get = (flag: keyof typeof outcome.input) => Cli.given(outcome.input[flag])
    const merchantsText = get("merchants")
    if (merchantsText === undefined) throw new BadFlag("keys needs --merchants N: how many merchants to create")
    const outDirectory = get("out")
    if (outDirectory === undefined || outDirectory === "") {
      throw new BadFlag("keys needs --out DIR: where the keys files go")
    }
    const merchants = whole("merchants", merchantsText, 1, 100_000)
    const shards = whole("shards", get("shards") ?? "1", 1, maxShards)
    if (merchants < shards) {
      throw new BadFlag(
        `--merchants ${merchants} for --shards ${shards} would leave shard ${merchants}/${shards} without a merchant: give at least one merchant per shard`
      )
    }
    const webhookText = get("webhook-url")
    return {
      command: "keys",
      merchants,
      shards,
      outDirectory,
      webhookUrl: webhookText === undefined ? null : webhookBaseUrl("webhook-url", webhookText, "{shard}")
    }
  } catch (error) {
    if (error instanceof BadFlag) return { command: "error", message: `keys: ${error.message}` }
    throw error
  }
}

/** Where this shard's webhook receiver listens and what it advertises (`{shard}` in --webhook-url: its index, as for `keys`). */
const placementFlags = (get: (flag: ValueFlag) => string | undefined, shard: Shard) => {
  const webhookPort = whole("webhook-port", get("webhook-port") ?? "0", 0, 65_535)
  const webhookText = get("webhook-url")
  if (webhookText !== undefined && webhookPort === 0) {
    throw new BadFlag(
      "--webhook-url advertises a receiver the target reaches through NAT, a proxy or another host, which forwards to a port known in advance: give --webhook-port too"
    )
  }
  const webhookUrl = webhookText === undefined
    ? null
    : webhookBaseUrl("webhook-url", webhookText, "{shard}").replaceAll("{shard}", String(shard.index))
  const startAtText = get("start-at")
  return { webhookPort, webhookUrl, startAtMs: startAtText === undefined ? null : parseStartAt(startAtText) }
}

const isoTime = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::(\d{2})(\.\d{1,9})?)?(Z|[+-]\d{2}:\d{2})$/i

/**
 * `--start-at`: an ISO time with its zone (a time without one would be read in each machine's
 * own zone, and shards in two zones would start hours apart), or milliseconds since the epoch.
 */
export const parseStartAt = (text: string): number => {
  if (/^\d{1,16}$/.test(text)) {
    const ms = Number(text)
    if (ms < 1e11) {
      throw new BadFlag(
        `--start-at ${text} reads as seconds since the epoch: give milliseconds (${text}000) or an ISO time`
      )
    }
    return ms
  }
  const iso = isoTime.exec(text)
  const [, year, month, day, hour, minute, second] = (iso ?? []).map(Number)
  const valid = iso !== null && month! >= 1 && month! <= 12 && day! >= 1 &&
    day! <= new Date(Date.UTC(year!, month!, 0)).getUTCDate() &&
    hour! < 24 && minute! < 60 && (iso[6] === undefined || second! < 60)
  if (!valid) {
    throw new BadFlag(
      `--start-at must be an ISO time with its zone (2030-01-01T12:00:00Z, 2030-01-01T14:00:00+02:00) or milliseconds since the epoch, not '${text}'` +
        (iso === null && /^\d{4}-\d{2}-\d{2}T[\d:.]+$/.test(text)
          ? ": without a zone each machine would read it in its own"
          : "")
    )
  }
  return Date.parse(text.toUpperCase())
}

/** How far in the past a `--start-at` may be when the shard starts (it waits for nothing then). */
export const startAtGraceMs = 5_000
/** How far ahead a `--start-at` may be. */
export const startAtHorizonMs = 86_400_000

/**
 * Why `--start-at` cannot be kept, read against the clock when the shard starts (null: it can).
 * A time already past by more than a few seconds would start this shard apart from the others.
 */
export const startAtProblem = (startAtMs: number, nowMs: number): string | null => {
  const at = new Date(startAtMs).toISOString()
  if (startAtMs < nowMs - startAtGraceMs) {
    return `--start-at ${at} is ${((nowMs - startAtMs) / 1000).toFixed(1)} s in the past (at most ${
      startAtGraceMs / 1000
    } s allowed): ` +
      "this shard would start apart from the others; give every shard a time still ahead"
  }
  if (startAtMs > nowMs + startAtHorizonMs) {
    return `--start-at ${at} is more than ${startAtHorizonMs / 3_600_000} h ahead`
  }
  return null
}
