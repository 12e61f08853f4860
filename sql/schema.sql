-- pg_webhook_inbox: schema and tables.
--
--   webhook.events             small and hot: one row per (provider, event_id),
--                              kept forever, no payload. Its primary key is
--                              the dedup.
--   webhook.signature_bindings which delivery (event id, and body where the
--                              signature does not vouch for it) a signature
--                              first came with; kept forever with the events.
--   webhook.delivery_log and   large and cold: one row per delivery, with the
--   webhook.delivery_failures  payload, raw body, signature and headers, and
--                              the failed attempts. Purging them never loses
--                              dedup, because nothing reads them to decide.
--   webhook.inbox              the durable inbox: one row per queued event
--                              and consumer, with its attempts, lease and
--                              next run; the payload stays in the archive.
--   webhook.inbox_failures     the inbox's failed attempts.
--   webhook.requeues           who put which dead event back, and when.
--   webhook.idempotency_keys   keys of the application's own API: who owns
--                              each, recovery points, stored responses.
--   webhook.watermarks         per entity and consumer, the order value of
--                              the newest event processed (ordering).
--   webhook.providers and      the provider registry.
--   webhook.provider_secrets
--
-- Applications never write these tables: the SECURITY DEFINER functions do.
--
-- Views, constraints, defaults and index predicates are bound when they
-- are created, under the search_path CREATE EXTENSION sets: the install
-- schema first, where whoever may create objects there could have planted
-- a look-alike operator or function. Each SQL file of the extension pins
-- the path to pg_catalog while it runs and gives the install schema back
-- at its end, for the functions pgrx creates there.
SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);

CREATE SCHEMA webhook;
COMMENT ON SCHEMA webhook IS
    'pg_webhook_inbox: event state (dedup) and the delivery archive';

