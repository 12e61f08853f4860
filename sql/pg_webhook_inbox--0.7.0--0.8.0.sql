-- pg_webhook_inbox 0.7.0 → 0.8.0
--
-- What changes (CHANGELOG.md says why):
--   * webhook.delivery_log is partitioned by range of id, one partition a
--     day (UTC), made ahead by the new webhook_create_partitions; what no
--     day's partition covers goes to webhook.delivery_log_default. The
--     view webhook.archive_partitions lists them.
--   * webhook_purge drops a day's partition whole once the day is older
--     than older_than, moving the deliveries it must keep to the default
--     partition; the rest is purged row by row as before.
--   * webhook.delivery_failures no longer has a foreign key to the
--     archive: the purge removes the two together.
--   * webhook_enqueue and idempotency_begin return one row of
--     webhook.enqueue_result and webhook.idempotency_begin_result instead
--     of a set of one row: the same columns, one call instead of two.
--   * webhook_grant_operator also grants webhook.archive_partitions and
--     webhook_create_partitions; roles granted before get them here.
--
-- The archive as it is becomes the partition webhook.delivery_log_history,
-- holding every id made before the next midnight (UTC): attaching it reads
-- it once, to check that. It is the database's table from then on, not the
-- extension's (pg_dump keeps it with its rows), is purged row by row, and
-- is dropped whole by webhook_purge once the midnight after this update is
-- older than older_than. Deliveries from that midnight on go to the days'
-- partitions: run SELECT webhook_create_partitions() after this update, and
-- schedule it.
-- 0.7.0's SQL keeps working with the 0.8.0 library until this script runs.

-- Everything bound in this script is bound to pg_catalog (see schema.sql).
SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);

------------------------------------------------------------------------------
-- The archive as it was: renamed, to become a partition of the new one.

ALTER TABLE webhook.delivery_failures DROP CONSTRAINT delivery_failures_delivery_id_fkey;
COMMENT ON COLUMN webhook.delivery_failures.delivery_id IS 'The delivery whose attempt failed';

ALTER TABLE webhook.delivery_log RENAME TO delivery_log_history;
ALTER INDEX webhook.delivery_log_pkey RENAME TO delivery_log_history_pkey;
ALTER INDEX webhook.delivery_log_event_idx RENAME TO delivery_log_history_event_idx;
ALTER INDEX webhook.delivery_log_created_at_idx RENAME TO delivery_log_history_created_at_idx;
ALTER INDEX webhook.delivery_log_attention_idx RENAME TO delivery_log_history_attention_idx;
-- PostgreSQL 18 names NOT NULL constraints too: free the names the new
-- table's will take.
DO $$
DECLARE
    c record;
BEGIN
    FOR c IN
        SELECT conname FROM pg_catalog.pg_constraint
         WHERE conrelid = 'webhook.delivery_log_history'::pg_catalog.regclass
           AND conname LIKE 'delivery\_log\_%\_not\_null'
    LOOP
        EXECUTE pg_catalog.format('ALTER TABLE webhook.delivery_log_history RENAME CONSTRAINT %I TO %I',
                                  c.conname, pg_catalog.replace(c.conname, 'delivery_log_', 'delivery_log_history_'));
    END LOOP;
END
$$;

------------------------------------------------------------------------------
-- The partitioned archive (as in schema.sql).

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
    secret_fingerprint text
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
COMMENT ON COLUMN webhook.delivery_log.secret_fingerprint IS 'The fingerprint of the secret, public key or certificate that verified the delivery (webhook_receive); NULL when the caller verified it';


DO $$
DECLARE
    midnight timestamptz := (((pg_catalog.now() AT TIME ZONE 'UTC')::date + 1)::timestamp) AT TIME ZONE 'UTC';
BEGIN
    EXECUTE pg_catalog.format(
        'ALTER TABLE webhook.delivery_log ATTACH PARTITION webhook.delivery_log_history FOR VALUES FROM (MINVALUE) TO (%L)',
        webhook._archive_bound(midnight));
END
$$;
ALTER EXTENSION pg_webhook_inbox DROP TABLE webhook.delivery_log_history;
COMMENT ON TABLE webhook.delivery_log_history IS
    'The archive as it was before partitioning: a partition of webhook.delivery_log, purged row by row, dropped whole once its last day is older than webhook_purge''s older_than';

