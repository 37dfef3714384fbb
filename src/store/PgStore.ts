import * as PgClient from "@effect/sql-pg/PgClient"
import { Effect, Layer } from "effect"
import type * as Statement from "effect/sql/Statement"
import type { FraudCaseStatus } from "../domain/Fraud.ts"
import type { Balance } from "../domain/Ledger.ts"
import type { ApiKey } from "../domain/Merchant.ts"
import type { Currency } from "../domain/Money.ts"
import type { Change, Payment } from "../domain/Payment.ts"
import { followsFrom } from "../domain/Payment.ts"
import { AppConfig } from "../platform/Config.ts"
import { statementGraceMs } from "../platform/Database.ts"
import { isSealed, sealedPrefix, type SecretColumn } from "../platform/Sealing.ts"
import { getPaymentSql, historyColumns, makeHotPath, readForCommandSql, toHistory, writtenOnce } from "./PgHotPath.ts"
import { PgPool, prepared, statementDeadlineMs } from "./PgPrepared.ts"
import { type Row, run as runUnbounded, runWithin, secretColumnFor } from "./PgRows.ts"
import * as PgWebhookStore from "./PgWebhookStore.ts"
import { apiKeyColumns, type ApiKeyRow, toApiKey } from "./rows/ApiKey.ts"
import { eventColumns, type EventRow, eventSelect, toEvent } from "./rows/Event.ts"
import { fraudCaseColumns, type FraudCaseRow, toFraudCase } from "./rows/FraudCase.ts"
import { ledgerEntryColumns, type LedgerEntryRow, toLedgerEntry } from "./rows/LedgerEntry.ts"
import { merchantColumns, type MerchantRow, toMerchant } from "./rows/Merchant.ts"
import {
  disputeColumn,
  explanationsColumn,
  paymentColumns,
  type PaymentRow,
  pendingColumn,
  toPayment
} from "./rows/Payment.ts"
import { pack, unpack } from "./rows/StoredResponse.ts"
import { ms, type Timestamp, timestamp, timestampOrNull } from "./rows/Timestamps.ts"
import type { AnalyticsPeriodRow, AnalyticsRow, ClaimOutcome, StoreEffect, StoreShape, UpdateOutcome } from "./Store.ts"
import { isCardTokenDisputeQuery, maximumSeriesRows, modelStats, Store, unrecordedModel } from "./Store.ts"
import type { WebhookStore } from "./WebhookStore.ts"

/** Merchants whose secrets the start-up pass reads at once. */
const sealBatchSize = 500

/**
 * Seals every webhook signing secret still stored readable (rows from before secrets were sealed,
 * or written by a process without a durable key), in batches by id. Each value is replaced only if
 * it is still the plaintext that was read, so a rotation or another process's pass in between is
 * kept; a pass that finds nothing costs one query. Answers how many values it sealed.
 */
export const sealPlaintextSecrets = (sql: PgClient.PgClient, secrets: SecretColumn) =>
  Effect.gen(function*() {
    let sealed = 0
    let after = ""
    for (;;) {
      const rows = yield* sql`SELECT id, webhook_secret, previous_webhook_secret FROM merchants
        WHERE id > ${after} AND (NOT starts_with(webhook_secret, ${sealedPrefix})
          OR NOT starts_with(previous_webhook_secret, ${sealedPrefix}))
        ORDER BY id LIMIT ${sealBatchSize}`
      if (rows.length === 0) return sealed
      const sealOrKeep = (
        id: string,
        stored: string | null
      ) => (stored === null || isSealed(stored) ? stored : secrets.toStored(id, stored))
      const ids = rows.map((r) => r.id as string)
      const currents = rows.map((r) => r.webhook_secret as string)
      const previouses = rows.map((r) => r.previous_webhook_secret as string | null)
      const updated = yield* sql`UPDATE merchants m SET
          webhook_secret = CASE WHEN m.webhook_secret = v.current THEN v.current_sealed ELSE m.webhook_secret END,
          previous_webhook_secret = CASE WHEN m.previous_webhook_secret = v.previous THEN v.previous_sealed ELSE m.previous_webhook_secret END
        FROM unnest(${ids}::text[], ${currents}::text[], ${
        currents.map((stored, i) => sealOrKeep(ids[i]!, stored))
      }::text[],
          ${previouses}::text[], ${previouses.map((stored, i) => sealOrKeep(ids[i]!, stored))}::text[])
          AS v(id, current, current_sealed, previous, previous_sealed)
        WHERE m.id = v.id
        RETURNING (m.webhook_secret IS DISTINCT FROM v.current)::int + (m.previous_webhook_secret IS DISTINCT FROM v.previous)::int AS n`
      for (const r of updated) sealed += Number(r.n)
      after = ids[ids.length - 1]!
    }
  })

/**
 * Whether the newest sealed secret opens under this key: one row, a canary for a key that was
 * changed or lost (every secret sealed before then signs nothing until its merchant rotates it).
 */
const newestSealedOpens = (sql: PgClient.PgClient, secrets: SecretColumn) =>
  Effect.map(
    sql`SELECT id, webhook_secret FROM merchants WHERE starts_with(webhook_secret, ${sealedPrefix}) ORDER BY updated_at DESC, id LIMIT 1`,
    (rows) => rows.length === 0 || secrets.fromStored(String(rows[0]!.id), String(rows[0]!.webhook_secret)) !== null
  )

