import { Context, Effect } from "effect"
import { SqlError, UnknownError } from "effect/sql/SqlError"
import type * as Pg from "pg"
import { type Row, run } from "./PgRows.ts"
import type { StoreUnavailable } from "./Store.ts"

/** A failure of ours on the `pg` pool, as `effect/sql` reports one (its SQLSTATE stays on the cause). */
export const sqlErrorOf = (cause: unknown, message: string) =>
  new SqlError({ reason: new UnknownError({ cause, message }) })

/**
 * The `pg` pool under `@effect/sql-pg`'s client (one pool, one set of connections). The hot
 * path talks to it directly: `@effect/sql` sends every statement unnamed, so PostgreSQL parses
 * and plans it afresh each time, and its statement machinery costs 2-3x the driver's own CPU
 * per statement (docs/performance.md).
 */
export class PgPool extends Context.Service<PgPool, Pg.Pool>()("payments/PgPool") {}

/**
 * The planner settings of the pool's connections, which run only the hot path's statements (point
 * lookups and inserts by key, `hotStatements` in src/store/PgHotStatements.ts): no sequential
 * scans, hash joins, merge joins or materialized inner sides (a whole index read once and joined
 * by a filter), so every plan is index lookups whatever the tables' sizes. (Primary keys are
 * `COLLATE "C"` and the columns that reference them are not: a join between the two names the
 * collation, or it cannot probe the key's index.)
 * Each connection plans a named statement once and PostgreSQL keeps its generic plan; on tables
 * that were empty or small when it was planned (a fresh deployment, a bench) the cheapest plan of
 * the commit's `UPDATE payments ... FROM json_to_recordset(...)` was a hash join over a sequential
 * scan of `payments` (the input's estimate is a fixed 100 rows), kept while the table grew, so each
 * batch read the whole table. test/store/plans.test.ts holds every hot statement to index plans on
 * an empty and on a loaded database.
 */
export const hotPathPlannerSettings: Readonly<Record<string, string>> = {
  enable_seqscan: "off",
  enable_hashjoin: "off",
  enable_mergejoin: "off",
  enable_material: "off"
}

/** `hotPathPlannerSettings` as a connection's `options` startup parameter. */
export const hotPathPlannerOptions = Object.entries(hotPathPlannerSettings).map(([name, value]) =>
  `-c ${name}=${value}`
).join(" ")

/**
 * How long the pool waits for a statement's answer (`Database.poolOptions`: `statement_timeout`
 * and a grace); undefined for a pool without timeouts.
 */
export const statementDeadlineMs = (pool: Pg.Pool): number | undefined => {
  const timeout = (pool.options as Pg.PoolConfig).query_timeout
  return typeof timeout === "number" && timeout > 0 ? timeout : undefined
}

/**
 * A named prepared statement of fixed text: each connection parses and plans it once, then only
 * binds and executes; `answerWithinMs` waits less than the pool's own limit for its answer.
 * Errors map as every store error does (`PgRows.run`): an outage is
 * `StoreUnavailable`, anything else a defect.
 */
export const prepared = <R extends Row = Row>(
  pool: Pg.Pool,
  name: string,
  text: string,
  options: { readonly answerWithinMs?: number } = {}
) =>
(values: ReadonlyArray<unknown>): Effect.Effect<Array<R>, StoreUnavailable> =>
  run(Effect.callback<Array<R>, SqlError>((resume) => {
    const query = options.answerWithinMs === undefined
      ? { name, text, values: values as Array<unknown> }
      : { name, text, values: values as Array<unknown>, query_timeout: options.answerWithinMs }
    pool.query(query, (cause: Error | undefined, result: Pg.QueryResult<R>) => {
      resume(
        cause === undefined || cause === null
          ? Effect.succeed(result.rows)
          : Effect.fail(sqlErrorOf(cause, `Failed to execute statement ${name}`))
      )
    })
  }))
