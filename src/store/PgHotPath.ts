import type * as Pg from "pg"
import type { FraudHistory } from "../domain/Fraud.ts"
import { type Change, nextStep } from "../domain/Payment.ts"
import { makeBatcher } from "./GroupCommit.ts"
import type { Row } from "./PgRows.ts"
import { eventColumns, storedSnapshot } from "./rows/Event.ts"
import { fraudCaseColumns } from "./rows/FraudCase.ts"
import { ledgerEntryColumns } from "./rows/LedgerEntry.ts"
import { changingColumns, explanationsColumn, paymentColumns } from "./rows/Payment.ts"
import { type ArrayElement, arrayLiteral } from "./rows/PgArray.ts"
import { pack, unpack } from "./rows/StoredResponse.ts"
import { timestamp, timestampOrNull } from "./rows/Timestamps.ts"
import type { ChangeCommit, CreatedCommit, CreateRead, OpenOutcome, OpenPayment } from "./Store.ts"

/**
 * The create path on PostgreSQL (docs/performance.md): two fixed-shape statements, each a named
 * prepared statement planned once per connection, each taking any number of units as JSON rows,
 * so that concurrent creates share a round trip and a commit (group commit: ./GroupCommit.ts).
 */

/**
 * The events of the units whose payment row was written (CTE `payment`), from JSON rows in $2,
 * and their outbox rows when the merchant has a webhook URL (CONTRACT section 7). An event's row
 * does not repeat its payment's merchant; the outbox's does (its JSON row carries it).
 */
const eventsAndOutbox = `event_input AS (
  SELECT * FROM json_to_recordset($2::json)
    AS e(payment_id text, merchant_id text, id text, type text, sequence int, data jsonb, created_at timestamptz)
  WHERE e.payment_id IN (SELECT id FROM payment)
),
events AS (
  INSERT INTO payment_events (id, payment_id, type, sequence, data, created_at)
  SELECT e.id, e.payment_id, e.type, e.sequence, e.data, e.created_at FROM event_input e
),
outbox AS (
  INSERT INTO webhook_outbox (event_id, payment_id, sequence, merchant_id, created_at)
  SELECT e.id, e.payment_id, e.sequence, e.merchant_id, e.created_at FROM event_input e
  WHERE (SELECT m.webhook_url IS NOT NULL FROM merchants m WHERE m.id = e.merchant_id COLLATE "C")
)`

/** The SQL expressions (placeholders or columns) `historyColumns` reads a history query's values from. */
export interface HistoryExpressions {
  readonly merchantId: string
  readonly cardToken: string
  readonly currency: string
  readonly until: string
  /** The payment itself, never counted. */
  readonly self: string
  readonly hourSince: string
  readonly daySince: string
  readonly dayLimit: string
  readonly amountWindow: string
}

/**
 * The fraud model's history of one payment (Store.fraudHistory, docs/fraud-model.md): the card's
 * newest attempts of the last day at this merchant (bounded: index `payments_card` read
 * backwards, at most `day_limit` rows), how many of them fell in the last hour and were declined,
 * whether the card was ever seen, and the count and sum of the merchant's newest `amount_window`
 * payments in the currency (index-only on `payments_merchant_currency`). Only payments created at
 * or before `until`, never the payment itself. Columns: card_hour, card_day, card_declines,
 * card_seen, amount_count, amount_sum.
 */
export const historyColumns = (
  { amountWindow, cardToken, currency, dayLimit, daySince, hourSince, merchantId, self, until }: HistoryExpressions
) => `
SELECT c.card_hour, c.card_day, c.card_declines,
  (c.card_day > 0 OR EXISTS (SELECT 1 FROM payments s WHERE s.merchant_id = ${merchantId} AND s.card_token = ${cardToken}
    AND s.created_at <= ${until} AND s.id <> ${self})) AS card_seen,
  a.amount_count, a.amount_sum
FROM (SELECT count(*) FILTER (WHERE r.created_at >= ${hourSince})::int AS card_hour, count(*)::int AS card_day,
    count(*) FILTER (WHERE r.status = 'failed')::int AS card_declines
  FROM (SELECT x.created_at, x.status FROM payments x WHERE x.merchant_id = ${merchantId} AND x.card_token = ${cardToken}
    AND x.created_at >= ${daySince} AND x.created_at <= ${until} AND x.id <> ${self}
    ORDER BY x.created_at DESC, x.id DESC LIMIT ${dayLimit}) r) c,
  (SELECT count(*)::int AS amount_count, coalesce(sum(w.amount_cents), 0)::bigint::text AS amount_sum
  FROM (SELECT y.amount_cents FROM payments y WHERE y.merchant_id = ${merchantId} AND y.currency = ${currency}
    AND y.created_at <= ${until} AND y.id <> ${self}
    ORDER BY y.created_at DESC, y.id DESC LIMIT ${amountWindow}) w) a`