/** At start: seal what is stored readable, and say so when the key cannot open what is sealed. */
const checkSecretsAtStart = (sql: PgClient.PgClient, secrets: SecretColumn) =>
  Effect.gen(function*() {
    const guide = "docs/operations.md, \"Webhook signing secrets at rest\""
    if (!secrets.sealing) {
      yield* Effect.logWarning(
        `RESPONSE_ENCRYPTION_KEY is not set: webhook signing secrets are stored readable in the database (${guide})`
      )
    } else {
      const sealed = yield* runUnbounded(sealPlaintextSecrets(sql, secrets))
      if (sealed > 0) yield* Effect.logInfo(`sealed ${sealed} webhook signing secrets stored readable`)
    }
    if (!(yield* runUnbounded(newestSealedOpens(sql, secrets)))) {
      yield* Effect.logWarning(
        "webhook signing secrets in the database were sealed under another RESPONSE_ENCRYPTION_KEY: their merchants' webhooks " +
          `are not sent until each merchant rotates its secret (${guide})`
      )
    }
  }).pipe(
    Effect.catch((error) =>
      Effect.logWarning(
        "webhook signing secrets not checked at start (the database did not answer); the next start does it",
        error
      )
    )
  )

/** How long a release of an idempotency claim waits for the database (see `releaseKey`). */
export const releaseAnswerMs = 1_000

/** A claim released after a failure (`releaseIdempotencyKey`): see its use in `makePgStore`. */
export const releaseKeySql = `WITH deleted AS (
      DELETE FROM idempotency_keys WHERE merchant_id = $1 AND key = $2 AND applied_to IS NULL AND state = 'in_progress'
    )
    UPDATE idempotency_keys SET locked_until = created_at
    WHERE merchant_id = $1 AND key = $2 AND applied_to IS NOT NULL AND state = 'in_progress'`

/** A keyed command's claim (`claimIdempotencyKey`'s common case). */
export const claimKeySql = `WITH claimed AS (
      INSERT INTO idempotency_keys (merchant_id, key, fingerprint, state, locked_until, created_at, expires_at, owner)
      VALUES ($1::text, $2::text, $3::text, 'in_progress', $4::timestamptz, $5::timestamptz, $6::timestamptz, $7::text)
      ON CONFLICT (merchant_id, key) DO UPDATE SET fingerprint = EXCLUDED.fingerprint, state = 'in_progress',
        response_status = NULL, response_body = NULL, applied_to = NULL, locked_until = EXCLUDED.locked_until,
        created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at, owner = EXCLUDED.owner
      WHERE idempotency_keys.expires_at <= $5::timestamptz
      RETURNING key
    ),
    released AS (
      UPDATE payments SET idempotency_hold = NULL
      WHERE merchant_id = $1::text AND idempotency_hold = $2::text AND created_at < $5::timestamptz
        AND EXISTS (SELECT 1 FROM claimed)
    )
    SELECT key FROM claimed`

/** A finished response stored under its key (`completeIdempotencyKey`). */
export const completeKeySql =
  `UPDATE idempotency_keys SET state = 'completed', response_status = $3::int, response_body = $4::text
    WHERE merchant_id = $1::text AND key = $2::text`

/** Authentication in one statement (`useApiKey`). */
export const useApiKeySql = `WITH touched AS (
      UPDATE api_keys SET last_used_at = $2::timestamptz
      WHERE key_hash = $1 AND status = 'active' AND (last_used_at IS NULL OR last_used_at <= $3::timestamptz)
      RETURNING id, last_used_at
    )
    SELECT to_jsonb(k.*) AS key, to_jsonb(m.*) AS merchant, t.last_used_at AS touched_at
    FROM api_keys k JOIN merchants m ON m.id = k.merchant_id COLLATE "C" LEFT JOIN touched t ON t.id = k.id
    WHERE k.key_hash = $1`

