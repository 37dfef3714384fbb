import * as PgClient from "@effect/sql-pg/PgClient"
import { Duration, Effect, Layer, Option, Redacted } from "effect"
import { createServer } from "node:net"
import { join, resolve } from "node:path"
import Pg from "pg"
import { migrationTexts } from "../store/migrations.ts"
import { hotPathPlannerOptions, PgPool, sqlErrorOf } from "../store/PgPrepared.ts"
import * as Config from "./Config.ts"
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
      server.close(
        () => (typeof address === "object" && address !== null ? done(address.port) : fail(new Error("no port")))
      )
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
}) => {
  for (let attempt = 1;; attempt++) {
    try {
      return await Embedded.startEmbeddedPostgres({ ...options, port: await freePort() })
    } catch (error) {
      // Another process took the free port between the probe and the server's bind (tests and
      // benchmarks start many servers at once): the cluster is intact, so try another port.
      const portTaken = error instanceof Embedded.EmbeddedPostgresError &&
        /could not create any TCP\/IP sockets|Address already in use/.test(error.message)
      if (!portTaken || attempt >= 5) throw error
    }
  }
}

/**
 * Starts (or, after a crash of the service, reuses) the embedded PostgreSQL under `directory`;
 * it listens on loopback only and stops with the scope. Returns its connection URL. A failure is
 * an `EmbeddedPostgresError`: one line that says what to do.
 */
export const embeddedPostgres = (directory: string, options: { readonly persistent: boolean }) =>
  Effect.acquireRelease(
    Effect.tryPromise({
      // A server left running by a killed service keeps its data safe: reuse it.
      try: async () =>
        Embedded.reuseRunningServer(directory) ??
          await startEmbeddedPostgres({ directory, persistent: options.persistent }),
      catch: (cause) =>
        cause instanceof Embedded.EmbeddedPostgresError
          ? cause
          : new Embedded.EmbeddedPostgresError(
            `embedded PostgreSQL failed to start in ${directory}: ${
              String(cause)
            }; set DATABASE_URL to use your own PostgreSQL instead`
          )
    }),
    // A server another process started (the service, while a command runs beside it) is theirs to stop.
    ({ reused, stop }) =>
      reused ? Effect.void : Effect.tryPromise(stop).pipe(
        Effect.matchEffect({
          onSuccess: () => Effect.logInfo("shutting down: embedded PostgreSQL stopped"),
          onFailure: (error) => Effect.logWarning("shutting down: embedded PostgreSQL did not stop cleanly", error)
        })
      )
  ).pipe(
    Effect.tap((server) =>
      server.reused
        ? Effect.logInfo(`embedded PostgreSQL already running in ${server.directory}: using it, and leaving it running`)
        : Effect.void
    ),
    Effect.tap((server) =>
      server.directory === resolve(directory)
        ? Effect.void
        : Effect.logInfo(
          `embedded PostgreSQL keeps its data in ${server.directory} (the postgres user cannot reach ${directory})`
        )
    ),
    Effect.map(({ url }) => url)
  )

/** The database URL: `DATABASE_URL`, or an embedded server under `.data/postgres`. */
/** How long `/readyz` waits for the database before answering 503 (docs/operations.md). */
export const readinessTimeoutMs = 2_000

/**
 * Whether the database answers: `SELECT 1` straight on the pool, given up after
 * `readinessTimeoutMs`. Giving up costs nothing: the probe has no canceller to wait for (a query
 * of @effect/sql, interrupted, first asks the server to cancel it, and a frozen server never
 * answers that either), and the pool's own timeouts end the abandoned query. Without a pool (the
 * memory store of tests and the simulator) there is nothing to wait for.
 */
export const readiness = (pool: Option.Option<Pg.Pool>): Effect.Effect<void, Error> =>
  Option.isNone(pool)
    ? Effect.void
    : Effect.callback<void, Error>((resume) => {
      pool.value.query(
        { text: "SELECT 1", query_timeout: readinessTimeoutMs } as Pg.QueryConfig,
        (error: Error | undefined) => resume(error ? Effect.fail(error) : Effect.void)
      )
    }).pipe(Effect.timeoutOrElse({ duration: readinessTimeoutMs, orElse: () => Effect.fail(new Error("no answer")) }))

export const databaseUrl = Effect.gen(function*() {
  const config = yield* AppConfig
  if (config.databaseUrl !== null) return config.databaseUrl
  return yield* embeddedPostgres(join(dataDirectory, "postgres"), { persistent: true })
})

/** How long the pool waits on the database: see `AppConfigShape.databaseStatementTimeoutMs`. */
export interface PoolTimeouts {
  /** Null: statements may run as long as they take (the migrations). */
  readonly statementTimeoutMs: number | null
  readonly connectTimeoutMs: number
}

