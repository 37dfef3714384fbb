/**
 * A harness run in phases: a session (the service started or reached, the client, the scenario
 * set up) opened once; one load or several (`--find-capacity` drives one per step) over it, each
 * with its own recorder, progress line and figures; then the drain, the laws and the result
 * (main.ts). A phase hands the next a typed value, not a dozen loose variables.
 */
import type { Server } from "node:http"
import { join } from "node:path"
import { postgresCpuSeconds } from "../host.ts"
import { abortWatch, plannedRequests } from "./Abort.ts"
import { AvailabilityRecorder } from "./Availability.ts"
import type { RunOptions } from "./Cli.ts"
import { type Clock, realClock } from "./Clock.ts"
import type { LawResult, Scenario } from "./Contract.ts"
import { type EmbeddedService, startEmbeddedService } from "./Embedded.ts"
import { type HarnessProcessor, startHarnessProcessor } from "./HarnessProcessor.ts"
import { readKeyFile } from "./KeyFile.ts"
import { type LoadModel, type LoadOutcome, runLoad } from "./LoadModel.ts"
import {
  type ClusterAvailability,
  clusterAvailability,
  type FaultFigures,
  faultFigures,
  makeNemesis,
  type Nemesis,
  planFaults
} from "./Nemesis.ts"
import { servePrometheus } from "./Prometheus.ts"
import { type JudgeRules, Recorder, type Status } from "./Recorder.ts"
import { saturated, saturationOf } from "./Saturation.ts"
import { loadScenario } from "./Scenarios.ts"
import { evaluateSlo, type ObjectiveResult } from "./Slo.ts"
import { rateAt, stageAt, stageText } from "./Stages.ts"
import {
  type BalancedClient,
  balancedClient,
  httpClient,
  type RecordingTransport,
  recordingTransport
} from "./Transport.ts"

export interface Io {
  /** Diagnostics and progress (stderr). */
  readonly log: (line: string) => void
  /** The summary (stdout). */
  readonly out: (line: string) => void
  /** Where the live progress line goes, or null for none. */
  readonly progress: { readonly write: (text: string) => void; readonly isTTY: boolean } | null
}

/** What every load of a run shares: the service, the client, the scenario set up on it. */
export interface Session {
  readonly options: RunOptions
  readonly io: Io
  readonly scenario: Scenario
  readonly clock: Clock
  readonly name: string
  readonly startedAt: Date
  readonly merchants: number
  readonly embedded: EmbeddedService | null
  /** `--processor`: the sandbox processor the embedded service talks to. */
  readonly processor: HarnessProcessor | null
  readonly targetUrls: ReadonlyArray<string>
  readonly client: BalancedClient
  readonly transport: RecordingTransport
  /** Where the transport records now: the current load's recorder, or `outside` (set-up, drain, laws). */
  readonly sink: { recorder: Recorder; availability: AvailabilityRecorder | null }
  readonly outside: Recorder
  readonly nemesis: Nemesis | null
  /** Failures of the scenario itself, reported as the law `harness`. */
  readonly failures: Array<string>
  setUp: boolean
  readonly rss: { readonly start: number; peak: number; readonly samples: Array<[number, number]> }
  /** Laws violated so far (for the metrics endpoint; known after the checks). */
  lawsViolated: number
  /**
   * Scripts started by the loads so far: a load numbers its scripts on from there, so that the
   * steps of a capacity search never run two scripts of one index (a scenario derives its
   * idempotency keys from it).
   */
  scriptsStarted: number
}

export const failOf = (session: Session) => (what: string, error: unknown) =>
  void session.failures.push(`${what}: ${error instanceof Error ? error.message : String(error)}`)

/** A failure of the scenario itself (set-up, a script, the drain, the law checks) is reported as a broken law. */
export const harnessLaw = (message: string): LawResult => ({
  law: "harness",
  description: "The scenario set up, ran its scripts, drained and checked its laws without an error of its own.",
  checked: 1,
  violations: [{ paymentId: null, message, requests: [] }]
})

