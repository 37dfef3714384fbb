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
import type { Server } from "node:http"
import { join } from "node:path"
import pg from "pg"
import { fixed } from "../report.ts"
import { type StatementStats, statementStats, statementsTable } from "../statements.ts"
import { postgresCpuSeconds } from "../host.ts"
import { type AvailabilityFigures, AvailabilityRecorder } from "./Availability.ts"
import { parseArguments, type RunOptions, startAtProblem } from "./Cli.ts"
import { type Clock, realClock, waitUntilEpoch } from "./Clock.ts"
import type { LawResult, Scenario } from "./Contract.ts"
import { type EmbeddedService, startEmbeddedService, stopEveryEmbeddedService } from "./Embedded.ts"
import { renderHarnessReport } from "./Html.ts"
import { lateStartMs, type LoadOutcome, runLoad } from "./LoadModel.ts"
import { readKeyFile } from "./KeyFile.ts"
import { makeKeys } from "./MakeKeys.ts"
import { clusterAvailability, faultFigures, makeNemesis, type Nemesis, planFaults } from "./Nemesis.ts"
import { Recorder } from "./Recorder.ts"
import { checkResult, type HarnessResult, lawFigures, loadText, mergeResults, passedOf, type ShardFigures } from "./Result.ts"
import { loadScenario } from "./Scenarios.ts"
import { saturated, saturationLine, saturationOf } from "./Saturation.ts"
import { servePrometheus } from "./Prometheus.ts"
import { evaluateSlo } from "./Slo.ts"
import { balancedClient, httpClient, recordingTransport } from "./Transport.ts"

export interface Io {
  /** Diagnostics and progress (stderr). */
  readonly log: (line: string) => void
  /** The summary (stdout). */
  readonly out: (line: string) => void
  /** Where the live progress line goes, or null for none. */
  readonly progress: { readonly write: (text: string) => void; readonly isTTY: boolean } | null
}

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
    ...shards.map((s) => [
      `shard ${s.shard}`,
      `${s.rate === null ? `${s.connections} connections` : `${s.rate}/s offered`}, ${s.merchants} merchants, seed ${s.seed}: ` +
        `${s.requests} requests, ${fixed(s.achieved_rate, 1)}/s, ${s.errors} errors, ${s.passed ? "passed" : "FAILED"}; against ${s.target}`
    ] as const),
    ["shard starts", `${fixed((Math.max(...starts) - Math.min(...starts)) / 1000, 3)} s apart`]
  ]
}

/** The summary printed at the end of a run or a merge. */
export const summaryOf = (result: HarnessResult, files: ReadonlyArray<string>) => {
  const p = result.latency_ms
  const shards = result.per_shard ?? []
  const total = shards.length > 1 ? ` (the total of ${shards.length} shards)` : ""
  const rows: Array<readonly [string, string]> = [
    ["scenario", `${result.scenario} against ${result.config.target}${result.config.embedded ? " (started by the harness)" : ""}`],
    ...(result.config.planted_bug === undefined ? [] : [["planted bug", `${result.config.planted_bug} (bench/harness/PlantedService.ts)`] as const]),
    ["load", loadText(result.config) + total],
    ["merchants", `${result.config.merchants}${total}`],
    ...shardRows(shards),
    ["requests", `${result.requests} in ${fixed(result.load_s, 1)} s; ${fixed(result.rate, 1)}/s over the load window (${result.scripts} scripts, ${result.scripts_late} started over ${lateStartMs} ms late)`],
    ...(result.saturation === undefined ? [] : [["pace", saturationLine(result.saturation)] as const]),
    ["latency p50/p90/p99/p99.9/max ms", `${fixed(p.p50, 2)} / ${fixed(p.p90, 2)} / ${fixed(p.p99, 2)} / ${fixed(p.p999, 2)} / ${fixed(p.max, 2)}`],
    ["status codes", JSON.stringify(result.status_codes)],
    ["errors (no answer or 5xx)", String(result.errors)],
    ["harness CPU ms per request", fixed(result.cpu.harness_ms_per_request, 3)],
    ["service CPU ms per request", result.cpu.service_s === null ? "n/a (not started by the harness)" : fixed(result.cpu.service_ms_per_request, 3)],
    ["PostgreSQL CPU ms per request", (result.cpu.postgres_s ?? null) === null ? "n/a (not started by the harness)" : fixed(result.cpu.postgres_ms_per_request, 3)],
    ["harness RSS MB start/end/peak", `${fixed(result.cpu.harness_rss_mb.start, 0)} / ${fixed(result.cpu.harness_rss_mb.end, 0)} / ${fixed(result.cpu.harness_rss_mb.peak, 0)}`]
  ]
  rows.push(...clusterRows(result))
  for (const law of result.laws) rows.push([`law ${law.law}`, law.held ? `held (${law.checked} checked)` : `VIOLATED ${law.violation_count} time(s); first: ${law.first_violations[0]?.paymentId ?? "-"}: ${law.first_violations[0]?.message ?? ""}`])
  for (const objective of result.slo) rows.push([`slo ${objective.objective}`, `${objective.met ? "met" : "MISSED"} (actual ${fixed(objective.actual, 3)})`])
  rows.push(["verdict", result.passed ? "PASSED" : "FAILED"])
  for (const file of files) rows.push(["report", file])
  return table(rows)
}

