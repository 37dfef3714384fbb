/**
 * The load harness in production mode: drives a scenario (by default the simulator's merchants,
 * webhook endpoints and laws, over real HTTP) against a service, under an open or closed load
 * model, records every request in HDR histograms, checks the scenario's laws after a drain, and
 * writes a JSON result and an HTML page. `merge` combines the results of several shards.
 *
 *   npm run harness -- --help
 *
 * docs/harness.md says how to run it, against what, and what the report holds.
 */
import { mkdirSync, readFileSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import pg from "pg"
import { fixed } from "../report.ts"
import { statementsTable, type StatementStats, statementStats } from "../statements.ts"
import type { AvailabilityFigures } from "./Availability.ts"
import { capacityPlot, latencyLimits, sustainedOf } from "./Capacity.ts"
import { type CapacityFigures, runCapacitySearch } from "./CapacityRun.ts"
import { parseArguments, type RunOptions, startAtProblem } from "./Cli.ts"
import { type Clock, waitUntilEpoch } from "./Clock.ts"
import type { LawResult, Scenario } from "./Contract.ts"
import { stopEveryEmbeddedService } from "./Embedded.ts"
import { renderHarnessReport } from "./Html.ts"
import { readKeyFile } from "./KeyFile.ts"
import { lateStartMs } from "./LoadModel.ts"
import type { LoadModel } from "./LoadModel.ts"
import { makeKeys } from "./MakeKeys.ts"
import {
  checkResult,
  type HarnessResult,
  lawFigures,
  loadText,
  mergeResults,
  passedOf,
  type ShardFigures
} from "./Result.ts"
import {
  abortSpec,
  closeSession,
  driveLoad,
  failOf,
  harnessLaw,
  type Io,
  judgeLoad,
  type LoadFigures,
  offeredAt,
  openSession,
  type Session
} from "./Run.ts"
import { saturationLine } from "./Saturation.ts"
import { loadScenario } from "./Scenarios.ts"
import { measuredText } from "./Slo.ts"
import { type Stage, stageText } from "./Stages.ts"

export type { Io }

const processIo: Io = {
  log: (line) => process.stderr.write(`${line}\n`),
  out: (line) => process.stdout.write(`${line}\n`),
  progress: { write: (text) => process.stderr.write(text), isTTY: process.stderr.isTTY === true }
}

const table = (rows: ReadonlyArray<readonly [string, string]>) => {
  const width = Math.max(...rows.map(([k]) => k.length))
  return rows.map(([k, v]) => `  ${k.padEnd(width)}  ${v}`).join("\n")
}

/** A merged result's shards, a line each, and how far apart their loads started. */
const shardRows = (shards: ReadonlyArray<ShardFigures>): Array<readonly [string, string]> => {
  if (shards.length < 2) return []
  const starts = shards.map((s) => s.start_epoch_ms)
  return [
    ...shards.map((s) =>
      [
        `shard ${s.shard}`,
        `${
          s.rate_per_s === null ? `${s.connections} connections` : `${s.rate_per_s}/s offered`
        }, ${s.merchants} merchants, seed ${s.seed}: ` +
        `${s.requests} requests, ${fixed(s.achieved_per_s, 1)}/s, ${s.errors} errors, ${
          s.passed ? "passed" : "FAILED"
        }; against ${s.target}`
      ] as const
    ),
    ["shard starts", `${fixed((Math.max(...starts) - Math.min(...starts)) / 1000, 3)} s apart`]
  ]
}

/** A note for an objective set on a route that saw no request: the routes there were. */
const unknownRoute = (result: HarnessResult, route: string | null) =>
  route === null || result.routes.some((r) => r.route === route)
    ? ""
    : `; no request on route '${route}': the routes were ${result.routes.map((r) => r.route).join(", ")}`

/** `--find-capacity`: each step, the sustained rate, what broke, the plot. */
const capacityRows = (result: HarnessResult): Array<readonly [string, string]> => {
  const capacity = result.capacity
  if (capacity === undefined) return []
  return [
    ...capacity.steps.map((step, i) =>
      [
        `step ${i + 1}: ${step.offered_per_s}/s offered`,
        `${fixed(step.achieved_per_s, 1)}/s achieved, p50 ${fixed(step.p50_ms, 2)} ms, p99 ${
          fixed(step.p99_ms, 2)
        } ms, ${step.errors} errors of ${step.requests}: ` +
        (step.passed ? "passed" : `FAILED: ${step.failed_because}`)
      ] as const
    ),
    [
      "sustained rate",
      capacity.sustained_per_s === null
        ? "NONE: no step met every objective"
        : `${capacity.sustained_per_s} requests/s offered met every objective and kept pace (the figures above are that step's)`
    ],
    ["limit", capacity.limit ?? `none found within ${capacity.steps.length} steps`],
    ["plot", capacity.plot]
  ]
}

/** Why and when `--abort-on-fail` stopped the load. */
export const abortedText = (aborted: NonNullable<HarnessResult["aborted"]>) =>
  `at ${
    fixed(aborted.at_s, 1)
  } s: ${aborted.objective} lost for good (${aborted.reason}); the load stopped, drained and the laws were checked`

/** What the warm-up left out, for the summary and the report. */
export const warmupText = (result: HarnessResult) =>
  `the first ${result.config.warmup_s} s: ${
    result.judged?.left_out ?? 0
  } requests recorded (in the latency and timeline figures) but left out of the objectives and the saturation verdict`

/** The summary printed at the end of a run or a merge. */
export const summaryOf = (result: HarnessResult, files: ReadonlyArray<string>) => {
  const p = result.latency_ms
  const shards = result.per_shard ?? []
  const total = shards.length > 1 ? ` (the total of ${shards.length} shards)` : ""
  const rows: Array<readonly [string, string]> = [
    [
      "scenario",
      `${result.scenario} against ${result.config.target}${result.config.embedded ? " (started by the harness)" : ""}`
    ],
    ...(result.config.planted_bug === undefined
      ? []
      : [["planted bug", `${result.config.planted_bug} (bench/harness/PlantedService.ts)`] as const]),
    ["load", loadText(result.config) + total],
    ["merchants", `${result.config.merchants}${total}`],
    ...shardRows(shards),
    [
      "requests",
      `${result.requests} in ${fixed(result.load_s, 1)} s; ${
        fixed(result.rate_per_s, 1)
      }/s over the load window (${result.scripts} scripts, ${result.scripts_late} started over ${lateStartMs} ms late)`
    ],
    ...((result.config.warmup_s ?? 0) === 0 ? [] : [["warm-up", warmupText(result)] as const]),
    ...((result.aborted ?? null) === null ? [] : [["aborted", abortedText(result.aborted!)] as const]),
    ...(result.saturation === undefined ? [] : [["pace", saturationLine(result.saturation)] as const]),
    [
      "latency p50/p90/p99/p99.9/max ms",
      `${fixed(p.p50, 2)} / ${fixed(p.p90, 2)} / ${fixed(p.p99, 2)} / ${fixed(p.p999, 2)} / ${fixed(p.max, 2)}`
    ],
    ...(result.socket_wait_ms === undefined || result.service_ms === undefined ? [] : [
      [
        "socket wait p50/p99/max ms",
        `${fixed(result.socket_wait_ms.p50, 2)} / ${fixed(result.socket_wait_ms.p99, 2)} / ${
          fixed(result.socket_wait_ms.max, 2)
        } (answered requests: a turn among those in flight, the client's queue, a connect)`
      ] as const,
      [
        "service time p50/p99/max ms",
        `${fixed(result.service_ms.p50, 2)} / ${fixed(result.service_ms.p99, 2)} / ${
          fixed(result.service_ms.max, 2)
        } (from the write to the whole answer)`
      ] as const
    ]),
    ["status codes", JSON.stringify(result.status_codes)],
    ["errors (no answer or 5xx)", String(result.errors)],
    ["harness CPU ms per request", fixed(result.cpu.harness_ms_per_request, 3)],
    [
      "service CPU ms per request",
      result.cpu.service_s === null ? "n/a (not started by the harness)" : fixed(result.cpu.service_ms_per_request, 3)
    ],
    [
      "PostgreSQL CPU ms per request",
      (result.cpu.postgres_s ?? null) === null
        ? "n/a (not started by the harness)"
        : fixed(result.cpu.postgres_ms_per_request, 3)
    ],
    [
      "harness RSS MB start/end/peak",
      `${fixed(result.cpu.harness_rss_mb.start, 0)} / ${fixed(result.cpu.harness_rss_mb.end, 0)} / ${
        fixed(result.cpu.harness_rss_mb.peak, 0)
      }`
    ]
  ]
  rows.push(...clusterRows(result), ...capacityRows(result))
  for (const law of result.laws) {
    rows.push([
      `law ${law.law}`,
      law.held
        ? `held (${law.checked} checked)`
        : `VIOLATED ${law.violation_count} time(s); first: ${law.first_violations[0]?.paymentId ?? "-"}: ${
          law.first_violations[0]?.message ?? ""
        }`
    ])
  }
  for (const objective of result.slo) {
    rows.push([
      `slo ${objective.objective}`,
      `${objective.met ? "met" : "MISSED"} (measured ${measuredText(objective)})${
        unknownRoute(result, objective.route ?? null)
      }`
    ])
  }
  rows.push(["verdict", result.passed ? "PASSED" : "FAILED"])
  for (const file of files) rows.push(["report", file])
  return table(rows)
}

const percent = (figures: AvailabilityFigures) =>
  figures.availability === null ?
    "no requests"
    : `${
      fixed(figures.availability * 100, 2)
    }% answered (${figures.answered} of ${figures.requests}; refused ${figures.refused}, dropped ${figures.dropped}, 5xx ${figures.server_errors})`

/** The summary's lines on the instances, the faults and availability, and the scenario's own figures. */
const clusterRows = (result: HarnessResult): Array<readonly [string, string]> => {
  const rows: Array<readonly [string, string]> = []
  if ((result.config.instances ?? 1) > 1 || (result.config.nemesis ?? null) !== null) {
    rows.push([
      "instances",
      `${result.config.instances ?? 1}${result.config.nemesis ? `; nemesis ${result.config.nemesis}` : ""}`
    ])
  }
  for (const fault of result.faults ?? []) {
    rows.push([
      `fault ${fault.kind} ${fault.instance === null ? "database" : `instance ${fault.instance}`}`,
      `${fixed(fault.start_s, 1)}-${fixed(fault.end_s, 1)} s: ${percent(fault.availability)}`
    ])
  }
  if (result.availability !== undefined) {
    rows.push(["availability", percent(result.availability.overall)])
    if ((result.faults ?? []).length > 0) {
      rows.push(["availability during faults", percent(result.availability.during_faults)])
      rows.push(["availability outside faults", percent(result.availability.outside_faults)])
    }
    if (result.availability.moved_on_refusal > 0) {
      rows.push(["sent on to another instance", `${result.availability.moved_on_refusal} (connection refused)`])
    }
  }
  for (const [name, count] of Object.entries(result.figures ?? {})) rows.push([name, String(count)])
  return rows
}

const writeReport = (directory: string, name: string, result: HarnessResult) => {
  mkdirSync(directory, { recursive: true })
  const json = join(directory, `${name}.json`)
  const html = join(directory, `${name}.html`)
  writeFileSync(json, JSON.stringify(result, null, 1) + "\n")
  writeFileSync(html, renderHarnessReport(result))
  return [json, html]
}

/** `--start-at`: the load waits for the shards' common start (the set-up comes before it). */
const startTogether = async (startAtMs: number, clock: Clock, io: Io) => {
  const at = new Date(startAtMs).toISOString()
  const aheadMs = startAtMs - Date.now()
  if (aheadMs > 0) io.log(`set up; the load starts at ${at} (--start-at), in ${(aheadMs / 1000).toFixed(1)} s`)
  else io.log(`set-up ended ${(-aheadMs / 1000).toFixed(1)} s after --start-at ${at}: this shard's load starts late`)
  await waitUntilEpoch(startAtMs, clock)
}

/** pg_stat_statements around the load, read on a connection of the harness's own (`--statements N`). */
const statementsProbe = async (session: Session) => {
  const { options, embedded, io } = session
  const client = options.statements > 0 && embedded !== null
    ? new pg.Client({ connectionString: embedded.target.databaseUrl })
    : null
  let before: StatementStats = new Map()
  if (client !== null) {
    try {
      await client.connect()
      await client.query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
      before = await statementStats(client)
    } catch (error) {
      io.log(
        `pg_stat_statements is not available (${
          error instanceof Error ? error.message : String(error)
        }): no statements listed`
      )
    }
  }
  return {
    read: async (requests: number): Promise<Array<[string, string]>> =>
      client === null ? [] : statementsTable(before, await statementStats(client), requests, options.statements),
    close: async () => void await client?.end().catch(() => {})
  }
}

/** After the load: the drain and the laws, through the same transport, counted apart. */
const drainAndCheck = async (session: Session, requests: number) => {
  let laws: ReadonlyArray<LawResult> = []
  let figures: Readonly<Record<string, number>> | undefined
  if (session.setUp) {
    try {
      session.io.log(`load done (${requests} requests); draining...`)
      await session.scenario.drain(session.options.drainSeconds * 1000)
      session.io.log("checking the laws through the API...")
      laws = await session.scenario.checkLaws()
      figures = session.scenario.figures?.()
      if (session.processor !== null && session.embedded !== null) {
        session.io.log("checking the processor's records...")
        laws = [
          ...laws,
          ...await session.processor.checkLaws(session.embedded.environment, session.startedAt.getTime() - 60_000)
        ]
      }
    } catch (error) {
      failOf(session)("drain and laws", error)
    }
  }
  if (session.failures.length > 0) laws = [...laws, harnessLaw(session.failures.join("; "))]
  const lawResults = lawFigures(laws)
  session.lawsViolated = lawResults.filter((law) => !law.held).length
  return { laws: lawResults, figures }
}

export const runHarness = async (
  options: RunOptions,
  io: Io,
  /** Tests give their own scenario (else the one `--scenario` names) or clock. */
  given: { readonly scenario?: Scenario; readonly clock?: Clock } = {}
): Promise<{ result: HarnessResult; files: Array<string>; statements: Array<[string, string]> }> => {
  const session = await openSession(options, io, given)
  try {
    if (options.findCapacity !== null) return await capacityRun(session)
    const probe = await statementsProbe(session)
    try {
      if (options.startAtMs !== null && session.setUp) await startTogether(options.startAtMs, session.clock, io)
      const abort = abortSpec(session, options.model, options.durationSeconds * 1000)
      const figures = await driveLoad(session, {
        model: options.model,
        durationMs: options.durationSeconds * 1000,
        maxRequests: options.maxRequests,
        warmupMs: options.warmupMs,
        ...abort.spec
      })
      const aborted = abort.watch?.lost() ?? null
      if (aborted !== null) {
        io.log(`objective ${aborted.objective} lost for good (${aborted.reason}): load stopped (--abort-on-fail)`)
      }
      const statements = await probe.read(figures.load.requests)
      const checked = await drainAndCheck(session, figures.load.requests)
      const result = resultOf(session, figures, checked, {
        aborted: aborted === null
          ? null
          : {
            ...aborted,
            at_s: (figures.outcome.loadEndedAtMs - figures.loadStartMs) / 1000,
            planned_requests: abort.planned!
          }
      })
      return { result, files: writeReport(options.reportDirectory, session.name, result), statements }
    } finally {
      await probe.close()
    }
  } finally {
    await closeSession(session)
  }
}

/** `--find-capacity`: the steps over one set-up, then the drain and the laws; the result's figures are the sustained step's. */
const capacityRun = async (session: Session) => {
  const { options } = session
  const search = await runCapacitySearch(session)
  const chosen = search.chosen
  const checked = chosen === null
    ? await drainAndCheck(session, 0)
    : await drainAndCheck(session, chosen.figures.load.requests)
  const plotName = `${session.name}.capacity.svg`
  const capacity: CapacityFigures = {
    start_per_s: options.findCapacity!.search.startPerS,
    growth: options.findCapacity!.search.growth,
    bisections: options.findCapacity!.search.bisections,
    max_steps: options.findCapacity!.search.maxSteps,
    step_s: options.findCapacity!.stepMs / 1000,
    sustained_per_s: sustainedOf(search.steps),
    limit: search.limit,
    steps: search.steps,
    plot: plotName
  }
  if (chosen === null) throw new Error("--find-capacity: no step ran")
  const result = resultOf(session, chosen.figures, checked, { capacity, model: chosen.model })
  const files = writeReport(options.reportDirectory, session.name, result)
  const plot = join(options.reportDirectory, plotName)
  writeFileSync(
    plot,
    capacityPlot(search.steps, latencyLimits(options.slo), `${result.scenario}: latency against offered rate`)
  )
  return { result, files: [...files, plot], statements: [] as Array<[string, string]> }
}

/** The model's offered rate at the middle of a second of the load (0 once the load's intended starts are over; null: closed model). */
const offeredInSecond = (model: LoadModel, second: number, loadEndMs: number) => {
  const middleMs = second * 1000 + 500
  const offered = offeredAt(model, middleMs)
  return offered === null ? null : second * 1000 > loadEndMs ? 0 : offered
}

/** Where each stage of the curve starts and ends, seconds from the load's start, for the report's timeline. */
const stageSpans = (stages: ReadonlyArray<Stage>) => {
  let fromMs = 0
  return stages.map((stage, index) => {
    const span = {
      stage: index,
      text: stageText(stage),
      from_s: fromMs / 1000,
      to_s: (fromMs + stage.durationMs) / 1000
    }
    fromMs += stage.durationMs
    return span
  })
}

/** The result of a run: its configuration, one load's figures, its laws and objectives. */
const resultOf = (
  session: Session,
  figures: LoadFigures,
  checked: Awaited<ReturnType<typeof drainAndCheck>>,
  extras: {
    readonly aborted?: HarnessResult["aborted"]
    readonly capacity?: CapacityFigures
    readonly model?: LoadModel
  } = {}
): HarnessResult => {
  const { options, embedded } = session
  const { outcome, load, judged } = figures
  const model = extras.model ?? options.model
  // From the first script's start to the last one's end (the figures' span); the rate is the
  // load window's (first intended start to last), without the drain's tail.
  const loadSeconds = Math.max(0.001, outcome.endedAtMs - outcome.startedAtMs) / 1000
  const { saturation, rate, slo } = judgeLoad(session, figures, model)
  const cpu = figures.harnessCpuSeconds
  const perRequest = (seconds: number | null) =>
    seconds === null || load.requests === 0 ? null : (seconds * 1000) / load.requests
  const rssEnd = process.memoryUsage.rss() / 2 ** 20
  session.rss.peak = Math.max(session.rss.peak, rssEnd)
  return {
    format: "payments-harness/2",
    scenario: session.scenario.name,
    started_at: session.startedAt.toISOString(),
    ended_at: new Date().toISOString(),
    start_epoch_ms: figures.startEpochMs,
    config: {
      target: session.targetUrls.join(","),
      embedded: embedded !== null,
      model: model.kind,
      rate_per_s: model.kind === "open" ? model.rate : null,
      arrival: model.kind === "open" ? model.arrival : null,
      stages: model.kind === "open" && model.stages ? model.stages.map(stageText).join(", ") : null,
      connections: model.kind === "closed" ? model.connections : null,
      duration_s: options.durationSeconds,
      warmup_s: options.warmupMs / 1000,
      abort_on_fail: options.abortOnFail,
      max_requests: options.maxRequests,
      merchants: session.merchants,
      seed: options.seed,
      slo: options.sloText,
      shards: [`${options.shard.index}/${options.shard.count}`],
      start_at: options.startAtMs === null ? null : new Date(options.startAtMs).toISOString(),
      instances: session.targetUrls.length,
      nemesis: options.nemesis === null
        ? null
        : `${options.nemesis.kinds.join(",")} every ${options.nemesis.everyMs / 1000}s`,
      ...(options.plantedBug === null ? {} : { planted_bug: options.plantedBug }),
      ...(options.processor === null ? {} : { processor_lost_answer_share: options.processor.lostAnswerRate })
    },
    load_s: loadSeconds,
    scripts: outcome.scriptsStarted,
    scripts_late: outcome.scriptsLate,
    requests: load.requests,
    errors: load.errors,
    judged: { requests: judged.requests, errors: judged.errors, left_out: load.requests - judged.requests },
    rate_per_s: rate,
    saturation,
    status_codes: load.status_codes,
    latency_ms: load.latency_ms,
    histogram_us: load.histogram_us,
    routes: load.routes,
    socket_wait_ms: load.socket_wait_ms,
    socket_wait_histogram_us: load.socket_wait_histogram_us,
    service_ms: load.service_ms,
    service_histogram_us: load.service_histogram_us,
    timeline: load.timeline.map((second) => ({
      ...second,
      offered_per_s: offeredInSecond(model, second.at_s, outcome.loadEndedAtMs - figures.loadStartMs)
    })),
    ...(model.kind === "open" && model.stages ? { stage_spans: stageSpans(model.stages) } : {}),
    cpu: {
      harness_s: cpu,
      harness_ms_per_request: perRequest(cpu),
      service_s: figures.serviceCpuSeconds,
      service_ms_per_request: perRequest(figures.serviceCpuSeconds),
      postgres_s: figures.postgresCpuSeconds,
      postgres_ms_per_request: perRequest(figures.postgresCpuSeconds),
      harness_rss_mb: { start: session.rss.start, end: rssEnd, peak: session.rss.peak, samples: session.rss.samples }
    },
    laws: checked.laws,
    slo,
    passed: passedOf(checked.laws, slo) && (extras.capacity === undefined || extras.capacity.sustained_per_s !== null),
    aborted: extras.aborted ?? null,
    ...(extras.capacity === undefined ? {} : { capacity: extras.capacity }),
    ...(figures.faults === undefined ? {} : { faults: figures.faults }),
    availability: figures.availability,
    ...(checked.figures === undefined ? {} : { figures: checked.figures })
  }
}

const distinct = <A>(values: ReadonlyArray<A>) => [...new Set(values)]

/** Shards a merge lacks or has twice (a note: a merge of some shards is still worth reading). */
export const missingShards = (shards: ReadonlyArray<string>): string | null => {
  const counts = distinct(shards.map((s) => Number(s.split("/")[1])))
  const twice = shards.filter((s, i) => shards.indexOf(s) !== i)
  const missing = counts.length === 1
    ? Array.from({ length: counts[0]! }, (_, i) => `${i}/${counts[0]}`).filter((s) => !shards.includes(s))
    : []
  const notes = [
    ...(counts.length > 1 ? [`shards of ${counts.join(" and ")} merged together`] : []),
    ...(missing.length > 0 ? [`shard${missing.length === 1 ? "" : "s"} ${missing.join(", ")} missing`] : []),
    ...(twice.length > 0
      ? [`shard${twice.length === 1 ? "" : "s"} ${distinct(twice).join(", ")} given more than once`]
      : [])
  ]
  return notes.length === 0 ? null : `${notes.join("; ")}: the totals are those of the results given`
}

export const main = async (argv: ReadonlyArray<string>, io: Io = processIo): Promise<number> => {
  const parsed = parseArguments(argv)
  switch (parsed.command) {
    case "help":
      io.out(parsed.text)
      return 0
    case "error":
      io.log(
        `harness: ${parsed.message} (npm run harness -- ${
          argv[0] === "keys" || argv[0] === "merge" ? `${argv[0]} ` : ""
        }--help lists the flags)`
      )
      return 2
    case "keys":
      return makeKeys(parsed, io, process.env)
    case "merge": {
      let results: Array<HarnessResult>
      try {
        results = parsed.files.map((file) => {
          try {
            return checkResult(JSON.parse(readFileSync(file, "utf8")) as HarnessResult)
          } catch (error) {
            throw new Error(
              `${file}: not a harness result (${error instanceof Error ? error.message : String(error)})`,
              {
                cause: error
              }
            )
          }
        })
      } catch (error) {
        io.log(`harness merge: ${error instanceof Error ? error.message : String(error)}`)
        return 2
      }
      let merged: HarnessResult
      try {
        merged = mergeResults(results)
      } catch (error) {
        io.log(`harness merge: ${error instanceof Error ? error.message : String(error)}`)
        return 2
      }
      const missing = missingShards(merged.config.shards)
      if (missing !== null) io.log(`harness merge: ${missing}`)
      const files = writeReport(
        parsed.reportDirectory,
        `harness-merged-${new Date().toISOString().replace(/[:.]/g, "-")}`,
        merged
      )
      io.out(summaryOf(merged, files))
      return merged.passed ? 0 : 1
    }
    case "run": {
      let scenario: Scenario
      try {
        scenario = await loadScenario(parsed.scenario)
      } catch (error) {
        io.log(`harness: ${error instanceof Error ? error.message : String(error)}`)
        return 2
      }
      const startAt = parsed.startAtMs === null ? null : startAtProblem(parsed.startAtMs, Date.now())
      if (startAt !== null) {
        io.log(`harness: ${startAt}`)
        return 2
      }
      if (parsed.keysFile !== null) {
        try {
          readKeyFile(parsed.keysFile, parsed.shard)
        } catch (error) {
          io.log(`harness: ${error instanceof Error ? error.message : String(error)}`)
          return 2
        }
      }
      const { result, files, statements } = await runHarness(parsed, io, { scenario })
      io.out(summaryOf(result, files))
      if (statements.length > 0) {
        io.out(`\nstatements that took PostgreSQL longest during the load (execution time only):\n${table(statements)}`)
      }
      return result.passed ? 0 : 1
    }
  }
}

if (process.argv[1]?.endsWith("harness/main.ts")) {
  const argv = process.argv.slice(2)
  const parsed = parseArguments(argv)
  // The whole run is bounded: the wait for --start-at, the load, the drain, and five minutes for
  // starting and checking; `keys`, by ten minutes and 50 ms a merchant.
  const boundSeconds = parsed.command === "run"
    ? Math.max(0, ((parsed.startAtMs ?? 0) - Date.now()) / 1000) + parsed.durationSeconds + parsed.drainSeconds + 300 +
      // Each capacity step may end a client timeout after its load.
      (parsed.findCapacity === null ? 0 : parsed.findCapacity.search.maxSteps * (parsed.timeoutMs / 1000 + 5))
    : parsed.command === "keys"
    ? 600 + parsed.merchants / 20
    : 600
  const stopNow = (why: string, code: number) => {
    process.stderr.write(`\nharness: ${why}; stopping\n`)
    setTimeout(() => process.exit(code), 20_000).unref()
    void stopEveryEmbeddedService().finally(() => process.exit(code))
  }
  const watchdog = setTimeout(
    () => stopNow(`still running after ${boundSeconds} s (bound: duration + drain + 300 s)`, 1),
    boundSeconds * 1000
  )
  watchdog.unref()
  process.once("SIGINT", () => stopNow("interrupted", 130))
  process.once("SIGTERM", () => stopNow("terminated", 143))
  main(argv).then(
    (code) => {
      clearTimeout(watchdog)
      process.exit(code)
    },
    (error) => {
      process.stderr.write(`harness: ${error instanceof Error ? error.stack ?? error.message : String(error)}\n`)
      process.exit(1)
    }
  )
}
