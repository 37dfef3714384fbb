/**
 * A history of payments loaded straight into the database, for measuring how the service costs
 * as its tables grow (`npm run bench -- --preload N`) and for reading plans on realistic
 * statistics (test/store/plans.test.ts). Each payment is captured and settled (a history whose
 * settlement has run: a service started on it has no backlog to settle), with three events, a balanced
 * ledger group, its idempotency key and a succeeded webhook delivery; one in ten has a fraud case
 * (and, with `outbox`, one event in ten waits in the webhook outbox). Ids begin with their row's
 * time, older than any the service mints after the load, as the service's ids do (`timed`);
 * idempotency keys are the clients' and spread over the key space as random ones are (`spread`).
 * Rows go in oldest first, as a service would have grown them. Loaded in batches of INSERT … SELECT
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

/** The alphabet of the service's ids (src/domain/Ids.ts), in SQL, and its lower-case base 36 for times. */
const alphabet = "'0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ'"
const base36 = "'0123456789abcdefghijklmnopqrstuvwxyz'"

/** Characters of `alphabet` from a hash of `n` (an SQL expression), as many as `count`. */
const hashChars = (n: string, count: number) => {
  const hash = `(hashint8((${n})::bigint)::bigint & 2147483647)`
  return Array.from({ length: count }, (_, i) => `substr(${alphabet}, 1 + (${hash} / ${62 ** i} % 62)::int, 1)`)
    .join(" || ")
}

/**
 * A client's key for the number `n`, spread over the key space as the random keys (UUIDs) clients
 * send are: `prefix_`, four characters from a hash of `n`, then `pre` and `n` (unique).
 */
const spread = (prefix: string, n: string) => `'${prefix}_' || ${hashChars(n, 4)} || 'pre' || (${n})`

/** What the rows of one load have in common: when it began (epoch ms), how many payments it loads, the schema. */
interface History {
  readonly loadMs: number
  readonly payments: number
  /** Outbox rows name their event by its payment and sequence (migration 0016; a database of an earlier one lacks them). */
  readonly outboxByPayment: boolean
  /** Events name their merchant (up to migration 0019). */
  readonly eventsNameMerchant: boolean
}

/**
 * When the row number `g` was made, epoch ms (an SQL expression): the history runs from the oldest
 * row (`g` = 1, `payments` seconds before the load began) to the newest (one second before), so
 * rows go in oldest first as the service inserted them, and every index keyed by a time-ordered
 * id fills from its right edge as under the service.
 */
const madeMs = (history: History) => `(${history.loadMs}::bigint - (${history.payments + 1} - g)::bigint * 1000)`

/**
 * The service's time-ordered id (src/domain/Ids.ts) for a row of history `g` (its time, `age`
 * before the load) and number `n`: `prefix_`, the time in 9 lower-case base-36 characters, then 14
 * characters, four from a hash of `n` and `n` itself zero-padded (unique).
 */
const timed = (prefix: string, history: History, n: string) => {
  const ms = madeMs(history)
  const time = Array.from(
    { length: 9 },
    (_, i) => `substr(${base36}, 1 + (${ms} / ${36 ** (8 - i)}::bigint % 36)::int, 1)`
  ).join(" || ")
  return `'${prefix}_' || ${time} || ${hashChars(n, 4)} || lpad((${n})::text, 10, '0')`
}

