import { type Clock, Effect, type Fiber, type Layer } from "effect"
import type { RateLimiter } from "../../src/http/edge/RateLimiter.ts"
import type { AppConfig } from "../../src/platform/Config.ts"
import * as Config from "../../src/platform/Config.ts"
import { makeIds, seededBytes } from "../../src/platform/Ids.ts"
import { isoAt } from "../../src/platform/IsoTime.ts"
import { Merchants } from "../../src/services/Merchants.ts"
import { Reconciliation } from "../../src/services/Reconciliation.ts"
import { emptyState, memoryOperations } from "../../src/store/MemoryStore.ts"
import { memoryWebhookOperations, signingSecretsOf } from "../../src/store/MemoryWebhookStore.ts"
import { recoveryIntervalMs, staleFlowMs } from "../../src/workers/Workers.ts"
import { auditedStore, Auditor, passed, type Violation } from "../checks/Auditor.ts"
import { keyLaw, type KeyLawStats } from "../checks/KeyLaws.ts"
import {
  apiKeysBug,
  processorBug,
  rateLimiterBug,
  storeCallTimeoutBug,
  transportBug,
  webhookStoreBug
} from "../checks/PlantedBugs.ts"
import { processorLaws, type ProcessorLawStats } from "../checks/ProcessorLaws.ts"
import { rateLimitLaw, type RateLimitStats } from "../checks/RateLimitLaw.ts"
import { settlementLaw } from "../checks/Settlement.ts"
import { type AcquirerStats, makeSimulatedAcquirer } from "../world/Acquirer.ts"
import { type DisputeStats, makeDisputeInjector } from "../world/Disputes.ts"
import { auditDeliveries, type EndpointStats, makeSimulatedEndpoints } from "../world/Endpoints.ts"
import { makeSimulatedProcessor, processorPort, type ProcessorStats } from "../world/Processor.ts"
import { type Fence, SimulatedService } from "../world/Service.ts"
import { faultyStore, storeCallTimeoutMs, type StoreFaultOptions, type StoreFaultStats } from "../world/StoreFaults.ts"
import { makeWorkload, type Merchant, type WorkloadStats } from "../world/Workload.ts"
import type { SimOptions } from "./Options.ts"
import { hash32, Prng } from "./Prng.ts"
import { Trace } from "./Trace.ts"
import { VirtualTime } from "./VirtualTime.ts"

/** Virtual time starts here (a Monday, 00:00 UTC, so the first settlement cut-off is a day in). */
export const startMs = Date.UTC(2026, 0, 5, 0, 0, 0)
/** A webhook backlog (mix `endpointBacklogsPerDay`): how long the endpoint lags, and the payments its merchant sends at once. */
const backlogLagMs = 20 * 60_000
const backlogBatch = 40
/** After the workload: time for flows, recovery and webhook retries (24 h schedule) to finish. */
const quiesceMs = 27 * 3_600_000
/**
 * The dispatcher polls every minute (expired leases, work another dispatcher left) and within a
 * second of a commit that wrote events (`Webhooks.eventsCommitted`); retries wake it when due.
 * Polling every 5 s made 60% of a 1,500-payment run's fiber tasks, nearly all finding nothing.
 */
const dispatcherPollMs = 60_000
const dispatcherEventsDelayMs = 1_000
/**
 * Liveness (law `liveness`): once the faults stop at the horizon, within this much virtual time
 * every payment leaves `pending` and its automatic flow, every idempotency claim and webhook lease
 * is released, every delivery ends (succeeded, or failed after its 24 h retry) and the service
 * answers again. The quiesce runs this long at most (it ends as soon as all of that holds).
 */
export const livenessMs = quiesceMs
/**
 * Every answer the service gives comes within this much virtual time of its request (law
 * `answered-in-time`), a frozen database included: a create waits for its flow up to the request
 * deadline (5 s), and each store call a request makes is given up after `storeCallTimeoutMs` while
 * the database is frozen. (A paused instance's late answers are not counted: its clients gave up.)
 */
export const answerBoundMs = 5_000 + 4 * storeCallTimeoutMs

export interface SimResult {
  readonly options: SimOptions
  readonly ok: boolean
  readonly violations: ReadonlyArray<Violation>
  readonly traceHash: string
  readonly traceLines: number
  readonly traceTail: ReadonlyArray<string>
  readonly virtualEndMs: number
  /** Wall time of the run, without the full collection that measures `liveHeapBytes`. */
  readonly wallMs: number
  readonly checks: number
  readonly paymentsByStatus: Record<string, number>
  readonly money: Record<string, { captured: number; refunded: number; fees: number; settled: number }>
  readonly workload: WorkloadStats
  readonly acquirer: AcquirerStats
  readonly endpoints: EndpointStats
  readonly deliveries: { deliveries: number; succeeded: number; failed: number; open: number; attempts: number }
  /** Claims found expired when their attempt was about to start (taken over by another poll or dispatcher). */
  readonly leaseTakeovers: number
  readonly crashes: number
  /** Of the crashes, those placed right after a store commit. */
  readonly commitCrashes: number
  /** Instance pauses (each longer than the leases), and the clock offsets of the instances, ms. */
  readonly pauses: number
  readonly clockOffsetsMs: ReadonlyArray<number>
  /** The slowest answer the service gave, in virtual ms (law `answered-in-time`). */
  readonly slowestAnswerMs: number
  readonly store: StoreFaultStats
  /**
   * Payments captured before the last settlement cut-off that passed at least an hour before the
   * run ended, still not settled (invariant `settled-by-cut-off`: must be 0; failed sweeps are
   * retried and a restart catches up a missed cut-off).
   */
  readonly unsettled: number
  readonly tasks: number
  readonly wakeUps: number
  /** V8 heap high-water mark of the run, in bytes (sampled). */
  readonly peakHeapBytes: number
  /** Heap in use after a full collection at the end, with the run's state still alive (null without --expose-gc). */
  readonly liveHeapBytes: number | null
  readonly stalled: boolean
  readonly disputes: DisputeStats
  /** Law `revoked-key-refused`: the requests it judged (sent with a revoked key, after its revocation committed). */
  readonly keys: KeyLawStats
  /** Law `rate-limit`: the refusals it judged, the keys that went past a full bucket. */
  readonly rateLimit: RateLimitStats
  /**
   * With `--processor`: what the simulated processor did and saw (sim/world/Processor.ts), the
   * processor laws' figures, and what the service's own reconciliation said at the end (its
   * differences, or why it could not run). Null without a processor.
   */
  readonly processor: {
    readonly stats: ProcessorStats
    readonly laws: ProcessorLawStats
    readonly serviceReconciliation:
      | { readonly ours: number; readonly processor: number; readonly differences: number }
      | string
  } | null
}