-- Statuses are enum types rather than CHECK constraints: the same guarantee
-- for the DBA, without re-reading a constraint expression in every INSERT
-- and UPDATE (a fifth of the claim's cost, measured).
-- 'queued' came with the inbox, 'stale' with ordering, 'filtered' with
-- filters (filters.sql), after the others:
-- labels are only ever appended, so that an upgraded enum sorts like a
-- fresh one. Views compare them as text, because an upgrade cannot use a
-- label it adds in the same transaction.
CREATE TYPE webhook.event_status AS ENUM ('processing', 'processed', 'failed', 'dead', 'queued', 'stale', 'filtered');
CREATE TYPE webhook.claim_status AS ENUM ('claimed', 'retry', 'duplicate', 'in_progress', 'dead', 'rejected', 'queued', 'stale', 'handshake', 'filtered');

-- What webhook_claim, webhook_receive, webhook_enqueue and
-- idempotency_begin answer: one row each, so each is a function returning
-- a composite, called once per call.
CREATE TYPE webhook.claim_result AS (
    id         uuid,     -- the delivery: what webhook_complete and webhook_fail take
    claimed    boolean,  -- true: this caller processes the event
    status     text,     -- a webhook.claim_status label
    attempts   integer,
    result     jsonb     -- for a duplicate: what the first delivery stored
);
CREATE TYPE webhook.receive_result AS (
    id                uuid,
    claimed           boolean,
    status            text,
    attempts          integer,
    result            jsonb,
    http_status       integer,  -- what to answer the provider
    reason            text,
    event_id          text,
    event_type        text,
    event_type_signed boolean,
    response          text,     -- a handshake's body, sent instead of an empty 2xx
    response_type     text
);
CREATE TYPE webhook.enqueue_result AS (
    id      uuid,     -- the delivery
    queued  boolean,  -- true: the event is new, and queued for the workers
    status  text      -- queued, or duplicate
);
CREATE TYPE webhook.idempotency_begin_result AS (
    outcome          text,   -- new, in_progress, replay or mismatch
    request_id       uuid,   -- new: what the request's later calls take
    http_status      integer,
    recovery_point   text,   -- new: the last step an earlier attempt passed
    recovery         jsonb,  -- new: each passed step's output
    response_headers jsonb,  -- replay: the stored response
    response_body    text
);
COMMENT ON TYPE webhook.event_status IS 'Where an event is: processing, processed, failed (retried by its next delivery), dead (parked), queued (in the inbox), stale (skipped: older than its entity''s watermark), filtered (not taken by the provider''s filter: webhook.filters)';
COMMENT ON TYPE webhook.claim_status IS 'What a delivery was answered';
COMMENT ON TYPE webhook.claim_result IS 'The answer of webhook_claim: one row';
COMMENT ON TYPE webhook.receive_result IS 'The answer of webhook_receive: one row, with what to send the provider';
COMMENT ON TYPE webhook.enqueue_result IS 'The answer of webhook_enqueue: one row';
COMMENT ON TYPE webhook.idempotency_begin_result IS 'The answer of idempotency_begin: one row';

CREATE TABLE webhook.events (
    provider         text        NOT NULL,
    event_id         text        NOT NULL,
    event_type       text        NOT NULL,
    -- processing: claimed, lease running; processed: done; failed: the
    -- next delivery retries it; dead: failed webhook.max_attempts times,
    -- parked until an operator requeues it; queued: handed to the inbox,
    -- where each consumer's progress is kept (webhook.inbox).
    status           webhook.event_status NOT NULL,
    attempts         integer     NOT NULL DEFAULT 1,
    -- The delivery that owns the event now (the last claim or retry).
    claim_id         uuid        NOT NULL,
    -- Set while status = 'processing'; after it, the next delivery may take
    -- the event over as a retry.
    lease_expires_at timestamptz,
    first_seen_at    timestamptz NOT NULL DEFAULT pg_catalog.now(),
    processed_at     timestamptz,
    last_error       text,
    -- SHA-256 of the first delivery's payload (its canonical jsonb text):
    -- a redelivery with a different payload is flagged, not silently skipped.
    payload_hash     bytea,
    -- Stored by webhook_complete(id, result) and returned to duplicates.
    result           jsonb,
    -- How many times an operator put the event back with webhook_requeue.
    requeues         integer     NOT NULL DEFAULT 0,
    -- For a provider registered with ordering: the entity the event is
    -- about and its order value, read from the signed body. NULL: unordered.
    entity_key       text,
    order_value      numeric,
    CONSTRAINT events_pkey PRIMARY KEY (provider, event_id)
)
-- Status and lease updates touch no indexed column; free space on the page
-- lets them be HOT updates that leave the index alone.
WITH (fillfactor = 80);

COMMENT ON TABLE webhook.events IS
    'One row per (provider, event_id), kept forever: the dedup and the claim state machine';

COMMENT ON COLUMN webhook.events.provider IS 'Registered provider name (or the name given to webhook_claim)';
COMMENT ON COLUMN webhook.events.event_id IS 'The provider''s event id; with provider, the dedup key';
COMMENT ON COLUMN webhook.events.event_type IS 'The event type of the first delivery';
COMMENT ON COLUMN webhook.events.status IS 'processing (claimed, lease running), processed (done), failed (next delivery retries), dead (parked for an operator), queued (in the inbox: see webhook.inbox), stale (skipped: a newer event of its entity was processed)';
COMMENT ON COLUMN webhook.events.attempts IS 'Claims that owned the event: the first, plus every retry';
COMMENT ON COLUMN webhook.events.claim_id IS 'The delivery that owns the event now (its webhook.delivery_log id)';
COMMENT ON COLUMN webhook.events.lease_expires_at IS 'While processing: when another delivery may take the event over';
COMMENT ON COLUMN webhook.events.first_seen_at IS 'When the first delivery was claimed';
COMMENT ON COLUMN webhook.events.processed_at IS 'When webhook_complete marked it processed';
COMMENT ON COLUMN webhook.events.last_error IS 'The latest webhook_fail message (at most 2 kB), or why it was parked';
COMMENT ON COLUMN webhook.events.payload_hash IS 'SHA-256 of the first delivery''s payload; redeliveries that differ are flagged payload_mismatch';
COMMENT ON COLUMN webhook.events.result IS 'What webhook_complete stored; returned to every later duplicate';
COMMENT ON COLUMN webhook.events.requeues IS 'How many times an operator put the event back with webhook_requeue';
COMMENT ON COLUMN webhook.events.entity_key IS 'Ordering: the entity the event is about (from the signed body); NULL when unordered';
COMMENT ON COLUMN webhook.events.order_value IS 'Ordering: the event''s order value, a number or a timestamp as seconds since the Unix epoch';

-- The archive is written once per delivery and never updated: a delivery's
-- outcome follows from its event (the current owner of a processed event
-- is PROCESSED) or from webhook.delivery_failures. Rewriting a row with a
-- kilobyte of payload to flip a status would double the archive's WAL.
--
-- It is partitioned by range of id, one partition per day (UTC): ids are
-- UUIDv7, whose leading 48 bits are the milliseconds they were made at, so
-- the primary key is also the time. A lookup by id reads one partition,
-- and the purge drops a whole day at once instead of deleting its rows
-- one by one. webhook_create_partitions makes the days ahead; a delivery
-- no partition covers lands in webhook.delivery_log_default, and so does
-- a delivery the purge had to keep while dropping its day.
CREATE TABLE webhook.delivery_log (
    -- Time-ordered (UUID version 7): the partition key.
    id                uuid        NOT NULL,
    provider          text        NOT NULL,
    -- event_id, event_type and payload are unknown only for a delivery
    -- rejected before it could be read (bad signature, body not JSON).
    event_id          text,
    event_type        text,
    payload           jsonb,
    -- The exact bytes received, when the claim was given them; signatures
    -- cover these bytes, which jsonb does not preserve.
    raw_body          bytea,
    signature         text,
    -- All request headers, when webhook_receive was given them.
    headers           jsonb,
    -- What the claim answered this delivery; 'rejected' when
    -- webhook_receive refused it before claiming.
    claim_status      webhook.claim_status NOT NULL,
    -- For rejections, the reason (bad_signature, timestamp_too_old, …);
    -- for deliveries skipped as stale, why.
    reject_reason     text,
    -- This redelivery's payload differs from the first delivery's.
    payload_mismatch  boolean     NOT NULL DEFAULT false,
    created_at        timestamptz NOT NULL DEFAULT pg_catalog.now(),
    -- For rejections, raw_body holds only the first
    -- webhook.rejected_body_limit bytes; these describe the whole body.
    body_size         integer,
    body_sha256       bytea,
    -- Which of its provider's keys verified it (webhook_receive).
    secret_fingerprint text,
    -- A new event's claim made to complete with its transaction
    -- (complete_on_commit): its commit was the event's completion, which
    -- the metrics then count without looking the event up.
    claim_completes   boolean
)
PARTITION BY RANGE (id);
-- Compress the payload, raw body and headers inside the row instead of
-- only past 2 kB: a kilobyte of webhook JSON shrinks by half or more, and
-- every byte saved is a byte less of WAL and of archive, for one cheap
-- compression per delivery. Storage MAIN keeps them in the row (moved to
-- TOAST only when they do not fit in a page even compressed), so a small
-- delivery costs no TOAST insert. Partitions take these settings from
-- here; the low toast_tuple_target that makes them apply is set on each
-- partition (webhook._prepare_archive_partition).
ALTER TABLE webhook.delivery_log
    ALTER COLUMN payload SET STORAGE MAIN,
    ALTER COLUMN raw_body SET STORAGE MAIN,
    ALTER COLUMN headers SET STORAGE MAIN,
    -- With so low a target every row is past it, and the toaster would
    -- move each text column of more than a few bytes to TOAST: a
    -- signature (a hundred bytes from most providers) or an event id
    -- would cost a TOAST insert per delivery. The provider's name and the
    -- key's fingerprint are short and bounded, and stay as they are; the
    -- others stay in the row unless it cannot fit even compressed.
    ALTER COLUMN provider SET STORAGE PLAIN,
    ALTER COLUMN event_id SET STORAGE MAIN,
    ALTER COLUMN event_type SET STORAGE MAIN,
    ALTER COLUMN secret_fingerprint SET STORAGE PLAIN,
    ALTER COLUMN signature SET STORAGE MAIN,
    ALTER COLUMN reject_reason SET STORAGE MAIN;
-- LZ4 compresses several times faster than the default pglz; use it where
-- the server was built with it.
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_settings
                WHERE name = 'default_toast_compression' AND 'lz4' = ANY (enumvals)) THEN
        ALTER TABLE webhook.delivery_log
            ALTER COLUMN payload SET COMPRESSION lz4,
            ALTER COLUMN raw_body SET COMPRESSION lz4,
            ALTER COLUMN headers SET COMPRESSION lz4;
    END IF;
END
$$;

-- What each partition of the archive gets besides its columns: the
-- row-storage target, its indexes, and no privileges. The indexes are each
-- partition's own rather than declared on webhook.delivery_log: a
-- partition made by webhook_create_partitions is the database's, not the
-- extension's, and pg_dump restores it with its own indexes, which would
-- clash with ones the parent hands down. Each partition's primary key is
-- still unique across the archive: an id belongs to one partition only.
-- Privileges: the partition is read through webhook.delivery_log, and
-- whatever ALTER DEFAULT PRIVILEGES would hand out on a new table is
-- taken back, so no role reads payloads past the parent's grants.
CREATE FUNCTION webhook._prepare_archive_partition(part pg_catalog.regclass) RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    name    text := (SELECT c.relname FROM pg_catalog.pg_class c WHERE c.oid = part);
    grantee text;
