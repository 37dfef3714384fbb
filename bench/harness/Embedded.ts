/**
 * The harness's own service: a child process `src/main.ts serve` on an embedded PostgreSQL in a
 * scratch directory, as `npm run bench` starts it, with a short webhook retry schedule so a run of
 * minutes sees retries and give-ups. Merchants are created in this process through the service's
 * own Merchants service on the same database (./MerchantMaker.ts: what `payments merchant create`
 * runs, without a process start per merchant).
 */
import { type ChildProcess, spawn } from "node:child_process"
import { mkdirSync, mkdtempSync, openSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import { freePort, startEmbeddedPostgres } from "../../src/platform/Database.ts"
import { startNodeFlags, waitFor } from "../host.ts"
import type { EmbeddedTarget } from "./Contract.ts"
import { merchantMaker } from "./MerchantMaker.ts"

const root = resolve(import.meta.dirname, "../..")

/** Retries after 1, 2, 4 and 8 s, then the delivery gives up; attempts time out after 2 s. */
export const webhookRetryScheduleMs = [1000, 2000, 4000, 8000]
export const webhookTimeoutMs = 2000

export interface EmbeddedService {
  readonly baseUrl: string
  readonly child: ChildProcess
  readonly target: EmbeddedTarget
  /** The embedded database's postmaster, for its CPU. */
  readonly postmasterPid: number | null
  readonly stop: () => Promise<void>
}

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
  readonly logFile: string
  readonly log: (line: string) => void
  /** Where the service writes a V8 CPU profile when it stops (null: not profiled). */
  readonly profileDirectory: string | null
  /** Load pg_stat_statements (for `--statements`). */
  readonly statementStats?: boolean
}): Promise<EmbeddedService> => {
  const scratch = mkdtempSync(join(tmpdir(), "payments-harness-pg-"))
  const database = await startEmbeddedPostgres({
    directory: scratch,
    persistent: false,
    flags: ["-c", "max_connections=300", ...(options.statementStats === true ? ["-c", "shared_preload_libraries=pg_stat_statements"] : [])]
  })
  const port = await freePort()
  const environment: Record<string, string> = {
    DATABASE_URL: database.url,
    PORT: String(port),
    HOST: "127.0.0.1",
    WEBHOOK_ALLOW_PRIVATE_URLS: "true",
    WEBHOOK_RETRY_SCHEDULE: webhookRetryScheduleMs.map((ms) => `${ms / 1000}s`).join(","),
    WEBHOOK_TIMEOUT: `${webhookTimeoutMs / 1000}s`,
    RESPONSE_ENCRYPTION_KEY: "ab".repeat(32)
  }
  mkdirSync(join(options.logFile, ".."), { recursive: true })
  const serviceLog = openSync(options.logFile, "w")
  const child = spawn(process.execPath, [
    ...startNodeFlags(),
    ...(options.profileDirectory === null ? [] : ["--cpu-prof", `--cpu-prof-dir=${resolve(options.profileDirectory)}`]),
    "--import", "tsx", "src/main.ts", "serve"], {
    cwd: root,
    env: { ...process.env, ...environment },
    stdio: ["ignore", "ignore", serviceLog]
  })
  const baseUrl = `http://127.0.0.1:${port}`
  // The service's configuration, read from these variables rather than this process's environment.
  const merchants = merchantMaker(environment)
  let stopping: Promise<void> | null = null
  const stop = () => (stopping ??= stopOnce().finally(() => running.delete(stop)))
  const stopOnce = async () => {
    await merchants.close().catch(() => {})
    if (child.exitCode === null && child.signalCode === null) {
      const exited = new Promise((done) => child.once("exit", done))
      child.kill("SIGTERM")
      const forced = setTimeout(() => child.kill("SIGKILL"), 15_000)
      await exited
      clearTimeout(forced)
    }
    await database.stop()
    rmSync(scratch, { recursive: true, force: true })
  }
  running.add(stop)
  try {
    await waitFor(`${baseUrl}/readyz`, 60_000)
  } catch (error) {
    await stop()
    throw new Error(`the service did not start (its log: ${options.logFile}): ${String(error)}`)
  }
  options.log(`service: ${baseUrl} (pid ${child.pid}) on embedded PostgreSQL; log in ${options.logFile}`)
  const target: EmbeddedTarget = {
    databaseUrl: database.url,
    webhookRetryScheduleMs,
    webhookTimeoutMs,
    createMerchant: merchants.create
  }
  return { baseUrl, child, target, stop, postmasterPid: postmasterPidOf(database.directory) }
}
