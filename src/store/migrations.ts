/** Versioned migrations; applied at start and by `payments migrate`, recorded in effect_sql_migrations. */
const statements = (text: string) => text

/** The rollup triggers' summed columns and their upsert (one text, two triggers). */
const rollupSums =
  `      SELECT d.merchant_id, d.currency, d.hour, d.shard, sum(d.transaction_count), sum(d.volume_cents), sum(d.captured_cents),
        sum(d.refunded_cents), sum(d.fees_cents), sum(d.decided_count), sum(d.approved_count), sum(d.blocked_count),
        sum(d.captured_count), sum(d.disputed_count)
`
const rollupUpsert = `      ON CONFLICT (merchant_id, hour, currency, shard) DO UPDATE SET
        transaction_count = r.transaction_count + EXCLUDED.transaction_count, volume_cents = r.volume_cents + EXCLUDED.volume_cents,
        captured_cents = r.captured_cents + EXCLUDED.captured_cents, refunded_cents = r.refunded_cents + EXCLUDED.refunded_cents,
        fees_cents = r.fees_cents + EXCLUDED.fees_cents, decided_count = r.decided_count + EXCLUDED.decided_count,
        approved_count = r.approved_count + EXCLUDED.approved_count, blocked_count = r.blocked_count + EXCLUDED.blocked_count,
        captured_count = r.captured_count + EXCLUDED.captured_count, disputed_count = r.disputed_count + EXCLUDED.disputed_count;
`

/**
 * The migrations' SQL, by `<id>_<name>`. Effect 4's PostgreSQL driver has no simple-query
 * protocol, and a text of several statements (functions, triggers) needs it: the service
 * applies them over `pg` (src/platform/Database.ts), recording them in the same table.
 */