const batchStatements = (from: string, to: string, history: History, outbox: boolean) => {
  const paymentId = timed("pay", history, "g")
  const key = spread("key", "g")
  const eventId = (s: string) => timed("evt", history, `g * 4 + ${s}`)
  const made = `to_timestamp(${madeMs(history)} / 1000.0)`
  return [
    `INSERT INTO payments (id, merchant_id, status, amount_cents, currency, captured_amount_cents, refunded_amount_cents,
      fee_cents, card_brand, card_last_four, card_token, capture_method, idempotency_key, idempotency_hold, metadata, in_flight, version,
      created_at, updated_at, captured_at, settled_at, flow_owner)
    SELECT ${paymentId}, $1, 'settled', 1000 + g % 5000, 'USD', 1000 + g % 5000, 0, 59, 'visa', '4242', 'tok_pre_' || (g % 50000),
      'automatic', ${key}, ${key}, '{}'::jsonb, false, 4, ${made}, ${made},
      ${made}, ${made}, 'ins_preload'
    FROM generate_series(${from}, ${to}) g`,
    `INSERT INTO payment_events (id, payment_id, ${
      history.eventsNameMerchant ? "merchant_id, " : ""
    }type, sequence, data,
      created_at)
    SELECT ${eventId("s")}, ${paymentId}, ${history.eventsNameMerchant ? "$1, " : ""}
      (ARRAY['payment.initiated', 'payment.authorized', 'payment.captured'])[s], s, '{}'::jsonb, ${made}
    FROM generate_series(${from}, ${to}) g, generate_series(1, 3) s
    WHERE $1::text IS NOT NULL -- the merchant, which an event's row names no more`,
    `INSERT INTO ledger_entries (id, group_id, payment_id, merchant_id, account, direction, amount_cents, currency, created_at)
    SELECT ${timed("le", history, "g * 2 + d")}, ${timed("lg", history, "g")}, ${paymentId}, $1,
      CASE d WHEN 1 THEN 'network_receivable' ELSE 'merchant_pending' END, CASE d WHEN 1 THEN 'debit' ELSE 'credit' END,
      1000 + g % 5000, 'USD', ${made}
    FROM generate_series(${from}, ${to}) g, generate_series(1, 2) d`,
    `INSERT INTO idempotency_keys (merchant_id, key, fingerprint, state, response_status, response_body, applied_to,
      locked_until, created_at, expires_at, owner)
    SELECT $1, ${key}, 'fp', 'completed', 201, '{}', ${paymentId}, now(), now(), now() + interval '1 day', 'ins_preload'
    FROM generate_series(${from}, ${to}) g`,
    `INSERT INTO webhook_deliveries (id, merchant_id, event_id, event_type, url, payload, status, attempts, next_attempt_at,
      created_at, completed_at, payment_id, event_sequence)
    SELECT 'whd_' || substr(${eventId("1")}, 5), $1, ${
      eventId("1")
    }, 'payment.initiated', 'https://shop.example/hooks', '{}', 'succeeded', '[]'::jsonb,
      NULL, now(), now(), ${paymentId}, 1
    FROM generate_series(${from}, ${to}) g`,
    `INSERT INTO fraud_cases (id, payment_id, merchant_id, status, priority, risk_score, model_version, explanations, created_at, updated_at)
    SELECT ${timed("fc", history, "g")}, ${paymentId}, $1, 'open', 'medium', 0.6, 'v1', '[]'::jsonb, now(), now()
    FROM generate_series(${from}, ${to}) g WHERE g % 10 = 0`,
    ...(!outbox ? [] : history.outboxByPayment
      ? [`INSERT INTO webhook_outbox (event_id, payment_id, sequence, merchant_id, created_at)
    SELECT ${eventId("2")}, ${paymentId}, 2, $1, now() FROM generate_series(${from}, ${to}) g WHERE g % 10 = 0`]
      : [`INSERT INTO webhook_outbox (event_id, merchant_id, created_at)
    SELECT ${eventId("2")}, $1, now() FROM generate_series(${from}, ${to}) g WHERE g % 10 = 0`])
  ]
}

/** Loads the history (see the module's comment), analyzes every table and writes the load out (a checkpoint). */
export const preloadPayments = async (client: pg.Client, options: PreloadOptions) => {
  const batch = options.batch ?? 100_000
  const outboxByPayment = (await client.query(`SELECT EXISTS (SELECT 1 FROM information_schema.columns
    WHERE table_name = 'webhook_outbox' AND column_name = 'payment_id') AS x`)).rows[0].x === true
  // Events named their merchant up to migration 0019.
  const eventsNameMerchant = (await client.query(`SELECT EXISTS (SELECT 1 FROM information_schema.columns
    WHERE table_name = 'payment_events' AND column_name = 'merchant_id') AS x`)).rows[0].x === true
  const history: History = { loadMs: Date.now(), payments: options.payments, outboxByPayment, eventsNameMerchant }
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
    for (const text of batchStatements(String(from), String(to), history, options.outbox === true)) {
      await client.query(text, [options.merchantId])
    }
  }
  await client.query("VACUUM ANALYZE")
  // The load's pages written out now, not by the checkpoints of the minutes measured next.
  await client.query("CHECKPOINT")
}
