-- pg_webhook_inbox 0.10.0 → 0.11.0.
--
-- Every change to the SQL surface between the two published releases;
-- the upgrade test proves that a database upgraded through this script
-- equals a fresh install of 0.11.0. Published: never changed again.

\echo Use "ALTER EXTENSION pg_webhook_inbox UPDATE TO '0.11.0'" to load this file. \quit

-- Filters (filters.sql) keep what they do not take as 'filtered': an
-- event, a delivery, an inbox row. Labels are appended, as in a fresh
-- install; nothing in this script may use them (a label added in a
-- transaction is unusable until it commits), so views compare as text.
ALTER TYPE webhook.event_status ADD VALUE 'filtered';
ALTER TYPE webhook.claim_status ADD VALUE 'filtered';
ALTER TYPE webhook.inbox_status ADD VALUE 'filtered';
COMMENT ON TYPE webhook.event_status IS 'Where an event is: processing, processed, failed (retried by its next delivery), dead (parked), queued (in the inbox), stale (skipped: older than its entity''s watermark), filtered (not taken by the provider''s filter: webhook.filters)';
COMMENT ON TYPE webhook.inbox_status IS
    'Where a consumer is with a queued event: ready (or backing off until run_at), leased, processed, dead, stale (skipped: older than its entity''s watermark), filtered (not taken by a filter: webhook.filters)';

-- Whether a scheme signs a registry source: what a filter may read.
CREATE  FUNCTION @extschema@."webhook_source_signed"(
	"scheme" TEXT, /* & str */
	"source" TEXT /* & str */
) RETURNS bool /* PgResult < bool > */
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'source_signed_wrapper';
COMMENT ON FUNCTION @extschema@.webhook_source_signed(text, text) IS
    'Whether a scheme''s signature covers a registry source (header:<name> or body:<path>, alternatives separated by |): every alternative must be covered';

-- One signature vouches for one delivery: where it does not vouch for the
-- body (PayPal's CRC32, Mailgun's token, Twilio's unframed form fields),
-- the body it first came with is bound to it as well as the event id.
ALTER TABLE webhook.signature_bindings ADD COLUMN body_digest bytea;
COMMENT ON TABLE webhook.signature_bindings IS
    'Which delivery each signature first vouched for, where it covers neither the event id nor, by a digest, the body';
COMMENT ON COLUMN webhook.signature_bindings.digest IS 'SHA-256 of the signed material (the scheme''s signed prefix, the body where the signature covers it, the suffix)';
COMMENT ON COLUMN webhook.signature_bindings.body_digest IS 'SHA-256 of the body they first came with, where the signature does not vouch for the body; with any other body they are refused as replayed';

-- webhook_schemes() says what each signature covers; its signedness
-- columns are derived from that, and NULL where the scheme has no default
-- source.
DROP FUNCTION @extschema@.webhook_schemes();
CREATE FUNCTION @extschema@.webhook_schemes() RETURNS TABLE (
    "scheme" text,
    "aliases" text[],
    "event_id_from" text,
    "event_type_from" text,
    "event_id_signed" boolean,
    "event_type_signed" boolean,
    "tolerance" interval,
    "signs" text,
    "entity_key_from" text,
    "order_from" text,
    "body_covered" text,
    "headers_covered" text[]
)
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'scheme_catalog_wrapper';
COMMENT ON FUNCTION @extschema@.webhook_schemes() IS
    'The signature schemes, their aliases, the registry defaults each gives a provider (ordering''s presets included), and what each signature covers of the body and headers';

-- Maintenance never makes claims wait long: webhook_purge and
-- webhook_create_partitions take the archive's locks within
-- webhook.maintenance_lock_timeout, and skip (with a WARNING) what they
-- could not lock.
CREATE FUNCTION webhook._maintenance_lock_timeout() RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
RETURN coalesce(nullif(pg_catalog.current_setting('webhook.maintenance_lock_timeout', true), ''), '200ms');
COMMENT ON FUNCTION webhook._maintenance_lock_timeout() IS
    'Internal: how long webhook_purge and webhook_create_partitions wait for a lock on the archive';

-- Whether the archive's partition for one day (UTC) may be made: no
-- partition covers part of it, and none of its deliveries is in the
-- default partition.
CREATE FUNCTION webhook._archive_day_free(day date) RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT NOT EXISTS (SELECT FROM webhook.archive_partitions p
                    WHERE NOT p.is_default
                      AND (p.lower_id IS NULL OR p.lower_id < webhook._archive_bound(((day + 1)::timestamp) AT TIME ZONE 'UTC'))
                      AND p.upper_id > webhook._archive_bound((day::timestamp) AT TIME ZONE 'UTC'))
   AND NOT EXISTS (SELECT FROM webhook.delivery_log_default d
                    WHERE d.id >= webhook._archive_bound((day::timestamp) AT TIME ZONE 'UTC')
                      AND d.id < webhook._archive_bound(((day + 1)::timestamp) AT TIME ZONE 'UTC'))
$$;
COMMENT ON FUNCTION webhook._archive_day_free(date) IS
    'Internal: whether the archive''s partition for a day (UTC) may be made: nothing of that day is in another partition';

CREATE OR REPLACE FUNCTION webhook._create_archive_partition(day date) RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    lo   uuid := webhook._archive_bound((day::timestamp) AT TIME ZONE 'UTC');
    hi   uuid := webhook._archive_bound(((day + 1)::timestamp) AT TIME ZONE 'UTC');
    name text := 'delivery_log_' || pg_catalog.to_char(day, 'YYYYMMDD');
    lock_timeout_before text := pg_catalog.current_setting('lock_timeout');
BEGIN
    IF NOT webhook._archive_day_free(day) THEN
        RETURN false;
    END IF;
    EXECUTE pg_catalog.format(
        'CREATE TABLE webhook.%I (LIKE webhook.delivery_log INCLUDING DEFAULTS INCLUDING STORAGE INCLUDING COMPRESSION)',
        name);
    PERFORM webhook._prepare_archive_partition(pg_catalog.format('webhook.%I', name)::pg_catalog.regclass);
    -- Attaching locks the default partition while it is checked: wait
    -- for that lock only briefly, since every delivery landing in the
    -- default partition queues behind the waiting attach.
    PERFORM pg_catalog.set_config('lock_timeout', webhook._maintenance_lock_timeout(), true);
    EXECUTE pg_catalog.format('ALTER TABLE webhook.delivery_log ATTACH PARTITION webhook.%I FOR VALUES FROM (%L) TO (%L)',
                              name, lo, hi);
    PERFORM pg_catalog.set_config('lock_timeout', lock_timeout_before, true);
    RETURN true;
EXCEPTION
    WHEN check_violation THEN
        -- A delivery of that day reached the default partition after the
        -- check above: the day stays there.
        RETURN false;
    WHEN lock_not_available THEN
        -- Someone holds the archive (a report, a dump): nothing was made;
        -- the next run makes the day.
        RAISE WARNING 'webhook_create_partitions: the archive''s partition for % was not created: the archive is in use',
            day
            USING DETAIL = pg_catalog.format('Its lock was not granted within webhook.maintenance_lock_timeout (%s).',
                                             webhook._maintenance_lock_timeout()),
                  HINT = 'Run webhook_create_partitions() again later; deliveries of that day go to the default partition meanwhile.';
        RETURN false;
END
$$;
COMMENT ON FUNCTION webhook._create_archive_partition(date) IS
    'Internal: create and attach the archive''s partition for one day (UTC), if nothing of that day is elsewhere';

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
    -- ways of purging (applied once, below); a delivery of no such event
    -- may go.
    unfinished CONSTANT text := $rule$
        NOT (e.status IN ('processed', 'stale', 'filtered')
             OR (e.status = 'queued'
                 AND NOT EXISTS (SELECT FROM webhook.inbox i
                                  WHERE i.delivery_id = e.claim_id
                                    AND i.provider = e.provider AND i.event_id = e.event_id
                                    AND i.status NOT IN ('processed', 'stale', 'filtered'))))$rule$;
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
    providers text[];
    event_ids text[];
    days      pg_catalog.regclass[] := '{}';
    day_rows  bigint[] := '{}';
    skipped   pg_catalog.regclass[] := '{}';
    day       pg_catalog.regclass;
    lock_timeout_before CONSTANT text := pg_catalog.current_setting('lock_timeout');
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

    -- The events whose deliveries stay, found once for the whole purge:
    -- few, and reached without reading the archive (one pass over
    -- webhook.events for those processing, failed or dead; the inbox's
    -- unfinished rows from its partial indexes). The candidates must
    -- cover every event the rule calls unfinished; the rule decides. No
    -- event goes from finished back to unfinished (a requeue takes only
    -- failed or dead ones), so the list stays right while the purge runs.
    EXECUTE pg_catalog.format($sql$
        SELECT coalesce(array_agg(e.provider), '{}'), coalesce(array_agg(e.event_id), '{}')
          FROM (SELECT c.provider, c.event_id FROM webhook.events c
                 WHERE c.status IN ('processing', 'failed', 'dead')
                UNION
                SELECT i.provider, i.event_id FROM webhook.inbox i WHERE i.status IN ('ready', 'leased')
                UNION
                SELECT i.provider, i.event_id FROM webhook.inbox i WHERE i.status = 'dead') AS k
          JOIN webhook.events e ON e.provider = k.provider AND e.event_id = k.event_id
         WHERE %s$sql$, unfinished)
    INTO providers, event_ids;

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
                                                AND NOT EXISTS (SELECT FROM unnest($3, $4) AS k (provider, event_id)
                                                                 WHERE k.provider = l.provider
                                                                   AND k.event_id = l.event_id)
                                              LIMIT $2))
                    RETURNING id
                ), failures AS (
                    DELETE FROM webhook.delivery_failures f USING gone WHERE f.delivery_id = gone.id
                )
                SELECT count(*) FROM gone$sql$, part.partition)
            INTO batch USING cutoff, batch_size, providers, event_ids;
            deleted := deleted + batch;
            batches := batches + 1;
            EXIT WHEN batch < batch_size OR batches >= coalesce(max_batches, batches + 1);
        END LOOP;
    END LOOP;

    DELETE FROM webhook.inbox_failures f
     WHERE f.failed_at < cutoff
       AND EXISTS (SELECT FROM webhook.events e
                      JOIN webhook.inbox i ON i.delivery_id = e.claim_id AND i.consumer = f.consumer
                    WHERE e.provider = f.provider AND e.event_id = f.event_id
                      AND i.provider = f.provider AND i.event_id = f.event_id
                      AND i.status IN ('processed', 'stale', 'filtered') AND i.processed_at < cutoff);
    DELETE FROM webhook.inbox i WHERE i.status IN ('processed', 'stale', 'filtered') AND i.processed_at < cutoff;
    -- A trace context serves the event's workers: kept while an inbox row
    -- of it is.
    DELETE FROM webhook.trace_contexts t
     WHERE NOT EXISTS (SELECT FROM webhook.inbox i WHERE i.delivery_id = t.delivery_id);

    -- Whole days, oldest first. Each is read before any is detached: the
    -- first detach locks the archive until the transaction ends, and
    -- claims wait for only what follows it.
    FOR part IN
        SELECT p.partition FROM webhook.archive_partitions p
         WHERE NOT p.is_default AND p.upper_id <= webhook._archive_bound(cutoff)
         ORDER BY p.upper_id
    LOOP
        -- Each unfinished event looked up in the day's event index: a
        -- day costs the same whatever its size.
        EXECUTE pg_catalog.format($sql$
            SELECT coalesce(array_agg(l.id), '{}')
              FROM unnest($1, $2) AS k (provider, event_id)
              JOIN %s l ON l.provider = k.provider AND l.event_id = k.event_id$sql$, part.partition)
        INTO kept USING providers, event_ids;
        kept_all := kept_all || kept;
        EXECUTE pg_catalog.format('SELECT count(*) FROM %s', part.partition) INTO total;
        day_rows := day_rows || (total - pg_catalog.cardinality(kept));
        days := days || part.partition;
    END LOOP;
    -- Detaching a day waits for every reader of the archive (a report, a
    -- dump), and every claim queues behind the waiting detach: wait only
    -- briefly, skip the day if its lock is not granted, and say so.
    FOR i IN 1 .. pg_catalog.cardinality(days) LOOP
        day := days[i];
        BEGIN
            PERFORM pg_catalog.set_config('lock_timeout', webhook._maintenance_lock_timeout(), true);
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
            deleted := deleted + day_rows[i];
        EXCEPTION WHEN lock_not_available THEN
            skipped := skipped || day;
        END;
    END LOOP;
    PERFORM pg_catalog.set_config('lock_timeout', lock_timeout_before, true);
    IF pg_catalog.cardinality(skipped) > 0 THEN
        RAISE WARNING 'webhook_purge: % day(s) of the archive not dropped: the archive is in use', pg_catalog.cardinality(skipped)
            USING DETAIL = pg_catalog.format('Not dropped: %s. Their lock was not granted within webhook.maintenance_lock_timeout (%s).',
                                             pg_catalog.array_to_string(skipped, ', '), webhook._maintenance_lock_timeout()),
                  HINT = 'Run webhook_purge again later, when no long read of webhook.delivery_log is running.';
    END IF;
    RETURN deleted;
END
$$;

-- provider_stats counts inbox events where their consumers stand, and
-- says how many are still queued, and how many were filtered out.
CREATE OR REPLACE VIEW webhook.provider_stats AS
SELECT e.provider,
       count(*) AS events,
       count(*) FILTER (WHERE s.status = 'processed')  AS processed,
       count(*) FILTER (WHERE s.status = 'processing') AS processing,
       count(*) FILTER (WHERE s.status = 'failed')     AS failed,
       count(*) FILTER (WHERE s.status = 'dead')       AS dead,
       coalesce(sum(s.retries), 0)::bigint AS retries,
       max(e.first_seen_at) AS last_event_at,
       count(*) FILTER (WHERE s.status = 'stale')      AS stale,
       count(*) FILTER (WHERE s.status = 'queued')     AS queued,
       count(*) FILTER (WHERE s.status = 'filtered')   AS filtered
  FROM webhook.events e
  LEFT JOIN LATERAL (
       SELECT CASE WHEN pg_catalog.bool_and(i.status = 'stale') THEN 'stale'
                   WHEN pg_catalog.bool_and(i.status::text = 'filtered') THEN 'filtered'
                   WHEN pg_catalog.bool_and(i.status::text IN ('processed', 'stale', 'filtered')) THEN 'processed'
                   WHEN pg_catalog.bool_or(i.status = 'dead') THEN 'dead'
                   ELSE 'queued'
              END AS status,
              pg_catalog.sum(GREATEST(i.attempts - 1, 0)) AS retries
         FROM webhook.inbox i
        WHERE e.status = 'queued' AND i.delivery_id = e.claim_id
          AND i.provider = e.provider AND i.event_id = e.event_id
       ) q ON true
 CROSS JOIN LATERAL (
       SELECT CASE WHEN e.status = 'queued' THEN coalesce(q.status, 'queued') ELSE e.status::text END AS status,
              CASE WHEN e.status = 'queued' THEN coalesce(q.retries, 0) ELSE GREATEST(e.attempts - 1, 0) END AS retries
       ) s
 GROUP BY e.provider;
COMMENT ON VIEW webhook.provider_stats IS 'Per provider: events by status (inbox events by their consumers: processed by all, stale, filtered by all, dead, or still queued), retries spent, last event';

-- A provider keeps at most 16 active secrets: every delivery is checked
-- against each.
CREATE OR REPLACE FUNCTION @extschema@.webhook_add_secret(provider text, secret text)
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    fp       text;
    v_scheme text;
    problem  text;
BEGIN
    IF webhook_add_secret.secret IS NULL OR webhook_add_secret.secret = '' THEN
        RAISE EXCEPTION 'webhook_add_secret: argument "secret" must not be empty'
            USING ERRCODE = 'zero_length_character_string';
    END IF;
    SELECT p.scheme INTO v_scheme FROM webhook.providers p WHERE p.name = webhook_add_secret.provider;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'webhook_add_secret: argument "provider": no provider "%" is registered', webhook_add_secret.provider
            USING ERRCODE = 'undefined_object';
    END IF;
    -- A public key or certificate in the wrong format would only show up
    -- later, as every delivery refused: say so now. (The message never
    -- echoes the secret.)
    problem := @extschema@.webhook_check_key(v_scheme, webhook_add_secret.secret);
    IF problem IS NOT NULL THEN
        RAISE EXCEPTION 'webhook_add_secret: argument "secret" is not a key for scheme "%"', v_scheme
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = problem || '.';
    END IF;
    -- Each delivery is checked against every active secret: keep them few.
    IF (SELECT pg_catalog.count(*) FROM webhook.provider_secrets s
         WHERE s.provider = webhook_add_secret.provider AND s.retired_at IS NULL
           AND s.secret <> webhook_add_secret.secret) >= 16 THEN
        RAISE EXCEPTION 'webhook_add_secret: argument "provider": "%" has 16 active secrets already', webhook_add_secret.provider
            USING ERRCODE = 'program_limit_exceeded',
                  HINT = 'Retire the secrets the provider no longer signs with: webhook_retire_secret(provider, fingerprint).';
    END IF;
    fp := webhook._fingerprint(webhook_add_secret.secret);
    INSERT INTO webhook.provider_secrets AS s (provider, secret, fingerprint)
    VALUES (webhook_add_secret.provider, webhook_add_secret.secret, fp)
    ON CONFLICT ON CONSTRAINT provider_secrets_pkey DO UPDATE SET retired_at = NULL;
    -- Its use row, made now: deliveries then only ever update it, and skip
    -- it while another holds it (src/receive/secrets.rs).
    INSERT INTO webhook.secret_uses (provider, fingerprint)
    VALUES (webhook_add_secret.provider, fp)
    ON CONFLICT ON CONSTRAINT secret_uses_pkey DO NOTHING;
    RETURN fp;
END
$$;
COMMENT ON FUNCTION @extschema@.webhook_add_secret(text, text) IS
    'Add a signing secret to a provider (several may be active while rotating); returns its fingerprint';

-- The registry's caches are dropped also for changes made under
-- session_replication_role = replica (a restore, a logical replication
-- apply).
ALTER TABLE webhook.providers ENABLE ALWAYS TRIGGER registry_changed;
ALTER TABLE webhook.provider_secrets ENABLE ALWAYS TRIGGER registry_changed;

-- Bulk intake of any size: a procedure that commits every batch, granted
-- to application roles with the rest.
-- Queue any number of verified events, committing every batch_size of
-- them: a backfill or an import. Each event queued holds its lock until
-- its transaction commits, and one transaction may hold only so many
-- (webhook_enqueue refuses more with SQLSTATE 54000); this procedure
-- commits between batches instead. CALL it on its own, not inside a
-- transaction block. events: a JSON array of objects with event_id,
-- event_type and payload. Batches committed before a failure stay queued;
-- calling it again with the same events queues only the rest, the others
-- being duplicates. Returns how many were queued (duplicates not counted).
-- SECURITY INVOKER, with no SET clause (a procedure with one cannot
-- commit): it does nothing the caller could not do with webhook_enqueue,
-- and names everything with its schema.
CREATE PROCEDURE @extschema@.webhook_enqueue_batches(
    provider     text,
    events       jsonb,
    batch_size   integer DEFAULT 1000,
    INOUT queued bigint  DEFAULT NULL
)
LANGUAGE plpgsql
AS $$
DECLARE
    total    integer;
    position integer := 0;
    event    jsonb;
    answer   text;
BEGIN
    IF webhook_enqueue_batches.provider IS NULL THEN
        RAISE EXCEPTION 'webhook_enqueue_batches: argument "provider" must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF events IS NULL OR pg_catalog.jsonb_typeof(events) IS DISTINCT FROM 'array' THEN
        RAISE EXCEPTION 'webhook_enqueue_batches: argument "events" must be a JSON array of {"event_id", "event_type", "payload"} objects'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF batch_size IS NULL OR batch_size < 1 OR batch_size > 10000 THEN
        RAISE EXCEPTION 'webhook_enqueue_batches: argument "batch_size" must be between 1 and 10000'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    queued := 0;
    total := pg_catalog.jsonb_array_length(events);
    WHILE position < total LOOP
        event := events -> position;
        SELECT e.status::text INTO answer
          FROM @extschema@.webhook_enqueue(webhook_enqueue_batches.provider,
                                           event ->> 'event_id', event ->> 'event_type',
                                           event -> 'payload') AS e;
        IF answer = 'queued' THEN
            queued := queued + 1;
        END IF;
        position := position + 1;
        IF position % batch_size = 0 THEN
            COMMIT;
        END IF;
    END LOOP;
END
$$;
COMMENT ON PROCEDURE @extschema@.webhook_enqueue_batches(text, jsonb, integer, bigint) IS
    'Queue any number of verified events ({"event_id", "event_type", "payload"} objects), committing every batch_size: a backfill or an import; returns how many were queued';