/**
 * How much longer than `statement_timeout` the service waits for a statement's answer: a server
 * that answers at all cancels the statement itself first (57014, and the connection stays usable).
 */
export const statementGraceMs = 500

/** A statement given up client-side (`query_timeout`): pg's own message for it. */
const isReadTimeout = (error: unknown) => error instanceof Error && error.message === "Query read timeout"

/**
 * A `pg` client that closes its connection when a statement's answer does not come in time
 * (`query_timeout`). pg only stops waiting: the statement still occupies the connection, so the
 * next statement on it (a ROLLBACK, or the next borrower's query) would wait behind it, and the
 * pool would hand it out again. Ended at once, the queued statements fail at once, and the pool
 * drops the connection when it is released (pg-pool removes a client that is ending).
 */
class DeadlineClient extends Pg.Client {
  override query(...args: Array<any>): any {
    const at = args.findIndex((arg, i) => i > 0 && typeof arg === "function")
    if (at !== -1) {
      const callback = args[at] as (error: unknown, result: unknown) => void
      args[at] = (error: unknown, result: unknown) => {
        if (isReadTimeout(error)) this.end().catch(() => {})
        callback(error, result)
      }
    }
    const returned = (super.query as (...xs: Array<any>) => any)(...args)
    if (at === -1 && returned !== undefined && typeof returned.then === "function") {
      // The caller's own handlers come after this one, so the client is ending before it releases it.
      returned.then(undefined, (error: unknown) => {
        if (isReadTimeout(error)) this.end().catch(() => {})
      })
    }
    return returned
  }
}

/**
 * The pool's settings. Every wait on the database is bounded, so a database that stops answering
 * (stopped, frozen, cut off) costs a request at most `connectTimeoutMs` (waiting for a connection,
 * or opening one) plus `statementTimeoutMs + statementGraceMs` (the answer), then a 503:
 * - `statement_timeout` (server side): a statement that runs too long is cancelled by PostgreSQL;
 * - `idle_in_transaction_session_timeout` (server side): a transaction whose client went silent
 *   releases its locks;
 * - `query_timeout` (client side): a server that answers nothing (frozen, or the network gone) is
 *   given up, and its connection closed (`DeadlineClient`);
 * - `connectionTimeoutMillis`: both the wait for a free connection and the opening of a new one;
 * - TCP keepalive: a connection to a host that vanished is noticed even while idle.
 */
export const poolOptions = (url: string, maxConnections: number, timeouts: PoolTimeouts): Pg.PoolConfig => ({
  connectionString: url,
  max: maxConnections,
  application_name: "payments",
  // Connections stay open (idleTimeoutMillis 0): the pool is small, and an idle timeout arms a
  // timer on every release.
  idleTimeoutMillis: 0,
  connectionTimeoutMillis: timeouts.connectTimeoutMs,
  ...(timeouts.statementTimeoutMs === null ? {} : {
    statement_timeout: timeouts.statementTimeoutMs,
    idle_in_transaction_session_timeout: timeouts.statementTimeoutMs + statementGraceMs,
    query_timeout: timeouts.statementTimeoutMs + statementGraceMs
  }),
  keepAlive: true,
  keepAliveInitialDelayMillis: 10_000,
  // The hot path's statements plan as index lookups at any table size (`hotPathPlannerSettings`).
  options: hotPathPlannerOptions,
  Client: DeadlineClient
})

export const defaultPoolTimeouts: PoolTimeouts = {
  statementTimeoutMs: Config.defaults.databaseStatementTimeoutMs,
  connectTimeoutMs: Config.defaults.databaseConnectTimeoutMs
}

export const poolTimeoutsOf = (config: Config.AppConfigShape): PoolTimeouts => ({
  statementTimeoutMs: config.databaseStatementTimeoutMs,
  connectTimeoutMs: config.databaseConnectTimeoutMs
})

/**
 * Two clients of the database: the `pg` pool of the store's prepared statements (`PgPool`: the
 * create path, the read by id, the key look-up) and `@effect/sql-pg`'s own client for every
 * other statement. Effect 4's driver speaks the protocol itself (no `pg` under it), so the two
 * no longer share connections: each has `maxConnections`. The pool must answer a first query
 * within 5 s; both are closed with the scope.
 */