export const makePgStore = Effect.gen(function*() {
  const sql = yield* PgClient.PgClient
  const pool = yield* PgPool
  const config = yield* AppConfig
  const secrets = secretColumnFor(config)
  // Every statement of Effect 4's driver answers within the statement timeout and its grace, or is given up (a 503).
  const run = runWithin(config.databaseStatementTimeoutMs + statementGraceMs)
  yield* checkSecretsAtStart(sql, secrets)
  const hot = makeHotPath(pool, statementDeadlineMs(pool))
  const getPayment = prepared<PaymentRow>(pool, "get_payment_v1", getPaymentSql)
  // A claim released after a failure: deleted when nothing was applied under it, else its lease
  // ended (a command that already moved money keeps its claim, so a retry finds it applied). It
  // runs when a request failed, often because the database is away: one statement, and an answer
  // within `releaseAnswerMs`, so it adds little to that request's wait (unreleased, the lease ends it).
  const releaseKey = prepared(
    pool,
    "release_idempotency_key_v1",
    releaseKeySql,
    { answerWithinMs: releaseAnswerMs }
  )
  const readForCommand = prepared<
    { readonly payment: PaymentRow; readonly fraud_case: FraudCaseRow | null; readonly already_applied: boolean }
  >(pool, "read_for_command_v1", readForCommandSql)
  // A keyed command's claim in the common case and its stored response: named prepared statements,
  // as the hot path's, with the pool's deadline (`query_timeout`) and no fiber of their own.
  // Insert the claim, or take over a row that expired; a key claimed afresh no longer holds the
  // payment it created before.
  const claimKey = prepared(
    pool,
    "claim_idempotency_key_v1",
    claimKeySql
  )
  const completeKey = prepared(
    pool,
    "complete_idempotency_key_v1",
    completeKeySql
  )
  // Authentication in one statement (`useApiKey`): the write of last_used_at, only for an active
  // key last used at or before $3 (so one write a key per interval, whichever process serves it),
  // and the read of the key with its merchant. The SELECT sees the statement's snapshot, from
  // before the UPDATE (a data-modifying CTE), so the time written comes from RETURNING.
  const useApiKey = prepared<
    { readonly key: ApiKeyRow; readonly merchant: MerchantRow; readonly touched_at: Timestamp | null }
  >(pool, "use_api_key_v1", useApiKeySql)

  const paymentRow = (p: Payment) => ({
    ...paymentColumns(p),
    metadata: sql.json(p.metadata),
    dispute: p.dispute === null ? null : sql.json(disputeColumn(p.dispute)),
    processor_pending: p.processorPending === null ? null : sql.json(pendingColumn(p.processorPending)),
    failed_refunds: p.failedRefunds.length === 0 ? null : sql.json(p.failedRefunds),
    fraud_explanations: p.fraudExplanations === null ? null : JSON.stringify(explanationsColumn(p.fraudExplanations))
  })

  /** Writes what a decision implies besides the payment row itself. */
  const writeChildren = (change: Change) =>
    Effect.gen(function*() {
      // Events, their outbox rows and the ledger group go in one statement: one round trip.
      const parts: Array<Statement.Fragment> = []
      if (change.events.length > 0) {
        parts.push(
          sql`events AS (INSERT INTO payment_events ${
            sql.insert(change.events.map((e) => {
              const columns = eventColumns(e)
              return { ...columns, data: sql.json(columns.data) }
            }) as any)
          } RETURNING id, payment_id, sequence, created_at)`
        )
        // Only a merchant with a webhook URL has deliveries to make (CONTRACT section 7).
        parts.push(sql`outbox AS (INSERT INTO webhook_outbox (event_id, payment_id, sequence, merchant_id, created_at)
          SELECT id, payment_id, sequence, ${change.payment.merchantId}, created_at FROM events
          WHERE EXISTS (SELECT 1 FROM merchants WHERE id = ${change.payment.merchantId} AND webhook_url IS NOT NULL))`)
      }
      if (change.ledger.length > 0) {
        parts.push(
          sql`entries AS (INSERT INTO ledger_entries ${sql.insert(change.ledger.map(ledgerEntryColumns) as any)})`
        )
      }
      if (parts.length > 0) yield* sql`WITH ${sql.csv(parts)} SELECT 1`
      const c = change.fraudCase
      if (c !== null) {
        yield* sql`
          INSERT INTO fraud_cases ${
          // The explanations as text: the driver would send a JS array as a PostgreSQL array literal, not as JSON.
          sql.insert({ ...fraudCaseColumns(c), explanations: JSON.stringify(c.explanations) })}
          ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status, notes = EXCLUDED.notes,
            reviewed_at = EXCLUDED.reviewed_at, updated_at = EXCLUDED.updated_at`
      }
    })

  const page = (p: { page: number; perPage: number }) => sql`LIMIT ${p.perPage} OFFSET ${(p.page - 1) * p.perPage}`

  const store: StoreShape = {
    insertMerchant: (merchant, apiKey) =>
      run(sql.withTransaction(Effect.gen(function*() {
        yield* sql`INSERT INTO merchants ${sql.insert(merchantColumns(merchant, secrets))}`
        yield* insertApiKey(apiKey)
      }))),
    getMerchant: (id) =>
      run(sql<MerchantRow>`SELECT * FROM merchants WHERE id = ${id}`).pipe(
        Effect.map((rows) => (rows[0] ? toMerchant(rows[0], secrets) : null))
      ),
    updateMerchant: (m) =>
      run(
        sql`UPDATE merchants SET name = ${m.name}, webhook_url = ${m.webhookUrl}, updated_at = ${timestamp(m.updatedAt)}
        WHERE id = ${m.id}`
      ).pipe(Effect.asVoid),
    firstMerchant: () =>
      run(sql<MerchantRow>`SELECT * FROM merchants ORDER BY created_at, id LIMIT 1`).pipe(
        Effect.map((rows) => (rows[0] ? toMerchant(rows[0], secrets) : null))
      ),

    insertApiKey: (apiKey) => run(insertApiKey(apiKey)),
    getApiKey: (merchantId, keyId) =>
      run(sql<ApiKeyRow>`SELECT * FROM api_keys WHERE id = ${keyId} AND merchant_id = ${merchantId}`).pipe(
        Effect.map((rows) => (rows[0] ? toApiKey(rows[0]) : null))
      ),
    findApiKeyByHash: (hash) =>
      run(sql<ApiKeyRow>`SELECT * FROM api_keys WHERE key_hash = ${hash}`).pipe(
        Effect.map((rows) => (rows[0] ? toApiKey(rows[0]) : null))
      ),
    useApiKey: (hash, now, touchBefore) =>
      Effect.map(useApiKey([hash, timestamp(now), timestamp(touchBefore)]), (rows) => {
        const row = rows[0]
        if (row === undefined) return null
        const key = toApiKey(row.key)
        return {
          key: row.touched_at === null ? key : { ...key, lastUsedAt: ms(row.touched_at) },
          merchant: toMerchant(row.merchant, secrets)
        }
      }),
    listApiKeys: (merchantId, p) =>
      run(Effect.all([
        sql<ApiKeyRow>`SELECT * FROM api_keys WHERE merchant_id = ${merchantId} ORDER BY created_at DESC, id DESC ${
          page(p)
        }`,
        sql`SELECT count(*)::int AS n FROM api_keys WHERE merchant_id = ${merchantId}`
      ])).pipe(Effect.map(([rows, count]) => ({ items: rows.map(toApiKey), totalCount: Number(count[0]!.n) }))),
    rotateApiKey: (merchantId, keyId, replacement, now) =>
      run(sql.withTransaction(Effect.gen(function*() {
        const rows =
          yield* sql`SELECT status FROM api_keys WHERE id = ${keyId} AND merchant_id = ${merchantId} FOR UPDATE`
        if (rows.length === 0) return "not_found" as const
        if (rows[0]!.status === "revoked") return "revoked" as const
        yield* sql`UPDATE api_keys SET status = 'revoked', revoked_at = ${timestamp(now)} WHERE id = ${keyId}`
        yield* insertApiKey(replacement)
        return "rotated" as const
      }))),

    insertPayment: (change, flowOwner = null) =>
      run(sql.withTransaction(Effect.gen(function*() {
        const row = {
          ...paymentRow(change.payment),
          idempotency_hold: change.payment.idempotencyKey,
          flow_owner: flowOwner
        }
        const inserted = yield* sql`INSERT INTO payments ${sql.insert(row)}
          ON CONFLICT (merchant_id, idempotency_hold) WHERE idempotency_hold IS NOT NULL DO NOTHING RETURNING id`
        if (inserted.length === 0) {
          const existing = yield* sql<
            PaymentRow
          >`SELECT * FROM payments WHERE merchant_id = ${change.payment.merchantId}
            AND idempotency_hold = ${change.payment.idempotencyKey}`
          return { _tag: "Exists" as const, payment: toPayment(existing[0]!) }
        }
        yield* writeChildren(change)
        if (change.payment.idempotencyKey !== null) {
          // The request's claim now stands for a created payment: a retry resumes it, never creates another.
          yield* sql`UPDATE idempotency_keys SET applied_to = ${change.payment.id}
            WHERE merchant_id = ${change.payment.merchantId} AND key = ${change.payment.idempotencyKey} AND state = 'in_progress'`
        }
        return { _tag: "Inserted" as const }
      }))),
    openPayment: (open) =>
      open.change.ledger.length > 0 || open.change.fraudCase !== null
        ? Effect.die(new Error("store: a new payment carries no ledger entries or fraud case"))
        : hot.openPayment(open),
    readForCreate: (read) => hot.readForCreate(read),
    insertCreated: (commit) =>
      writtenOnce(commit)
        ? hot.insertCreated(commit)
        : Effect.die(new Error("store: a created payment is written once, as its flow left it")),
    commitChange: (commit) =>
      followsFrom(commit.before, commit.change)
        ? hot.commitChange(commit)
        : Effect.die(new Error("store: a change must follow from the record it was decided on")),
    getPayment: (merchantId, paymentId) =>
      getPayment([paymentId, merchantId]).pipe(Effect.map((rows) => (rows[0] ? toPayment(rows[0]) : null))),
    readForCommand: ({ merchantId, paymentId, commandKey }) =>
      readForCommand([paymentId, merchantId, commandKey?.merchantId ?? null, commandKey?.key ?? null]).pipe(
        Effect.map((rows) => {
          const row = rows[0]
          if (row === undefined) return null
          return {
            payment: toPayment(row.payment),
            fraudCase: row.fraud_case === null ? null : toFraudCase(row.fraud_case),
            alreadyApplied: row.already_applied === true
          }
        })
      ),
    listPayments: (merchantId, filter, p) => {
      const where = sql.and([
        sql`merchant_id = ${merchantId}`,
        ...(filter.status === undefined ? [] : [sql`status = ${filter.status}`]),
        ...(filter.createdFrom === undefined ? [] : [sql`created_at >= ${timestamp(filter.createdFrom)}`]),
        ...(filter.createdTo === undefined ? [] : [sql`created_at <= ${timestamp(filter.createdTo)}`]),
        ...(filter.minAmountCents === undefined ? [] : [sql`amount_cents >= ${filter.minAmountCents}`]),
        ...(filter.maxAmountCents === undefined ? [] : [sql`amount_cents <= ${filter.maxAmountCents}`])
      ])
      return run(Effect.all([
        sql<PaymentRow>`SELECT * FROM payments WHERE ${where} ORDER BY created_at DESC, id DESC ${page(p)}`,
        sql`SELECT count(*)::int AS n FROM payments WHERE ${where}`
      ])).pipe(Effect.map(([rows, count]) => ({ items: rows.map(toPayment), totalCount: Number(count[0]!.n) })))
    },
    updatePayment: (target, decide) =>
      run(sql.withTransaction(Effect.gen(function*() {
        const rows = target.merchantId === null
          ? yield* sql<PaymentRow>`SELECT * FROM payments WHERE id = ${target.paymentId} FOR UPDATE`
          : yield* sql<
            PaymentRow
          >`SELECT * FROM payments WHERE id = ${target.paymentId} AND merchant_id = ${target.merchantId} FOR UPDATE`
        if (rows.length === 0) return { _tag: "NotFound" } satisfies UpdateOutcome
        const payment = toPayment(rows[0]!)
        const commandKey = target.commandKey
        if (commandKey !== undefined) {
          const applied = yield* sql`SELECT applied_to FROM idempotency_keys
            WHERE merchant_id = ${commandKey.merchantId} AND key = ${commandKey.key} FOR UPDATE`
          if (applied[0]?.applied_to === payment.id) return { _tag: "AlreadyApplied", payment } satisfies UpdateOutcome
        }
        const fraudCase = payment.fraudCaseId === null
          ? null
          : (yield* sql<FraudCaseRow>`SELECT * FROM fraud_cases WHERE id = ${payment.fraudCaseId}`).map(
            toFraudCase
          )[0] ??
            null
        const decision = decide(payment, fraudCase)
        if (!decision.ok) return { _tag: "Refused", decision, payment } satisfies UpdateOutcome
        const next = decision.change.payment
        if (!followsFrom(payment, decision.change)) {
          return yield* Effect.die(new Error("store: a decision must follow from the locked record"))
        }
        const { id: _id, ...fields } = paymentRow(next)
        yield* sql`UPDATE payments SET ${sql.update(fields)} WHERE id = ${payment.id} AND version = ${payment.version}`
        yield* writeChildren(decision.change)
        if (commandKey !== undefined) {
          yield* sql`UPDATE idempotency_keys SET applied_to = ${payment.id}
            WHERE merchant_id = ${commandKey.merchantId} AND key = ${commandKey.key}`
        }
        return { _tag: "Applied", change: decision.change } satisfies UpdateOutcome
      }))),
    listEvents: (merchantId, paymentId) =>
      run(sql<EventRow>`SELECT ${sql.literal(eventSelect("p.merchant_id"))}
        FROM payments p JOIN payment_events e ON e.payment_id = ${paymentId}
        WHERE p.id = ${paymentId} AND p.merchant_id = ${merchantId}
        ORDER BY e.sequence`).pipe(Effect.map((rows) => rows.map(toEvent))),
    listLedger: (merchantId, paymentId) =>
      run(
        sql<LedgerEntryRow>`SELECT * FROM ledger_entries WHERE payment_id = ${paymentId} AND merchant_id = ${merchantId}
        ORDER BY created_at, group_id, id`
      ).pipe(Effect.map((rows) => rows.map(toLedgerEntry))),
    balances: (merchantId) =>
      run(sql`
        SELECT currency,
          coalesce(sum(CASE WHEN account = 'merchant_pending' THEN signed END), 0)::text AS pending,
          coalesce(sum(CASE WHEN account = 'merchant_available' THEN signed END), 0)::text AS available,
          coalesce(sum(CASE WHEN account = 'merchant_reserved' THEN signed END), 0)::text AS reserved
        FROM (
          SELECT currency, account, CASE direction WHEN 'credit' THEN amount_cents ELSE -amount_cents END AS signed
          FROM ledger_entries
          WHERE merchant_id = ${merchantId} AND account IN ('merchant_pending', 'merchant_available', 'merchant_reserved')
        ) entries
        GROUP BY currency ORDER BY currency`).pipe(
        Effect.map((rows) =>
          rows.map((r): Balance => ({
            currency: r.currency as Currency,
            pending: Number(r.pending),
            available: Number(r.available),
            reserved: Number(r.reserved)
          }))
        )
      ),
    claimFlows: ({ limit, now, owner, staleBefore, takeOver }) =>
      // Read through the in-flight index; a payment whose flow commits meanwhile (its row locked)
      // is skipped, and the next pass sees it as it is then. The owner's liveness is a primary-key
      // probe per payment in flight, of which there are few.
      run(sql`UPDATE payments p SET flow_owner = ${owner}
        FROM (
          SELECT c.id FROM payments c
          WHERE c.in_flight AND (
            (c.updated_at < ${timestamp(staleBefore)} AND (c.flow_owner IS NULL OR c.flow_owner = ${owner}))
            OR (${takeOver} AND c.flow_owner IS DISTINCT FROM ${owner} AND (c.flow_owner IS NULL
              OR NOT EXISTS (SELECT 1 FROM service_instances i WHERE i.id = c.flow_owner AND i.alive_until > ${
        timestamp(now)
      }))))
          ORDER BY c.updated_at, c.id LIMIT ${limit}
          FOR UPDATE OF c SKIP LOCKED
        ) claimed
        WHERE p.id = claimed.id
        RETURNING p.id, p.updated_at`).pipe(
        Effect.map((rows) =>
          rows.map((r) => ({ id: r.id as string, at: ms(r.updated_at as Timestamp) }))
            .sort((a, b) => (a.at < b.at ? -1 : a.at > b.at ? 1 : a.id < b.id ? -1 : 1))
            .map((r) => r.id)
        )
      ),
    paymentsCreatedBetween: ({ after, from, limit, to }) =>
      run(
        after === null
          ? sql<PaymentRow>`SELECT * FROM payments WHERE created_at >= ${timestamp(from)} AND created_at < ${
            timestamp(to)
          } ORDER BY created_at, id LIMIT ${limit}`
          : sql<PaymentRow>`SELECT * FROM payments WHERE created_at >= ${timestamp(from)} AND created_at < ${
            timestamp(to)
          }
              AND (created_at, id) > (${timestamp(after.createdAt)}::timestamptz, ${after.id})
              ORDER BY created_at, id LIMIT ${limit}`
      ).pipe(Effect.map((rows) => rows.map(toPayment))),
    settleablePayments: (capturedBefore, limit) =>
      run(sql`SELECT id FROM payments WHERE settled_at IS NULL AND captured_at IS NOT NULL
        AND captured_at < ${timestamp(capturedBefore)} AND status IN ('captured', 'refunded')
        ORDER BY captured_at, id LIMIT ${limit}`).pipe(Effect.map((rows) => rows.map((r) => r.id as string))),
    paymentsByCardTokenAndDispute: (query, limit) => {
      if (!isCardTokenDisputeQuery(query)) {
        return Effect.die(new Error(`not a card token query: ${JSON.stringify(query.cardTokens)}`))
      }
      // The tokens are written into the statement as literals (checked above: letters, digits and
      // underscores only), so that a partial index over them (migration 0007's, over the
      // sandbox's dispute tokens) is provably usable; a parameter would hide the values.
      const tokens = sql.literal(`(${query.cardTokens.map((token) => `'${token}'`).join(", ")})`)
      return run(sql<PaymentRow>`SELECT * FROM payments
        WHERE card_token IN ${tokens} AND captured_at IS NOT NULL
          AND (dispute IS NULL OR dispute->>'status' = 'open')
          AND ((dispute IS NULL AND status IN ${sql.in(query.undisputedStatuses)} AND captured_at < ${
        timestamp(query.capturedBefore)
      })
            OR (dispute->>'status' = 'open' AND dispute->>'openedAt' < ${timestamp(query.openedBefore)}))
        ORDER BY captured_at, id LIMIT ${limit}`).pipe(Effect.map((rows) => rows.map(toPayment)))
    },
    analytics: (merchantId, createdFrom, createdTo) =>
      run(sql.unsafe(analyticsTotalsSql, [merchantId, timestampOrNull(createdFrom), timestampOrNull(createdTo)])).pipe(
        Effect.map((rows) => rows.map(toAnalyticsRow))
      ),
    analyticsSeries: (merchantId, interval, createdFrom, createdTo) =>
      run(
        sql.unsafe<Row>(analyticsSeriesSql, [
          merchantId,
          timestampOrNull(createdFrom),
          timestampOrNull(createdTo),
          interval,
          maximumSeriesRows + 1
        ])
      )
        .pipe(
          Effect.map((rows) =>
            rows.map((r): AnalyticsPeriodRow => ({ ...toAnalyticsRow(r), periodStart: ms(r.period_start) }))
          )
        ),
    fraudStats: (merchantId) =>
      run(Effect.all([
        sql`SELECT status, priority, count(*)::int AS n FROM fraud_cases WHERE merchant_id = ${merchantId}
          GROUP BY status, priority`,
        sql`SELECT count(*) FILTER (WHERE fraud_score IS NOT NULL)::int AS n,
            count(*) FILTER (WHERE status NOT IN ('pending', 'failed'))::int AS approved,
            count(*) FILTER (WHERE fraud_score IS NOT NULL AND dispute->>'status' = 'lost')::int AS lost
          FROM payments WHERE merchant_id = ${merchantId}`,
        sql`SELECT currency, count(*)::int AS n, sum(amount_cents)::text AS amount FROM payments
          WHERE merchant_id = ${merchantId} AND status = 'blocked' GROUP BY currency ORDER BY currency`,
        // The same float arithmetic as the memory store: floor(score × 10), 1.0 in the last bin.
        sql`SELECT least(floor(fraud_score * 10)::int, 9) AS bin, count(*)::int AS n FROM payments
          WHERE merchant_id = ${merchantId} AND fraud_score IS NOT NULL GROUP BY 1`,
        sql`SELECT coalesce(fraud_model_version, ${unrecordedModel}) AS version, count(*)::int AS screened,
            count(*) FILTER (WHERE status = 'blocked')::int AS blocked
          FROM payments WHERE merchant_id = ${merchantId} AND fraud_score IS NOT NULL GROUP BY 1`,
        sql`SELECT model_version AS version, status, count(*)::int AS n FROM fraud_cases WHERE merchant_id = ${merchantId}
          GROUP BY 1, 2`
      ])).pipe(Effect.map(([cases, screened, blocked, bins, models, modelCases]) => {
        const casesByStatus = { open: 0, confirmed_fraud: 0, false_positive: 0 }
        const casesByPriority = { low: 0, medium: 0, high: 0, critical: 0 }
        for (const row of cases) {
          casesByStatus[row.status as keyof typeof casesByStatus] += Number(row.n)
          casesByPriority[row.priority as keyof typeof casesByPriority] += Number(row.n)
        }
        return {
          casesByStatus,
          casesByPriority,
          approvedCount: Number(screened[0]!.approved),
          screenedCount: Number(screened[0]!.n),
          lostDisputeCount: Number(screened[0]!.lost),
          blocked: blocked.map((r) => ({
            currency: String(r.currency),
            count: Number(r.n),
            amountCents: Number(r.amount)
          })),
          scoreHistogram: Array.from(
            { length: 10 },
            (_, bin) => Number(bins.find((r) => Number(r.bin) === bin)?.n ?? 0)
          ),
          byModel: modelStats(
            models.map((r) => ({
              version: String(r.version),
              screened: Number(r.screened),
              blocked: Number(r.blocked)
            })),
            modelCases.map((r) => ({
              version: String(r.version),
              status: r.status as FraudCaseStatus,
              count: Number(r.n)
            }))
          )
        }
      })),
    fraudHistory: (q) =>
      run(
        sql.unsafe(
          historyColumns({
            merchantId: "$1",
            cardToken: "$2",
            currency: "$3",
            until: "$4::timestamptz",
            self: "$5",
            hourSince: "$6::timestamptz",
            daySince: "$7::timestamptz",
            dayLimit: "$8::int",
            amountWindow: "$9::int"
          }),
          [
            q.merchantId,
            q.cardToken,
            q.currency,
            timestamp(q.until),
            q.excludePaymentId,
            timestamp(q.hourSince),
            timestamp(q.daySince),
            q.dayLimit,
            q.amountWindow
          ]
        )
      ).pipe(Effect.map((rows) => toHistory(rows[0]!))),

    getFraudCase: (merchantId, caseId) =>
      run(sql<FraudCaseRow>`SELECT * FROM fraud_cases WHERE id = ${caseId} AND merchant_id = ${merchantId}`).pipe(
        Effect.map((rows) => (rows[0] ? toFraudCase(rows[0]) : null))
      ),
    listFraudCases: (merchantId, filter, p) => {
      const where = sql.and([
        sql`merchant_id = ${merchantId}`,
        ...(filter.status === undefined ? [] : [sql`status = ${filter.status}`]),
        ...(filter.priority === undefined ? [] : [sql`priority = ${filter.priority}`])
      ])
      return run(Effect.all([
        sql<FraudCaseRow>`SELECT * FROM fraud_cases WHERE ${where} ORDER BY created_at DESC, id DESC ${page(p)}`,
        sql`SELECT count(*)::int AS n FROM fraud_cases WHERE ${where}`
      ])).pipe(Effect.map(([rows, count]) => ({ items: rows.map(toFraudCase), totalCount: Number(count[0]!.n) })))
    },

    claimIdempotencyKey: (claim) =>
      Effect.flatMap(
        // One statement in the common case (`claimKey`).
        claimKey([
          claim.merchantId,
          claim.key,
          claim.fingerprint,
          timestamp(claim.lockedUntil),
          timestamp(claim.now),
          timestamp(claim.expiresAt),
          claim.owner ?? null
        ]),
        // The key is live: decide under the row's lock.
        (claimed): StoreEffect<ClaimOutcome> =>
          claimed.length > 0 ? Effect.succeed({ _tag: "Claimed" }) : run(sql.withTransaction(Effect.gen(function*() {
            // The holder is gone when its process stopped beating (killed), whatever its lease says.
            const rows = yield* sql`SELECT k.*, EXISTS (SELECT 1 FROM service_instances i
              WHERE i.id = k.owner AND i.alive_until <= ${timestamp(claim.now)}) AS owner_gone
            FROM idempotency_keys k
            WHERE k.merchant_id = ${claim.merchantId} AND k.key = ${claim.key} FOR UPDATE OF k`
            const row = rows[0]
            if (row === undefined) return { _tag: "InProgress" as const }
            if (row.fingerprint !== claim.fingerprint) return { _tag: "Mismatch" as const }
            if (row.state === "completed") {
              return {
                _tag: "Replay" as const,
                status: row.response_status as number,
                body: unpack(row.response_body as string)
              }
            }
            if (ms(row.locked_until as Timestamp) > claim.now && row.owner_gone !== true) {
              return { _tag: "InProgress" as const }
            }
            // The holder's lease ran out or its process died: this request resumes the same operation.
            yield* sql`UPDATE idempotency_keys SET locked_until = ${timestamp(claim.lockedUntil)}, owner = ${
              claim.owner ?? null
            }
            WHERE merchant_id = ${claim.merchantId} AND key = ${claim.key}`
            return { _tag: "Claimed" as const }
          })))
      ),
    completeIdempotencyKey: (merchantId, key, status, body) =>
      Effect.asVoid(completeKey([merchantId, key, status, pack(body)])),
    releaseIdempotencyKey: (merchantId, key) => Effect.asVoid(releaseKey([merchantId, key])),
    heartbeat: (instanceId, aliveUntil) =>
      // Processes gone for a day are forgotten (a claim of theirs is long past its lease).
      run(
        sql`WITH forgotten AS (DELETE FROM service_instances WHERE alive_until < ${
          timestamp(aliveUntil)
        }::timestamptz - interval '1 day')
        INSERT INTO service_instances (id, alive_until) VALUES (${instanceId}, ${timestamp(aliveUntil)})
        ON CONFLICT (id) DO UPDATE SET alive_until = EXCLUDED.alive_until`
      ).pipe(Effect.asVoid),
    lead: (role, instanceId, now) =>
      run(sql`INSERT INTO service_leaders AS l (role, holder, since) VALUES (${role}, ${instanceId}, ${timestamp(now)})
        ON CONFLICT (role) DO UPDATE SET holder = EXCLUDED.holder,
          since = CASE WHEN l.holder = EXCLUDED.holder THEN l.since ELSE EXCLUDED.since END
        WHERE l.holder = EXCLUDED.holder
          OR NOT EXISTS (SELECT 1 FROM service_instances i WHERE i.id = l.holder AND i.alive_until > EXCLUDED.since)
        RETURNING holder`).pipe(Effect.map((rows) => rows.length > 0)),
    resign: (role, instanceId) =>
      run(sql`DELETE FROM service_leaders WHERE role = ${role} AND holder = ${instanceId}`).pipe(Effect.asVoid),
    purgeIdempotencyKeys: (expiredBefore) =>
      run(sql`
        WITH purged AS (DELETE FROM idempotency_keys WHERE expires_at <= ${
        timestamp(expiredBefore)
      } RETURNING merchant_id, key),
        released AS (
          UPDATE payments SET idempotency_hold = NULL FROM purged
          WHERE payments.merchant_id = purged.merchant_id AND payments.idempotency_hold = purged.key
        )
        SELECT key FROM purged`).pipe(
        Effect.map((rows) => rows.length)
      )
  }

  function insertApiKey(k: ApiKey) {
    return sql`INSERT INTO api_keys ${sql.insert(apiKeyColumns(k))}`
  }

  return store
})