const percent = (figures: AvailabilityFigures) =>
  figures.availability === null ? "no requests"
    : `${fixed(figures.availability * 100, 2)}% answered (${figures.answered} of ${figures.requests}; refused ${figures.refused}, dropped ${figures.dropped}, 5xx ${figures.server_errors})`

/** The summary's lines on the instances, the faults and availability, and the scenario's own figures. */
const clusterRows = (result: HarnessResult): Array<readonly [string, string]> => {
  const rows: Array<readonly [string, string]> = []
  if ((result.config.instances ?? 1) > 1 || (result.config.nemesis ?? null) !== null) {
    rows.push(["instances", `${result.config.instances ?? 1}${result.config.nemesis ? `; nemesis ${result.config.nemesis}` : ""}`])
  }
  for (const fault of result.faults ?? []) {
    rows.push([`fault ${fault.kind} ${fault.instance === null ? "database" : `instance ${fault.instance}`}`, `${fixed(fault.start_s, 1)}-${fixed(fault.end_s, 1)} s: ${percent(fault.availability)}`])
  }
  if (result.availability !== undefined) {
    rows.push(["availability", percent(result.availability.overall)])
    if ((result.faults ?? []).length > 0) {
      rows.push(["availability during faults", percent(result.availability.during_faults)])
      rows.push(["availability outside faults", percent(result.availability.outside_faults)])
    }
    if (result.availability.moved_on_refusal > 0) rows.push(["sent on to another instance", `${result.availability.moved_on_refusal} (connection refused)`])
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

/** A failure of the scenario itself (set-up, a script, the drain, the law checks) is reported as a broken law. */
const harnessLaw = (message: string): LawResult => ({
  law: "harness",
  description: "The scenario set up, ran its scripts, drained and checked its laws without an error of its own.",
  checked: 1,
  violations: [{ paymentId: null, message, requests: [] }]
})

/** `--start-at`: the load waits for the shards' common start (the set-up comes before it). */
const startTogether = async (startAtMs: number, clock: Clock, io: Io) => {
  const at = new Date(startAtMs).toISOString()
  const aheadMs = startAtMs - Date.now()
  if (aheadMs > 0) io.log(`set up; the load starts at ${at} (--start-at), in ${(aheadMs / 1000).toFixed(1)} s`)
  else io.log(`set-up ended ${(-aheadMs / 1000).toFixed(1)} s after --start-at ${at}: this shard's load starts late`)
  await waitUntilEpoch(startAtMs, clock)
}

export const runHarness = async (
  options: RunOptions,
  io: Io,
  /** Tests give their own scenario (else the one `--scenario` names) or clock. */
  given: { readonly scenario?: Scenario; readonly clock?: Clock } = {}
): Promise<{ result: HarnessResult; files: Array<string>; statements: Array<[string, string]> }> => {
  const scenario: Scenario = given.scenario ?? await loadScenario(options.scenario)
  const clock = given.clock ?? realClock
  // The shard's own keys file, every key of it (KeyFile.ts: one file per shard, used whole).
  const apiKeys = options.keysFile === null ? null : readKeyFile(options.keysFile, options.shard).keys
  const merchants = apiKeys?.length ?? options.merchants
  const startedAt = new Date()
  const stamp = startedAt.toISOString().replace(/[:.]/g, "-")
  const name = `harness-${options.scenario}-${options.shard.index}of${options.shard.count}-${stamp}`
  let embedded: EmbeddedService | null = null
  if (options.targetUrl === null) {
    io.log("starting the service on an embedded PostgreSQL...")
    try {
      embedded = await startEmbeddedService({
        logFile: join(options.reportDirectory, `${name}.service.log`),
        log: io.log,
        profileDirectory: options.profileDirectory,
        statementStats: options.statements > 0,
        instances: options.instances,
        plantedBug: options.plantedBug
      })
    } catch (error) {
      await scenario.close().catch(() => {})
      throw error
    }
  }
  // Every instance, requests spread over them in turn; the scenario is told the first.
  const targetUrls = embedded?.baseUrls ?? options.targetUrls
  const targetUrl = targetUrls[0]!
  const client = balancedClient(targetUrls.map((url) => httpClient(url, { sockets: options.sockets, timeoutMs: options.timeoutMs })))
  const nemesis: Nemesis | null = options.nemesis === null || embedded === null ? null : makeNemesis(embedded.faults, clock, Date.now, io.log)
  // Set-up, drain and law checks are counted apart: the figures are the load's.
  const outside = new Recorder(clock.now())
  const sink: { recorder: Recorder; availability: AvailabilityRecorder | null } = { recorder: outside, availability: null }
  // As many requests on the wire as sockets: the rest wait in the transport, where the wait counts
  // in their latency but not in the client timeout (which is the service's time to answer).
  const transport = recordingTransport(client, clock, sink, options.sockets)
  const failures: Array<string> = []
  const fail = (what: string, error: unknown) => failures.push(`${what}: ${error instanceof Error ? error.message : String(error)}`)
  const rssStart = process.memoryUsage.rss() / 2 ** 20
  let rssPeak = rssStart
  const rssSamples: Array<[number, number]> = [[0, Math.round(rssStart)]]
  let progress: ReturnType<typeof setInterval> | null = null
  let metricsServer: Server | null = null
  let statementsClient: pg.Client | null = null
  let statements: Array<[string, string]> = []
  try {
    let setUp = false
    try {
      await scenario.setup({
        targetUrl,
        apiKeys,
        embedded: embedded?.target ?? null,
        merchants,
        seed: options.seed,
        webhookHost: options.webhookHost,
        webhookPort: options.webhookPort,
        webhookUrl: options.webhookUrl,
        shard: options.shard,
        transport,
        instances: targetUrls.length,
        log: io.log,
        ...(nemesis === null ? {} : { faults: nemesis.log })
      })
      setUp = true
    } catch (error) {
      fail("set-up", error)
    }

    // pg_stat_statements around the load, read on a connection of the harness's own.
    statementsClient = options.statements > 0 && embedded !== null ? new pg.Client({ connectionString: embedded.target.databaseUrl }) : null
    let statementsBefore: StatementStats = new Map()
    if (statementsClient !== null) {
      try {
        await statementsClient.connect()
        await statementsClient.query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        statementsBefore = await statementStats(statementsClient)
      } catch (error) {
        io.log(`pg_stat_statements is not available (${error instanceof Error ? error.message : String(error)}): no statements listed`)
      }
    }
    if (options.startAtMs !== null && setUp) await startTogether(options.startAtMs, clock, io)
    const loadStartMs = clock.now()
    const startEpochMs = Date.now()
    const recorder = new Recorder(loadStartMs)
    sink.recorder = recorder
    const availability = new AvailabilityRecorder(loadStartMs)
    sink.availability = availability
    const movedBefore = client.movedOn()
    const sentBefore = transport.sent()
    const cpuBefore = process.cpuUsage()
    const serviceCpuBefore = embedded === null ? null : embedded.serviceCpuSeconds()
    const postgresCpuBefore = postgresCpuSeconds(embedded?.postmasterPid ?? null)
    // Live progress on stderr: on a terminal a line rewritten every second; elsewhere (CI, a
    // log) a line every 5 s, or every second with --progress. Each gives the interval's own
    // figures (answers a second against the offered rate, percentiles, errors), not the run's so far.
    const showProgress = io.progress !== null
    const everyTicks = io.progress !== null && !io.progress.isTTY && !options.progress ? 5 : 1
    const offered = options.model.kind === "open" ? ` of ${options.model.rate} offered` : ""
    let lastTickMs = loadStartMs
    let ticks = 0
    let achievedPerSecond = 0
    let lawsViolated = 0
    if (options.prometheusPort !== null) {
      metricsServer = await servePrometheus(options.prometheusPort, () => ({
        offeredPerSecond: options.model.kind === "open" ? options.model.rate : null,
        achievedPerSecond,
        routes: recorder.routesNow(),
        requestsSent: transport.sent() - sentBefore,
        inFlight: transport.inFlight(),
        lawsViolated
      }))
      io.log(`metrics: http://127.0.0.1:${options.prometheusPort}/metrics`)
    }
    progress = setInterval(() => {
      const rss = process.memoryUsage.rss() / 2 ** 20
      rssPeak = Math.max(rssPeak, rss)
      if (++ticks % 10 === 0) rssSamples.push([ticks, Math.round(rss)])
      if (!showProgress || ticks % everyTicks !== 0) return
      const nowMs = clock.now()
      const interval = recorder.takeInterval()
      achievedPerSecond = interval.requests / ((nowMs - lastTickMs) / 1000)
      const line = `${((nowMs - loadStartMs) / 1000).toFixed(0)}s  ${achievedPerSecond.toFixed(0)} req/s${offered}  ` +
        `p50 ${interval.p50.toFixed(1)} ms  p99 ${interval.p99.toFixed(1)} ms  errors ${interval.errors}  in flight ${transport.inFlight()}`
      lastTickMs = nowMs
      io.progress!.write(io.progress!.isTTY ? `\r\x1b[K${line}` : `${line}\n`)
    }, 1000)
    progress.unref()
    const durationMs = options.durationSeconds * 1000
    let outcome: LoadOutcome = {
      scriptsStarted: 0, scriptsLate: 0, startLagMs: { p50: 0, p99: 0, max: 0 }, scriptsHeldBack: 0,
      startedAtMs: loadStartMs, loadEndedAtMs: loadStartMs, endedAtMs: loadStartMs, scriptFailures: 0, firstFailure: null
    }
    if (setUp) {
      nemesis?.start(planFaults(options.nemesis!, { seed: options.seed, instances: options.instances, durationMs }), loadStartMs)
      outcome = await runLoad(
        {
          model: options.model,
          durationMs,
          maxRequests: options.maxRequests,
          seed: options.seed,
          maxConcurrentScripts: 10_000,
          requestsPerScript: scenario.requestsPerScript
        },
        clock,
        (index, intendedStartMs) => scenario.runScript(index, intendedStartMs),
        () => transport.sent() - sentBefore
      )
      if (outcome.scriptFailures > 0) fail("scripts", `${outcome.scriptFailures} script(s) rejected; the first: ${outcome.firstFailure}`)
    }
    // The faults stop with the load: the drain and the laws see the cluster whole again.
    await nemesis?.stop()
    sink.availability = null
    const faults = nemesis === null ? undefined : faultFigures(nemesis.marks, availability, outcome.endedAtMs - loadStartMs)
    const movedOnRefusal = client.movedOn() - movedBefore
    const cpuUsed = process.cpuUsage(cpuBefore)
    const serviceCpu = embedded === null || serviceCpuBefore === null ? null : embedded.serviceCpuSeconds() - serviceCpuBefore
    const postgresCpuAfter = postgresCpuSeconds(embedded?.postmasterPid ?? null)
    const statementsAfter: StatementStats = statementsClient === null ? new Map() : await statementStats(statementsClient)
    const postgresCpu = postgresCpuBefore === null || postgresCpuAfter === null ? null : postgresCpuAfter - postgresCpuBefore
    clearInterval(progress)
    if (showProgress && io.progress!.isTTY) io.progress!.write("\n")
    const load = recorder.finish(outcome.endedAtMs)
    if (statementsClient !== null) statements = statementsTable(statementsBefore, statementsAfter, load.requests, options.statements)
    sink.recorder = outside
    const rssEnd = process.memoryUsage.rss() / 2 ** 20
    rssPeak = Math.max(rssPeak, rssEnd)

    let laws: ReadonlyArray<LawResult> = []
    let figures: Readonly<Record<string, number>> | undefined
    if (setUp) {
      try {
        io.log(`load done (${load.requests} requests); draining...`)
        await scenario.drain(options.drainSeconds * 1000)
        io.log("checking the laws through the API...")
        laws = await scenario.checkLaws()
        figures = scenario.figures?.()
      } catch (error) {
        fail("drain and laws", error)
      }
    }
    if (failures.length > 0) laws = [...laws, harnessLaw(failures.join("; "))]
    // From the first script's start to the last one's end (the figures' span); the rate is the
    // load window's (first intended start to last), without the drain's tail.
    const loadSeconds = Math.max(0.001, outcome.endedAtMs - outcome.startedAtMs) / 1000
    const harnessCpu = (cpuUsed.user + cpuUsed.system) / 1e6
    const saturation = saturationOf(options.model, outcome, recorder, load.latency_ms.p50, harnessCpu)
    const rate = saturation.achieved_per_s
    const slo = [
      ...evaluateSlo(options.slo, { requests: load.requests, errors: load.errors, rate, latency_ms: load.latency_ms }),
      // Built in: a run that fell behind its offered rate measured a queue (docs/harness.md, "Saturation").
      ...(saturation.offered_per_s === null || options.allowSaturation || !setUp
        ? []
        : [{ objective: `kept pace with the offered rate (${saturation.verdict})`, actual: saturation.achieved_share ?? 0, met: !saturated(saturation) }])
    ]
    const lawResults = lawFigures(laws)
    lawsViolated = lawResults.filter((law) => !law.held).length
    const model = options.model
    const result: HarnessResult = {
      format: "payments-harness/1",
      scenario: scenario.name,
      started_at: startedAt.toISOString(),
      ended_at: new Date().toISOString(),
      start_epoch_ms: startEpochMs,
      config: {
        target: targetUrls.join(","),
        embedded: embedded !== null,
        model: model.kind,
        rate: model.kind === "open" ? model.rate : null,
        arrival: model.kind === "open" ? model.arrival : null,
        connections: model.kind === "closed" ? model.connections : null,
        duration_s: options.durationSeconds,
        max_requests: options.maxRequests,
        merchants,
        seed: options.seed,
        slo: options.sloText,
        shards: [`${options.shard.index}/${options.shard.count}`],
        start_at: options.startAtMs === null ? null : new Date(options.startAtMs).toISOString(),
        instances: targetUrls.length,
        nemesis: options.nemesis === null ? null : `${options.nemesis.kinds.join(",")} every ${options.nemesis.everyMs / 1000}s`,
        ...(options.plantedBug === null ? {} : { planted_bug: options.plantedBug })
      },
      load_s: loadSeconds,
      scripts: outcome.scriptsStarted,
      scripts_late: outcome.scriptsLate,
      requests: load.requests,
      errors: load.errors,
      rate,
      saturation,
      status_codes: load.status_codes,
      latency_ms: load.latency_ms,
      histogram: load.histogram,
      routes: load.routes,
      timeline: load.timeline,
      cpu: {
        harness_s: harnessCpu,
        harness_ms_per_request: load.requests === 0 ? null : (harnessCpu * 1000) / load.requests,
        service_s: serviceCpu,
        service_ms_per_request: serviceCpu === null || load.requests === 0 ? null : (serviceCpu * 1000) / load.requests,
        postgres_s: postgresCpu,
        postgres_ms_per_request: postgresCpu === null || load.requests === 0 ? null : (postgresCpu * 1000) / load.requests,
        harness_rss_mb: { start: rssStart, end: rssEnd, peak: rssPeak, samples: rssSamples }
      },
      laws: lawResults,
      slo,
      passed: passedOf(lawResults, slo),
      ...(faults === undefined ? {} : { faults }),
      availability: clusterAvailability(availability, faults ?? [], movedOnRefusal),
      ...(figures === undefined ? {} : { figures })
    }
    return { result, files: writeReport(options.reportDirectory, name, result), statements }
  } finally {
    if (progress !== null) clearInterval(progress)
    if (metricsServer !== null) await new Promise((done) => metricsServer!.close(done))
    await nemesis?.stop()
    await statementsClient?.end().catch(() => {})
    await scenario.close().catch((error) => io.log(`closing the scenario: ${String(error)}`))
    client.close()
    await embedded?.stop()
  }
}

const distinct = <A>(values: ReadonlyArray<A>) => [...new Set(values)]

/** Shards a merge lacks or has twice (a note: a merge of some shards is still worth reading). */
export const missingShards = (shards: ReadonlyArray<string>): string | null => {
  const counts = distinct(shards.map((s) => Number(s.split("/")[1])))
  const twice = shards.filter((s, i) => shards.indexOf(s) !== i)
  const missing = counts.length === 1 ? Array.from({ length: counts[0]! }, (_, i) => `${i}/${counts[0]}`).filter((s) => !shards.includes(s)) : []
  const notes = [
    ...(counts.length > 1 ? [`shards of ${counts.join(" and ")} merged together`] : []),
    ...(missing.length > 0 ? [`shard${missing.length === 1 ? "" : "s"} ${missing.join(", ")} missing`] : []),
    ...(twice.length > 0 ? [`shard${twice.length === 1 ? "" : "s"} ${distinct(twice).join(", ")} given more than once`] : [])
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
      io.log(`harness: ${parsed.message} (npm run harness -- ${argv[0] === "keys" || argv[0] === "merge" ? `${argv[0]} ` : ""}--help lists the flags)`)
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
            throw new Error(`${file}: not a harness result (${error instanceof Error ? error.message : String(error)})`)
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
      const files = writeReport(parsed.reportDirectory, `harness-merged-${new Date().toISOString().replace(/[:.]/g, "-")}`, merged)
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
      if (statements.length > 0) io.out(`\nstatements that took PostgreSQL longest during the load (execution time only):\n${table(statements)}`)
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
    ? Math.max(0, ((parsed.startAtMs ?? 0) - Date.now()) / 1000) + parsed.durationSeconds + parsed.drainSeconds + 300
    : parsed.command === "keys" ? 600 + parsed.merchants / 20 : 600
  const stopNow = (why: string, code: number) => {
    process.stderr.write(`\nharness: ${why}; stopping\n`)
    setTimeout(() => process.exit(code), 20_000).unref()
    void stopEveryEmbeddedService().finally(() => process.exit(code))
  }
  const watchdog = setTimeout(() => stopNow(`still running after ${boundSeconds} s (bound: duration + drain + 300 s)`, 1), boundSeconds * 1000)
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
