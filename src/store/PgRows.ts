import { Effect, Fiber } from "effect"
import { SqlError, UnknownError } from "effect/sql/SqlError"
import type { Dispute } from "../domain/DisputeRecord.ts"
import type { Merchant } from "../domain/Merchant.ts"
import type { PaymentEvent, ProcessorPending } from "../domain/Payment.ts"
import type { Attempt } from "../domain/Webhook.ts"
import type { AppConfigShape } from "../platform/Config.ts"
import { isoAt } from "../platform/IsoTime.ts"
import { configuredKey, makeSecretColumn, type SecretColumn } from "../platform/Sealing.ts"
import { StoreUnavailable } from "./Store.ts"

/** Row mapping and error handling shared by the PostgreSQL adapters. */
export type Row = Record<string, any>

/**
 * Times are epoch milliseconds in the store's interface and `timestamptz` in PostgreSQL: a time
 * goes in as ISO 8601 text (a parameter, or a field of a JSON row that a statement reads as
 * `timestamptz`) and comes back as `pg` returns it (a Date), or as text (`to_jsonb`).
 */
export const timestamp = (at: number): string => isoAt(at)
export const timestampOrNull = (at: number | null): string | null => (at === null ? null : isoAt(at))

/** A `timestamptz` value as read (a Date, or its text) in epoch milliseconds. */
export const ms = (value: unknown): number => (value instanceof Date ? value.getTime() : Date.parse(String(value)))
export const msOrNull = (value: unknown): number | null => (value === null || value === undefined ? null : ms(value))

/**
 * A payment's dispute as its `dispute` jsonb column keeps it, its times as ISO text (queries
 * compare `dispute->>'openedAt'` as text), and back.
 */
export const disputeColumn = (d: Dispute | null) =>
  d === null ? null : { ...d, openedAt: isoAt(d.openedAt), resolvedAt: timestampOrNull(d.resolvedAt) }
export const toDispute = (value: unknown): Dispute | null => {
  if (value === null || value === undefined) return null
  const d = value as Omit<Dispute, "openedAt" | "resolvedAt"> & { openedAt: string; resolvedAt: string | null }
  return { ...d, openedAt: Date.parse(d.openedAt), resolvedAt: d.resolvedAt === null ? null : Date.parse(d.resolvedAt) }
}

/** A payment's `processor_pending` jsonb column, its `since` as ISO text, and back. */
export const pendingColumn = (p: ProcessorPending | null) => (p === null ? null : { ...p, since: isoAt(p.since) })
export const toPending = (value: unknown): ProcessorPending | null => {
  if (value === null || value === undefined) return null
  const p = value as Omit<ProcessorPending, "since"> & { since: string }
  return { ...p, since: Date.parse(p.since) }
}

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

/** A delivery's `attempts` jsonb column, each attempt's `at` as ISO text, and back. */
export const attemptsColumn = (attempts: ReadonlyArray<Attempt>) => attempts.map((a) => ({ ...a, at: isoAt(a.at) }))
export const toAttempts = (value: unknown): ReadonlyArray<Attempt> =>
  (value as ReadonlyArray<Omit<Attempt, "at"> & { at: string }>).map((a) => ({ ...a, at: Date.parse(a.at) }))

export const toMerchant = (r: Row, secrets: SecretColumn): Merchant => ({
  id: r.id,
  name: r.name,
  webhookUrl: r.webhook_url,
  webhookSecret: secrets.fromStored(r.id, r.webhook_secret),
  createdAt: ms(r.created_at),
  updatedAt: ms(r.updated_at)
})

export const toEvent = (r: Row): PaymentEvent => ({
  id: r.id,
  paymentId: r.payment_id,
  merchantId: r.merchant_id,
  type: r.type,
  sequence: r.sequence,
  data: r.data,
  createdAt: ms(r.created_at)
})