/**
 * The analytics figures of a merchant's payments created in [$2, $3] (null: unbounded), as rows
 * `(currency, at, figures…)` (docs/analytics.md): the whole UTC hours inside the window from
 * `payment_rollups` (kept by triggers), the partial hours at its edges (at most one at each end)
 * from the payments themselves. Hours nest in days and weeks, so every interval groups them.
 */
const analyticsParts = `
WITH b AS (
  SELECT f, t,
    CASE WHEN f = '-infinity' THEN f
      ELSE date_trunc('hour', f, 'UTC') + CASE WHEN date_trunc('hour', f, 'UTC') = f THEN interval '0' ELSE interval '1 hour' END END AS lo,
    CASE WHEN t = 'infinity' THEN t ELSE date_trunc('hour', t + interval '1 microsecond', 'UTC') END AS hi
  FROM (SELECT coalesce($2::timestamptz, '-infinity') AS f, coalesce($3::timestamptz, 'infinity') AS t) x
),
parts AS (
  SELECT r.currency, r.hour AS at, r.transaction_count AS n, r.volume_cents AS volume, r.captured_cents AS captured,
    r.refunded_cents AS refunded, r.fees_cents AS fees, r.decided_count AS decided, r.approved_count AS approved,
    r.blocked_count AS blocked, r.captured_count, r.disputed_count AS disputed
  FROM payment_rollups r
  WHERE r.merchant_id = $1 AND r.hour >= (SELECT lo FROM b) AND r.hour < (SELECT hi FROM b)
  UNION ALL
  SELECT p.currency, p.created_at, 1, p.amount_cents, p.captured_amount_cents, p.refunded_amount_cents, p.fee_cents,
    (p.status <> 'pending')::int, (p.status NOT IN ('pending', 'failed'))::int, (p.status = 'blocked')::int,
    (p.captured_amount_cents > 0)::int, (p.dispute IS NOT NULL)::int
  FROM payments p
  WHERE p.merchant_id = $1 AND p.created_at >= (SELECT f FROM b) AND p.created_at <= (SELECT t FROM b)
    AND p.created_at < (SELECT CASE WHEN lo < hi THEN lo ELSE 'infinity' END FROM b)
  UNION ALL
  SELECT p.currency, p.created_at, 1, p.amount_cents, p.captured_amount_cents, p.refunded_amount_cents, p.fee_cents,
    (p.status <> 'pending')::int, (p.status NOT IN ('pending', 'failed'))::int, (p.status = 'blocked')::int,
    (p.captured_amount_cents > 0)::int, (p.dispute IS NOT NULL)::int
  FROM payments p
  WHERE p.merchant_id = $1 AND (SELECT lo < hi FROM b) AND p.created_at >= (SELECT hi FROM b) AND p.created_at <= (SELECT t FROM b)
)`

