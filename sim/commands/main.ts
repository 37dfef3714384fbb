import { defaultMix, defaultOptions, isPlantedBug, parseFaults, plantedBugNames, replayCommand, type SimOptions, type WorkloadMix } from "../engine/Options.ts"
import { readReplayFile } from "../checks/Replay.ts"
import { shrinkToFile } from "../checks/Shrink.ts"
import { swarmOptions } from "../engine/Swarm.ts"
import { runSimulation, type SimResult } from "../engine/Simulator.ts"

/**
 * `npm run sim -- --seed 42 --merchants 20 --payments 10000 --hours 48 [--faults heavy,crash=2]
 *  [--no-webhooks] [--dispatchers N] [--endpoint-concurrency N] [--planted-bug refund-over-remainder] [--check-determinism] [--mix JSON]
 *  [--swarm (faults and mix drawn from the seed, sim/engine/Swarm.ts)]
 *  [--shrink [--shrink-runs 200] [--out FILE]]`
 * `npm run sim -- --replay FILE [--shrink [--out FILE]] [--check-determinism]`
 *
 * `--shrink`: when the run fails, fast-check reduces it (sim/checks/Shrink.ts) to a smaller scenario that
 * breaks the same law first, written as a replay file (`--out`, default
 * `sim-failure-<seed>.json`). `--replay FILE` runs the options of such a file (sim/checks/Replay.ts).
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
}

export const parseArguments = (argv: ReadonlyArray<string>): Arguments => {
  let options: SimOptions = { ...defaultOptions, seed: Math.floor(Math.random() * 2 ** 31) }
  let checkDeterminism = false
  let shrink = false
  let shrinkRuns = 200
  let out: string | undefined
  let replay: string | undefined
  let swarm = false
  const scenarioFlags: Array<string> = []
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i]!
    const value = () => {
      const next = argv[++i]
      if (next === undefined) throw new Error(`${flag} needs a value`)
      return next
    }
    const integer = () => {
      const text = value()
      const parsed = Number(text)
      if (!Number.isSafeInteger(parsed) || parsed < 0) throw new Error(`${flag} must be a non-negative integer, got '${text}'`)
      return parsed
    }
    switch (flag) {
      case "--seed": options = { ...options, seed: integer() }; break
      case "--merchants": options = { ...options, merchants: Math.max(1, integer()) }; break
      case "--payments": options = { ...options, payments: integer() }; break
      case "--hours": options = { ...options, hours: Math.max(1, integer()) }; break
      case "--faults": options = { ...options, faults: parseFaults(value()) }; break
      case "--no-webhooks": options = { ...options, webhooks: false }; break
      case "--dispatchers": options = { ...options, dispatchers: Math.max(1, integer()) }; break
      case "--endpoint-concurrency": options = { ...options, endpointConcurrency: Math.max(1, integer()) }; break
      case "--planted-bug": {
        const name = value()
        if (!isPlantedBug(name)) throw new Error(`--planted-bug: unknown '${name}' (one of: ${plantedBugNames.join(", ")})`)
        options = { ...options, plantedBug: name }
        break
      }
      case "--mix": options = { ...options, mix: { ...defaultMix, ...(JSON.parse(value()) as Partial<WorkloadMix>) } }; break
      case "--check-determinism": checkDeterminism = true; break
      case "--shrink": shrink = true; break
      case "--shrink-runs": shrinkRuns = Math.max(1, integer()); break
      case "--out": out = value(); break
      case "--replay": replay = value(); break
      case "--swarm": swarm = true; break
      default: throw new Error(`unknown option ${flag}`)
    }
    if (!["--check-determinism", "--shrink", "--shrink-runs", "--out", "--replay"].includes(flag)) scenarioFlags.push(flag)
  }
  if (replay !== undefined && scenarioFlags.length > 0) {
    throw new Error(`--replay takes every option from its file; remove ${scenarioFlags.join(", ")} (edit the file to change the scenario)`)
  }
  if (out !== undefined && !shrink) throw new Error("--out names the file --shrink writes; add --shrink")
  if (swarm && (scenarioFlags.includes("--faults") || scenarioFlags.includes("--mix"))) {
    throw new Error("--swarm draws the faults and the workload mix from the seed; remove --faults and --mix")
  }
  if (swarm) options = swarmOptions(options, options.seed)
  return { options, checkDeterminism, shrink, shrinkRuns, out, replay, swarm, scenarioFlags }
}

const pad = (text: string | number, width: number) => String(text).padStart(width)

export const formatReport = (result: SimResult): string => {
  const lines: Array<string> = []
  const o = result.options
  const virtualMs = result.virtualEndMs - Date.UTC(2026, 0, 5)
  lines.push(`seed ${o.seed}  merchants ${o.merchants}  payments ${o.payments}  hours ${o.hours}  webhooks ${o.webhooks ? "on" : "off"}`)
  lines.push("")
  lines.push("payments by status")
  for (const [status, count] of Object.entries(result.paymentsByStatus).sort()) lines.push(`  ${status.padEnd(12)} ${pad(count, 8)}`)
  lines.push("")
  lines.push("money moved (minor units)   captured      refunded          fees       settled")
  for (const [currency, m] of Object.entries(result.money).sort()) {
    lines.push(`  ${currency}                 ${pad(m.captured, 12)}  ${pad(m.refunded, 12)}  ${pad(m.fees, 12)}  ${pad(m.settled, 12)}`)
  }
  lines.push("")
  const w = result.workload
  lines.push(`requests ${w.requests}  by status ${Object.entries(w.byStatus).sort().map(([s, c]) => `${s}:${c}`).join(" ")}`)
  lines.push(`key rotations ${w.rotations} (${w.keyRecoveries} lost answers recovered out of band)  lost unkeyed creates ${w.lostCreates}  crashes ${result.crashes} (${result.commitCrashes} right after a commit)`)
  const s = result.store
  lines.push(`disputes: ${result.disputes.planned} (${result.disputes.refusedOpens} opens refused, ${result.disputes.duplicates} duplicate notifications, ${result.disputes.retries} re-sent unacknowledged)`)
  const ways = result.workload.keyWays
  const retried = result.workload.keyWaysRetried
  lines.push(`reach: create keys in header ${ways.header} / body ${ways.body} / both ${ways.both} / two different ${ways.different} (sent again after a lost answer: ${retried.header} / ${retried.body} / ${retried.both} / ${retried.different}); ` +
    `boundary scores ${result.workload.boundaryPlanned} aimed, exact ${Object.entries(result.workload.boundaryExact).map(([output, n]) => `${n} at output ${output}`).join(", ")}; ` +
    `disputes during scripts ${result.workload.disputesInScript} (${result.workload.operationsWhileDisputed} refunds, captures and voids while open)`)
  lines.push(`settlement: ${result.unsettled} payments captured before the last cut-off left unsettled`)
  lines.push(`store faults: ${s.unavailable} unavailable + ${s.outageRefusals} in ${s.outages} outages of ${s.operations} operations; ${s.lostCommits} commits answered unavailable; ` +
    `${s.freezes} freezes (${s.frozenCalls} calls received frozen, ${s.frozenTimeouts} given up by their caller)`)
  lines.push(`pauses ${result.pauses}  clock offsets ${result.clockOffsetsMs.length === 0 ? "none" : result.clockOffsetsMs.map((ms) => `${ms >= 0 ? "+" : ""}${ms}`).join(" ")} ms  slowest answer ${result.slowestAnswerMs} ms`)
  const a = result.acquirer
  lines.push(`acquirer: approved ${a.approved} declined ${a.declined} timed out ${a.timedOut} slow ${a.slow} transport failures ${a.transientFailures} calls ${a.calls}`)
  const d = result.deliveries
  const e = result.endpoints
  lines.push(`webhook deliveries ${d.deliveries}: succeeded ${d.succeeded} failed ${d.failed} open ${d.open}; attempts ${d.attempts}; ` +
    `${o.dispatchers} dispatcher(s), ${result.leaseTakeovers} claims taken over after their lease`)
  lines.push(`endpoint answers: 2xx ${e.answered2xx} 4xx ${e.answered4xx} 5xx ${e.answered5xx} slow ${e.slow} lagging ${e.lagging} no answer ${e.noAnswer} outage ${e.outageRefusals}`)
  lines.push("")
  lines.push(`invariant checks run ${result.checks}`)
  lines.push(`virtual time ${(virtualMs / 3_600_000).toFixed(1)} h in ${(result.wallMs / 1000).toFixed(2)} s wall` +
    ` (ratio ${Math.round(virtualMs / result.wallMs)}x, ${Math.round(o.payments / (result.wallMs / 1000))} payments/s,` +
    ` ${result.tasks} fiber tasks, ${result.wakeUps} wake-ups, peak heap ${Math.round(result.peakHeapBytes / 1_048_576)} MB)`)
  lines.push(`trace ${result.traceLines} lines, hash ${result.traceHash}`)
  if (!result.ok) {
    lines.push("")
    lines.push(`INVARIANT VIOLATED (seed ${o.seed}) at virtual time ${new Date(result.violations[0]!.atMs).toISOString()}`)
    for (const v of result.violations.slice(0, 10)) lines.push(`  [${v.invariant}] ${v.message}`)
    lines.push("trace tail:")
    for (const line of result.traceTail) lines.push(`  ${line.length > 400 ? `${line.slice(0, 400)}…` : line}`)
    lines.push(`replay: ${replayCommand(o)}`)
  }
  return lines.join("\n")
}

export const main = () => {
  let parsed: ReturnType<typeof parseArguments>
  try {
    parsed = parseArguments(process.argv.slice(2))
  } catch (error) {
    console.error(String(error instanceof Error ? error.message : error))
    process.exit(2)
  }
  const { checkDeterminism } = parsed
  let options = parsed.options
  let recorded: string | null | undefined
  if (parsed.replay !== undefined) {
    try {
      const file = readReplayFile(parsed.replay)
      options = file.options
      recorded = file.firstViolation
      console.log(`replaying ${parsed.replay} (first violation when written: ${file.firstViolation ?? "none"})`)
    } catch (error) {
      console.error(String(error instanceof Error ? error.message : error))
      process.exit(2)
    }
  }
  console.log(`seed ${options.seed}`)
  const first = runSimulation(options)
  console.log(formatReport(first))
  const firstLaw = first.violations[0]?.invariant ?? null
  if (recorded !== undefined) {
    console.log(firstLaw === recorded ? `replay: first violation ${firstLaw ?? "none"}, as recorded` : `replay: first violation ${firstLaw ?? "none"}, recorded ${recorded ?? "none"}: the run no longer does what the file recorded`)
  }
  if (!first.ok) {
    if (parsed.shrink) shrinkToFile(first, { out: parsed.out, maxRuns: parsed.shrinkRuns, log: (line) => console.error(line), print: (line) => console.log(line) })
    process.exit(1)
  }
  if (parsed.shrink) console.log("shrink: the run passed, nothing to shrink")
  if (checkDeterminism) {
    const second = runSimulation(options)
    const same = second.traceHash === first.traceHash
    console.log(`determinism: run 1 ${first.traceHash}, run 2 ${second.traceHash}: ${same ? "identical" : "DIFFERENT"}`)
    if (!same) {
      console.log(`replay: ${replayCommand(options)} --check-determinism`)
      process.exit(1)
    }
  }
}

if (process.argv[1]?.endsWith("main.ts")) main()