/**
 * What a test may change of a run besides its options (never part of a replay): the HTTP API's
 * rate limiter, built through `apiWithLimiter` instead of `ApiLive` (test/sim/rate-limit.test.ts
 * checks that path answers as `ApiLive` does).
 */
export interface SimInternals {
  readonly rateLimiter?: Layer.Layer<RateLimiter, never, AppConfig>
}

export const runSimulation = (options: SimOptions, internals: SimInternals = {}): SimResult => {
  const wallStart = performance.now()
  const assembled = assembleWorld(options, internals)
  const { world, faulty, keys } = assembled
  const { auditor, time, trace, service, workload, endpoints, disputes, rateLimit, processor } = world
  const { stalled, deliveries, serviceReconciliation } = runWorld(world, assembled.markBooted)
  const { liveHeapBytes, measuringMs } = measureLiveHeap()
  const { paymentsByStatus, money, unsettled } = finalState(world)
  return {
    options,
    ok: !auditor.failed,
    violations: auditor.violations,
    traceHash: trace.digest(),
    traceLines: trace.lines,
    traceTail: trace.lastLines(),
    virtualEndMs: time.nowMs,
    wallMs: performance.now() - wallStart - measuringMs,
    checks: auditor.checks,
    paymentsByStatus,
    money,
    workload: workload.stats,
    acquirer: assembled.acquirerStats,
    endpoints: endpoints.stats,
    deliveries,
    leaseTakeovers: assembled.leaseTakeovers(),
    crashes: service.crashes,
    commitCrashes: faulty.stats.commitCrashes,
    pauses: service.pauses,
    clockOffsetsMs: assembled.clockOffsetsMs,
    slowestAnswerMs: assembled.answers.slowestMs,
    store: faulty.stats,
    unsettled,
    tasks: time.tasksRun,
    wakeUps: time.timersFired,
    peakHeapBytes: (time.sampleHeap(), time.peakHeapBytes),
    liveHeapBytes,
    stalled,
    disputes: disputes.stats,
    keys: keys.stats,
    rateLimit: rateLimit.stats,
    processor: processor === null
      ? null
      : { stats: processor.stats, laws: world.processorLaw!.stats, serviceReconciliation }
  }
}

/**
 * The world of one run, built in a fixed order from the seed: clock, trace, auditor, the store
 * with its faults, the network, the endpoints, the service's instances, the workload. Beside it,
 * what the result reads that the world does not hold.
 */
const assembleWorld = (options: SimOptions, internals: SimInternals) => {
  const seed = options.seed >>> 0
  const time = new VirtualTime(startMs)
  const nowMs = () => time.nowMs
  const trace = new Trace(options.traceTail, nowMs)
  const config = Config.defaultsWith({ webhookAllowPrivateUrls: true })
  const auditor = auditorOf(config, trace, nowMs)
  const runtime = time.runtime(seed, undefined)
  const crashesMs: Array<number> = []
  /** Each pause of an instance, until its resume (the webhook audit forgives a retry due within one). */
  const pausesMs: Array<{ readonly fromMs: number; toMs: number }> = []
  const horizonEndMs = startMs + options.hours * 3_600_000
  const state = emptyState()
  // Claims whose lease ran out before their attempt started: another dispatcher takes them over.
  // The store tells of each in the renewal's own step (a map on every renewal cost two Effect
  // steps an attempt).
  let leaseTakeovers = 0
  const webhookStore = memoryWebhookOperations(state, { leaseLost: () => void leaseTakeovers++ })
  const network = makeSimulatedAcquirer(Prng.derive(seed, "acquirer"), options.faults)
  const { processor, acquirer, processorLaw } = options.processor
    ? remoteProcessor({ seed, options, network, config, auditor, nowMs, horizonEndMs })
    : { processor: null, acquirer: network.acquirer, processorLaw: null }
  const endpoints = makeSimulatedEndpoints({
    prng: Prng.derive(seed, "webhooks"),
    faults: options.faults,
    auditor,
    window: { startMs, endMs: horizonEndMs + quiesceMs },
    nowMs,
    lastCrashMs: () => crashesMs[crashesMs.length - 1] ?? -1,
    secretsOf: (url) => {
      const merchantId = merchantOfUrl.get(url)
      return merchantId === undefined ? [] : signingSecretsOf(state, merchantId, time.nowMs)
    }
  })
  const merchantOfUrl = new Map<string, string>()
  // Law `revoked-key-refused` (sim/checks/KeyLaws.ts): revocations as the store commits them.
  const keys = keyLaw(auditor, { cacheTtlMs: config.apiKeyCacheTtlMs })
  // Law `rate-limit` (sim/checks/RateLimitLaw.ts): every answer, by key and instance.
  const rateLimit = rateLimitLaw(auditor, { perSecond: config.rateLimitPerSecond })
  let booted = false
  // Crashes between commit and reply: the store wrapper asks, the service dies on the spot.
  const commitCrashPrng = Prng.derive(seed, "commit-crashes")
  const faulty = simulatedStore({
    seed,
    options,
    state,
    auditor,
    trace,
    time,
    runtime,
    horizonEndMs,
    armed: () => booted,
    crashAfterCommit: (what, fence) => crashAfterCommit(world, commitCrashPrng, what, fence),
    // The merchant rotating a key holds its secret until the rotation's answer reaches it.
    keyRevoked: (keyId, fence) => {
      const merchant = merchants.find((m) => m.keyId === keyId)
      if (merchant !== undefined) keys.revoked(merchant.apiKey, keyId, time.nowMs, fence)
    }
  })
  const { clockOf, clockOffsetsMs, clockSkewMs } = clockSkew(options, Prng.derive(seed, "clock-skew"), time, trace)
  const answers = { slowestMs: 0 }
  const { service, disputes, workload } = serviceAndWorkload({
    seed,
    options,
    internals,
    config,
    state,
    webhookStore,
    endpoints,
    faulty,
    acquirer,
    clockOf,
    time,
    trace,
    auditor,
    horizonEndMs,
    answered: answerLaws({ answers, auditor, keys, rateLimit, frozenAt: faulty.frozenAt, crashesMs })
  })
  const merchants: Array<Merchant> = []
  const fork = <A, E>(effect: Effect.Effect<A, E>) => Effect.runForkWith(runtime)(effect)
  const world: World = {
    options,
    seed,
    config,
    time,
    trace,
    auditor,
    state,
    webhookStore,
    service,
    workload,
    disputes,
    endpoints,
    rateLimit,
    processor,
    processorLaw,
    merchants,
    merchantOfUrl,
    crashesMs,
    pausesMs,
    horizonEndMs,
    clockSkewMs,
    fork
  }
  return {
    world,
    faulty,
    keys,
    answers,
    clockOffsetsMs,
    acquirerStats: network.stats,
    leaseTakeovers: () => leaseTakeovers,
    markBooted: () => void (booted = true)
  }
}