const analyticsFigures =
  `sum(n)::int AS transaction_count, sum(volume)::text AS volume, sum(captured)::text AS captured,
  sum(refunded)::text AS refunded, sum(fees)::text AS fees, sum(decided)::int AS decided, sum(approved)::int AS approved,
  sum(blocked)::int AS blocked, sum(captured_count)::int AS captured_count, sum(disputed)::int AS disputed`

/** Totals per currency (the rollup rows of a currency may cancel out to nothing: those are left out). */
export const analyticsTotalsSql = `${analyticsParts}
SELECT currency, ${analyticsFigures} FROM parts GROUP BY currency HAVING sum(n) > 0 ORDER BY currency`

/** Per currency and period ($4: hour, day or week), at most $5 rows. */
export const analyticsSeriesSql = `${analyticsParts}
SELECT currency, date_trunc($4::text, at, 'UTC') AS period_start, ${analyticsFigures}
FROM parts GROUP BY 1, 2 HAVING sum(n) > 0 ORDER BY 1, 2 LIMIT $5::int`

const toAnalyticsRow = (r: Row): AnalyticsRow => ({
  currency: String(r.currency),
  transactionCount: Number(r.transaction_count),
  volumeCents: Number(r.volume),
  capturedCents: Number(r.captured),
  refundedCents: Number(r.refunded),
  feesCents: Number(r.fees),
  decidedCount: Number(r.decided),
  approvedCount: Number(r.approved),
  blockedCount: Number(r.blocked),
  capturedCount: Number(r.captured_count),
  disputedCount: Number(r.disputed)
})

/** Store and WebhookStore (PgWebhookStore.ts) over one PostgreSQL client and its pool. */
export const layerPg: Layer.Layer<Store | WebhookStore, never, PgClient.PgClient | PgPool | AppConfig> = Layer.merge(
  Layer.effect(Store, makePgStore),
  PgWebhookStore.layerPg
)
