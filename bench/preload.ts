/**
 * A history of payments loaded straight into the database, for measuring how the service costs
 * as its tables grow (`npm run bench -- --preload N`) and for reading plans on realistic
 * statistics (test/store/plans.test.ts). Each payment is captured, with three events, a balanced
 * ledger group, its idempotency key and a succeeded webhook delivery; one in ten has a fraud case
 * (and, with `outbox`, one event in ten waits in the webhook outbox). Ids and keys are spread over
 * the key space as the service's random ones are (`spread`). Loaded in batches of INSERT … SELECT
 * generate_series, then analyzed and checkpointed. The rows are what the service writes, but not
 * made by it: the figures of a run are the load's, never these.
 */
import type pg from "pg"

export interface PreloadOptions {
  /** The merchant the payments belong to (it must exist). */
  readonly merchantId: string
  readonly payments: number
  /** Other merchants to add beside it (with a key each), so that table is not one row. */
  readonly extraMerchants?: number
  /** Rows a statement inserts at most (a batch): bounds the memory a statement's triggers take. */
  readonly batch?: number
  /** Leave one event in ten in the webhook outbox (a service started on the database then drains them). */
  readonly outbox?: boolean
}

/** The alphabet of the service's ids (src/domain/Ids.ts), in SQL. */
const alphabet = "'0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ'"

/**
 * An id for the number `n` (an SQL expression) that sorts where the service's random ids sort:
 * `prefix_`, four characters of the service's alphabet from a hash of `n`, then `pre` and `n`
 * (unique). The service's ids are random, so a new row's key lands on any leaf of an index; ids
 * in the order they were made would sit together and leave the leaves the new rows reach as few
 * and as warm as on an empty database.
 */
const spread = (prefix: string, n: string) => {
  const hash = `(hashint8((${n})::bigint)::bigint & 2147483647)`
  const char = (divisor: number) => `substr(${alphabet}, 1 + (${hash} / ${divisor} % 62)::int, 1)`
  return `'${prefix}_' || ${char(1)} || ${char(62)} || ${char(62 ** 2)} || ${char(62 ** 3)} || 'pre' || (${n})`
}

/** A payment's id, its idempotency key, and its `s`th event's id, for the row number `g`. */
const paymentId = spread("pay", "g")
const key = spread("key", "g")
const eventId = (s: string) => spread("evt", `g * 4 + ${s}`)

const batchStatements = (from: string, to: string, outbox: boolean) => [
  `INSERT INTO payments (id, merchant_id, status, amount_cents, currency, captured_amount_cents, refunded_amount_cents,
      fee_cents, card_brand, card_last_four, card_token, capture_method, idempotency_key, idempotency_hold, metadata, in_flight, version,
      created_at, updated_at, captured_at, flow_owner)
    SELECT ${paymentId}, $1, 'captured', 1000 + g % 5000, 'USD', 1000 + g % 5000, 0, 59, 'visa', '4242', 'tok_pre_' || (g % 50000),
      'automatic', ${key}, ${key}, '{}'::jsonb, false, 4, now() - g * interval '1 second', now() - g * interval '1 second',
      now() - g * interval '1 second', 'ins_preload'
    FROM generate_series(${from}, ${to}) g`,
  `INSERT INTO payment_events (id, payment_id, merchant_id, type, sequence, data, created_at)
    SELECT ${eventId("s")}, ${paymentId}, $1,
      (ARRAY['payment.initiated', 'payment.authorized', 'payment.captured'])[s], s, '{}'::jsonb, now() - g * interval '1 second'
    FROM generate_series(${from}, ${to}) g, generate_series(1, 3) s`,
  `INSERT INTO ledger_entries (id, group_id, payment_id, merchant_id, account, direction, amount_cents, currency, created_at)
    SELECT 'le_pre_' || g || '_' || d, 'grp_pre_' || g, ${paymentId}, $1,
      CASE d WHEN 1 THEN 'network_receivable' ELSE 'merchant_pending' END, CASE d WHEN 1 THEN 'debit' ELSE 'credit' END,
      1000 + g % 5000, 'USD', now() - g * interval '1 second'
    FROM generate_series(${from}, ${to}) g, generate_series(1, 2) d`,
  `INSERT INTO idempotency_keys (merchant_id, key, fingerprint, state, response_status, response_body, applied_to,
      locked_until, created_at, expires_at, owner)
    SELECT $1, ${key}, 'fp', 'completed', 201, '{}', ${paymentId}, now(), now(), now() + interval '1 day', 'ins_preload'
    FROM generate_series(${from}, ${to}) g`,
  `INSERT INTO webhook_deliveries (id, merchant_id, event_id, event_type, url, payload, status, attempts, next_attempt_at,
      created_at, completed_at, payment_id, event_sequence)
    SELECT ${spread("whd", "g")}, $1, ${
    eventId("1")
  }, 'payment.initiated', 'https://shop.example/hooks', '{}', 'succeeded', '[]'::jsonb,
      NULL, now(), now(), ${paymentId}, 1
    FROM generate_series(${from}, ${to}) g`,
  `INSERT INTO fraud_cases (id, payment_id, merchant_id, status, priority, risk_score, model_version, explanations, created_at, updated_at)
    SELECT ${spread("fc", "g")}, ${paymentId}, $1, 'open', 'medium', 0.6, 'v1', '[]'::jsonb, now(), now()
    FROM generate_series(${from}, ${to}) g WHERE g % 10 = 0`,
  ...(outbox
    ? [`INSERT INTO webhook_outbox (event_id, merchant_id, created_at)
    SELECT ${eventId("2")}, $1, now() FROM generate_series(${from}, ${to}) g WHERE g % 10 = 0`]
    : [])
]

/** Loads the history (see the module's comment), analyzes every table and writes the load out (a checkpoint). */
export const preloadPayments = async (client: pg.Client, options: PreloadOptions) => {
  const batch = options.batch ?? 100_000
  for (let m = 1; m <= (options.extraMerchants ?? 0); m++) {
    await client.query(
      `INSERT INTO merchants (id, name, webhook_url, webhook_secret, created_at, updated_at)
      VALUES ($1, 'Preloaded', NULL, 'whsec_preload', now(), now())`,
      [`mer_pre_${m}`]
    )
    await client.query(
      `INSERT INTO api_keys (id, merchant_id, name, key_hash, prefix, last_four, status, created_at)
      VALUES ($1, $2, 'k', $3, 'sk_live_pre0', 'pre0', 'active', now())`,
      [`key_pre_${m}`, `mer_pre_${m}`, `hash_pre_${m}`]
    )
  }
  for (let from = 1; from <= options.payments; from += batch) {
    const to = Math.min(options.payments, from + batch - 1)
    for (const text of batchStatements(String(from), String(to), options.outbox === true)) {
      await client.query(text, [options.merchantId])
    }
  }
  await client.query("VACUUM ANALYZE")
  // The load's pages written out now, not by the checkpoints of the minutes measured next.
  await client.query("CHECKPOINT")
}