/** The auditor of the run's laws: each violation it finds goes into the trace. */
const auditorOf = (config: ReturnType<typeof Config.defaultsWith>, trace: Trace, nowMs: () => number) =>
  new Auditor(nowMs, (v) => trace.record(`VIOLATION ${v.invariant}: ${v.message}`), {
    reviewThreshold: config.fraudThresholds.review,
    blockThreshold: config.fraudThresholds.block
  })

/** The store as the service sees it: the memory store under the auditor, with the run's store faults. */
const simulatedStore = (args: {
  readonly seed: number
  readonly options: SimOptions
  readonly state: ReturnType<typeof emptyState>
  readonly auditor: Auditor
  readonly trace: Trace
  readonly time: VirtualTime
  readonly runtime: ReturnType<VirtualTime["runtime"]>
  readonly horizonEndMs: number
  readonly armed: () => boolean
  readonly crashAfterCommit: StoreFaultOptions["hooks"]["crashAfterCommit"]
  readonly keyRevoked: StoreFaultOptions["hooks"]["keyRevoked"]
}) => {
  const { seed, options, time, runtime, trace } = args
  const audited = auditedStore(memoryOperations(args.state), args.auditor, options.plantedBug)
  return faultyStore({
    store: audited.store,
    prng: Prng.derive(seed, "store"),
    faults: options.faults,
    window: { startMs, endMs: args.horizonEndMs },
    hooks: {
      armed: args.armed,
      nowMs: () => time.nowMs,
      crashAfterCommit: args.crashAfterCommit,
      record: (line) => trace.record(line),
      at: (atMs, task) => {
        const timer = time.at(atMs, task)
        return () => time.cancel(timer)
      },
      runDetached: (effect, done) => {
        Effect.runForkWith(runtime)(Effect.andThen(Effect.yieldNow, effect)).addObserver(done)
      },
      keyRevoked: args.keyRevoked
    },
    splitCommits: audited.commits,
    freezePrng: Prng.derive(seed, "store-freezes"),
    callTimeoutMs: storeCallTimeoutBug(options.plantedBug, storeCallTimeoutMs),
    rotationPrng: Prng.derive(seed, "rotation-lost")
  })
}

/**
 * Boots the world, runs its workload and fault actors to the horizon, lets it quiesce, and audits
 * what it left: liveness first (a run that stays stuck fails naming what is stuck), then the laws
 * of the final state.
 */
const runWorld = (world: World, markBooted: () => void) => {
  const { options, auditor, fork } = world
  const progress = boot(world, markBooted)
  if (options.faults.crashesPerHour > 0) {
    fork(crashActor(world).pipe(Effect.ensuring(Effect.sync(() => void (progress.crashActorDone = true)))))
  }
  if (options.faults.pausesPerHour > 0) {
    fork(pauseActor(world).pipe(Effect.ensuring(Effect.sync(() => void (progress.pauseActorDone = true)))))
  }

  const stalled = runWorkload(world, progress)
  quiesce(world)
  if (!auditor.failed) checkLiveness(world)
  const deliveries = auditor.failed
    ? { deliveries: 0, succeeded: 0, failed: 0, open: 0, attempts: 0 }
    : finalAudit(world)
  const serviceReconciliation = reconcileAsTheServiceDoes(world)
  fork(world.service.stop)
  world.time.settle()
  return { stalled, deliveries, serviceReconciliation }
}

/** The service's instances, the disputes the network opens, and the workload that drives them. */
const serviceAndWorkload = (
  parts: Parameters<typeof simulatedService>[0] & {
    readonly trace: Trace
    readonly auditor: Auditor
    readonly horizonEndMs: number
  }
) => {
  const { seed, options, auditor, trace, state, horizonEndMs } = parts
  const nowMs = () => parts.time.nowMs
  const service = simulatedService(parts)
  const disputes = makeDisputeInjector({
    prng: Prng.derive(seed, "disputes"),
    rate: options.faults.disputes ?? 0,
    service,
    auditor,
    trace,
    state,
    horizonEndMs,
    nowMs
  })
  // Without disputes in the faults, no script asks the network for one.
  const disputesInScripts = (options.faults.disputes ?? 0) > 0
  const workload = makeWorkload({
    options,
    prng: Prng.derive(seed, "workload"),
    service,
    auditor,
    trace,
    horizonEndMs,
    hooks: {
      onPaymentFinished: disputes.consider,
      disputeNow: disputesInScripts ? disputes.openNow : null,
      resolveDisputeNow: disputesInScripts ? disputes.resolveNow : null
    }
  })
  return { service, disputes, workload }
}

/**
 * The live set at its largest (everything a run keeps grows until now), when the caller lets us
 * collect. The collection is the measurement's, not the run's (a full mark-compact of ~800 MB,
 * ~2.7 s at 100,000 payments): its time is left out of `wallMs`.
 */
const measureLiveHeap = () => {
  const gc = (globalThis as { gc?: () => void }).gc
  const measuringStart = performance.now()
  gc?.()
  const liveHeapBytes = gc === undefined ? null : process.memoryUsage().heapUsed
  return { liveHeapBytes, measuringMs: performance.now() - measuringStart }
}

/**
 * Clock skew: each instance's clock is off virtual time by an offset fixed for its life, drawn
 * from its own stream: half the time at the very edge of the tolerance (either side), else
 * anywhere within it. Offset 0 is the run's own clock. `clockOf` gives an instance its clock
 * (null: the run's own) and notes its offset.
 */