CREATE OR REPLACE FUNCTION @extschema@.webhook_grant_app(role regrole)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    EXECUTE format('GRANT EXECUTE ON FUNCTION
        @extschema@.webhook_receive(text, jsonb, bytea, interval, boolean, text, boolean, text),
        @extschema@.webhook_receive(text, jsonb, text, interval, boolean, text, boolean, text),
        @extschema@.webhook_claim(text, text, text, jsonb, text, interval, boolean),
        @extschema@.webhook_claim(text, text, text, bytea, text, interval, boolean),
        @extschema@.webhook_claim(text, text, text, text, text, interval, boolean),
        @extschema@.webhook_enqueue(text, text, text, jsonb, text, text),
        @extschema@.webhook_enqueue(text, text, text, bytea, text, text),
        @extschema@.webhook_enqueue(text, text, text, text, text, text),
        @extschema@.webhook_enqueue_polled(text, text, text, jsonb),
        @extschema@.webhook_next(integer, text, text, text, interval),
        @extschema@.webhook_complete(uuid, jsonb),
        @extschema@.webhook_fail(uuid, text, interval, boolean),
        @extschema@.webhook_complete_batch(uuid[]),
        @extschema@.webhook_fail_batch(uuid[], text, interval, boolean),
        @extschema@.webhook_extend(uuid, interval),
        @extschema@.webhook_outbound_key(uuid, text),
        @extschema@.webhook_outbound_key(text, text, text),
        @extschema@.idempotency_begin(text, text, text, interval),
        @extschema@.idempotency_checkpoint(uuid, text, jsonb),
        @extschema@.idempotency_finish(uuid, integer, text, jsonb),
        @extschema@.idempotency_fail(uuid, text, boolean, integer, text, jsonb),
        @extschema@.idempotency_fingerprint(text, text, bytea),
        @extschema@.idempotency_fingerprint(text, text, text)
        TO %s', role);
    EXECUTE format('GRANT EXECUTE ON PROCEDURE
        @extschema@.webhook_enqueue_batches(text, jsonb, integer, bigint)
        TO %s', role);
END
$$;
COMMENT ON FUNCTION @extschema@.webhook_grant_app(regrole) IS
    'Grant a handler or worker role EXECUTE on webhook_receive, webhook_claim, webhook_enqueue, webhook_enqueue_batches, webhook_enqueue_polled, webhook_next, webhook_complete, webhook_fail (and their _batch forms), webhook_extend, webhook_outbound_key and the idempotency_ functions of its own API (begin, checkpoint, finish, fail, fingerprint); no table privilege';

-- The privilege rule names routines, so that it covers procedures too.
CREATE OR REPLACE FUNCTION webhook._restrict_privileges() RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    unwanted record;
BEGIN
    FOR unwanted IN
        WITH members AS (
            SELECT d.classid, d.objid
              FROM pg_catalog.pg_depend d
              JOIN pg_catalog.pg_extension x ON x.oid = d.refobjid
             WHERE d.refclassid = 'pg_catalog.pg_extension'::pg_catalog.regclass
               AND d.deptype = 'e'
               AND x.extname = 'pg_webhook_inbox'
        ), objects AS (
            SELECT 'ROUTINE ' || p.oid::pg_catalog.regprocedure::text AS object,
                   'f'::"char" AS objtype, p.proowner AS owner, p.pronamespace AS nsp,
                   p.proacl AS acl,
                   p.proname IN ('webhook_schemes', 'verify_hmac', 'webhook_verify',
                                 'webhook_verify_detail') AS for_everyone
              FROM members m
              JOIN pg_catalog.pg_proc p ON p.oid = m.objid
             WHERE m.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass
            UNION ALL
            SELECT 'TABLE ' || c.oid::pg_catalog.regclass::text,
                   CASE c.relkind WHEN 'S' THEN 'S' ELSE 'r' END::"char",
                   c.relowner, c.relnamespace, c.relacl, false
              FROM members m
              JOIN pg_catalog.pg_class c ON c.oid = m.objid
             WHERE m.classid = 'pg_catalog.pg_class'::pg_catalog.regclass
            UNION ALL
            SELECT 'SCHEMA ' || pg_catalog.quote_ident(n.nspname), 'n'::"char",
                   n.nspowner, 0::pg_catalog.oid, n.nspacl, false
              FROM members m
              JOIN pg_catalog.pg_namespace n ON n.oid = m.objid
             WHERE m.classid = 'pg_catalog.pg_namespace'::pg_catalog.regclass
        ), defaults AS (
            -- What default privileges (global, or for the object's schema)
            -- hand out when an object is created.
            SELECT o.object, a.grantee, a.privilege_type
              FROM objects o
              JOIN pg_catalog.pg_default_acl d
                ON d.defaclrole = o.owner AND d.defaclobjtype = o.objtype
               AND d.defaclnamespace IN (0, o.nsp)
             CROSS JOIN LATERAL pg_catalog.aclexplode(d.defaclacl) a
            UNION
            -- PostgreSQL's own default: functions are executable by PUBLIC.
            SELECT o.object, 0, 'EXECUTE'
              FROM objects o
             WHERE o.objtype = 'f' AND NOT o.for_everyone
        ), held AS (
            SELECT o.object, a.grantee, a.privilege_type
              FROM objects o
             -- No ACL means the default: PUBLIC may execute a function;
             -- nobody but the owner has anything on a relation or schema.
             CROSS JOIN LATERAL pg_catalog.aclexplode(
                   coalesce(o.acl, CASE o.objtype WHEN 'f' THEN pg_catalog.acldefault('f', o.owner) END)) a
             WHERE a.grantee <> o.owner
        )
        -- Only what is held: a REVOKE inside an extension script records the
        -- object's whole ACL as its initial privileges (pg_init_privs), so
        -- one that changes nothing must not run (it would record the grants
        -- a DBA made since as the extension's own, and pg_dump would then
        -- leave them out).
        SELECT h.object, h.privilege_type,
               CASE WHEN h.grantee = 0 THEN 'PUBLIC'
                    ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(h.grantee)) END AS grantee
          FROM held h
          JOIN defaults d USING (object, grantee, privilege_type)
         WHERE NOT (h.grantee = 0 AND h.privilege_type = 'EXECUTE'
                    AND h.object IN (SELECT o.object FROM objects o WHERE o.for_everyone))
    LOOP
        EXECUTE pg_catalog.format('REVOKE %s ON %s FROM %s',
                                  unwanted.privilege_type, unwanted.object, unwanted.grantee);
    END LOOP;
END
$$;

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

REVOKE ALL ON TABLE webhook.app_scopes FROM PUBLIC;

-- Scope an application role to some providers and, for inbox workers,
-- consumers: a DBA serving several teams from one database gives each
-- team's role its own. From then on a session acting as the role, or as
-- any role inheriting its privileges, may receive, claim and queue events
-- of these providers only, and lease and finish only their events for
-- these consumers; webhook_next must name the provider. A session bound
-- by several scopes may use each. Superusers are never bound. Replaces
-- the role's scope; webhook_unscope_app removes it.
CREATE FUNCTION @extschema@.webhook_scope_app(role regrole, providers text[], consumers text[] DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF webhook_scope_app.role IS NULL THEN
        RAISE EXCEPTION 'webhook_scope_app: argument "role" must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF webhook_scope_app.providers IS NULL THEN
        RAISE EXCEPTION 'webhook_scope_app: argument "providers" must not be NULL'
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = 'To let the role use every provider again: webhook_unscope_app(role).';
    END IF;
    IF (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.oid = webhook_scope_app.role) THEN
        RAISE EXCEPTION 'webhook_scope_app: argument "role": % is a superuser, which no scope binds', webhook_scope_app.role
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- The table's checks say the same; here the error names the argument.
    IF pg_catalog.cardinality(webhook_scope_app.providers) NOT BETWEEN 1 AND 1000
       OR pg_catalog.array_position(webhook_scope_app.providers, NULL) IS NOT NULL
       OR '' = ANY (webhook_scope_app.providers) THEN
        RAISE EXCEPTION 'webhook_scope_app: argument "providers" must list 1 to 1000 names, none NULL or empty'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF pg_catalog.cardinality(webhook_scope_app.consumers) NOT BETWEEN 1 AND 1000
       OR pg_catalog.array_position(webhook_scope_app.consumers, NULL) IS NOT NULL
       OR '' = ANY (webhook_scope_app.consumers) THEN
        RAISE EXCEPTION 'webhook_scope_app: argument "consumers" must be NULL (every consumer) or list 1 to 1000 names, none NULL or empty'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO webhook.app_scopes AS s (role, providers, consumers)
    VALUES (webhook_scope_app.role,
            ARRAY(SELECT DISTINCT p FROM pg_catalog.unnest(webhook_scope_app.providers) AS p ORDER BY p),
            CASE WHEN webhook_scope_app.consumers IS NOT NULL THEN
                ARRAY(SELECT DISTINCT c FROM pg_catalog.unnest(webhook_scope_app.consumers) AS c ORDER BY c)
            END)
    ON CONFLICT ON CONSTRAINT app_scopes_pkey
    DO UPDATE SET providers = excluded.providers, consumers = excluded.consumers,
                  scoped_at = excluded.scoped_at, scoped_by = excluded.scoped_by;
END
$$;
COMMENT ON FUNCTION @extschema@.webhook_scope_app(regrole, text[], text[]) IS
    'Scope an application role (and the roles inheriting its privileges) to these providers and, for the inbox, consumers (NULL: all of theirs); replaces its scope';

-- Let a scoped role use every provider again.
CREATE FUNCTION @extschema@.webhook_unscope_app(role regrole)
RETURNS boolean
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    WITH removed AS (
        DELETE FROM webhook.app_scopes s WHERE s.role = webhook_unscope_app.role RETURNING 1
    )
    SELECT EXISTS (SELECT FROM removed)
$$;
COMMENT ON FUNCTION @extschema@.webhook_unscope_app(regrole) IS
    'Remove an application role''s scope: it may use every provider and consumer again; false if it had none';

-- A read-only role: what an operator sees, no function that changes
-- anything (the web console's viewers).
CREATE OR REPLACE FUNCTION @extschema@.webhook_grant_viewer(role regrole)
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
        webhook.secret_usage, webhook.idempotency_keys, webhook.archive_partitions,
        webhook.app_scopes, webhook.metric_minutes, webhook.metric_totals, webhook.alerts,
        webhook.alert_rules, webhook.alert_rules_in_effect, webhook.pauses, webhook.paused,
        webhook.limits, webhook.limits_in_effect, webhook.breakers, webhook.polled,
        webhook.missed_deliveries, webhook.replays, webhook.replay_items,
        webhook.replay_progress, webhook.trace_contexts, webhook.filters TO %s', role);
    EXECUTE format('GRANT EXECUTE ON FUNCTION
        @extschema@.webhook_providers(),
        @extschema@.webhook_source_signed(text, text)
        TO %s', role);
END
$$;
COMMENT ON FUNCTION @extschema@.webhook_grant_viewer(regrole) IS
    'Grant a read-only role SELECT on the archive, the inbox, the watermarks, the idempotency keys, the application roles'' scopes, the metrics, the alerts, the steering tables, the replays, the filters and every view (secret usage by fingerprint included), and webhook_providers(); no function that changes anything, never the secrets';

-- Grant an operator role the archive, the views and the maintenance
-- functions; never the secrets.
CREATE OR REPLACE FUNCTION @extschema@.webhook_grant_operator(role regrole)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- What a viewer sees.
    PERFORM @extschema@.webhook_grant_viewer(role);
    EXECUTE format('GRANT EXECUTE ON FUNCTION
        @extschema@.webhook_requeue(text, text, text),
        @extschema@.webhook_requeue_dead(text, text, text, timestamptz, timestamptz, text),
        @extschema@.webhook_purge(interval, integer, integer),
        @extschema@.webhook_create_partitions(integer),
        @extschema@.webhook_reset_watermark(text, text, text),
        @extschema@.idempotency_purge(interval),
        @extschema@.webhook_metrics(text),
        @extschema@.webhook_metrics_prometheus(),
        @extschema@.webhook_metrics_rollup(),
        @extschema@.webhook_metric_quantile(double precision, text, timestamptz, text, text),
        @extschema@.webhook_alerts_evaluate(),
        @extschema@.webhook_alert_acknowledge(bigint),
        @extschema@.webhook_alert_silence(bigint, interval),
        @extschema@.webhook_pause(text, text, text),
        @extschema@.webhook_resume(text, text),
        @extschema@.webhook_quarantine(text, text, text, text),
        @extschema@.webhook_release(text, text, text),
        @extschema@.webhook_set_limit(text, text, integer, double precision, integer, integer, interval),
        @extschema@.webhook_backfill(text, text, timestamptz, timestamptz, double precision),
        @extschema@.webhook_replay(text, text, text[], text[], timestamptz, timestamptz, text, jsonpath,
                                   text, double precision, boolean, integer),
        @extschema@.webhook_replay_pause(uuid),
        @extschema@.webhook_replay_resume(uuid),
        @extschema@.webhook_replay_cancel(uuid),
        @extschema@.webhook_set_filter(text, text, text[], jsonpath)
        TO %s', role);
END
$$;
COMMENT ON FUNCTION @extschema@.webhook_grant_operator(regrole) IS
    'Grant an operator role the archive, the inbox, the watermarks, the idempotency keys, the application roles'' scopes, the views (secret usage by fingerprint included), webhook_requeue, webhook_requeue_dead, webhook_purge, webhook_create_partitions, webhook_reset_watermark, webhook_providers, idempotency_purge, the metrics (webhook_metrics, webhook_metrics_prometheus, webhook_metric_quantile, webhook.metric_minutes), the alerts (webhook.alerts, webhook_alerts_evaluate, webhook_alert_acknowledge, webhook_alert_silence), the steering of the inbox (webhook_pause, webhook_resume, webhook_quarantine, webhook_release, webhook_set_limit, webhook.paused, webhook.limits_in_effect), webhook_backfill, replays (webhook_replay, webhook_replay_pause, webhook_replay_resume, webhook_replay_cancel, webhook.replays, webhook.replay_progress), reconciliation (webhook.polled, webhook.missed_deliveries) and filters (webhook_set_filter, webhook_source_signed, webhook.filters); never the secrets';

-- Grant a monitoring role (the one a Prometheus exporter logs in as) the
-- metrics and nothing else: no payload, no event id, no table.
CREATE FUNCTION @extschema@.webhook_grant_monitor(role regrole)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    EXECUTE format('GRANT EXECUTE ON FUNCTION
        @extschema@.webhook_metrics(text),
        @extschema@.webhook_metrics_prometheus(),
        @extschema@.webhook_metric_quantile(double precision, text, timestamptz, text, text)
        TO %s', role);
END
$$;
COMMENT ON FUNCTION @extschema@.webhook_grant_monitor(regrole) IS
    'Grant a monitoring role (a Prometheus exporter''s) EXECUTE on webhook_metrics, webhook_metrics_prometheus and webhook_metric_quantile: counts by provider, consumer and status only, no table';

-- Scopes are cached like the registry, and kept across pg_dump.
CREATE TRIGGER registry_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON webhook.app_scopes
    FOR EACH STATEMENT EXECUTE FUNCTION @extschema@.webhook_registry_changed();
ALTER TABLE webhook.app_scopes ENABLE ALWAYS TRIGGER registry_changed;
COMMENT ON FUNCTION @extschema@.webhook_registry_changed() IS
    'Trigger on the provider registry and the application roles'' scopes: drops every backend''s cached copy of them once the change commits';
SELECT pg_catalog.pg_extension_config_dump('webhook.app_scopes', '');

-- One queue per consumer and provider (and event type) in the inbox's
-- pending index: webhook_next never walks past another provider's or
-- type's backlog; and leases indexed without the queued rows' NULLs.
-- Built while the update holds the inbox: on a large backlog, update when
-- it is drained.
ALTER TABLE webhook.inbox DROP CONSTRAINT inbox_claim_id_key;
CREATE UNIQUE INDEX inbox_lease_idx ON webhook.inbox (claim_id) WHERE claim_id IS NOT NULL;
DROP INDEX webhook.inbox_pending_idx;
CREATE INDEX inbox_pending_idx ON webhook.inbox (consumer, provider, run_at)
    WHERE status IN ('ready', 'leased');
CREATE INDEX inbox_pending_type_idx ON webhook.inbox (consumer, provider, event_type, run_at)
    WHERE status IN ('ready', 'leased');

-- The inbox keyed by the delivery that queued each event, in queue
-- order, instead of by event id: each lease and completion adds an entry
-- to every index of the row, and one in event-id order took them at
-- random pages. Its rows are found by event id through the event's
-- claim_id, which is that delivery for as long as the event is queued.
-- Rebuilt while the update holds the inbox, like the indexes above.
ALTER TABLE webhook.inbox DROP CONSTRAINT inbox_pkey,
    ADD CONSTRAINT inbox_pkey PRIMARY KEY (delivery_id, consumer);
CREATE OR REPLACE VIEW webhook.deliveries AS
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

-- Finishing a batch of leases in one call.
CREATE  FUNCTION "webhook_complete_batch"(
	"ids" uuid[] /* :: std :: option :: Option < Vec < Option < pgrx :: Uuid > > > */
) RETURNS VOID /* PgResult < () > */
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'webhook_complete_batch_wrapper';
CREATE  FUNCTION "webhook_fail_batch"(
	"ids" uuid[], /* :: std :: option :: Option < Vec < Option < pgrx :: Uuid > > > */
	"err" TEXT, /* Option < & str > */
	"retry_in" interval DEFAULT NULL, /* Option < Interval > */
	"permanent" bool DEFAULT false /* Option < bool > */
) RETURNS VOID /* PgResult < () > */
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'webhook_fail_batch_wrapper';
COMMENT ON FUNCTION @extschema@.webhook_complete_batch(uuid[]) IS
    'Mark a batch of inbox leases (from webhook_next) processed in one call, each fenced as by webhook_complete; one lease that may not finish refuses the whole call';
COMMENT ON FUNCTION @extschema@.webhook_fail_batch(uuid[], text, interval, boolean) IS
    'Record a failed attempt for a batch of inbox leases in one call, each ready again after retry_in or its own backoff (dead after webhook.max_attempts, or at once if permanent); one lease that may not fail refuses the whole call';

-- Functions whose arguments or result columns change are made anew (a
-- function's signature cannot change in place): webhook_next returns the
-- replay that queued an event again (replay.sql) and the trace context
-- its request came with; webhook_receive and webhook_enqueue take that
-- trace context (traceparent). Who may call each is kept for the length
-- of this transaction, by its new signature, and given back at the end of
-- this script.
SELECT pg_catalog.set_config('pg_webhook_inbox.upgrade_acls',
       (SELECT pg_catalog.jsonb_object_agg(m.remade, coalesce(p.proacl::text, ''))::text
          FROM (VALUES
                  ('@extschema@.webhook_next(integer, text, text, text, interval)',
                   '@extschema@.webhook_next(integer, text, text, text, interval)'),
                  ('@extschema@.webhook_receive(text, jsonb, bytea, interval, boolean, text, boolean)',
                   '@extschema@.webhook_receive(text, jsonb, bytea, interval, boolean, text, boolean, text)'),
                  ('@extschema@.webhook_receive(text, jsonb, text, interval, boolean, text, boolean)',
                   '@extschema@.webhook_receive(text, jsonb, text, interval, boolean, text, boolean, text)'),
                  ('@extschema@.webhook_enqueue(text, text, text, jsonb, text)',
                   '@extschema@.webhook_enqueue(text, text, text, jsonb, text, text)'),
                  ('@extschema@.webhook_enqueue(text, text, text, bytea, text)',
                   '@extschema@.webhook_enqueue(text, text, text, bytea, text, text)'),
                  ('@extschema@.webhook_enqueue(text, text, text, text, text)',
                   '@extschema@.webhook_enqueue(text, text, text, text, text, text)')
               ) AS m (was, remade)
          JOIN pg_catalog.pg_proc p ON p.oid = m.was::pg_catalog.regprocedure),
       true);
DROP FUNCTION @extschema@.webhook_receive(text, jsonb, bytea, interval, boolean, text, boolean);
DROP FUNCTION @extschema@.webhook_receive(text, jsonb, text, interval, boolean, text, boolean);
DROP FUNCTION @extschema@.webhook_enqueue(text, text, text, jsonb, text);
DROP FUNCTION @extschema@.webhook_enqueue(text, text, text, bytea, text);
DROP FUNCTION @extschema@.webhook_enqueue(text, text, text, text, text);
CREATE  FUNCTION @extschema@."webhook_receive"(
	"provider" TEXT, /* Option < & str > */
	"headers" jsonb, /* Option < RawJsonb > */
	"body" bytea, /* Option < & [u8] > */
	"lease" interval DEFAULT NULL, /* Option < Interval > */
	"inbox" bool DEFAULT NULL, /* Option < bool > */
	"url" TEXT DEFAULT NULL, /* Option < & str > */
	"complete_on_commit" bool DEFAULT false, /* Option < bool > */
	"traceparent" TEXT DEFAULT NULL /* Option < & str > */
) RETURNS webhook.receive_result /* std :: result :: Result < :: pgrx :: heap_tuple :: PgHeapTuple < '_, :: pgrx
:: pgbox :: AllocatedByRust > , pg_sys :: panic :: ErrorReport > */
VOLATILE SECURITY DEFINER PARALLEL UNSAFE 
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'receive_traced_bytes_wrapper';
CREATE  FUNCTION @extschema@."webhook_receive"(
	"provider" TEXT, /* Option < & str > */
	"headers" jsonb, /* Option < RawJsonb > */
	"body" TEXT, /* Option < & str > */
	"lease" interval DEFAULT NULL, /* Option < Interval > */
	"inbox" bool DEFAULT NULL, /* Option < bool > */
	"url" TEXT DEFAULT NULL, /* Option < & str > */
	"complete_on_commit" bool DEFAULT false, /* Option < bool > */
	"traceparent" TEXT DEFAULT NULL /* Option < & str > */
) RETURNS webhook.receive_result /* std :: result :: Result < :: pgrx :: heap_tuple :: PgHeapTuple < '_, :: pgrx
:: pgbox :: AllocatedByRust > , pg_sys :: panic :: ErrorReport > */
VOLATILE SECURITY DEFINER PARALLEL UNSAFE 
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'receive_traced_string_wrapper';
CREATE  FUNCTION @extschema@."webhook_enqueue"(
	"provider" TEXT, /* Option < & str > */
	"event_id" TEXT, /* Option < & str > */
	"event_type" TEXT, /* Option < & str > */
	"payload" jsonb, /* Option < RawJsonb > */
	"signature" TEXT DEFAULT NULL, /* Option < & str > */
	"traceparent" TEXT DEFAULT NULL /* Option < & str > */
) RETURNS webhook.enqueue_result /* std :: result :: Result < :: pgrx :: heap_tuple :: PgHeapTuple < '_, :: pgrx
:: pgbox :: AllocatedByRust > , pg_sys :: panic :: ErrorReport > */
VOLATILE SECURITY DEFINER PARALLEL UNSAFE 
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'enqueue_traced_payload_wrapper';
CREATE  FUNCTION @extschema@."webhook_enqueue"(
	"provider" TEXT, /* Option < & str > */
	"event_id" TEXT, /* Option < & str > */
	"event_type" TEXT, /* Option < & str > */
	"body" bytea, /* Option < & [u8] > */
	"signature" TEXT DEFAULT NULL, /* Option < & str > */
	"traceparent" TEXT DEFAULT NULL /* Option < & str > */
) RETURNS webhook.enqueue_result /* std :: result :: Result < :: pgrx :: heap_tuple :: PgHeapTuple < '_, :: pgrx
:: pgbox :: AllocatedByRust > , pg_sys :: panic :: ErrorReport > */
VOLATILE SECURITY DEFINER PARALLEL UNSAFE 
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'enqueue_traced_body_wrapper';
CREATE  FUNCTION @extschema@."webhook_enqueue"(
	"provider" TEXT, /* Option < & str > */
	"event_id" TEXT, /* Option < & str > */
	"event_type" TEXT, /* Option < & str > */
	"body" TEXT, /* Option < & str > */
	"signature" TEXT DEFAULT NULL, /* Option < & str > */
	"traceparent" TEXT DEFAULT NULL /* Option < & str > */
) RETURNS webhook.enqueue_result /* std :: result :: Result < :: pgrx :: heap_tuple :: PgHeapTuple < '_, :: pgrx
:: pgbox :: AllocatedByRust > , pg_sys :: panic :: ErrorReport > */
VOLATILE SECURITY DEFINER PARALLEL UNSAFE 
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'enqueue_traced_body_text_wrapper';
COMMENT ON FUNCTION @extschema@.webhook_receive(text, jsonb, bytea, interval, boolean, text, boolean, text) IS
    'Verify a delivery with its provider''s registered scheme and secrets (and the URL it was sent to, for schemes that sign it), read its event id and type, claim it or queue it (inbox), and say what to answer (http_status; response for an endpoint handshake); complete_on_commit: the commit of this transaction completes a claimed event; traceparent: the W3C trace context of the request, handed to a queued event''s worker';
COMMENT ON FUNCTION @extschema@.webhook_receive(text, jsonb, text, interval, boolean, text, boolean, text) IS
    'webhook_receive for a body passed as text';
COMMENT ON FUNCTION @extschema@.webhook_enqueue(text, text, text, jsonb, text, text) IS
    'Queue a delivery the caller verified (payload as jsonb) for inbox workers: queued (new) or duplicate; answer 2xx either way; traceparent: the W3C trace context of the request, handed to the event''s worker';
COMMENT ON FUNCTION @extschema@.webhook_enqueue(text, text, text, bytea, text, text) IS
    'webhook_enqueue with the raw body, archived byte for byte';
COMMENT ON FUNCTION @extschema@.webhook_enqueue(text, text, text, text, text, text) IS
    'webhook_enqueue with the raw body passed as text';
DROP FUNCTION @extschema@.webhook_next(integer, text, text, text, interval);
CREATE  FUNCTION @extschema@."webhook_next"(
	"batch" INT DEFAULT 1, /* Option < i32 > */
	"consumer" TEXT DEFAULT 'default', /* Option < & str > */
	"provider" TEXT DEFAULT NULL, /* Option < & str > */
	"event_type" TEXT DEFAULT NULL, /* Option < & str > */
	"lease" interval DEFAULT NULL /* Option < Interval > */
) RETURNS TABLE (
	"id" uuid,  /* pgrx :: Uuid */
	"provider" TEXT,  /* String */
	"event_id" TEXT,  /* String */
	"event_type" TEXT,  /* String */
	"payload" jsonb,  /* Option < RawJsonb > */
	"attempts" INT,  /* i32 */
	"consumer" TEXT,  /* String */
	"delivery_id" uuid,  /* pgrx :: Uuid */
	"queued_at" timestamp with time zone,  /* TimestampWithTimeZone */
	"lease_expires_at" timestamp with time zone,  /* TimestampWithTimeZone */
	"replay_id" uuid,  /* Option < pgrx :: Uuid > */
	"traceparent" TEXT,  /* Option < String > */
	"origin" TEXT  /* Option < String > */
)
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'lease_next_wrapper';
COMMENT ON FUNCTION @extschema@.webhook_next(integer, text, text, text, interval) IS
    'Lease up to batch ready inbox events of a consumer, never waiting on another worker (stale ordered events are parked, FIFO entities wait their turn); finish each with webhook_complete or webhook_fail. replay_id names the replay that queued an event again; traceparent is the trace context its request came with; origin says where it came from (verified, polled, enqueued)';

-- A lease is a few index probes, but its generic plan is costed for whole
-- queues: past jit_above_cost, every call would compile it with LLVM
-- (most of a second) before leasing anything.
ALTER FUNCTION @extschema@.webhook_next(integer, text, text, text, interval) SET jit = off;

-- Metrics over time (metrics.sql) and alerts (alerts.sql), rolled up
-- from what claims, leases and failures already write; the failures since
-- a rollup are found by time.
CREATE INDEX inbox_failures_failed_at_idx ON webhook.inbox_failures (failed_at);
-- Failures are stamped when written, not when their transaction began: a
-- transaction idle since before a rollup passed its start would otherwise
-- write a failure below the rollup's mark, never to be counted.
ALTER TABLE webhook.delivery_failures ALTER COLUMN failed_at SET DEFAULT pg_catalog.clock_timestamp();
ALTER TABLE webhook.inbox_failures ALTER COLUMN failed_at SET DEFAULT pg_catalog.clock_timestamp();

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

-- The partitions' times, read with it.
-- The archive's partitions, oldest first: each day's, the default one
-- (no bounds), and after an upgrade from a release before partitioning,
-- the one holding everything archived before it (no lower bound).
CREATE OR REPLACE VIEW webhook.archive_partitions AS
SELECT c.oid::pg_catalog.regclass AS partition,
       b.lower_id IS NULL AND b.upper_id IS NULL AS is_default,
       b.lower_id, b.upper_id,
       webhook._id_time(b.lower_id) AS from_time,
       webhook._id_time(b.upper_id) AS to_time,
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
-- Claims that complete on commit say so, for the rollup. No default: only
-- the catalog changes, whatever the archive's size.
ALTER TABLE webhook.delivery_log ADD COLUMN claim_completes boolean;

-- The inbox's statistics count the events set aside by a quarantine of
-- their entity apart from those backing off.
CREATE OR REPLACE VIEW webhook.inbox_stats AS
SELECT provider, consumer,
       count(*) FILTER (WHERE status IN ('ready', 'leased') AND run_at <= now) AS ready,
       count(*) FILTER (WHERE status = 'ready' AND run_at > now AND run_at <> 'infinity') AS scheduled,
       count(*) FILTER (WHERE status = 'leased' AND run_at > now) AS leased,
       count(*) FILTER (WHERE status = 'dead') AS dead,
       max(now - run_at) FILTER (WHERE status IN ('ready', 'leased') AND run_at <= now)
           AS oldest_ready_age,
       -- Set aside by a quarantine of their entity (webhook_quarantine).
       count(*) FILTER (WHERE status = 'ready' AND run_at = 'infinity') AS quarantined
  FROM (SELECT provider, consumer, status, run_at FROM webhook.inbox
         WHERE status IN ('ready', 'leased')
        UNION ALL
        SELECT provider, consumer, status, run_at FROM webhook.inbox
         WHERE status = 'dead') AS i,
       pg_catalog.clock_timestamp() AS now
 GROUP BY provider, consumer;
COMMENT ON VIEW webhook.inbox_stats IS
    'The inbox per provider and consumer: ready, scheduled (backing off), leased, dead, the age of the oldest ready event, and quarantined (set aside with their entity)';
COMMENT ON COLUMN webhook.delivery_log.claim_completes IS 'True for a new event''s claim made with complete_on_commit: committed, it completed the event (unless it failed in the same transaction); NULL otherwise';

-- The lock webhook_release waits for (flow.sql; written in Rust).
CREATE  FUNCTION webhook."_lock_quarantines"(
	"provider" TEXT /* & str */
) RETURNS void
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'lock_quarantines_wrapper';
COMMENT ON FUNCTION webhook._lock_quarantines(text) IS
    'Internal: wait until no call of webhook_next may still set aside a provider''s quarantined events, and keep new ones from it until the transaction ends';

-- Replays (replay.sql): the replay that last queued an inbox row.
ALTER TABLE webhook.inbox ADD COLUMN replay_id uuid;
CREATE INDEX inbox_replay_idx ON webhook.inbox (replay_id) WHERE replay_id IS NOT NULL;
COMMENT ON COLUMN webhook.inbox.replay_id IS 'The replay (webhook.replays) that last queued it; NULL for work a delivery queued';

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

-- pg_webhook_inbox: steering the inbox.
--
-- Operators steer what webhook_next hands out, never what intake takes:
-- a delivery is verified, archived, deduplicated, queued and answered 2xx
-- whatever is paused or limited here. Everything acts in the statement
-- that leases, with no process of its own:
--
--   webhook.pauses    a provider, a consumer, or both, paused: their ready
--                     events are not leased until webhook_resume. A row
--                     naming an entity quarantines it: its events are set
--                     aside (run_at 'infinity') until webhook_release.
--   webhook.limits    per consumer (and optionally one provider): at most
--                     max_leases leases live at once; at most rate leases
--                     a second, burst at a time; a circuit breaker that
--                     stops leasing after breaker_failures failures in a
--                     row, and lets one event through after
--                     breaker_cooldown. Breakers are kept per provider
--                     even under a consumer-wide limit: one provider's
--                     failures (one team's, where scopes split a database
--                     between teams) never stop another's events.
--   webhook.limit_slots   the rows caps and rates are enforced with.
--   webhook.breakers      each breaker's state, one per consumer and
--                         provider whose events have failed.
--
-- Caps and rates hold across every backend without a lock anyone waits
-- for: a cap of N is N slot rows, each holding the lease it was last
-- given; a rate of R a second with a burst of B is B slot rows, each
-- usable once every B/R seconds. webhook_next takes free slots FOR UPDATE
-- SKIP LOCKED (a slot another worker is filling is skipped, not waited
-- for), leases at most as many events, and writes the leases into the
-- slots it used. A rolled-back lease frees its slot with it.
--
-- Pauses and limits are read by webhook_next from a per-backend cache that
-- a committed change drops in every backend (the trigger in finalize.sql),
-- so a pause takes hold at the next call and a consumer nobody limits pays
-- nothing for the feature.


CREATE TABLE webhook.pauses (
    -- '' : every provider / every consumer / the whole queue.
    provider   text        NOT NULL DEFAULT '',
    consumer   text        NOT NULL DEFAULT '',
    entity_key text        NOT NULL DEFAULT '',
    paused_at  timestamptz NOT NULL DEFAULT pg_catalog.now(),
    paused_by  text        NOT NULL DEFAULT SESSION_USER,
    reason     text,
    CONSTRAINT pauses_pkey PRIMARY KEY (provider, consumer, entity_key),
    CONSTRAINT pauses_scope_check CHECK (provider <> '' OR consumer <> ''),
    CONSTRAINT pauses_entity_check CHECK (entity_key = '' OR provider <> ''),
    CONSTRAINT pauses_reason_check CHECK (pg_catalog.octet_length(reason) <= 2048)
);
COMMENT ON TABLE webhook.pauses IS
    'Paused inbox work: a provider, a consumer or both (entity_key empty), or one entity of a provider quarantined; set with webhook_pause and webhook_quarantine';
COMMENT ON COLUMN webhook.pauses.provider IS 'The provider paused; empty: every provider (of the consumer)';
COMMENT ON COLUMN webhook.pauses.consumer IS 'The consumer paused; empty: every consumer (of the provider)';
COMMENT ON COLUMN webhook.pauses.entity_key IS 'A quarantined entity (the key the provider''s ordering reads); empty for a pause';
COMMENT ON COLUMN webhook.pauses.paused_at IS 'When it was paused';
COMMENT ON COLUMN webhook.pauses.paused_by IS 'Who paused it (the session user)';
COMMENT ON COLUMN webhook.pauses.reason IS 'Why, as the operator said';

CREATE TABLE webhook.limits (
    consumer         text             NOT NULL,
    -- '' : every provider's events of the consumer, together.
    provider         text             NOT NULL DEFAULT '',
    max_leases       integer
                     CONSTRAINT limits_max_leases_check CHECK (max_leases BETWEEN 1 AND 10000),
    rate             double precision
                     CONSTRAINT limits_rate_check CHECK (rate > 0 AND rate <= 100000),
    burst            integer
                     CONSTRAINT limits_burst_check CHECK (burst BETWEEN 1 AND 10000),
    breaker_failures integer
                     CONSTRAINT limits_breaker_failures_check CHECK (breaker_failures BETWEEN 1 AND 1000000),
    breaker_cooldown interval
                     CONSTRAINT limits_breaker_cooldown_check CHECK (breaker_cooldown > interval '0'),
    updated_at       timestamptz      NOT NULL DEFAULT pg_catalog.now(),
    updated_by       text             NOT NULL DEFAULT SESSION_USER,
    CONSTRAINT limits_pkey PRIMARY KEY (consumer, provider),
    CONSTRAINT limits_rate_burst_check CHECK ((rate IS NULL) = (burst IS NULL)),
    CONSTRAINT limits_breaker_check CHECK ((breaker_failures IS NULL) = (breaker_cooldown IS NULL)),
    CONSTRAINT limits_any_check CHECK (max_leases IS NOT NULL OR rate IS NOT NULL OR breaker_failures IS NOT NULL)
);
COMMENT ON TABLE webhook.limits IS
    'Limits on what webhook_next leases for a consumer (optionally of one provider): a concurrency cap, a rate, a circuit breaker; set with webhook_set_limit';
COMMENT ON COLUMN webhook.limits.consumer IS 'The consumer limited';
COMMENT ON COLUMN webhook.limits.provider IS 'The provider whose events are limited; empty: all of the consumer''s, together';
COMMENT ON COLUMN webhook.limits.max_leases IS 'At most this many leases live at once';
COMMENT ON COLUMN webhook.limits.rate IS 'At most this many leases a second, on average';
COMMENT ON COLUMN webhook.limits.burst IS 'At most this many leases at once within the rate';
COMMENT ON COLUMN webhook.limits.breaker_failures IS 'Failed attempts in a row (webhook_fail) that open the circuit breaker';
COMMENT ON COLUMN webhook.limits.breaker_cooldown IS 'How long an open breaker leases nothing before letting one event through';
COMMENT ON COLUMN webhook.limits.updated_at IS 'When the limit was last set';
COMMENT ON COLUMN webhook.limits.updated_by IS 'Who set it (the session user)';

CREATE TYPE webhook.slot_kind AS ENUM ('lease', 'rate');
COMMENT ON TYPE webhook.slot_kind IS
    'What a limit slot stands for: lease (one of max_leases live leases), rate (one of burst leases per burst/rate seconds)';

CREATE TABLE webhook.limit_slots (
    consumer text              NOT NULL,
    provider text              NOT NULL,
    kind     webhook.slot_kind NOT NULL,
    n        integer           NOT NULL,
    -- The lease the slot was last given; a lease slot is free once that
    -- lease is no longer live.
    lease_id uuid,
    -- When it was last given; a rate slot is free burst/rate seconds after.
    used_at  timestamptz,
    CONSTRAINT limit_slots_pkey PRIMARY KEY (consumer, provider, kind, n),
    CONSTRAINT limit_slots_limit_fkey FOREIGN KEY (consumer, provider)
        REFERENCES webhook.limits (consumer, provider) ON DELETE CASCADE
);
COMMENT ON TABLE webhook.limit_slots IS
    'The slots concurrency caps and rates are enforced with: max_leases lease slots, burst rate slots per limit';
COMMENT ON COLUMN webhook.limit_slots.consumer IS 'The limit''s consumer';
COMMENT ON COLUMN webhook.limit_slots.provider IS 'The limit''s provider (empty: all)';
COMMENT ON COLUMN webhook.limit_slots.kind IS 'lease (a concurrency slot) or rate (a rate slot)';
COMMENT ON COLUMN webhook.limit_slots.n IS 'The slot''s number, from 0';
COMMENT ON COLUMN webhook.limit_slots.lease_id IS 'The lease it was last given';
COMMENT ON COLUMN webhook.limit_slots.used_at IS 'When it was last given';

CREATE TYPE webhook.breaker_state AS ENUM ('closed', 'open', 'half_open');
COMMENT ON TYPE webhook.breaker_state IS
    'A circuit breaker: closed (leasing), open (leasing nothing until its cooldown ends), half_open (one event let through: its success closes the breaker, its failure opens it again)';

-- A breaker follows the most specific limit with a breaker that covers
-- its provider (webhook.limits: the provider's own, else the consumer's);
-- its row is made by the first failure it counts.
CREATE TABLE webhook.breakers (
    consumer   text                  NOT NULL,
    provider   text                  NOT NULL,
    state      webhook.breaker_state NOT NULL DEFAULT 'closed',
    failures   integer               NOT NULL DEFAULT 0,
    opened_at  timestamptz,
    -- Half open: the lease let through.
    probe      uuid,
    changed_at timestamptz           NOT NULL DEFAULT pg_catalog.now(),
    CONSTRAINT breakers_pkey PRIMARY KEY (consumer, provider)
);
COMMENT ON TABLE webhook.breakers IS 'Each circuit breaker''s state (its settings are in webhook.limits)';
COMMENT ON COLUMN webhook.breakers.consumer IS 'The consumer it guards';
COMMENT ON COLUMN webhook.breakers.provider IS 'The provider whose events it guards (each has its own, under a consumer-wide limit too)';
COMMENT ON COLUMN webhook.breakers.state IS 'closed, open or half_open';
COMMENT ON COLUMN webhook.breakers.failures IS 'Failed attempts since the last success';
COMMENT ON COLUMN webhook.breakers.opened_at IS 'When it last opened';
COMMENT ON COLUMN webhook.breakers.probe IS 'Half open: the lease let through';
COMMENT ON COLUMN webhook.breakers.changed_at IS 'When its state last changed';

-- Whether a lease is live: its row is leased and the lease has not run
-- out. What frees a lease slot and a half-open breaker's probe. (A view
-- says it in full: its readers would need EXECUTE on this.)
CREATE FUNCTION webhook._lease_live(lease uuid) RETURNS boolean
LANGUAGE sql STABLE
AS $$
SELECT EXISTS (SELECT FROM webhook.inbox i
                WHERE i.claim_id = lease AND i.status = 'leased'
                  AND i.run_at > pg_catalog.clock_timestamp())
$$;
COMMENT ON FUNCTION webhook._lease_live(uuid) IS 'Internal: whether a lease is live (leased, not run out)';

-- The checks every steering function makes of a name it is given.
CREATE FUNCTION webhook._check_name(fn text, arg text, value text, required boolean) RETURNS text
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF value IS NULL THEN
        IF required THEN
            RAISE EXCEPTION '%: argument "%" must not be NULL', fn, arg
                USING ERRCODE = 'null_value_not_allowed';
        END IF;
        RETURN '';
    END IF;
    IF value = '' OR pg_catalog.octet_length(value) > 255 THEN
        RAISE EXCEPTION '%: argument "%" must be 1 to 255 bytes', fn, arg
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN value;
END
$$;
COMMENT ON FUNCTION webhook._check_name(text, text, text, boolean) IS
    'Internal: a steering function''s name argument checked (NULL refused when required, else read as every one: empty)';

-- Pause a provider (for every consumer), a consumer (for every provider),
-- or one consumer's events of one provider. Intake goes on; webhook_next
-- leases none of their events until webhook_resume. Leases already taken
-- run to their end. Returns whether it was not paused already.
CREATE FUNCTION @extschema@.webhook_pause(
    provider text DEFAULT NULL,
    consumer text DEFAULT NULL,
    reason   text DEFAULT NULL
) RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p text := webhook._check_name('webhook_pause', 'provider', webhook_pause.provider, false);
    c text := webhook._check_name('webhook_pause', 'consumer', webhook_pause.consumer, false);
    added boolean;
BEGIN
    IF p = '' AND c = '' THEN
        RAISE EXCEPTION 'webhook_pause: argument "provider" or "consumer" must be given'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF pg_catalog.octet_length(webhook_pause.reason) > 2048 THEN
        RAISE EXCEPTION 'webhook_pause: argument "reason" must be at most 2048 bytes'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO webhook.pauses (provider, consumer, reason)
    VALUES (p, c, webhook_pause.reason)
    ON CONFLICT ON CONSTRAINT pauses_pkey DO NOTHING
    RETURNING true INTO added;
    RETURN coalesce(added, false);
END
$$;
COMMENT ON FUNCTION @extschema@.webhook_pause(text, text, text) IS
    'For operators: stop leasing a provider''s events, a consumer''s, or one consumer''s of one provider (intake goes on); returns whether it was not paused already';

-- Undo webhook_pause for exactly that provider and consumer, and close
-- their open circuit breakers (an operator who says "go" means it).
-- Returns whether anything was paused or open.
CREATE FUNCTION @extschema@.webhook_resume(
    provider text DEFAULT NULL,
    consumer text DEFAULT NULL
) RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p text := webhook._check_name('webhook_resume', 'provider', webhook_resume.provider, false);
    c text := webhook._check_name('webhook_resume', 'consumer', webhook_resume.consumer, false);
    resumed bigint;
    closed bigint;
BEGIN
    IF p = '' AND c = '' THEN
        RAISE EXCEPTION 'webhook_resume: argument "provider" or "consumer" must be given'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    DELETE FROM webhook.pauses s WHERE s.provider = p AND s.consumer = c AND s.entity_key = '';
    GET DIAGNOSTICS resumed = ROW_COUNT;
    UPDATE webhook.breakers b
       SET state = 'closed', failures = 0, probe = NULL, changed_at = pg_catalog.now()
     WHERE b.state <> 'closed'
       AND (p = '' OR b.provider = p) AND (c = '' OR b.consumer = c);
    GET DIAGNOSTICS closed = ROW_COUNT;
    RETURN resumed + closed > 0;
END
$$;
COMMENT ON FUNCTION @extschema@.webhook_resume(text, text) IS
    'For operators: lease a paused provider''s or consumer''s events again (the same provider and consumer as webhook_pause), and close their open circuit breakers; returns whether anything was paused or open';

-- Quarantine one entity of a provider registered with ordering (for one
-- consumer, or all): its ready events are set aside now, and so is every
-- later one webhook_next comes across, until webhook_release. The rest of
-- the queue drains past them. Returns how many were set aside now.
CREATE FUNCTION @extschema@.webhook_quarantine(
    provider   text,
    entity_key text,
    consumer   text DEFAULT NULL,
    reason     text DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p text := webhook._check_name('webhook_quarantine', 'provider', webhook_quarantine.provider, true);
    e text := webhook._check_name('webhook_quarantine', 'entity_key', webhook_quarantine.entity_key, true);
    c text := webhook._check_name('webhook_quarantine', 'consumer', webhook_quarantine.consumer, false);
    set_aside bigint;
BEGIN
    IF NOT EXISTS (SELECT FROM webhook.providers r WHERE r.name = p) THEN
        RAISE EXCEPTION 'webhook_quarantine: argument "provider": no provider "%" is registered', p
            USING ERRCODE = 'undefined_object';
    END IF;
    IF NOT EXISTS (SELECT FROM webhook.providers r WHERE r.name = p AND r.entity_key_from IS NOT NULL) THEN
        RAISE EXCEPTION 'webhook_quarantine: argument "provider": "%" has no entity key', p
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'An entity is what the provider''s ordering reads (entity_key_from): register it with ordering first.';
    END IF;
    IF pg_catalog.octet_length(webhook_quarantine.reason) > 2048 THEN
        RAISE EXCEPTION 'webhook_quarantine: argument "reason" must be at most 2048 bytes'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO webhook.pauses (provider, consumer, entity_key, reason)
    VALUES (p, c, e, webhook_quarantine.reason)
    ON CONFLICT ON CONSTRAINT pauses_pkey DO NOTHING;
    UPDATE webhook.inbox i SET run_at = 'infinity'
     WHERE i.provider = p AND i.entity_key = e AND (c = '' OR i.consumer = c)
       AND i.status = 'ready' AND i.run_at <> 'infinity';
    GET DIAGNOSTICS set_aside = ROW_COUNT;
    RETURN set_aside;
END
$$;
COMMENT ON FUNCTION @extschema@.webhook_quarantine(text, text, text, text) IS
    'For operators: set one entity''s inbox events aside (one consumer''s, or all), now and as more arrive, until webhook_release; intake goes on; returns how many were set aside now';

-- End a quarantine (the same provider, entity and consumer): the events
-- set aside are ready again, behind what is queued now, unless another
-- quarantine still covers them. Returns how many are ready again. Calls
-- of webhook_next leave the provider's events alone until it commits.
CREATE FUNCTION @extschema@.webhook_release(
    provider   text,
    entity_key text,
    consumer   text DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p text := webhook._check_name('webhook_release', 'provider', webhook_release.provider, true);
    e text := webhook._check_name('webhook_release', 'entity_key', webhook_release.entity_key, true);
    c text := webhook._check_name('webhook_release', 'consumer', webhook_release.consumer, false);
    released bigint;
BEGIN
    -- Wait for the calls of webhook_next that may still set this
    -- provider's events aside, and keep new ones from doing so until this
    -- transaction ends: the UPDATE below must see every event set aside.
    PERFORM webhook._lock_quarantines(p);
    DELETE FROM webhook.pauses s WHERE s.provider = p AND s.consumer = c AND s.entity_key = e;
    UPDATE webhook.inbox i SET run_at = pg_catalog.clock_timestamp()
     WHERE i.provider = p AND i.entity_key = e AND (c = '' OR i.consumer = c)
       AND i.status = 'ready' AND i.run_at = 'infinity'
       AND NOT EXISTS (SELECT FROM webhook.pauses s
                        WHERE s.provider = p AND s.entity_key = e AND s.consumer IN ('', i.consumer));
    GET DIAGNOSTICS released = ROW_COUNT;
    RETURN released;
END
$$;
COMMENT ON FUNCTION @extschema@.webhook_release(text, text, text) IS
    'For operators: end an entity''s quarantine (the same consumer as webhook_quarantine); its events are ready again unless another quarantine covers them; returns how many';

-- Set (or, with every limit NULL, remove) a consumer's limits, for all
-- its events or one provider's. Lowering a cap refuses new leases until
-- the live ones fit; a limit changed resets its rate and breaker.
CREATE FUNCTION @extschema@.webhook_set_limit(
    consumer         text,
    provider         text DEFAULT NULL,
    max_leases       integer DEFAULT NULL,
    rate             double precision DEFAULT NULL,
    burst            integer DEFAULT NULL,
    breaker_failures integer DEFAULT NULL,
    breaker_cooldown interval DEFAULT NULL
) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c text := webhook._check_name('webhook_set_limit', 'consumer', webhook_set_limit.consumer, true);
    p text := webhook._check_name('webhook_set_limit', 'provider', webhook_set_limit.provider, false);
    b integer := webhook_set_limit.burst;
    cooldown interval := webhook_set_limit.breaker_cooldown;
    live uuid[];
BEGIN
    IF webhook_set_limit.max_leases NOT BETWEEN 1 AND 10000 THEN
        RAISE EXCEPTION 'webhook_set_limit: argument "max_leases" must be between 1 and 10000'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT (webhook_set_limit.rate > 0 AND webhook_set_limit.rate <= 100000) THEN
        RAISE EXCEPTION 'webhook_set_limit: argument "rate" must be more than 0 and at most 100000 (leases a second)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF b NOT BETWEEN 1 AND 10000 THEN
        RAISE EXCEPTION 'webhook_set_limit: argument "burst" must be between 1 and 10000'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF b IS NOT NULL AND webhook_set_limit.rate IS NULL THEN
        RAISE EXCEPTION 'webhook_set_limit: argument "burst" needs a rate'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF webhook_set_limit.breaker_failures NOT BETWEEN 1 AND 1000000 THEN
        RAISE EXCEPTION 'webhook_set_limit: argument "breaker_failures" must be between 1 and 1000000'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF cooldown <= interval '0' THEN
        RAISE EXCEPTION 'webhook_set_limit: argument "breaker_cooldown" must be positive'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF cooldown IS NOT NULL AND webhook_set_limit.breaker_failures IS NULL THEN
        RAISE EXCEPTION 'webhook_set_limit: argument "breaker_cooldown" needs breaker_failures'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- A second's worth at once, and half a minute to cool down, unless said.
    IF webhook_set_limit.rate IS NOT NULL AND b IS NULL THEN
        b := LEAST(10000, GREATEST(1, pg_catalog.ceil(webhook_set_limit.rate)::integer));
    END IF;
    IF webhook_set_limit.breaker_failures IS NOT NULL AND cooldown IS NULL THEN
        cooldown := interval '30 seconds';
    END IF;

    -- The live leases the old cap's slots hold stay counted under the new.
    SELECT pg_catalog.array_agg(s.lease_id ORDER BY s.n) INTO live
      FROM webhook.limit_slots s
     WHERE s.consumer = c AND s.provider = p AND s.kind = 'lease' AND webhook._lease_live(s.lease_id);
    DELETE FROM webhook.limits l WHERE l.consumer = c AND l.provider = p;
    -- The breakers this limit governed start again closed under the new
    -- one (or none): the provider's own, or, for a consumer-wide limit,
    -- those of providers without a breaker of their own.
    DELETE FROM webhook.breakers b
     WHERE b.consumer = c
       AND (b.provider = p
            OR p = '' AND NOT EXISTS (SELECT FROM webhook.limits l
                                       WHERE l.consumer = c AND l.provider = b.provider
                                         AND l.breaker_failures IS NOT NULL));
    IF webhook_set_limit.max_leases IS NULL AND webhook_set_limit.rate IS NULL
       AND webhook_set_limit.breaker_failures IS NULL THEN
        RETURN;
    END IF;
    INSERT INTO webhook.limits (consumer, provider, max_leases, rate, burst, breaker_failures, breaker_cooldown)
    VALUES (c, p, webhook_set_limit.max_leases, webhook_set_limit.rate, b,
            webhook_set_limit.breaker_failures, cooldown);
    INSERT INTO webhook.limit_slots (consumer, provider, kind, n, lease_id)
    SELECT c, p, 'lease', g.n, live[g.n + 1]
      FROM pg_catalog.generate_series(0, webhook_set_limit.max_leases - 1) AS g (n);
    INSERT INTO webhook.limit_slots (consumer, provider, kind, n)
    SELECT c, p, 'rate', g.n FROM pg_catalog.generate_series(0, b - 1) AS g (n);
END
$$;
COMMENT ON FUNCTION @extschema@.webhook_set_limit(text, text, integer, double precision, integer, integer, interval) IS
    'For operators: limit what webhook_next leases for a consumer (all its events, or one provider''s): max_leases live at once, rate a second with burst at once (default: a second''s worth), a circuit breaker opening after breaker_failures failures in a row for breaker_cooldown (default 30 s); every limit NULL removes them';

-- What is paused and quarantined, and how much waits behind each.
CREATE VIEW webhook.paused AS
SELECT s.provider, s.consumer, s.entity_key,
       CASE WHEN s.entity_key <> '' THEN 'quarantine' ELSE 'pause' END AS kind,
       s.paused_at, s.paused_by, s.reason,
       (SELECT pg_catalog.count(*) FROM webhook.inbox i
         WHERE i.status = 'ready'
           AND (s.provider = '' OR i.provider = s.provider)
           AND (s.consumer = '' OR i.consumer = s.consumer)
           AND (s.entity_key = '' OR i.entity_key = s.entity_key)) AS waiting
  FROM webhook.pauses s;
COMMENT ON VIEW webhook.paused IS
    'Pauses and quarantines in effect, with how many ready events each holds back (waiting)';

-- Each limit with what it allows now.
CREATE VIEW webhook.limits_in_effect AS
SELECT l.consumer, l.provider, l.max_leases,
       (SELECT pg_catalog.count(*) FROM webhook.limit_slots s
         WHERE s.consumer = l.consumer AND s.provider = l.provider AND s.kind = 'lease'
           AND EXISTS (SELECT FROM webhook.inbox i
                        WHERE i.claim_id = s.lease_id AND i.status = 'leased'
                          AND i.run_at > pg_catalog.clock_timestamp())) AS live_leases,
       l.rate, l.burst,
       (SELECT pg_catalog.count(*) FROM webhook.limit_slots s
         WHERE s.consumer = l.consumer AND s.provider = l.provider AND s.kind = 'rate'
           AND s.used_at > pg_catalog.clock_timestamp() - pg_catalog.make_interval(secs => l.burst / l.rate))
           AS rate_used,
       l.breaker_failures, l.breaker_cooldown, b.state AS breaker_state, b.failures AS breaker_failures_now,
       b.opened_at AS breaker_opened_at, l.updated_at, l.updated_by
  FROM webhook.limits l
  -- The breakers it governs (one per provider), the worst first.
  LEFT JOIN LATERAL (
       SELECT x.state, x.failures, x.opened_at
         FROM webhook.breakers x
        WHERE l.breaker_failures IS NOT NULL AND x.consumer = l.consumer
          AND (x.provider = l.provider
               OR l.provider = '' AND NOT EXISTS (SELECT FROM webhook.limits y
                                                   WHERE y.consumer = x.consumer AND y.provider = x.provider
                                                     AND y.breaker_failures IS NOT NULL))
        ORDER BY x.state = 'open' DESC, x.state = 'half_open' DESC, x.failures DESC
        LIMIT 1) b ON true;
COMMENT ON VIEW webhook.limits_in_effect IS
    'Each limit with its live leases (of max_leases), the rate slots used in the last burst/rate seconds, and the state of the worst circuit breaker it governs (one per provider)';


-- pg_webhook_inbox: backfilling a new consumer.
--
-- A consumer added to a provider (webhook_register_provider's consumers)
-- gets the events queued from then on. webhook_backfill queues it the
-- provider's earlier inbox events too, those first seen in a time range,
-- for that consumer only: each event once (a second run, or one crashed
-- and run again, adds only what is missing), from the archive row that
-- queued it, with its ordering. The other consumers are not touched.


-- Queue for `consumer` the provider's inbox events first seen in
-- [since, until), at `rate` a second from now (their run times spread, so
-- that the events queued live meanwhile are not behind all of them), or
-- all ready at once. Returns how many were queued.
CREATE FUNCTION @extschema@.webhook_backfill(
    provider text,
    consumer text,
    since    timestamptz,
    until    timestamptz DEFAULT NULL,
    rate     double precision DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p text := webhook._check_name('webhook_backfill', 'provider', webhook_backfill.provider, true);
    c text := webhook._check_name('webhook_backfill', 'consumer', webhook_backfill.consumer, true);
    upto timestamptz := coalesce(webhook_backfill.until, pg_catalog.now());
    queued bigint;
BEGIN
    IF webhook_backfill.since IS NULL THEN
        RAISE EXCEPTION 'webhook_backfill: argument "since" must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF NOT (webhook_backfill.rate > 0 AND webhook_backfill.rate <= 100000) THEN
        RAISE EXCEPTION 'webhook_backfill: argument "rate" must be more than 0 and at most 100000 (events a second)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT EXISTS (SELECT FROM webhook.providers r WHERE r.name = p) THEN
        RAISE EXCEPTION 'webhook_backfill: argument "provider": no provider "%" is registered', p
            USING ERRCODE = 'undefined_object';
    END IF;
    IF NOT EXISTS (SELECT FROM webhook.providers r
                    WHERE r.name = p AND c = ANY (coalesce(NULLIF(r.consumers, '{}'), '{default}'))) THEN
        RAISE EXCEPTION 'webhook_backfill: argument "consumer": "%" is not a consumer of "%"', c, p
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Add it first: webhook_register_provider(provider, consumers => ARRAY[..., consumer]).';
    END IF;
    -- webhook_purge decides which archive rows may go from the events'
    -- inbox rows; it must not decide while rows are added here.
    PERFORM pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('pg_webhook_inbox archive partitions'));
    INSERT INTO webhook.inbox AS i (provider, event_id, consumer, event_type, delivery_id, entity_key,
                                    order_value, run_at)
    SELECT e.provider, e.event_id, c, e.event_type, e.claim_id, e.entity_key, e.order_value,
           pg_catalog.clock_timestamp()
               + coalesce((pg_catalog.row_number() OVER (ORDER BY e.first_seen_at, e.event_id) - 1)
                          / webhook_backfill.rate, 0) * interval '1 second'
      FROM webhook.events e
     WHERE e.provider = p AND e.status = 'queued'
       AND e.first_seen_at >= webhook_backfill.since AND e.first_seen_at < upto
       -- The archive row it was queued from is still there.
       AND EXISTS (SELECT FROM webhook.delivery_log l WHERE l.id = e.claim_id)
    ON CONFLICT ON CONSTRAINT inbox_pkey DO NOTHING;
    GET DIAGNOSTICS queued = ROW_COUNT;
    RETURN queued;
END
$$;
COMMENT ON FUNCTION @extschema@.webhook_backfill(text, text, timestamptz, timestamptz, double precision) IS
    'For operators: queue a provider''s inbox events first seen in [since, until) for one of its consumers (one added later), each once, optionally spread at rate a second; returns how many';


-- pg_webhook_inbox: replaying inbox events.
--
-- A bug shipped and last Tuesday's invoice.paid events were handled
-- wrong: after the fix, an operator runs them again, including those that
-- "succeeded". webhook_replay selects inbox work by a filter (provider,
-- consumer, event types, what became of it, a time range, error text, a
-- JSON path over the payload) and, once confirmed, puts each matching
-- event back in its consumer's queue, once:
--
--   webhook.replays        every replay: who, when, why, its filter, its
--                          rate and state (running, paused, cancelled);
--                          webhook.replay_progress, what is done and left.
--   webhook.replay_items   each event and consumer a replay queued, and
--                          what it was before (for webhook_replay_cancel).
--   webhook.inbox.replay_id  the replay that last queued the row;
--                          webhook_next returns it, so a worker knows it
--                          runs a replay, and of which.
--
-- Exactly once per replay: a replay is one statement (all its events are
-- queued, or none), and the same filter with the same reason names the
-- same replay, so running the command again (after a crash, or by
-- mistake) returns the replay already queued instead of a second one.
-- Only finished work (processed, dead, stale, filtered) is queued again: an event
-- still ready or leased is processed anyway and is left out. From then on
-- the inbox's own guarantee holds (a worker's effects commit with its
-- webhook_complete, a lease that ran out is taken over and its worker
-- fenced), across crashes and restarts.
--
-- Live traffic first: with a rate, the replay's events are due one after
-- another from now, so events arriving meanwhile are leased as soon as
-- they come, never behind the rest of the replay.


CREATE TYPE webhook.replay_state AS ENUM ('running', 'paused', 'cancelled');
COMMENT ON TYPE webhook.replay_state IS
    'Where a replay is: running (its events are due at their times), paused (set aside until webhook_replay_resume), cancelled (what had not started was put back)';

CREATE TABLE webhook.replays (
    id           uuid        NOT NULL DEFAULT pg_catalog.gen_random_uuid(),
    requested_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    requested_by text        NOT NULL DEFAULT SESSION_USER,
    reason       text        NOT NULL,
    -- The filter as given (webhook_replay's arguments), NULLs left out.
    filter       jsonb       NOT NULL,
    -- Events a second; NULL: all due at once.
    rate         double precision,
    state        webhook.replay_state NOT NULL DEFAULT 'running',
    -- Event and consumer pairs queued.
    events       bigint      NOT NULL,
    -- Put back as they were by webhook_replay_cancel.
    cancelled    bigint      NOT NULL DEFAULT 0,
    changed_at   timestamptz,
    changed_by   text,
    CONSTRAINT replays_pkey PRIMARY KEY (id),
    -- The same request names the same replay.
    CONSTRAINT replays_request_key UNIQUE (filter, reason),
    CONSTRAINT replays_reason_check CHECK (reason <> '' AND pg_catalog.octet_length(reason) <= 2048)
);
COMMENT ON TABLE webhook.replays IS
    'Every replay of inbox events: who asked, when, why, with which filter and rate, how many events, its state; see webhook.replay_progress';
COMMENT ON COLUMN webhook.replays.id IS 'The replay id, as webhook_next returns it with each of its events';
COMMENT ON COLUMN webhook.replays.requested_at IS 'When it was started';
COMMENT ON COLUMN webhook.replays.requested_by IS 'Who started it (the session user)';
COMMENT ON COLUMN webhook.replays.reason IS 'Why, as the operator said; with the filter, what names the replay';
COMMENT ON COLUMN webhook.replays.filter IS 'webhook_replay''s filter arguments (those given)';
COMMENT ON COLUMN webhook.replays.rate IS 'Events a second it was spread at; NULL: all at once';
COMMENT ON COLUMN webhook.replays.state IS 'running, paused (webhook_replay_pause) or cancelled (webhook_replay_cancel)';
COMMENT ON COLUMN webhook.replays.events IS 'How many event and consumer pairs it queued';
COMMENT ON COLUMN webhook.replays.cancelled IS 'How many of them webhook_replay_cancel put back before they ran';
COMMENT ON COLUMN webhook.replays.changed_at IS 'When it was last paused, resumed or cancelled';
COMMENT ON COLUMN webhook.replays.changed_by IS 'Who last paused, resumed or cancelled it';

CREATE TABLE webhook.replay_items (
    replay_id      uuid    NOT NULL,
    -- The inbox row: webhook.inbox's key.
    delivery_id    uuid    NOT NULL,
    consumer       text    NOT NULL,
    -- What the row was before the replay queued it.
    prior_status   webhook.inbox_status NOT NULL,
    prior_attempts integer NOT NULL,
    -- The replay that had queued it before, if any.
    prior_replay_id uuid,
    CONSTRAINT replay_items_pkey PRIMARY KEY (replay_id, delivery_id, consumer),
    CONSTRAINT replay_items_replay_fkey FOREIGN KEY (replay_id) REFERENCES webhook.replays (id) ON DELETE CASCADE
);
COMMENT ON TABLE webhook.replay_items IS 'Each inbox row (event and consumer) a replay queued, and what it was before';
COMMENT ON COLUMN webhook.replay_items.replay_id IS 'The replay';
COMMENT ON COLUMN webhook.replay_items.delivery_id IS 'The inbox row''s delivery_id';
COMMENT ON COLUMN webhook.replay_items.consumer IS 'The inbox row''s consumer';
COMMENT ON COLUMN webhook.replay_items.prior_status IS 'Its status before the replay: processed, dead, stale or filtered';
COMMENT ON COLUMN webhook.replay_items.prior_attempts IS 'Its attempts before the replay (which gave it a fresh budget)';
COMMENT ON COLUMN webhook.replay_items.prior_replay_id IS 'The replay that had queued it before, if any';

-- What webhook_replay's filter matches: finished inbox rows (with their
-- archive row still there, the payload a worker is given). The dry run
-- and the run read the same rows through this one function.
CREATE FUNCTION webhook._replay_matches(
    provider       text,
    consumer       text,
    event_types    text[],
    statuses       text[],
    since          timestamptz,
    until          timestamptz,
    error_contains text,
    payload_path   jsonpath
) RETURNS TABLE (delivery_id uuid, consumer text, provider text, event_id text, event_type text,
                 status webhook.inbox_status, attempts integer, queued_at timestamptz)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT i.delivery_id, i.consumer, i.provider, i.event_id, i.event_type, i.status, i.attempts, i.queued_at
  FROM webhook.inbox i
 WHERE i.status::text IN ('processed', 'dead', 'stale', 'filtered')
   AND ($1 IS NULL OR i.provider = $1)
   AND ($2 IS NULL OR i.consumer = $2)
   AND ($3 IS NULL OR i.event_type = ANY ($3))
   AND ($5 IS NULL OR i.queued_at >= $5)
   AND ($6 IS NULL OR i.queued_at < $6)
   AND (i.status::text = ANY ($4)
        -- failed: finished after at least one failed attempt.
        OR ('failed' = ANY ($4) AND i.status IN ('processed', 'dead')
            AND EXISTS (SELECT FROM webhook.inbox_failures f
                         WHERE f.provider = i.provider AND f.event_id = i.event_id
                           AND f.consumer = i.consumer)))
   AND ($7 IS NULL
        OR pg_catalog.strpos(pg_catalog.lower(i.last_error), pg_catalog.lower($7)) > 0
        OR EXISTS (SELECT FROM webhook.inbox_failures f
                    WHERE f.provider = i.provider AND f.event_id = i.event_id AND f.consumer = i.consumer
                      AND pg_catalog.strpos(pg_catalog.lower(f.error_message), pg_catalog.lower($7)) > 0))
   -- The archive row is still there (and its payload matches): one probe
   -- of its key per row, a subquery the planner cannot turn into a join,
   -- which it would plan blind (the filter's arguments are parameters)
   -- and could make a scan of the archive for every inbox row.
   AND coalesce((SELECT $8 IS NULL
                        -- silent: a payload the path does not fit is no match, not an error.
                        OR pg_catalog.jsonb_path_match(l.payload, $8, '{}', true) IS TRUE
                   FROM webhook.delivery_log l
                  WHERE l.id = i.delivery_id), false)
$$;
COMMENT ON FUNCTION webhook._replay_matches(text, text, text[], text[], timestamptz, timestamptz, text, jsonpath) IS
    'Internal: the finished inbox rows webhook_replay''s filter matches';

CREATE TYPE webhook.replay_result AS (
    replay_id uuid,
    dry_run   boolean,
    -- A run: false when the same filter and reason had already started it.
    started   boolean,
    events    bigint,
    sample    jsonb
);
COMMENT ON TYPE webhook.replay_result IS
    'webhook_replay''s answer: the replay (NULL for a dry run), whether this call started it, how many event and consumer pairs it holds (or would), and a sample of them';

-- Replay finished inbox work matching a filter. A dry run (the default)
-- changes nothing and says how many event and consumer pairs would be
-- queued, with a sample; a run queues them (each once, at `rate` a
-- second from now, or all at once) and returns the replay's id.
CREATE FUNCTION @extschema@.webhook_replay(
    provider       text DEFAULT NULL,
    consumer       text DEFAULT NULL,
    event_types    text[] DEFAULT NULL,
    statuses       text[] DEFAULT '{processed}',
    since          timestamptz DEFAULT NULL,
    until          timestamptz DEFAULT NULL,
    error_contains text DEFAULT NULL,
    payload_path   jsonpath DEFAULT NULL,
    reason         text DEFAULT NULL,
    rate           double precision DEFAULT NULL,
    dry_run        boolean DEFAULT true,
    sample         integer DEFAULT 10
) RETURNS webhook.replay_result
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p text := NULLIF(webhook._check_name('webhook_replay', 'provider', webhook_replay.provider, false), '');
    c text := NULLIF(webhook._check_name('webhook_replay', 'consumer', webhook_replay.consumer, false), '');
    request jsonb;
    result webhook.replay_result;
    started uuid;
BEGIN
    IF webhook_replay.statuses IS NULL OR pg_catalog.cardinality(webhook_replay.statuses) = 0
       OR NOT webhook_replay.statuses <@ ARRAY['processed', 'dead', 'stale', 'filtered', 'failed']
       OR array_position(webhook_replay.statuses, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'webhook_replay: argument "statuses" must list some of processed, dead, stale, filtered, failed'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF pg_catalog.cardinality(webhook_replay.event_types) > 1000
       OR array_position(webhook_replay.event_types, NULL) IS NOT NULL
       OR EXISTS (SELECT FROM pg_catalog.unnest(webhook_replay.event_types) t
                   WHERE t = '' OR pg_catalog.octet_length(t) > 255) THEN
        RAISE EXCEPTION 'webhook_replay: argument "event_types" must hold at most 1000 types of 1 to 255 bytes'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF webhook_replay.until <= webhook_replay.since THEN
        RAISE EXCEPTION 'webhook_replay: argument "until" must be later than "since"'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF webhook_replay.error_contains = '' OR pg_catalog.octet_length(webhook_replay.error_contains) > 2048 THEN
        RAISE EXCEPTION 'webhook_replay: argument "error_contains" must be 1 to 2048 bytes'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF pg_catalog.octet_length(webhook_replay.payload_path::text) > 4096 THEN
        RAISE EXCEPTION 'webhook_replay: argument "payload_path" must be at most 4096 bytes'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT (webhook_replay.rate > 0 AND webhook_replay.rate <= 100000) THEN
        RAISE EXCEPTION 'webhook_replay: argument "rate" must be more than 0 and at most 100000 (events a second)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF webhook_replay.dry_run IS NULL THEN
        RAISE EXCEPTION 'webhook_replay: argument "dry_run" must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF webhook_replay.sample IS NULL OR webhook_replay.sample NOT BETWEEN 0 AND 1000 THEN
        RAISE EXCEPTION 'webhook_replay: argument "sample" must be between 0 and 1000'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p IS NOT NULL AND NOT EXISTS (SELECT FROM webhook.providers r WHERE r.name = p) THEN
        RAISE EXCEPTION 'webhook_replay: argument "provider": no provider "%" is registered', p
            USING ERRCODE = 'undefined_object';
    END IF;

    IF webhook_replay.dry_run THEN
        SELECT NULL, true, false, pg_catalog.count(*),
               coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
                            'provider', m.provider, 'event_id', m.event_id, 'consumer', m.consumer,
                            'event_type', m.event_type, 'status', m.status, 'queued_at', m.queued_at)
                            ORDER BY m.queued_at, m.delivery_id)
                        FILTER (WHERE m.n <= webhook_replay.sample), '[]')
          INTO result
          FROM (SELECT x.*, pg_catalog.row_number() OVER (ORDER BY x.queued_at, x.delivery_id) AS n
                  FROM webhook._replay_matches(p, c, webhook_replay.event_types, webhook_replay.statuses,
                                               webhook_replay.since, webhook_replay.until,
                                               webhook_replay.error_contains, webhook_replay.payload_path) x) m;
        RETURN result;
    END IF;

    IF webhook_replay.reason IS NULL THEN
        RAISE EXCEPTION 'webhook_replay: argument "reason" must not be NULL for a run'
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = 'Say why (the fix deployed, the ticket): it names the replay, with its filter.';
    END IF;
    IF webhook_replay.reason = '' OR pg_catalog.octet_length(webhook_replay.reason) > 2048 THEN
        RAISE EXCEPTION 'webhook_replay: argument "reason" must be 1 to 2048 bytes'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    request := pg_catalog.jsonb_strip_nulls(pg_catalog.jsonb_build_object(
        'provider', p, 'consumer', c, 'event_types', webhook_replay.event_types,
        'statuses', webhook_replay.statuses, 'since', webhook_replay.since, 'until', webhook_replay.until,
        'error_contains', webhook_replay.error_contains, 'payload_path', webhook_replay.payload_path::text));

    -- The same request twice (a retry after a crash, a double click)
    -- waits for the first, then finds it.
    PERFORM pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('pg_webhook_inbox replay'),
                                             pg_catalog.hashtext(request::text || webhook_replay.reason));
    SELECT r.id, false, false, r.events, NULL INTO result
      FROM webhook.replays r
     WHERE r.filter = request AND r.reason = webhook_replay.reason;
    IF FOUND THEN
        RAISE NOTICE 'webhook_replay: replay % with this filter and reason was started at %; not queued again',
            result.replay_id, (SELECT r.requested_at FROM webhook.replays r WHERE r.id = result.replay_id)
            USING HINT = 'To run it again, give another reason.';
        RETURN result;
    END IF;

    -- webhook_purge decides which archive rows may go from the events'
    -- inbox rows; it must not decide while finished rows become ready.
    PERFORM pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('pg_webhook_inbox archive partitions'));
    INSERT INTO webhook.replays (reason, filter, rate, events)
    VALUES (webhook_replay.reason, request, webhook_replay.rate, 0)
    RETURNING webhook.replays.id INTO started;
    -- Row locks, no lock per event: a replay of any size fits the lock table.
    INSERT INTO webhook.replay_items (replay_id, delivery_id, consumer, prior_status, prior_attempts,
                                      prior_replay_id)
    SELECT started, i.delivery_id, i.consumer, i.status, i.attempts, i.replay_id
      FROM webhook.inbox i
     WHERE (i.delivery_id, i.consumer) IN (
               SELECT m.delivery_id, m.consumer
                 FROM webhook._replay_matches(p, c, webhook_replay.event_types, webhook_replay.statuses,
                                              webhook_replay.since, webhook_replay.until,
                                              webhook_replay.error_contains, webhook_replay.payload_path) m)
       -- Read again once locked: a row finished meanwhile, or queued by
       -- another replay, is as it is now.
       AND i.status::text IN ('processed', 'dead', 'stale', 'filtered')
       FOR UPDATE OF i;
    -- The metrics read a completion or a dead letter off its row, which
    -- the replay's lease rewrites: keep what no rollup has counted yet.
    PERFORM webhook._metrics_hold(h.outcome, ARRAY(
                SELECT i.claim_id FROM webhook.replay_items t
                  JOIN webhook.inbox i ON i.delivery_id = t.delivery_id AND i.consumer = t.consumer
                 WHERE t.replay_id = started AND t.prior_status::text = h.status))
       FROM (VALUES ('completion', 'processed'), ('dead_letter', 'dead')) AS h (outcome, status);
    UPDATE webhook.inbox i
       SET status = 'ready', attempts = 0, requeues = i.requeues + 1, replay_id = started,
           run_at = pg_catalog.clock_timestamp()
                    + coalesce((q.n - 1) / webhook_replay.rate, 0) * interval '1 second'
      FROM (SELECT t.delivery_id, t.consumer,
                   pg_catalog.row_number() OVER (ORDER BY j.queued_at, t.delivery_id, t.consumer) AS n
              FROM webhook.replay_items t
              JOIN webhook.inbox j ON j.delivery_id = t.delivery_id AND j.consumer = t.consumer
             WHERE t.replay_id = started) q
     WHERE i.delivery_id = q.delivery_id AND i.consumer = q.consumer;
    GET DIAGNOSTICS result.events = ROW_COUNT;
    UPDATE webhook.replays r SET events = result.events WHERE r.id = started;
    PERFORM pg_catalog.pg_notify('webhook_inbox', '');
    SELECT started, false, true, result.events, NULL INTO result;
    RETURN result;
END
$$;
COMMENT ON FUNCTION @extschema@.webhook_replay(text, text, text[], text[], timestamptz, timestamptz, text, jsonpath, text, double precision, boolean, integer) IS
    'For operators: run finished inbox events again (processed, dead, stale, filtered out, or failed at least once), chosen by provider, consumer, event types, time range, error text and a JSON path over the payload; a dry run (the default) counts and samples them, a run with a reason queues each once (the same filter and reason again returns the same replay), optionally at rate a second';

-- A running replay's events not yet leased are set aside until
-- webhook_replay_resume: due at the start of the year 9999, past every
-- pick (and apart from a quarantine's 'infinity', which a resume must not
-- undo, nor a release this). Leases already taken run to their end.
-- Returns how many were set aside.
CREATE FUNCTION @extschema@.webhook_replay_pause(replay_id uuid) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    held bigint;
BEGIN
    PERFORM webhook._replay_change('webhook_replay_pause', webhook_replay_pause.replay_id, 'running', 'paused');
    UPDATE webhook.inbox i SET run_at = '9999-01-01 00:00:00+00'
     WHERE i.replay_id = webhook_replay_pause.replay_id AND i.status = 'ready' AND i.run_at <> 'infinity';
    GET DIAGNOSTICS held = ROW_COUNT;
    RETURN held;
END
$$;
COMMENT ON FUNCTION @extschema@.webhook_replay_pause(uuid) IS
    'For operators: set a running replay''s events not yet leased aside until webhook_replay_resume; returns how many';

-- A paused replay's events are due again, spread at its rate from now.
CREATE FUNCTION @extschema@.webhook_replay_resume(replay_id uuid) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    spread double precision;
    due bigint;
BEGIN
    spread := webhook._replay_change('webhook_replay_resume', webhook_replay_resume.replay_id, 'paused', 'running');
    -- A quarantined entity's events stay aside.
    UPDATE webhook.inbox i
       SET run_at = pg_catalog.clock_timestamp() + coalesce((q.n - 1) / spread, 0) * interval '1 second'
      FROM (SELECT j.delivery_id, j.consumer,
                   pg_catalog.row_number() OVER (ORDER BY j.queued_at, j.delivery_id, j.consumer) AS n
              FROM webhook.inbox j
             WHERE j.replay_id = webhook_replay_resume.replay_id AND j.status = 'ready'
               AND j.run_at = '9999-01-01 00:00:00+00') q
     WHERE i.delivery_id = q.delivery_id AND i.consumer = q.consumer;
    GET DIAGNOSTICS due = ROW_COUNT;
    PERFORM pg_catalog.pg_notify('webhook_inbox', '');
    RETURN due;
END
$$;
COMMENT ON FUNCTION @extschema@.webhook_replay_resume(uuid) IS
    'For operators: let a paused replay''s events be leased again, spread at its rate from now; returns how many';

-- A replay's events not yet leased are put back as they were before it
-- (processed, dead, stale or filtered, with their attempts); leases already taken
-- run to their end. Returns how many were put back.
CREATE FUNCTION @extschema@.webhook_replay_cancel(replay_id uuid) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    undone bigint;
BEGIN
    PERFORM webhook._replay_change('webhook_replay_cancel', webhook_replay_cancel.replay_id, NULL, 'cancelled');
    UPDATE webhook.inbox i
       SET status = t.prior_status, attempts = t.prior_attempts, requeues = i.requeues - 1,
           replay_id = t.prior_replay_id, run_at = pg_catalog.clock_timestamp()
      FROM webhook.replay_items t
     WHERE t.replay_id = webhook_replay_cancel.replay_id
       AND i.delivery_id = t.delivery_id AND i.consumer = t.consumer
       -- Not an index condition: each item reaches its row by the inbox's
       -- key. On inbox_replay_idx the planner, blind to a replay just
       -- made, could scan the whole replay for every item.
       AND i.replay_id IS NOT DISTINCT FROM webhook_replay_cancel.replay_id AND i.status = 'ready';
    GET DIAGNOSTICS undone = ROW_COUNT;
    UPDATE webhook.replays r SET cancelled = undone WHERE r.id = webhook_replay_cancel.replay_id;
    RETURN undone;
END
$$;
COMMENT ON FUNCTION @extschema@.webhook_replay_cancel(uuid) IS
    'For operators: stop a replay: its events not yet leased are put back as they were before it; returns how many';

-- A replay's state changed from `from` (NULL: running or paused) to `to`,
-- under its row lock, with who and when; its rate returned.
CREATE FUNCTION webhook._replay_change(fn text, replay uuid, from_state webhook.replay_state,
                                       to_state webhook.replay_state) RETURNS double precision
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    was webhook.replay_state;
    spread double precision;
BEGIN
    IF replay IS NULL THEN
        RAISE EXCEPTION '%: argument "replay_id" must not be NULL', fn
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    SELECT r.state, r.rate INTO was, spread FROM webhook.replays r WHERE r.id = replay FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION '%: argument "replay_id": no replay %', fn, replay
            USING ERRCODE = 'undefined_object';
    END IF;
    IF was = 'cancelled' OR (from_state IS NOT NULL AND was <> from_state) THEN
        RAISE EXCEPTION '%: replay % is %', fn, replay, was
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    UPDATE webhook.replays r
       SET state = to_state, changed_at = pg_catalog.now(), changed_by = SESSION_USER
     WHERE r.id = replay;
    RETURN spread;
END
$$;
COMMENT ON FUNCTION webhook._replay_change(text, uuid, webhook.replay_state, webhook.replay_state) IS
    'Internal: a replay''s state changed (refused with 55000 when it is not in the state the change starts from)';

-- Each replay's progress: of its events, how many are still to run
-- (ready or leased for it, set aside while paused included), how many
-- ran, and how many a cancel put back. A running replay with nothing left
-- to run says finished. processed, dead and stale count the rows it still
-- holds (a later replay of the same rows holds them from then on).
CREATE VIEW webhook.replay_progress AS
SELECT r.id, r.requested_at, r.requested_by, r.reason, r.filter, r.rate,
       CASE WHEN r.state = 'running' AND coalesce(s.remaining, 0) = 0 THEN 'finished'
            ELSE r.state::text END AS state,
       r.events,
       r.events - coalesce(s.remaining, 0) - r.cancelled AS done,
       coalesce(s.remaining, 0) AS remaining,
       coalesce(s.processed, 0) AS processed,
       coalesce(s.dead, 0) AS dead,
       coalesce(s.stale, 0) AS stale,
       r.cancelled,
       r.changed_at, r.changed_by
  FROM webhook.replays r
  LEFT JOIN LATERAL (
      SELECT pg_catalog.count(*) FILTER (WHERE i.status IN ('ready', 'leased')) AS remaining,
             pg_catalog.count(*) FILTER (WHERE i.status = 'processed') AS processed,
             pg_catalog.count(*) FILTER (WHERE i.status = 'dead') AS dead,
             pg_catalog.count(*) FILTER (WHERE i.status = 'stale') AS stale
        FROM webhook.inbox i
       WHERE i.replay_id = r.id) s ON true;
COMMENT ON VIEW webhook.replay_progress IS
    'Each replay: its request, state (running, paused, cancelled, finished), events, done and remaining, how the events it holds ended, and how many a cancel put back';


-- pg_webhook_inbox: metrics over time.
--
-- Nothing here runs on the path of a delivery. Claims, leases, completions
-- and failures already leave a time-ordered trace: the archive's ids and
-- the inbox's lease ids are UUIDv7/v8 (their first 48 bits are the
-- millisecond they were made), failures carry their time. A rollup reads
-- what was written since its last run, counts it per minute, provider and
-- consumer into webhook.metric_minutes (kept webhook.metrics_retention)
-- and into webhook.metric_totals (kept for good: Prometheus counters never
-- go down), and moves its marks. A counter row updated by each claim would
-- make every claim of a provider wait for the one before it; the rollup is
-- one writer, once a minute or once a scrape, whatever the traffic.
--
-- Exactness. A row is counted once its transaction has committed, and a
-- rolled-back claim or lease is never seen at all. The rollup counts only
-- up to a bound that no transaction still running can write below: the
-- start of the oldest transaction of this database that holds a
-- transaction id (it has written) or is running a statement (it may be
-- about to), and nothing past the previous bound while a prepared
-- transaction waits. Attempts that have begun but not finished (a claim
-- being handled, a lease being worked) are kept in webhook.metric_open and
-- looked at again by each rollup until they end.


CREATE TABLE webhook.metric_minutes (
    minute    timestamptz      NOT NULL,
    provider  text             NOT NULL,
    -- The inbox consumer; '' for claims, deliveries and rejections.
    consumer  text             NOT NULL,
    metric    text             NOT NULL,
    -- The status, the rejection reason, or a histogram bucket's upper
    -- bound; '' when the metric has none.
    label     text             NOT NULL,
    count     bigint           NOT NULL,
    -- Histograms: the sum of the observations (seconds, or attempts).
    sum       double precision NOT NULL DEFAULT 0,
    CONSTRAINT metric_minutes_pkey PRIMARY KEY (minute, provider, consumer, metric, label)
);
COMMENT ON TABLE webhook.metric_minutes IS
    'Metrics per minute, provider and consumer, kept webhook.metrics_retention: what happened in each minute (rolled up from the archive, the inbox and the failures)';
COMMENT ON COLUMN webhook.metric_minutes.minute IS 'The minute it happened in (a completion: when it completed)';
COMMENT ON COLUMN webhook.metric_minutes.provider IS 'Provider name';
COMMENT ON COLUMN webhook.metric_minutes.consumer IS 'The inbox consumer; empty for claims, deliveries and rejections';
COMMENT ON COLUMN webhook.metric_minutes.metric IS 'deliveries, rejections, completions, failures, dead_letters, latency, processing or attempts (see docs/observability.md)';
COMMENT ON COLUMN webhook.metric_minutes.label IS 'deliveries: the claim status; rejections: the reason; histograms: the upper bound of the bucket (seconds, attempts, or +Inf)';
COMMENT ON COLUMN webhook.metric_minutes.count IS 'How many';
COMMENT ON COLUMN webhook.metric_minutes.sum IS 'Histograms: the sum of the observations';

CREATE TABLE webhook.metric_totals (
    provider  text             NOT NULL,
    consumer  text             NOT NULL,
    metric    text             NOT NULL,
    label     text             NOT NULL,
    count     bigint           NOT NULL,
    sum       double precision NOT NULL DEFAULT 0,
    CONSTRAINT metric_totals_pkey PRIMARY KEY (provider, consumer, metric, label)
);
COMMENT ON TABLE webhook.metric_totals IS
    'Metrics since counting began, never pruned: the counters webhook_metrics() exports';
COMMENT ON COLUMN webhook.metric_totals.provider IS 'Provider name';
COMMENT ON COLUMN webhook.metric_totals.consumer IS 'The inbox consumer; empty for claims, deliveries and rejections';
COMMENT ON COLUMN webhook.metric_totals.metric IS 'As in webhook.metric_minutes';
COMMENT ON COLUMN webhook.metric_totals.label IS 'As in webhook.metric_minutes';
COMMENT ON COLUMN webhook.metric_totals.count IS 'How many, in all';
COMMENT ON COLUMN webhook.metric_totals.sum IS 'Histograms: the sum of all observations';

-- Where the last rollup stopped. One row.
CREATE TABLE webhook.metric_marks (
    only_row      boolean     NOT NULL DEFAULT true CONSTRAINT metric_marks_only_row_check CHECK (only_row),
    -- Everything written before this time is counted: deliveries and
    -- leases whose id was made before it, failures that happened before it.
    counted_until timestamptz NOT NULL,
    rolled_up_at  timestamptz,
    CONSTRAINT metric_marks_pkey PRIMARY KEY (only_row)
);
-- Counting starts with the extension (or the upgrade that brought it).
-- The row is not kept by pg_dump: a restored database counts from its
-- restore on, its restored archive counted already in the restored totals.
INSERT INTO webhook.metric_marks (counted_until) VALUES (pg_catalog.now());
COMMENT ON TABLE webhook.metric_marks IS 'Where the metrics rollup stopped: everything before counted_until is counted';
COMMENT ON COLUMN webhook.metric_marks.only_row IS 'Always true: the table has one row';
COMMENT ON COLUMN webhook.metric_marks.counted_until IS 'Deliveries and leases whose id was made before it, and failures before it, are counted';
COMMENT ON COLUMN webhook.metric_marks.rolled_up_at IS 'When the last rollup ran';

-- Attempts begun but not finished when a rollup looked: a claim still
-- processing, a lease still held. Each rollup looks at them again.
CREATE TABLE webhook.metric_open (
    -- The claim's delivery id, or the lease's id.
    id         uuid        NOT NULL,
    provider   text        NOT NULL,
    event_id   text        NOT NULL,
    -- '' for a claim; the consumer for a lease.
    consumer   text        NOT NULL,
    started_at timestamptz NOT NULL,
    CONSTRAINT metric_open_pkey PRIMARY KEY (id)
);
COMMENT ON TABLE webhook.metric_open IS 'Attempts the metrics rollup saw begun and not yet finished; looked at again by every rollup';
COMMENT ON COLUMN webhook.metric_open.id IS 'The claim''s delivery id, or the lease''s id';
COMMENT ON COLUMN webhook.metric_open.provider IS 'Provider name';
COMMENT ON COLUMN webhook.metric_open.event_id IS 'The event''s id';
COMMENT ON COLUMN webhook.metric_open.consumer IS 'Empty for a claim; the consumer for a lease';
COMMENT ON COLUMN webhook.metric_open.started_at IS 'When the attempt began';

-- Outcomes an operator took back before a rollup had counted them. The
-- rollup reads a lease's completion off its inbox row, and a dead letter
-- off the dead row or event its failure parked: a replay or a requeue
-- that puts the row back to work (its next lease rewrites it) would
-- otherwise take the count with it. webhook._metrics_hold writes them
-- here; the next rollup counts and deletes them.
CREATE TABLE webhook.metric_held (
    -- The lease (or, for a claim, the delivery) the outcome belongs to.
    id          uuid        NOT NULL,
    outcome     text        NOT NULL CONSTRAINT metric_held_outcome_check CHECK (outcome IN ('completion', 'dead_letter')),
    provider    text        NOT NULL,
    consumer    text        NOT NULL,
    -- When it completed, or when the failure that parked it happened.
    at          timestamptz NOT NULL,
    -- Completions: when the event was queued, when the lease began, and
    -- the attempts it took.
    received_at timestamptz,
    started_at  timestamptz,
    attempts    integer,
    CONSTRAINT metric_held_pkey PRIMARY KEY (id)
);
COMMENT ON TABLE webhook.metric_held IS 'Completions and dead letters a replay or requeue undid before the metrics rollup counted them; the next rollup counts them';
COMMENT ON COLUMN webhook.metric_held.id IS 'The lease (or claimed delivery) the outcome belongs to';
COMMENT ON COLUMN webhook.metric_held.outcome IS 'completion or dead_letter';
COMMENT ON COLUMN webhook.metric_held.provider IS 'Provider name';
COMMENT ON COLUMN webhook.metric_held.consumer IS 'The inbox consumer; empty for a claim';
COMMENT ON COLUMN webhook.metric_held.at IS 'When it completed, or when the failure that parked it happened';
COMMENT ON COLUMN webhook.metric_held.received_at IS 'Completions: when the event was queued';
COMMENT ON COLUMN webhook.metric_held.started_at IS 'Completions: when the lease began';
COMMENT ON COLUMN webhook.metric_held.attempts IS 'Completions: the attempts the event took';

-- Before a replay or a requeue puts finished attempts back to work: keep
-- what no rollup has counted of them. `ids` are inbox leases (completed,
-- or failed and parked) or claimed deliveries whose failure parked their
-- event. Counted already is an outcome whose attempt a rollup saw
-- finished: a completion whose lease is below the marks and no longer
-- open, a failure before the marks. The marks are read under a share
-- lock taken first, in a statement of its own: a rollup running now
-- finishes before this looks, and the next one waits for this
-- transaction, so each outcome is counted by exactly one of the two.
CREATE FUNCTION webhook._metrics_hold(outcome text, ids uuid[]) RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    since timestamptz;
BEGIN
    SELECT m.counted_until INTO since FROM webhook.metric_marks m FOR SHARE;
    IF since IS NULL THEN
        RETURN;  -- counting starts again from the next rollup
    END IF;
    IF outcome = 'completion' THEN
        INSERT INTO webhook.metric_held (id, outcome, provider, consumer, at, received_at, started_at, attempts)
        SELECT i.claim_id, 'completion', i.provider, i.consumer, i.processed_at, i.queued_at,
               webhook._id_time(i.claim_id), i.attempts
          FROM webhook.inbox i
         WHERE i.claim_id = ANY (ids) AND i.status = 'processed'
           AND (i.claim_id >= webhook._archive_bound(since)
                OR EXISTS (SELECT FROM webhook.metric_open o WHERE o.id = i.claim_id))
        ON CONFLICT (id) DO NOTHING;
    ELSE
        INSERT INTO webhook.metric_held (id, outcome, provider, consumer, at)
        SELECT f.claim_id, 'dead_letter', f.provider, f.consumer, f.failed_at
          FROM webhook.inbox_failures f
         WHERE f.claim_id = ANY (ids) AND f.failed_at >= since
        UNION ALL
        SELECT f.delivery_id, 'dead_letter', l.provider, '', f.failed_at
          FROM webhook.delivery_failures f
          JOIN webhook.delivery_log l ON l.id = f.delivery_id
         WHERE f.delivery_id = ANY (ids) AND f.failed_at >= since
        ON CONFLICT (id) DO NOTHING;
    END IF;
END
$$;
COMMENT ON FUNCTION webhook._metrics_hold(text, uuid[]) IS
    'Internal: before a replay or requeue, keep the completions or dead letters of these attempts that no rollup has counted yet (webhook.metric_held)';

-- The histograms' buckets (inlined, like webhook._id_time): fixed, so
-- that Prometheus (histogram_quantile) and SQL (webhook_metric_quantile)
-- compute quantiles from the same counts.
CREATE FUNCTION webhook._metric_buckets(metric text) RETURNS double precision[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
SELECT CASE metric
       -- From receipt to processed: sub-second for a handler, hours for
       -- an event retried or backed off.
       WHEN 'latency' THEN '{0.01,0.05,0.1,0.25,0.5,1,2.5,5,10,30,60,300,900,3600,21600,86400,Infinity}'::float8[]
       -- One attempt, from its claim or lease to its end.
       WHEN 'processing' THEN '{0.005,0.01,0.025,0.05,0.1,0.25,0.5,1,2.5,5,10,30,60,300,Infinity}'::float8[]
       WHEN 'attempts' THEN '{1,2,3,4,5,10,25,Infinity}'::float8[]
       END
$$;
COMMENT ON FUNCTION webhook._metric_buckets(text) IS 'Internal: the upper bounds of a histogram''s buckets';

-- The bucket of a histogram an observation falls in, by its index in
-- webhook._metric_buckets: the first bound at least as large
-- (width_bucket counts the bounds at most as large, and an observation on
-- a bound belongs to it). Inlined, the metric a constant: the bounds are
-- folded into the plan.
CREATE FUNCTION webhook._metric_bucket(metric text, value double precision) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
SELECT pg_catalog.width_bucket(value, webhook._metric_buckets(metric))
       + CASE WHEN (webhook._metric_buckets(metric))[pg_catalog.width_bucket(value, webhook._metric_buckets(metric))]
                   OPERATOR(pg_catalog.=) value
              THEN 0 ELSE 1 END
$$;
COMMENT ON FUNCTION webhook._metric_bucket(text, double precision) IS
    'Internal: the index of the histogram bucket a value falls in';

-- A bucket's label, Prometheus's `le`: its upper bound.
CREATE FUNCTION webhook._metric_bucket_label(metric text, bucket integer) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
SELECT CASE WHEN (webhook._metric_buckets(metric))[bucket] OPERATOR(pg_catalog.=) 'Infinity' THEN '+Inf'
            ELSE ((webhook._metric_buckets(metric))[bucket])::text END
$$;
COMMENT ON FUNCTION webhook._metric_bucket_label(text, integer) IS
    'Internal: the label (upper bound) of a histogram bucket';

-- The provider a series, an alert or the console's overview names: the
-- provider itself where it is registered or already has series of its
-- own, (other) for a name no registered provider owns that the rollup
-- counted there (webhook.metrics_unregistered_providers). webhook_claim
-- and webhook_enqueue take any name an application passes; the metrics
-- must not grow with every name invented.
CREATE FUNCTION webhook._metric_provider(provider text) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT CASE WHEN _metric_provider.provider IN ('', '(other)')
                 OR EXISTS (SELECT FROM webhook.providers p WHERE p.name = _metric_provider.provider)
                 OR EXISTS (SELECT FROM webhook.metric_totals t WHERE t.provider = _metric_provider.provider)
            THEN _metric_provider.provider ELSE '(other)' END
$$;
COMMENT ON FUNCTION webhook._metric_provider(text) IS
    'Internal: the provider label metrics and alerts use for a name: itself when registered or already counted, else (other)';

-- Add counts to webhook.metric_minutes and webhook.metric_totals. `counts`
-- is a query of (minute, provider, consumer, metric, label, count, sum),
-- aggregated as far as it could be: per delivery nothing but a few
-- hash-table updates, then a row per group. It reads `ctes`, common table
-- expressions some of which delete or insert (they run in the same
-- snapshot as it), and $1 to $4: the marks as ids, then as times.
CREATE FUNCTION webhook._metrics_add(ctes text, counts text, lower_bound timestamptz, upper_bound timestamptz)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
-- The planner cannot know how many rows a range of new ids holds (the
-- statistics predate them) and would sort tens of thousands of rows to
-- group them into a handful: hashing is what grouping them costs least.
-- What little must still be sorted (the unregistered names, in order)
-- then looks dear to the planner: JIT would spend most of a second
-- compiling a statement that runs in milliseconds.
SET enable_sort = off
SET jit = off
AS $$
DECLARE
    added bigint;
BEGIN
    EXECUTE 'WITH ' || coalesce(ctes || ', ', '') || 'uncapped AS (' || counts || '),
        -- Names no registered provider owns, with no series yet: in name
        -- order, those past webhook.metrics_unregistered_providers are
        -- counted as (other).
        newcomers AS (
            SELECT n.provider, pg_catalog.row_number() OVER (ORDER BY n.provider) AS k
              FROM (SELECT DISTINCT u.provider FROM uncapped u) n
             WHERE webhook._metric_provider(n.provider) = ''(other)''
        ), room AS (
            SELECT GREATEST(coalesce(pg_catalog.current_setting(''webhook.metrics_unregistered_providers'', true), ''100'')::integer
                            - (SELECT pg_catalog.count(DISTINCT t.provider) FROM webhook.metric_totals t
                                WHERE t.provider <> ''(other)''
                                  AND NOT EXISTS (SELECT FROM webhook.providers p WHERE p.name = t.provider)), 0) AS n
        ), counted AS (
            SELECT u.minute, CASE WHEN w.k > r.n THEN ''(other)'' ELSE u.provider END AS provider,
                   u.consumer, u.metric, u.label, u.count, u.sum
              FROM uncapped u CROSS JOIN room r LEFT JOIN newcomers w ON w.provider = u.provider
        ),
        minutes AS (
            INSERT INTO webhook.metric_minutes AS m (minute, provider, consumer, metric, label, count, sum)
            SELECT minute, provider, consumer, metric, label, sum(count), sum(sum)
              FROM counted
             GROUP BY 1, 2, 3, 4, 5
            ON CONFLICT (minute, provider, consumer, metric, label)
            DO UPDATE SET count = m.count + excluded.count, sum = m.sum + excluded.sum
        ), totals AS (
            INSERT INTO webhook.metric_totals AS t (provider, consumer, metric, label, count, sum)
            SELECT provider, consumer, metric, label, sum(count), sum(sum)
              FROM counted
             GROUP BY 1, 2, 3, 4
            ON CONFLICT (provider, consumer, metric, label)
            DO UPDATE SET count = t.count + excluded.count, sum = t.sum + excluded.sum
        )
        SELECT coalesce(sum(count), 0)::bigint FROM counted'
      INTO added
      USING webhook._archive_bound(lower_bound), webhook._archive_bound(upper_bound), lower_bound, upper_bound;
    RETURN added;
END
$$;
COMMENT ON FUNCTION webhook._metrics_add(text, text, timestamptz, timestamptz) IS
    'Internal: add aggregated counts (minute, provider, consumer, metric, label, count, sum) to webhook.metric_minutes and webhook.metric_totals';

-- The minute of a time, the same in every time zone (and without the
-- time zone lookup per row that date_trunc makes).
CREATE FUNCTION webhook._minute(at timestamptz) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
SELECT pg_catalog.date_bin('1 minute', at, '2000-01-01 00:00:00+00')
$$;
COMMENT ON FUNCTION webhook._minute(timestamptz) IS 'Internal: the minute a time falls in';

-- What finished attempts add: completions, latency from receipt, their
-- own duration, and the attempts their event took. Reads `done` (at,
-- provider, consumer, received_at, started_at, attempts): grouped by
-- minute and the three buckets, then one row per metric and group.
CREATE FUNCTION webhook._completion_counts() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT $q$SELECT g.minute, g.provider, g.consumer, o.metric, o.label, g.n AS count, o.sum
          FROM (SELECT webhook._minute(d.at) AS minute, d.provider, d.consumer,
                       webhook._metric_bucket('latency', d.latency) AS latency_bucket,
                       webhook._metric_bucket('processing', d.processing) AS processing_bucket,
                       webhook._metric_bucket('attempts', d.attempts) AS attempts_bucket,
                       count(*) AS n, sum(d.latency) AS latency, sum(d.processing) AS processing,
                       sum(d.attempts) AS attempts
                  FROM (SELECT d.at, d.provider, d.consumer, d.attempts::float8 AS attempts,
                               GREATEST(pg_catalog.date_part('epoch', d.at - d.received_at), 0) AS latency,
                               GREATEST(pg_catalog.date_part('epoch', d.at - d.started_at), 0) AS processing
                          FROM done d) d
                 GROUP BY 1, 2, 3, 4, 5, 6) g
         CROSS JOIN LATERAL (VALUES
               ('completions', '', 0::float8),
               ('latency', webhook._metric_bucket_label('latency', g.latency_bucket), g.latency),
               ('processing', webhook._metric_bucket_label('processing', g.processing_bucket), g.processing),
               ('attempts', webhook._metric_bucket_label('attempts', g.attempts_bucket), g.attempts)
               ) AS o (metric, label, sum)$q$
$$;
COMMENT ON FUNCTION webhook._completion_counts() IS 'Internal: the counts of finished attempts, for webhook._metrics_add';

-- What failed attempts add: failures, their duration, and dead letters
-- where they parked their event. Reads `failed` (at, provider, consumer,
-- started_at, parked).
CREATE FUNCTION webhook._failure_counts() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT $q$SELECT g.minute, g.provider, g.consumer, o.metric, o.label, o.count, o.sum
          FROM (SELECT webhook._minute(f.at) AS minute, f.provider, f.consumer,
                       webhook._metric_bucket('processing', f.processing) AS processing_bucket,
                       count(*) AS n, count(*) FILTER (WHERE f.parked) AS parked, sum(f.processing) AS processing
                  FROM (SELECT f.at, f.provider, f.consumer, f.parked,
                               GREATEST(pg_catalog.date_part('epoch', f.at - f.started_at), 0) AS processing
                          FROM failed f) f
                 GROUP BY 1, 2, 3, 4) g
         CROSS JOIN LATERAL (VALUES
               ('failures', '', g.n, 0::float8),
               ('processing', webhook._metric_bucket_label('processing', g.processing_bucket), g.n, g.processing),
               ('dead_letters', '', g.parked, 0::float8)
               ) AS o (metric, label, count, sum)
         WHERE o.count > 0$q$
$$;
COMMENT ON FUNCTION webhook._failure_counts() IS 'Internal: the counts of failed attempts, for webhook._metrics_add';

-- Roll up everything written since the last run. Cheap when nothing
-- happened; safe to call from many sessions (one rolls up, the others
-- return at once). webhook_metrics() and webhook_alerts_evaluate() call it.
CREATE FUNCTION @extschema@.webhook_metrics_rollup()
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    since   timestamptz;
    bound   timestamptz := pg_catalog.clock_timestamp();
    counted bigint := 0;
    retention interval;
BEGIN
    -- One rollup at a time; whoever comes second has nothing to add.
    IF NOT pg_catalog.pg_try_advisory_xact_lock(pg_catalog.hashtext('pg_webhook_inbox.metrics')) THEN
        RETURN 0;
    END IF;
    IF NOT pg_catalog.pg_has_role(current_user, 'pg_read_all_stats', 'USAGE') THEN
        RAISE EXCEPTION 'webhook_metrics_rollup: the extension''s owner (%) cannot see other sessions'' transactions', current_user
            USING ERRCODE = '42501',
                  HINT = pg_catalog.format('GRANT pg_read_all_stats TO %I; the rollup counts only what no running transaction can still write.', current_user);
    END IF;
    -- The row is made with the extension; were it deleted, counting
    -- starts again from now.
    INSERT INTO webhook.metric_marks (counted_until) VALUES (pg_catalog.now()) ON CONFLICT DO NOTHING;
    SELECT counted_until INTO STRICT since FROM webhook.metric_marks FOR UPDATE;

    -- The bound (see the top of this file): taken after the clock, so a
    -- transaction that starts writing after this read writes above it.
    SELECT LEAST(bound, pg_catalog.min(a.xact_start)) INTO bound
      FROM pg_catalog.pg_stat_activity a
     WHERE a.datname = pg_catalog.current_database()
       AND a.pid <> pg_catalog.pg_backend_pid()
       AND a.backend_type IN ('client backend', 'background worker')
       AND (a.backend_xid IS NOT NULL OR a.state IN ('active', 'fastpath function call'));
    IF EXISTS (SELECT FROM pg_catalog.pg_prepared_xacts p WHERE p.database = pg_catalog.current_database()) THEN
        bound := since;
    END IF;
    -- At most ten minutes of traffic per call, so that one call after a
    -- long pause (nobody scraped for a day) is not one statement of hours;
    -- the calls after it catch up, and the lag gauge shows how far.
    bound := LEAST(GREATEST(bound, since), since + interval '10 minutes');

    -- The deliveries since the last mark, read once: by what they were
    -- answered, rejections by reason, and the claims among them (with
    -- those still open from before).
    counted := counted + webhook._metrics_add(
        $q$arrived AS MATERIALIZED (
               SELECT l.id, l.provider, l.event_id, l.claim_status, l.reject_reason, l.created_at, l.claim_completes
                 FROM webhook.delivery_log l WHERE l.id >= $1 AND l.id < $2
           ), failed_here AS (
               SELECT f.delivery_id FROM webhook.delivery_failures f WHERE f.delivery_id >= $1 AND f.delivery_id < $2
           ), seen AS (
               -- A claim of a new event that completed on commit, and did
               -- not fail before it, needs no look at its event (below).
               SELECT a.id, a.provider, a.event_id, a.created_at AS started_at, e.status, e.processed_at,
                      e.first_seen_at, e.attempts, e.claim_id = a.id AS owner
                 FROM arrived a
                 JOIN webhook.events e ON e.provider = a.provider AND e.event_id = a.event_id
                WHERE a.claim_status IN ('claimed', 'retry')
                  AND (a.claim_completes IS NOT TRUE OR a.id IN (SELECT delivery_id FROM failed_here))
               UNION ALL
               SELECT o.id, o.provider, o.event_id, o.started_at, e.status, e.processed_at,
                      e.first_seen_at, e.attempts, e.claim_id = o.id
                 FROM webhook.metric_open o
                 JOIN webhook.events e ON e.provider = o.provider AND e.event_id = o.event_id
                WHERE o.consumer = ''
           ), closed AS (
               DELETE FROM webhook.metric_open o USING seen s
                WHERE o.id = s.id AND NOT (s.owner AND s.status = 'processing')
           ), opened AS (
               INSERT INTO webhook.metric_open (id, provider, event_id, consumer, started_at)
               SELECT s.id, s.provider, s.event_id, '', s.started_at FROM seen s
                WHERE s.owner AND s.status = 'processing'
               ON CONFLICT (id) DO NOTHING
           ), done AS (
               SELECT s.processed_at AS at, s.provider, ''::text AS consumer, s.first_seen_at AS received_at,
                      s.started_at, s.attempts
                 FROM seen s WHERE s.owner AND s.status = 'processed'
               UNION ALL
               -- Its event was made processed, first seen and completed
               -- at the start of the claim's transaction (now()), which
               -- is the archive row's created_at: one attempt, no wait.
               SELECT a.created_at, a.provider, '', a.created_at, a.created_at, 1
                 FROM arrived a
                WHERE a.claim_completes AND a.id NOT IN (SELECT delivery_id FROM failed_here)
           )$q$,
        webhook._completion_counts() || $q$
           UNION ALL
           SELECT d.minute, d.provider, '', o.metric, o.label, d.n, 0
             FROM (SELECT webhook._minute(a.created_at) AS minute, a.provider, a.claim_status, a.reject_reason,
                          count(*) AS n
                     FROM arrived a GROUP BY 1, 2, 3, 4) d
            CROSS JOIN LATERAL (VALUES
                  ('deliveries', d.claim_status::text, true),
                  ('rejections', coalesce(d.reject_reason, 'unknown'), d.claim_status = 'rejected')
                  ) AS o (metric, label, counts)
            WHERE o.counts$q$,
        since, bound);

    -- Inbox leases: those still held before, and those taken since.
    counted := counted + webhook._metrics_add(
        $q$attempts AS (
               SELECT o.id FROM webhook.metric_open o WHERE o.consumer <> ''
               UNION ALL
               SELECT i.claim_id FROM webhook.inbox i WHERE i.claim_id >= $1 AND i.claim_id < $2
           ), seen AS (
               SELECT a.id, i.provider, i.event_id, i.consumer, i.status, i.processed_at, i.queued_at, i.attempts
                 FROM attempts a LEFT JOIN webhook.inbox i ON i.claim_id = a.id
           ), closed AS (
               DELETE FROM webhook.metric_open o USING seen s
                WHERE o.id = s.id AND s.status IS DISTINCT FROM 'leased'
           ), opened AS (
               INSERT INTO webhook.metric_open (id, provider, event_id, consumer, started_at)
               SELECT s.id, s.provider, s.event_id, s.consumer, webhook._id_time(s.id) FROM seen s
                WHERE s.status = 'leased'
               ON CONFLICT (id) DO NOTHING
           ), done AS (
               SELECT s.processed_at AS at, s.provider, s.consumer, s.queued_at AS received_at,
                      webhook._id_time(s.id) AS started_at, s.attempts
                 FROM seen s WHERE s.status = 'processed'
           )$q$,
        webhook._completion_counts(), since, bound);

    -- Failed attempts, of claims and of leases, and the dead letters they
    -- made: a failure whose event (or inbox row) is parked under the same
    -- claim or lease.
    counted := counted + webhook._metrics_add(
        $q$failed AS (
               SELECT f.failed_at AS at, l.provider, ''::text AS consumer, l.created_at AS started_at,
                      (e.status = 'dead' AND e.claim_id = f.delivery_id) AS parked
                 FROM webhook.delivery_failures f
                 JOIN webhook.delivery_log l ON l.id = f.delivery_id
                 JOIN webhook.events e ON e.provider = l.provider AND e.event_id = l.event_id
                WHERE f.failed_at >= $3 AND f.failed_at < $4
               UNION ALL
               SELECT f.failed_at, f.provider, f.consumer, webhook._id_time(f.claim_id),
                      coalesce(i.status = 'dead', false)
                 FROM webhook.inbox_failures f
                 LEFT JOIN webhook.inbox i ON i.claim_id = f.claim_id
                WHERE f.failed_at >= $3 AND f.failed_at < $4
           )$q$,
        webhook._failure_counts(), since, bound);

    -- Outcomes a replay or requeue undid before they were counted: each
    -- once, whenever it was held (its own minute, already passed or not).
    counted := counted + webhook._metrics_add(
        $q$held AS (
               DELETE FROM webhook.metric_held h RETURNING h.*
           ), done AS (
               SELECT h.at, h.provider, h.consumer, h.received_at, h.started_at, h.attempts
                 FROM held h WHERE h.outcome = 'completion'
           )$q$,
        webhook._completion_counts() || $q$
           UNION ALL
           SELECT webhook._minute(h.at), h.provider, h.consumer, 'dead_letters', '', count(*), 0
             FROM held h WHERE h.outcome = 'dead_letter'
            GROUP BY 1, 2, 3$q$,
        since, bound);

    UPDATE webhook.metric_marks SET counted_until = bound, rolled_up_at = pg_catalog.clock_timestamp();

    -- In minutes, its unit, whatever unit it was set in.
    SELECT pg_catalog.make_interval(mins => s.setting::integer) INTO retention
      FROM pg_catalog.pg_settings s WHERE s.name = 'webhook.metrics_retention';
    DELETE FROM webhook.metric_minutes WHERE minute < pg_catalog.now() - retention;
    -- A name no registered provider owns, quiet for the retention: its
    -- series go (a counter Prometheus then sees end), and its place
    -- under webhook.metrics_unregistered_providers is free again.
    DELETE FROM webhook.metric_totals t
     WHERE t.provider NOT IN ('', '(other)')
       AND NOT EXISTS (SELECT FROM webhook.providers p WHERE p.name = t.provider)
       AND NOT EXISTS (SELECT FROM webhook.metric_minutes m WHERE m.provider = t.provider)
       AND NOT EXISTS (SELECT FROM webhook.metric_open o WHERE o.provider = t.provider);
    RETURN counted;
END
$$;
COMMENT ON FUNCTION @extschema@.webhook_metrics_rollup() IS
    'Count what was written since the last rollup into webhook.metric_minutes and webhook.metric_totals; returns the observations added (0 when another session is rolling up)';

-- The metric families webhook_metrics() exports: Prometheus name, type,
-- and what it says.
CREATE FUNCTION webhook._metric_families()
RETURNS TABLE (family text, kind text, help text)
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
VALUES
    ('webhook_deliveries_total', 'counter', 'Deliveries received, by what they were answered (claimed and queued: new events; duplicate; retry; in_progress; dead; rejected; stale; handshake; filtered)'),
    ('webhook_rejections_total', 'counter', 'Deliveries refused before claiming, by reason'),
    ('webhook_completions_total', 'counter', 'Attempts completed (webhook_complete), per consumer for the inbox'),
    ('webhook_failures_total', 'counter', 'Attempts failed (webhook_fail, or a lease that ran out)'),
    ('webhook_dead_letters_total', 'counter', 'Events parked as dead by a failed attempt'),
    ('webhook_latency_seconds', 'histogram', 'From the first delivery of an event to its completion'),
    ('webhook_processing_seconds', 'histogram', 'One attempt, from its claim or lease to its completion or failure'),
    ('webhook_attempts', 'histogram', 'Attempts an event took, counted at its completion'),
    ('webhook_inbox_events', 'gauge', 'Inbox events per consumer by state: ready, scheduled (backing off), leased, dead, quarantined'),
    ('webhook_inbox_oldest_ready_seconds', 'gauge', 'Age of the oldest ready inbox event per consumer (a backing-off event is not ready)'),
    ('webhook_oldest_unfinished_claim_seconds', 'gauge', 'Age of the oldest claim neither completed nor failed'),
    ('webhook_steering_paused', 'gauge', 'Pauses and quarantines in effect, by provider and consumer (empty: every one) and kind (pause, quarantine)'),
    ('webhook_circuit_breaker_open', 'gauge', '1 per circuit breaker open or half open, by consumer and provider (empty: every one) and state'),
    ('webhook_alerts_open', 'gauge', 'Alerts open or acknowledged, by rule'),
    ('webhook_metrics_lag_seconds', 'gauge', 'How far behind the clock the counters are (the oldest running writing transaction holds them back)')
$$;
COMMENT ON FUNCTION webhook._metric_families() IS 'Internal: the metric families webhook_metrics() exports, with their type and help';

-- Every metric now, one row per series: the counters and histograms since
-- counting began, and the gauges read at once; or only one family's
-- series (an exporter's query each: the gauges that count the inbox are
-- then counted once a scrape, not once a query). Rolls up first, unless a
-- rollup ran in the last second (the other queries of the same scrape).
-- Labels are bounded: provider, consumer, and one of status, reason, le,
-- state, rule.
CREATE FUNCTION @extschema@.webhook_metrics(family text DEFAULT NULL)
RETURNS TABLE (metric text, kind text, provider text, consumer text, label text, label_value text, value double precision)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    only_family text := webhook_metrics.family;
BEGIN
    IF only_family IS NOT NULL
       AND NOT EXISTS (SELECT FROM webhook._metric_families() f WHERE f.family = only_family) THEN
        RAISE EXCEPTION 'webhook_metrics: argument "family" must name a metric family (webhook._metric_families()), not %',
            pg_catalog.quote_literal(only_family) USING ERRCODE = '22023';
    END IF;
    IF NOT EXISTS (SELECT FROM webhook.metric_marks m
                    WHERE m.rolled_up_at > pg_catalog.clock_timestamp() - interval '1 second') THEN
        PERFORM @extschema@.webhook_metrics_rollup();
    END IF;
    RETURN QUERY
    WITH counters (family, metric, label) AS (VALUES
            ('webhook_deliveries_total', 'deliveries', 'status'),
            ('webhook_rejections_total', 'rejections', 'reason'),
            ('webhook_completions_total', 'completions', NULL),
            ('webhook_failures_total', 'failures', NULL),
            ('webhook_dead_letters_total', 'dead_letters', NULL)),
         histograms (family, metric) AS (VALUES
            ('webhook_latency_seconds', 'latency'),
            ('webhook_processing_seconds', 'processing'),
            ('webhook_attempts', 'attempts')),
         series AS (
            SELECT c.family AS metric, 'counter' AS kind, t.provider, t.consumer, c.label,
                   CASE WHEN c.label IS NULL THEN NULL ELSE t.label END AS label_value, t.count::float8 AS value
              FROM counters c JOIN webhook.metric_totals t ON t.metric = c.metric
             WHERE only_family IS NULL OR c.family = only_family
            UNION ALL
            -- Histograms: every bucket, cumulative, then sum and count.
            SELECT h.family || '_bucket', 'histogram', p.provider, p.consumer, 'le',
                   CASE WHEN b = 'Infinity' THEN '+Inf' ELSE b::text END,
                   (SELECT coalesce(sum(t.count), 0) FROM webhook.metric_totals t
                     WHERE t.metric = h.metric AND t.provider = p.provider AND t.consumer = p.consumer
                       AND (t.label = '+Inf' AND b = 'Infinity' OR t.label <> '+Inf' AND t.label::float8 <= b))::float8
              FROM histograms h
              JOIN (SELECT DISTINCT t.metric, t.provider, t.consumer FROM webhook.metric_totals t) p ON p.metric = h.metric
             CROSS JOIN LATERAL pg_catalog.unnest(webhook._metric_buckets(h.metric)) AS b
             WHERE only_family IS NULL OR h.family = only_family
            UNION ALL
            SELECT h.family || s.suffix, 'histogram', t.provider, t.consumer, NULL, NULL,
                   CASE s.suffix WHEN '_sum' THEN sum(t.sum) ELSE sum(t.count)::float8 END
              FROM histograms h JOIN webhook.metric_totals t ON t.metric = h.metric
             CROSS JOIN (VALUES ('_sum'), ('_count')) AS s (suffix)
             WHERE only_family IS NULL OR h.family = only_family
             GROUP BY h.family, s.suffix, t.provider, t.consumer
            UNION ALL
            SELECT 'webhook_inbox_events', 'gauge', st.provider, st.consumer, 'state', g.state, pg_catalog.sum(g.n)::float8
              FROM (SELECT webhook._metric_provider(x.provider) AS provider, x.consumer, x.ready, x.scheduled,
                           x.leased, x.dead, x.quarantined
                      FROM webhook.inbox_stats x) st
             CROSS JOIN LATERAL (VALUES ('ready', st.ready), ('scheduled', st.scheduled),
                                        ('leased', st.leased), ('dead', st.dead),
                                        ('quarantined', st.quarantined)) AS g (state, n)
             WHERE only_family IS NULL OR only_family = 'webhook_inbox_events'
             GROUP BY st.provider, st.consumer, g.state
            UNION ALL
            SELECT 'webhook_inbox_oldest_ready_seconds', 'gauge', webhook._metric_provider(st.provider), st.consumer, NULL, NULL,
                   coalesce(pg_catalog.date_part('epoch', pg_catalog.max(st.oldest_ready_age)), 0)
              FROM webhook.inbox_stats st
             WHERE only_family IS NULL OR only_family = 'webhook_inbox_oldest_ready_seconds'
             GROUP BY 3, 4
            UNION ALL
            SELECT 'webhook_oldest_unfinished_claim_seconds', 'gauge', webhook._metric_provider(o.provider), '', NULL, NULL,
                   pg_catalog.date_part('epoch', pg_catalog.clock_timestamp() - pg_catalog.min(o.started_at))
              FROM webhook.metric_open o
             WHERE o.consumer = '' AND (only_family IS NULL OR only_family = 'webhook_oldest_unfinished_claim_seconds')
             GROUP BY 3
            UNION ALL
            SELECT 'webhook_steering_paused', 'gauge', s.provider, s.consumer, 'kind', s.kind, pg_catalog.count(*)::float8
              FROM (SELECT p.provider, p.consumer,
                           CASE WHEN p.entity_key <> '' THEN 'quarantine' ELSE 'pause' END AS kind
                      FROM webhook.pauses p) s
             WHERE only_family IS NULL OR only_family = 'webhook_steering_paused'
             GROUP BY s.provider, s.consumer, s.kind
            UNION ALL
            SELECT 'webhook_circuit_breaker_open', 'gauge', webhook._metric_provider(b.provider), b.consumer, 'state',
                   b.state::text, pg_catalog.count(*)::float8
              FROM webhook.breakers b
             WHERE b.state <> 'closed'
               AND (only_family IS NULL OR only_family = 'webhook_circuit_breaker_open')
             GROUP BY 3, 4, 6
            UNION ALL
            SELECT 'webhook_alerts_open', 'gauge', '', '', 'rule', r.name,
                   (SELECT count(*) FROM webhook.alerts a WHERE a.rule = r.name AND a.status <> 'resolved')::float8
              FROM webhook.alert_rules_in_effect r
             WHERE only_family IS NULL OR only_family = 'webhook_alerts_open'
            UNION ALL
            SELECT 'webhook_metrics_lag_seconds', 'gauge', '', '', NULL, NULL,
                   pg_catalog.date_part('epoch', pg_catalog.clock_timestamp() - m.counted_until)
              FROM webhook.metric_marks m
             WHERE only_family IS NULL OR only_family = 'webhook_metrics_lag_seconds')
    SELECT * FROM series s ORDER BY s.metric, s.provider, s.consumer, s.label_value;
END
$$;
COMMENT ON FUNCTION @extschema@.webhook_metrics(text) IS
    'Every metric now, one row per series (counters since counting began, histogram buckets cumulative, gauges read at once), or only one family''s; rolls up first unless a rollup ran in the last second';

CREATE FUNCTION webhook._prometheus_escape(value text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT pg_catalog.replace(pg_catalog.replace(pg_catalog.replace(value, '\', '\\'), '"', '\"'), E'\n', '\n')
$$;
COMMENT ON FUNCTION webhook._prometheus_escape(text) IS 'Internal: a label value escaped for the Prometheus text format';

-- The same in the Prometheus text exposition format (version 0.0.4), for
-- an exporter or a scrape endpoint to pass through as it is.
CREATE FUNCTION @extschema@.webhook_metrics_prometheus()
RETURNS text
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
WITH m AS (SELECT * FROM @extschema@.webhook_metrics()),
     lines AS (
        SELECT f.family, 0 AS part, NULL::text AS metric, NULL::text AS labels, NULL::float8 AS bound,
               '# HELP ' || f.family || ' ' || f.help || E'\n# TYPE ' || f.family || ' ' || f.kind AS line
          FROM webhook._metric_families() f
        UNION ALL
        SELECT f.family, 1, m.metric, m.provider || ',' || m.consumer,
               CASE WHEN m.label = 'le' THEN pg_catalog.replace(m.label_value, '+Inf', 'Infinity')::float8 END,
               m.metric || '{' || pg_catalog.concat_ws(',',
                   CASE WHEN m.provider <> '' THEN 'provider="' || webhook._prometheus_escape(m.provider) || '"' END,
                   CASE WHEN m.consumer <> '' THEN 'consumer="' || webhook._prometheus_escape(m.consumer) || '"' END,
                   CASE WHEN m.label IS NOT NULL THEN m.label || '="' || webhook._prometheus_escape(m.label_value) || '"' END)
               || '} ' || CASE WHEN m.value = 'Infinity' THEN '+Inf' ELSE m.value::text END
          FROM m JOIN webhook._metric_families() f
            ON m.metric = f.family OR (f.kind = 'histogram' AND m.metric IN (f.family || '_bucket', f.family || '_sum', f.family || '_count')))
SELECT pg_catalog.string_agg(line, E'\n' ORDER BY family, part, metric, labels, bound, line) || E'\n' FROM lines
$$;
COMMENT ON FUNCTION @extschema@.webhook_metrics_prometheus() IS
    'webhook_metrics() in the Prometheus text exposition format';

-- A quantile of a histogram over a period, from the per-minute counts,
-- interpolated within its bucket the way Prometheus's histogram_quantile
-- does. NULL when nothing was observed.
CREATE FUNCTION @extschema@.webhook_metric_quantile(
    quantile double precision,
    metric   text,
    since    timestamptz DEFAULT pg_catalog.now() - interval '1 hour',
    provider text DEFAULT NULL,
    consumer text DEFAULT NULL)
RETURNS double precision
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    bounds float8[] := webhook._metric_buckets(webhook_metric_quantile.metric);
    total  float8;
    rank   float8;
    below  float8 := 0;
    lower  float8 := 0;
    upper  float8;
    n      float8;
BEGIN
    IF webhook_metric_quantile.quantile IS NULL OR webhook_metric_quantile.quantile < 0 OR webhook_metric_quantile.quantile > 1 THEN
        RAISE EXCEPTION 'webhook_metric_quantile: argument "quantile" must be between 0 and 1' USING ERRCODE = '22023';
    END IF;
    IF bounds IS NULL THEN
        RAISE EXCEPTION 'webhook_metric_quantile: argument "metric" must be latency, processing or attempts, not %',
            coalesce(pg_catalog.quote_literal(webhook_metric_quantile.metric), 'NULL') USING ERRCODE = '22023';
    END IF;
    SELECT sum(m.count) INTO total
      FROM webhook.metric_minutes m
     WHERE m.metric = webhook_metric_quantile.metric AND m.minute >= pg_catalog.date_trunc('minute', since)
       AND (webhook_metric_quantile.provider IS NULL OR m.provider = webhook_metric_quantile.provider)
       AND (webhook_metric_quantile.consumer IS NULL OR m.consumer = webhook_metric_quantile.consumer);
    IF total IS NULL OR total = 0 THEN
        RETURN NULL;
    END IF;
    rank := webhook_metric_quantile.quantile * total;
    FOREACH upper IN ARRAY bounds LOOP
        SELECT coalesce(sum(m.count), 0) INTO n
          FROM webhook.metric_minutes m
         WHERE m.metric = webhook_metric_quantile.metric AND m.minute >= pg_catalog.date_trunc('minute', since)
           AND m.label = CASE WHEN upper = 'Infinity' THEN '+Inf' ELSE upper::text END
           AND (webhook_metric_quantile.provider IS NULL OR m.provider = webhook_metric_quantile.provider)
           AND (webhook_metric_quantile.consumer IS NULL OR m.consumer = webhook_metric_quantile.consumer);
        IF below + n >= rank AND n > 0 THEN
            -- As Prometheus: the highest finite bound for the last bucket.
            IF upper = 'Infinity' THEN
                RETURN lower;
            END IF;
            RETURN lower + (upper - lower) * (rank - below) / n;
        END IF;
        below := below + n;
        IF upper <> 'Infinity' THEN
            lower := upper;
        END IF;
    END LOOP;
    RETURN lower;
END
$$;
COMMENT ON FUNCTION @extschema@.webhook_metric_quantile(double precision, text, timestamptz, text, text) IS
    'A quantile (0 to 1) of latency, processing or attempts since a time, from the per-minute histograms, interpolated as Prometheus''s histogram_quantile does';

-- pg_webhook_inbox: alerts raised inside the database.
--
-- Rules are set centrally (webhook.alert_rules, one row each, with sane
-- defaults). webhook_alerts_evaluate(), run every minute by pg_cron or any
-- scheduler, rolls the metrics up, finds which rules fire for which
-- provider and consumer, and keeps one alert per rule and subject: opened
-- when it starts firing, its value and last sighting updated while it
-- fires, resolved when it stops. Each change is sent as
-- NOTIFY webhook_alert with a JSON payload, unless the alert is silenced.
-- Operators list alerts (webhook.alerts), acknowledge and silence them.


CREATE TYPE webhook.alert_kind AS ENUM (
    -- Dead letters waiting for an operator now (claimed events and inbox
    -- rows parked as dead): more than threshold. Open exactly while they
    -- wait; a requeue resolves it.
    'dead_letters',
    -- The oldest ready inbox event of a consumer has waited longer than
    -- threshold seconds.
    'oldest_ready',
    -- Failed attempts / (failed + completed) over the window, above
    -- threshold (0 to 1), once min_events attempts were seen.
    'failure_rate',
    -- Deliveries refused for their signature or secret (bad_signature,
    -- no_secret, invalid_secret, unknown_certificate) / all deliveries over
    -- the window, above threshold: a forgery campaign, or a secret
    -- rotated on one side only.
    'rejection_spike',
    -- No delivery for the window from a provider that sent at least
    -- threshold deliveries in the seven windows before it.
    'silence',
    -- An older secret still verifying deliveries longer than the window
    -- after a newer one was added: the sender never switched, and retiring
    -- the old one will reject everything.
    'secret_rotation',
    -- A consumer's circuit breaker (webhook.limits) has been open or half
    -- open for more than threshold seconds.
    'circuit_open'
);
COMMENT ON TYPE webhook.alert_kind IS
    'What an alert rule watches: dead_letters, oldest_ready, failure_rate, rejection_spike, silence, secret_rotation, circuit_open (see docs/observability.md)';

CREATE TYPE webhook.alert_status AS ENUM ('open', 'acknowledged', 'resolved');
COMMENT ON TYPE webhook.alert_status IS
    'open (firing), acknowledged (firing, an operator is on it), resolved (its condition cleared)';

CREATE TABLE webhook.alert_rules (
    name       text             NOT NULL
               CONSTRAINT alert_rules_name_check CHECK (name ~ '^[a-z0-9][a-z0-9_.-]{0,63}$'),
    kind       webhook.alert_kind NOT NULL,
    -- NULL: every provider (every consumer).
    provider   text,
    consumer   text,
    threshold  double precision NOT NULL CONSTRAINT alert_rules_threshold_check CHECK (threshold >= 0),
    "window"   interval         NOT NULL CONSTRAINT alert_rules_window_check CHECK ("window" > interval '0'),
    -- Rates: the fewest observations in the window worth judging.
    min_events bigint           NOT NULL DEFAULT 0 CONSTRAINT alert_rules_min_events_check CHECK (min_events >= 0),
    enabled    boolean          NOT NULL DEFAULT true,
    CONSTRAINT alert_rules_pkey PRIMARY KEY (name),
    CONSTRAINT alert_rules_rate_check CHECK (kind NOT IN ('failure_rate', 'rejection_spike') OR threshold <= 1)
);
COMMENT ON TABLE webhook.alert_rules IS 'The alert rules the DBA set: each adds a rule, or replaces the built-in default of its name (webhook.alert_rules_in_effect)';
COMMENT ON COLUMN webhook.alert_rules.name IS 'The rule''s name, as alerts and notifications show it';
COMMENT ON COLUMN webhook.alert_rules.kind IS 'What it watches (webhook.alert_kind)';
COMMENT ON COLUMN webhook.alert_rules.provider IS 'The provider it watches; NULL: each provider';
COMMENT ON COLUMN webhook.alert_rules.consumer IS 'The inbox consumer it watches; NULL: each consumer';
COMMENT ON COLUMN webhook.alert_rules.threshold IS 'dead_letters: a count; oldest_ready, circuit_open: seconds; failure_rate, rejection_spike: a share from 0 to 1; silence: deliveries before the silence that make a provider one that normally sends; secret_rotation: unused (0)';
COMMENT ON COLUMN webhook.alert_rules."window" IS 'The period the rule looks at (silence: how long without a delivery; secret_rotation: the grace after a newer secret was added; dead_letters: unused, it counts what waits now)';
COMMENT ON COLUMN webhook.alert_rules.min_events IS 'Rates: the fewest attempts or deliveries in the window worth judging';
COMMENT ON COLUMN webhook.alert_rules.enabled IS 'A disabled rule raises nothing, and its open alerts resolve';

-- The rules in effect: the table's, and each built-in default whose name
-- no row of the table takes. The defaults are not rows, so that the
-- table holds only what the DBA set (and pg_dump keeps exactly that); a
-- row named as a default replaces it, and one with enabled = false turns
-- it off.
CREATE VIEW webhook.alert_rules_in_effect AS
SELECT r.name, r.kind, r.provider, r.consumer, r.threshold, r."window", r.min_events, r.enabled, false AS builtin
  FROM webhook.alert_rules r
UNION ALL
SELECT d.name, d.kind::webhook.alert_kind, NULL, NULL, d.threshold, d."window", d.min_events, true, true
  FROM (VALUES ('dead_letters', 'dead_letters', 0::float8, interval '1 hour', 0::bigint),
               ('oldest_ready', 'oldest_ready', 300, interval '5 minutes', 0),
               ('failure_rate', 'failure_rate', 0.1, interval '15 minutes', 20),
               ('rejection_spike', 'rejection_spike', 0.5, interval '15 minutes', 10),
               ('silence', 'silence', 20, interval '6 hours', 0),
               ('secret_rotation', 'secret_rotation', 0, interval '7 days', 0),
               ('circuit_open', 'circuit_open', 0, interval '1 minute', 0))
       AS d (name, kind, threshold, "window", min_events)
 WHERE NOT EXISTS (SELECT FROM webhook.alert_rules r WHERE r.name = d.name);
COMMENT ON VIEW webhook.alert_rules_in_effect IS
    'The alert rules evaluated: the rows of webhook.alert_rules, and the built-in defaults (builtin) none of them replaces';

CREATE TABLE webhook.alerts (
    id              bigint GENERATED ALWAYS AS IDENTITY,
    rule            text             NOT NULL,
    kind            webhook.alert_kind NOT NULL,
    -- What it is about; '' when the rule's subject has no consumer.
    provider        text             NOT NULL,
    consumer        text             NOT NULL,
    status          webhook.alert_status NOT NULL DEFAULT 'open',
    value           double precision NOT NULL,
    threshold       double precision NOT NULL,
    message         text             NOT NULL,
    first_seen_at   timestamptz      NOT NULL DEFAULT pg_catalog.now(),
    last_seen_at    timestamptz      NOT NULL DEFAULT pg_catalog.now(),
    acknowledged_at timestamptz,
    acknowledged_by text,
    resolved_at     timestamptz,
    -- No notification about it before this time.
    silenced_until  timestamptz,
    CONSTRAINT alerts_pkey PRIMARY KEY (id)
);
-- One alert per rule and subject until it resolves: a condition that
-- keeps firing updates its alert instead of raising another.
CREATE UNIQUE INDEX alerts_unresolved_idx ON webhook.alerts (rule, provider, consumer) WHERE status <> 'resolved';
COMMENT ON TABLE webhook.alerts IS 'Alerts: open, acknowledged or resolved; one unresolved alert per rule and subject';
COMMENT ON COLUMN webhook.alerts.id IS 'The alert''s id, for webhook_alert_acknowledge and webhook_alert_silence';
COMMENT ON COLUMN webhook.alerts.rule IS 'The rule that raised it';
COMMENT ON COLUMN webhook.alerts.kind IS 'What the rule watches';
COMMENT ON COLUMN webhook.alerts.provider IS 'The provider it is about';
COMMENT ON COLUMN webhook.alerts.consumer IS 'The inbox consumer it is about; empty when none';
COMMENT ON COLUMN webhook.alerts.status IS 'open, acknowledged (an operator is on it), resolved (the condition cleared)';
COMMENT ON COLUMN webhook.alerts.value IS 'What was measured at its last sighting';
COMMENT ON COLUMN webhook.alerts.threshold IS 'The rule''s threshold then';
COMMENT ON COLUMN webhook.alerts.message IS 'What it says, in a sentence';
COMMENT ON COLUMN webhook.alerts.first_seen_at IS 'When it started firing';
COMMENT ON COLUMN webhook.alerts.last_seen_at IS 'When it was last seen firing';
COMMENT ON COLUMN webhook.alerts.acknowledged_at IS 'When an operator acknowledged it';
COMMENT ON COLUMN webhook.alerts.acknowledged_by IS 'Who acknowledged it (the session user)';
COMMENT ON COLUMN webhook.alerts.resolved_at IS 'When its condition cleared';
COMMENT ON COLUMN webhook.alerts.silenced_until IS 'No notification about it before this time';

-- What fires now: one row per rule and subject, with the value measured.
CREATE FUNCTION webhook._alert_conditions()
RETURNS TABLE (rule text, kind webhook.alert_kind, provider text, consumer text,
               value double precision, threshold double precision, message text)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
WITH rules AS (
    SELECT * FROM webhook.alert_rules_in_effect r WHERE r.enabled
), minutes AS (
    -- Each rule's window of the per-minute metrics.
    SELECT r.name, m.provider, m.consumer, m.metric, m.label, m.count
      FROM rules r
      JOIN webhook.metric_minutes m
        ON m.minute >= pg_catalog.date_trunc('minute', pg_catalog.now() - r."window")
       AND (r.provider IS NULL OR m.provider = r.provider)
       AND (r.consumer IS NULL OR m.consumer = r.consumer)
     WHERE r.kind IN ('failure_rate', 'rejection_spike')
), measured AS (
    SELECT r.name, r.kind, m.provider, m.consumer, r.threshold, r.min_events,
           sum(m.count) FILTER (WHERE m.metric = 'failures') AS failures,
           sum(m.count) FILTER (WHERE m.metric = 'completions') AS completions,
           sum(m.count) FILTER (WHERE m.metric = 'deliveries') AS deliveries,
           sum(m.count) FILTER (WHERE m.metric = 'rejections'
                                  AND m.label IN ('bad_signature', 'no_secret', 'invalid_secret', 'unknown_certificate')) AS forged
      FROM rules r JOIN minutes m ON m.name = r.name
     GROUP BY r.name, r.kind, m.provider, m.consumer, r.threshold, r.min_events
), dead AS (
    -- The dead letters waiting now: inbox rows (from their partial
    -- index), and claimed events found from their parking failure (the
    -- archive keeps those of unfinished events), so that no evaluation
    -- reads every event ever received.
    SELECT webhook._metric_provider(x.provider) AS provider, x.consumer, pg_catalog.count(*) AS n
      FROM (SELECT i.provider, i.consumer FROM webhook.inbox i WHERE i.status = 'dead'
            UNION ALL
            SELECT e.provider, ''
              FROM webhook.delivery_failures f
              JOIN webhook.delivery_log l ON l.id = f.delivery_id
              JOIN webhook.events e ON e.provider = l.provider AND e.event_id = l.event_id
             WHERE e.status = 'dead' AND e.claim_id = f.delivery_id) x
     WHERE EXISTS (SELECT FROM rules r WHERE r.kind = 'dead_letters')
     GROUP BY 1, 2
)
SELECT r.name, r.kind, d.provider, d.consumer, d.n::float8, r.threshold,
       pg_catalog.format('%s dead letter(s) of %s%s waiting for an operator', d.n, d.provider,
                         CASE WHEN d.consumer <> '' THEN ' (consumer ' || d.consumer || ')' ELSE '' END)
  FROM rules r
  JOIN dead d ON (r.provider IS NULL OR d.provider = r.provider) AND (r.consumer IS NULL OR d.consumer = r.consumer)
 WHERE r.kind = 'dead_letters' AND d.n > r.threshold
UNION ALL
SELECT name, kind, provider, consumer, failures::float8 / (failures + coalesce(completions, 0)), threshold,
       pg_catalog.format('%s of %s attempts failed for %s%s', failures, failures + coalesce(completions, 0), provider,
                         CASE WHEN consumer <> '' THEN ' (consumer ' || consumer || ')' ELSE '' END)
  FROM measured
 WHERE kind = 'failure_rate' AND failures > 0 AND failures + coalesce(completions, 0) >= GREATEST(min_events, 1)
   AND failures::float8 / (failures + coalesce(completions, 0)) > threshold
UNION ALL
SELECT name, kind, provider, consumer, coalesce(forged, 0)::float8 / deliveries, threshold,
       pg_catalog.format('%s of %s deliveries from %s refused for their signature or secret: a forgery, or a secret rotated on one side only',
                         coalesce(forged, 0), deliveries, provider)
  FROM measured
 WHERE kind = 'rejection_spike' AND deliveries >= GREATEST(min_events, 1)
   AND coalesce(forged, 0)::float8 / deliveries > threshold
UNION ALL
SELECT r.name, r.kind, s.provider, s.consumer, pg_catalog.date_part('epoch', s.oldest_ready_age), r.threshold,
       pg_catalog.format('the oldest ready event of %s for consumer %s has waited %s', s.provider, s.consumer,
                         pg_catalog.date_trunc('second', s.oldest_ready_age))
  FROM rules r
  JOIN (SELECT webhook._metric_provider(x.provider) AS provider, x.consumer,
               pg_catalog.max(x.oldest_ready_age) AS oldest_ready_age
          FROM webhook.inbox_stats x GROUP BY 1, 2) s
    ON (r.provider IS NULL OR s.provider = r.provider) AND (r.consumer IS NULL OR s.consumer = r.consumer)
 WHERE r.kind = 'oldest_ready' AND pg_catalog.date_part('epoch', s.oldest_ready_age) > r.threshold
UNION ALL
-- Silence: read from the totals of deliveries per minute, up to where the
-- rollup has counted, so that a lagging rollup is not taken for silence.
-- Refused deliveries are not the provider speaking: one forged request
-- every few hours must not hide a webhook disabled at the provider.
SELECT r.name, r.kind, d.provider, '', pg_catalog.date_part('epoch', mk.counted_until - d.last_minute), r.threshold,
       pg_catalog.format('no delivery from %s since %s, after %s in the %s before', d.provider,
                         d.last_minute, d.before, r."window" * 7)
  FROM rules r
 CROSS JOIN webhook.metric_marks mk
 CROSS JOIN LATERAL (
       SELECT m.provider,
              pg_catalog.max(m.minute) + interval '1 minute' AS last_minute,
              sum(m.count) FILTER (WHERE m.minute < mk.counted_until - r."window") AS before,
              sum(m.count) FILTER (WHERE m.minute >= pg_catalog.date_trunc('minute', mk.counted_until - r."window")) AS recent
         FROM webhook.metric_minutes m
        WHERE m.metric = 'deliveries' AND m.label <> 'rejected' AND m.minute >= mk.counted_until - r."window" * 8
          AND (r.provider IS NULL OR m.provider = r.provider)
        GROUP BY m.provider) d
 WHERE r.kind = 'silence' AND r.consumer IS NULL AND coalesce(d.recent, 0) = 0 AND coalesce(d.before, 0) >= GREATEST(r.threshold, 1)
UNION ALL
SELECT r.name, r.kind, o.provider, '', pg_catalog.date_part('epoch', o.last_used_at - n.added_at), r.threshold,
       pg_catalog.format('secret %s of %s still verified a delivery at %s, %s after secret %s was added: the sender still signs with the old one',
                         o.fingerprint, o.provider, o.last_used_at, pg_catalog.date_trunc('second', o.last_used_at - n.added_at), n.fingerprint)
  FROM rules r
  JOIN (SELECT s.provider, s.fingerprint, s.added_at, u.last_used_at
          FROM webhook.provider_secrets s
          JOIN webhook.secret_uses u ON u.provider = s.provider AND u.fingerprint = s.fingerprint
         WHERE s.retired_at IS NULL) o ON (r.provider IS NULL OR o.provider = r.provider)
  JOIN LATERAL (SELECT s.fingerprint, s.added_at FROM webhook.provider_secrets s
                 WHERE s.provider = o.provider AND s.retired_at IS NULL AND s.added_at > o.added_at
                 ORDER BY s.added_at DESC LIMIT 1) n ON true
 WHERE r.kind = 'secret_rotation' AND r.consumer IS NULL
   AND o.last_used_at >= n.added_at + r."window"
   AND o.last_used_at >= pg_catalog.now() - r."window"
UNION ALL
SELECT r.name, r.kind, b.provider, b.consumer, pg_catalog.date_part('epoch', pg_catalog.now() - b.opened_at), r.threshold,
       pg_catalog.format('the circuit breaker of consumer %s%s is %s after %s failures in a row, since %s',
                         b.consumer, CASE WHEN b.provider <> '' THEN ' for ' || b.provider ELSE '' END,
                         b.state, b.failures, b.opened_at)
  FROM rules r
  JOIN (SELECT DISTINCT ON (1, 2) webhook._metric_provider(x.provider) AS provider, x.consumer, x.state,
               x.failures, x.opened_at
          FROM webhook.breakers x WHERE x.state <> 'closed'
         ORDER BY 1, 2, x.opened_at) b
    ON (r.provider IS NULL OR b.provider = r.provider) AND (r.consumer IS NULL OR b.consumer = r.consumer)
 WHERE r.kind = 'circuit_open' AND b.state <> 'closed'
   AND pg_catalog.date_part('epoch', pg_catalog.now() - b.opened_at) >= r.threshold
$$;
COMMENT ON FUNCTION webhook._alert_conditions() IS 'Internal: the rules that fire now, per subject, with the value measured';

-- Tell listeners an alert changed, unless it is silenced.
CREATE FUNCTION webhook._alert_notify(alert webhook.alerts, change text) RETURNS void
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT pg_catalog.pg_notify('webhook_alert', pg_catalog.json_build_object(
           'id', alert.id, 'change', change, 'rule', alert.rule, 'kind', alert.kind,
           'status', alert.status, 'provider', alert.provider, 'consumer', alert.consumer,
           'value', alert.value, 'threshold', alert.threshold, 'message', alert.message,
           'first_seen_at', alert.first_seen_at)::text)
 WHERE alert.silenced_until IS NULL OR alert.silenced_until <= pg_catalog.now()
$$;
COMMENT ON FUNCTION webhook._alert_notify(webhook.alerts, text) IS 'Internal: NOTIFY webhook_alert about a change, unless the alert is silenced';

-- Roll up the metrics, then open, update and resolve alerts. Returns the
-- alerts that changed (opened, resolved) with the change.
CREATE FUNCTION @extschema@.webhook_alerts_evaluate()
RETURNS TABLE (id bigint, change text, rule text, provider text, consumer text, status webhook.alert_status, message text)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    -- Two evaluations at once would both open the same alert.
    PERFORM pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('pg_webhook_inbox.alerts'));
    PERFORM @extschema@.webhook_metrics_rollup();
    -- One statement, one snapshot: what fires is measured once, and each
    -- unresolved alert is either still firing or resolved.
    RETURN QUERY
    WITH firing AS (
        SELECT * FROM webhook._alert_conditions()
    ), still AS (
        UPDATE webhook.alerts x
           SET value = f.value, threshold = f.threshold, message = f.message, last_seen_at = pg_catalog.now()
          FROM firing f
         WHERE x.status <> 'resolved' AND x.rule = f.rule AND x.provider = f.provider AND x.consumer = f.consumer
    ), opened AS (
        INSERT INTO webhook.alerts AS x (rule, kind, provider, consumer, value, threshold, message)
        SELECT f.rule, f.kind, f.provider, f.consumer, f.value, f.threshold, f.message
          FROM firing f
         WHERE NOT EXISTS (SELECT FROM webhook.alerts y
                            WHERE y.status <> 'resolved' AND y.rule = f.rule AND y.provider = f.provider
                              AND y.consumer = f.consumer)
        RETURNING x.*
    ), resolved AS (
        UPDATE webhook.alerts x SET status = 'resolved', resolved_at = pg_catalog.now()
         WHERE x.status <> 'resolved'
           AND NOT EXISTS (SELECT FROM firing f
                            WHERE x.rule = f.rule AND x.provider = f.provider AND x.consumer = f.consumer)
        RETURNING x.*
    ), changed AS (
        SELECT o::webhook.alerts AS a, 'opened' AS change FROM opened o
        UNION ALL
        SELECT r::webhook.alerts, 'resolved' FROM resolved r
    )
    SELECT (c.a).id, c.change, (c.a).rule, (c.a).provider, (c.a).consumer, (c.a).status, (c.a).message
      FROM changed c, LATERAL webhook._alert_notify(c.a, c.change)
     ORDER BY (c.a).id;
END
$$;
COMMENT ON FUNCTION @extschema@.webhook_alerts_evaluate() IS
    'Roll the metrics up, then open, update and resolve alerts (NOTIFY webhook_alert on each change); returns what changed. Run it every minute (pg_cron: see docs/observability.md)';

-- An operator is on it: it stays until its condition clears.
CREATE FUNCTION @extschema@.webhook_alert_acknowledge(alert_id bigint)
RETURNS webhook.alerts
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    a webhook.alerts;
BEGIN
    IF alert_id IS NULL THEN
        RAISE EXCEPTION 'webhook_alert_acknowledge: argument "alert_id" must not be NULL' USING ERRCODE = '22004';
    END IF;
    UPDATE webhook.alerts x
       SET status = 'acknowledged', acknowledged_at = pg_catalog.now(), acknowledged_by = session_user
     WHERE x.id = alert_id AND x.status = 'open'
    RETURNING x.* INTO a;
    IF a.id IS NULL THEN
        SELECT * INTO a FROM webhook.alerts x WHERE x.id = alert_id;
        IF a.id IS NULL THEN
            RAISE EXCEPTION 'webhook_alert_acknowledge: no alert with id %', alert_id USING ERRCODE = 'P0002';
        END IF;
        IF a.status = 'resolved' THEN
            RAISE EXCEPTION 'webhook_alert_acknowledge: alert % is resolved', alert_id USING ERRCODE = '55000';
        END IF;
        RETURN a;  -- acknowledged already
    END IF;
    PERFORM webhook._alert_notify(a, 'acknowledged');
    RETURN a;
END
$$;
COMMENT ON FUNCTION @extschema@.webhook_alert_acknowledge(bigint) IS
    'Acknowledge an open alert (an operator is on it); it resolves by itself when its condition clears';

-- No notification about an alert for a while (it is still tracked).
CREATE FUNCTION @extschema@.webhook_alert_silence(alert_id bigint, duration interval)
RETURNS webhook.alerts
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    a webhook.alerts;
BEGIN
    IF alert_id IS NULL THEN
        RAISE EXCEPTION 'webhook_alert_silence: argument "alert_id" must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF duration IS NULL OR duration <= interval '0' OR duration > interval '30 days' THEN
        RAISE EXCEPTION 'webhook_alert_silence: argument "duration" must be more than 0 and at most 30 days'
            USING ERRCODE = '22023';
    END IF;
    UPDATE webhook.alerts x SET silenced_until = pg_catalog.now() + duration
     WHERE x.id = alert_id AND x.status <> 'resolved'
    RETURNING x.* INTO a;
    IF a.id IS NULL THEN
        IF EXISTS (SELECT FROM webhook.alerts x WHERE x.id = alert_id) THEN
            RAISE EXCEPTION 'webhook_alert_silence: alert % is resolved', alert_id USING ERRCODE = '55000';
        END IF;
        RAISE EXCEPTION 'webhook_alert_silence: no alert with id %', alert_id USING ERRCODE = 'P0002';
    END IF;
    RETURN a;
END
$$;
COMMENT ON FUNCTION @extschema@.webhook_alert_silence(bigint, interval) IS
    'Send no notification about an unresolved alert for a while (at most 30 days); it is still evaluated, and resolves as usual';

-- pg_webhook_inbox: reconciliation with a provider's events API.
--
-- A webhook that never arrives is invisible: the provider gave up, a
-- firewall dropped it, GitHub never redelivers. A poller that lists the
-- provider's events through its API (Stripe's /v1/events, GitHub's
-- deliveries) feeds each one to webhook_enqueue_polled: it enters through
-- the same dedup key as deliveries (provider, event id), so an event both
-- polled and delivered is queued, and processed, once. Which archive rows
-- a poll made is recorded (webhook.polled), so that the events seen only
-- by polling — the webhooks that never came — can be listed
-- (webhook.missed_deliveries).
--
-- The poller vouches for what it feeds in, as a handler calling
-- webhook_enqueue does: it read the event from the provider's API over
-- TLS with its own credentials. Nothing polled goes through a signature.


CREATE TABLE webhook.polled (
    -- The archive row the poll made (a duplicate's too, when duplicates
    -- are archived).
    delivery_id uuid        NOT NULL,
    provider    text        NOT NULL,
    event_id    text        NOT NULL,
    polled_at   timestamptz NOT NULL DEFAULT pg_catalog.now(),
    CONSTRAINT polled_pkey PRIMARY KEY (delivery_id)
);
CREATE INDEX polled_event_idx ON webhook.polled (provider, event_id);
COMMENT ON TABLE webhook.polled IS
    'Events fed in by polling a provider''s API (webhook_enqueue_polled), by the archive row each poll made';
COMMENT ON COLUMN webhook.polled.delivery_id IS 'The archive row (webhook.delivery_log) the poll made';
COMMENT ON COLUMN webhook.polled.provider IS 'Provider name';
COMMENT ON COLUMN webhook.polled.event_id IS 'The event''s id';
COMMENT ON COLUMN webhook.polled.polled_at IS 'When the poll fed it in';

-- Queue an event read from the provider's events API: webhook_enqueue
-- (the same checks, the same dedup, the application role's scope), and a
-- record that the archive row is a poll's.
CREATE FUNCTION @extschema@.webhook_enqueue_polled(
    provider   text,
    event_id   text,
    event_type text,
    payload    jsonb
) RETURNS webhook.enqueue_result
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    queued webhook.enqueue_result;
BEGIN
    -- Named as this function, not as the one it calls; the other checks
    -- are webhook_enqueue's.
    IF webhook_enqueue_polled.provider IS NULL THEN
        RAISE EXCEPTION 'webhook_enqueue_polled: argument "provider" must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    ELSIF webhook_enqueue_polled.event_id IS NULL THEN
        RAISE EXCEPTION 'webhook_enqueue_polled: argument "event_id" must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    ELSIF webhook_enqueue_polled.event_type IS NULL THEN
        RAISE EXCEPTION 'webhook_enqueue_polled: argument "event_type" must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    ELSIF webhook_enqueue_polled.payload IS NULL THEN
        RAISE EXCEPTION 'webhook_enqueue_polled: argument "payload" must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    queued := @extschema@.webhook_enqueue(webhook_enqueue_polled.provider, webhook_enqueue_polled.event_id,
                                          webhook_enqueue_polled.event_type, webhook_enqueue_polled.payload);
    INSERT INTO webhook.polled (delivery_id, provider, event_id)
    VALUES (queued.id, webhook_enqueue_polled.provider, webhook_enqueue_polled.event_id)
    ON CONFLICT ON CONSTRAINT polled_pkey DO NOTHING;
    RETURN queued;
END
$$;
COMMENT ON FUNCTION @extschema@.webhook_enqueue_polled(text, text, text, jsonb) IS
    'Queue an event read from the provider''s events API (a poller reconciling missed webhooks): webhook_enqueue''s dedup, so an event both polled and delivered is processed once; recorded in webhook.polled';

-- The webhooks that never came: events the poller found that no delivery
-- brought (a rejected one, a forgery or a bad secret, does not count).
-- As far back as the archive goes: a poll whose archive row webhook_purge
-- removed is not compared any more.
CREATE VIEW webhook.missed_deliveries AS
SELECT p.provider, p.event_id, e.event_type, e.status, pg_catalog.min(p.polled_at) AS first_polled_at,
       pg_catalog.count(*) AS polls
  FROM webhook.polled p
  JOIN webhook.events e ON e.provider = p.provider AND e.event_id = p.event_id
 WHERE EXISTS (SELECT FROM webhook.delivery_log o WHERE o.id = p.delivery_id)
   AND NOT EXISTS (SELECT FROM webhook.delivery_log l
                    WHERE l.provider = p.provider AND l.event_id = p.event_id
                      AND l.claim_status <> 'rejected'
                      AND NOT EXISTS (SELECT FROM webhook.polled q WHERE q.delivery_id = l.id))
 GROUP BY p.provider, p.event_id, e.event_type, e.status;
COMMENT ON VIEW webhook.missed_deliveries IS
    'Events seen only by polling the provider''s API: the webhooks that never arrived (as far back as the archive goes)';


-- pg_webhook_inbox: filters on signed fields.
--
-- A provider (or one of its inbox consumers) may take only some events:
-- an allowlist of event types, a JSON path predicate over the body, or
-- both. webhook_receive still verifies, archives and deduplicates a
-- delivery that does not match, and answers it 2xx; it is just not
-- processed:
--
--   * a provider's filter: the event is filtered for good (status
--     `filtered`, the archive row too, with the reason). Its redeliveries
--     are duplicates of it; in inbox mode each consumer's row is kept as
--     `filtered`, so webhook_replay(statuses => '{filtered}') can run it
--     later;
--   * a consumer's filter (inbox mode): that consumer's row of the event
--     is `filtered`, the others are queued as usual.
--
-- A filter reads only what the delivery's signature covers: an event
-- type the provider's scheme signs, a body it vouches for by a digest.
-- A sender who controls an unsigned header could otherwise drop any event
-- it likes. webhook_set_filter refuses a filter that would read anything
-- else, and webhook_receive, should the provider have been registered
-- again with another scheme since, processes the delivery rather than
-- judge it on unsigned material.
--
-- Filters judge deliveries as webhook_receive verifies them. webhook_claim
-- and webhook_enqueue take what the application hands them: it chose.


CREATE TABLE webhook.filters (
    provider     text        NOT NULL,
    -- '' : the provider's filter, for the event as a whole.
    consumer     text        NOT NULL DEFAULT '',
    -- The event types taken; NULL: any.
    event_types  text[],
    -- A JSON path predicate the body must match; NULL: any body.
    payload_path jsonpath,
    set_at       timestamptz NOT NULL DEFAULT pg_catalog.now(),
    set_by       text        NOT NULL DEFAULT SESSION_USER,
    CONSTRAINT filters_pkey PRIMARY KEY (provider, consumer),
    CONSTRAINT filters_provider_fkey FOREIGN KEY (provider) REFERENCES webhook.providers (name)
        ON UPDATE CASCADE ON DELETE CASCADE,
    CONSTRAINT filters_any_check CHECK (event_types IS NOT NULL OR payload_path IS NOT NULL),
    CONSTRAINT filters_event_types_check
        CHECK (pg_catalog.cardinality(event_types) BETWEEN 1 AND 1000
               AND pg_catalog.array_position(event_types, NULL) IS NULL),
    CONSTRAINT filters_payload_path_check CHECK (pg_catalog.octet_length(payload_path::text) <= 4096)
);
COMMENT ON TABLE webhook.filters IS
    'Which events a provider, or one of its inbox consumers, takes: an event-type allowlist and/or a JSON path predicate over the signed body; set with webhook_set_filter';
COMMENT ON COLUMN webhook.filters.provider IS 'The provider whose deliveries are judged';
COMMENT ON COLUMN webhook.filters.consumer IS 'The inbox consumer it applies to; empty: the event as a whole';
COMMENT ON COLUMN webhook.filters.event_types IS 'The event types taken; NULL: any';
COMMENT ON COLUMN webhook.filters.payload_path IS 'A JSON path predicate the body must match (jsonb_path_match; a path that does not fit is no match); NULL: any';
COMMENT ON COLUMN webhook.filters.set_at IS 'When it was last set';
COMMENT ON COLUMN webhook.filters.set_by IS 'Who last set it (the session user)';

-- Set the filter of a provider (consumer NULL) or of one of its inbox
-- consumers; with neither event_types nor payload_path, remove it. Applies
-- to deliveries received from then on. Returns whether a filter is in
-- place.
CREATE FUNCTION @extschema@.webhook_set_filter(
    provider     text,
    consumer     text DEFAULT NULL,
    event_types  text[] DEFAULT NULL,
    payload_path jsonpath DEFAULT NULL
) RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p text := webhook._check_name('webhook_set_filter', 'provider', webhook_set_filter.provider, true);
    c text := webhook._check_name('webhook_set_filter', 'consumer', webhook_set_filter.consumer, false);
    registered webhook.providers;
BEGIN
    SELECT r.* INTO registered FROM webhook.providers r WHERE r.name = p FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'webhook_set_filter: argument "provider": no provider "%" is registered', p
            USING ERRCODE = 'undefined_object';
    END IF;
    IF c <> '' AND NOT c = ANY (CASE WHEN pg_catalog.cardinality(registered.consumers) = 0
                                     THEN ARRAY['default'] ELSE registered.consumers END) THEN
        RAISE EXCEPTION 'webhook_set_filter: argument "consumer": provider "%" has no consumer "%"', p, c
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Its consumers are listed in webhook.providers.consumers (none: default).';
    END IF;
    IF webhook_set_filter.event_types IS NULL AND webhook_set_filter.payload_path IS NULL THEN
        DELETE FROM webhook.filters f WHERE f.provider = p AND f.consumer = c;
        RETURN false;
    END IF;
    IF pg_catalog.cardinality(webhook_set_filter.event_types) NOT BETWEEN 1 AND 1000
       OR pg_catalog.array_position(webhook_set_filter.event_types, NULL) IS NOT NULL
       OR EXISTS (SELECT FROM pg_catalog.unnest(webhook_set_filter.event_types) t
                   WHERE t = '' OR pg_catalog.octet_length(t) > 255) THEN
        RAISE EXCEPTION 'webhook_set_filter: argument "event_types" must hold 1 to 1000 types of 1 to 255 bytes'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF pg_catalog.octet_length(webhook_set_filter.payload_path::text) > 4096 THEN
        RAISE EXCEPTION 'webhook_set_filter: argument "payload_path" must be at most 4096 bytes'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- Signed material only: whoever controls what the signature does not
    -- cover could pick which events are dropped.
    IF webhook_set_filter.event_types IS NOT NULL
       AND NOT @extschema@.webhook_source_signed(registered.scheme, registered.event_type_from) THEN
        RAISE EXCEPTION 'webhook_set_filter: argument "event_types": provider "%" reads the event type from %, which its scheme "%" does not sign',
                p, registered.event_type_from, registered.scheme
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = CASE WHEN @extschema@.webhook_source_signed(registered.scheme, 'body:')
                              THEN 'Filter on what the signed body says instead, with payload_path.'
                              ELSE 'This scheme signs no body a filter could read either: filter in the handler.' END;
    END IF;
    IF webhook_set_filter.payload_path IS NOT NULL
       AND NOT @extschema@.webhook_source_signed(registered.scheme, 'body:') THEN
        RAISE EXCEPTION 'webhook_set_filter: argument "payload_path": the signature of provider "%" (scheme "%") does not vouch for the body',
                p, registered.scheme
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'SELECT body_covered FROM webhook_schemes() says what each scheme signs; only a digest of the body may be filtered on.';
    END IF;
    INSERT INTO webhook.filters AS f (provider, consumer, event_types, payload_path)
    VALUES (p, c, webhook_set_filter.event_types, webhook_set_filter.payload_path)
    ON CONFLICT ON CONSTRAINT filters_pkey DO UPDATE
       SET event_types = EXCLUDED.event_types, payload_path = EXCLUDED.payload_path,
           set_at = pg_catalog.now(), set_by = SESSION_USER;
    RETURN true;
END
$$;
COMMENT ON FUNCTION @extschema@.webhook_set_filter(text, text, text[], jsonpath) IS
    'For operators: let a provider (or one of its inbox consumers) take only the event types listed and/or bodies matching a JSON path; refused where the signature does not cover what the filter reads; with neither, remove the filter';


-- pg_webhook_inbox: one slot of a tier of databases (docs/scale-out.md).
--
-- A tier splits intake (receive, verify, deduplicate, archive, queue)
-- across 2^k slot databases behind a PL/Proxy database (proxy/). Each
-- delivery belongs to one slot, decided by its route key
-- (webhook_route_key, written in Rust: signed material only) and the
-- hash below, which PL/Proxy's RUN ON masks to the slot count exactly as
-- webhook_route_slot does. The examples compute the same in Python, Node
-- and Rust.

-- The first four bytes of SHA-256(provider || newline || route_key), as a
-- big-endian signed integer.
CREATE FUNCTION @extschema@.webhook_route_hash(provider text, route_key text) RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN ('x' || pg_catalog.left(pg_catalog.encode(pg_catalog.sha256(
            pg_catalog.convert_to(provider || E'\n' || route_key, 'UTF8')), 'hex'), 8))::bit(32)::integer;
COMMENT ON FUNCTION @extschema@.webhook_route_hash(text, text) IS
    'The hash a tier of databases routes by: the first four bytes of SHA-256(provider, newline, route_key) as a big-endian integer';

CREATE FUNCTION @extschema@.webhook_route_slot(provider text, route_key text, slots integer) RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN @extschema@.webhook_route_hash(provider, route_key) & (slots - 1);
COMMENT ON FUNCTION @extschema@.webhook_route_slot(text, text, integer) IS
    'The slot of a route key among slots (a power of two): webhook_route_hash masked, as PL/Proxy''s RUN ON masks it';

-- Ids made in a slot's database carry the slot in their last two bytes.
CREATE FUNCTION @extschema@.webhook_slot_of(id uuid) RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN (pg_catalog.get_byte(pg_catalog.uuid_send(id), 14) << 8)
     | pg_catalog.get_byte(pg_catalog.uuid_send(id), 15);
COMMENT ON FUNCTION @extschema@.webhook_slot_of(uuid) IS
    'The slot a delivery or lease id made in a slot''s database carries (its last two bytes): where webhook_complete, webhook_fail and webhook_extend of it go';

-- Make this database one slot of a tier: every new session of it stamps
-- its ids with the slot and refuses deliveries that route elsewhere. NULL,
-- NULL makes it a database of its own again. A superuser runs it (the
-- settings are superuser-only, so no application role can move a
-- database between slots).
CREATE FUNCTION @extschema@.webhook_set_slot(slot integer, slots integer) RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF slot IS NULL AND slots IS NULL THEN
        EXECUTE pg_catalog.format('ALTER DATABASE %I RESET webhook.slot', pg_catalog.current_database());
        EXECUTE pg_catalog.format('ALTER DATABASE %I RESET webhook.slots', pg_catalog.current_database());
        PERFORM pg_catalog.set_config('webhook.slot', '-1', false);
        PERFORM pg_catalog.set_config('webhook.slots', '0', false);
        RETURN;
    END IF;
    IF slots IS NULL OR slots < 1 OR slots > 65536 OR slots & (slots - 1) <> 0 THEN
        RAISE EXCEPTION 'webhook_set_slot: argument "slots" must be a power of two from 1 to 65536, not %',
                coalesce(slots::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF slot IS NULL OR slot < 0 OR slot >= slots THEN
        RAISE EXCEPTION 'webhook_set_slot: argument "slot" must be from 0 to % (slots - 1), not %',
                slots - 1, coalesce(slot::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    EXECUTE pg_catalog.format('ALTER DATABASE %I SET webhook.slot = %s', pg_catalog.current_database(), slot);
    EXECUTE pg_catalog.format('ALTER DATABASE %I SET webhook.slots = %s', pg_catalog.current_database(), slots);
    PERFORM pg_catalog.set_config('webhook.slot', slot::text, false);
    PERFORM pg_catalog.set_config('webhook.slots', slots::text, false);
END;
$$;
COMMENT ON FUNCTION @extschema@.webhook_set_slot(integer, integer) IS
    'For superusers: make this database slot "slot" of a tier of "slots" databases (ids carry the slot, deliveries routed elsewhere are refused); NULL, NULL undoes it';

-- A delivery's route key, written in Rust (src/route.rs).
CREATE  FUNCTION @extschema@."webhook_route_key"(
	"scheme" TEXT, /* Option < & str > */
	"event_id_from" TEXT, /* Option < & str > */
	"entity_key_from" TEXT, /* Option < & str > */
	"headers" jsonb, /* Option < crate :: jsonb :: RawJsonb > */
	"body" bytea, /* Option < & [u8] > */
	"url" TEXT DEFAULT NULL /* Option < & str > */
) RETURNS TEXT /* std :: result :: Result < String, pgrx :: pg_sys :: panic :: ErrorReport > */
IMMUTABLE PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'route_key_wrapper';
COMMENT ON FUNCTION @extschema@.webhook_route_key(text, text, text, jsonb, bytea, text) IS
    'A delivery''s route key in a tier of databases, from signed material only and without a secret: entity:<key> for an ordered provider, else event:<id> where the scheme signs the id, else signed:<SHA-256 of the signed bytes> (body:<SHA-256 of the body> when nothing signed can be read)';

-- Their ACLs recorded as the extension's initial privileges, as a fresh
-- install's REVOKE ALL ON ALL TABLES does.
REVOKE ALL ON webhook.metric_minutes, webhook.metric_totals, webhook.metric_marks, webhook.metric_open,
    webhook.alert_rules, webhook.alert_rules_in_effect, webhook.alerts, webhook.pauses, webhook.limits,
    webhook.limit_slots, webhook.breakers, webhook.paused, webhook.limits_in_effect, webhook.polled,
    webhook.missed_deliveries, webhook.replays, webhook.replay_items, webhook.replay_progress,
    webhook.trace_contexts, webhook.filters, webhook.metric_held FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('webhook.metric_minutes', '');
SELECT pg_catalog.pg_extension_config_dump('webhook.metric_totals', '');
SELECT pg_catalog.pg_extension_config_dump('webhook.metric_open', '');
SELECT pg_catalog.pg_extension_config_dump('webhook.alert_rules', '');
SELECT pg_catalog.pg_extension_config_dump('webhook.alerts', '');
SELECT pg_catalog.pg_extension_config_dump('webhook.alerts_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('webhook.pauses', '');
SELECT pg_catalog.pg_extension_config_dump('webhook.limits', '');
SELECT pg_catalog.pg_extension_config_dump('webhook.limit_slots', '');
SELECT pg_catalog.pg_extension_config_dump('webhook.breakers', '');
SELECT pg_catalog.pg_extension_config_dump('webhook.polled', '');
SELECT pg_catalog.pg_extension_config_dump('webhook.replays', '');
SELECT pg_catalog.pg_extension_config_dump('webhook.replay_items', '');
SELECT pg_catalog.pg_extension_config_dump('webhook.trace_contexts', '');
SELECT pg_catalog.pg_extension_config_dump('webhook.filters', '');

-- What steers the inbox, and the filters, are cached like the registry.
CREATE TRIGGER registry_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON webhook.pauses
    FOR EACH STATEMENT EXECUTE FUNCTION @extschema@.webhook_registry_changed();
CREATE TRIGGER registry_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON webhook.limits
    FOR EACH STATEMENT EXECUTE FUNCTION @extschema@.webhook_registry_changed();
ALTER TABLE webhook.pauses ENABLE ALWAYS TRIGGER registry_changed;
CREATE TRIGGER registry_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON webhook.filters
    FOR EACH STATEMENT EXECUTE FUNCTION @extschema@.webhook_registry_changed();
ALTER TABLE webhook.limits ENABLE ALWAYS TRIGGER registry_changed;
ALTER TABLE webhook.filters ENABLE ALWAYS TRIGGER registry_changed;
COMMENT ON FUNCTION @extschema@.webhook_registry_changed() IS
    'Trigger on the provider registry, the application roles'' scopes, the pauses, the limits and the filters: drops every backend''s cached copy of them once the change commits';

-- A secret's last use is kept apart from the secret: a handler
-- transaction that noted it no longer holds the secret's row, and
-- retiring a leaked key never waits for one.
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
INSERT INTO webhook.secret_uses (provider, fingerprint, last_used_at)
SELECT s.provider, s.fingerprint, s.last_used_at FROM webhook.provider_secrets s;
-- Its ACL recorded as the extension's initial privileges, as above.
REVOKE ALL ON webhook.secret_uses FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('webhook.secret_uses', '');
-- Which secret (or public key, or certificate) is in use: what a DBA looks
-- at before retiring one.
CREATE OR REPLACE VIEW webhook.secret_usage AS
SELECT s.provider, s.fingerprint, s.added_at, s.retired_at, u.last_used_at
  FROM webhook.provider_secrets s
  LEFT JOIN webhook.secret_uses u ON u.provider = s.provider AND u.fingerprint = s.fingerprint;
COMMENT ON VIEW webhook.secret_usage IS 'Each provider secret by fingerprint: when added, retired and last used to verify a delivery';
ALTER TABLE webhook.provider_secrets DROP COLUMN last_used_at;

-- Retire a secret, named by its fingerprint (as listed) or by itself.
-- Deliveries signed with it fail from now on. One that verified a delivery
-- in the last day is still in use by the provider: retiring it needs
-- force => true, and warns even then. A leaked key must stop verifying
-- now: deliveries noting its use never hold the secret's row, and another
-- transaction that does (a registry change left open) is waited for at
-- most webhook.maintenance_lock_timeout, then named in the error.
CREATE OR REPLACE FUNCTION @extschema@.webhook_retire_secret(
    provider              text,
    secret_or_fingerprint text,
    force                 boolean DEFAULT false
) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    target   webhook.provider_secrets;
    used_at  timestamptz;
    wait     text := pg_catalog.current_setting('webhook.maintenance_lock_timeout', true);
    previous text := pg_catalog.current_setting('lock_timeout');
    holder   xid;
    blockers text;
BEGIN
    PERFORM pg_catalog.set_config('lock_timeout', coalesce(wait, '5s'), true);
    BEGIN
        SELECT * INTO target
          FROM webhook.provider_secrets s
         WHERE s.provider = webhook_retire_secret.provider
           AND s.retired_at IS NULL
           AND s.fingerprint IN (webhook_retire_secret.secret_or_fingerprint,
                                 webhook._fingerprint(webhook_retire_secret.secret_or_fingerprint))
           FOR UPDATE;
    EXCEPTION WHEN lock_not_available THEN
        -- The row's locker, from its xmax, and the sessions of that
        -- transaction.
        SELECT s.xmax INTO holder FROM webhook.provider_secrets s
         WHERE s.provider = webhook_retire_secret.provider
           AND s.fingerprint IN (webhook_retire_secret.secret_or_fingerprint,
                                 webhook._fingerprint(webhook_retire_secret.secret_or_fingerprint));
        SELECT pg_catalog.string_agg(pg_catalog.format('pid %s (user %s, application %L, transaction open since %s)',
                                                       a.pid, a.usename, a.application_name, a.xact_start), ', ')
          INTO blockers
          FROM pg_catalog.pg_locks l JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
         WHERE l.locktype = 'transactionid' AND l.granted AND l.transactionid = holder;
        RAISE EXCEPTION 'webhook_retire_secret: the secret of provider "%" is locked by another transaction; waited %',
            webhook_retire_secret.provider, coalesce(wait, '5s')
            USING ERRCODE = 'lock_not_available',
                  DETAIL = 'Held by ' || coalesce(blockers, 'a transaction that has since ended') || '.',
                  HINT = 'End that transaction (pg_terminate_backend) and retire the secret again.';
    END;
    PERFORM pg_catalog.set_config('lock_timeout', previous, true);
    SELECT u.last_used_at INTO used_at FROM webhook.secret_uses u
     WHERE u.provider = target.provider AND u.fingerprint = target.fingerprint;
    IF target.provider IS NOT NULL AND used_at > now() - interval '1 day' THEN
        IF NOT coalesce(webhook_retire_secret.force, false) THEN
            RAISE EXCEPTION 'webhook_retire_secret: secret % of provider "%" verified a delivery at %, within the last day',
                target.fingerprint, target.provider, used_at
                USING ERRCODE = 'object_not_in_prerequisite_state',
                      DETAIL = 'Deliveries the provider still signs with it would be refused once it is retired.',
                      HINT = 'Retire it once webhook.secret_usage shows the new secret verifying deliveries and this one idle, or pass force => true.';
        END IF;
        RAISE WARNING 'webhook_retire_secret: secret % of provider "%" verified a delivery at %; deliveries still signed with it will be refused',
            target.fingerprint, target.provider, used_at;
    END IF;
    UPDATE webhook.provider_secrets s
       SET retired_at = now()
     WHERE s.provider = target.provider AND s.fingerprint = target.fingerprint;
    IF NOT FOUND THEN
        -- The argument may be the secret itself: never echo it into an
        -- error message, which ends up in the server log.
        RAISE EXCEPTION 'webhook_retire_secret: provider "%" has no active secret with that value or fingerprint',
            webhook_retire_secret.provider
            USING ERRCODE = 'no_data_found',
                  HINT = 'webhook_providers() lists the fingerprints of active secrets.';
    END IF;
END
$$;
COMMENT ON FUNCTION @extschema@.webhook_retire_secret(text, text, boolean) IS
    'Retire a provider''s secret, named by its fingerprint or by itself; one used in the last day needs force => true';

-- Outcomes a replay or requeue takes back before a rollup counted them.
SELECT pg_catalog.pg_extension_config_dump('webhook.metric_held', '');

-- Making many days ahead reads the default partition once.
-- Create the archive's partitions for today (UTC) and the next days_ahead
-- days, those that do not exist yet. Schedule it daily at least (with
-- pg_cron: SELECT cron.schedule('webhook-partitions', '15 * * * *',
-- 'SELECT webhook_create_partitions()')); without it, deliveries land in
-- webhook.delivery_log_default, which works but is purged row by row.
-- Returns how many partitions it created.
--
-- Attaching a partition makes PostgreSQL read the whole default partition
-- (is nothing of the new range in it?), holding it locked until the
-- transaction ends: once per day made, and claims that read the archive
-- would wait behind all of them. Instead, one ALTER TABLE first adds to
-- the default partition a constraint per day excluding its range, which
-- reads it once for every day; each attach then finds its range excluded
-- and reads nothing. The constraints go again before the call returns.
CREATE OR REPLACE FUNCTION @extschema@.webhook_create_partitions(days_ahead integer DEFAULT 7)
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    today date := (pg_catalog.now() AT TIME ZONE 'UTC')::date;
    days  date[];
    made  integer;
    guards text[] := '{}';
    lock_timeout_before text := pg_catalog.current_setting('lock_timeout');
BEGIN
    IF days_ahead IS NULL OR days_ahead < 0 OR days_ahead > 366 THEN
        RAISE EXCEPTION 'webhook_create_partitions: argument "days_ahead" must be between 0 and 366'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- One maintenance at a time (webhook_purge takes the same lock).
    PERFORM pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('pg_webhook_inbox archive partitions'));
    SELECT pg_catalog.array_agg(today + i ORDER BY i) INTO days
      FROM pg_catalog.generate_series(0, days_ahead) AS i
     WHERE webhook._archive_day_free(today + i);
    IF pg_catalog.cardinality(days) > 1 THEN
        SELECT pg_catalog.array_agg(pg_catalog.format('delivery_log_default_not_%s', pg_catalog.to_char(d, 'YYYYMMDD')))
          INTO guards FROM pg_catalog.unnest(days) AS d;
        BEGIN
            PERFORM pg_catalog.set_config('lock_timeout', webhook._maintenance_lock_timeout(), true);
            EXECUTE 'ALTER TABLE webhook.delivery_log_default '
                    || (SELECT pg_catalog.string_agg(pg_catalog.format('ADD CONSTRAINT %I CHECK (id < %L::uuid OR id >= %L::uuid)',
                                                                       g, webhook._archive_bound((d::timestamp) AT TIME ZONE 'UTC'),
                                                                       webhook._archive_bound(((d + 1)::timestamp) AT TIME ZONE 'UTC')), ', ')
                          FROM ROWS FROM (pg_catalog.unnest(days), pg_catalog.unnest(guards)) AS x (d, g));
            PERFORM pg_catalog.set_config('lock_timeout', lock_timeout_before, true);
        EXCEPTION WHEN check_violation OR lock_not_available THEN
            -- A delivery of one of those days reached the default partition
            -- meanwhile, or the archive is in use: each day is attached (or
            -- skipped) on its own, as below.
            guards := '{}';
        END;
    END IF;
    SELECT pg_catalog.count(*) FILTER (WHERE webhook._create_archive_partition(d)) INTO made
      FROM pg_catalog.unnest(days) AS d;
    IF pg_catalog.cardinality(guards) > 0 THEN
        EXECUTE 'ALTER TABLE webhook.delivery_log_default '
                || (SELECT pg_catalog.string_agg(pg_catalog.format('DROP CONSTRAINT %I', g), ', ')
                      FROM pg_catalog.unnest(guards) AS g);
    END IF;
    RETURN coalesce(made, 0);
END
$$;
COMMENT ON FUNCTION @extschema@.webhook_create_partitions(integer) IS
    'Create the archive''s daily partitions (UTC) for today and the next days_ahead days; returns how many it created. Schedule it daily';

-- In an intake tier, a change of a provider's route needs reroute => true.
-- The function takes a new argument: made anew, its grants given back
-- below like the others'.
SELECT pg_catalog.set_config('pg_webhook_inbox.upgrade_acls',
       (pg_catalog.current_setting('pg_webhook_inbox.upgrade_acls')::pg_catalog.jsonb
        || (SELECT pg_catalog.jsonb_build_object(
                       '@extschema@.webhook_register_provider(text, text, text, interval, text, text, boolean, text[], boolean, text, text, text, boolean, boolean)',
                       coalesce(p.proacl::text, ''))
              FROM pg_catalog.pg_proc p
             WHERE p.oid = '@extschema@.webhook_register_provider(text, text, text, interval, text, text, boolean, text[], boolean, text, text, text, boolean)'::pg_catalog.regprocedure))::text,
       true);
DROP FUNCTION @extschema@.webhook_register_provider(text, text, text, interval, text, text, boolean, text[], boolean, text, text, text, boolean);
CREATE FUNCTION @extschema@.webhook_register_provider(
    name            text,
    secret          text     DEFAULT NULL,
    scheme          text     DEFAULT NULL,
    tolerance       interval DEFAULT NULL,
    event_id_from   text     DEFAULT NULL,
    event_type_from text     DEFAULT NULL,
    inbox           boolean  DEFAULT NULL,
    consumers       text[]   DEFAULT NULL,
    ordering        boolean  DEFAULT NULL,
    entity_key_from text     DEFAULT NULL,
    order_from      text     DEFAULT NULL,
    ties            text     DEFAULT NULL,
    fifo            boolean  DEFAULT NULL,
    reroute         boolean  DEFAULT false
) RETURNS SETOF webhook.provider_summary
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p_name     text := lower(webhook_register_provider.name);
    existing   webhook.providers;
    v_scheme   text;
    v_entity   text;
    v_order    text;
    known      record;
    failed_check text;
BEGIN
    IF p_name IS NULL OR p_name = '' THEN
        RAISE EXCEPTION 'webhook_register_provider: argument "name" must not be empty'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT * INTO existing FROM webhook.providers p WHERE p.name = p_name FOR UPDATE;

    v_scheme := btrim(coalesce(webhook_register_provider.scheme, existing.scheme, p_name));
    SELECT s.* INTO known
      FROM @extschema@.webhook_schemes() s
     WHERE s.scheme = lower(split_part(v_scheme, ';', 1))
        OR lower(split_part(v_scheme, ';', 1)) = ANY (s.aliases);
    IF NOT FOUND THEN
        RAISE EXCEPTION 'webhook_register_provider: argument "scheme": unknown signature scheme "%"', v_scheme
            USING ERRCODE = 'undefined_object',
                  HINT = 'SELECT * FROM webhook_schemes() lists the schemes and their aliases.';
    END IF;
    -- A scheme's options (the generic form's, PayPal's webhook id) are
    -- kept; webhook_verify checks them, and that a scheme needing them has
    -- them.
    BEGIN
        PERFORM @extschema@.webhook_verify(v_scheme, '{}'::jsonb, ''::bytea, '{}'::text[]);
    EXCEPTION WHEN syntax_error THEN
        RAISE EXCEPTION 'webhook_register_provider: argument "scheme": invalid scheme "%"', v_scheme
            USING ERRCODE = 'syntax_error',
                  DETAIL = SQLERRM,
                  HINT = CASE known.scheme
                      WHEN 'paypal' THEN 'PayPal signs with the webhook''s id: paypal;webhook_id=<id>.'
                      WHEN 'hmac' THEN 'The generic form is hmac;header=<name>[;algorithm=sha256|sha1|sha512][;encoding=hex|base64][;prefix=<text>].'
                      ELSE format('Scheme "%s" takes no options.', known.scheme)
                  END;
    END;
    IF pg_catalog.strpos(v_scheme, ';') = 0 THEN
        v_scheme := known.scheme;
    END IF;

    IF webhook_register_provider.ordering IS FALSE THEN
        IF webhook_register_provider.entity_key_from IS NOT NULL
           OR webhook_register_provider.order_from IS NOT NULL THEN
            RAISE EXCEPTION 'webhook_register_provider: argument "ordering": false turns ordering off, but entity_key_from or order_from was given'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
    ELSE
        v_entity := coalesce(webhook_register_provider.entity_key_from,
                             CASE WHEN webhook_register_provider.ordering THEN known.entity_key_from END,
                             existing.entity_key_from);
        v_order := coalesce(webhook_register_provider.order_from,
                            CASE WHEN webhook_register_provider.ordering THEN known.order_from END,
                            existing.order_from);
        IF (webhook_register_provider.ordering OR v_entity IS NOT NULL OR v_order IS NOT NULL)
           AND (v_entity IS NULL OR v_order IS NULL) THEN
            RAISE EXCEPTION 'webhook_register_provider: argument "%": ordering needs both entity_key_from and order_from',
                CASE WHEN v_entity IS NULL THEN 'entity_key_from' ELSE 'order_from' END
                USING ERRCODE = 'null_value_not_allowed',
                      HINT = CASE WHEN v_entity IS NULL
                                  THEN format('Scheme "%s" has no entity key that fits every event type: name the path, for example entity_key_from => ''body:data.id''.', known.scheme)
                                  ELSE format('Scheme "%s" has no order value preset: name the path, for example order_from => ''body:updated_at''.', known.scheme)
                             END;
        END IF;
    END IF;

    -- In an intake tier (webhook_set_slot) a delivery's slot follows from
    -- its route key, and the route key from the scheme, event_id_from and
    -- entity_key_from: changing them sends the redeliveries of every event
    -- received so far to a slot that never saw it, where they would be
    -- taken as new. Refused for a provider registered already, unless
    -- reroute: this slot cannot know whether another holds its events,
    -- and every slot must decide alike (the proxy calls them one by one).
    IF existing.name IS NOT NULL
       AND coalesce(nullif(pg_catalog.current_setting('webhook.slots', true), ''), '0')::integer > 1
       AND (existing.scheme, existing.event_id_from, existing.entity_key_from)
           IS DISTINCT FROM (v_scheme,
                             coalesce(webhook_register_provider.event_id_from, existing.event_id_from),
                             v_entity)
       AND NOT coalesce(webhook_register_provider.reroute, false) THEN
        RAISE EXCEPTION 'webhook_register_provider: changing the scheme, event_id_from or ordering of provider "%" would route its deliveries to other slots', p_name
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = pg_catalog.format('Its route is now scheme %s, event id from %s, entity key from %s; asked: %s, %s, %s. Redeliveries of events received under the old route would reach slots that never saw them, and be processed again.',
                                             existing.scheme, existing.event_id_from, coalesce(existing.entity_key_from, 'none'),
                                             v_scheme, coalesce(webhook_register_provider.event_id_from, existing.event_id_from),
                                             coalesce(v_entity, 'none')),
                  HINT = 'Register the new route under a new provider name (and point the provider''s endpoint at it), or pass reroute => true if it has no deliveries yet or has stopped redelivering what it sent before (docs/scale-out.md).';
    END IF;

    INSERT INTO webhook.providers AS p
           (name, scheme, tolerance, event_id_from, event_type_from, inbox, consumers,
            entity_key_from, order_from, ties, fifo)
    VALUES (p_name,
            v_scheme,
            coalesce(webhook_register_provider.tolerance, existing.tolerance, known.tolerance),
            coalesce(webhook_register_provider.event_id_from, existing.event_id_from, known.event_id_from),
            coalesce(webhook_register_provider.event_type_from, existing.event_type_from, known.event_type_from),
            coalesce(webhook_register_provider.inbox, existing.inbox, known.scheme = 'github'),
            coalesce(webhook_register_provider.consumers, existing.consumers, '{}'),
            v_entity,
            v_order,
            coalesce(webhook_register_provider.ties, existing.ties, 'process'),
            -- Ordering turned off takes FIFO with it.
            CASE WHEN v_entity IS NULL THEN coalesce(webhook_register_provider.fifo, false)
                 ELSE coalesce(webhook_register_provider.fifo, existing.fifo, false) END)
    ON CONFLICT ON CONSTRAINT providers_pkey DO UPDATE
       SET scheme = excluded.scheme, tolerance = excluded.tolerance,
           event_id_from = excluded.event_id_from, event_type_from = excluded.event_type_from,
           inbox = excluded.inbox, consumers = excluded.consumers,
           entity_key_from = excluded.entity_key_from, order_from = excluded.order_from,
           ties = excluded.ties, fifo = excluded.fifo;

    IF webhook_register_provider.secret IS NOT NULL THEN
        PERFORM @extschema@.webhook_add_secret(p_name, webhook_register_provider.secret);
    END IF;
    RETURN QUERY SELECT * FROM webhook.provider_summary s WHERE s.name = p_name;
EXCEPTION
    WHEN not_null_violation THEN
        RAISE EXCEPTION 'webhook_register_provider: scheme "%" has no defaults; give event_id_from and event_type_from', v_scheme
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = 'Sources are ''header:<name>'' or ''body:<dotted.path>'', alternatives joined by ''|''.';
    WHEN check_violation THEN
        -- Each check guards one argument: name it.
        GET STACKED DIAGNOSTICS failed_check = CONSTRAINT_NAME;
        RAISE EXCEPTION 'webhook_register_provider: argument "%" is invalid',
            CASE failed_check
                WHEN 'providers_name_check' THEN 'name'
                WHEN 'providers_tolerance_check' THEN 'tolerance'
                WHEN 'providers_event_id_from_check' THEN 'event_id_from'
                WHEN 'providers_event_type_from_check' THEN 'event_type_from'
                WHEN 'providers_consumers_check' THEN 'consumers'
                WHEN 'providers_entity_key_from_check' THEN 'entity_key_from'
                WHEN 'providers_order_from_check' THEN 'order_from'
                WHEN 'providers_ties_check' THEN 'ties'
                WHEN 'providers_fifo_check' THEN 'fifo'
                ELSE failed_check
            END
            USING ERRCODE = 'check_violation',
                  DETAIL = SQLERRM,
                  HINT = CASE failed_check
                      WHEN 'providers_entity_key_from_check' THEN 'Ordering reads the signed body only: ''body:<dotted.path>'', alternatives joined by ''|''.'
                      WHEN 'providers_order_from_check' THEN 'Ordering reads the signed body only: ''body:<dotted.path>'', alternatives joined by ''|''.'
                      WHEN 'providers_ties_check' THEN 'ties is ''process'' or ''stale''.'
                      WHEN 'providers_fifo_check' THEN 'FIFO keeps each entity''s events in order: turn ordering on first (ordering => true, or entity_key_from and order_from).'
                      ELSE 'Names (and consumers) are lower-case [a-z0-9_.-]; sources are ''header:<name>'' or ''body:<dotted.path>''; the tolerance is positive.'
                  END;
END
$$;
COMMENT ON FUNCTION @extschema@.webhook_register_provider(text, text, text, interval, text, text, boolean, text[], boolean, text, text, text, boolean, boolean) IS
    'Create or update a provider: scheme (default: its name or alias), tolerance, where the event id and type are, inbox mode and consumers, ordering (entity key, order value, ties, FIFO), and optionally a secret; in an intake tier, a change of its route for a provider with events needs reroute => true';


-- Last: whatever this script created gets the extension's privileges.
SELECT webhook._restrict_privileges();

-- The functions made anew above are granted again to whoever could call
-- them before. These grants are the DBA's, as they were: the extension's
-- initial privileges (what pg_dump leaves out, as the extension's own)
-- stay those of a fresh install.
DO $$
DECLARE
    remade record;
    initial pg_catalog.aclitem[];
    held record;
BEGIN
    FOR remade IN
        SELECT f.key::pg_catalog.regprocedure AS fn, NULLIF(f.value, '')::pg_catalog.aclitem[] AS acl
          FROM pg_catalog.jsonb_each_text(pg_catalog.current_setting('pg_webhook_inbox.upgrade_acls')::pg_catalog.jsonb) f
    LOOP
        initial := (SELECT i.initprivs FROM pg_catalog.pg_init_privs i
                     WHERE i.classoid = 'pg_catalog.pg_proc'::pg_catalog.regclass
                       AND i.objoid = remade.fn AND i.objsubid = 0);
        FOR held IN
            SELECT a.grantee, a.is_grantable
              FROM pg_catalog.aclexplode(remade.acl) a
             WHERE a.privilege_type = 'EXECUTE'
               AND a.grantee <> (SELECT p.proowner FROM pg_catalog.pg_proc p WHERE p.oid = remade.fn)
        LOOP
            EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %s%s', remade.fn,
                                      CASE WHEN held.grantee = 0 THEN 'PUBLIC'
                                           ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(held.grantee)) END,
                                      CASE WHEN held.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
        END LOOP;
        UPDATE pg_catalog.pg_init_privs i SET initprivs = initial
         WHERE i.classoid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND i.objoid = remade.fn AND i.objsubid = 0;
    END LOOP;
END
$$;