BEGIN
    EXECUTE pg_catalog.format('ALTER TABLE %s SET (toast_tuple_target = 128)', part);
    EXECUTE pg_catalog.format('ALTER TABLE %s ADD CONSTRAINT %I PRIMARY KEY (id)', part, name || '_pkey');
    EXECUTE pg_catalog.format('CREATE INDEX %I ON %s (provider, event_id)', name || '_event_idx', part);
    -- Rows arrive in time order: a BRIN index finds a time range at a
    -- tiny fraction of a btree's size and write cost.
    EXECUTE pg_catalog.format('CREATE INDEX %I ON %s USING brin (created_at)', name || '_created_at_idx', part);
    -- What the operations views look for, kept small by the predicate.
    EXECUTE pg_catalog.format('CREATE INDEX %I ON %s (created_at) WHERE claim_status = %L OR payload_mismatch',
                              name || '_attention_idx', part, 'rejected');
    FOR grantee IN
        SELECT DISTINCT CASE WHEN a.grantee = 0 THEN 'PUBLIC'
                             ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(a.grantee)) END
          FROM pg_catalog.pg_class c CROSS JOIN LATERAL pg_catalog.aclexplode(c.relacl) a
         WHERE c.oid = part AND a.grantee <> c.relowner
    LOOP
        EXECUTE pg_catalog.format('REVOKE ALL ON TABLE %s FROM %s', part, grantee);
    END LOOP;
END
$$;
COMMENT ON FUNCTION webhook._prepare_archive_partition(pg_catalog.regclass) IS
    'Internal: the storage target, indexes and privileges of a new partition of webhook.delivery_log';

-- The smallest id made at `at`: a partition bound. Ids of one millisecond
-- share their first 48 bits; the version nibble (7) puts every real id of
-- that millisecond after this one.
CREATE FUNCTION webhook._archive_bound(at timestamptz) RETURNS uuid
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT (pg_catalog.substr(h, 1, 8) || '-' || pg_catalog.substr(h, 9, 4) || '-0000-0000-000000000000')::uuid
  FROM (SELECT pg_catalog.lpad(pg_catalog.to_hex(pg_catalog.floor(pg_catalog.date_part('epoch', at) * 1000)::bigint),
                               12, '0') AS h) AS ms
$$;
COMMENT ON FUNCTION webhook._archive_bound(timestamptz) IS
    'Internal: the smallest delivery id made at the given time, a bound of the archive''s partitions';

-- When a delivery or lease id was made: the milliseconds in its first 48
-- bits (the inverse of webhook._archive_bound). Called for every lease the
-- metrics rollup counts, so written to be inlined by the planner:
-- no SET clause (a function with one is called, its settings saved and
-- restored, at every row) and not STRICT (which the planner would have to
-- prove of its body); it reads no table and names everything it uses.
CREATE FUNCTION webhook._id_time(id uuid) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
SELECT pg_catalog.to_timestamp(('x' || pg_catalog.substr(pg_catalog.replace(id::text, '-', ''), 1, 12))::bit(48)::bigint
                               / 1000.0)
$$;
COMMENT ON FUNCTION webhook._id_time(uuid) IS 'Internal: when a delivery or lease id was made (its first 48 bits)';

-- When the n-th of the events an operator puts back in the queue
-- (released, requeued, replayed, resumed) is due: from one instant
-- (`start`, read once per statement), in the order they were first
-- queued (an ordered provider's events of one transaction by their
-- order), `spacing` and a microsecond after the one before. Workers lease
-- by due time; put back due "now", each row's clock read as the UPDATE
-- happened to reach it, an ordered provider's events would come out in
-- the heap's order and the older ones be refused as stale.
CREATE FUNCTION webhook._due_in_turn(start timestamptz, n bigint, spacing interval) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN start + (n - 1) * (spacing + interval '1 microsecond');
COMMENT ON FUNCTION webhook._due_in_turn(timestamptz, bigint, interval) IS
    'Internal: when the n-th event put back in the queue is due, in the order it was first queued';

-- A standby takes no writes. PostgreSQL refuses them anyway, at the first
-- statement that writes and naming neither the function nor the reason;
-- every function that writes calls this first instead (behind a cheap
-- pg_is_in_recovery() test), with the same SQLSTATE and the same words as
-- the library's functions.
CREATE FUNCTION webhook._refuse_on_standby(fn text) RETURNS void
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RAISE EXCEPTION '%: this server is a standby (in recovery) and takes no writes', fn
        USING ERRCODE = 'read_only_sql_transaction',
              HINT = 'Writes go to the primary: list every host in the connection string with '
                     'target_session_attrs=read-write, and the client finds the primary after a '
                     'failover (docs/high-availability.md).';
END
$$;
COMMENT ON FUNCTION webhook._refuse_on_standby(text) IS
    'Internal: refuses a function that writes, on a standby';

-- Where a delivery no day's partition covers goes. Extension-owned and
-- dumped with the extension's tables.
CREATE TABLE webhook.delivery_log_default PARTITION OF webhook.delivery_log DEFAULT;
SELECT webhook._prepare_archive_partition('webhook.delivery_log_default');
COMMENT ON TABLE webhook.delivery_log_default IS
    'The archive''s deliveries no day''s partition covers: made before webhook_create_partitions first ran, or kept by webhook_purge because their event is unfinished';

COMMENT ON TABLE webhook.delivery_log IS
    'One row per webhook_claim / webhook_receive call, written once: payload, raw body, signature, headers, answer; partitioned by day of id (webhook.archive_partitions)';

COMMENT ON COLUMN webhook.delivery_log.id IS 'The delivery''s id (UUIDv7, time-ordered): what webhook_claim and webhook_receive return';
COMMENT ON COLUMN webhook.delivery_log.provider IS 'Provider name';
COMMENT ON COLUMN webhook.delivery_log.event_id IS 'The event id it carried; NULL when rejected before it could be read';
COMMENT ON COLUMN webhook.delivery_log.event_type IS 'The event type it carried; NULL when rejected';
COMMENT ON COLUMN webhook.delivery_log.payload IS 'The payload as jsonb; NULL for rejections';
COMMENT ON COLUMN webhook.delivery_log.raw_body IS 'The exact bytes received (signatures cover these); for rejections only the first webhook.rejected_body_limit bytes';
COMMENT ON COLUMN webhook.delivery_log.signature IS 'The signature header''s value, for verifying the delivery again later';
COMMENT ON COLUMN webhook.delivery_log.headers IS 'Request headers given to webhook_receive, webhook.redact_headers redacted; NULL past 64 kB';
COMMENT ON COLUMN webhook.delivery_log.claim_status IS 'What the delivery was answered: claimed, retry, duplicate, in_progress, dead, rejected, queued, stale, or handshake (an endpoint check with no event, answered as its provider expects)';
COMMENT ON COLUMN webhook.delivery_log.reject_reason IS 'For rejections: why (bad_signature, replayed, timestamp_too_old, ...); for stale deliveries: which watermark they were older than';
COMMENT ON COLUMN webhook.delivery_log.payload_mismatch IS 'This redelivery''s payload differs from the first delivery''s';
COMMENT ON COLUMN webhook.delivery_log.created_at IS 'When the delivery arrived';
COMMENT ON COLUMN webhook.delivery_log.body_size IS 'For rejections: the whole body''s size in bytes';
COMMENT ON COLUMN webhook.delivery_log.body_sha256 IS 'For rejections: the whole body''s SHA-256';
COMMENT ON COLUMN webhook.delivery_log.claim_completes IS 'True for a new event''s claim made with complete_on_commit: committed, it completed the event (unless it failed in the same transaction); NULL otherwise';
COMMENT ON COLUMN webhook.delivery_log.secret_fingerprint IS 'The fingerprint of the secret, public key or certificate that verified the delivery (webhook_receive); NULL when the caller verified it';

