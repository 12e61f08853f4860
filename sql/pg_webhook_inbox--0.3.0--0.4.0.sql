-- pg_webhook_inbox 0.3.0 → 0.4.0
--
-- What changes (CHANGELOG.md says why):
--   * Ordering: providers gain entity_key_from, order_from, ties and fifo
--     (webhook_register_provider gains ordering and those four);
--     webhook.watermarks keeps, per entity and consumer, the order value of
--     the newest event processed; events and inbox rows keep their entity
--     and order value; webhook.blocked_entities and webhook_reset_watermark
--     are new; webhook_schemes() appends ordering's presets.
--   * 'stale' is appended to webhook.event_status, webhook.claim_status and
--     webhook.inbox_status. A label added here cannot be used before this
--     transaction commits, so the views compare it as text (as a fresh
--     install's do).
--   * webhook.deliveries says SKIPPED for stale deliveries; provider_stats
--     appends a stale count; webhook_purge treats stale as finished.
--   * webhook_receive, webhook_complete and webhook_next keep their
--     arguments and move to the entry points that know ordering.
--   * Roles that could read the archive may read the watermarks and
--     blocked entities; roles that could purge may reset watermarks.
-- The library of 0.4.0 must be installed first (it still answers 0.3.0's
-- SQL until this script runs); run ALTER EXTENSION pg_webhook_inbox UPDATE
-- in every database right after.

-- Everything bound in this script is bound to pg_catalog (see schema.sql).
SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);

ALTER TYPE webhook.event_status ADD VALUE 'stale';
ALTER TYPE webhook.claim_status ADD VALUE 'stale';
ALTER TYPE webhook.inbox_status ADD VALUE 'stale';
COMMENT ON TYPE webhook.event_status IS 'Where an event is: processing, processed, failed (retried by its next delivery), dead (parked), queued (in the inbox), stale (skipped: older than its entity''s watermark)';
COMMENT ON TYPE webhook.inbox_status IS
    'Where a consumer is with a queued event: ready (or backing off until run_at), leased, processed, dead, stale (skipped: older than its entity''s watermark)';

------------------------------------------------------------------------------
-- Events, inbox rows and archive rows of ordered events.

ALTER TABLE webhook.events
    ADD COLUMN entity_key text,
    ADD COLUMN order_value numeric;
COMMENT ON COLUMN webhook.events.status IS 'processing (claimed, lease running), processed (done), failed (next delivery retries), dead (parked for an operator), queued (in the inbox: see webhook.inbox), stale (skipped: a newer event of its entity was processed)';
COMMENT ON COLUMN webhook.events.entity_key IS 'Ordering: the entity the event is about (from the signed body); NULL when unordered';
COMMENT ON COLUMN webhook.events.order_value IS 'Ordering: the event''s order value, a number or a timestamp as seconds since the Unix epoch';

ALTER TABLE webhook.inbox
    ADD COLUMN entity_key text,
    ADD COLUMN order_value numeric;
-- Each entity's line of unfinished events, in order: what per-entity FIFO
-- looks up to find whether an event has an earlier one waiting.
CREATE INDEX inbox_entity_line_idx ON webhook.inbox (provider, consumer, entity_key, order_value)
    WHERE entity_key IS NOT NULL AND status IN ('ready', 'leased');
COMMENT ON COLUMN webhook.inbox.status IS 'ready (now or at run_at), leased (until run_at), processed, dead (parked for an operator), stale (skipped: older than its entity''s watermark)';
COMMENT ON COLUMN webhook.inbox.processed_at IS 'When webhook_complete finished it, or when it was skipped as stale';
COMMENT ON COLUMN webhook.inbox.entity_key IS 'Ordering: the entity the event is about; NULL when unordered';
COMMENT ON COLUMN webhook.inbox.order_value IS 'Ordering: the event''s order value';

COMMENT ON COLUMN webhook.delivery_log.claim_status IS 'What the delivery was answered: claimed, retry, duplicate, in_progress, dead, rejected, queued or stale';
COMMENT ON COLUMN webhook.delivery_log.reject_reason IS 'For rejections: why (bad_signature, replayed, timestamp_too_old, ...); for stale deliveries: which watermark they were older than';

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

