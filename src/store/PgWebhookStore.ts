import * as PgClient from "@effect/sql-pg/PgClient"
import { Effect, Layer } from "effect"
import { type Attempt, type Delivery, type DeliveryStatus, isOpen } from "../domain/Webhook.ts"
import { AppConfig } from "../platform/Config.ts"
import { statementGraceMs } from "../platform/Database.ts"
import type { SecretColumn } from "../platform/Sealing.ts"
import { makeBatcher } from "./GroupCommit.ts"
import { PgPool, prepared, statementDeadlineMs } from "./PgPrepared.ts"
import { type Row, runWithin, secretColumnFor } from "./PgRows.ts"
import { attemptsColumn, deliveryColumns, type DeliveryRow, toDelivery } from "./rows/Delivery.ts"
import { type EventRow, eventSelect, toEvent } from "./rows/Event.ts"
import { type MerchantRow, toMerchant } from "./rows/Merchant.ts"
import { ms, msOrNull, type Timestamp, timestamp, timestampOrNull } from "./rows/Timestamps.ts"
import type { StoreUnavailable } from "./Store.ts"
import {
  emptyCounts,
  type Lease,
  leaseLost,
  type PollInput,
  recorded,
  recordedWithSuccessor,
  type RecordOutcome,
  WebhookStore,
  type WebhookStoreShape
} from "./WebhookStore.ts"

/**
 * The secrets that sign now, from a row of `id, webhook_secret, previous_webhook_secret,
 * previous_live`, opened: none without a merchant, and none that this service's key cannot open.
 */
const secretsOf = (r: Row | undefined, secrets: SecretColumn): ReadonlyArray<string> => {
  if (r === undefined || r.webhook_secret === null || r.webhook_secret === undefined) return []
  const current = secrets.fromStored(r.id, r.webhook_secret)
  const previous = r.previous_webhook_secret !== null && r.previous_live === true
    ? secrets.fromStored(r.id, r.previous_webhook_secret)
    : null
  return current === null ? (previous === null ? [] : [previous]) : previous === null ? [current] : [current, previous]
}

/**
 * The order rule of a delivery `d` of a payment: no earlier delivery of its payment to its URL is
 * still open, and no earlier event of its payment is still in the outbox (another process is
 * draining it). Both claims apply it: a poll's (`dueIds`) and an attempt's successor's
 * (`recordAttemptsSql`), which names in `except` its own predecessor, still open in the
 * statement's snapshot.
 */
const orderRule = (except?: string) =>
  `NOT EXISTS (
          SELECT 1 FROM webhook_deliveries earlier
          WHERE earlier.payment_id = d.payment_id AND earlier.url = d.url
            AND earlier.event_sequence < d.event_sequence AND earlier.status IN ('pending', 'retrying')${
    except === undefined ? "" : `
            AND earlier.id <> ${except}`
  }
        ) AND NOT EXISTS (
          SELECT 1 FROM webhook_outbox o WHERE o.payment_id = d.payment_id AND o.sequence < d.event_sequence
        )`

/**
 * The attempts of a batch of `recordAttempt`s (group commit: `makeBatcher`), one statement: each
 * delivery's new state under its lease token, its attempt's row, and, for one that ended with
 * `successor` set, the lease of its payment's next delivery to its URL, all gated per unit on its
 * update finding the lease. The statement sees the ended deliveries as they were (still open), so
 * the successor's order rule leaves its own predecessor out; a batch never holds two units of one
 * payment. One row per unit, in `ord` order: whether it was recorded, and the successor claimed.
 */