/** `historyColumns` of a batch's unit, its columns named as both create statements name them, under `alias`. */
const unitHistory = (alias: string) =>
  historyColumns({
    merchantId: `${alias}.merchant_id`,
    cardToken: `${alias}.card_token`,
    currency: `${alias}.currency`,
    until: `${alias}.created_at`,
    self: `${alias}.id`,
    hourSince: `${alias}.hour_since`,
    daySince: `${alias}.day_since`,
    dayLimit: `${alias}.day_limit`,
    amountWindow: `${alias}.amount_window`
  })

/** A row of `historyColumns` as the domain's history. */
export const toHistory = (r: Row): FraudHistory => ({
  cardAttemptsLastHour: Number(r.card_hour),
  cardAttemptsLastDay: Number(r.card_day),
  cardDeclinesLastDay: Number(r.card_declines),
  cardSeenBefore: r.card_seen === true,
  merchantAmountCount: Number(r.amount_count),
  merchantAmountSumCents: Number(r.amount_sum)
})

/**
 * Round trip 1 (Store.openPayment) for a batch: claim each new key (only a key never seen),
 * insert the payments whose claim held (or that carry none) with their events (and outbox rows
 * when the merchant has a webhook URL), and count each card's earlier attempts. The counts read
 * the statement's snapshot, so they never see the payments being inserted. Two units of one
 * batch claiming one key: the first claims it, the second finds it taken.
 */
export const openPaymentsSql = `
WITH input AS (
  SELECT * FROM json_to_recordset($1::json) AS u(ord int, id text, merchant_id text, status text, amount_cents int,
    currency text, captured_amount_cents int, refunded_amount_cents int, fee_cents int, card_brand text,
    card_last_four text, card_token text, capture_method text, idempotency_key text, metadata jsonb,
    fraud_score double precision, fraud_verdict text, fraud_case_id text, failure_code text, failure_message text,
    network_risk_signal double precision, in_flight boolean, version int, created_at timestamptz,
    updated_at timestamptz, captured_at timestamptz, settled_at timestamptz, claim_key text, fingerprint text,
    locked_until timestamptz, claimed_at timestamptz, expires_at timestamptz, owner text, flow_owner text,
    hour_since timestamptz, day_since timestamptz, day_limit int, amount_window int)
),
claimed AS (
  INSERT INTO idempotency_keys (merchant_id, key, fingerprint, state, locked_until, created_at, expires_at, applied_to, owner)
  SELECT merchant_id, claim_key, fingerprint, 'in_progress', locked_until, claimed_at, expires_at, id, owner
  FROM input WHERE claim_key IS NOT NULL ORDER BY ord
  ON CONFLICT (merchant_id, key) DO NOTHING
  RETURNING applied_to
),
payment AS (
  INSERT INTO payments (id, merchant_id, status, amount_cents, currency, captured_amount_cents, refunded_amount_cents,
    fee_cents, card_brand, card_last_four, card_token, capture_method, idempotency_key, idempotency_hold, metadata,
    fraud_score, fraud_verdict, fraud_case_id, failure_code, failure_message, network_risk_signal, in_flight, version,
    created_at, updated_at, captured_at, settled_at, flow_owner)
  SELECT id, merchant_id, status, amount_cents, currency, captured_amount_cents, refunded_amount_cents, fee_cents,
    card_brand, card_last_four, card_token, capture_method, idempotency_key, idempotency_key, metadata, fraud_score,
    fraud_verdict, fraud_case_id, failure_code, failure_message, network_risk_signal, in_flight, version, created_at,
    updated_at, captured_at, settled_at, flow_owner
  FROM input i
  WHERE i.claim_key IS NULL OR i.id IN (SELECT applied_to FROM claimed)
  RETURNING id
),
${eventsAndOutbox}
SELECT i.ord, i.id IN (SELECT id FROM payment) AS opened, h.*,
  k.fingerprint AS finished_fingerprint, k.response_status AS finished_status, k.response_body AS finished_body
FROM input i
CROSS JOIN LATERAL (${unitHistory("i")}) h
LEFT JOIN idempotency_keys k ON k.merchant_id = i.merchant_id AND k.key = i.claim_key AND k.state = 'completed'
  AND k.expires_at > i.claimed_at
ORDER BY i.ord`