SELECT pg_catalog.pg_extension_config_dump('webhook.delivery_log_default', '');

------------------------------------------------------------------------------
-- The views over the archive, bound to the new table.

CREATE OR REPLACE VIEW webhook.deliveries AS
SELECT l.id, l.provider, l.event_id, l.event_type, l.payload, l.raw_body, l.signature, l.headers,
       l.claim_status,
       CASE
           WHEN l.claim_status = 'rejected' THEN 'REJECTED'
           WHEN l.claim_status::text = 'handshake' THEN 'HANDSHAKE'
           WHEN l.claim_status IN ('duplicate', 'in_progress', 'dead') OR l.claim_status::text = 'stale'
               THEN 'SKIPPED'
           -- Queued for the inbox: done when every consumer is; skipped
           -- when every consumer found it stale.
           WHEN l.claim_status::text = 'queued' THEN
               CASE
                   WHEN EXISTS (SELECT FROM webhook.inbox i
                                 WHERE i.provider = l.provider AND i.event_id = l.event_id
                                   AND i.status = 'dead') THEN 'FAILED'
                   WHEN EXISTS (SELECT FROM webhook.inbox i
                                 WHERE i.provider = l.provider AND i.event_id = l.event_id
                                   AND i.status::text NOT IN ('processed', 'stale')) THEN 'QUEUED'
                   WHEN EXISTS (SELECT FROM webhook.inbox i
                                 WHERE i.provider = l.provider AND i.event_id = l.event_id
                                   AND i.status = 'processed') THEN 'PROCESSED'
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

CREATE OR REPLACE VIEW webhook.recent_failures AS
SELECT l.id, l.provider, l.event_id, l.event_type, l.claim_status, f.error_message,
       l.created_at, f.failed_at, e.status AS event_status, e.attempts
  FROM webhook.delivery_failures f
  JOIN webhook.delivery_log l ON l.id = f.delivery_id
  LEFT JOIN webhook.events e ON e.provider = l.provider AND e.event_id = l.event_id
 WHERE f.failed_at > pg_catalog.now() - interval '1 day';
CREATE OR REPLACE VIEW webhook.rejected_deliveries AS
-- raw_body holds only the first webhook.rejected_body_limit bytes of each.
SELECT id, provider, reject_reason AS reason, event_id, signature, headers,
       coalesce(body_size, pg_catalog.octet_length(raw_body)) AS body_bytes, created_at,
       body_sha256, raw_body AS body_prefix
  FROM webhook.delivery_log
 WHERE claim_status = 'rejected';
CREATE OR REPLACE VIEW webhook.payload_mismatches AS
SELECT l.id, l.provider, l.event_id, l.event_type, l.claim_status, l.payload, l.created_at
  FROM webhook.delivery_log l
 WHERE l.payload_mismatch;
------------------------------------------------------------------------------
-- Partition maintenance and the purge (as in operations.sql).

-- The archive's partitions, oldest first: each day's, the default one
-- (no bounds), and after an upgrade from a release before partitioning,
-- the one holding everything archived before it (no lower bound).
CREATE VIEW webhook.archive_partitions AS
SELECT c.oid::pg_catalog.regclass AS partition,
       b.lower_id IS NULL AND b.upper_id IS NULL AS is_default,
       b.lower_id, b.upper_id,
       -- The milliseconds in an id's first 48 bits.
       pg_catalog.to_timestamp(('x' || pg_catalog.substr(pg_catalog.replace(b.lower_id::text, '-', ''), 1, 12))::bit(48)::bigint
                               / 1000.0) AS from_time,
       pg_catalog.to_timestamp(('x' || pg_catalog.substr(pg_catalog.replace(b.upper_id::text, '-', ''), 1, 12))::bit(48)::bigint
                               / 1000.0) AS to_time,
       GREATEST(c.reltuples, 0)::bigint AS rows_estimate,
       pg_catalog.pg_total_relation_size(c.oid) AS total_bytes
  FROM pg_catalog.pg_inherits i
  JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
 CROSS JOIN LATERAL (
       SELECT m[1]::uuid AS lower_id, m[2]::uuid AS upper_id
         FROM pg_catalog.regexp_match(pg_catalog.pg_get_expr(c.relpartbound, c.oid),
                                      'FROM \((?:''([0-9a-f-]+)''|MINVALUE)\) TO \((?:''([0-9a-f-]+)''|MAXVALUE)\)') AS m
       ) AS b
 WHERE i.inhparent = 'webhook.delivery_log'::pg_catalog.regclass
 ORDER BY b.upper_id NULLS LAST;