export const recordAttemptsSql = `WITH input AS (
    SELECT * FROM json_to_recordset($1::json) AS u(ord int, id text, token text, status text, attempts jsonb,
      next_attempt_at timestamptz, first_failed_at timestamptz, completed_at timestamptz,
      attempt int, merchant_id text, at timestamptz, response_status int, duration_ms int, error text,
      successor boolean, payment_id text, url text, event_sequence int, now timestamptz, lease_token text, lease_until timestamptz,
      lease_owner text)
  ), recorded AS (
    UPDATE webhook_deliveries d SET status = i.status, attempts = i.attempts, next_attempt_at = i.next_attempt_at,
      first_failed_at = i.first_failed_at, completed_at = i.completed_at, lease_token = NULL, lease_until = NULL, lease_owner = NULL
    FROM input i WHERE d.id = i.id AND d.lease_token = i.token
    RETURNING d.id
  ), attempt AS (
    INSERT INTO webhook_attempts (delivery_id, attempt, merchant_id, at, response_status, duration_ms, error, succeeded)
    SELECT i.id, i.attempt, i.merchant_id, i.at, i.response_status, i.duration_ms, i.error, i.error IS NULL
    FROM input i JOIN recorded r ON r.id = i.id
  ), next AS (
    SELECT i.ord, i.lease_token, i.lease_until, i.lease_owner, (
      SELECT d.id FROM webhook_deliveries d
      WHERE d.payment_id = i.payment_id AND d.url = i.url
        AND d.event_sequence > i.event_sequence AND d.status IN ('pending', 'retrying')
        AND d.next_attempt_at <= i.now AND (d.lease_until IS NULL OR d.lease_until <= i.now)
        AND (d.lease_owner IS NULL OR d.lease_token IS NULL)
        AND ${orderRule("i.id")}
      ORDER BY d.event_sequence LIMIT 1
      FOR UPDATE OF d SKIP LOCKED
    ) AS next_id
    FROM input i
    WHERE i.successor AND EXISTS (SELECT 1 FROM recorded r WHERE r.id = i.id)
  ), successor AS (
    UPDATE webhook_deliveries d SET lease_token = n.lease_token, lease_until = n.lease_until, lease_owner = n.lease_owner
    FROM next n WHERE d.id = n.next_id
    RETURNING n.ord AS successor_of, d.*
  )
  SELECT i.ord, EXISTS (SELECT 1 FROM recorded r WHERE r.id = i.id) AS recorded,
    (SELECT row_to_json(s) FROM successor s WHERE s.successor_of = i.ord) AS successor
  FROM input i ORDER BY i.ord`

/** A lease renewed by its holder, with the merchant's signing secrets (`renewLease`). */
export const renewLeaseSql = `WITH renewed AS (
      UPDATE webhook_deliveries SET lease_until = $2
      WHERE id = $1 AND lease_token = $3 AND lease_until > $4 RETURNING merchant_id
    )
    SELECT m.id, m.webhook_secret, m.previous_webhook_secret, m.previous_webhook_secret_expires_at > $4 AS previous_live
    FROM renewed LEFT JOIN merchants m ON m.id = renewed.merchant_id COLLATE "C"`

interface AttemptRecord {
  readonly delivery: Delivery
  readonly attempt: Attempt
  readonly token: string
  /** Set when the successor is to be claimed (an ordered delivery that has ended). */
  readonly successor: { readonly now: number; readonly lease: Lease } | undefined
}

const recordAttemptsValues = (units: ReadonlyArray<AttemptRecord>) => [
  JSON.stringify(units.map(({ attempt, delivery, successor, token }, ord) => ({
    ord,
    id: delivery.id,
    token,
    status: delivery.status,
    attempts: attemptsColumn(delivery.attempts),
    next_attempt_at: timestampOrNull(delivery.nextAttemptAt),
    first_failed_at: timestampOrNull(delivery.firstFailedAt),
    completed_at: timestampOrNull(delivery.completedAt),
    attempt: attempt.attempt,
    merchant_id: delivery.merchantId,
    at: timestamp(attempt.at),
    response_status: attempt.responseStatus,
    duration_ms: attempt.durationMs,
    error: attempt.error,
    successor: successor !== undefined,
    payment_id: delivery.order?.paymentId ?? null,
    url: delivery.url,
    event_sequence: delivery.order?.sequence ?? null,
    now: successor === undefined ? null : timestamp(successor.now),
    lease_token: successor?.lease.token ?? null,
    lease_until: successor === undefined ? null : timestamp(successor.lease.until),
    lease_owner: successor?.lease.owner ?? null
  })))
]

