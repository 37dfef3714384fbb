import { Effect, Option } from "effect"
import { Command, Flag } from "effect/cli"
import * as Cli from "../../src/platform/Cli.ts"
import { readReplayFile } from "../checks/Replay.ts"
import { shrinkToFile } from "../checks/Shrink.ts"
import {
  defaultMix,
  defaultOptions,
  parseFaults,
  plantedBugNames,
  replayCommand,
  type SimOptions,
  type WorkloadMix
} from "../engine/Options.ts"
import { runSimulation, type SimResult } from "../engine/Simulator.ts"
import { swarmOptions } from "../engine/Swarm.ts"

/**
 * `npm run sim -- --seed 42 --merchants 20 --payments 10000 --hours 48 [--faults heavy,crash=2]
 *  [--no-webhooks] [--dispatchers N] [--endpoint-concurrency N] [--planted-bug refund-over-remainder] [--check-determinism] [--mix JSON]
 *  [--swarm (faults and mix drawn from the seed, sim/engine/Swarm.ts)]
 *  [--shrink [--shrink-runs 200] [--out FILE]] [--json]`
 * `npm run sim -- --replay FILE [--shrink [--out FILE]] [--check-determinism]`
 *
 * `--shrink`: when the run fails, fast-check reduces it (sim/checks/Shrink.ts) to a smaller scenario that
 * breaks the same law first, written as a replay file (`--out`, default
 * `sim-failure-<seed>.json`). `--replay FILE` runs the options of such a file (sim/checks/Replay.ts).
 * Exits 0 when every law held, 1 when one broke (or two runs of a seed differed), 2 on bad arguments.
 */
export interface Arguments {
  readonly options: SimOptions
  readonly checkDeterminism: boolean
  readonly shrink: boolean
  readonly shrinkRuns: number
  readonly out: string | undefined
  readonly replay: string | undefined
  /** `--swarm`: the faults and the workload mix are drawn from the seed (sim/engine/Swarm.ts). */
  readonly swarm: boolean
  /** The scenario flags given (refused with `--replay`, whose file holds the scenario). */
  readonly scenarioFlags: ReadonlyArray<string>
  /** `--json`: the result as JSON on stdout instead of the summary. */
  readonly json: boolean
}

/**
 * The flags of one simulated scenario, shared by `sim`, `sim:sweep`, `sim:bench` and `sim:count`.
 * Each is optional: a flag not given takes the command's default (`defaults`, shown in --help).
 */
export const scenarioFlags = (defaults: SimOptions) => ({
  merchants: Cli.integer(
    "merchants",
    `merchants, each with API keys and a webhook endpoint (default: ${defaults.merchants})`,
    { min: 1 }
  ).pipe(Flag.optional),
  payments: Cli.integer("payments", `payments the workload creates (default: ${defaults.payments})`).pipe(
    Flag.optional
  ),
  hours: Cli.integer("hours", `virtual hours the run lasts (default: ${defaults.hours})`, { min: 1 }).pipe(
    Flag.optional
  ),
  faults: Cli.text(
    "faults",
    "fault rates: none, default or heavy, then name=rate changes, e.g. heavy,crash=2 (default: default)"
  ).pipe(Flag.optional),
  noWebhooks: Cli.toggle("no-webhooks", "no webhook endpoints and no deliveries"),
  dispatchers: Cli.integer(
    "dispatchers",
    `webhook dispatchers sharing the store under leases (default: ${defaults.dispatchers})`,
    { min: 1 }
  ).pipe(Flag.optional),
  endpointConcurrency: Cli.integer(
    "endpoint-concurrency",
    `attempts in flight per endpoint and dispatcher (default: ${defaults.endpointConcurrency})`,
    { min: 1 }
  ).pipe(Flag.optional),
  plantedBug: Cli.choice(
    "planted-bug",
    plantedBugNames,
    "a known bug planted in the service, to see a law catch it (default: none)"
  ).pipe(Flag.optional),
  mix: Cli.text(
    "mix",
    "workload mix changes as JSON, e.g. '{\"refund\":0.5}' (default: sim/engine/Options.ts defaultMix)"
  ).pipe(Flag.optional),
  swarm: Cli.toggle("swarm", "draw the faults and the workload mix from the seed (sim/engine/Swarm.ts)"),
  processor: Cli.toggle(
    "processor",
    "the network is a remote processor: captures, cancels and refunds go to it, with its faults plost, pdup, plate, poutage (sim/world/Processor.ts)"
  )
})

type ScenarioInput = Command.Command.Config.Infer<typeof scenarioFlagsShape>
const scenarioFlagsShape = scenarioFlags(defaultOptions)