/** Starts (or reaches) the service and sets the scenario up on it; a failed set-up is a failure, not a throw. */
export const openSession = async (
  options: RunOptions,
  io: Io,
  given: { readonly scenario?: Scenario; readonly clock?: Clock }
): Promise<Session> => {
  const scenario: Scenario = given.scenario ?? await loadScenario(options.scenario)
  const clock = given.clock ?? realClock
  // The shard's own keys file, every key of it (KeyFile.ts: one file per shard, used whole).
  const apiKeys = options.keysFile === null ? null : readKeyFile(options.keysFile, options.shard).keys
  const startedAt = new Date()
  const name = `harness-${options.scenario}-${options.shard.index}of${options.shard.count}-${
    startedAt.toISOString().replace(/[:.]/g, "-")
  }`
  let embedded: EmbeddedService | null = null
  let processor: HarnessProcessor | null = null
  if (options.targetUrl === null) {
    io.log("starting the service on an embedded PostgreSQL...")
    try {
      if (options.processor !== null) {
        processor = await startHarnessProcessor({ lostAnswerRate: options.processor.lostAnswerRate, log: io.log })
      }
      embedded = await startEmbeddedService({
        logFile: join(options.reportDirectory, `${name}.service.log`),
        log: io.log,
        profileDirectory: options.profileDirectory,
        statementStats: options.statements > 0,
        instances: options.instances,
        plantedBug: options.plantedBug,
        ...(processor === null ? {} : { environment: processor.environment })
      })
    } catch (error) {
      await processor?.close().catch(() => {})
      await scenario.close().catch(() => {})
      throw error
    }
  }
  // Every instance, requests spread over them in turn; the scenario is told the first.
  const targetUrls = embedded?.baseUrls ?? options.targetUrls
  const client = balancedClient(
    targetUrls.map((url) => httpClient(url, { sockets: options.sockets, timeoutMs: options.timeoutMs }))
  )
  const outside = new Recorder(clock.now())
  const sink: Session["sink"] = { recorder: outside, availability: null }
  const rssStart = process.memoryUsage.rss() / 2 ** 20
  const session: Session = {
    options,
    io,
    scenario,
    clock,
    name,
    startedAt,
    embedded,
    processor,
    targetUrls,
    client,
    sink,
    outside,
    merchants: apiKeys?.length ?? options.merchants,
    nemesis: options.nemesis === null || embedded === null
      ? null
      : makeNemesis(embedded.faults, clock, Date.now, io.log),
    // As many requests on the wire as sockets: the rest wait in the transport, where the wait counts
    // in their latency but not in the client timeout (which is the service's time to answer).
    transport: recordingTransport(client, clock, sink, options.sockets),
    failures: [],
    setUp: false,
    rss: { start: rssStart, peak: rssStart, samples: [[0, Math.round(rssStart)]] },
    lawsViolated: 0,
    scriptsStarted: 0
  }
  await setUpScenario(session, apiKeys)
  return session
}

const setUpScenario = async (session: Session, apiKeys: ReadonlyArray<string> | null) => {
  const { options, embedded, nemesis } = session
  try {
    await session.scenario.setup({
      targetUrl: session.targetUrls[0]!,
      apiKeys,
      embedded: embedded?.target ?? null,
      merchants: session.merchants,
      seed: options.seed,
      webhookHost: options.webhookHost,
      webhookPort: options.webhookPort,
      webhookUrl: options.webhookUrl,
      shard: options.shard,
      transport: session.transport,
      instances: session.targetUrls.length,
      log: session.io.log,
      ...(nemesis === null ? {} : { faults: nemesis.log })
    })
    session.setUp = true
  } catch (error) {
    failOf(session)("set-up", error)
  }
}

export const closeSession = async (session: Session) => {
  await session.nemesis?.stop()
  await session.scenario.close().catch((error) => session.io.log(`closing the scenario: ${String(error)}`))
  session.client.close()
  await session.embedded?.stop()
  await session.processor?.close()
}

/** One load over a session: its shape, and which of its requests are judged. */
export interface LoadSpec {
  readonly model: LoadModel
  readonly durationMs: number
  readonly maxRequests: number | null
  /** Requests issued in the first `warmupMs` are recorded, not judged. */
  readonly warmupMs: number
  /** At most this many requests are judged (null: all after the warm-up). */
  readonly judgedCap: number | null
  /** Sees each judged request (the abort watch); `shouldStop` true stops the load at once. */
  readonly onJudged?: (route: string, status: Status, latencyMs: number) => void
  readonly shouldStop?: () => boolean
  /** Before the progress line, e.g. `step 3/12 ` (default none). */
  readonly label?: string
}

/** What one load measured. */
export interface LoadFigures {
  readonly outcome: LoadOutcome
  readonly recorder: Recorder
  readonly load: ReturnType<Recorder["finish"]>
  /** The judged requests' figures (the load's own without a warm-up or a cap). */
  readonly judged: ReturnType<Recorder["finish"]>
  readonly loadStartMs: number
  readonly startEpochMs: number
  readonly harnessCpuSeconds: number
  readonly serviceCpuSeconds: number | null
  readonly postgresCpuSeconds: number | null
  readonly faults: ReadonlyArray<FaultFigures> | undefined
  readonly availability: ClusterAvailability
}

const noOutcome = (atMs: number): LoadOutcome => ({
  scriptsStarted: 0,
  scriptsLate: 0,
  startLagMs: { p50: 0, p99: 0, max: 0 },
  scriptsHeldBack: 0,
  startedAtMs: atMs,
  loadEndedAtMs: atMs,
  endedAtMs: atMs,
  scriptFailures: 0,
  firstFailure: null
})

