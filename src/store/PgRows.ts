import { Effect, Fiber } from "effect"
import { SqlError, UnknownError } from "effect/sql/SqlError"
import type { AppConfigShape } from "../platform/Config.ts"
import { configuredKey, makeSecretColumn, type SecretColumn } from "../platform/Sealing.ts"
import { StoreUnavailable } from "./Store.ts"

/**
 * Error handling shared by the PostgreSQL adapters, and the rows of statements that read no
 * table's row as it is (aggregates, a batch's outcomes): a table's row has its own module and
 * type, with its mapping both ways (./rows/).
 */
export type Row = Record<string, any>

const sqlStatePattern = /^[0-9A-Z]{5}$/

/**
 * Whether a failed statement means the database cannot be reached or cannot take the work now
 * (503, safe to retry), by SQLSTATE: connection exceptions (08), the login refused (28) or its
 * database missing (3D000) or not accepting connections (55000; class 55 also holds a lock not
 * available, 55P03), insufficient resources (53), operator intervention such as admin shutdown
 * or a statement timeout (57), system errors (58), serialization failures and deadlocks (40001,
 * 40P01). A failure
 * without a SQLSTATE never reached a server (refused, reset, pool closed). Everything else is the
 * data PostgreSQL refused (22 data exception, 23 integrity, P0001 our triggers, 42 syntax...): a
 * bug of ours, since the edge validates what clients send, so a defect (500), never an outage
 * that a client would be told to retry forever.
 */
export const isUnavailable = (code: string | undefined): boolean => {
  if (code === undefined || !sqlStatePattern.test(code)) return true
  const sqlClass = code.slice(0, 2)
  return ["08", "28", "53", "55", "57", "58"].includes(sqlClass) || code === "3D000" || code === "40001" ||
    code === "40P01"
}

/** Infrastructure failures leave the store as StoreUnavailable (503); everything else is a defect (500). */
export const run = <A>(effect: Effect.Effect<A, SqlError>): Effect.Effect<A, StoreUnavailable> =>
  Effect.catchTag(effect, "SqlError", (error) => {
    const code = (error.reason.cause as { code?: unknown } | undefined)?.code
    return isUnavailable(typeof code === "string" ? code : undefined)
      ? Effect.fail(new StoreUnavailable({ cause: error }))
      : Effect.die(error)
  })

/**
 * `run` with a deadline of the client's own, for the statements of Effect 4's driver: a database
 * that answers nothing (frozen, or the network gone) never ends a statement, and interrupting one
 * asks the server to cancel it and waits for the server to say so, which a frozen server never
 * does. So the statement runs on a fiber of its own, and the caller stops waiting at the deadline
 * (a 503, as any outage) while the abandoned statement ends when its connection does. `pg`'s
 * statements have this deadline in the pool (`query_timeout`, src/platform/Database.ts).
 */
export const runWithin =
  (deadlineMs: number) => <A>(effect: Effect.Effect<A, SqlError>): Effect.Effect<A, StoreUnavailable> =>
    run(Effect.timeoutOrElse(Effect.flatMap(Effect.forkDetach(effect), Fiber.join), {
      duration: deadlineMs,
      orElse: () =>
        Effect.fail(
          new SqlError({
            reason: new UnknownError({
              cause: new Error("no answer"),
              message: `the database did not answer within ${deadlineMs} ms`
            })
          })
        )
    }))

const secretColumns = new WeakMap<AppConfigShape, SecretColumn>()

/**
 * How this configuration keeps webhook signing secrets in PostgreSQL: sealed under
 * RESPONSE_ENCRYPTION_KEY (or the embedded mode's key in `.data/`), one column (and one cache)
 * per configuration. Never under a key of this process only, as stored responses may be: a
 * secret sealed so would be lost at the next start; without a durable key they stay readable.
 */
export const secretColumnFor = (config: AppConfigShape): SecretColumn => {
  let column = secretColumns.get(config)
  if (column === undefined) {
    column = makeSecretColumn(configuredKey(config))
    secretColumns.set(config, column)
  }
  return column
}