SELECT pg_catalog.pg_extension_config_dump('webhook.watermarks', '');

-- The archive says SKIPPED for stale deliveries.
CREATE OR REPLACE VIEW webhook.deliveries AS
SELECT l.id, l.provider, l.event_id, l.event_type, l.payload, l.raw_body, l.signature, l.headers,
       l.claim_status,
       CASE
           WHEN l.claim_status = 'rejected' THEN 'REJECTED'
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

COMMENT ON VIEW webhook.deliveries IS
    'The archive: one row per delivery with processing_status PENDING, QUEUED, PROCESSED, SKIPPED, FAILED or REJECTED';

------------------------------------------------------------------------------
-- Providers: ordering.

ALTER TABLE webhook.providers
    ADD COLUMN entity_key_from text
        CONSTRAINT providers_entity_key_from_check
        CHECK (entity_key_from ~ '^body:[^|]+(\|body:[^|]+)*$'),
    ADD COLUMN order_from text
        CONSTRAINT providers_order_from_check
        CHECK (order_from ~ '^body:[^|]+(\|body:[^|]+)*$'),
    ADD COLUMN ties text NOT NULL DEFAULT 'process'
        CONSTRAINT providers_ties_check CHECK (ties IN ('process', 'stale')),
    ADD COLUMN fifo boolean NOT NULL DEFAULT false,
    ADD CONSTRAINT providers_ordering_check CHECK ((entity_key_from IS NULL) = (order_from IS NULL)),
    ADD CONSTRAINT providers_fifo_check CHECK (NOT fifo OR entity_key_from IS NOT NULL);
COMMENT ON COLUMN webhook.providers.entity_key_from IS 'Ordering: where the entity an event is about is, body:<dotted.path> alternatives joined by |; NULL: unordered';
COMMENT ON COLUMN webhook.providers.order_from IS 'Ordering: where the event''s order value (number or RFC 3339 timestamp) is, in the same form';
COMMENT ON COLUMN webhook.providers.ties IS 'Ordering: an event as new as its entity''s watermark is processed (process) or skipped (stale)';
COMMENT ON COLUMN webhook.providers.fifo IS 'Ordering in the inbox: an event is not leased while an earlier one of its entity is leased or backing off';

-- What anyone allowed to see the registry sees: no secrets.
CREATE OR REPLACE VIEW webhook.provider_summary AS
SELECT p.name, p.scheme, p.tolerance, p.event_id_from, p.event_type_from,
       count(s.fingerprint) FILTER (WHERE s.retired_at IS NULL)::int AS active_secrets,
       coalesce(array_agg(s.fingerprint ORDER BY s.added_at) FILTER (WHERE s.retired_at IS NULL), '{}')
           AS active_fingerprints,
       coalesce(array_agg(s.fingerprint ORDER BY s.added_at) FILTER (WHERE s.retired_at IS NOT NULL), '{}')
           AS retired_fingerprints,
       p.created_at, p.inbox, p.consumers, p.entity_key_from, p.order_from, p.ties, p.fifo
  FROM webhook.providers p
  LEFT JOIN webhook.provider_secrets s ON s.provider = p.name
 GROUP BY p.name;
COMMENT ON VIEW webhook.provider_summary IS 'The registry, secrets listed by fingerprint only';

-- The presets webhook_register_provider reads: two columns appended.
DROP FUNCTION @extschema@.webhook_schemes();
CREATE OR REPLACE FUNCTION @extschema@."webhook_schemes"() RETURNS TABLE (
	"scheme" TEXT,
	"aliases" TEXT[],
	"event_id_from" TEXT,
	"event_type_from" TEXT,
	"event_id_signed" bool,
	"event_type_signed" bool,
	"tolerance" interval,
	"signs" TEXT,
	"entity_key_from" TEXT,
	"order_from" TEXT
)
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'scheme_catalog_wrapper';
COMMENT ON FUNCTION @extschema@.webhook_schemes() IS
    'The signature schemes, their aliases, and the registry defaults each gives a provider, ordering''s presets included';