export const pgClientLayer = (url: string, maxConnections = 8, timeouts: PoolTimeouts = defaultPoolTimeouts) => {
  const pool = Layer.effect(
    PgPool,
    Effect.acquireRelease(
      Effect.sync(() => {
        const pool = new Pg.Pool(poolOptions(url, maxConnections, timeouts))
        // An idle connection that dies is dropped by the pool; the next query reports the outage.
        pool.on("error", () => {})
        return pool
      }),
      (pool) =>
        Effect.promise(() => pool.end()).pipe(
          Effect.interruptible,
          Effect.timeoutOption(1000),
          Effect.flatMap((ended) =>
            Option.isSome(ended)
              ? Effect.logInfo("shutting down: database pool closed")
              : Effect.logWarning("shutting down: the database pool did not close within 1 s")
          )
        )
    ).pipe(
      Effect.tap((pool) =>
        Effect.tryPromise({
          try: () => pool.query("SELECT 1"),
          catch: (cause) => sqlErrorOf(cause, "PgClient: Failed to connect")
        }).pipe(
          Effect.timeoutOrElse({
            duration: Duration.seconds(5),
            orElse: () => Effect.fail(sqlErrorOf(new Error("Connection timed out"), "PgClient: Connection timed out"))
          })
        )
      )
    )
  )
  const client = PgClient.layer({
    url: Redacted.make(url),
    maxConnections,
    applicationName: "payments",
    connectTimeout: Duration.millis(timeouts.connectTimeoutMs),
    ...(timeouts.statementTimeoutMs === null ? {} : {
      startupParameters: {
        statement_timeout: String(timeouts.statementTimeoutMs),
        idle_in_transaction_session_timeout: String(timeouts.statementTimeoutMs + statementGraceMs)
      }
    })
  })
  return Layer.merge(client, pool)
}

/**
 * The advisory lock every migration run holds (a session lock: PostgreSQL releases it when the
 * connection ends, so a run killed half-way blocks nobody). Instances started together on an
 * empty database queue on it; the first applies the migrations, the others find them recorded.
 */
export const migrationLockKey = 7_240_031_017

/**
 * Applies every migration not recorded yet in `effect_sql_migrations`, in order, each in its own
 * transaction, under the migration lock (`migrationLockKey`): `CREATE TABLE IF NOT EXISTS` alone
 * races when several instances start at once (two creators clash on pg_type's unique index).
 */
const applyMigrations = async (client: Pg.Client) => {
  await client.query("SELECT pg_advisory_lock($1)", [migrationLockKey])
  try {
    await applyMigrationsLocked(client)
  } finally {
    await client.query("SELECT pg_advisory_unlock($1)", [migrationLockKey]).catch(() => {})
  }
}

const applyMigrationsLocked = async (client: Pg.Client) => {
  await client.query(`CREATE TABLE IF NOT EXISTS effect_sql_migrations (
    migration_id integer primary key, created_at timestamp with time zone not null default now(), name text not null)`)
  const pending = Object.entries(migrationTexts)
    .map(([key, text]) => {
      const match = /^(\d+)_(.+)$/.exec(key)
      if (match === null) throw new Error(`migration ${key} is not named <id>_<name>`)
      return { id: Number(match[1]), name: match[2]!, text }
    })
    .sort((a, b) => a.id - b.id)
  for (const migration of pending) {
    await client.query("BEGIN")
    try {
      await client.query("LOCK TABLE effect_sql_migrations IN ACCESS EXCLUSIVE MODE")
      const done = await client.query("SELECT 1 FROM effect_sql_migrations WHERE migration_id = $1", [migration.id])
      if (done.rowCount === 0) {
        await client.query(migration.text)
        await client.query("INSERT INTO effect_sql_migrations (migration_id, name) VALUES ($1, $2)", [
          migration.id,
          migration.name
        ])
      }
      await client.query("COMMIT")
    } catch (error) {
      await client.query("ROLLBACK").catch(() => {})
      throw error
    }
  }
}

/**
 * Applies the migrations over a connection of their own (`pg`, whose simple-query protocol runs
 * a text of several statements), without the service's statement timeout (building an index on
 * a large table may take minutes), and closes it when done.
 */
export const migrate = (url: string, timeouts: PoolTimeouts) =>
  Effect.tryPromise({
    try: async () => {
      const client = new Pg.Client({
        connectionString: url,
        connectionTimeoutMillis: timeouts.connectTimeoutMs,
        application_name: "payments"
      })
      await client.connect()
      try {
        await applyMigrations(client)
      } finally {
        await client.end().catch(() => {})
      }
    },
    catch: (cause) => sqlErrorOf(cause, "migrations failed")
  })

/** The database clients for the configured database, with the migrations applied. */
export const layer = Layer.unwrap(
  Effect.gen(function*() {
    const url = yield* databaseUrl
    const timeouts = poolTimeoutsOf(yield* AppConfig)
    yield* migrate(url, timeouts)
    return pgClientLayer(url, 8, timeouts)
  })
)