/** The option names of the scenario flags (for messages). */
const scenarioFlagNames: Record<keyof ScenarioInput, string> = {
  merchants: "--merchants",
  payments: "--payments",
  hours: "--hours",
  faults: "--faults",
  noWebhooks: "--no-webhooks",
  dispatchers: "--dispatchers",
  endpointConcurrency: "--endpoint-concurrency",
  plantedBug: "--planted-bug",
  mix: "--mix",
  swarm: "--swarm",
  processor: "--processor"
}

/** The scenario flags given, by flag name, in the order of `scenarioFlags`. */
export const givenScenarioFlags = (input: ScenarioInput): ReadonlyArray<string> =>
  (Object.keys(scenarioFlagNames) as Array<keyof ScenarioInput>).filter((key) => {
    const value = input[key]
    return typeof value === "boolean" ? value : Option.isSome(value as Option.Option<unknown>)
  }).map((key) => scenarioFlagNames[key])

/**
 * The options the scenario flags describe, from `defaults` (the seed too, drawn by the caller).
 * Throws an Error whose message is one line for the user on a malformed `--faults` or `--mix`.
 */
export const scenarioOptions = (input: ScenarioInput, defaults: SimOptions): SimOptions => {
  let options = { ...defaults }
  const get = Cli.given
  if (Option.isSome(input.merchants)) options = { ...options, merchants: input.merchants.value }
  if (Option.isSome(input.payments)) options = { ...options, payments: input.payments.value }
  if (Option.isSome(input.hours)) options = { ...options, hours: input.hours.value }
  const faults = get(input.faults)
  if (faults !== undefined) options = { ...options, faults: parseFaults(faults) }
  if (input.noWebhooks) options = { ...options, webhooks: false }
  if (Option.isSome(input.dispatchers)) options = { ...options, dispatchers: input.dispatchers.value }
  if (Option.isSome(input.endpointConcurrency)) {
    options = { ...options, endpointConcurrency: input.endpointConcurrency.value }
  }
  if (Option.isSome(input.plantedBug)) options = { ...options, plantedBug: input.plantedBug.value }
  if (input.processor) options = { ...options, processor: true }
  const mix = get(input.mix)
  if (mix !== undefined) {
    let parsed: unknown
    try {
      parsed = JSON.parse(mix)
    } catch {
      throw new Error(`--mix must be a JSON object, e.g. '{"refund":0.5}', got '${mix}'`)
    }
    if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) {
      throw new Error(`--mix must be a JSON object, got '${mix}'`)
    }
    const unknown = Object.keys(parsed).filter((key) => !(key in defaultMix))
    if (unknown.length > 0) {
      throw new Error(`--mix: unknown field(s) ${unknown.join(", ")} (one of: ${Object.keys(defaultMix).join(", ")})`)
    }
    options = { ...options, mix: { ...defaultMix, ...(parsed as Partial<WorkloadMix>) } }
  }
  if (input.swarm && (Option.isSome(input.faults) || Option.isSome(input.mix))) {
    throw new Error("--swarm draws the faults and the workload mix from the seed; remove --faults and --mix")
  }
  return input.swarm ? swarmOptions(options, options.seed) : options
}

/** `scenarioOptions` for a command's entry: a malformed flag is the one line `<command>: message` and exit 2. */
export const scenarioOptionsOrExit = (command: string, input: ScenarioInput, defaults: SimOptions): SimOptions => {
  try {
    return scenarioOptions(input, defaults)
  } catch (error) {
    console.error(`${command}: ${error instanceof Error ? error.message : String(error)}`)
    return process.exit(Cli.usageExitCode)
  }
}

const simFlags = {
  seed: Cli.integer("seed", "the seed every random choice of the run comes from (default: a random one, printed)").pipe(
    Flag.optional
  ),
  ...scenarioFlagsShape,
  checkDeterminism: Cli.toggle("check-determinism", "run the seed twice and compare the trace hashes"),
  shrink: Cli.toggle(
    "shrink",
    "when a law breaks, reduce the run to a smaller one that breaks it first and write it as a replay file"
  ),
  shrinkRuns: Cli.integer("shrink-runs", "runs the shrinking may try", { min: 1, default: 200 }),
  out: Cli.text("out", "the replay file --shrink writes (default: sim-failure-<seed>.json)").pipe(Flag.optional),
  replay: Cli.text("replay", "run the scenario of a replay file (its options replace every scenario flag)").pipe(
    Flag.optional
  ),
  json: Cli.json
}