const clockSkew = (options: SimOptions, skewPrng: Prng, time: VirtualTime, trace: Trace) => {
  const clockSkewMs = Math.round(options.faults.clockSkewMs)
  const clockOffsetsMs: Array<number> = []
  const clockOf = (generation: number): Clock.Clock | null => {
    if (clockSkewMs <= 0) return null
    const edge = skewPrng.float()
    const offsetMs = edge < 0.25 ? -clockSkewMs : edge < 0.5 ? clockSkewMs : skewPrng.int(-clockSkewMs, clockSkewMs)
    clockOffsetsMs.push(offsetMs)
    trace.record(`generation ${generation} clock ${offsetMs >= 0 ? "+" : ""}${offsetMs} ms`)
    if (offsetMs === 0) return null
    return {
      ...time.clock,
      currentTimeMillisUnsafe: () => time.nowMs + offsetMs,
      currentTimeMillis: Effect.sync(() => time.nowMs + offsetMs),
      currentTimeNanosUnsafe: () => BigInt(time.nowMs + offsetMs) * 1_000_000n,
      currentTimeNanos: Effect.sync(() => BigInt(time.nowMs + offsetMs) * 1_000_000n)
    } as Clock.Clock
  }
  return { clockOf, clockOffsetsMs, clockSkewMs }
}

/** What a run is made of, built by `runSimulation`: what its actors, its quiesce and its final audit work on. */
interface World {
  readonly options: SimOptions
  readonly seed: number
  readonly config: ReturnType<typeof Config.defaultsWith>
  readonly time: VirtualTime
  readonly trace: Trace
  readonly auditor: Auditor
  readonly state: ReturnType<typeof emptyState>
  readonly webhookStore: ReturnType<typeof memoryWebhookOperations>
  readonly service: SimulatedService
  readonly workload: ReturnType<typeof makeWorkload>
  readonly disputes: ReturnType<typeof makeDisputeInjector>
  readonly endpoints: ReturnType<typeof makeSimulatedEndpoints>
  readonly rateLimit: ReturnType<typeof rateLimitLaw>
  readonly processor: ReturnType<typeof makeSimulatedProcessor> | null
  readonly processorLaw: ReturnType<typeof processorLaws> | null
  /** Filled at boot, in creation order. */
  readonly merchants: Array<Merchant>
  readonly merchantOfUrl: Map<string, string>
  /** When an instance died, paused or came back (virtual ms): the webhook audits forgive what happened across them. */
  readonly crashesMs: Array<number>
  /** Each pause of an instance, from the pause to its resume (Infinity until then). */
  readonly pausesMs: Array<{ readonly fromMs: number; toMs: number }>
  readonly horizonEndMs: number
  readonly clockSkewMs: number
  readonly fork: <A, E>(effect: Effect.Effect<A, E>) => Fiber.Fiber<A, E>
}

/** Whether the run's actors are done: the workload (after boot), and the crash and pause actors (done at once without their faults). */
interface Progress {
  workloadDone: boolean
  crashActorDone: boolean
  pauseActorDone: boolean
}

/**
 * Boot: the service, then the merchants (as the CLI's `merchant create` would), then the workload:
 * the arrivals, the key rotations, the webhook backlogs and the rate limit pushes. `booted` runs
 * once the merchants exist (the store's faults are armed from then on).
 */
const boot = (world: World, booted: () => void): Progress => {
  const { options, service, merchants, merchantOfUrl, trace, workload } = world
  const progress: Progress = {
    workloadDone: false,
    crashActorDone: options.faults.crashesPerHour === 0,
    pauseActorDone: options.faults.pausesPerHour === 0
  }
  world.fork(
    Effect.gen(function*() {
      yield* service.start
      for (let i = 0; i < options.merchants; i++) {
        const created = yield* service.withServices(Effect.flatMap(Merchants, (m) =>
          m.create({
            name: `Merchant ${i}`,
            webhookUrl: options.webhooks ? `https://m${i}.merchants.example/webhooks` : null
          })))
        merchants.push({
          index: i,
          id: created.merchant.id,
          apiKey: created.secret,
          keyId: created.apiKey.id,
          keyGeneration: 0
        })
        if (created.merchant.webhookUrl !== null) {
          merchantOfUrl.set(created.merchant.webhookUrl, created.merchant.id)
        }
        trace.record(`merchant m${i} ${created.merchant.id} key ${created.apiKey.id}`)
      }
      booted()
      yield* Effect.all([
        workload.arrivals(merchants, startMs),
        Effect.forEach(merchants, workload.rotations, { concurrency: "unbounded", discard: true }),
        webhookBacklogs(world),
        rateLimitPushes(world)
      ], { concurrency: "unbounded", discard: true })
    }).pipe(Effect.ensuring(Effect.sync(() => void (progress.workloadDone = true))))
  )
  return progress
}

/** `count` times drawn over the workload's 90% of the horizon, in order. */
const timesOverWorkload = (draws: Prng, ratePerDay: number, horizonEndMs: number) => {
  const spanMs = (horizonEndMs - startMs) * 0.9
  const count = Math.floor(ratePerDay * (spanMs / 86_400_000) + draws.float())
  return Array.from({ length: count }, () => startMs + draws.float() * spanMs).sort((a, b) => a - b)
}

/**
 * Rate limit pushes (mix `rateLimitPushesPerDay`), from their own stream: at times drawn over
 * the workload's span, a merchant's new key is pushed past its bucket (`Workload.pushRateLimit`):
 * a burst of 1.2 buckets at once, then twice the refill rate for half a second.
 */
const rateLimitPushes = ({ options, seed, config, time, workload, merchants, horizonEndMs }: World) =>
  Effect.suspend(() => {
    const rate = options.mix.rateLimitPushesPerDay ?? 0
    if (rate <= 0) return Effect.void
    const draws = Prng.derive(seed, "rate-limit")
    const times = timesOverWorkload(draws, rate, horizonEndMs)
    const perSecond = config.rateLimitPerSecond
    const plan = { burst: Math.ceil(2.4 * perSecond), steady: perSecond, gapMs: 500 / perSecond }
    return Effect.forEach(
      times,
      (atMs, k) =>
        Effect.andThen(
          Effect.sleep(Math.max(0, atMs - time.nowMs)),
          Effect.suspend(() =>
            Effect.asVoid(Effect.forkDetach(workload.pushRateLimit(draws.pick(merchants), `p${k + 1}`, plan)))
          )
        ),
      { discard: true }
    )
  })