/**
 * Round trip 2 (Store.commitChange) for a batch: each payment row, version-checked, with its
 * events, outbox rows (when the merchant has a webhook URL), ledger entries, fraud case and the
 * stored response; a unit whose version moved writes nothing.
 */
export const commitChangesSql = `
WITH input AS (
  SELECT * FROM json_to_recordset($1::json) AS u(ord int, id text, before_version int, status text,
    captured_amount_cents int, refunded_amount_cents int, fee_cents int, fraud_score double precision,
    fraud_verdict text, fraud_case_id text, failure_code text, failure_message text,
    network_risk_signal double precision, processor_reference text, processor_pending jsonb, failed_refunds jsonb, in_flight boolean, version int, updated_at timestamptz,
    captured_at timestamptz, settled_at timestamptz, dispute jsonb, fraud_model_version text, fraud_explanations jsonb,
    response_merchant_id text, response_key text,
    response_status int, response_body text, command_merchant_id text, command_key text)
),
payment AS (
  UPDATE payments p SET status = u.status, captured_amount_cents = u.captured_amount_cents,
    refunded_amount_cents = u.refunded_amount_cents, fee_cents = u.fee_cents, fraud_score = u.fraud_score,
    fraud_verdict = u.fraud_verdict, fraud_case_id = u.fraud_case_id, failure_code = u.failure_code,
    failure_message = u.failure_message, network_risk_signal = u.network_risk_signal,
    processor_reference = u.processor_reference, processor_pending = u.processor_pending, failed_refunds = u.failed_refunds, in_flight = u.in_flight,
    version = u.version, updated_at = u.updated_at, captured_at = u.captured_at, settled_at = u.settled_at,
    dispute = u.dispute, fraud_model_version = u.fraud_model_version, fraud_explanations = u.fraud_explanations
  FROM input u
  WHERE p.id = u.id AND p.version = u.before_version
  RETURNING p.id
),
${eventsAndOutbox},
entries AS (
  INSERT INTO ledger_entries (id, group_id, payment_id, merchant_id, account, direction, amount_cents, currency, created_at)
  SELECT e.id, e.group_id, e.payment_id, e.merchant_id, e.account, e.direction, e.amount_cents, e.currency, e.created_at
  FROM json_to_recordset($3::json) AS e(payment_id text, merchant_id text, id text, group_id text, account text,
    direction text, amount_cents bigint, currency text, created_at timestamptz)
  WHERE e.payment_id IN (SELECT id FROM payment)
),
fraud AS (
  INSERT INTO fraud_cases (id, payment_id, merchant_id, status, priority, risk_score, model_version, base_value,
    explanations, notes, reviewed_at, created_at, updated_at)
  SELECT c.id, c.payment_id, c.merchant_id, c.status, c.priority, c.risk_score, c.model_version, c.base_value,
    c.explanations, c.notes, c.reviewed_at, c.created_at, c.updated_at
  FROM json_to_recordset($4::json) AS c(payment_id text, merchant_id text, id text, status text, priority text,
    risk_score double precision, model_version text, base_value double precision, explanations jsonb, notes text, reviewed_at timestamptz,
    created_at timestamptz, updated_at timestamptz)
  WHERE c.payment_id IN (SELECT id FROM payment)
  ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status, notes = EXCLUDED.notes, reviewed_at = EXCLUDED.reviewed_at,
    updated_at = EXCLUDED.updated_at
),
answered AS (
  UPDATE idempotency_keys k SET state = 'completed', response_status = u.response_status, response_body = u.response_body
  FROM input u
  WHERE k.merchant_id = u.response_merchant_id AND k.key = u.response_key AND k.state = 'in_progress'
    AND u.id IN (SELECT id FROM payment)
),
applied AS (
  UPDATE idempotency_keys k SET applied_to = u.id
  FROM input u
  WHERE k.merchant_id = u.command_merchant_id AND k.key = u.command_key AND u.id IN (SELECT id FROM payment)
)
SELECT u.ord, u.id IN (SELECT id FROM payment) AS committed FROM input u ORDER BY u.ord`