-- webhook_register_provider gains ordering, entity_key_from, order_from,
-- ties and fifo: the old one is renamed, the new one created, the old
-- one's grants carried over, and the old one dropped.
ALTER FUNCTION @extschema@.webhook_register_provider(text, text, text, interval, text, text, boolean, text[])
    RENAME TO webhook_register_provider_0_3_0;

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
    fifo            boolean  DEFAULT NULL
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
    IF known.scheme = 'hmac' THEN
        -- The generic form keeps its options; webhook_verify checks them.
        BEGIN
            PERFORM @extschema@.webhook_verify(v_scheme, '{}'::jsonb, ''::bytea, '{}'::text[]);
        EXCEPTION WHEN syntax_error THEN
            RAISE EXCEPTION 'webhook_register_provider: argument "scheme": invalid scheme "%"', v_scheme
                USING ERRCODE = 'syntax_error',
                      HINT = 'The generic form is hmac;header=<name>[;algorithm=sha256|sha1|sha512][;encoding=hex|base64][;prefix=<text>].';
        END;
    ELSE
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
COMMENT ON FUNCTION @extschema@.webhook_register_provider(text, text, text, interval, text, text, boolean, text[], boolean, text, text, text, boolean) IS
    'Create or update a provider: scheme (default: its name or alias), tolerance, where the event id and type are, inbox mode and consumers, ordering (entity key, order value, ties, FIFO), and optionally a secret';

DO $$
DECLARE
    grant_ record;
    new_ pg_catalog.regprocedure :=
        '@extschema@.webhook_register_provider(text, text, text, interval, text, text, boolean, text[], boolean, text, text, text, boolean)';
BEGIN
    -- The rule first (PUBLIC may not execute it), then the DBA's grants.
    EXECUTE pg_catalog.format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', new_);
    FOR grant_ IN
        SELECT a.privilege_type,
               CASE WHEN a.grantee = 0 THEN 'PUBLIC'
                    ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(a.grantee)) END AS grantee
          FROM pg_catalog.pg_proc p
         CROSS JOIN LATERAL pg_catalog.aclexplode(p.proacl) a
         WHERE p.oid = '@extschema@.webhook_register_provider_0_3_0(text, text, text, interval, text, text, boolean, text[])'::pg_catalog.regprocedure
           AND a.grantee <> p.proowner
    LOOP
        EXECUTE pg_catalog.format('GRANT %s ON FUNCTION %s TO %s', grant_.privilege_type, new_, grant_.grantee);
    END LOOP;
    -- Initial privileges as a fresh install records them (the owner
    -- alone): a GRANT in an extension script would record the DBA's
    -- grants as the extension's own, and pg_dump would leave them out.
    UPDATE pg_catalog.pg_init_privs i
       SET initprivs = ARRAY[pg_catalog.makeaclitem(p.proowner, p.proowner, 'EXECUTE', false)]
      FROM pg_catalog.pg_proc p
     WHERE p.oid = new_ AND i.objoid = p.oid
       AND i.classoid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND i.objsubid = 0;
END
$$;
DROP FUNCTION @extschema@.webhook_register_provider_0_3_0(text, text, text, interval, text, text, boolean, text[]);

------------------------------------------------------------------------------
-- Operations.

-- Per provider: events by status, retries spent, last activity.
CREATE OR REPLACE VIEW webhook.provider_stats AS
SELECT provider,
       count(*) AS events,
       count(*) FILTER (WHERE status = 'processed')  AS processed,
       count(*) FILTER (WHERE status = 'processing') AS processing,
       count(*) FILTER (WHERE status = 'failed')     AS failed,
       count(*) FILTER (WHERE status = 'dead')       AS dead,
       coalesce(sum(attempts - 1) FILTER (WHERE attempts > 1), 0) AS retries,
       max(first_seen_at) AS last_event_at,
       count(*) FILTER (WHERE status::text = 'stale') AS stale
  FROM webhook.events
 GROUP BY provider;
COMMENT ON VIEW webhook.provider_stats IS 'Per provider: events by status (stale: skipped by ordering), retries spent, last event';

