import { SqlError, UnknownError } from "effect/sql/SqlError"
import { Context, Effect } from "effect"
import type * as Pg from "pg"
import { run, type Row } from "./PgRows.ts"
import type { StoreUnavailable } from "./Store.ts"

/** A failure of ours on the `pg` pool, as `effect/sql` reports one (its SQLSTATE stays on the cause). */
export const sqlErrorOf = (cause: unknown, message: string) => new SqlError({ reason: new UnknownError({ cause, message }) })

/**
 * The `pg` pool under `@effect/sql-pg`'s client (one pool, one set of connections). The hot
 * path talks to it directly: `@effect/sql` sends every statement unnamed, so PostgreSQL parses
 * and plans it afresh each time, and its statement machinery costs 2-3x the driver's own CPU
 * per statement (docs/performance.md).
 */
export class PgPool extends Context.Service<PgPool, Pg.Pool>()("payments/PgPool") {}

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
export const prepared = (pool: Pg.Pool, name: string, text: string, options: { readonly answerWithinMs?: number } = {}) =>
(values: ReadonlyArray<unknown>): Effect.Effect<Array<Row>, StoreUnavailable> =>
  run(Effect.callback<Array<Row>, SqlError>((resume) => {
    const query = options.answerWithinMs === undefined
      ? { name, text, values: values as Array<unknown> }
      : { name, text, values: values as Array<unknown>, query_timeout: options.answerWithinMs }
    pool.query(query, (cause: Error | undefined, result: Pg.QueryResult<Row>) => {
      resume(
        cause === undefined || cause === null
          ? Effect.succeed(result.rows)
          : Effect.fail(sqlErrorOf(cause, `Failed to execute statement ${name}`))
      )
    })
  }))