COMMENT ON VIEW webhook.archive_partitions IS
    'The partitions of webhook.delivery_log: the ids and times each covers (none: the default partition), rows (estimated) and size';

-- Create the archive's partition for one day (UTC), unless a partition
-- covers part of it already, or some of its deliveries are in the default
-- partition (no partition was there when they came): they stay there.
-- The partition is made apart and then attached, which lets claims go on
-- meanwhile. Returns whether it created it.
CREATE FUNCTION webhook._create_archive_partition(day date) RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    lo   uuid := webhook._archive_bound((day::timestamp) AT TIME ZONE 'UTC');
    hi   uuid := webhook._archive_bound(((day + 1)::timestamp) AT TIME ZONE 'UTC');
    name text := 'delivery_log_' || pg_catalog.to_char(day, 'YYYYMMDD');
BEGIN
    IF EXISTS (SELECT FROM webhook.archive_partitions p
                WHERE NOT p.is_default AND (p.lower_id IS NULL OR p.lower_id < hi) AND p.upper_id > lo)
       OR EXISTS (SELECT FROM webhook.delivery_log_default d WHERE d.id >= lo AND d.id < hi) THEN
        RETURN false;
    END IF;
    EXECUTE pg_catalog.format(
        'CREATE TABLE webhook.%I (LIKE webhook.delivery_log INCLUDING DEFAULTS INCLUDING STORAGE INCLUDING COMPRESSION)',
        name);
    PERFORM webhook._prepare_archive_partition(pg_catalog.format('webhook.%I', name)::pg_catalog.regclass);
    EXECUTE pg_catalog.format('ALTER TABLE webhook.delivery_log ATTACH PARTITION webhook.%I FOR VALUES FROM (%L) TO (%L)',
                              name, lo, hi);
    RETURN true;
EXCEPTION WHEN check_violation THEN
    -- A delivery of that day reached the default partition after the
    -- check above: the day stays there.
    RETURN false;
END
$$;
COMMENT ON FUNCTION webhook._create_archive_partition(date) IS
    'Internal: create and attach the archive''s partition for one day (UTC), if nothing of that day is elsewhere';

-- Create the archive's partitions for today (UTC) and the next days_ahead
-- days, those that do not exist yet. Schedule it daily at least (with
-- pg_cron: SELECT cron.schedule('webhook-partitions', '15 * * * *',
-- 'SELECT webhook_create_partitions()')); without it, deliveries land in
-- webhook.delivery_log_default, which works but is purged row by row.
-- Returns how many partitions it created.
CREATE FUNCTION @extschema@.webhook_create_partitions(days_ahead integer DEFAULT 7)
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    today date := (pg_catalog.now() AT TIME ZONE 'UTC')::date;
BEGIN
    IF days_ahead IS NULL OR days_ahead < 0 OR days_ahead > 366 THEN
        RAISE EXCEPTION 'webhook_create_partitions: argument "days_ahead" must be between 0 and 366'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- One maintenance at a time (webhook_purge takes the same lock).
    PERFORM pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('pg_webhook_inbox archive partitions'));
    RETURN (SELECT pg_catalog.count(*) FILTER (WHERE webhook._create_archive_partition(today + i))
              FROM pg_catalog.generate_series(0, days_ahead) AS i);
END
$$;
COMMENT ON FUNCTION @extschema@.webhook_create_partitions(integer) IS
    'Create the archive''s daily partitions (UTC) for today and the next days_ahead days; returns how many it created. Schedule it daily';