/**
 * Round trip 1 of a create whose outcome is known before it writes (Store.readForCreate) for a
 * batch: whether each request's key is known already (with its stored response when finished and
 * live) and the payment's history, writing nothing. Inputs are typed arrays, one element a unit.
 */
export const readForCreateSql = `
SELECT u.ord, h.*, k.key IS NOT NULL AS key_taken,
  CASE WHEN k.state = 'completed' AND k.expires_at > u.claimed_at THEN k.fingerprint END AS finished_fingerprint,
  k.response_status AS finished_status, k.response_body AS finished_body
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::timestamptz[], $6::timestamptz[], $7::timestamptz[],
    $8::int[], $9::int[], $10::text[], $11::timestamptz[])
  WITH ORDINALITY AS u(id, merchant_id, card_token, currency, created_at, hour_since, day_since, day_limit,
    amount_window, claim_key, claimed_at, ord)
CROSS JOIN LATERAL (${unitHistory("u")}) h
LEFT JOIN idempotency_keys k ON k.merchant_id = u.merchant_id AND k.key = u.claim_key
ORDER BY u.ord`

/**
 * Round trip 2 of such a create (Store.insertCreated) for a batch: each request's key, claimed
 * finished with its response (only a key never seen), and the payments whose claim held (or that
 * carry none), written once as their flows left them (holding no key: `idempotency_hold` is for a
 * claim made apart from its insert), with their events, outbox rows (when the
 * merchant has a webhook URL), ledger entries and fraud cases. Inputs are typed arrays: the
 * payments' (one element a unit), then the events', the entries' and the cases', each naming its
 * unit by its place (`unit`, from 1) and taking the payment's id, merchant, and the entries'
 * currency from the payments' arrays at that place, and its time too where its own is null: the
 * flow's steps share one time, the payment's last update's, so most of a create's rows are sent
 * without one. Whether a unit's payment was written, and whether its merchant has a webhook URL,
 * are arrays too (`units`, computed once), read at the same place: a join of a batch's rows with
 * its units would be a nested loop (hash joins are off on the hot path: PgPrepared.ts), its cost
 * growing with the square of the batch. A JSON column comes as one JSON array instead
 * (`jsonb_array_elements`, zipped with the arrays by ROWS FROM): its text needs no escaping as an
 * array element, and is parsed once.
 */