/**
 * Webhook backlogs (mix `endpointBacklogsPerDay`), from their own stream: at times drawn over the
 * workload's 90% of the horizon, one merchant's endpoint answers in 10-29 s for 20 minutes while
 * the merchant sends a batch of payments at once. Its deliveries (a chain each, in order) fill
 * the endpoint's 8 slots and queue behind them longer than a lease (60 s), so claims run out
 * while they wait, the next poll takes them over, and the claim that waited must see its
 * renewal refused (`leaseTakeovers` counts them).
 */
const webhookBacklogs = ({ options, seed, time, trace, endpoints, workload, merchants, horizonEndMs }: World) =>
  Effect.suspend(() => {
    const rate = options.mix.endpointBacklogsPerDay ?? 0
    if (rate <= 0 || !options.webhooks) return Effect.void
    const draws = Prng.derive(seed, "backlog")
    const times = timesOverWorkload(draws, rate, horizonEndMs)
    return Effect.forEach(
      times,
      (atMs, k) =>
        Effect.andThen(
          Effect.sleep(Math.max(0, atMs - time.nowMs)),
          Effect.suspend(() => {
            const merchant = draws.pick(merchants)
            endpoints.lagging(
              `https://m${merchant.index}.merchants.example/webhooks`,
              time.nowMs,
              time.nowMs + backlogLagMs,
              () => draws.int(10_000, 29_000)
            )
            trace.record(
              `backlog #${k + 1}: m${merchant.index} endpoint lags for ${
                backlogLagMs / 60_000
              } min, ${backlogBatch} payments at once`
            )
            return Effect.asVoid(Effect.forkDetach(workload.batch(merchant, backlogBatch, `b${k + 1}`, draws)))
          })
        ),
      { discard: true }
    )
  })

// Crashes: stop the service at random points, restart it from the store after a downtime.
// Two sources share this path: the crash actor below (at timer wake-ups, between instants) and
// the store wrapper (right after a commit, mid-instant). Either kills the instance at once
// (`crashNow`), then `restartAfter` tears it down, waits and starts a new one.
const crashNow = ({ time, horizonEndMs, service, crashesMs, trace }: World, what: string): boolean => {
  if (time.nowMs >= horizonEndMs || !service.isUp) return false
  crashesMs.push(time.nowMs)
  trace.record(`crash #${service.crashes + 1}${what === "" ? "" : ` ${what}`}`)
  return service.crashNow()
}
const restartAfter = ({ time, service, crashesMs, trace }: World, downtimeMs: number): Effect.Effect<void> =>
  Effect.gen(function*() {
    yield* service.reap
    yield* Effect.sleep(downtimeMs)
    crashesMs.push(time.nowMs)
    yield* service.start
    trace.record(`restart generation ${service.generation}`)
  })

/** The crash actor: crashes at exponential gaps (its own stream) until the horizon, each followed by a restart. */
const crashActor = (world: World) =>
  Effect.gen(function*() {
    const { options, time, horizonEndMs } = world
    const crashPrng = Prng.derive(world.seed, "crashes")
    while (true) {
      yield* Effect.sleep(crashPrng.exponential(3_600_000 / options.faults.crashesPerHour))
      if (time.nowMs >= horizonEndMs) return
      // Down already (a crash after a commit, restarting): this crash has nothing to kill.
      if (!crashNow(world, "")) continue
      yield* restartAfter(world, crashPrng.int(1_000, 120_000))
    }
  })

/**
 * The pause actor: the running instance stops for longer than the leases (61 s–4 min) while its
 * orchestrator starts a replacement (after 1–15 s); then it resumes, carries on with what it
 * held beside the replacement, and is retired 0–5 min later. Drawn from their own stream.
 */
const pauseActor = ({ options, seed, time, trace, service, crashesMs, pausesMs, horizonEndMs }: World) =>
  Effect.gen(function*() {
    const pausePrng = Prng.derive(seed, "pauses")
    while (true) {
      yield* Effect.sleep(pausePrng.exponential(3_600_000 / options.faults.pausesPerHour))
      if (time.nowMs >= horizonEndMs) return
      const pauseMs = pausePrng.int(61_000, 240_000)
      const failoverMs = pausePrng.int(1_000, 15_000)
      const lingerMs = pausePrng.int(0, 300_000)
      const fence: Fence | null = service.pause()
      // Down already (a crash, restarting): nothing to pause.
      if (fence === null) continue
      crashesMs.push(time.nowMs)
      const pause = { fromMs: time.nowMs, toMs: Number.POSITIVE_INFINITY }
      pausesMs.push(pause)
      trace.record(`pause #${service.pauses} for ${pauseMs} ms`)
      yield* Effect.sleep(failoverMs)
      if (!service.isUp) {
        yield* service.start
        trace.record(`replacement generation ${service.generation}`)
      }
      yield* Effect.sleep(pauseMs - failoverMs)
      // (Not a time the webhook audits forgive, as the pause's start is: an attempt the paused
      // instance sent before it may have gone unrecorded, and its replacement sends it again;
      // nothing it does once resumed is forgiven.)
      trace.record(`resume after pause #${service.pauses}`)
      pause.toMs = time.nowMs
      service.resume(fence)
      yield* Effect.sleep(lingerMs)
      if (service.retire(fence)) {
        crashesMs.push(time.nowMs)
        trace.record("paused instance retired")
        yield* service.reap
      }
    }
  })

/** Runs until every script ended, the fault actors are done and the service is up (or a law failed): whether the run stalled. */
const runWorkload = ({ time, auditor, workload, service, horizonEndMs }: World, progress: Progress) => {
  const scriptsDone = () => progress.workloadDone && workload.stats.scriptsFinished === workload.stats.scriptsStarted
  const faultActorsDone = () => (progress.crashActorDone && progress.pauseActorDone) || time.nowMs >= horizonEndMs
  time.run({ stop: () => auditor.failed || (scriptsDone() && faultActorsDone() && service.isUp) })
  const stalled = !auditor.failed && !(scriptsDone() && service.isUp)
  if (stalled) {
    auditor.fail(
      "progress",
      `the run stalled: ${
        workload.stats.scriptsStarted - workload.stats.scriptsFinished
      } scripts unfinished, nothing scheduled`
    )
  }
  return stalled
}