-- Remove archive rows older than `older_than`, except the deliveries of
-- events not finished: processing, failed, dead, or queued and not yet
-- processed by every consumer (the workers read the payload from here).
-- Deliveries of no event (rejections, handshakes) go too. Inbox rows
-- processed before the cutoff go, with their failures. webhook.events is
-- never touched: a replay after the purge is still a duplicate. Returns
-- the number of archive rows removed.
--
-- A day's partition wholly older than the cutoff is dropped whole, with
-- almost no WAL: the deliveries it must keep are first moved to the
-- default partition, and their failures stay. Finding them reads the
-- day's event index and looks each event up once; nothing is written for
-- the rest. The default partition (and the partition holding what was
-- archived before an upgrade to partitioning) is purged row by row,
-- `batch_size` rows per statement; pass max_batches for a large backlog
-- and call it repeatedly. Dropping a partition locks the archive until
-- the transaction ends: call it on its own, not inside other work.
CREATE OR REPLACE FUNCTION @extschema@.webhook_purge(
    older_than  interval DEFAULT '90 days',
    batch_size  integer  DEFAULT 10000,
    max_batches integer  DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    -- An event whose deliveries must stay (as `e`): not finished, or
    -- queued and not finished by every consumer. The one rule, for both
    -- ways of purging; a delivery of no such event may go.
    unfinished CONSTANT text := $rule$
        NOT (e.status IN ('processed', 'stale')
             OR (e.status = 'queued'
                 AND NOT EXISTS (SELECT FROM webhook.inbox i
                                  WHERE i.provider = e.provider AND i.event_id = e.event_id
                                    AND i.status NOT IN ('processed', 'stale'))))$rule$;
    columns CONSTANT text := 'id, provider, event_id, event_type, payload, raw_body, signature, headers, '
                             'claim_status, reject_reason, payload_mismatch, created_at, body_size, '
                             'body_sha256, secret_fingerprint';
    cutoff    timestamptz;
    deleted   bigint := 0;
    batch     bigint;
    batches   integer;
    part      record;
    total     bigint;
    kept      uuid[];
    kept_all  uuid[] := '{}';
    days      pg_catalog.regclass[] := '{}';
    day       pg_catalog.regclass;
BEGIN
    IF older_than IS NULL OR older_than <= interval '0' THEN
        RAISE EXCEPTION 'webhook_purge: argument "older_than" must be a positive interval'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF batch_size IS NULL OR batch_size < 1 THEN
        RAISE EXCEPTION 'webhook_purge: argument "batch_size" must be at least 1'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF max_batches IS NOT NULL AND max_batches < 1 THEN
        RAISE EXCEPTION 'webhook_purge: argument "max_batches" must be at least 1'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('pg_webhook_inbox archive partitions'));
    cutoff := pg_catalog.now() - older_than;

    -- Row by row where a partition spans more than a day, before any lock
    -- on the archive as a whole is taken.
    FOR part IN
        SELECT p.partition FROM webhook.archive_partitions p
         WHERE p.is_default OR (p.lower_id IS NULL AND p.upper_id > webhook._archive_bound(cutoff))
    LOOP
        batches := 0;
        LOOP
            EXECUTE pg_catalog.format($sql$
                WITH gone AS (
                    DELETE FROM %1$s
                     WHERE ctid = ANY (ARRAY(SELECT l.ctid FROM %1$s l
                                              WHERE l.created_at < $1
                                                AND NOT EXISTS (SELECT FROM webhook.events e
                                                                 WHERE e.provider = l.provider
                                                                   AND e.event_id = l.event_id AND %2$s)
                                              LIMIT $2))
                    RETURNING id
                ), failures AS (
                    DELETE FROM webhook.delivery_failures f USING gone WHERE f.delivery_id = gone.id
                )
                SELECT count(*) FROM gone$sql$, part.partition, unfinished)
            INTO batch USING cutoff, batch_size;
            deleted := deleted + batch;
            batches := batches + 1;
            EXIT WHEN batch < batch_size OR batches >= coalesce(max_batches, batches + 1);
        END LOOP;
    END LOOP;

    DELETE FROM webhook.inbox_failures f
     WHERE f.failed_at < cutoff
       AND EXISTS (SELECT FROM webhook.inbox i
                    WHERE (i.provider, i.event_id, i.consumer) = (f.provider, f.event_id, f.consumer)
                      AND i.status IN ('processed', 'stale') AND i.processed_at < cutoff);
    DELETE FROM webhook.inbox i WHERE i.status IN ('processed', 'stale') AND i.processed_at < cutoff;

    -- Whole days, oldest first. Each is read before any is detached: the
    -- first detach locks the archive until the transaction ends, and
    -- claims wait for only what follows it.
    FOR part IN
        SELECT p.partition FROM webhook.archive_partitions p
         WHERE NOT p.is_default AND p.upper_id <= webhook._archive_bound(cutoff)
         ORDER BY p.upper_id
    LOOP
        -- The day's events, each looked up once (its event index holds
        -- them all): the deliveries of those unfinished stay.
        EXECUTE pg_catalog.format($sql$
            SELECT coalesce(array_agg(l.id), '{}')
              FROM (SELECT DISTINCT d.provider, d.event_id FROM %1$s d WHERE d.event_id IS NOT NULL) AS k
              JOIN webhook.events e ON e.provider = k.provider AND e.event_id = k.event_id
              JOIN %1$s l ON l.provider = k.provider AND l.event_id = k.event_id
             WHERE %2$s$sql$, part.partition, unfinished)
        INTO kept;
        kept_all := kept_all || kept;
        EXECUTE pg_catalog.format('SELECT count(*) FROM %s', part.partition) INTO total;
        deleted := deleted + total - pg_catalog.cardinality(kept);
        days := days || part.partition;
    END LOOP;
    FOREACH day IN ARRAY days LOOP
        SELECT p.lower_id, p.upper_id INTO part FROM webhook.archive_partitions p WHERE p.partition = day;
        EXECUTE pg_catalog.format('ALTER TABLE webhook.delivery_log DETACH PARTITION %s', day);
        -- No partition covers their ids any more: they go to the default
        -- partition, under the same ids.
        EXECUTE pg_catalog.format('INSERT INTO webhook.delivery_log (%1$s) SELECT %1$s FROM %2$s WHERE id = ANY ($1)',
                                  columns, day)
        USING kept_all;
        DELETE FROM webhook.delivery_failures f
         WHERE (part.lower_id IS NULL OR f.delivery_id >= part.lower_id) AND f.delivery_id < part.upper_id
           AND f.delivery_id <> ALL (kept_all);
        EXECUTE pg_catalog.format('DROP TABLE %s', day);
    END LOOP;
    RETURN deleted;