-- Attempts that failed: webhook_fail's message, or the lease that ran out.
CREATE TABLE webhook.delivery_failures (
    -- The delivery (webhook.delivery_log); the purge removes the two
    -- together. No foreign key: the purge drops a whole day of the
    -- archive at once, which a key would make row-by-row.
    delivery_id   uuid        NOT NULL,
    error_message text        NOT NULL,
    -- When the row was written, not when its transaction began: the
    -- metrics rollup finds failures by this time, and counts up to a mark
    -- no running statement or writing transaction can still write below.
    failed_at     timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    CONSTRAINT delivery_failures_pkey PRIMARY KEY (delivery_id)
);
CREATE INDEX delivery_failures_failed_at_idx ON webhook.delivery_failures (failed_at);

COMMENT ON TABLE webhook.delivery_failures IS
    'Failed attempts: the error given to webhook_fail, or the lease that ran out and was taken over';

COMMENT ON COLUMN webhook.delivery_failures.delivery_id IS 'The delivery whose attempt failed';
COMMENT ON COLUMN webhook.delivery_failures.error_message IS 'The webhook_fail message, or the lease that ran out';
COMMENT ON COLUMN webhook.delivery_failures.failed_at IS 'When it failed';

-- Trace context: the W3C traceparent of the request that queued an event
-- (intake's traceparent argument, from the application's own request
-- span), by the delivery that queued it; webhook_next hands it to the
-- event's worker. Only deliveries given one have a row.
CREATE TABLE webhook.trace_contexts (
    delivery_id uuid NOT NULL,
    traceparent text NOT NULL,
    CONSTRAINT trace_contexts_pkey PRIMARY KEY (delivery_id),
    CONSTRAINT trace_contexts_traceparent_check CHECK (pg_catalog.octet_length(traceparent) <= 512)
);
COMMENT ON TABLE webhook.trace_contexts IS
    'The W3C trace context of the request that queued an event, by its delivery; returned by webhook_next, kept while an inbox row of the event is';
COMMENT ON COLUMN webhook.trace_contexts.delivery_id IS 'The delivery that queued the event (webhook.inbox.delivery_id)';
COMMENT ON COLUMN webhook.trace_contexts.traceparent IS 'As intake was given it';

-- The durable inbox. A delivery taken in inbox mode (webhook_receive with
-- inbox, or webhook_enqueue) is answered 2xx as soon as it is stored: its
-- event row says 'queued', and here it gets one row per consumer, which
-- workers lease with webhook_next and finish with webhook_complete or
-- webhook_fail. The payload is read from the archive row that brought
-- the event (delivery_id), never stored twice.
CREATE TYPE webhook.inbox_status AS ENUM ('ready', 'leased', 'processed', 'dead', 'stale', 'filtered');
COMMENT ON TYPE webhook.inbox_status IS
    'Where a consumer is with a queued event: ready (or backing off until run_at), leased, processed, dead, stale (skipped: older than its entity''s watermark), filtered (not taken by a filter: webhook.filters)';

CREATE TABLE webhook.inbox (
    provider      text        NOT NULL,
    event_id      text        NOT NULL,
    -- Each consumer processes each event once, with its own attempts,
    -- backoff and dead letters; 'default' unless the provider names some.
    consumer      text        NOT NULL,
    event_type    text        NOT NULL,
    status        webhook.inbox_status NOT NULL DEFAULT 'ready',
    -- When the row may next be leased: for a ready row, when its next
    -- attempt may start (now, or after its backoff); for a leased one,
    -- when the lease runs out and the event is ready again.
    run_at        timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    -- Leases taken, the current one included: a lease that ran out counts.
    attempts      integer     NOT NULL DEFAULT 0,
    -- The current (or last) lease: what webhook_next returned as id, and
    -- what webhook_complete / webhook_fail / webhook_extend are given.
    claim_id      uuid,
    -- The archive row (webhook.delivery_log) holding the payload.
    delivery_id   uuid        NOT NULL,
    last_error    text,
    result        jsonb,
    requeues      integer     NOT NULL DEFAULT 0,
    queued_at     timestamptz NOT NULL DEFAULT pg_catalog.now(),
    processed_at  timestamptz,
    -- Ordering, as on the event row: one line per entity and consumer.
    entity_key    text,
    order_value   numeric,
    -- The replay that last queued the row (webhook_replay): webhook_next
    -- returns it, so that a worker knows it runs a replay. NULL for work
    -- queued by a delivery.
    replay_id     uuid,
    -- Keyed by the delivery that queued the event (a time-ordered id, so
    -- in queue order) rather than by event id: each lease and completion
    -- adds an entry to every index of the row (PostgreSQL cannot update it
    -- in place), and an index in event-id order takes those at random
    -- pages, each a page image in the WAL in a deep queue. The event's
    -- row in webhook.events has it as claim_id for as long as the event
    -- is queued (a queued event is never taken over), which is how its
    -- inbox rows are found by event id.
    CONSTRAINT inbox_pkey PRIMARY KEY (delivery_id, consumer)
)
WITH (fillfactor = 80);
-- Leases, found by their id. A queued row has none yet and is left out:
-- queueing then writes no entry, where a NULL one would land with every
-- other new row's on the index's last page.
CREATE UNIQUE INDEX inbox_lease_idx ON webhook.inbox (claim_id) WHERE claim_id IS NOT NULL;
-- What webhook_next scans, in run order, kept to the rows not finished:
-- one queue per consumer and provider, and within it one per event type,
-- so that no filter walks past another provider's or type's backlog.
-- (Without a provider filter, webhook_next finds the providers with a
-- loose scan of the first and takes from each in turn.)
CREATE INDEX inbox_pending_idx ON webhook.inbox (consumer, provider, run_at)
    WHERE status IN ('ready', 'leased');
CREATE INDEX inbox_pending_type_idx ON webhook.inbox (consumer, provider, event_type, run_at)
    WHERE status IN ('ready', 'leased');
CREATE INDEX inbox_dead_idx ON webhook.inbox (queued_at) WHERE status = 'dead';
-- Each entity's line of unfinished events, in order: what per-entity FIFO
-- looks up to find whether an event has an earlier one waiting.
CREATE INDEX inbox_entity_line_idx ON webhook.inbox (provider, consumer, entity_key, order_value)
    WHERE entity_key IS NOT NULL AND status IN ('ready', 'leased');