/**
 * Quiesce: no new work, no crashes; flows, recovery, settlement and webhook retries finish.
 * It ends early once nothing is left to do: no flow in flight, no delivery open.
 */
const quiesce = ({ options, time, auditor, state, webhookStore, disputes, service, horizonEndMs }: World) => {
  const quiesceEndMs = Math.max(time.nowMs, horizonEndMs) + quiesceMs
  // A delivery the store has due (`nextDueAt`: the earliest entry whose delivery is still open)
  // settles it without a scan of every delivery (500,000 at 100,000 payments, up to 108 times);
  // only when none is due is every delivery checked, so the answer stays exact.
  const deliveriesFinished = () => {
    if (Effect.runSync(webhookStore.nextDueAt()) !== null) return false
    for (const row of state.webhooks.deliveries.values()) {
      if (row.status !== "succeeded" && row.status !== "failed") return false
    }
    return true
  }
  const idle = () =>
    state.inFlight.size === 0 && state.outbox.length === 0 && disputes.idle() && service.detachedCount === 0 &&
    (!options.webhooks || deliveriesFinished())
  time.run({ untilMs: time.nowMs + 30 * 60_000, stop: () => auditor.failed })
  while (!auditor.failed && time.nowMs < quiesceEndMs && !idle()) {
    time.run({ untilMs: Math.min(quiesceEndMs, time.nowMs + 15 * 60_000), stop: () => auditor.failed })
  }
}

/**
 * Law `liveness`: `livenessMs` after the horizon (or sooner, once idle), nothing is left stuck:
 * no payment pending or half-way through its automatic flow, no idempotency claim or webhook
 * lease still held, every delivery ended or on its schedule (the first open one of its payment's
 * order has its next attempt ahead, within the schedule's last offset, none overdue), and the service answers a request (a few
 * tries, a second apart, past the per-operation store faults that stay on).
 */
const checkLiveness = (world: World) => {
  const { time, auditor, state, horizonEndMs } = world
  const stuck: Array<string> = []
  for (const payment of state.payments.values()) {
    if (payment.status === "pending" || state.inFlight.has(payment.id)) {
      const awaiting = payment.processorPending === null
        ? ""
        : ` awaiting the processor's answer to its ${payment.processorPending.operation} (${payment.processorPending.outcome})`
      stuck.push(
        `payment ${payment.id} ${payment.status}${state.inFlight.has(payment.id) ? " mid-flow" : ""}${awaiting}`
      )
    }
  }
  for (const [merchantId, key, row] of state.idempotency.entries()) {
    if (row.state === "in_progress" && row.lockedUntil > time.nowMs) {
      stuck.push(`idempotency claim ${merchantId}/${key} locked until ${isoAt(row.lockedUntil)}`)
    }
  }
  stuck.push(...stuckDeliveries(world))
  const answer = serviceAnswer(world)
  if (answer !== undefined && (answer === null || answer >= 500)) {
    stuck.push(`the service: GET /api/v1/merchants/me answered ${answer ?? "nothing"} (10 tries)`)
  }
  auditor.check(
    stuck.length === 0,
    "liveness",
    () =>
      `${stuck.length} item(s) stuck ${
        ((time.nowMs - horizonEndMs) / 3_600_000).toFixed(1)
      } h after the faults stopped (at most ${livenessMs / 3_600_000} h): ${stuck.slice(0, 10).join("; ")}${
        stuck.length > 10 ? "; ..." : ""
      }`
  )
}

/**
 * Deliveries stuck: each must be ended, or on its schedule. One waits for the open delivery before
 * it in its payment's order (to the same URL), so a chain of them may take a schedule each (law
 * `webhook-deadline` bounds it); the first open one of each chain must have its next attempt
 * ahead of it, or be no later than a poll, a timeout and a margin overdue. A lease still held is stuck too.
 */
const stuckDeliveries = ({ time, state, config }: World) => {
  const stuck: Array<string> = []
  const overdueMs = dispatcherPollMs + config.webhookTimeoutMs + 60_000
  const aheadMs = (config.webhookRetryScheduleMs[config.webhookRetryScheduleMs.length - 1] ?? 0) + overdueMs
  const onSchedule = (row: { readonly dueAt: number }) =>
    row.dueAt >= time.nowMs - overdueMs && row.dueAt <= time.nowMs + aheadMs
  const heads = new Map<
    string,
    {
      readonly sequence: number
      readonly row: {
        readonly id: string
        readonly status: string
        readonly dueAt: number
        readonly nextAttemptAt: number
      }
    }
  >()
  for (const row of state.webhooks.deliveries.values()) {
    if (!row.open) {
      if (row.leaseUntil > time.nowMs) {
        stuck.push(`webhook lease of delivery ${row.id} until ${isoAt(row.leaseUntil)}`)
      }
      continue
    }
    const paymentId = row.orderPaymentId
    if (paymentId === null) {
      if (!onSchedule(row)) {
        stuck.push(
          `delivery ${row.id} ${row.status}, next attempt ${
            Number.isNaN(row.nextAttemptAt) ? "none" : isoAt(row.nextAttemptAt)
          }`
        )
      }
      continue
    }
    const chain = `${paymentId} ${row.url}`
    const head = heads.get(chain)
    if (head === undefined || row.sequence < head.sequence) heads.set(chain, { sequence: row.sequence, row })
  }
  for (const { row } of heads.values()) {
    if (!onSchedule(row)) {
      stuck.push(
        `delivery ${row.id} ${row.status}, next attempt ${
          Number.isNaN(row.nextAttemptAt) ? "none" : isoAt(row.nextAttemptAt)
        }`
      )
    }
  }
  return stuck
}

/** The status the service answers the first merchant's `GET /api/v1/merchants/me` with, up to 10 tries a second apart (null: none; undefined: no merchant to ask). */
const serviceAnswer = ({ time, service, merchants, fork }: World): number | null | undefined => {
  let answer: number | null = null
  const merchant = merchants[0]
  if (merchant === undefined) return undefined
  fork(Effect.gen(function*() {
    for (let attempt = 0; attempt < 10 && (answer === null || answer >= 500); attempt++) {
      if (attempt > 0) yield* Effect.sleep(1_000)
      answer = yield* service.send(
        service.request("GET", "/api/v1/merchants/me", merchant.apiKey, null, {}),
        (response) => Effect.succeed(response?.status ?? null)
      )
    }
  }))
  time.run({ untilMs: time.nowMs + 60_000, stop: () => answer !== null && answer < 500 })
  return answer
}

