/**
 * The harness's own service: child processes `src/main.ts serve` (one, or `--instances` of them,
 * each on its own port) on one embedded PostgreSQL in a scratch directory, as `npm run bench`
 * starts it, with a short webhook retry schedule so a run of minutes sees retries and give-ups.
 * Merchants are created in this process through the service's own Merchants service on the same
 * database (./MerchantMaker.ts: what `payments merchant create` runs, without a process start per merchant). The
 * nemesis's hands are here too: kill -9 and restart an instance, SIGSTOP and SIGCONT one, or
 * every process of the database.
 */
import { type ChildProcess, execFile, spawn } from "node:child_process"
import { closeSync, mkdirSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import { freePort, startEmbeddedPostgres } from "../../src/platform/Database.ts"
import { cpuSeconds, startNodeFlags, waitFor } from "../host.ts"
import type { EmbeddedTarget } from "./Contract.ts"
import { merchantMaker } from "./MerchantMaker.ts"
import type { FaultActuator } from "./Nemesis.ts"
import { plantedBugVariable } from "./PlantedService.ts"

const root = resolve(import.meta.dirname, "../..")

/** Retries after 1, 2, 4 and 8 s, then the delivery gives up; attempts time out after 2 s. */
export const webhookRetryScheduleMs = [1000, 2000, 4000, 8000]
export const webhookTimeoutMs = 2000
/** The production default (docs/operations.md): what the embedded service runs with, and the rate-limit law reads. */
export const rateLimitPerSecond = 100

/**
 * The daily settlement cut-off, 12 hours from `nowMs` (minutes after midnight UTC): no cut-off
 * passes during a run shorter than that, so every payment stays unsettled until the harness runs
 * the settlement itself (`EmbeddedTarget.settle`), and the ledger law knows which side of it each
 * payment is on.
 */
export const cutoffAwayFrom = (nowMs: number) => Math.floor(((nowMs + 12 * 3_600_000) % 86_400_000) / 60_000)
const cutoffText = (minutes: number) =>
  `${String(Math.floor(minutes / 60)).padStart(2, "0")}:${String(minutes % 60).padStart(2, "0")}`

export interface EmbeddedService {
  /** Each instance's base URL, by instance number. */
  readonly baseUrls: ReadonlyArray<string>
  readonly target: EmbeddedTarget
  /** The embedded database's postmaster, for its CPU. */
  readonly postmasterPid: number | null
  /** CPU seconds of every service process so far, the killed ones' included (up to their kill). */
  readonly serviceCpuSeconds: () => number
  /** kill -9 and restart, SIGSTOP and SIGCONT of an instance or of the database: the nemesis's hands. */
  readonly faults: FaultActuator
  /** The services' environment (without PORT): what a command run on their database needs. */
  readonly environment: Readonly<Record<string, string>>
  readonly stop: () => Promise<void>
}

/** Every process of the database: the postmaster first (so it forks no backend meanwhile), then its children. */
const postgresPids = (postmasterPid: number) => {
  const pids = [postmasterPid]
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8")
      if (Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]) === postmasterPid) pids.push(Number(entry))
    } catch { /* gone */ }
  }
  return pids
}

/** Sends `signal` to each pid that is still there; the ones it reached. */
const signalEach = (pids: ReadonlyArray<number>, signal: NodeJS.Signals) =>
  pids.filter((pid) => {
    try {
      process.kill(pid, signal)
      return true
    } catch {
      return false
    }
  })

/** The postmaster's pid, from its data directory (null when it cannot be read). */
const postmasterPidOf = (directory: string): number | null => {
  try {
    const pid = Number(readFileSync(join(directory, "postmaster.pid"), "utf8").split("\n")[0])
    return Number.isInteger(pid) && pid > 0 ? pid : null
  } catch {
    return null
  }
}

const running = new Set<() => Promise<void>>()

/** Stops every service this process started and has not stopped yet (for a watchdog or a signal). */
export const stopEveryEmbeddedService = () => Promise.all([...running].map((stop) => stop())).then(() => {})