export const migrationTexts: Record<string, string> = {
  "0001_core": statements(`
    CREATE TABLE merchants (
      id text COLLATE "C" PRIMARY KEY,
      name text NOT NULL,
      webhook_url text,
      webhook_secret text NOT NULL,
      created_at timestamptz NOT NULL,
      updated_at timestamptz NOT NULL
    );

    CREATE TABLE api_keys (
      id text COLLATE "C" PRIMARY KEY,
      merchant_id text NOT NULL REFERENCES merchants(id),
      name text NOT NULL,
      key_hash text NOT NULL UNIQUE,
      prefix text NOT NULL,
      last_four text NOT NULL,
      status text NOT NULL CHECK (status IN ('active', 'revoked')),
      created_at timestamptz NOT NULL,
      last_used_at timestamptz,
      revoked_at timestamptz
    );
    CREATE INDEX api_keys_merchant ON api_keys (merchant_id, created_at DESC, id DESC);

    CREATE TABLE payments (
      id text COLLATE "C" PRIMARY KEY,
      merchant_id text NOT NULL REFERENCES merchants(id),
      status text NOT NULL CHECK (status IN ('pending','authorized','captured','settled','refunded','voided','blocked','failed')),
      amount_cents integer NOT NULL CHECK (amount_cents BETWEEN 1 AND 99999999),
      currency text NOT NULL,
      captured_amount_cents integer NOT NULL CHECK (captured_amount_cents BETWEEN 0 AND amount_cents),
      refunded_amount_cents integer NOT NULL CHECK (refunded_amount_cents BETWEEN 0 AND captured_amount_cents),
      fee_cents integer NOT NULL CHECK (fee_cents >= 0),
      card_brand text NOT NULL,
      card_last_four text NOT NULL,
      card_token text NOT NULL,
      capture_method text NOT NULL CHECK (capture_method IN ('automatic', 'manual')),
      idempotency_key text,
      -- The key while it is live (IDEMPOTENCY_TTL); released when the key expires, so it may be reused.
      idempotency_hold text,
      metadata jsonb NOT NULL,
      fraud_score double precision,
      fraud_verdict text CHECK (fraud_verdict IN ('passed', 'review', 'blocked')),
      fraud_case_id text,
      failure_code text,
      failure_message text,
      network_risk_signal double precision,
      in_flight boolean NOT NULL,
      version integer NOT NULL,
      created_at timestamptz NOT NULL,
      updated_at timestamptz NOT NULL,
      captured_at timestamptz,
      settled_at timestamptz,
      UNIQUE (merchant_id, idempotency_hold)
    );
    CREATE INDEX payments_merchant_created ON payments (merchant_id, created_at DESC, id DESC);
    CREATE INDEX payments_in_flight ON payments (updated_at) WHERE in_flight;
    CREATE INDEX payments_settleable ON payments (captured_at) WHERE settled_at IS NULL AND captured_at IS NOT NULL;
    CREATE INDEX payments_card ON payments (merchant_id, card_token, created_at);

    CREATE TABLE payment_events (
      id text COLLATE "C" PRIMARY KEY,
      payment_id text NOT NULL REFERENCES payments(id),
      merchant_id text NOT NULL,
      type text NOT NULL,
      sequence integer NOT NULL,
      data jsonb NOT NULL,
      created_at timestamptz NOT NULL,
      UNIQUE (payment_id, sequence)
    );

    CREATE TABLE ledger_entries (
      id text COLLATE "C" PRIMARY KEY,
      group_id text NOT NULL,
      payment_id text NOT NULL REFERENCES payments(id),
      merchant_id text NOT NULL,
      account text NOT NULL,
      direction text NOT NULL CHECK (direction IN ('debit', 'credit')),
      amount_cents bigint NOT NULL CHECK (amount_cents > 0),
      currency text NOT NULL,
      created_at timestamptz NOT NULL
    );
    CREATE INDEX ledger_entries_payment ON ledger_entries (payment_id, created_at, id);
    -- The balance check below reads a group's entries at every commit: without this it scans the ledger.
    CREATE INDEX ledger_entries_group ON ledger_entries (group_id);
    CREATE INDEX ledger_entries_merchant ON ledger_entries (merchant_id, currency, account);

    -- A group must balance when its transaction commits.
    CREATE FUNCTION ledger_group_balanced() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF EXISTS (
        SELECT 1 FROM ledger_entries WHERE group_id = NEW.group_id
        GROUP BY currency
        HAVING sum(CASE direction WHEN 'debit' THEN amount_cents ELSE -amount_cents END) <> 0
      ) THEN
        RAISE EXCEPTION 'ledger group % does not balance', NEW.group_id;
      END IF;
      RETURN NULL;
    END $$;
    CREATE CONSTRAINT TRIGGER ledger_entries_balanced AFTER INSERT ON ledger_entries
      DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION ledger_group_balanced();

    -- Events and ledger entries are immutable: no UPDATE, DELETE or TRUNCATE.
    CREATE FUNCTION forbid_mutation() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP;
    END $$;
    CREATE TRIGGER payment_events_append_only BEFORE UPDATE OR DELETE ON payment_events
      FOR EACH ROW EXECUTE FUNCTION forbid_mutation();
    CREATE TRIGGER payment_events_no_truncate BEFORE TRUNCATE ON payment_events
      FOR EACH STATEMENT EXECUTE FUNCTION forbid_mutation();
    CREATE TRIGGER ledger_entries_append_only BEFORE UPDATE OR DELETE ON ledger_entries
      FOR EACH ROW EXECUTE FUNCTION forbid_mutation();
    CREATE TRIGGER ledger_entries_no_truncate BEFORE TRUNCATE ON ledger_entries
      FOR EACH STATEMENT EXECUTE FUNCTION forbid_mutation();

    -- Events waiting to become webhook deliveries; written with the state change that made them.
    CREATE TABLE webhook_outbox (
      event_id text PRIMARY KEY REFERENCES payment_events(id),
      merchant_id text NOT NULL,
      created_at timestamptz NOT NULL
    );
    CREATE INDEX webhook_outbox_created ON webhook_outbox (created_at, event_id);

    CREATE TABLE fraud_cases (
      id text COLLATE "C" PRIMARY KEY,
      payment_id text NOT NULL UNIQUE REFERENCES payments(id),
      merchant_id text NOT NULL,
      status text NOT NULL CHECK (status IN ('open', 'confirmed_fraud', 'false_positive')),
      priority text NOT NULL CHECK (priority IN ('low', 'medium', 'high', 'critical')),
      risk_score double precision NOT NULL,
      model_version text NOT NULL,
      explanations jsonb NOT NULL,
      notes text,
      reviewed_at timestamptz,
      created_at timestamptz NOT NULL,
      updated_at timestamptz NOT NULL
    );
    CREATE INDEX fraud_cases_merchant ON fraud_cases (merchant_id, created_at DESC, id DESC);

    CREATE TABLE idempotency_keys (
      merchant_id text NOT NULL,
      key text NOT NULL,
      fingerprint text NOT NULL,
      state text NOT NULL CHECK (state IN ('in_progress', 'completed')),
      response_status integer,
      response_body text,
      applied_to text,
      locked_until timestamptz NOT NULL,
      created_at timestamptz NOT NULL,
      expires_at timestamptz NOT NULL,
      PRIMARY KEY (merchant_id, key)
    );
    CREATE INDEX idempotency_keys_expiry ON idempotency_keys (expires_at);
  `),
  "0002_webhooks": statements(`
    -- One delivery per event (test events included); attempts are kept on the row for the API and
    -- in webhook_attempts for the status figures. A lease marks the dispatcher working on a row.
    CREATE TABLE webhook_deliveries (
      id text COLLATE "C" PRIMARY KEY,
      merchant_id text NOT NULL REFERENCES merchants(id),
      event_id text NOT NULL UNIQUE,
      event_type text NOT NULL,
      url text NOT NULL,
      payload text NOT NULL,
      status text NOT NULL CHECK (status IN ('pending', 'retrying', 'succeeded', 'failed')),
      attempts jsonb NOT NULL,
      next_attempt_at timestamptz,
      first_failed_at timestamptz,
      created_at timestamptz NOT NULL,
      completed_at timestamptz,
      lease_token text,
      lease_until timestamptz
    );
    CREATE INDEX webhook_deliveries_merchant ON webhook_deliveries (merchant_id, created_at DESC, id DESC);
    CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE status IN ('pending', 'retrying');

    CREATE TABLE webhook_attempts (
      delivery_id text NOT NULL REFERENCES webhook_deliveries(id),
      attempt integer NOT NULL,
      merchant_id text NOT NULL,
      at timestamptz NOT NULL,
      response_status integer,
      duration_ms integer NOT NULL,
      error text,
      succeeded boolean NOT NULL,
      PRIMARY KEY (delivery_id, attempt)
    );
    CREATE INDEX webhook_attempts_merchant ON webhook_attempts (merchant_id, at);

    -- Secret rotation: the previous secret keeps signing until it expires.
    ALTER TABLE merchants ADD COLUMN previous_webhook_secret text;
    ALTER TABLE merchants ADD COLUMN previous_webhook_secret_expires_at timestamptz;
  `),
  "0003_cheap_integrity": statements(`
    -- The balance check once per statement over the rows it inserted, instead of once per row at
    -- commit (each of which re-read its whole group through an index of its own). The rule is
    -- stricter: every statement inserts whole groups, which the store always does (one group is
    -- one posting of one decision, written in one statement).
    DROP TRIGGER ledger_entries_balanced ON ledger_entries;
    DROP FUNCTION ledger_group_balanced();
    DROP INDEX ledger_entries_group;
    CREATE FUNCTION ledger_groups_balanced() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
      unbalanced text;
    BEGIN
      SELECT group_id INTO unbalanced FROM inserted GROUP BY group_id, currency
        HAVING sum(CASE direction WHEN 'debit' THEN amount_cents ELSE -amount_cents END) <> 0 LIMIT 1;
      IF unbalanced IS NOT NULL THEN
        RAISE EXCEPTION 'ledger group % does not balance', unbalanced;
      END IF;
      RETURN NULL;
    END $$;
    CREATE TRIGGER ledger_entries_balanced AFTER INSERT ON ledger_entries
      REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION ledger_groups_balanced();
  `),
  "0004_instance_liveness": statements(`
    -- Each service process beats here; an idempotency claim names its process, so after a
    -- kill -9 a retry takes the claim over once the beats stop, not after IDEMPOTENCY_LEASE.
    CREATE TABLE service_instances (
      id text COLLATE "C" PRIMARY KEY,
      alive_until timestamptz NOT NULL
    );
    ALTER TABLE idempotency_keys ADD COLUMN owner text;
  `),
  "0007_disputes": statements(`
    -- The payment's dispute (src/domain/Dispute.ts), null when none: written with the payment row
    -- by the same version-checked commit as every other change, so it needs no statement of its own.
    ALTER TABLE payments ADD COLUMN dispute jsonb;
    -- The sandbox's dispute worker: captured payments of its dispute tokens whose dispute is due to
    -- open or resolve; a resolved dispute leaves the index.
    CREATE INDEX payments_sandbox_disputes ON payments (captured_at)
      WHERE card_token IN ('tok_dispute_won', 'tok_dispute_lost') AND captured_at IS NOT NULL
        AND (dispute IS NULL OR dispute->>'status' = 'open');
  `),
  "0008_webhook_order": statements(`
    -- Webhooks in order per payment: a delivery is claimed only when no earlier delivery of the
    -- same payment to the same URL is still open. The partial index holds open ordered rows
    -- only, so the claim's NOT EXISTS probe reads a handful of entries.
    ALTER TABLE webhook_deliveries ADD COLUMN payment_id text;
    ALTER TABLE webhook_deliveries ADD COLUMN event_sequence integer;
    UPDATE webhook_deliveries d SET payment_id = e.payment_id, event_sequence = e.sequence
      FROM payment_events e WHERE e.id = d.event_id AND d.status IN ('pending', 'retrying');
    CREATE INDEX webhook_deliveries_open_order ON webhook_deliveries (payment_id, url, event_sequence)
      WHERE status IN ('pending', 'retrying') AND payment_id IS NOT NULL;
  `),
  "0009_fraud_and_analytics": statements(`
    -- The trained fraud model (docs/fraud-model.md): the model that screened a payment and its
    -- largest contributions, shown on the transaction record.
    ALTER TABLE payments ADD COLUMN fraud_model_version text;
    ALTER TABLE payments ADD COLUMN fraud_explanations jsonb;
    -- A case's base value: with it the explanations add up to the model output (CONTRACT section 9).
    ALTER TABLE fraud_cases ADD COLUMN base_value double precision;
    -- The card's newest attempts, read backwards with the id as the tie-break (create, statement 1).
    DROP INDEX payments_card;
    CREATE INDEX payments_card ON payments (merchant_id, card_token, created_at, id);
    -- The merchant's newest payments in a currency (usual amount, index-only) and analytics per
    -- currency over a time window (docs/analytics.md).
    CREATE INDEX payments_merchant_currency ON payments (merchant_id, currency, created_at, id)
      INCLUDE (amount_cents, status, captured_amount_cents, refunded_amount_cents, fee_cents);

    -- Analytics rollups (docs/analytics.md): the analytics figures of a merchant's payments per
    -- currency and UTC hour of creation, kept by statement-level triggers in the transaction that
    -- changes the payments (no statement of the service's own). Eight shards per hour (by the
    -- payment id's hash) so concurrent creates of one merchant rarely wait for one row; rows are
    -- upserted in key order, so two statements never deadlock on them.
    CREATE TABLE payment_rollups (
      merchant_id text NOT NULL,
      currency text NOT NULL,
      hour timestamptz NOT NULL,
      shard smallint NOT NULL,
      transaction_count bigint NOT NULL,
      volume_cents bigint NOT NULL,
      captured_cents bigint NOT NULL,
      refunded_cents bigint NOT NULL,
      fees_cents bigint NOT NULL,
      decided_count bigint NOT NULL,
      approved_count bigint NOT NULL,
      blocked_count bigint NOT NULL,
      captured_count bigint NOT NULL,
      disputed_count bigint NOT NULL,
      PRIMARY KEY (merchant_id, hour, currency, shard)
    );

    CREATE FUNCTION payment_rollup_deltas(sign int, p payments) RETURNS TABLE (
      merchant_id text, currency text, hour timestamptz, shard smallint, transaction_count bigint, volume_cents bigint,
      captured_cents bigint, refunded_cents bigint, fees_cents bigint, decided_count bigint, approved_count bigint,
      blocked_count bigint, captured_count bigint, disputed_count bigint
    ) LANGUAGE sql IMMUTABLE AS $$
      SELECT p.merchant_id, p.currency, date_trunc('hour', p.created_at, 'UTC'), (hashtext(p.id) & 7)::smallint, sign,
        sign * p.amount_cents, sign * p.captured_amount_cents, sign * p.refunded_amount_cents, sign * p.fee_cents,
        sign * (p.status <> 'pending')::int, sign * (p.status NOT IN ('pending', 'failed'))::int,
        sign * (p.status = 'blocked')::int, sign * (p.captured_amount_cents > 0)::int, sign * (p.dispute IS NOT NULL)::int
    $$;

    CREATE FUNCTION payment_rollups_after_insert() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      INSERT INTO payment_rollups AS r
${rollupSums}      FROM new_rows n, payment_rollup_deltas(1, n) d
      GROUP BY 1, 2, 3, 4 ORDER BY 1, 3, 2, 4
${rollupUpsert}      RETURN NULL;
    END $$;

    -- An update adds the new rows' figures and takes the old ones' away; a change that moves no
    -- figure (in_flight, idempotency_hold, fraud fields) writes nothing.
    CREATE FUNCTION payment_rollups_after_update() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      INSERT INTO payment_rollups AS r
${rollupSums}      FROM (SELECT x.* FROM new_rows n, payment_rollup_deltas(1, n) x
            UNION ALL SELECT y.* FROM old_rows o, payment_rollup_deltas(-1, o) y) d
      GROUP BY 1, 2, 3, 4
      HAVING sum(d.transaction_count) <> 0 OR sum(d.volume_cents) <> 0 OR sum(d.captured_cents) <> 0
        OR sum(d.refunded_cents) <> 0 OR sum(d.fees_cents) <> 0 OR sum(d.decided_count) <> 0
        OR sum(d.approved_count) <> 0 OR sum(d.blocked_count) <> 0 OR sum(d.captured_count) <> 0 OR sum(d.disputed_count) <> 0
      ORDER BY 1, 3, 2, 4
${rollupUpsert}      RETURN NULL;
    END $$;

    CREATE TRIGGER payments_rollup_insert AFTER INSERT ON payments
      REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION payment_rollups_after_insert();
    CREATE TRIGGER payments_rollup_update AFTER UPDATE ON payments
      REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION payment_rollups_after_update();

    -- The payments already there.
    INSERT INTO payment_rollups
    SELECT d.merchant_id, d.currency, d.hour, d.shard, sum(d.transaction_count), sum(d.volume_cents), sum(d.captured_cents),
      sum(d.refunded_cents), sum(d.fees_cents), sum(d.decided_count), sum(d.approved_count), sum(d.blocked_count),
      sum(d.captured_count), sum(d.disputed_count)
    FROM payments p, payment_rollup_deltas(1, p) d
    GROUP BY 1, 2, 3, 4;
  `),
  "0010_cluster": statements(`
    -- Several instances on one database (docs/operations.md, "Running several instances").
    -- The instance running a payment's automatic flow: another resumes it once this one's beats
    -- stop, and never while they go on. Not indexed: the recovery pass reads the in-flight index.
    ALTER TABLE payments ADD COLUMN flow_owner text;
    -- The instance holding a delivery's lease: its lease is taken over once its beats stop.
    ALTER TABLE webhook_deliveries ADD COLUMN lease_owner text;
    -- The once-only jobs (settlement, the sandbox's disputes, the purge, the recovery of dead
    -- instances' flows) run on the instance named here while it beats; another takes the row over
    -- once they stop.
    CREATE TABLE service_leaders (
      role text COLLATE "C" PRIMARY KEY,
      holder text NOT NULL,
      since timestamptz NOT NULL
    );
  `),
  "0011_outbox_collation": statements(`
    -- The outbox's event id in the collation of the event ids it references ("C"): the webhooks'
    -- order rule joins it to payment_events.id, and with two collations that join could not probe
    -- the outbox's primary key (it read the whole outbox once per delivery checked).
    ALTER TABLE webhook_outbox ALTER COLUMN event_id TYPE text COLLATE "C";
  `),
  "0012_payments_created_brin": statements(`
    -- Reconciliation reads every merchant's payments of a period. A BRIN index (a few pages,
    -- summarising blocks written in creation order) finds them without adding an index entry to
    -- every create, as a B-tree on created_at would.
    CREATE INDEX payments_created_brin ON payments USING brin (created_at);
  `),
  "0013_processor_reference": statements(`
    -- The processor's id for a payment's authorization (a Stripe PaymentIntent), written with the
    -- authorization: captures, cancels and refunds asked for later name it, rather than finding the
    -- intent by the processor's search, which lags.
    ALTER TABLE payments ADD COLUMN processor_reference text;
  `),
  "0014_processor_pending": statements(`
    -- An operation the service owes a remote processor, or asked for without an answer (a cancel
    -- booked with the change that released the authorization; a capture, refund or cancel whose
    -- outcome is unknown): the payment stays in flight, so its flow, resumed by recovery on any
    -- instance, asks again under the operation's idempotency key until the processor answers.
    ALTER TABLE payments ADD COLUMN processor_pending jsonb;
    -- The processor's ids of refunds it accepted and later failed, applied once each (null: none).
    ALTER TABLE payments ADD COLUMN failed_refunds jsonb;
  `),
  "0015_ledger_keys": statements(`
    -- A ledger entry is found by its payment (the ledger of a transaction) or summed by merchant
    -- (balances); never by its id alone. One key local to the payment replaces the primary key on
    -- the random id and the payment index: a create's eight entries go to one leaf page instead
    -- of sixteen random ones. An entry's id stays unique in practice (128 random bits) and within
    -- its payment by this key.
    ALTER TABLE ledger_entries DROP CONSTRAINT ledger_entries_pkey;
    DROP INDEX ledger_entries_payment;
    ALTER TABLE ledger_entries ADD CONSTRAINT ledger_entries_pkey PRIMARY KEY (payment_id, id);
    -- Balances read the merchant's three balance accounts only; the holds, the card network and
    -- fee revenue (six of a capture's eight entries) need no entry in this index.
    DROP INDEX ledger_entries_merchant;
    CREATE INDEX ledger_entries_merchant ON ledger_entries (merchant_id, currency, account)
      WHERE account IN ('merchant_pending', 'merchant_available', 'merchant_reserved');
  `),
  "0016_event_keys": statements(`
    -- An event is found by its payment (its events, the webhooks' order rule) or named by the
    -- outbox; never by its id alone. Its key is its payment and sequence, already unique, so the
    -- index on the event's id goes: a create's events add entries to one index instead of two.
    -- An event's id stays unique in practice (83 random bits after its time); a delivery keeps its
    -- own unique event_id. The outbox names its event by that key (its primary key, and the
    -- foreign key to the event).
    ALTER TABLE webhook_outbox ADD COLUMN payment_id text;
    ALTER TABLE webhook_outbox ADD COLUMN sequence integer;
    UPDATE webhook_outbox o SET payment_id = e.payment_id, sequence = e.sequence
      FROM payment_events e WHERE e.id = o.event_id;
    ALTER TABLE webhook_outbox ALTER COLUMN payment_id SET NOT NULL;
    ALTER TABLE webhook_outbox ALTER COLUMN sequence SET NOT NULL;
    ALTER TABLE webhook_outbox DROP CONSTRAINT webhook_outbox_event_id_fkey;
    ALTER TABLE webhook_outbox DROP CONSTRAINT webhook_outbox_pkey;
    ALTER TABLE payment_events DROP CONSTRAINT payment_events_pkey;
    ALTER TABLE payment_events DROP CONSTRAINT payment_events_payment_id_sequence_key;
    ALTER TABLE payment_events ADD CONSTRAINT payment_events_pkey PRIMARY KEY (payment_id, sequence);
    ALTER TABLE webhook_outbox ADD CONSTRAINT webhook_outbox_pkey PRIMARY KEY (payment_id, sequence);
    ALTER TABLE webhook_outbox ADD CONSTRAINT webhook_outbox_event_fkey FOREIGN KEY (payment_id, sequence)
      REFERENCES payment_events (payment_id, sequence);
  `),
  "0017_statement_integrity": statements(`
    -- The create path writes a payment with all its rows in one statement (src/store/PgHotPath.ts):
    -- a foreign key checked each of them on its own (one query and one row lock a row: about
    -- twelve a create, a sixth to a quarter of PostgreSQL's work on it). Payments and merchants are never removed, and
    -- events are immutable, so what those keys gave is kept by one check a statement over the rows
    -- it inserted, and by refusing to delete a payment or a merchant (docs/architecture.md,
    -- "Integrity").
    ALTER TABLE payment_events DROP CONSTRAINT payment_events_payment_id_fkey;
    ALTER TABLE ledger_entries DROP CONSTRAINT ledger_entries_payment_id_fkey;
    ALTER TABLE fraud_cases DROP CONSTRAINT fraud_cases_payment_id_fkey;
    ALTER TABLE webhook_outbox DROP CONSTRAINT webhook_outbox_event_fkey;
    ALTER TABLE payments DROP CONSTRAINT payments_merchant_id_fkey;

    CREATE FUNCTION rows_have_payments() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
      orphan text;
    BEGIN
      -- Each payment once: a create's dozen rows name one.
      SELECT i.payment_id INTO orphan FROM (SELECT DISTINCT payment_id FROM inserted) i
        WHERE NOT EXISTS (SELECT 1 FROM payments p WHERE p.id = i.payment_id COLLATE "C") LIMIT 1;
      IF orphan IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'foreign_key_violation',
          MESSAGE = format('%s: payment %s does not exist', TG_TABLE_NAME, orphan);
      END IF;
      RETURN NULL;
    END $$;
    CREATE TRIGGER payment_events_have_payments AFTER INSERT ON payment_events
      REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION rows_have_payments();
    CREATE TRIGGER ledger_entries_have_payments AFTER INSERT ON ledger_entries
      REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION rows_have_payments();
    CREATE TRIGGER fraud_cases_have_payments AFTER INSERT ON fraud_cases
      REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION rows_have_payments();

    CREATE FUNCTION outbox_rows_have_events() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF EXISTS (SELECT 1 FROM inserted i WHERE NOT EXISTS (
        SELECT 1 FROM payment_events e WHERE e.payment_id = i.payment_id AND e.sequence = i.sequence)) THEN
        RAISE EXCEPTION USING ERRCODE = 'foreign_key_violation', MESSAGE = 'webhook_outbox: an event does not exist';
      END IF;
      RETURN NULL;
    END $$;
    CREATE TRIGGER webhook_outbox_has_events AFTER INSERT ON webhook_outbox
      REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION outbox_rows_have_events();

    CREATE FUNCTION payments_have_merchants() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
      orphan text;
    BEGIN
      SELECT i.merchant_id INTO orphan FROM inserted i
        WHERE NOT EXISTS (SELECT 1 FROM merchants m WHERE m.id = i.merchant_id COLLATE "C") LIMIT 1;
      IF orphan IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'foreign_key_violation',
          MESSAGE = format('payments: merchant %s does not exist', orphan);
      END IF;
      RETURN NULL;
    END $$;
    CREATE TRIGGER payments_have_merchants AFTER INSERT ON payments
      REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION payments_have_merchants();

    -- What the checks above rest on: a payment or a merchant, once written, is never removed.
    CREATE FUNCTION forbid_removal() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      RAISE EXCEPTION '% rows are never removed: % refused', TG_TABLE_NAME, TG_OP;
    END $$;
    CREATE TRIGGER payments_never_removed BEFORE DELETE ON payments
      FOR EACH ROW EXECUTE FUNCTION forbid_removal();
    CREATE TRIGGER payments_never_truncated BEFORE TRUNCATE ON payments
      FOR EACH STATEMENT EXECUTE FUNCTION forbid_removal();
    CREATE TRIGGER merchants_never_removed BEFORE DELETE ON merchants
      FOR EACH ROW EXECUTE FUNCTION forbid_removal();
    CREATE TRIGGER merchants_never_truncated BEFORE TRUNCATE ON merchants
      FOR EACH STATEMENT EXECUTE FUNCTION forbid_removal();
  `),
  "0018_smaller_keys": statements(`
    -- A ledger entry is read with its payment's (a transaction's ledger, a few rows, sorted there)
    -- or summed by merchant, never by its id: an index on the payment alone finds them, with half
    -- the key of (payment_id, id) in each of a create's eight entries. Entries are written only
    -- inside their payment's version-checked change, once; an entry's id stays unique in practice
    -- (its millisecond and 83 random bits).
    ALTER TABLE ledger_entries DROP CONSTRAINT ledger_entries_pkey;
    CREATE INDEX ledger_entries_payment ON ledger_entries (payment_id);
    -- A payment holds its idempotency key (idempotency_hold) only while a separate claim could
    -- still race its insert. A create written once claims its key finished in the statement that
    -- inserts the payment and holds nothing: the key's row alone keeps it one payment a key. Only
    -- a held key takes an entry in the unique index.
    ALTER TABLE payments DROP CONSTRAINT payments_merchant_id_idempotency_hold_key;
    CREATE UNIQUE INDEX payments_idempotency_hold ON payments (merchant_id, idempotency_hold)
      WHERE idempotency_hold IS NOT NULL;
  `),
  "0019_events_name_their_payment": statements(`
    -- An event's row names its payment (its key); the payment names the merchant. Reads take the
    -- merchant from the payment (a transaction's events) or the outbox's row (a delivery), and
    -- put the payment's id and merchant back into the snapshot, which new rows keep without them
    -- (docs/architecture.md, "Integrity"). Rows written before keep theirs; a read gives the same.
    ALTER TABLE payment_events DROP COLUMN merchant_id;
  `)
}