export const insertCreatedSql = `
WITH input AS (
  SELECT * FROM ROWS FROM (
      unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::text[], $6::int[], $7::int[], $8::int[],
        $9::text[], $10::text[], $11::text[], $12::text[], $13::text[], $15::float8[], $16::text[],
        $17::text[], $18::text[], $19::text[], $20::float8[], $21::bool[], $22::int[], $23::timestamptz[],
        $24::timestamptz[], $25::timestamptz[], $26::text[], $28::text[], $29::text[], $30::text[],
        $31::timestamptz[], $32::timestamptz[], $33::int[], $34::text[], $35::text[]),
      jsonb_array_elements($14::jsonb), jsonb_array_elements($27::jsonb))
    WITH ORDINALITY AS u(id, merchant_id, status, amount_cents, currency, captured_amount_cents,
      refunded_amount_cents, fee_cents, card_brand, card_last_four, card_token, capture_method, idempotency_key,
      fraud_score, fraud_verdict, fraud_case_id, failure_code, failure_message, network_risk_signal,
      in_flight, version, created_at, updated_at, captured_at, fraud_model_version, flow_owner,
      claim_key, fingerprint, claimed_at, expires_at, response_status, response_body, owner, metadata,
      fraud_explanations, ord)
),
claimed AS (
  INSERT INTO idempotency_keys (merchant_id, key, fingerprint, state, response_status, response_body, applied_to,
    locked_until, created_at, expires_at, owner)
  SELECT merchant_id, claim_key, fingerprint, 'completed', response_status, response_body, id, claimed_at, claimed_at,
    expires_at, owner
  FROM input WHERE claim_key IS NOT NULL ORDER BY ord
  ON CONFLICT (merchant_id, key) DO NOTHING
  RETURNING applied_to
),
payment AS (
  INSERT INTO payments (id, merchant_id, status, amount_cents, currency, captured_amount_cents, refunded_amount_cents,
    fee_cents, card_brand, card_last_four, card_token, capture_method, idempotency_key, idempotency_hold, metadata,
    fraud_score, fraud_verdict, fraud_case_id, failure_code, failure_message, network_risk_signal, in_flight, version,
    created_at, updated_at, captured_at, fraud_model_version, fraud_explanations, flow_owner)
  SELECT id, merchant_id, status, amount_cents, currency, captured_amount_cents, refunded_amount_cents, fee_cents,
    card_brand, card_last_four, card_token, capture_method, idempotency_key, NULL, metadata, fraud_score,
    fraud_verdict, fraud_case_id, failure_code, failure_message, network_risk_signal, in_flight, version, created_at,
    updated_at, captured_at, fraud_model_version,
    CASE WHEN jsonb_typeof(fraud_explanations) <> 'null' THEN fraud_explanations END, CASE WHEN in_flight THEN flow_owner END
  FROM input i
  WHERE i.claim_key IS NULL OR i.id IN (SELECT applied_to FROM claimed)
  RETURNING id
),
units AS (
  SELECT array_agg(i.id IN (SELECT id FROM payment) ORDER BY i.ord) AS written,
    array_agg((SELECT m.webhook_url IS NOT NULL FROM merchants m WHERE m.id = i.merchant_id COLLATE "C") ORDER BY i.ord)
      AS hooked
  FROM input i
),
events AS (
  INSERT INTO payment_events (id, payment_id, type, sequence, data, created_at)
  SELECT e.id, ($1::text[])[e.unit], e.type, e.sequence, e.data, coalesce(e.created_at, ($24::timestamptz[])[e.unit])
  FROM ROWS FROM (unnest($36::int[], $37::text[], $38::text[], $39::int[], $41::timestamptz[]),
      jsonb_array_elements($40::jsonb))
    AS e(unit, id, type, sequence, created_at, data)
  WHERE (SELECT u.written FROM units u)[e.unit]
),
outbox AS (
  INSERT INTO webhook_outbox (event_id, payment_id, sequence, merchant_id, created_at)
  SELECT e.id, ($1::text[])[e.unit], e.sequence, ($2::text[])[e.unit], coalesce(e.created_at, ($24::timestamptz[])[e.unit])
  FROM unnest($36::int[], $37::text[], $39::int[], $41::timestamptz[]) AS e(unit, id, sequence, created_at)
  WHERE (SELECT u.written FROM units u)[e.unit] AND (SELECT u.hooked FROM units u)[e.unit]
),
entries AS (
  INSERT INTO ledger_entries (id, group_id, payment_id, merchant_id, account, direction, amount_cents, currency, created_at)
  SELECT l.id, l.group_id, ($1::text[])[l.unit], ($2::text[])[l.unit], l.account, l.direction, l.amount_cents,
    ($5::text[])[l.unit], coalesce(l.created_at, ($24::timestamptz[])[l.unit])
  FROM unnest($42::int[], $43::text[], $44::text[], $45::text[], $46::text[], $47::bigint[], $48::timestamptz[])
    AS l(unit, id, group_id, account, direction, amount_cents, created_at)
  WHERE (SELECT u.written FROM units u)[l.unit]
),
fraud AS (
  INSERT INTO fraud_cases (id, payment_id, merchant_id, status, priority, risk_score, model_version, base_value,
    explanations, created_at, updated_at)
  SELECT c.id, ($1::text[])[c.unit], ($2::text[])[c.unit], c.status, c.priority, c.risk_score, c.model_version,
    c.base_value, c.explanations, coalesce(c.created_at, ($24::timestamptz[])[c.unit]),
    coalesce(c.created_at, ($24::timestamptz[])[c.unit])
  FROM ROWS FROM (unnest($49::int[], $50::text[], $51::text[], $52::text[], $53::float8[], $54::text[], $55::float8[],
      $57::timestamptz[]), jsonb_array_elements($56::jsonb))
    AS c(unit, id, status, priority, risk_score, model_version, base_value, created_at, explanations)
  WHERE (SELECT u.written FROM units u)[c.unit]
)
SELECT i.ord, (SELECT u.written FROM units u)[i.ord] AS committed FROM input i ORDER BY i.ord`