const describeSim = Command.withDescription(
  "Run the payment service in a deterministic simulation: seeded workload and faults in virtual time, every law checked. " +
    "Prints PASS or FAIL first, then a summary and the trace hash. Exits 0 when every law held, 1 when one broke, 2 on bad arguments."
)

/** The `sim` command's flags, parsed (for `parseArguments` and tests). */
const simFlagsCommand = Command.make("sim", simFlags).pipe(describeSim)

/** `sim`'s flags as the run needs them; throws an Error with one line for the user when they do not fit together. */
export const interpretArguments = (input: Command.Command.Config.Infer<typeof simFlags>): Arguments => {
  const scenarioGiven = [...(Option.isSome(input.seed) ? ["--seed"] : []), ...givenScenarioFlags(input)]
  const seed = Cli.given(input.seed) ?? Math.floor(Math.random() * 2 ** 31)
  const replay = Cli.given(input.replay)
  if (replay !== undefined && scenarioGiven.length > 0) {
    throw new Error(
      `--replay takes every option from its file; remove ${
        scenarioGiven.join(", ")
      } (edit the file to change the scenario)`
    )
  }
  const out = Cli.given(input.out)
  if (out !== undefined && !input.shrink) throw new Error("--out names the file --shrink writes; add --shrink")
  const options = scenarioOptions(input, { ...defaultOptions, seed })
  return {
    options,
    checkDeterminism: input.checkDeterminism,
    shrink: input.shrink,
    shrinkRuns: input.shrinkRuns,
    out,
    replay,
    swarm: input.swarm,
    scenarioFlags: scenarioGiven,
    json: input.json
  }
}

/** `npm run sim` arguments (without node and the script); throws an Error with one line for the user when they are wrong. */
export const parseArguments = (argv: ReadonlyArray<string>): Arguments =>
  interpretArguments(Cli.parseSync(simFlagsCommand, argv))

/** The first line of the summary: the verdict, then what it is about. */
export const verdictLine = (result: SimResult): string => {
  const o = result.options
  if (result.ok) {
    return `PASS  seed ${o.seed}: every law held (${result.checks} checks, ${o.payments} payments, ${o.hours} h)`
  }
  const first = result.violations[0]!
  return `FAIL  seed ${o.seed}: ${first.invariant} broken first (${result.violations.length} violation${
    result.violations.length === 1 ? "" : "s"
  })`
}

/** What the workload did: requests, rotations, crashes, disputes, and the reach of its choices. */
const workloadLines = (result: SimResult): Array<string> => {
  const lines: Array<string> = []
  const w = result.workload
  lines.push(
    `requests ${w.requests}  by status ${Object.entries(w.byStatus).sort().map(([s, c]) => `${s}:${c}`).join(" ")}`
  )
  lines.push(
    `key rotations ${w.rotations} (${result.store.lostRotations} answers lost by rotationlost; ${w.keyRecoveries} lost answers recovered out of band; ${result.keys.mustRefuse} requests with a revoked key that had to be refused)  lost unkeyed creates ${w.lostCreates}  crashes ${result.crashes} (${result.commitCrashes} right after a commit)`
  )
  lines.push(
    `disputes: ${result.disputes.planned} (${result.disputes.refusedOpens} opens refused, ${result.disputes.duplicates} duplicate notifications, ${result.disputes.retries} re-sent unacknowledged)`
  )
  const ways = result.workload.keyWays
  const retried = result.workload.keyWaysRetried
  lines.push(
    `reach: create keys in header ${ways.header} / body ${ways.body} / both ${ways.both} / two different ${ways.different} (sent again after a lost answer: ${retried.header} / ${retried.body} / ${retried.both} / ${retried.different}); ` +
      `boundary scores ${result.workload.boundaryPlanned} aimed, exact ${
        Object.entries(result.workload.boundaryExact).map(([output, n]) => `${n} at output ${output}`).join(", ")
      }; ` +
      `disputes during scripts ${result.workload.disputesInScript} (${result.workload.operationsWhileDisputed} refunds, captures and voids while open; ` +
      `refunds after the outcome: ${result.workload.refundsAfterLostDispute} lost, ${result.workload.refundsAfterWonDispute} won); ` +
      `webhook backlogs: ${result.workload.batchPayments} payments in batches to lagging endpoints, ${result.leaseTakeovers} claims taken over after their lease; ` +
      `rate limit: ${result.workload.rateLimitPushes} keys pushed past it, ${result.rateLimit.refused} requests refused (${result.rateLimit.refusedJudged} judged), ` +
      `${result.rateLimit.keysPastBurst} keys past a full bucket`
  )
  return lines
}