export const startEmbeddedService = async (options: {
  /** The service's log (`<name>.log`); with several instances each has its own, `<name>-<i>.log`. */
  readonly logFile: string
  readonly log: (line: string) => void
  /** Where the service writes a V8 CPU profile when it stops (null: not profiled). */
  readonly profileDirectory: string | null
  /** Load pg_stat_statements (for `--statements`). */
  readonly statementStats?: boolean
  /** Service processes on the one database, each on its own port (default 1). */
  readonly instances?: number
  /**
   * A bug of sim/checks/PlantedBugs.ts planted in every instance (`--planted-bug`): the service
   * runs as ./PlantedService.ts instead of `src/main.ts serve`. Null or absent: the service as it is.
   */
  readonly plantedBug?: string | null
  /** More of the service's environment (the sandbox processor's ACQUIRER and STRIPE_* settings). */
  readonly environment?: Readonly<Record<string, string>>
}): Promise<EmbeddedService> => {
  const plantedBug = options.plantedBug ?? null
  const count = options.instances ?? 1
  const scratch = mkdtempSync(join(tmpdir(), "payments-harness-pg-"))
  const database = await startEmbeddedPostgres({
    directory: scratch,
    persistent: false,
    flags: [
      "-c",
      "max_connections=300",
      ...(options.statementStats === true ? ["-c", "shared_preload_libraries=pg_stat_statements"] : [])
    ]
  })
  const postmasterPid = postmasterPidOf(database.directory)
  const ports: Array<number> = []
  for (let i = 0; i < count; i++) ports.push(await freePort())
  const baseUrls = ports.map((port) => `http://127.0.0.1:${port}`)
  const settlementCutoffMinutes = cutoffAwayFrom(Date.now())
  const environment: Record<string, string> = {
    DATABASE_URL: database.url,
    HOST: "127.0.0.1",
    WEBHOOK_ALLOW_PRIVATE_URLS: "true",
    WEBHOOK_RETRY_SCHEDULE: webhookRetryScheduleMs.map((ms) => `${ms / 1000}s`).join(","),
    WEBHOOK_TIMEOUT: `${webhookTimeoutMs / 1000}s`,
    RATE_LIMIT_PER_SECOND: String(rateLimitPerSecond),
    SETTLEMENT_CUTOFF: cutoffText(settlementCutoffMinutes),
    RESPONSE_ENCRYPTION_KEY: "ab".repeat(32),
    ...(plantedBug === null ? {} : { [plantedBugVariable]: plantedBug }),
    ...options.environment
  }
  /** The entry each instance runs: the service, or the service with the planted bug. */
  const entry = plantedBug === null ? ["src/main.ts", "serve"] : ["bench/harness/PlantedService.ts"]
  const logFileOf = (
    instance: number
  ) => (count === 1 ? options.logFile : options.logFile.replace(/(\.log)?$/, `-${instance}.log`))
  mkdirSync(join(options.logFile, ".."), { recursive: true })
  /** Each instance's current process (a restart replaces it). */
  const processes: Array<ChildProcess | null> = ports.map(() => null)
  /** Processes the harness itself killed or is stopping: their exit is no news. */
  const expectedExits = new Set<ChildProcess>()
  const paused = new Set<number>()
  let databasePaused: Array<number> = []
  /** CPU seconds of the processes killed so far, read just before their kill. */
  let cpuOfKilled = 0
  let stopping: Promise<void> | null = null
  const ended = (child: ChildProcess) => child.exitCode !== null || child.signalCode !== null
  const exitOf = (
    child: ChildProcess
  ) => (ended(child) ? Promise.resolve() : new Promise<void>((done) => child.once("exit", () => done())))
  const spawnInstance = (instance: number, append: boolean) => {
    // A process started once the stop began would outlive it.
    if (stopping !== null) throw new Error("the service is stopping")
    const serviceLog = openSync(logFileOf(instance), append ? "a" : "w")
    const child = spawn(process.execPath, [
      ...startNodeFlags(),
      ...(options.profileDirectory === null
        ? []
        : ["--cpu-prof", `--cpu-prof-dir=${resolve(options.profileDirectory)}`]),
      "--import",
      "tsx",
      ...entry
    ], {
      cwd: root,
      env: { ...process.env, ...environment, PORT: String(ports[instance]) },
      stdio: ["ignore", "ignore", serviceLog]
    })
    closeSync(serviceLog)
    processes[instance] = child
    child.once("exit", (code, signal) => {
      if (!expectedExits.has(child) && stopping === null) {
        options.log(
          `instance ${instance} (pid ${child.pid}) exited by itself (${signal ?? code}); its log: ${
            logFileOf(instance)
          }`
        )
      }
    })
    return child
  }
  const ready = (instance: number) => waitFor(`${baseUrls[instance]}/readyz`, 60_000)
  const live = (instance: number) => {
    if (stopping !== null) throw new Error("the service is stopping")
    const child = processes[instance]
    if (child === null || child === undefined || ended(child)) throw new Error(`instance ${instance} is not running`)
    return child
  }
  // The service's configuration, read from these variables rather than this process's environment.
  const merchants = merchantMaker({ ...environment, PORT: String(ports[0]) })
  const stop = () => (stopping ??= stopOnce().finally(() => running.delete(stop)))
  const stopOnce = async () => {
    // A stopped process would not hear its SIGTERM, nor a stopped database its clients.
    signalEach(databasePaused, "SIGCONT")
    for (const instance of paused) processes[instance]?.kill("SIGCONT")
    await merchants.close().catch(() => {})
    await Promise.all(processes.map(async (child) => {
      if (child === null || ended(child)) return
      expectedExits.add(child)
      const exited = exitOf(child)
      child.kill("SIGTERM")
      const forced = setTimeout(() => child.kill("SIGKILL"), 15_000)
      await exited
      clearTimeout(forced)
    }))
    await database.stop()
    rmSync(scratch, { recursive: true, force: true })
  }
  running.add(stop)
  try {
    // The first instance applies the migrations; the others start once it is ready.
    spawnInstance(0, false)
    await ready(0)
    for (let i = 1; i < count; i++) spawnInstance(i, false)
    await Promise.all(ports.slice(1).map((_, i) => ready(i + 1)))
  } catch (error) {
    await stop()
    throw new Error(
      `the service did not start (its log: ${logFileOf(0)}${count > 1 ? " and the others'" : ""}): ${String(error)}`,
      { cause: error }
    )
  }
  for (const [i, child] of processes.entries()) {
    options.log(`service: ${baseUrls[i]} (pid ${child!.pid}) on embedded PostgreSQL; log in ${logFileOf(i)}`)
  }
  const faults: FaultActuator = {
    kill: async (instance) => {
      const child = live(instance)
      cpuOfKilled += cpuSeconds(child.pid!)
      expectedExits.add(child)
      const exited = exitOf(child)
      child.kill("SIGKILL")
      await exited
      paused.delete(instance)
      return `pid ${child.pid} killed`
    },
    restart: async (instance) => {
      const child = spawnInstance(instance, true)
      await ready(instance)
      return `pid ${child.pid} ready on port ${ports[instance]}`
    },
    pause: async (instance) => {
      const child = live(instance)
      child.kill("SIGSTOP")
      paused.add(instance)
      return `pid ${child.pid} stopped`
    },
    resume: async (instance) => {
      const child = live(instance)
      child.kill("SIGCONT")
      paused.delete(instance)
      return `pid ${child.pid} continued`
    },
    pauseDatabase: async () => {
      if (stopping !== null) throw new Error("the service is stopping")
      if (postmasterPid === null) throw new Error("the postmaster's pid is unknown")
      databasePaused = signalEach(postgresPids(postmasterPid), "SIGSTOP")
      return `${databasePaused.length} PostgreSQL processes stopped`
    },
    resumeDatabase: async () => {
      const continued = signalEach(databasePaused, "SIGCONT")
      databasePaused = []
      return `${continued.length} PostgreSQL processes continued`
    }
  }
  const target: EmbeddedTarget = {
    databaseUrl: database.url,
    webhookRetryScheduleMs,
    webhookTimeoutMs,
    rateLimitPerSecond,
    settlementCutoffMinutes,
    createMerchant: merchants.create,
    settle: () => settleNow(plantedBug, { ...environment, PORT: String(ports[0]) })
  }
  return {
    baseUrls,
    target,
    environment,
    postmasterPid,
    serviceCpuSeconds: () =>
      processes.reduce(
        (sum, child) => sum + (child === null || child.pid === undefined ? 0 : cpuSeconds(child.pid)),
        cpuOfKilled
      ),
    faults,
    stop
  }
}

/**
 * The settlement run now, as an operator runs it (`payments settle --json`: cut-off now), on the
 * service's database with its settings; with a planted bug, by ./PlantedService.ts with the bug
 * in its store. The number of payments settled.
 */
export const settleNow = (plantedBug: string | null, environment: Readonly<Record<string, string>>) =>
  new Promise<number>((done, fail) => {
    const entry = plantedBug === null
      ? ["src/main.ts", "settle", "--json"]
      : ["bench/harness/PlantedService.ts", "settle"]
    execFile(process.execPath, ["--import", "tsx", ...entry], {
      cwd: root,
      env: { ...process.env, ...environment },
      timeout: 120_000
    }, (error, stdout, stderr) => {
      if (error !== null) return fail(new Error(`the settlement failed: ${error.message} ${stderr.slice(0, 500)}`))
      // The count is the JSON line; the service's log lines may come around it.
      const line = stdout.split("\n").find((text) => text.startsWith("{\"settled\""))
      const settled = line === undefined ? undefined : (JSON.parse(line) as { settled?: unknown }).settled
      if (typeof settled !== "number") {
        return fail(new Error(`the settlement printed no count: ${stdout.slice(0, 300)}`))
      }
      done(settled)
    })
  })