const recordAttemptsOutcomes = (rows: ReadonlyArray<Row>): Array<RecordOutcome> =>
  rows.map((r) =>
    r.recorded !== true
      ? leaseLost
      : r.successor === null || r.successor === undefined
      ? recorded
      : recordedWithSuccessor(toDelivery(r.successor as DeliveryRow))
  )

export const makePgWebhookStore = Effect.gen(function*() {
  const sql = yield* PgClient.PgClient
  const pool = yield* PgPool
  const config = yield* AppConfig
  const secrets = secretColumnFor(config)
  // Every statement of Effect 4's driver answers within the statement timeout and its grace, or is given up (a 503).
  const run = runWithin(config.databaseStatementTimeoutMs + statementGraceMs)
  const recordAttempts = makeBatcher<AttemptRecord, RecordOutcome>({
    pool,
    name: "record_webhook_attempts_v2",
    text: recordAttemptsSql,
    values: recordAttemptsValues,
    outcomes: recordAttemptsOutcomes,
    // One payment's deliveries to a URL go one at a time; a batch never holds two of one payment.
    keyOf: (u) => u.delivery.order?.paymentId ?? u.delivery.id,
    deadlineMs: statementDeadlineMs(pool)
  })
  const renew = prepared(pool, "renew_webhook_lease_v1", renewLeaseSql)

  // The attempts as text: the driver would send a JS array as a PostgreSQL array literal, not as JSON.
  const deliveryRow = (d: Delivery) => {
    const columns = deliveryColumns(d)
    return { ...columns, attempts: JSON.stringify(columns.attempts) }
  }

  const insert = (deliveries: ReadonlyArray<Delivery>) =>
    deliveries.length === 0
      ? Effect.succeed([] as ReadonlyArray<Row>)
      // No conflict target: a second delivery of an event clashes on its id (derived from the
      // event's, \`deliveryIdOf\`) as well as on event_id, and either clash means "already there".
      : sql`INSERT INTO webhook_deliveries ${sql.insert(deliveries.map(deliveryRow) as any)}
          ON CONFLICT DO NOTHING RETURNING id`

  /** When an open delivery `d` is next due: its next attempt, or the end of a live lease on it. */
  const dueAt = () => sql`GREATEST(d.next_attempt_at, coalesce(d.lease_until, d.next_attempt_at))`

  const drain = (limit: number, build: PollInput["build"]) =>
    run(sql.withTransaction(Effect.gen(function*() {
      const taken = yield* sql`DELETE FROM webhook_outbox WHERE (payment_id, sequence) IN (
          SELECT payment_id, sequence FROM webhook_outbox ORDER BY created_at, event_id LIMIT ${limit}
          FOR UPDATE SKIP LOCKED
        ) RETURNING payment_id, sequence, merchant_id`
      if (taken.length === 0) return { drained: 0, created: [] }
      // Events are keyed by their payment and sequence (migration 0016), as the outbox names them;
      // the outbox's row names the merchant, which the event's does not repeat.
      const events = yield* sql<EventRow>`SELECT ${sql.literal(eventSelect("t.merchant_id"))} FROM payment_events e
        JOIN unnest(${taken.map((r) => r.payment_id as string)}::text[], ${
        taken.map((r) => Number(r.sequence))
      }::int[], ${taken.map((r) => r.merchant_id as string)}::text[]) AS t(payment_id, sequence, merchant_id)
          ON e.payment_id = t.payment_id AND e.sequence = t.sequence
        ORDER BY e.created_at, e.payment_id, e.sequence`
      const merchantIds = [...new Set(events.map((e) => e.merchant_id))]
      const merchants = new Map(
        (merchantIds.length === 0
          ? []
          : yield* sql<MerchantRow>`SELECT * FROM merchants WHERE id IN ${sql.in(merchantIds)}`)
          .map((r) => [r.id, toMerchant(r, secrets)])
      )
      const built: Array<Delivery> = []
      for (const row of events) {
        const merchant = merchants.get(row.merchant_id)
        const delivery = merchant === undefined ? null : build(toEvent(row), merchant)
        if (delivery !== null) built.push(delivery)
      }
      const inserted = new Set((yield* insert(built)).map((r) => r.id as string))
      return { drained: taken.length, created: built.filter((d) => inserted.has(d.id)) }
    })))

  /**
   * The deliveries a poll leases: due at `now`, no live lease (none, one that has ended, or one
   * whose owner has stopped beating), none of their payment before them open; and whether a lease
   * an instance held and did not give back is taken over (a cut attempt). A lease that names no
   * instance (a process without one) is taken over when it ends, as if never held.
   */
  const due = (at: number, limit: number) => {
    const now = timestamp(at)
    return sql`SELECT d.id, d.lease_token IS NOT NULL AND d.lease_owner IS NOT NULL AS taken_over FROM webhook_deliveries d
        WHERE d.status IN ('pending', 'retrying') AND d.next_attempt_at <= ${now}
          AND (d.lease_until IS NULL OR d.lease_until <= ${now}
            OR (d.lease_owner IS NOT NULL
              AND NOT EXISTS (SELECT 1 FROM service_instances i WHERE i.id = d.lease_owner AND i.alive_until > ${now})))
          AND (d.payment_id IS NULL OR (${sql.literal(orderRule())}))
        ORDER BY d.next_attempt_at, d.id LIMIT ${limit}
        FOR UPDATE OF d SKIP LOCKED`
  }

  const byDueTime = (
    a: Delivery,
    b: Delivery
  ) => (a.nextAttemptAt! < b.nextAttemptAt! ? -1 : a.nextAttemptAt! > b.nextAttemptAt! ? 1 : a.id < b.id ? -1 : 1)

  const nextDueAt = () =>
    run(sql`SELECT min(${dueAt()}) AS at FROM webhook_deliveries d WHERE d.status IN ('pending', 'retrying')`).pipe(
      Effect.map((rows) => msOrNull(rows[0]?.at as Timestamp | null))
    )

  /** Outbox batches while they come full (each its own transaction, as `drainOutbox`). */
  const drainBatches = (input: PollInput, batch: number, drained: number): Effect.Effect<number, StoreUnavailable> =>
    Effect.flatMap(
      drain(input.drainLimit, input.build),
      ({ drained: taken }) =>
        taken === input.drainLimit && batch + 1 < input.drainBatches
          ? drainBatches(input, batch + 1, drained + taken)
          : Effect.succeed(drained + taken)
    )

  /**
   * The drain of a poll, after a look whether the outbox holds anything: most polls find it empty,
   * and the look is one round trip where the drain's transaction is three. (An event committed
   * just after the look waits for the next poll, as one committed just after the drain would.)
   */
  const drainIfAny = (input: PollInput) =>
    Effect.flatMap(
      run(sql`SELECT EXISTS (SELECT 1 FROM webhook_outbox) AS any`),
      (rows) => rows[0]?.any === true ? drainBatches(input, 0, 0) : Effect.succeed(0)
    )

  const store: WebhookStoreShape = {
    poll: (input) =>
      Effect.flatMap(input.drainBatches > 0 ? drainIfAny(input) : Effect.succeed(0), (drained) => {
        const lease = input.lease()
        // The claim and the next due time in one statement: the claimed rows as JSON, and the
        // earliest due time among the others (the statement sees them as before its update; the
        // claimed ones are due next when their new lease ends).
        return run(sql`WITH candidates AS (${due(input.now, input.claimLimit)}), claimed AS (
            UPDATE webhook_deliveries d SET lease_token = ${lease.token}, lease_until = ${
          timestamp(lease.until)
        }, lease_owner = ${lease.owner ?? null}
            FROM candidates c WHERE d.id = c.id
            RETURNING d.*, c.taken_over
          )
          SELECT (SELECT coalesce(json_agg(c), '[]'::json) FROM claimed c) AS claimed,
            (SELECT coalesce(json_agg(json_build_object('id', m.id, 'webhook_secret', m.webhook_secret,
                'previous_webhook_secret', m.previous_webhook_secret,
                'previous_live', m.previous_webhook_secret_expires_at > ${timestamp(input.now)})), '[]'::json)
              FROM merchants m WHERE m.id IN (SELECT merchant_id FROM claimed)) AS secrets,
            (SELECT min(${dueAt()}) FROM webhook_deliveries d
              WHERE d.status IN ('pending', 'retrying') AND d.id NOT IN (SELECT id FROM claimed)) AS next_due`).pipe(
          Effect.map((rows) => {
            const rowsClaimed = rows[0]!.claimed as ReadonlyArray<DeliveryRow & { readonly taken_over: boolean }>
            const claimed = rowsClaimed.map(toDelivery).sort(byDueTime)
            const takenOver = new Set(rowsClaimed.filter((r) => r.taken_over === true).map((r) => r.id))
            const others = rows[0]!.next_due === null ? Infinity : ms(rows[0]!.next_due as Timestamp)
            const nextDueAt = Math.min(others, claimed.length > 0 ? lease.until : Infinity)
            const signing = new Map(
              (rows[0]!.secrets as ReadonlyArray<Row>).map((r) => [r.id as string, secretsOf(r, secrets)] as const)
            )
            return {
              drained,
              claimed,
              secrets: signing,
              nextDueAt: nextDueAt === Infinity ? null : nextDueAt,
              takenOver
            }
          })
        )
      }),
    drainOutbox: drain,
    insertDelivery: (delivery) => run(insert([delivery])).pipe(Effect.asVoid),
    getDelivery: (merchantId, id) =>
      run(sql<DeliveryRow>`SELECT * FROM webhook_deliveries WHERE id = ${id} AND merchant_id = ${merchantId}`).pipe(
        Effect.map((rows) => (rows[0] ? toDelivery(rows[0]) : null))
      ),
    listDeliveries: (merchantId, filter, p) => {
      const where = sql.and([
        sql`merchant_id = ${merchantId}`,
        ...(filter.status === undefined ? [] : [sql`status = ${filter.status}`])
      ])
      return run(Effect.all([
        sql<DeliveryRow>`SELECT * FROM webhook_deliveries WHERE ${where} ORDER BY created_at DESC, id DESC
          LIMIT ${p.perPage} OFFSET ${(p.page - 1) * p.perPage}`,
        sql`SELECT count(*)::int AS n FROM webhook_deliveries WHERE ${where}`
      ])).pipe(Effect.map(([rows, count]) => ({ items: rows.map(toDelivery), totalCount: Number(count[0]!.n) })))
    },
    renewLease: (id, token, now, until) =>
      // The renewal and the merchant's secrets in one statement (one round trip an attempt).
      Effect.map(
        renew([id, timestamp(until), token, timestamp(now)]),
        (rows) => (rows.length === 0 ? null : secretsOf(rows[0], secrets))
      ),
    recordAttempt: (delivery, attempt: Attempt, token, successor) =>
      // One statement, shared with the attempts that end meanwhile (group commit): the update
      // under the lease token, the attempt's row and the successor's claim, the last two only if
      // the update found the lease. A delivery that stays open holds its payment's order: it
      // claims no successor.
      recordAttempts({
        delivery,
        attempt,
        token,
        successor: delivery.order === null || isOpen(delivery) ? undefined : successor
      }),
    releaseLease: (id, token, cutAt) =>
      run(
        cutAt === undefined
          ? sql`UPDATE webhook_deliveries SET lease_token = NULL, lease_until = NULL, lease_owner = NULL
            WHERE id = ${id} AND lease_token = ${token}`
          : sql`UPDATE webhook_deliveries SET lease_until = LEAST(lease_until, ${timestamp(cutAt)}::timestamptz)
            WHERE id = ${id} AND lease_token = ${token}`
      ).pipe(Effect.asVoid),
    backlog: (at) => {
      const now = timestamp(at)
      return run(sql`SELECT count(*)::int AS open,
          count(*) FILTER (WHERE next_attempt_at <= ${now} AND (lease_until IS NULL OR lease_until <= ${now}))::int AS due,
          min(next_attempt_at) FILTER (WHERE next_attempt_at <= ${now} AND (lease_until IS NULL OR lease_until <= ${now})) AS oldest
        FROM webhook_deliveries WHERE status IN ('pending', 'retrying')`).pipe(
        Effect.map((rows) => ({
          open: Number(rows[0]?.open ?? 0),
          due: Number(rows[0]?.due ?? 0),
          oldestDueAt: msOrNull(rows[0]?.oldest as Timestamp | null)
        }))
      )
    },
    nextDueAt,
    resend: (merchantId, id, decide) =>
      run(sql.withTransaction(Effect.gen(function*() {
        const rows = yield* sql<
          DeliveryRow
        >`SELECT * FROM webhook_deliveries WHERE id = ${id} AND merchant_id = ${merchantId} FOR UPDATE`
        if (rows.length === 0) return { _tag: "NotFound" as const }
        const current = toDelivery(rows[0]!)
        const next = decide(current)
        if (next === null) return { _tag: "Refused" as const, delivery: current }
        yield* sql`UPDATE webhook_deliveries SET status = ${next.status}, next_attempt_at = ${
          timestampOrNull(next.nextAttemptAt)
        },
            completed_at = ${
          timestampOrNull(next.completedAt)
        }, lease_token = NULL, lease_until = NULL, lease_owner = NULL WHERE id = ${id}`
        return { _tag: "Resent" as const, delivery: next }
      }))),
    stats: (merchantId, sinceAt) => {
      const since = timestamp(sinceAt)
      return run(Effect.all([
        sql`SELECT status, count(*)::int AS n FROM webhook_deliveries WHERE merchant_id = ${merchantId} GROUP BY status`,
        sql`SELECT
            count(*) FILTER (WHERE at >= ${since})::int AS recent,
            count(*) FILTER (WHERE at >= ${since} AND succeeded)::int AS recent_ok,
            max(at) FILTER (WHERE succeeded) AS last_success,
            max(at) FILTER (WHERE NOT succeeded) AS last_failure
          FROM webhook_attempts WHERE merchant_id = ${merchantId}`
      ])).pipe(
        Effect.flatMap(([statusRows, [figures]]) =>
          Effect.map(
            run(sql`SELECT count(*)::int AS n FROM webhook_attempts WHERE merchant_id = ${merchantId} AND NOT succeeded
              AND at > ${timestampOrNull(msOrNull(figures?.last_success as Timestamp | null)) ?? "-infinity"}`),
            ([consecutive]) => {
              const counts = emptyCounts()
              for (const r of statusRows) counts[r.status as DeliveryStatus] = Number(r.n)
              return {
                counts,
                attemptsLastDay: Number(figures?.recent ?? 0),
                successfulAttemptsLastDay: Number(figures?.recent_ok ?? 0),
                lastSuccessAt: msOrNull(figures?.last_success as Timestamp | null),
                lastFailureAt: msOrNull(figures?.last_failure as Timestamp | null),
                consecutiveFailures: Number(consecutive?.n ?? 0)
              }
            }
          )
        )
      )
    },
    rotateSecret: (merchantId, secret, previousUntil, now) =>
      run(sql<MerchantRow>`UPDATE merchants SET previous_webhook_secret = webhook_secret,
          previous_webhook_secret_expires_at = ${timestamp(previousUntil)}, webhook_secret = ${
        secrets.toStored(merchantId, secret)
      }, updated_at = ${timestamp(now)}
        WHERE id = ${merchantId} RETURNING *`).pipe(
        Effect.map((rows) => (rows[0] ? toMerchant(rows[0], secrets) : null))
      )
  }
  return store
})

export const layerPg: Layer.Layer<WebhookStore, never, PgClient.PgClient | PgPool | AppConfig> = Layer.effect(
  WebhookStore,
  makePgWebhookStore
)