/** Drives one load over the session (nothing when the set-up failed) and reads its figures. */
export const driveLoad = async (session: Session, spec: LoadSpec): Promise<LoadFigures> => {
  const { clock, transport, embedded, nemesis, options } = session
  const loadStartMs = clock.now()
  const startEpochMs = Date.now()
  const rules: JudgeRules | null = spec.warmupMs === 0 && spec.judgedCap === null && spec.onJudged === undefined
    ? null
    : {
      fromMs: loadStartMs + spec.warmupMs,
      cap: spec.judgedCap,
      ...(spec.onJudged === undefined ? {} : { onJudged: spec.onJudged })
    }
  const recorder = new Recorder(loadStartMs, rules)
  const availability = new AvailabilityRecorder(loadStartMs)
  session.sink.recorder = recorder
  session.sink.availability = availability
  const movedBefore = session.client.movedOn()
  const sentBefore = transport.sent()
  const cpuBefore = process.cpuUsage()
  const serviceCpuBefore = embedded === null ? null : embedded.serviceCpuSeconds()
  const postgresCpuBefore = postgresCpuSeconds(embedded?.postmasterPid ?? null)
  const live = await startLiveFigures(session, spec, recorder, loadStartMs, sentBefore)
  let outcome = noOutcome(loadStartMs)
  const firstScript = session.scriptsStarted
  try {
    if (session.setUp) {
      nemesis?.start(
        planFaults(options.nemesis!, { seed: options.seed, instances: options.instances, durationMs: spec.durationMs }),
        loadStartMs
      )
      outcome = await runLoad(
        {
          model: spec.model,
          durationMs: spec.durationMs,
          maxRequests: spec.maxRequests,
          seed: options.seed,
          maxConcurrentScripts: 10_000,
          requestsPerScript: session.scenario.requestsPerScript,
          ...(spec.shouldStop === undefined ? {} : { shouldStop: spec.shouldStop })
        },
        clock,
        (index, intendedStartMs) => session.scenario.runScript(firstScript + index, intendedStartMs),
        () => transport.sent() - sentBefore
      )
      session.scriptsStarted += outcome.scriptsStarted
      if (outcome.scriptFailures > 0) {
        failOf(session)("scripts", `${outcome.scriptFailures} script(s) rejected; the first: ${outcome.firstFailure}`)
      }
    }
    // The faults stop with the load: the drain and the laws see the cluster whole again.
    await nemesis?.stop()
  } finally {
    await live.stop()
  }
  session.sink.availability = null
  session.sink.recorder = session.outside
  const faults = nemesis === null
    ? undefined
    : faultFigures(nemesis.marks, availability, outcome.endedAtMs - loadStartMs)
  const cpuUsed = process.cpuUsage(cpuBefore)
  const postgresCpuAfter = postgresCpuSeconds(embedded?.postmasterPid ?? null)
  const load = recorder.finish(outcome.endedAtMs)
  return {
    outcome,
    recorder,
    load,
    loadStartMs,
    startEpochMs,
    faults,
    judged: recorder.judged === null ? load : recorder.judged.finish(outcome.endedAtMs),
    harnessCpuSeconds: (cpuUsed.user + cpuUsed.system) / 1e6,
    serviceCpuSeconds: embedded === null || serviceCpuBefore === null
      ? null
      : embedded.serviceCpuSeconds() - serviceCpuBefore,
    postgresCpuSeconds: postgresCpuBefore === null || postgresCpuAfter === null
      ? null
      : postgresCpuAfter - postgresCpuBefore,
    availability: clusterAvailability(availability, faults ?? [], session.client.movedOn() - movedBefore)
  }
}

/** The offered rate `atMs` into the load (open model; null for the closed one). */
export const offeredAt = (model: LoadModel, atMs: number) =>
  model.kind === "closed" ? null : model.stages ? rateAt(model.stages, atMs) : model.rate

/** The progress line's offered rate: ` of 200 offered`, with stages ` of 120 offered (stage 1/3, 30s 0→200/s)`. */
export const offeredText = (model: LoadModel, atMs: number) => {
  if (model.kind === "closed") return ""
  if (!model.stages) return ` of ${model.rate} offered`
  const { index, stage } = stageAt(model.stages, atMs)
  return ` of ${rateAt(model.stages, atMs).toFixed(0)} offered (stage ${index + 1}/${model.stages.length}, ${
    stageText(stage)
  })`
}

/**
 * Live progress on stderr: on a terminal a line rewritten every second; elsewhere (CI, a log) a
 * line every 5 s, or every second with --progress. Each gives the interval's own figures
 * (answers a second against the offered rate, percentiles, errors), not the run's so far. Also
 * the RSS samples and, with --prometheus-port, the metrics endpoint.
 */
