import { type ChildProcess, execFileSync, spawn } from "node:child_process"
import { resolve } from "node:path"
import { freePort } from "../../src/platform/Database.ts"
import { eventually } from "./app.ts"
import { freshShellEnv } from "./childEnv.ts"

/** The service as an operator runs it: `src/main.ts serve` in a child process, its stderr kept. */
export interface ServiceProcess {
  readonly child: ChildProcess
  readonly baseUrl: string
  readonly port: number
  /** Everything written to stderr so far. */
  readonly stderr: () => string
  /** Resolves with the exit code (or signal name) once the process ended and its stderr was read to the end. */
  readonly exited: Promise<number | string>
}

const root = resolve(import.meta.dirname, "../..")
const started: Array<ChildProcess> = []

/** Kills (SIGKILL) every child still running: for afterAll. */
export const killServices = () => {
  for (const child of started) if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL")
}

export const serviceEnv = (databaseUrl: string, extra: Record<string, string> = {}) =>
  freshShellEnv({ DATABASE_URL: databaseUrl, RESPONSE_ENCRYPTION_KEY: "ab".repeat(32), ...extra })

/** `payments merchant create` through the CLI; returns the merchant and its key as printed on stdout. */
export const createMerchantWithCli = (databaseUrl: string, name: string) => {
  const output = execFileSync(process.execPath, [
    "--import",
    "tsx",
    "src/main.ts",
    "merchant",
    "create",
    "--name",
    name
  ], {
    cwd: root,
    env: serviceEnv(databaseUrl),
    encoding: "utf8",
    stdio: ["ignore", "pipe", "pipe"]
  })
  return JSON.parse(output) as { merchant: { id: string; webhook_secret: string }; api_key: { key: string } }
}

/** `entry`: another entry point with the same `serve` command (a test's service with a planted bug). */
export const startService = async (
  databaseUrl: string,
  extra: Record<string, string> = {},
  entry = "src/main.ts"
): Promise<ServiceProcess> => {
  const port = await freePort()
  const child = spawn(process.execPath, ["--import", "tsx", entry, "serve"], {
    cwd: root,
    env: serviceEnv(databaseUrl, { PORT: String(port), ...extra }),
    stdio: ["ignore", "ignore", "pipe"]
  })
  started.push(child)
  let output = ""
  child.stderr!.on("data", (chunk: Buffer) => (output += chunk.toString()))
  // On `close`, not `exit`: only then has all of stderr been read (the stop's last lines come last).
  const exited = new Promise<number | string>((done) =>
    child.once("close", (code, signal) => done(code ?? signal ?? "unknown"))
  )
  const baseUrl = `http://127.0.0.1:${port}`
  await eventually(async () => {
    if (child.exitCode !== null) throw new Error(`the service exited ${child.exitCode}: ${output}`)
    const ready = await fetch(`${baseUrl}/readyz`).catch(() => null)
    return ready?.status === 200 ? true : undefined
  }, { timeoutMs: 60_000, intervalMs: 100, what: "the service to be ready" })
  return { child, baseUrl, port, stderr: () => output, exited }
}
