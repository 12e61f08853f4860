-- pg_webhook_inbox 0.10.0 → 0.11.0 (in progress, not published).
--
-- Every change to the SQL surface since 0.10.0 lands here, until 0.11.0 is
-- recorded in sql/RELEASES; the upgrade test proves that a database
-- upgraded through this script equals a fresh install of 0.11.0.

\echo Use "ALTER EXTENSION pg_webhook_inbox UPDATE TO '0.11.0'" to load this file. \quit

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
    IF EXISTS (SELECT FROM webhook.archive_partitions p
                WHERE NOT p.is_default AND (p.lower_id IS NULL OR p.lower_id < hi) AND p.upper_id > lo)
       OR EXISTS (SELECT FROM webhook.delivery_log_default d WHERE d.id >= lo AND d.id < hi) THEN
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
        NOT (e.status IN ('processed', 'stale')
             OR (e.status = 'queued'
                 AND NOT EXISTS (SELECT FROM webhook.inbox i
                                  WHERE i.delivery_id = e.claim_id
                                    AND i.provider = e.provider AND i.event_id = e.event_id
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
-- says how many are still queued.
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
       count(*) FILTER (WHERE s.status = 'queued')     AS queued
  FROM webhook.events e
  LEFT JOIN LATERAL (
       SELECT CASE WHEN pg_catalog.bool_and(i.status = 'stale') THEN 'stale'
                   WHEN pg_catalog.bool_and(i.status IN ('processed', 'stale')) THEN 'processed'
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
COMMENT ON VIEW webhook.provider_stats IS 'Per provider: events by status (inbox events by their consumers: processed by all, stale, dead, or still queued), retries spent, last event';

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
    RETURN fp;
END
$$;

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
        @extschema@.webhook_receive(text, jsonb, bytea, interval, boolean, text, boolean),
        @extschema@.webhook_receive(text, jsonb, text, interval, boolean, text, boolean),
        @extschema@.webhook_claim(text, text, text, jsonb, text, interval, boolean),
        @extschema@.webhook_claim(text, text, text, bytea, text, interval, boolean),
        @extschema@.webhook_claim(text, text, text, text, text, interval, boolean),
        @extschema@.webhook_enqueue(text, text, text, jsonb, text),
        @extschema@.webhook_enqueue(text, text, text, bytea, text),
        @extschema@.webhook_enqueue(text, text, text, text, text),
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
    'Grant a handler or worker role EXECUTE on webhook_receive, webhook_claim, webhook_enqueue, webhook_enqueue_batches, webhook_next, webhook_complete, webhook_fail (and their _batch forms), webhook_extend, webhook_outbound_key and the idempotency_ functions of its own API (begin, checkpoint, finish, fail, fingerprint); no table privilege';

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
        webhook.secret_usage, webhook.idempotency_keys, webhook.archive_partitions,
        webhook.app_scopes TO %s', role);
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
    'Grant an operator role the archive, the inbox, the watermarks, the idempotency keys, the application roles'' scopes, the views (secret usage by fingerprint included), webhook_requeue, webhook_requeue_dead, webhook_purge, webhook_create_partitions, webhook_reset_watermark, webhook_providers and idempotency_purge; never the secrets';

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
           -- Queued for the inbox: done when every consumer is; skipped
           -- when every consumer found it stale.
           WHEN l.claim_status::text = 'queued' THEN
               CASE
                   WHEN EXISTS (SELECT FROM webhook.inbox i
                                 WHERE i.delivery_id = l.id AND i.status = 'dead') THEN 'FAILED'
                   WHEN EXISTS (SELECT FROM webhook.inbox i
                                 WHERE i.delivery_id = l.id
                                   AND i.status::text NOT IN ('processed', 'stale')) THEN 'QUEUED'
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

-- A lease is a few index probes, but its generic plan is costed for whole
-- queues: past jit_above_cost, every call would compile it with LLVM
-- (most of a second) before leasing anything.
ALTER FUNCTION @extschema@.webhook_next(integer, text, text, text, interval) SET jit = off;

-- Last: whatever this script created gets the extension's privileges.
SELECT webhook._restrict_privileges();