/** What the processor saw and how its laws ended (with `--processor`). */
const processorLines = (result: SimResult): Array<string> => {
  const lines: Array<string> = []
  const p = result.processor
  if (p === null) return lines
  const ps = p.stats
  const sr = p.serviceReconciliation
  lines.push(
    `processor: ${ps.arrived} calls arrived, ${ps.authorizations} authorizations, ${ps.declines} declines, ${ps.captures} captures, ${ps.cancels} cancels, ${ps.refunds} refunds, ${ps.refusals} refused, ${ps.replays} answered from their key; ` +
      `${p.laws.heldOpen} authorizations held open by our books at the end; slowest to end ${p.laws.slowestEndMs} ms (bound ${p.laws.boundMs} ms); ` +
      `service reconciliation: ${
        typeof sr === "string"
          ? sr
          : `${sr.differences} differences (${sr.ours} ours, ${sr.processor} at the processor)`
      }`
  )
  lines.push(
    `reach: processor answers lost ${ps.lostAnswers}, duplicates ${ps.duplicates} (${ps.duplicatesAbsorbed} absorbed by their key), answers past the deadline ${ps.lateAnswers}, outages ${ps.outages} (${ps.outageRefusals} calls unreachable)`
  )
  return lines
}

/** The faults of the run and what the service made of them: settlement, store, clocks, acquirer, webhooks. */
const faultLines = (result: SimResult): Array<string> => {
  const lines: Array<string> = []
  const o = result.options
  const s = result.store
  lines.push(`settlement: ${result.unsettled} payments captured before the last cut-off left unsettled`)
  lines.push(
    `store faults: ${s.unavailable} unavailable + ${s.outageRefusals} in ${s.outages} outages of ${s.operations} operations; ${s.lostCommits} commits answered unavailable; ` +
      `${s.freezes} freezes (${s.frozenCalls} calls received frozen, ${s.frozenTimeouts} given up by their caller)`
  )
  lines.push(
    `pauses ${result.pauses}  clock offsets ${
      result.clockOffsetsMs.length === 0
        ? "none"
        : result.clockOffsetsMs.map((ms) => `${ms >= 0 ? "+" : ""}${ms}`).join(" ")
    } ms  slowest answer ${result.slowestAnswerMs} ms`
  )
  const a = result.acquirer
  lines.push(
    `acquirer: approved ${a.approved} declined ${a.declined} timed out ${a.timedOut} slow ${a.slow} transport failures ${a.transientFailures}${
      a.instant > 0 ? ` answered at once ${a.instant}` : ""
    } calls ${a.calls}`
  )
  const d = result.deliveries
  const e = result.endpoints
  lines.push(
    `webhook deliveries ${d.deliveries}: succeeded ${d.succeeded} failed ${d.failed} open ${d.open}; attempts ${d.attempts}; ` +
      `${o.dispatchers} dispatcher(s), ${result.leaseTakeovers} claims taken over after their lease`
  )
  lines.push(
    `endpoint answers: 2xx ${e.answered2xx} 4xx ${e.answered4xx} 5xx ${e.answered5xx} slow ${e.slow} lagging ${e.lagging} no answer ${e.noAnswer} outage ${e.outageRefusals}`
  )
  return lines
}

/** The first violations, the trace's tail and the command that replays the run. */
const failureLines = (result: SimResult): Array<string> => {
  const o = result.options
  const lines: Array<string> = []
  lines.push("")
  lines.push(
    `INVARIANT VIOLATED (seed ${o.seed}) at virtual time ${new Date(result.violations[0]!.atMs).toISOString()}`
  )
  for (const v of result.violations.slice(0, 10)) lines.push(`  [${v.invariant}] ${v.message}`)
  lines.push("trace tail:")
  for (const line of result.traceTail) lines.push(`  ${line.length > 400 ? `${line.slice(0, 400)}…` : line}`)
  lines.push(`replay: ${replayCommand(o)}`)
  return lines
}