/** Store.readForCommand: the payment, its fraud case and whether the command's key applied to it already. */
export const readForCommandSql = `
SELECT to_jsonb(p.*) AS payment, to_jsonb(c.*) AS fraud_case,
  EXISTS (SELECT 1 FROM idempotency_keys k WHERE k.merchant_id = $3 AND k.key = $4 AND k.applied_to = p.id) AS already_applied
FROM payments p LEFT JOIN fraud_cases c ON c.id = p.fraud_case_id COLLATE "C"
WHERE p.id = $1 AND ($2::text IS NULL OR p.merchant_id = $2)`

export const getPaymentSql = `SELECT * FROM payments WHERE id = $1 AND ($2::text IS NULL OR merchant_id = $2)`

/** A change's events as JSON rows: their columns, and the merchant their outbox rows name. */
const eventRows = (change: Change) => change.events.map((e) => ({ ...eventColumns(e), merchant_id: e.merchantId }))

/** The parameters of `openPaymentsSql` for a batch (also used by the benchmark's baselines). */
export const openPaymentsValues = (units: ReadonlyArray<OpenPayment>): Array<unknown> => [
  JSON.stringify(units.map(({ change, claim, flowOwner, history }, ord) => {
    return {
      ord,
      ...paymentColumns(change.payment),
      claim_key: claim?.key ?? null,
      fingerprint: claim?.fingerprint ?? null,
      locked_until: claim === null ? null : timestamp(claim.lockedUntil),
      claimed_at: claim === null ? null : timestamp(claim.now),
      expires_at: claim === null ? null : timestamp(claim.expiresAt),
      owner: claim?.owner ?? null,
      flow_owner: flowOwner ?? null,
      hour_since: timestamp(history.hourSince),
      day_since: timestamp(history.daySince),
      day_limit: history.dayLimit,
      amount_window: history.amountWindow
    }
  })),
  JSON.stringify(units.flatMap((u) => eventRows(u.change)))
]

/** The parameters of `commitChangesSql` for a batch. */
export const commitChangesValues = (units: ReadonlyArray<ChangeCommit>): Array<unknown> => [
  JSON.stringify(units.map(({ before, change, response, commandKey }, ord) => {
    return {
      ord,
      id: change.payment.id,
      before_version: before.version,
      ...changingColumns(change.payment),
      response_merchant_id: response?.merchantId ?? null,
      response_key: response?.key ?? null,
      response_status: response?.status ?? null,
      response_body: response === undefined || response === null ? null : pack(response.body),
      command_merchant_id: commandKey?.merchantId ?? null,
      command_key: commandKey?.key ?? null
    }
  })),
  JSON.stringify(units.flatMap((u) => eventRows(u.change))),
  JSON.stringify(units.flatMap(({ change }) => change.ledger.map(ledgerEntryColumns))),
  JSON.stringify(units.flatMap(({ change }) => change.fraudCase === null ? [] : [fraudCaseColumns(change.fraudCase)]))
]

/** The parameters of `readForCreateSql` for a batch. */
export const readForCreateValues = (units: ReadonlyArray<CreateRead>): Array<unknown> => {
  const n = units.length
  const ids = new Array<string>(n)
  const merchants = new Array<string>(n)
  const cards = new Array<string>(n)
  const currencies = new Array<string>(n)
  const created = new Array<string>(n)
  const hours = new Array<string>(n)
  const days = new Array<string>(n)
  const dayLimits = new Array<number>(n)
  const amountWindows = new Array<number>(n)
  const keys = new Array<string | null>(n)
  const claimed = new Array<string | null>(n)
  for (let i = 0; i < n; i++) {
    const { claim, history, payment } = units[i]!
    ids[i] = payment.id
    merchants[i] = payment.merchantId
    cards[i] = payment.cardToken
    currencies[i] = payment.currency
    created[i] = timestamp(payment.createdAt)
    hours[i] = timestamp(history.hourSince)
    days[i] = timestamp(history.daySince)
    dayLimits[i] = history.dayLimit
    amountWindows[i] = history.amountWindow
    keys[i] = claim?.key ?? null
    claimed[i] = claim === null ? null : timestamp(claim.now)
  }
  return [ids, merchants, cards, currencies, created, hours, days, dayLimits, amountWindows, keys, claimed].map(
    arrayLiteral
  )
}