-- Each replay's rows, for its progress, pause and cancel. Work queued by
-- deliveries has no entry.
CREATE INDEX inbox_replay_idx ON webhook.inbox (replay_id) WHERE replay_id IS NOT NULL;

COMMENT ON TABLE webhook.inbox IS
    'The durable inbox: one row per queued event and consumer, leased by webhook_next';
COMMENT ON COLUMN webhook.inbox.provider IS 'Provider name';
COMMENT ON COLUMN webhook.inbox.event_id IS 'The event''s id (its webhook.events row says queued)';
COMMENT ON COLUMN webhook.inbox.consumer IS 'Who processes it: default, or one of the provider''s consumers';
COMMENT ON COLUMN webhook.inbox.event_type IS 'The event type, for webhook_next''s filter';
COMMENT ON COLUMN webhook.inbox.status IS 'ready (now or at run_at), leased (until run_at), processed, dead (parked for an operator), stale (skipped: older than its entity''s watermark)';
COMMENT ON COLUMN webhook.inbox.run_at IS 'Ready: when the next attempt may start. Leased: when the lease runs out';
COMMENT ON COLUMN webhook.inbox.attempts IS 'Leases taken, the current one included';
COMMENT ON COLUMN webhook.inbox.claim_id IS 'The current or last lease''s id, as webhook_next returned it';
COMMENT ON COLUMN webhook.inbox.delivery_id IS 'The archive row holding the payload';
COMMENT ON COLUMN webhook.inbox.last_error IS 'The latest failure (at most 2 kB), or the lease that ran out';
COMMENT ON COLUMN webhook.inbox.result IS 'What webhook_complete stored';
COMMENT ON COLUMN webhook.inbox.requeues IS 'How many times an operator put it back';
COMMENT ON COLUMN webhook.inbox.queued_at IS 'When the event was queued';
COMMENT ON COLUMN webhook.inbox.processed_at IS 'When webhook_complete finished it, or when it was skipped as stale';
COMMENT ON COLUMN webhook.inbox.entity_key IS 'Ordering: the entity the event is about; NULL when unordered';
COMMENT ON COLUMN webhook.inbox.order_value IS 'Ordering: the event''s order value';
COMMENT ON COLUMN webhook.inbox.replay_id IS 'The replay (webhook.replays) that last queued it; NULL for work a delivery queued';

-- Every failed inbox attempt: webhook_fail's message, or the lease that
-- ran out. Keyed by the lease, so a worker whose lease was taken over is
-- told so.
CREATE TABLE webhook.inbox_failures (
    claim_id      uuid        NOT NULL,
    provider      text        NOT NULL,
    event_id      text        NOT NULL,
    consumer      text        NOT NULL,
    attempt       integer     NOT NULL,
    error_message text        NOT NULL,
    -- When the row was written (see webhook.delivery_failures).
    failed_at     timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    lease_expired boolean     NOT NULL DEFAULT false,
    CONSTRAINT inbox_failures_pkey PRIMARY KEY (claim_id)
);
CREATE INDEX inbox_failures_event_idx ON webhook.inbox_failures (provider, event_id, consumer);
-- What the metrics rollup reads: the failures since its last run.
CREATE INDEX inbox_failures_failed_at_idx ON webhook.inbox_failures (failed_at);

COMMENT ON TABLE webhook.inbox_failures IS 'Failed inbox attempts: webhook_fail''s message, or the lease that ran out';
COMMENT ON COLUMN webhook.inbox_failures.claim_id IS 'The lease that failed';
COMMENT ON COLUMN webhook.inbox_failures.provider IS 'Provider name';
COMMENT ON COLUMN webhook.inbox_failures.event_id IS 'The event''s id';
COMMENT ON COLUMN webhook.inbox_failures.consumer IS 'The consumer whose attempt failed';
COMMENT ON COLUMN webhook.inbox_failures.attempt IS 'Which attempt it was';
COMMENT ON COLUMN webhook.inbox_failures.error_message IS 'The webhook_fail message, or the lease that ran out';
COMMENT ON COLUMN webhook.inbox_failures.failed_at IS 'When it failed';
COMMENT ON COLUMN webhook.inbox_failures.lease_expired IS
    'True when no worker reported it: the lease ran out and webhook_next leased the row again or parked it';

-- Who put which dead or failed event back, and when.
CREATE TABLE webhook.requeues (
    requeued_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    requeued_by name        NOT NULL DEFAULT SESSION_USER,
    provider    text        NOT NULL,
    event_id    text        NOT NULL,
    -- NULL for a claimed (not queued) event, retried by its next delivery.
    consumer    text,
    attempts    integer     NOT NULL,
    last_error  text
);
CREATE INDEX requeues_requeued_at_idx ON webhook.requeues (requeued_at);

COMMENT ON TABLE webhook.requeues IS 'Every requeue: who put which event back, when, and what it had failed with';
COMMENT ON COLUMN webhook.requeues.requeued_at IS 'When';
COMMENT ON COLUMN webhook.requeues.requeued_by IS 'The session user who requeued it';
COMMENT ON COLUMN webhook.requeues.provider IS 'Provider name';
COMMENT ON COLUMN webhook.requeues.event_id IS 'The event''s id';
COMMENT ON COLUMN webhook.requeues.consumer IS 'The inbox consumer; NULL for a claimed event';
COMMENT ON COLUMN webhook.requeues.attempts IS 'Attempts it had used';
COMMENT ON COLUMN webhook.requeues.last_error IS 'What it had last failed with';

-- Ordering: per entity and consumer (claims move 'default'), the order
-- value of the newest event processed so far. Moved forward only, in the
-- transaction that completes the event; an event older than it is stale.
-- Kept until an operator resets it (webhook_reset_watermark).
CREATE TABLE webhook.watermarks (
    provider    text        NOT NULL,
    consumer    text        NOT NULL,
    entity_key  text        NOT NULL,
    order_value numeric     NOT NULL,
    -- The event whose completion set it.
    event_id    text        NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT pg_catalog.now(),
    CONSTRAINT watermarks_pkey PRIMARY KEY (provider, consumer, entity_key)
)
-- Every completion of an ordered event updates its row.
WITH (fillfactor = 80);

COMMENT ON TABLE webhook.watermarks IS
    'Ordering: per entity and consumer, the order value of the newest event processed; older events are stale';
COMMENT ON COLUMN webhook.watermarks.provider IS 'Provider name';
COMMENT ON COLUMN webhook.watermarks.consumer IS 'The inbox consumer; default for claims';
COMMENT ON COLUMN webhook.watermarks.entity_key IS 'The entity (from the provider''s entity_key_from)';
COMMENT ON COLUMN webhook.watermarks.order_value IS 'The newest order value processed (a number, or a timestamp as seconds since the Unix epoch)';
COMMENT ON COLUMN webhook.watermarks.event_id IS 'The event whose completion set it';
COMMENT ON COLUMN webhook.watermarks.updated_at IS 'When it last moved';