export const formatReport = (result: SimResult): string => {
  const lines: Array<string> = []
  const o = result.options
  const virtualMs = result.virtualEndMs - Date.UTC(2026, 0, 5)
  lines.push(verdictLine(result))
  lines.push(
    `seed ${o.seed}  merchants ${o.merchants}  payments ${o.payments}  hours ${o.hours}  webhooks ${
      o.webhooks ? "on" : "off"
    }${o.processor ? "  processor on" : ""}`
  )
  lines.push("")
  lines.push(
    Cli.table(
      ["payments by status", "count"],
      Object.entries(result.paymentsByStatus).sort().map(([status, count]) => [status, count])
    )
  )
  lines.push("")
  lines.push(Cli.table(
    ["money moved (minor units)", "captured", "refunded", "fees", "settled"],
    Object.entries(result.money).sort().map(([currency, m]) => [currency, m.captured, m.refunded, m.fees, m.settled])
  ))
  lines.push("")
  lines.push(...workloadLines(result))
  lines.push(...processorLines(result))
  lines.push(...faultLines(result))
  lines.push("")
  lines.push(`invariant checks run ${result.checks}`)
  lines.push(
    `virtual time ${(virtualMs / 3_600_000).toFixed(1)} h in ${(result.wallMs / 1000).toFixed(2)} s wall` +
      ` (ratio ${Math.round(virtualMs / result.wallMs)}x, ${
        Math.round(o.payments / (result.wallMs / 1000))
      } payments/s,` +
      ` ${result.tasks} fiber tasks, ${result.wakeUps} wake-ups, peak heap ${
        Math.round(result.peakHeapBytes / 1_048_576)
      } MB)`
  )
  lines.push(`trace ${result.traceLines} lines, hash ${result.traceHash}`)
  if (!result.ok) lines.push(...failureLines(result))
  return lines.join("\n")
}

/** `--json`: the run's verdict and figures for scripts. */
export const simJson = (result: SimResult) => ({
  ok: result.ok,
  seed: result.options.seed,
  options: result.options,
  violations: result.violations.slice(0, 10),
  violationCount: result.violations.length,
  checks: result.checks,
  paymentsByStatus: result.paymentsByStatus,
  money: result.money,
  traceLines: result.traceLines,
  traceHash: result.traceHash,
  wallMs: Math.round(result.wallMs),
  processor: result.processor,
  replay: result.ok ? null : replayCommand(result.options)
})

const message = (error: unknown) => String(error instanceof Error ? error.message : error)

/** One `npm run sim`, as parsed: prints as it goes and returns the exit code (0 pass, 1 a law broke or two runs differed, 2 a bad replay file). */
const simulate = (parsed: Arguments): number => {
  const { checkDeterminism, json } = parsed
  // With --json, stdout carries the JSON alone and the running commentary goes to stderr.
  const say = json ? (line: string) => console.error(line) : (line: string) => console.log(line)
  let options = parsed.options
  let recorded: string | null | undefined
  if (parsed.replay !== undefined) {
    try {
      const file = readReplayFile(parsed.replay)
      options = file.options
      recorded = file.firstViolation
      say(`replaying ${parsed.replay} (first violation when written: ${file.firstViolation ?? "none"})`)
    } catch (error) {
      console.error(message(error))
      return Cli.usageExitCode
    }
  }
  say(`seed ${options.seed}`)
  const first = runSimulation(options)
  if (json) console.log(JSON.stringify(simJson(first), null, 2))
  else console.log(formatReport(first))
  const firstLaw = first.violations[0]?.invariant ?? null
  if (recorded !== undefined) {
    say(
      firstLaw === recorded
        ? `replay: first violation ${firstLaw ?? "none"}, as recorded`
        : `replay: first violation ${firstLaw ?? "none"}, recorded ${
          recorded ?? "none"
        }: the run no longer does what the file recorded`
    )
  }
  if (!first.ok) {
    if (parsed.shrink) {
      shrinkToFile(first, {
        out: parsed.out,
        maxRuns: parsed.shrinkRuns,
        log: (line) => console.error(line),
        print: say
      })
    }
    return 1
  }
  if (parsed.shrink) say("shrink: the run passed, nothing to shrink")
  if (checkDeterminism) {
    const second = runSimulation(options)
    const same = second.traceHash === first.traceHash
    say(`determinism: run 1 ${first.traceHash}, run 2 ${second.traceHash}: ${same ? "identical" : "DIFFERENT"}`)
    if (!same) {
      say(`replay: ${replayCommand(options)} --check-determinism`)
      return 1
    }
  }
  return 0
}

const simCommand = Command.make("sim", simFlags, (input) =>
  Effect.suspend(() => {
    let parsed: Arguments
    try {
      parsed = interpretArguments(input)
    } catch (error) {
      return Effect.fail(Cli.usageError(`sim: ${message(error)}`))
    }
    const code = simulate(parsed)
    return code === 0 ? Effect.void : Effect.fail(Cli.exitWith(code))
  })).pipe(describeSim)

export const main = () => Cli.runMain(Cli.run(simCommand, process.argv.slice(2)))

if (process.argv[1]?.endsWith("main.ts")) main()