/** The parameters of `insertCreatedSql` that are JSON texts, sent as one JSON array each; the others are array literals. */
const insertCreatedJsonParameters = new Set([14, 27, 40, 56])

/** A row's time, or null when it is its payment's last update's (`insertCreatedSql` takes that one from the payment). */
const timeUnlike = (at: number, updatedAt: number): string | null => at === updatedAt ? null : timestamp(at)

/** The parameters of `insertCreatedSql` for a batch: one array a column. */
export const insertCreatedValues = (units: ReadonlyArray<CreatedCommit>): Array<unknown> => {
  // One array a column, in the order of the statement's parameters ($1-$35, $36-$41, $42-$48, $49-$57).
  const columns = (count: number) => Array.from({ length: count }, (): Array<ArrayElement> => [])
  const payments = columns(35)
  const events = columns(6)
  const entries = columns(7)
  const cases = columns(9)
  const push = (arrays: Array<Array<ArrayElement>>, values: ReadonlyArray<ArrayElement>) => {
    for (let c = 0; c < values.length; c++) arrays[c]!.push(values[c] as ArrayElement)
  }
  for (let i = 0; i < units.length; i++) {
    const { change, claim, flowOwner, response } = units[i]!
    const p = change.payment
    const unit = i + 1
    const row: Array<ArrayElement> = [
      p.id,
      p.merchantId,
      p.status,
      p.amountCents,
      p.currency,
      p.capturedAmountCents,
      p.refundedAmountCents,
      p.feeCents,
      p.cardBrand,
      p.cardLastFour,
      p.cardToken,
      p.captureMethod,
      p.idempotencyKey,
      JSON.stringify(p.metadata),
      p.fraudScore,
      p.fraudVerdict,
      p.fraudCaseId,
      p.failureCode,
      p.failureMessage,
      p.networkRiskSignal,
      nextStep(p) !== null,
      p.version,
      timestamp(p.createdAt),
      timestamp(p.updatedAt),
      timestampOrNull(p.capturedAt),
      p.fraudModelVersion,
      p.fraudExplanations === null ? "null" : JSON.stringify(explanationsColumn(p.fraudExplanations)),
      flowOwner ?? null,
      claim?.key ?? null,
      claim?.fingerprint ?? null,
      claim === null ? null : timestamp(claim.now),
      claim === null ? null : timestamp(claim.expiresAt),
      response?.status ?? null,
      response === undefined || response === null ? null : pack(response.body),
      claim?.owner ?? null
    ]
    push(payments, row)
    for (const e of change.events) {
      push(events, [
        unit,
        e.id,
        e.type,
        e.sequence,
        JSON.stringify(storedSnapshot(e.data)),
        timeUnlike(e.createdAt, p.updatedAt)
      ])
    }
    for (const l of change.ledger) {
      push(entries, [
        unit,
        l.id,
        l.groupId,
        l.account,
        l.direction,
        l.amountCents,
        timeUnlike(l.createdAt, p.updatedAt)
      ])
    }
    const c = change.fraudCase
    if (c !== null) {
      push(cases, [
        unit,
        c.id,
        c.status,
        c.priority,
        c.riskScore,
        c.modelVersion,
        c.baseValue,
        JSON.stringify(c.explanations),
        timeUnlike(c.createdAt, p.updatedAt)
      ])
    }
  }
  return [...payments, ...events, ...entries, ...cases].map((column, i) =>
    insertCreatedJsonParameters.has(i + 1) ? `[${column.join(",")}]` : arrayLiteral(column)
  )
}

/**
 * Whether `insertCreatedSql` writes all of a change as the domain made it: a new payment (nothing a
 * later step sets yet: no processor reference or pending operation, failed refund, settlement or
 * dispute), its events and entries its own (their payment, merchant and currency are taken from
 * it), and its fraud case as opened (no notes or review).
 */
export const writtenOnce = ({ change }: CreatedCommit): boolean => {
  const p = change.payment
  const c = change.fraudCase
  return p.processorReference === null && p.processorPending === null && p.failedRefunds.length === 0 &&
    p.settledAt === null && p.dispute === null &&
    change.events.every((e) => e.paymentId === p.id && e.merchantId === p.merchantId) &&
    change.ledger.every((l) => l.paymentId === p.id && l.merchantId === p.merchantId && l.currency === p.currency) &&
    (c === null ||
      (c.paymentId === p.id && c.merchantId === p.merchantId && c.notes === null && c.reviewedAt === null &&
        c.updatedAt === c.createdAt))
}