-- Idempotency keys of the application's own API (idempotency_begin and the
-- functions after it): one row per scope and key, with the state of the
-- request that owns it, its recovery points and its stored response.
-- Expired after webhook.idempotency_retention by idempotency_purge.
CREATE TYPE webhook.key_status AS ENUM ('in_progress', 'retryable', 'finished');
COMMENT ON TYPE webhook.key_status IS
    'Where a keyed request is: in_progress (owned under a lease), retryable (failed; the next request with the key resumes it), finished (its response is replayed)';

CREATE TABLE webhook.idempotency_keys (
    -- What separates one client's keys from another's: a tenant, a user, an
    -- endpoint, or all of them joined.
    scope           text        NOT NULL,
    key             text        NOT NULL,
    -- What the first request was (method, path, body hashed by
    -- idempotency_fingerprint, or the caller's own): another request with
    -- the key is a mismatch.
    fingerprint     text        NOT NULL,
    status          webhook.key_status NOT NULL,
    -- The attempt that owns the key now (or last did): what
    -- idempotency_begin returned, and what the functions after it take.
    request_id      uuid        NOT NULL,
    attempts        integer     NOT NULL DEFAULT 1,
    lease           interval    NOT NULL,
    -- While in_progress: when another request may take the key over.
    locked_until    timestamptz,
    -- The last step passed, and every step's output by step name.
    recovery_point  text,
    recovery        jsonb       NOT NULL DEFAULT '{}',
    response_status integer,
    response_headers jsonb,
    response_body   text,
    last_error      text,
    created_at      timestamptz NOT NULL DEFAULT pg_catalog.now(),
    updated_at      timestamptz NOT NULL DEFAULT pg_catalog.now(),
    finished_at     timestamptz,
    CONSTRAINT idempotency_keys_pkey PRIMARY KEY (scope, key),
    CONSTRAINT idempotency_keys_request_id_key UNIQUE (request_id)
)
-- Every step of a request updates its row.
WITH (fillfactor = 80);
-- What idempotency_purge looks for.
CREATE INDEX idempotency_keys_created_at_idx ON webhook.idempotency_keys (created_at);

COMMENT ON TABLE webhook.idempotency_keys IS
    'Idempotency keys of the application''s API: the request that owns each key, its recovery points and its stored response';
COMMENT ON COLUMN webhook.idempotency_keys.scope IS 'What separates clients'' keys: a tenant, a user, an endpoint';
COMMENT ON COLUMN webhook.idempotency_keys.key IS 'The client''s Idempotency-Key';
COMMENT ON COLUMN webhook.idempotency_keys.fingerprint IS 'The first request''s fingerprint; another request with the key is a mismatch';
COMMENT ON COLUMN webhook.idempotency_keys.status IS 'in_progress (owned, under a lease), retryable (failed; the next request resumes it), finished (its response is replayed)';
COMMENT ON COLUMN webhook.idempotency_keys.request_id IS 'The attempt that owns the key now, as idempotency_begin returned it';
COMMENT ON COLUMN webhook.idempotency_keys.attempts IS 'Requests that owned the key: the first, plus every takeover';
COMMENT ON COLUMN webhook.idempotency_keys.lease IS 'The owner''s lease, renewed by each recovery point';
COMMENT ON COLUMN webhook.idempotency_keys.locked_until IS 'While in_progress: when another request may take the key over';
COMMENT ON COLUMN webhook.idempotency_keys.recovery_point IS 'The last step the request recorded as passed; NULL: none yet';
COMMENT ON COLUMN webhook.idempotency_keys.recovery IS 'Each recorded step''s output, by step name';
COMMENT ON COLUMN webhook.idempotency_keys.response_status IS 'The stored response''s HTTP status';
COMMENT ON COLUMN webhook.idempotency_keys.response_headers IS 'The stored response''s headers, if given';
COMMENT ON COLUMN webhook.idempotency_keys.response_body IS 'The stored response''s body';
COMMENT ON COLUMN webhook.idempotency_keys.last_error IS 'The latest idempotency_fail message (at most 2 kB)';
COMMENT ON COLUMN webhook.idempotency_keys.created_at IS 'When the key was first used; it expires webhook.idempotency_retention later';
COMMENT ON COLUMN webhook.idempotency_keys.updated_at IS 'When the row last changed';
COMMENT ON COLUMN webhook.idempotency_keys.finished_at IS 'When the request finished (or failed for good)';

-- The archive as one row per delivery, with its outcome.
CREATE VIEW webhook.deliveries AS
SELECT l.id, l.provider, l.event_id, l.event_type, l.payload, l.raw_body, l.signature, l.headers,
       l.claim_status,
       CASE
           WHEN l.claim_status = 'rejected' THEN 'REJECTED'
           WHEN l.claim_status::text = 'handshake' THEN 'HANDSHAKE'
           WHEN l.claim_status IN ('duplicate', 'in_progress', 'dead') OR l.claim_status::text = 'stale'
               THEN 'SKIPPED'
           WHEN l.claim_status::text = 'filtered' THEN 'FILTERED'
           -- Queued for the inbox: done when every consumer is; skipped
           -- when every consumer found it stale or filtered it out.
           WHEN l.claim_status::text = 'queued' THEN
               CASE
                   WHEN EXISTS (SELECT FROM webhook.inbox i
                                 WHERE i.delivery_id = l.id AND i.status = 'dead') THEN 'FAILED'
                   WHEN EXISTS (SELECT FROM webhook.inbox i
                                 WHERE i.delivery_id = l.id
                                   AND i.status::text NOT IN ('processed', 'stale', 'filtered')) THEN 'QUEUED'
                   WHEN EXISTS (SELECT FROM webhook.inbox i
                                 WHERE i.delivery_id = l.id AND i.status = 'processed') THEN 'PROCESSED'
                   ELSE 'SKIPPED'
               END
           WHEN f.delivery_id IS NOT NULL THEN 'FAILED'
           WHEN e.claim_id = l.id AND e.status = 'processed' THEN 'PROCESSED'
           WHEN e.claim_id = l.id AND e.status = 'processing' THEN 'PENDING'
           -- Every way an owner loses its event records a failure; an
           -- archive edited by hand lands here.
           ELSE 'FAILED'
       END AS processing_status,
       coalesce(f.error_message, l.reject_reason) AS error_message,
       l.payload_mismatch,
       l.created_at,
       CASE
           WHEN f.delivery_id IS NOT NULL THEN f.failed_at
           WHEN e.claim_id = l.id AND e.status = 'processed' THEN e.processed_at
       END AS finished_at
  FROM webhook.delivery_log l
  LEFT JOIN webhook.delivery_failures f ON f.delivery_id = l.id
  LEFT JOIN webhook.events e ON e.provider = l.provider AND e.event_id = l.event_id;

COMMENT ON VIEW webhook.deliveries IS
    'The archive: one row per delivery with processing_status PENDING, QUEUED, PROCESSED, SKIPPED, FILTERED, FAILED or REJECTED';

-- One signature vouches for one delivery. Providers that do not sign the
-- event id (GitHub, Shopify, a generic HMAC of the body) are replayable
-- under a forged id header: the same signed bytes, a fresh
-- X-GitHub-Delivery. Providers whose signature does not vouch for the body
-- (PayPal's CRC32, Mailgun's timestamp and token) are replayable with
-- another body. Each such delivery's signed bytes are bound here to the id
-- they first came with and, where the body is not vouched for, to the
-- body's SHA-256; the same bytes with another id or body are refused as
-- 'replayed'. Kept forever, like webhook.events.
CREATE TABLE webhook.signature_bindings (
    provider      text        NOT NULL,
    -- SHA-256 of the signed material: the scheme's signed prefix, the body
    -- where the signature covers it, the suffix.
    digest        bytea       NOT NULL,
    event_id      text        NOT NULL,
    first_seen_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    -- SHA-256 of the body, where the signature does not vouch for it;
    -- NULL where it does (the body is then part of digest).
    body_digest   bytea,
    CONSTRAINT signature_bindings_pkey PRIMARY KEY (provider, digest)
);

COMMENT ON TABLE webhook.signature_bindings IS
    'Which delivery each signature first vouched for, where it covers neither the event id nor, by a digest, the body';

COMMENT ON COLUMN webhook.signature_bindings.provider IS 'Provider name';
COMMENT ON COLUMN webhook.signature_bindings.digest IS 'SHA-256 of the signed material (the scheme''s signed prefix, the body where the signature covers it, the suffix)';
COMMENT ON COLUMN webhook.signature_bindings.event_id IS 'The event id those bytes first came with; under any other id they are refused as replayed';
COMMENT ON COLUMN webhook.signature_bindings.first_seen_at IS 'When they were first seen';
COMMENT ON COLUMN webhook.signature_bindings.body_digest IS 'SHA-256 of the body they first came with, where the signature does not vouch for the body; with any other body they are refused as replayed';

-- The provider registry: how to verify each provider's deliveries and where
-- its event id and type are. Written through webhook_register_provider().
CREATE TABLE webhook.providers (
    name            text        NOT NULL
                    CONSTRAINT providers_name_check CHECK (name ~ '^[a-z0-9][a-z0-9_.-]{0,63}$'),
    scheme          text        NOT NULL,
    -- NULL: the scheme's own window (webhook_schemes().tolerance), or none
    -- for schemes that sign no timestamp.
    tolerance       interval
                    CONSTRAINT providers_tolerance_check CHECK (tolerance > interval '0'),
    -- 'header:<name>' or 'body:<dotted.json.path>', alternatives joined by '|'.
    event_id_from   text        NOT NULL
                    CONSTRAINT providers_event_id_from_check
                    CHECK (event_id_from ~ '^(header|body):[^|]+(\|(header|body):[^|]+)*$'),
    event_type_from text        NOT NULL
                    CONSTRAINT providers_event_type_from_check
                    CHECK (event_type_from ~ '^(header|body):[^|]+(\|(header|body):[^|]+)*$'),
    created_at      timestamptz NOT NULL DEFAULT pg_catalog.now(),
    -- Inbox mode: webhook_receive stores and queues each delivery and
    -- answers 2xx at once; workers process it later.
    inbox           boolean     NOT NULL DEFAULT false,
    -- The inbox's consumers of this provider's events; none: 'default'.
    consumers       text[]      NOT NULL DEFAULT '{}'
                    CONSTRAINT providers_consumers_check
                    CHECK (pg_catalog.array_to_string(consumers, ',') ~ '^([a-z0-9][a-z0-9_.-]{0,63}(,|$))*$'),
    -- Ordering (both set, or neither): where the entity an event is about
    -- and its order value are. Body paths only: the body is what every
    -- scheme signs, and an unsigned header must never move a watermark.
    entity_key_from text
                    CONSTRAINT providers_entity_key_from_check
                    CHECK (entity_key_from ~ '^body:[^|]+(\|body:[^|]+)*$'),
    order_from      text
                    CONSTRAINT providers_order_from_check
                    CHECK (order_from ~ '^body:[^|]+(\|body:[^|]+)*$'),
    -- An event as new as its entity's watermark: processed, or stale.
    ties            text        NOT NULL DEFAULT 'process'
                    CONSTRAINT providers_ties_check CHECK (ties IN ('process', 'stale')),
    -- Inbox: never lease an event while an earlier one of its entity is
    -- leased or backing off.
    fifo            boolean     NOT NULL DEFAULT false,
    CONSTRAINT providers_pkey PRIMARY KEY (name),
    CONSTRAINT providers_ordering_check CHECK ((entity_key_from IS NULL) = (order_from IS NULL)),
    CONSTRAINT providers_fifo_check CHECK (NOT fifo OR entity_key_from IS NOT NULL)
);

COMMENT ON TABLE webhook.providers IS
    'Registered providers: signature scheme, timestamp tolerance, where the event id and type are';

COMMENT ON COLUMN webhook.providers.name IS 'The name handlers pass to webhook_receive';
COMMENT ON COLUMN webhook.providers.scheme IS 'Signature scheme (webhook_schemes()), or a generic hmac;header=... string';
COMMENT ON COLUMN webhook.providers.tolerance IS 'How far a signed timestamp may be from now; NULL: the scheme''s default';
COMMENT ON COLUMN webhook.providers.event_id_from IS 'Where the event id is: header:<name> or body:<dotted.path>, alternatives joined by |';
COMMENT ON COLUMN webhook.providers.event_type_from IS 'Where the event type is, in the same form';
COMMENT ON COLUMN webhook.providers.created_at IS 'When the provider was registered';
COMMENT ON COLUMN webhook.providers.inbox IS 'Inbox mode: webhook_receive queues each delivery and answers 2xx at once';
COMMENT ON COLUMN webhook.providers.consumers IS 'The inbox consumers each event is queued for; empty: default';
COMMENT ON COLUMN webhook.providers.entity_key_from IS 'Ordering: where the entity an event is about is, body:<dotted.path> alternatives joined by |; NULL: unordered';
COMMENT ON COLUMN webhook.providers.order_from IS 'Ordering: where the event''s order value (number or RFC 3339 timestamp) is, in the same form';
COMMENT ON COLUMN webhook.providers.ties IS 'Ordering: an event as new as its entity''s watermark is processed (process) or skipped (stale)';
COMMENT ON COLUMN webhook.providers.fifo IS 'Ordering in the inbox: an event is not leased while an earlier one of its entity is leased or backing off';

-- Signing secrets, several per provider while rotating. Readable by no one
-- but the extension owner; listed by fingerprint only.
CREATE TABLE webhook.provider_secrets (
    provider    text        NOT NULL
                CONSTRAINT provider_secrets_provider_fkey
                REFERENCES webhook.providers (name) ON DELETE CASCADE,
    secret      text        NOT NULL CONSTRAINT provider_secrets_secret_check CHECK (secret <> ''),
    -- First 16 hex digits of the secret's SHA-256: how it is listed.
    fingerprint text        NOT NULL,
    added_at    timestamptz NOT NULL DEFAULT pg_catalog.now(),
    retired_at  timestamptz,
    CONSTRAINT provider_secrets_pkey PRIMARY KEY (provider, fingerprint)
);

COMMENT ON TABLE webhook.provider_secrets IS
    'Signing secrets per provider; active while retired_at is NULL. Never granted to anyone.';

COMMENT ON COLUMN webhook.provider_secrets.provider IS 'Provider name';
COMMENT ON COLUMN webhook.provider_secrets.secret IS 'The signing secret, as the provider shows it; readable by the extension owner only';
COMMENT ON COLUMN webhook.provider_secrets.fingerprint IS 'First 16 hex digits of the secret''s SHA-256: how it is listed';
COMMENT ON COLUMN webhook.provider_secrets.added_at IS 'When it was added (the newest is tried first)';
COMMENT ON COLUMN webhook.provider_secrets.retired_at IS 'When it was retired; NULL while active';

-- When each secret last verified a delivery, to the minute: written at
-- most once a minute, by whichever delivery finds it stale and unlocked.
-- A row of its own, apart from the secret's: the handler transaction that
-- noted a use holds this row until it ends, and retiring the secret must
-- not wait for it (the foreign key's share lock on the secret does not
-- stop an update of retired_at).
CREATE TABLE webhook.secret_uses (
    provider     text        NOT NULL,
    fingerprint  text        NOT NULL,
    -- NULL until it first verifies a delivery.
    last_used_at timestamptz,
    CONSTRAINT secret_uses_pkey PRIMARY KEY (provider, fingerprint),
    CONSTRAINT secret_uses_secret_fkey FOREIGN KEY (provider, fingerprint)
        REFERENCES webhook.provider_secrets (provider, fingerprint) ON DELETE CASCADE
);
COMMENT ON TABLE webhook.secret_uses IS 'When each provider secret last verified a delivery (kept to the minute)';
COMMENT ON COLUMN webhook.secret_uses.provider IS 'Provider name';
COMMENT ON COLUMN webhook.secret_uses.fingerprint IS 'The secret''s fingerprint';
COMMENT ON COLUMN webhook.secret_uses.last_used_at IS 'When it last verified a delivery, to the minute; NULL if never';

-- Application roles scoped to some providers (and inbox consumers), for a
-- DBA serving several teams from one database. Written through
-- webhook_scope_app() and webhook_unscope_app(); a role listed nowhere is
-- not scoped. Read by every application function, cached per backend
-- like the registry (src/registry.rs).
CREATE TABLE webhook.app_scopes (
    role      regrole     NOT NULL CONSTRAINT app_scopes_pkey PRIMARY KEY,
    providers text[]      NOT NULL CONSTRAINT app_scopes_providers_check
              CHECK (pg_catalog.cardinality(providers) BETWEEN 1 AND 1000
                     AND pg_catalog.array_position(providers, NULL) IS NULL
                     AND '' <> ALL (providers)),
    -- NULL: every consumer of those providers.
    consumers text[]      CONSTRAINT app_scopes_consumers_check
              CHECK (pg_catalog.cardinality(consumers) BETWEEN 1 AND 1000
                     AND pg_catalog.array_position(consumers, NULL) IS NULL
                     AND '' <> ALL (consumers)),
    scoped_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    scoped_by name        NOT NULL DEFAULT SESSION_USER
);

COMMENT ON TABLE webhook.app_scopes IS
    'Application roles scoped to some providers and consumers (webhook_scope_app); a session acting as such a role, or inheriting its privileges, may use only these';

COMMENT ON COLUMN webhook.app_scopes.role IS 'The scoped role';
COMMENT ON COLUMN webhook.app_scopes.providers IS 'The providers it may receive, claim, queue, lease and finish events of';
COMMENT ON COLUMN webhook.app_scopes.consumers IS 'The inbox consumers it may lease and finish events of; NULL for every consumer';
COMMENT ON COLUMN webhook.app_scopes.scoped_at IS 'When the scope was set';
COMMENT ON COLUMN webhook.app_scopes.scoped_by IS 'Who set it (the session user)';

-- A random key made at install, readable by the extension's owner only.
-- The portable edition keeps what a transaction has done so far (the
-- claims whose commit completes their event) in a setting, which any
-- role can write; it seals the value with an HMAC under this key, bound
-- to the backend and the transaction, and takes a value it did not seal
-- for none (portable/plumbing.sql, webhook._state). The compiled
-- edition keeps that state in its backend's memory and never reads it.
-- Not dumped: a restore's install makes a key of its own, and a sealed
-- value lives no longer than its transaction.
CREATE TABLE webhook.state_key (
    one boolean NOT NULL DEFAULT true CONSTRAINT state_key_pkey PRIMARY KEY
        CONSTRAINT state_key_one_check CHECK (one),
    key bytea   NOT NULL
);
INSERT INTO webhook.state_key (key)
SELECT pg_catalog.decode(pg_catalog.replace(pg_catalog.gen_random_uuid()::text || pg_catalog.gen_random_uuid()::text,
                                            '-', ''), 'hex');
COMMENT ON TABLE webhook.state_key IS
    'The key the portable edition seals a transaction''s state with; the extension owner''s alone';
COMMENT ON COLUMN webhook.state_key.one IS 'Always true: the table holds one row';
COMMENT ON COLUMN webhook.state_key.key IS 'Random bytes made at install';

-- The locks of the extension's own maintenance: one run at a time of
-- the archive's partitioning and purging (with the backfills and replays
-- that add inbox rows while it decides), of the metrics' rollup, of alert
-- evaluation, of replays. Each is a row here, locked FOR UPDATE by the
-- run that holds it: a table only the extension's owner may touch, so no
-- other role can take such a lock and stop the maintenance, as it could
-- an advisory lock on a known key (pg_advisory_lock is PUBLIC's).
CREATE TABLE webhook.maintenance_locks (
    name text NOT NULL CONSTRAINT maintenance_locks_pkey PRIMARY KEY
);
INSERT INTO webhook.maintenance_locks (name)
VALUES ('archive partitions'), ('metrics'), ('alerts'), ('replay');
COMMENT ON TABLE webhook.maintenance_locks IS
    'A row per kind of maintenance, locked by the one run of it at a time; the extension owner''s alone';
COMMENT ON COLUMN webhook.maintenance_locks.name IS 'The kind of maintenance';

-- Nobody but the extension's functions writes here. (New tables grant
-- nothing to PUBLIC; these statements make that explicit for DBAs.)
REVOKE ALL ON SCHEMA webhook FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA webhook FROM PUBLIC;

-- Give the install schema back to the statements that follow.
SELECT pg_catalog.set_config('search_path', '@extschema@, pg_temp', true);