/** The laws of the final state: the auditor's, the disputes', the rate limit's, the processor's, the money as answered and the webhook deliveries (their totals). */
const finalAudit = (world: World) => {
  const { auditor, state, disputes, rateLimit, processor, processorLaw, workload, options } = world
  auditor.audit(state)
  disputes.audit()
  rateLimit.audit()
  if (processor !== null) processorLaw!.audit(state.payments.values(), processor.records)
  workload.auditCreateKeys(state.payments.values())
  for (const expected of workload.expectations) {
    const id = expected.paymentId
    const payment = state.payments.get(id)
    if (payment === undefined || expected.uncertain) continue
    if (expected.capturedCents !== null) {
      auditor.check(
        payment.capturedAmountCents === expected.capturedCents,
        "money-as-answered",
        () => `payment ${id}: captured ${payment.capturedAmountCents}, the merchant was told ${expected.capturedCents}`
      )
    }
    auditor.check(
      payment.refundedAmountCents === expected.refundedCents,
      "money-as-answered",
      () => `payment ${id}: refunded ${payment.refundedAmountCents}, the merchant was told ${expected.refundedCents}`
    )
  }
  return options.webhooks ? auditWebhooks(world) : { deliveries: 0, succeeded: 0, failed: 0, open: 0, attempts: 0 }
}

/** The webhook laws over every delivery, the outbox drained, and every event delivered: the deliveries' totals. */
const auditWebhooks = (
  { auditor, state, config, options, endpoints, time, crashesMs, pausesMs, clockSkewMs }: World
) => {
  const audited = auditDeliveries(auditor, function*() {
    for (const row of state.webhooks.deliveries.values()) yield row.audit
  }, {
    nowMs: time.nowMs,
    scheduleMs: config.webhookRetryScheduleMs,
    timeoutMs: config.webhookTimeoutMs,
    // A retry is never early and never late beyond the clocks' disagreement, but while its
    // endpoint held every slot its dispatcher has (the endpoint concurrency the service runs
    // with) or across a crash: no fixed tolerance, which a schedule's error could hide in. The
    // deadline's slack: a poll and a timeout.
    toleranceMs: dispatcherPollMs + config.webhookTimeoutMs,
    backlog: { held: endpoints.held, concurrency: options.endpointConcurrency },
    crashesMs,
    pausesMs,
    clockToleranceMs: 2 * clockSkewMs,
    attemptTimeToleranceMs: clockSkewMs,
    receipts: endpoints.receipts
  })
  auditor.check(
    state.outbox.length === 0,
    "webhook-outbox-drained",
    () => `${state.outbox.length} events never became deliveries`
  )
  // Every event of a merchant with a webhook URL (all of them here) gets its delivery.
  // (Read from the audit's marks: no second set of them.)
  for (const events of state.events.values()) {
    for (const event of events) {
      if (!audited.hasStoredDelivery(event.id)) {
        auditor.fail(
          "webhook-every-event-delivered",
          `event ${event.id} (${event.type} of ${event.paymentId}) has no delivery`
        )
      }
    }
  }
  return audited.totals
}

/** The service's own reconciliation over the whole run, reported beside the law (it is the code under test); with a processor only. */
const reconcileAsTheServiceDoes = ({ processor, auditor, service, time, fork }: World) => {
  let serviceReconciliation: string | { ours: number; processor: number; differences: number } = "not run"
  if (processor !== null && !auditor.failed && service.isUp) {
    fork(
      Effect.matchCause(
        service.withServices(
          Effect.flatMap(Reconciliation, (r) => r.run({ fromMs: startMs - 86_400_000, toMs: time.nowMs + 86_400_000 }))
        ),
        {
          onFailure: (cause) => void (serviceReconciliation = `failed: ${String(cause).slice(0, 200)}`),
          onSuccess: (report) =>
            void (serviceReconciliation = {
              ours: report.ours,
              processor: report.processor,
              differences: report.differences.length
            })
        }
      )
    )
    time.run({
      untilMs: time.nowMs + 60_000,
      stop: () => typeof serviceReconciliation !== "string" || serviceReconciliation !== "not run"
    })
  }
  return serviceReconciliation
}

/**
 * The summary of the final store state, and its fingerprint in the trace (the final state is part
 * of the hash); law `settled-by-cut-off` (sim/checks/Settlement.ts) over every payment, with an
 * hour's grace: a sweep may still be retrying past store faults right after a cut-off.
 */
const finalState = ({ auditor, time, config, state, trace }: World) => {
  const paymentsByStatus: Record<string, number> = {}
  const settlement = settlementLaw(auditor, {
    nowMs: time.nowMs,
    startMs,
    cutoffMinutes: config.settlementCutoffMinutes,
    graceMs: 3_600_000
  })
  const money: SimResult["money"] = {}
  for (const payment of state.payments.values()) {
    paymentsByStatus[payment.status] = (paymentsByStatus[payment.status] ?? 0) + 1
    const row = (money[payment.currency] ??= { captured: 0, refunded: 0, fees: 0, settled: 0 })
    row.captured += payment.capturedAmountCents
    row.refunded += payment.refundedAmountCents
    row.fees += payment.feeCents
    if (payment.settledAt !== null) row.settled += payment.capturedAmountCents - payment.feeCents
    settlement.check(payment)
    trace.fingerprint(
      `final ${payment.id} ${payment.status} v${payment.version} ${payment.capturedAmountCents}/${payment.refundedAmountCents}`
    )
  }
  return { paymentsByStatus, money, unsettled: settlement.unsettled }
}

/**
 * A remote processor (`--processor`): the same network's plans behind the port's operations,
 * with the processor's faults from a stream of its own (nothing is drawn from it without one).
 * Its laws (sim/checks/ProcessorLaws.ts) follow every commit: which payments the books hold authorized.
 */