const startLiveFigures = async (
  session: Session,
  spec: LoadSpec,
  recorder: Recorder,
  loadStartMs: number,
  sentBefore: number
) => {
  const { io, options, clock, transport } = session
  const showProgress = io.progress !== null
  const everyTicks = io.progress !== null && !io.progress.isTTY && !options.progress ? 5 : 1
  let lastTickMs = loadStartMs
  let ticks = 0
  let achievedPerSecond = 0
  let metricsServer: Server | null = null
  if (options.prometheusPort !== null) {
    metricsServer = await servePrometheus(options.prometheusPort, () => ({
      offeredPerSecond: offeredAt(spec.model, clock.now() - loadStartMs),
      achievedPerSecond,
      routes: recorder.routesNow(),
      requestsSent: transport.sent() - sentBefore,
      inFlight: transport.inFlight(),
      lawsViolated: session.lawsViolated
    }))
    io.log(`metrics: http://127.0.0.1:${options.prometheusPort}/metrics`)
  }
  const timer = setInterval(() => {
    const rss = process.memoryUsage.rss() / 2 ** 20
    session.rss.peak = Math.max(session.rss.peak, rss)
    if (++ticks % 10 === 0) session.rss.samples.push([ticks, Math.round(rss)])
    if (!showProgress || ticks % everyTicks !== 0) return
    const nowMs = clock.now()
    const interval = recorder.takeInterval()
    achievedPerSecond = interval.requests / ((nowMs - lastTickMs) / 1000)
    const line =
      `${spec.label ?? ""}${((nowMs - loadStartMs) / 1000).toFixed(0)}s  ${achievedPerSecond.toFixed(0)} req/s${
        offeredText(spec.model, nowMs - loadStartMs)
      }  ` +
      `p50 ${interval.p50.toFixed(1)} ms  p99 ${
        interval.p99.toFixed(1)
      } ms  errors ${interval.errors}  in flight ${transport.inFlight()}`
    lastTickMs = nowMs
    io.progress!.write(io.progress!.isTTY ? `\r\x1b[K${line}` : `${line}\n`)
  }, 1000)
  timer.unref()
  return {
    stop: async () => {
      clearInterval(timer)
      if (showProgress && io.progress!.isTTY) io.progress!.write("\n")
      if (metricsServer !== null) await new Promise((done) => metricsServer!.close(done))
    }
  }
}

/** `--abort-on-fail` (and each step of `--find-capacity`): the watch over the judged requests, capped at the planned count (bench/harness/Abort.ts). */
export const abortSpec = (session: Session, model: LoadModel, durationMs: number, always = false) => {
  const { options } = session
  const none = { spec: { judgedCap: null }, watch: null, planned: null }
  if ((!options.abortOnFail && !always) || options.slo.length === 0) return none
  const planned = plannedRequests({
    model,
    durationMs,
    warmupMs: options.warmupMs,
    maxRequests: options.maxRequests,
    requestsPerScript: session.scenario.requestsPerScript,
    seed: options.seed
  })
  if (planned === null) return none
  const watch = abortWatch(options.slo, planned)
  if (!always) {
    session.io.log(`--abort-on-fail: ${planned} requests planned after the warm-up; the objectives judge at most those`)
  }
  return {
    spec: { judgedCap: planned, onJudged: watch.observe, shouldStop: () => watch.lost() !== null },
    watch,
    planned
  }
}

/** What a load is judged by: the saturation verdict and the objectives, over its judged requests. */
export const judgeLoad = (
  session: Session,
  figures: LoadFigures,
  model: LoadModel,
  allowSaturation = session.options.allowSaturation
) => {
  const { options } = session
  const { outcome, judged } = figures
  const saturation = saturationOf({
    model,
    outcome,
    times: figures.recorder,
    shiftMs: judged.latency_ms.p50,
    driverCpuSeconds: figures.harnessCpuSeconds,
    warmupMs: options.warmupMs
  })
  const rate = saturation.achieved_per_s
  const slo: Array<ObjectiveResult> = [
    ...evaluateSlo(options.slo, {
      requests: judged.requests,
      errors: judged.errors,
      rate,
      latency_ms: judged.latency_ms,
      routes: judged.routes,
      windowSeconds: Math.max(
        0.001,
        outcome.loadEndedAtMs - Math.min(outcome.loadEndedAtMs, outcome.startedAtMs + options.warmupMs)
      ) / 1000
    }),
    // Built in: a run that fell behind its offered rate measured a queue (docs/harness.md, "Saturation").
    ...(saturation.offered_per_s === null || allowSaturation || !session.setUp
      ? []
      : [{
        objective: `kept pace with the offered rate (${saturation.verdict})`,
        route: null,
        measured_share: saturation.achieved_share ?? 0,
        met: !saturated(saturation)
      }])
  ]
  return { saturation, rate, slo }
}