END
$$;
COMMENT ON FUNCTION @extschema@.webhook_purge(interval, integer, integer) IS
    'Remove archive rows older than older_than whose event is processed by everyone (and rejections): whole days by dropping their partition, the rest row by row; and old processed inbox rows. Never touches webhook.events. Returns the archive rows removed';

------------------------------------------------------------------------------
-- Grant an operator role the archive, the views and the maintenance
-- functions; never the secrets.
CREATE OR REPLACE FUNCTION @extschema@.webhook_grant_operator(role regrole)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA webhook TO %s', role);
    EXECUTE format('GRANT SELECT ON webhook.events, webhook.deliveries, webhook.delivery_log,
        webhook.delivery_failures, webhook.signature_bindings, webhook.providers,
        webhook.provider_summary, webhook.recent_failures, webhook.stuck_claims,
        webhook.rejected_deliveries, webhook.dead_letters, webhook.payload_mismatches,
        webhook.provider_stats, webhook.inbox, webhook.inbox_failures, webhook.inbox_stats,
        webhook.requeues, webhook.watermarks, webhook.blocked_entities,
        webhook.secret_usage, webhook.idempotency_keys, webhook.archive_partitions TO %s', role);
    EXECUTE format('GRANT EXECUTE ON FUNCTION
        @extschema@.webhook_requeue(text, text, text),
        @extschema@.webhook_requeue_dead(text, text, text, timestamptz, timestamptz, text),
        @extschema@.webhook_purge(interval, integer, integer),
        @extschema@.webhook_create_partitions(integer),
        @extschema@.webhook_reset_watermark(text, text, text),
        @extschema@.webhook_providers(),
        @extschema@.idempotency_purge(interval)
        TO %s', role);
END
$$;
COMMENT ON FUNCTION @extschema@.webhook_grant_operator(regrole) IS
    'Grant an operator role the archive, the inbox, the watermarks, the idempotency keys, the views (secret usage by fingerprint included), webhook_requeue, webhook_requeue_dead, webhook_purge, webhook_create_partitions, webhook_reset_watermark, webhook_providers and idempotency_purge; never the secrets';

------------------------------------------------------------------------------
-- webhook_enqueue and idempotency_begin return one row of a composite type
-- instead of a set of one row: each old function is renamed, the new one
-- created, the old one's grants carried over, and the old one dropped.

CREATE TYPE webhook.enqueue_result AS (
    id      uuid,     -- the delivery
    queued  boolean,  -- true: the event is new, and queued for the workers
    status  text      -- queued, or duplicate
);
COMMENT ON TYPE webhook.enqueue_result IS 'The answer of webhook_enqueue: one row';
CREATE TYPE webhook.idempotency_begin_result AS (
    outcome          text,   -- new, in_progress, replay or mismatch
    request_id       uuid,   -- new: what the request's later calls take
    http_status      integer,
    recovery_point   text,   -- new: the last step an earlier attempt passed
    recovery         jsonb,  -- new: each passed step's output
    response_headers jsonb,  -- replay: the stored response
    response_body    text
);
COMMENT ON TYPE webhook.idempotency_begin_result IS 'The answer of idempotency_begin: one row';

ALTER FUNCTION @extschema@.webhook_enqueue(text, text, text, jsonb, text) RENAME TO webhook_enqueue_0_7_0;
ALTER FUNCTION @extschema@.webhook_enqueue(text, text, text, bytea, text) RENAME TO webhook_enqueue_0_7_0;
ALTER FUNCTION @extschema@.webhook_enqueue(text, text, text, text, text) RENAME TO webhook_enqueue_0_7_0;
ALTER FUNCTION @extschema@.idempotency_begin(text, text, text, interval) RENAME TO idempotency_begin_0_7_0;

CREATE FUNCTION @extschema@."webhook_enqueue"(
	"provider" TEXT,
	"event_id" TEXT,
	"event_type" TEXT,
	"payload" jsonb,
	"signature" TEXT DEFAULT NULL
) RETURNS webhook.enqueue_result
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'enqueue_payload_wrapper';
CREATE FUNCTION @extschema@."webhook_enqueue"(
	"provider" TEXT,
	"event_id" TEXT,
	"event_type" TEXT,
	"body" bytea,
	"signature" TEXT DEFAULT NULL
) RETURNS webhook.enqueue_result
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'enqueue_body_wrapper';
CREATE FUNCTION @extschema@."webhook_enqueue"(
	"provider" TEXT,
	"event_id" TEXT,
	"event_type" TEXT,
	"body" TEXT,
	"signature" TEXT DEFAULT NULL
) RETURNS webhook.enqueue_result
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'enqueue_body_text_wrapper';
CREATE FUNCTION @extschema@."idempotency_begin"(
	"scope" TEXT,
	"key" TEXT,
	"fingerprint" TEXT,
	"lease" interval DEFAULT '1 minute'
) RETURNS webhook.idempotency_begin_result
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'begin_keyed_request_wrapper';
COMMENT ON FUNCTION @extschema@.idempotency_begin(text, text, text, interval) IS
    'Begin a request carrying an idempotency key: new (owned under a lease; resume from recovery_point), in_progress (409), replay (the stored response) or mismatch (422)';
COMMENT ON FUNCTION @extschema@.webhook_enqueue(text, text, text, jsonb, text) IS
    'Queue a delivery the caller verified (payload as jsonb) for inbox workers: queued (new) or duplicate; answer 2xx either way';
COMMENT ON FUNCTION @extschema@.webhook_enqueue(text, text, text, bytea, text) IS
    'webhook_enqueue with the raw body, archived byte for byte';
COMMENT ON FUNCTION @extschema@.webhook_enqueue(text, text, text, text, text) IS
    'webhook_enqueue with the raw body passed as text';

DO $$
DECLARE
    pair   record;
    grant_ record;
BEGIN
    FOR pair IN
        SELECT o.oid AS old, n.oid AS new, o.proacl IS NULL AS default_acl
          FROM pg_catalog.pg_proc o
          JOIN pg_catalog.pg_proc n
            ON n.pronamespace = o.pronamespace
           AND n.proname || '_0_7_0' = o.proname
           AND n.proargtypes = o.proargtypes
         WHERE o.proname IN ('webhook_enqueue_0_7_0', 'idempotency_begin_0_7_0')
    LOOP
        CONTINUE WHEN pair.default_acl;
        EXECUTE pg_catalog.format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', pair.new::pg_catalog.regprocedure);
        FOR grant_ IN
            SELECT a.privilege_type,
                   CASE WHEN a.grantee = 0 THEN 'PUBLIC'
                        ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(a.grantee)) END AS grantee
              FROM pg_catalog.pg_proc p
             CROSS JOIN LATERAL pg_catalog.aclexplode(p.proacl) a
             WHERE p.oid = pair.old AND a.grantee <> p.proowner
        LOOP
            EXECUTE pg_catalog.format('GRANT %s ON FUNCTION %s TO %s',
                                      grant_.privilege_type, pair.new::pg_catalog.regprocedure, grant_.grantee);
        END LOOP;
        -- Initial privileges as a fresh install records them (the owner
        -- alone): a GRANT in an extension script would record the DBA's
        -- grants as the extension's own, and pg_dump would leave them out.
        UPDATE pg_catalog.pg_init_privs i
           SET initprivs = ARRAY[pg_catalog.makeaclitem(p.proowner, p.proowner, 'EXECUTE', false)]
          FROM pg_catalog.pg_proc p
         WHERE p.oid = pair.new AND i.objoid = p.oid
           AND i.classoid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND i.objsubid = 0;
    END LOOP;
END
$$;

DROP FUNCTION @extschema@.webhook_enqueue_0_7_0(text, text, text, jsonb, text);
DROP FUNCTION @extschema@.webhook_enqueue_0_7_0(text, text, text, bytea, text);
DROP FUNCTION @extschema@.webhook_enqueue_0_7_0(text, text, text, text, text);
DROP FUNCTION @extschema@.idempotency_begin_0_7_0(text, text, text, interval);

------------------------------------------------------------------------------
-- Privileges: the rule for the new functions, then what roles held on
-- the old archive and functions, carried to the new ones. Grants made in
-- this script would be recorded as the extension's initial privileges,
-- which pg_dump leaves out: they are set back to a fresh install's.

SELECT webhook._restrict_privileges();
REVOKE ALL ON webhook.delivery_log, webhook.delivery_log_default, webhook.archive_partitions FROM PUBLIC;

DO $$
DECLARE
    grant_ record;
BEGIN
    FOR grant_ IN
        SELECT 'SELECT' AS privilege, 'TABLE ' || t.object AS object,
               pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(a.grantee)) AS grantee
          FROM pg_catalog.pg_class c
         CROSS JOIN LATERAL pg_catalog.aclexplode(c.relacl) a
         CROSS JOIN (VALUES ('webhook.delivery_log'), ('webhook.archive_partitions')) AS t(object)
         WHERE c.oid = 'webhook.delivery_log_history'::pg_catalog.regclass
           AND a.privilege_type = 'SELECT' AND a.grantee NOT IN (0, c.relowner)
        UNION ALL
        SELECT 'EXECUTE', 'FUNCTION @extschema@.webhook_create_partitions(integer)',
               pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(a.grantee))
          FROM pg_catalog.pg_proc p
         CROSS JOIN LATERAL pg_catalog.aclexplode(p.proacl) a
         WHERE p.oid = '@extschema@.webhook_purge(interval, integer, integer)'::pg_catalog.regprocedure
           AND a.privilege_type = 'EXECUTE' AND a.grantee NOT IN (0, p.proowner)
    LOOP
        EXECUTE pg_catalog.format('GRANT %s ON %s TO %s', grant_.privilege, grant_.object, grant_.grantee);
    END LOOP;
    UPDATE pg_catalog.pg_init_privs i
       SET initprivs = ARRAY[pg_catalog.makeaclitem(p.proowner, p.proowner, 'EXECUTE', false)]
      FROM pg_catalog.pg_proc p
     WHERE p.oid = '@extschema@.webhook_create_partitions(integer)'::pg_catalog.regprocedure
       AND i.objoid = p.oid AND i.classoid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND i.objsubid = 0;
    UPDATE pg_catalog.pg_init_privs i
       SET initprivs = pg_catalog.acldefault('r', c.relowner)
      FROM pg_catalog.pg_class c
     WHERE c.oid IN ('webhook.delivery_log'::pg_catalog.regclass, 'webhook.delivery_log_default'::pg_catalog.regclass,
                     'webhook.archive_partitions'::pg_catalog.regclass)
       AND i.objoid = c.oid AND i.classoid = 'pg_catalog.pg_class'::pg_catalog.regclass AND i.objsubid = 0;
END
$$;

SELECT pg_catalog.set_config('search_path', '@extschema@, pg_temp', true);