const remoteProcessor = ({ seed, options, network, config, auditor, nowMs, horizonEndMs }: {
  readonly seed: number
  readonly options: SimOptions
  readonly network: ReturnType<typeof makeSimulatedAcquirer>
  readonly config: ReturnType<typeof Config.defaultsWith>
  readonly auditor: Auditor
  readonly nowMs: () => number
  readonly horizonEndMs: number
}) => {
  const processor = makeSimulatedProcessor({
    prng: Prng.derive(seed, "processor"),
    faults: options.faults,
    networkCall: network.nextCall,
    window: { startMs, endMs: horizonEndMs },
    nowMs,
    acquirerTimeoutMs: config.acquirerTimeoutMs
  })
  const acquirer = processorBug(options.plantedBug, processorPort(processor), processor)
  const processorLaw = processorLaws(auditor, {
    nowMs,
    acquirerTimeoutMs: config.acquirerTimeoutMs,
    staleFlowMs,
    recoveryIntervalMs,
    // Downtime of every kind, added up: a crash's restart (≤ 120 s), a pause until its replacement
    // and past it (≤ 4 min), a database freeze (≤ 3 min) and outage (≤ 90 s), a processor outage (≤ 3 min).
    disruptionMs: 120_000 + 240_000 + 180_000 + 90_000 + 180_000
  }, processor.records)
  auditor.onCommitted = processorLaw.committed
  processor.observe(processorLaw.observer)
  return { processor, acquirer, processorLaw }
}

/**
 * A crash right after a store commit, when the store wrapper draws one (the service dies on the
 * spot): whether it crashed. A paused instance resumed beside the current one dies alone and
 * nothing restarts; the current one restarts after a downtime drawn from `commitCrashPrng`.
 */
const crashAfterCommit = (world: World, commitCrashPrng: Prng, what: string, fence: Fence | null): boolean => {
  const { time, horizonEndMs, service, crashesMs, trace, fork } = world
  if (fence !== null && !service.isCurrent(fence)) {
    if (time.nowMs >= horizonEndMs || !service.retire(fence)) return false
    crashesMs.push(time.nowMs)
    trace.record(`crash of a paused instance ${what}`)
    // Queued behind a yield, as a fork is: Effect 4 starts a fiber inline.
    fork(Effect.andThen(Effect.yieldNow, service.reap))
    return true
  }
  if (!crashNow(world, what)) return false
  // Queued, not run inline: the fiber that committed is still on the stack.
  fork(Effect.andThen(Effect.yieldNow, restartAfter(world, commitCrashPrng.int(1_000, 120_000))))
  return true
}

/**
 * The laws of every answer the service gives: `answered-in-time`, `revoked-key-refused` (the key
 * law) and `rate-limit`; `answers.slowestMs` keeps the slowest.
 */
const answerLaws = ({ answers, auditor, keys, rateLimit, frozenAt, crashesMs }: {
  readonly answers: { slowestMs: number }
  readonly auditor: Auditor
  readonly keys: ReturnType<typeof keyLaw>
  readonly rateLimit: ReturnType<typeof rateLimitLaw>
  readonly frozenAt: (ms: number) => boolean
  readonly crashesMs: ReadonlyArray<number>
}): ConstructorParameters<typeof SimulatedService>[0]["answered"] =>
(request, elapsedMs, response, servedBy, sentMs) => {
  if (elapsedMs > answers.slowestMs) answers.slowestMs = elapsedMs
  auditor.check(
    elapsedMs <= answerBoundMs,
    "answered-in-time",
    elapsedMs <= answerBoundMs ?
      passed :
      () =>
        `${request.method} ${request.url} answered after ${elapsedMs} ms (at most ${answerBoundMs} ms, a frozen database included)`
  )
  const secret = request.headers["authorization"]?.slice(7)
  const status = response?.status ?? null
  keys.answered(secret, sentMs, servedBy, status, () => `${request.method} ${request.url}`)
  // The limiter saw the request when it was sent unless its key's look-up could wait: a
  // frozen database, or a pause or crash of its instance meanwhile.
  const exact = elapsedMs === 0 || !(frozenAt(sentMs) || crashesMs.some((c) => c >= sentMs && c <= sentMs + elapsedMs))
  rateLimit.answered({ secret, instance: servedBy, sentMs, status, exact })
}

/** The service under test on the run's faulty store, acquirer, endpoints and clocks, with the planted bug (if any) in place. */
const simulatedService = (
  { seed, options, internals, config, state, webhookStore, endpoints, faulty, acquirer, clockOf, time, answered }: {
    readonly seed: number
    readonly options: SimOptions
    readonly internals: SimInternals
    readonly config: ReturnType<typeof Config.defaultsWith>
    readonly state: ReturnType<typeof emptyState>
    readonly webhookStore: ReturnType<typeof memoryWebhookOperations>
    readonly endpoints: ReturnType<typeof makeSimulatedEndpoints>
    readonly faulty: ReturnType<typeof faultyStore>
    readonly acquirer: ConstructorParameters<typeof SimulatedService>[0]["acquirer"]
    readonly clockOf: (generation: number) => Clock.Clock | null
    readonly time: VirtualTime
    readonly answered: ConstructorParameters<typeof SimulatedService>[0]["answered"]
  }
) => {
  const nowMs = () => time.nowMs
  return new SimulatedService({
    store: faulty.store,
    fencedStore: faulty.fencedBy,
    ids: makeIds(seededBytes((seed ^ hash32("ids")) >>> 0), nowMs),
    config,
    acquirer,
    webhookStore: webhookStoreBug(options.plantedBug, webhookStore, {
      receiverNowMs: nowMs,
      scheduleMs: config.webhookRetryScheduleMs,
      secretsOf: (deliveryId, now) => {
        const row = state.webhooks.deliveries.get(deliveryId)
        return row === undefined ? [] : signingSecretsOf(state, row.merchantId, now)
      }
    }),
    webhookTransport: transportBug(options.plantedBug, endpoints.transport),
    // A planted bug wraps the fenced endpoints: every POST it makes still reaches them through
    // the fence, checked when the POST runs.
    fencedWebhookTransport: (fence) => transportBug(options.plantedBug, endpoints.fencedBy(fence)),
    webhookDispatcher: options.webhooks
      ? {
        pollIntervalMs: dispatcherPollMs,
        eventsDelayMs: dispatcherEventsDelayMs,
        concurrencyPerEndpoint: options.endpointConcurrency
      }
      : null,
    webhookDispatchers: options.dispatchers,
    apiKeys: apiKeysBug(options.plantedBug, config.apiKeyCacheTtlMs),
    rateLimiter: internals.rateLimiter ?? rateLimiterBug(options.plantedBug, config.rateLimitPerSecond),
    clockOf,
    timer: (delayMs, task) => void time.at(time.nowMs + delayMs, task),
    nowMs,
    answered
  })
}