/** A unit's outcome: opened, or its key known already (finished when its response is live). */
const openOutcome = (opened: boolean, r: Row): OpenOutcome =>
  opened
    ? { _tag: "Opened", history: toHistory(r) }
    : r.finished_fingerprint === null || r.finished_fingerprint === undefined
    ? { _tag: "KeyTaken" }
    : {
      _tag: "KeyTaken",
      finished: {
        fingerprint: r.finished_fingerprint,
        status: r.finished_status as number,
        body: unpack(r.finished_body as string)
      }
    }

/** Rows in `ord` order, one per unit. */
const openOutcomes = (rows: ReadonlyArray<Row>): Array<OpenOutcome> =>
  rows.map((r) => openOutcome(r.opened === true, r))
/** Rows in `ord` order, one per unit. */
const readOutcomes = (rows: ReadonlyArray<Row>): Array<OpenOutcome> =>
  rows.map((r) => openOutcome(r.key_taken !== true, r))
const commitOutcomes = (rows: ReadonlyArray<Row>): Array<boolean> => rows.map((r) => r.committed === true)

/**
 * Claims a late open committed for callers that are gone (answered 503 at their deadline, or
 * interrupted by a hang-up or a stop while the statement ran): each is released (its lease ended,
 * as `Store.releaseIdempotencyKey` does for a command that applied), so the client's retry takes
 * the key over at once and resumes the payment instead of waiting out the lease. Only the claim
 * as that unit wrote it (same `locked_until`): never one a retry took over since.
 */
const releaseLateClaims =
  (pool: Pg.Pool) =>
  (late: ReadonlyArray<{ readonly unit: OpenPayment; readonly outcome: OpenOutcome }>): Promise<void> | void => {
    const claims = late.flatMap(({ outcome, unit }) =>
      outcome._tag === "Opened" && unit.claim !== null
        ? [{ merchant_id: unit.claim.merchantId, key: unit.claim.key, locked_until: timestamp(unit.claim.lockedUntil) }]
        : []
    )
    if (claims.length === 0) return
    return new Promise((done) =>
      pool.query(
        `UPDATE idempotency_keys k SET locked_until = k.created_at
    FROM json_to_recordset($1::json) AS c(merchant_id text, key text, locked_until timestamptz)
    WHERE k.merchant_id = c.merchant_id AND k.key = c.key AND k.locked_until = c.locked_until AND k.state = 'in_progress'`,
        [JSON.stringify(claims)],
        // Not released (the database went away again): the claim's lease ends it.
        () => done()
      )
    )
  }

/**
 * The create path's two statements. With `deadlineMs` (the pool's wait for an answer), a unit the
 * database does not answer in time, whether it waited for its statement or its statement was out,
 * is 503 then (see `makeBatcher`).
 */
export const makeHotPath = (pool: Pg.Pool, deadlineMs?: number) => ({
  openPayment: makeBatcher<OpenPayment, OpenOutcome>({
    pool,
    name: "open_payments_v2",
    text: openPaymentsSql,
    values: openPaymentsValues,
    outcomes: openOutcomes,
    keyOf: (u) => u.change.payment.id,
    deadlineMs,
    onLate: releaseLateClaims(pool)
  }),
  readForCreate: makeBatcher<CreateRead, OpenOutcome>({
    pool,
    name: "read_for_create_v1",
    text: readForCreateSql,
    values: readForCreateValues,
    outcomes: readOutcomes,
    keyOf: (u) => u.payment.id,
    deadlineMs
  }),
  insertCreated: makeBatcher<CreatedCommit, boolean>({
    pool,
    name: "insert_created_v1",
    text: insertCreatedSql,
    values: insertCreatedValues,
    outcomes: commitOutcomes,
    keyOf: (u) => u.change.payment.id,
    deadlineMs
  }),
  commitChange: makeBatcher<ChangeCommit, boolean>({
    pool,
    name: "commit_changes_v1",
    text: commitChangesSql,
    values: commitChangesValues,
    outcomes: commitOutcomes,
    keyOf: (u) => u.change.payment.id,
    deadlineMs
  })
})