CREATE OR REPLACE FUNCTION @extschema@.webhook_purge(
    older_than  interval DEFAULT '90 days',
    batch_size  integer  DEFAULT 10000,
    max_batches integer  DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    cutoff  timestamptz;
    deleted bigint := 0;
    batch   bigint;
    batches integer := 0;
BEGIN
    IF older_than IS NULL OR older_than <= interval '0' THEN
        RAISE EXCEPTION 'webhook_purge: argument "older_than" must be a positive interval'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF batch_size IS NULL OR batch_size < 1 THEN
        RAISE EXCEPTION 'webhook_purge: argument "batch_size" must be at least 1'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    cutoff := now() - older_than;
    LOOP
        -- Failure records go with their deliveries (ON DELETE CASCADE).
        DELETE FROM webhook.delivery_log
         WHERE ctid = ANY (ARRAY(
               SELECT l.ctid
                 FROM webhook.delivery_log l
                WHERE l.created_at < cutoff
                  AND (l.claim_status = 'rejected'
                       OR EXISTS (SELECT FROM webhook.events e
                                   WHERE e.provider = l.provider AND e.event_id = l.event_id
                                     AND (e.status IN ('processed', 'stale')
                                          OR (e.status = 'queued'
                                              AND NOT EXISTS (SELECT FROM webhook.inbox i
                                                               WHERE i.provider = e.provider
                                                                 AND i.event_id = e.event_id
                                                                 AND i.status NOT IN ('processed', 'stale'))))))
                LIMIT batch_size));
        GET DIAGNOSTICS batch = ROW_COUNT;
        deleted := deleted + batch;
        batches := batches + 1;
        EXIT WHEN batch < batch_size OR batches >= coalesce(max_batches, batches + 1);
    END LOOP;
    DELETE FROM webhook.inbox_failures f
     WHERE f.failed_at < cutoff
       AND EXISTS (SELECT FROM webhook.inbox i
                    WHERE (i.provider, i.event_id, i.consumer) = (f.provider, f.event_id, f.consumer)
                      AND i.status IN ('processed', 'stale') AND i.processed_at < cutoff);
    DELETE FROM webhook.inbox i WHERE i.status IN ('processed', 'stale') AND i.processed_at < cutoff;
    RETURN deleted;
END
$$;
COMMENT ON FUNCTION @extschema@.webhook_purge(interval, integer, integer) IS
    'Delete archive rows older than older_than whose event is processed by everyone (and rejections), and old processed inbox rows; never touches webhook.events. Returns the archive rows deleted';

-- Ordering in the inbox: entities whose line of events is held up, and
-- why. The head (the earliest unfinished event) is leased, its lease ran
-- out and it waits to be leased again, or it failed and backs off;
-- `waiting` events of the entity queue behind it. Only providers
-- registered with fifo hold events back.
CREATE VIEW webhook.blocked_entities AS
SELECT i.provider, i.consumer, i.entity_key,
       i.event_id AS head_event_id, i.order_value AS head_order_value,
       CASE WHEN i.status = 'leased' AND i.run_at > now THEN 'leased'
            WHEN i.status = 'leased' THEN 'lease_expired'
            ELSE 'backing_off'
       END AS reason,
       i.run_at AS until, i.attempts, i.last_error,
       (SELECT count(*) FROM webhook.inbox j
         WHERE j.provider = i.provider AND j.consumer = i.consumer AND j.entity_key = i.entity_key
           AND j.status IN ('ready', 'leased')
           AND (j.order_value, j.queued_at, j.event_id) > (i.order_value, i.queued_at, i.event_id)) AS waiting
  FROM webhook.inbox i
  JOIN webhook.providers p ON p.name = i.provider AND p.fifo,
       pg_catalog.clock_timestamp() AS now
 WHERE i.entity_key IS NOT NULL AND i.status IN ('ready', 'leased')
   AND (i.status = 'leased' OR i.run_at > now)
   AND NOT EXISTS (SELECT FROM webhook.inbox j
                    WHERE j.provider = i.provider AND j.consumer = i.consumer AND j.entity_key = i.entity_key
                      AND j.status IN ('ready', 'leased')
                      AND (j.order_value, j.queued_at, j.event_id) < (i.order_value, i.queued_at, i.event_id))
   AND EXISTS (SELECT FROM webhook.inbox j
                WHERE j.provider = i.provider AND j.consumer = i.consumer AND j.entity_key = i.entity_key
                  AND j.status IN ('ready', 'leased')
                  AND (j.order_value, j.queued_at, j.event_id) > (i.order_value, i.queued_at, i.event_id));
COMMENT ON VIEW webhook.blocked_entities IS
    'Inbox FIFO: entities whose earliest unfinished event is leased or backing off, and how many events wait behind it';

-- Forget an entity's watermark (of one consumer, or of all): its next
-- event is processed whatever its order value, and moves the watermark
-- again. For an entity whose state was repaired by hand, or a watermark
-- set by a bad order value. Events already skipped as stale stay skipped.
-- Returns how many watermarks were removed.
CREATE FUNCTION @extschema@.webhook_reset_watermark(
    provider   text,
    entity_key text,
    consumer   text DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    removed bigint;
BEGIN
    IF webhook_reset_watermark.provider IS NULL THEN
        RAISE EXCEPTION 'webhook_reset_watermark: argument "provider" must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF webhook_reset_watermark.entity_key IS NULL THEN
        RAISE EXCEPTION 'webhook_reset_watermark: argument "entity_key" must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    DELETE FROM webhook.watermarks w
     WHERE w.provider = webhook_reset_watermark.provider
       AND w.entity_key = webhook_reset_watermark.entity_key
       AND (webhook_reset_watermark.consumer IS NULL OR w.consumer = webhook_reset_watermark.consumer);
    GET DIAGNOSTICS removed = ROW_COUNT;
    RETURN removed;
END
$$;
COMMENT ON FUNCTION @extschema@.webhook_reset_watermark(text, text, text) IS
    'For operators: forget an entity''s ordering watermark (one consumer''s, or all); returns how many were removed';

------------------------------------------------------------------------------
-- Roles.

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
        webhook.requeues, webhook.watermarks, webhook.blocked_entities TO %s', role);
    EXECUTE format('GRANT EXECUTE ON FUNCTION
        @extschema@.webhook_requeue(text, text, text),
        @extschema@.webhook_requeue_dead(text, text, text, timestamptz, timestamptz, text),
        @extschema@.webhook_purge(interval, integer, integer),
        @extschema@.webhook_reset_watermark(text, text, text),
        @extschema@.webhook_providers()
        TO %s', role);
END
$$;
COMMENT ON FUNCTION @extschema@.webhook_grant_operator(regrole) IS
    'Grant an operator role the archive, the inbox, the watermarks, the views, webhook_requeue, webhook_requeue_dead, webhook_purge, webhook_reset_watermark and webhook_providers; never the secrets';

-- Who may already do the like may do the new: roles that may read the
-- archive may read the watermarks and blocked entities, roles that may
-- purge may reset watermarks. Then initial privileges as a fresh install
-- records them.
REVOKE ALL ON webhook.watermarks, webhook.blocked_entities FROM PUBLIC;
DO $$
DECLARE
    grant_ record;
BEGIN
    PERFORM webhook._restrict_privileges();
    FOR grant_ IN
        SELECT 'EXECUTE' AS privilege, 'FUNCTION @extschema@.webhook_reset_watermark(text, text, text)' AS object,
               pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(a.grantee)) AS grantee
          FROM pg_catalog.pg_proc p
         CROSS JOIN LATERAL pg_catalog.aclexplode(p.proacl) a
         WHERE p.oid = '@extschema@.webhook_purge(interval, integer, integer)'::pg_catalog.regprocedure
           AND a.privilege_type = 'EXECUTE' AND a.grantee NOT IN (0, p.proowner)
        UNION ALL
        SELECT 'SELECT', 'TABLE ' || t.object, pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(a.grantee))
          FROM pg_catalog.pg_class c
         CROSS JOIN LATERAL pg_catalog.aclexplode(c.relacl) a
         CROSS JOIN (VALUES ('webhook.watermarks'), ('webhook.blocked_entities')) AS t(object)
         WHERE c.oid = 'webhook.delivery_log'::pg_catalog.regclass
           AND a.privilege_type = 'SELECT' AND a.grantee NOT IN (0, c.relowner)
    LOOP
        EXECUTE pg_catalog.format('GRANT %s ON %s TO %s', grant_.privilege, grant_.object, grant_.grantee);
    END LOOP;
    UPDATE pg_catalog.pg_init_privs i
       SET initprivs = ARRAY[pg_catalog.makeaclitem(p.proowner, p.proowner, 'EXECUTE', false)]
      FROM pg_catalog.pg_proc p
     WHERE p.oid = '@extschema@.webhook_reset_watermark(text, text, text)'::pg_catalog.regprocedure
       AND i.objoid = p.oid AND i.classoid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND i.objsubid = 0;
    UPDATE pg_catalog.pg_init_privs i
       SET initprivs = pg_catalog.acldefault('r', c.relowner)
      FROM pg_catalog.pg_class c
     WHERE c.oid IN ('webhook.watermarks'::pg_catalog.regclass, 'webhook.blocked_entities'::pg_catalog.regclass)
       AND i.objoid = c.oid AND i.classoid = 'pg_catalog.pg_class'::pg_catalog.regclass AND i.objsubid = 0;
END
$$;

------------------------------------------------------------------------------
-- The functions written in Rust whose behaviour changes: same arguments,
-- the entry points that know ordering. Their grants stay.

CREATE OR REPLACE FUNCTION @extschema@."webhook_receive"(
	"provider" TEXT,
	"headers" jsonb,
	"body" bytea,
	"lease" interval DEFAULT NULL,
	"inbox" bool DEFAULT NULL
) RETURNS TABLE (
	"id" uuid,
	"claimed" bool,
	"status" TEXT,
	"attempts" INT,
	"result" jsonb,
	"http_status" INT,
	"reason" TEXT,
	"event_id" TEXT,
	"event_type" TEXT,
	"event_type_signed" bool
)
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'receive_body_wrapper';

CREATE OR REPLACE FUNCTION @extschema@."webhook_receive"(
	"provider" TEXT,
	"headers" jsonb,
	"body" TEXT,
	"lease" interval DEFAULT NULL,
	"inbox" bool DEFAULT NULL
) RETURNS TABLE (
	"id" uuid,
	"claimed" bool,
	"status" TEXT,
	"attempts" INT,
	"result" jsonb,
	"http_status" INT,
	"reason" TEXT,
	"event_id" TEXT,
	"event_type" TEXT,
	"event_type_signed" bool
)
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'receive_body_text_wrapper';

CREATE OR REPLACE FUNCTION @extschema@."webhook_complete"(
	"id" uuid,
	"result" jsonb DEFAULT NULL
) RETURNS VOID
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'complete_event_wrapper';

CREATE OR REPLACE FUNCTION @extschema@."webhook_next"(
	"batch" INT DEFAULT 1,
	"consumer" TEXT DEFAULT 'default',
	"provider" TEXT DEFAULT NULL,
	"event_type" TEXT DEFAULT NULL,
	"lease" interval DEFAULT NULL
) RETURNS TABLE (
	"id" uuid,
	"provider" TEXT,
	"event_id" TEXT,
	"event_type" TEXT,
	"payload" jsonb,
	"attempts" INT,
	"consumer" TEXT,
	"delivery_id" uuid,
	"queued_at" timestamp with time zone,
	"lease_expires_at" timestamp with time zone
)
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'lease_next_wrapper';

COMMENT ON FUNCTION @extschema@.webhook_complete(uuid, jsonb) IS
    'Mark a claimed delivery''s event (or a lease''s inbox row) processed, in the transaction of its work; result is returned to later duplicates; an ordered event moves its entity''s watermark';
COMMENT ON FUNCTION @extschema@.webhook_next(integer, text, text, text, interval) IS
    'Lease up to batch ready inbox events of a consumer, never waiting on another worker (stale ordered events are parked, FIFO entities wait their turn); finish each with webhook_complete or webhook_fail';

------------------------------------------------------------------------------

SELECT webhook._restrict_privileges();

SELECT pg_catalog.set_config('search_path', '@extschema@, pg_temp', true);
