import * as NodeContext from "@effect/platform-node/NodeContext"
import * as PgClient from "@effect/sql-pg/PgClient"
import * as PgMigrator from "@effect/sql-pg/PgMigrator"
import { Effect, Layer, Redacted } from "effect"
import { createServer } from "node:net"
import { join, resolve } from "node:path"
import { migrations } from "../store/migrations.ts"
import { AppConfig, dataDirectory } from "./Config.ts"
import * as Embedded from "./EmbeddedPostgres.ts"

export { dataDirectory }

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

/**
 * Starts a PostgreSQL server from `directory` (initialised on first use) on a free loopback port.
 * The caller owns it: call `stop()`; no exit hook of a library does it behind our back.
 */
export const startEmbeddedPostgres = async (options: {
  readonly directory: string
  readonly persistent: boolean
  /** Extra server settings, e.g. `["-c", "fsync=off"]` for disposable test data. */
  readonly flags?: ReadonlyArray<string>
}) => Embedded.startEmbeddedPostgres({ ...options, port: await freePort() })

/**
 * Starts (or, after a crash of the service, reuses) the embedded PostgreSQL under `directory`;
 * it listens on loopback only and stops with the scope. Returns its connection URL. A failure is
 * an `EmbeddedPostgresError`: one line that says what to do.
 */
export const embeddedPostgres = (directory: string, options: { readonly persistent: boolean }) =>
  Effect.acquireRelease(
    Effect.tryPromise({
      // A server left running by a killed service keeps its data safe: reuse it.
      try: async () => Embedded.reuseRunningServer(directory) ?? await startEmbeddedPostgres({ directory, persistent: options.persistent }),
      catch: (cause) =>
        cause instanceof Embedded.EmbeddedPostgresError
          ? cause
          : new Embedded.EmbeddedPostgresError(`embedded PostgreSQL failed to start in ${directory}: ${String(cause)}; set DATABASE_URL to use your own PostgreSQL instead`)
    }),
    ({ stop }) => Effect.promise(stop).pipe(Effect.ignore)
  ).pipe(
    Effect.tap((server) =>
      server.directory === resolve(directory)
        ? Effect.void
        : Effect.logInfo(`embedded PostgreSQL keeps its data in ${server.directory} (the postgres user cannot reach ${directory})`)
    ),
    Effect.map(({ url }) => url)
  )

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
