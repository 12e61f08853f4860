-- pg_webhook_inbox 0.2.0 → 0.3.0
--
-- What changes (CHANGELOG.md says why):
--   * The durable inbox: webhook.inbox (one row per queued event and
--     consumer), webhook.inbox_failures, webhook.inbox_stats;
--     webhook_enqueue and webhook_next; webhook_receive gains an inbox
--     argument, and providers an inbox mode and consumers.
--   * 'queued' is appended to webhook.event_status and webhook.claim_status.
--     A label added here cannot be used before this transaction commits,
--     so the views compare it as text (as a fresh install's do).
--   * webhook_fail gains retry_in and permanent; webhook_requeue gains
--     consumer and records every requeue in webhook.requeues, as does the
--     new bulk webhook_requeue_dead.
--   * webhook.dead_letters shows dead inbox events too (consumer appended);
--     webhook.deliveries says QUEUED; webhook_purge keeps every queued or
--     unfinished event's payload.
--   * Functions whose arguments change are created anew; the grants on the
--     old ones are carried over. Roles that could claim may enqueue and
--     lease; roles that could purge may bulk-requeue; roles that could read
--     the archive may read the inbox.
-- The library of 0.3.0 must be installed first (it still answers 0.2.0's
-- SQL until this script runs); run ALTER EXTENSION pg_webhook_inbox UPDATE
-- in every database right after.

-- Everything bound in this script is bound to pg_catalog (see schema.sql).
SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);

ALTER TYPE webhook.event_status ADD VALUE 'queued';
ALTER TYPE webhook.claim_status ADD VALUE 'queued';
COMMENT ON TYPE webhook.event_status IS 'Where an event is: processing, processed, failed (retried by its next delivery), dead (parked), queued (in the inbox)';
COMMENT ON COLUMN webhook.events.status IS 'processing (claimed, lease running), processed (done), failed (next delivery retries), dead (parked for an operator), queued (in the inbox: see webhook.inbox)';

------------------------------------------------------------------------------
-- The durable inbox. A delivery taken in inbox mode (webhook_receive with
-- inbox, or webhook_enqueue) is answered 2xx as soon as it is stored: its
-- event row says 'queued', and here it gets one row per consumer, which
-- workers lease with webhook_next and finish with webhook_complete or
-- webhook_fail. The payload is read from the archive row that brought
-- the event (delivery_id), never stored twice.
CREATE TYPE webhook.inbox_status AS ENUM ('ready', 'leased', 'processed', 'dead');
COMMENT ON TYPE webhook.inbox_status IS
    'Where a consumer is with a queued event: ready (or backing off until run_at), leased, processed, dead';

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
    CONSTRAINT inbox_pkey PRIMARY KEY (provider, event_id, consumer),
    CONSTRAINT inbox_claim_id_key UNIQUE (claim_id)
)
WITH (fillfactor = 80);
-- What webhook_next scans, in run order, kept to the rows not finished.
CREATE INDEX inbox_pending_idx ON webhook.inbox (consumer, run_at)
    WHERE status IN ('ready', 'leased');
CREATE INDEX inbox_dead_idx ON webhook.inbox (queued_at) WHERE status = 'dead';

COMMENT ON TABLE webhook.inbox IS
    'The durable inbox: one row per queued event and consumer, leased by webhook_next';
COMMENT ON COLUMN webhook.inbox.provider IS 'Provider name';
COMMENT ON COLUMN webhook.inbox.event_id IS 'The event''s id (its webhook.events row says queued)';
COMMENT ON COLUMN webhook.inbox.consumer IS 'Who processes it: default, or one of the provider''s consumers';
COMMENT ON COLUMN webhook.inbox.event_type IS 'The event type, for webhook_next''s filter';
COMMENT ON COLUMN webhook.inbox.status IS 'ready (now or at run_at), leased (until run_at), processed, dead (parked for an operator)';
COMMENT ON COLUMN webhook.inbox.run_at IS 'Ready: when the next attempt may start. Leased: when the lease runs out';
COMMENT ON COLUMN webhook.inbox.attempts IS 'Leases taken, the current one included';
COMMENT ON COLUMN webhook.inbox.claim_id IS 'The current or last lease''s id, as webhook_next returned it';
COMMENT ON COLUMN webhook.inbox.delivery_id IS 'The archive row holding the payload';
COMMENT ON COLUMN webhook.inbox.last_error IS 'The latest failure (at most 2 kB), or the lease that ran out';
COMMENT ON COLUMN webhook.inbox.result IS 'What webhook_complete stored';
COMMENT ON COLUMN webhook.inbox.requeues IS 'How many times an operator put it back';
COMMENT ON COLUMN webhook.inbox.queued_at IS 'When the event was queued';
COMMENT ON COLUMN webhook.inbox.processed_at IS 'When webhook_complete finished it';

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
    failed_at     timestamptz NOT NULL DEFAULT pg_catalog.now(),
    CONSTRAINT inbox_failures_pkey PRIMARY KEY (claim_id)
);
CREATE INDEX inbox_failures_event_idx ON webhook.inbox_failures (provider, event_id, consumer);

COMMENT ON TABLE webhook.inbox_failures IS 'Failed inbox attempts: webhook_fail''s message, or the lease that ran out';
COMMENT ON COLUMN webhook.inbox_failures.claim_id IS 'The lease that failed';
COMMENT ON COLUMN webhook.inbox_failures.provider IS 'Provider name';
COMMENT ON COLUMN webhook.inbox_failures.event_id IS 'The event''s id';
COMMENT ON COLUMN webhook.inbox_failures.consumer IS 'The consumer whose attempt failed';
COMMENT ON COLUMN webhook.inbox_failures.attempt IS 'Which attempt it was';
COMMENT ON COLUMN webhook.inbox_failures.error_message IS 'The webhook_fail message, or the lease that ran out';
COMMENT ON COLUMN webhook.inbox_failures.failed_at IS 'When it failed';

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

SELECT pg_catalog.pg_extension_config_dump('webhook.inbox', '');
SELECT pg_catalog.pg_extension_config_dump('webhook.inbox_failures', '');
SELECT pg_catalog.pg_extension_config_dump('webhook.requeues', '');

------------------------------------------------------------------------------
-- The archive says QUEUED.

CREATE OR REPLACE VIEW webhook.deliveries AS
SELECT l.id, l.provider, l.event_id, l.event_type, l.payload, l.raw_body, l.signature, l.headers,
       l.claim_status,
       CASE
           WHEN l.claim_status = 'rejected' THEN 'REJECTED'
           WHEN l.claim_status IN ('duplicate', 'in_progress', 'dead') THEN 'SKIPPED'
           -- Queued for the inbox: done when every consumer is.
           WHEN l.claim_status::text = 'queued' THEN
               CASE
                   WHEN EXISTS (SELECT FROM webhook.inbox i
                                 WHERE i.provider = l.provider AND i.event_id = l.event_id
                                   AND i.status = 'dead') THEN 'FAILED'
                   WHEN EXISTS (SELECT FROM webhook.inbox i
                                 WHERE i.provider = l.provider AND i.event_id = l.event_id
                                   AND i.status <> 'processed') THEN 'QUEUED'
                   ELSE 'PROCESSED'
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
-- Providers: inbox mode and consumers.

ALTER TABLE webhook.providers
    ADD COLUMN inbox boolean NOT NULL DEFAULT false,
    ADD COLUMN consumers text[] NOT NULL DEFAULT '{}'
        CONSTRAINT providers_consumers_check
        CHECK (pg_catalog.array_to_string(consumers, ',') ~ '^([a-z0-9][a-z0-9_.-]{0,63}(,|$))*$');
COMMENT ON COLUMN webhook.providers.inbox IS 'Inbox mode: webhook_receive queues each delivery and answers 2xx at once';
COMMENT ON COLUMN webhook.providers.consumers IS 'The inbox consumers each event is queued for; empty: default';

-- What anyone allowed to see the registry sees: no secrets.
CREATE OR REPLACE VIEW webhook.provider_summary AS
SELECT p.name, p.scheme, p.tolerance, p.event_id_from, p.event_type_from,
       count(s.fingerprint) FILTER (WHERE s.retired_at IS NULL)::int AS active_secrets,
       coalesce(array_agg(s.fingerprint ORDER BY s.added_at) FILTER (WHERE s.retired_at IS NULL), '{}')
           AS active_fingerprints,
       coalesce(array_agg(s.fingerprint ORDER BY s.added_at) FILTER (WHERE s.retired_at IS NOT NULL), '{}')
           AS retired_fingerprints,
       p.created_at, p.inbox, p.consumers
  FROM webhook.providers p
  LEFT JOIN webhook.provider_secrets s ON s.provider = p.name
 GROUP BY p.name;
COMMENT ON VIEW webhook.provider_summary IS 'The registry, secrets listed by fingerprint only';

------------------------------------------------------------------------------
-- Operations.

-- Events that failed webhook.max_attempts times (or for good) and wait for
-- an operator: claimed events, and each inbox consumer's dead events.
CREATE OR REPLACE VIEW webhook.dead_letters AS
SELECT provider, event_id, event_type, attempts, requeues, last_error, first_seen_at, claim_id,
       NULL::text AS consumer
  FROM webhook.events
 WHERE status = 'dead'
UNION ALL
SELECT provider, event_id, event_type, attempts, requeues, last_error, queued_at, claim_id, consumer
  FROM webhook.inbox
 WHERE status = 'dead';
COMMENT ON VIEW webhook.dead_letters IS 'Events that failed webhook.max_attempts times, claimed or queued (consumer), waiting for webhook_requeue';

-- The inbox per provider and consumer: ready now (a lease that ran out
-- makes its event ready again), scheduled (backing off), leased, dead, and
-- how long the longest-waiting ready event has been ready.
CREATE VIEW webhook.inbox_stats AS
SELECT provider, consumer,
       count(*) FILTER (WHERE status IN ('ready', 'leased') AND run_at <= now) AS ready,
       count(*) FILTER (WHERE status = 'ready' AND run_at > now) AS scheduled,
       count(*) FILTER (WHERE status = 'leased' AND run_at > now) AS leased,
       count(*) FILTER (WHERE status = 'dead') AS dead,
       max(now - run_at) FILTER (WHERE status IN ('ready', 'leased') AND run_at <= now)
           AS oldest_ready_age
  FROM (SELECT provider, consumer, status, run_at FROM webhook.inbox
         WHERE status IN ('ready', 'leased')
        UNION ALL
        SELECT provider, consumer, status, run_at FROM webhook.inbox
         WHERE status = 'dead') AS i,
       pg_catalog.clock_timestamp() AS now
 GROUP BY provider, consumer;
COMMENT ON VIEW webhook.inbox_stats IS
    'The inbox per provider and consumer: ready, scheduled (backing off), leased, dead, and the age of the oldest ready event';
-- Delete archive rows older than `older_than` whose event is processed (and
-- rejected deliveries, which have none), `batch_size` rows per statement.
-- A queued event counts as processed once every consumer has processed
-- it: until then its payload stays, since the workers read it from here.
-- Inbox rows processed before the cutoff go too, with their failures.
-- webhook.events is never touched: a replay after the purge is still a
-- duplicate. Returns the number of archive rows deleted. For a large
-- backlog, pass max_batches and call it repeatedly, each call its own
-- transaction.
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
                                     AND (e.status = 'processed'
                                          OR (e.status = 'queued'
                                              AND NOT EXISTS (SELECT FROM webhook.inbox i
                                                               WHERE i.provider = e.provider
                                                                 AND i.event_id = e.event_id
                                                                 AND i.status <> 'processed')))))
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
                      AND i.status = 'processed' AND i.processed_at < cutoff);
    DELETE FROM webhook.inbox i WHERE i.status = 'processed' AND i.processed_at < cutoff;
    RETURN deleted;
END
$$;
COMMENT ON FUNCTION @extschema@.webhook_purge(interval, integer, integer) IS
    'Delete archive rows older than older_than whose event is processed by everyone (and rejections), and old processed inbox rows; never touches webhook.events. Returns the archive rows deleted';

------------------------------------------------------------------------------
-- Roles.

-- Grant an application role exactly what a webhook handler and an inbox
-- worker need: EXECUTE on their functions. No table privilege at all.
CREATE OR REPLACE FUNCTION @extschema@.webhook_grant_app(role regrole)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    EXECUTE format('GRANT EXECUTE ON FUNCTION
        @extschema@.webhook_receive(text, jsonb, bytea, interval, boolean),
        @extschema@.webhook_receive(text, jsonb, text, interval, boolean),
        @extschema@.webhook_claim(text, text, text, jsonb, text, interval),
        @extschema@.webhook_claim(text, text, text, bytea, text, interval),
        @extschema@.webhook_claim(text, text, text, text, text, interval),
        @extschema@.webhook_enqueue(text, text, text, jsonb, text),
        @extschema@.webhook_enqueue(text, text, text, bytea, text),
        @extschema@.webhook_enqueue(text, text, text, text, text),
        @extschema@.webhook_next(integer, text, text, text, interval),
        @extschema@.webhook_complete(uuid, jsonb),
        @extschema@.webhook_fail(uuid, text, interval, boolean),
        @extschema@.webhook_extend(uuid, interval)
        TO %s', role);
END
$$;
COMMENT ON FUNCTION @extschema@.webhook_grant_app(regrole) IS
    'Grant a handler or worker role EXECUTE on webhook_receive, webhook_claim, webhook_enqueue, webhook_next, webhook_complete, webhook_fail, webhook_extend; no table privilege';

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
        webhook.requeues TO %s', role);
    EXECUTE format('GRANT EXECUTE ON FUNCTION
        @extschema@.webhook_requeue(text, text, text),
        @extschema@.webhook_requeue_dead(text, text, text, timestamptz, timestamptz, text),
        @extschema@.webhook_purge(interval, integer, integer),
        @extschema@.webhook_providers()
        TO %s', role);
END
$$;
COMMENT ON FUNCTION @extschema@.webhook_grant_operator(regrole) IS
    'Grant an operator role the archive, the inbox, the views, webhook_requeue, webhook_requeue_dead, webhook_purge and webhook_providers; never the secrets';

------------------------------------------------------------------------------
-- Functions whose arguments change. The old ones are renamed, the new ones
-- created, the old ones' grants carried over, and the old ones dropped.
-- (The 0.3.0 library keeps the C symbols the old ones name, for a
-- database between installing it and running this script.)

ALTER FUNCTION @extschema@.webhook_receive(text, jsonb, bytea, interval) RENAME TO webhook_receive_0_2_0;
ALTER FUNCTION @extschema@.webhook_receive(text, jsonb, text, interval) RENAME TO webhook_receive_0_2_0;
ALTER FUNCTION @extschema@.webhook_fail(uuid, text) RENAME TO webhook_fail_0_2_0;
ALTER FUNCTION @extschema@.webhook_requeue(text, text) RENAME TO webhook_requeue_0_2_0;
ALTER FUNCTION @extschema@.webhook_register_provider(text, text, text, interval, text, text)
    RENAME TO webhook_register_provider_0_2_0;

CREATE FUNCTION @extschema@."webhook_receive"(
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
AS 'MODULE_PATHNAME', 'receive_delivery_wrapper';

CREATE FUNCTION @extschema@."webhook_receive"(
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
AS 'MODULE_PATHNAME', 'receive_delivery_text_wrapper';

CREATE FUNCTION @extschema@."webhook_fail"(
	"id" uuid,
	"err" TEXT,
	"retry_in" interval DEFAULT NULL,
	"permanent" bool DEFAULT false
) RETURNS VOID
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'fail_attempt_wrapper';

CREATE FUNCTION @extschema@."webhook_requeue"(
	"provider" TEXT,
	"event_id" TEXT,
	"consumer" TEXT DEFAULT NULL
) RETURNS VOID
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'requeue_event_wrapper';

-- Create or update a provider. Arguments left NULL keep their current value,
-- or take the scheme's defaults for a new provider. The scheme defaults to
-- the name when the name is a known scheme or alias ('svix' and 'clerk'
-- mean 'standard'); it is stored under its canonical name.
--
-- inbox: webhook_receive queues the provider's deliveries for workers and
-- answers 2xx at once. A new GitHub provider is in inbox mode unless told
-- otherwise: GitHub never redelivers a delivery it was not answered 2xx
-- for, so any other answer loses the event. consumers: the inbox's
-- consumers of its events (none: 'default').
CREATE FUNCTION @extschema@.webhook_register_provider(
    name            text,
    secret          text     DEFAULT NULL,
    scheme          text     DEFAULT NULL,
    tolerance       interval DEFAULT NULL,
    event_id_from   text     DEFAULT NULL,
    event_type_from text     DEFAULT NULL,
    inbox           boolean  DEFAULT NULL,
    consumers       text[]   DEFAULT NULL
) RETURNS SETOF webhook.provider_summary
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p_name     text := lower(webhook_register_provider.name);
    existing   webhook.providers;
    v_scheme   text;
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

    INSERT INTO webhook.providers AS p
           (name, scheme, tolerance, event_id_from, event_type_from, inbox, consumers)
    VALUES (p_name,
            v_scheme,
            coalesce(webhook_register_provider.tolerance, existing.tolerance, known.tolerance),
            coalesce(webhook_register_provider.event_id_from, existing.event_id_from, known.event_id_from),
            coalesce(webhook_register_provider.event_type_from, existing.event_type_from, known.event_type_from),
            coalesce(webhook_register_provider.inbox, existing.inbox, known.scheme = 'github'),
            coalesce(webhook_register_provider.consumers, existing.consumers, '{}'))
    ON CONFLICT ON CONSTRAINT providers_pkey DO UPDATE
       SET scheme = excluded.scheme, tolerance = excluded.tolerance,
           event_id_from = excluded.event_id_from, event_type_from = excluded.event_type_from,
           inbox = excluded.inbox, consumers = excluded.consumers;

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
                ELSE failed_check
            END
            USING ERRCODE = 'check_violation',
                  DETAIL = SQLERRM,
                  HINT = 'Names (and consumers) are lower-case [a-z0-9_.-]; sources are ''header:<name>'' or ''body:<dotted.path>''; the tolerance is positive.';
END
$$;
COMMENT ON FUNCTION @extschema@.webhook_register_provider(text, text, text, interval, text, text, boolean, text[]) IS
    'Create or update a provider: scheme (default: its name or alias), tolerance, where the event id and type are, inbox mode and consumers, and optionally a secret';

DO $$
DECLARE
    pair   record;
    grant_ record;
BEGIN
    FOR pair IN
        SELECT o.oid AS old, n.oid AS new
          FROM pg_catalog.pg_proc o
          JOIN pg_catalog.pg_proc n
            ON n.pronamespace = o.pronamespace
           AND n.proname || '_0_2_0' = o.proname
           -- The new one takes the old arguments first, then new ones.
           AND (n.proargtypes::pg_catalog.oid[])[0:o.pronargs - 1] = (o.proargtypes::pg_catalog.oid[])[0:o.pronargs - 1]
           AND n.pronargs > o.pronargs
         WHERE o.proname LIKE 'webhook\_%\_0\_2\_0'
    LOOP
        -- The rule first (PUBLIC may not execute it), then the DBA's grants.
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

DROP FUNCTION @extschema@.webhook_receive_0_2_0(text, jsonb, bytea, interval);
DROP FUNCTION @extschema@.webhook_receive_0_2_0(text, jsonb, text, interval);
DROP FUNCTION @extschema@.webhook_fail_0_2_0(uuid, text);
DROP FUNCTION @extschema@.webhook_requeue_0_2_0(text, text);
DROP FUNCTION @extschema@.webhook_register_provider_0_2_0(text, text, text, interval, text, text);

------------------------------------------------------------------------------
-- New functions.

CREATE FUNCTION @extschema@."webhook_enqueue"(
	"provider" TEXT,
	"event_id" TEXT,
	"event_type" TEXT,
	"payload" jsonb,
	"signature" TEXT DEFAULT NULL
) RETURNS TABLE (
	"id" uuid,
	"queued" bool,
	"status" TEXT
)
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'webhook_enqueue_wrapper';

CREATE FUNCTION @extschema@."webhook_enqueue"(
	"provider" TEXT,
	"event_id" TEXT,
	"event_type" TEXT,
	"body" bytea,
	"signature" TEXT DEFAULT NULL
) RETURNS TABLE (
	"id" uuid,
	"queued" bool,
	"status" TEXT
)
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'webhook_enqueue_raw_wrapper';

CREATE FUNCTION @extschema@."webhook_enqueue"(
	"provider" TEXT,
	"event_id" TEXT,
	"event_type" TEXT,
	"body" TEXT,
	"signature" TEXT DEFAULT NULL
) RETURNS TABLE (
	"id" uuid,
	"queued" bool,
	"status" TEXT
)
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'webhook_enqueue_text_wrapper';

CREATE FUNCTION @extschema@."webhook_next"(
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
AS 'MODULE_PATHNAME', 'webhook_next_wrapper';

CREATE FUNCTION @extschema@."webhook_requeue_dead"(
	"provider" TEXT DEFAULT NULL,
	"event_type" TEXT DEFAULT NULL,
	"error_like" TEXT DEFAULT NULL,
	"received_after" timestamp with time zone DEFAULT NULL,
	"received_before" timestamp with time zone DEFAULT NULL,
	"consumer" TEXT DEFAULT NULL
) RETURNS bigint
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'webhook_requeue_dead_wrapper';

-- Who may already do the like may do the new: roles that may claim may
-- enqueue and lease, roles that may purge may requeue in bulk, roles that
-- may read the archive may read the inbox. Then initial privileges as a
-- fresh install records them, as above.
REVOKE ALL ON webhook.inbox, webhook.inbox_failures, webhook.inbox_stats, webhook.requeues FROM PUBLIC;
DO $$
DECLARE
    grant_ record;
BEGIN
    PERFORM webhook._restrict_privileges();
    FOR grant_ IN
        SELECT 'EXECUTE' AS privilege, f.object AS object, pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(a.grantee)) AS grantee
          FROM pg_catalog.pg_proc p
         CROSS JOIN LATERAL pg_catalog.aclexplode(p.proacl) a
         CROSS JOIN (VALUES ('FUNCTION @extschema@.webhook_enqueue(text, text, text, jsonb, text)'),
                            ('FUNCTION @extschema@.webhook_enqueue(text, text, text, bytea, text)'),
                            ('FUNCTION @extschema@.webhook_enqueue(text, text, text, text, text)'),
                            ('FUNCTION @extschema@.webhook_next(integer, text, text, text, interval)')) AS f(object)
         WHERE p.oid = '@extschema@.webhook_claim(text, text, text, jsonb, text, interval)'::pg_catalog.regprocedure
           AND a.privilege_type = 'EXECUTE' AND a.grantee NOT IN (0, p.proowner)
        UNION ALL
        SELECT 'EXECUTE', 'FUNCTION @extschema@.webhook_requeue_dead(text, text, text, timestamptz, timestamptz, text)',
               pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(a.grantee))
          FROM pg_catalog.pg_proc p
         CROSS JOIN LATERAL pg_catalog.aclexplode(p.proacl) a
         WHERE p.oid = '@extschema@.webhook_purge(interval, integer, integer)'::pg_catalog.regprocedure
           AND a.privilege_type = 'EXECUTE' AND a.grantee NOT IN (0, p.proowner)
        UNION ALL
        SELECT 'SELECT', 'TABLE ' || t.object, pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(a.grantee))
          FROM pg_catalog.pg_class c
         CROSS JOIN LATERAL pg_catalog.aclexplode(c.relacl) a
         CROSS JOIN (VALUES ('webhook.inbox'), ('webhook.inbox_failures'), ('webhook.inbox_stats'),
                            ('webhook.requeues')) AS t(object)
         WHERE c.oid = 'webhook.delivery_log'::pg_catalog.regclass
           AND a.privilege_type = 'SELECT' AND a.grantee NOT IN (0, c.relowner)
    LOOP
        EXECUTE pg_catalog.format('GRANT %s ON %s TO %s', grant_.privilege, grant_.object, grant_.grantee);
    END LOOP;
    UPDATE pg_catalog.pg_init_privs i
       SET initprivs = ARRAY[pg_catalog.makeaclitem(p.proowner, p.proowner, 'EXECUTE', false)]
      FROM pg_catalog.pg_proc p
     WHERE p.oid IN ('@extschema@.webhook_enqueue(text, text, text, jsonb, text)'::pg_catalog.regprocedure,
                     '@extschema@.webhook_enqueue(text, text, text, bytea, text)'::pg_catalog.regprocedure,
                     '@extschema@.webhook_enqueue(text, text, text, text, text)'::pg_catalog.regprocedure,
                     '@extschema@.webhook_next(integer, text, text, text, interval)'::pg_catalog.regprocedure,
                     '@extschema@.webhook_requeue_dead(text, text, text, timestamptz, timestamptz, text)'::pg_catalog.regprocedure)
       AND i.objoid = p.oid AND i.classoid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND i.objsubid = 0;
    UPDATE pg_catalog.pg_init_privs i
       SET initprivs = pg_catalog.acldefault('r', c.relowner)
      FROM pg_catalog.pg_class c
     WHERE c.oid IN ('webhook.inbox'::pg_catalog.regclass, 'webhook.inbox_failures'::pg_catalog.regclass,
                     'webhook.inbox_stats'::pg_catalog.regclass, 'webhook.requeues'::pg_catalog.regclass)
       AND i.objoid = c.oid AND i.classoid = 'pg_catalog.pg_class'::pg_catalog.regclass AND i.objsubid = 0;
END
$$;

------------------------------------------------------------------------------
-- Comments on the functions written in Rust (finalize.sql).

COMMENT ON FUNCTION @extschema@.webhook_receive(text, jsonb, bytea, interval, boolean) IS
    'Verify a delivery with its provider''s registered scheme and secrets, read its event id and type, claim it or queue it (inbox), and say what to answer (http_status)';
COMMENT ON FUNCTION @extschema@.webhook_receive(text, jsonb, text, interval, boolean) IS
    'webhook_receive for a body passed as text';
COMMENT ON FUNCTION @extschema@.webhook_fail(uuid, text, interval, boolean) IS
    'Record a failed attempt: a claimed event''s next delivery is a retry, a leased one is ready again after retry_in or the backoff; dead after webhook.max_attempts, or at once if permanent';
COMMENT ON FUNCTION @extschema@.webhook_requeue(text, text, text) IS
    'For operators: put a dead or failed event (a queued event''s dead consumers) back with a fresh attempt budget, recorded in webhook.requeues';
COMMENT ON FUNCTION @extschema@.webhook_requeue_dead(text, text, text, timestamptz, timestamptz, text) IS
    'For operators: requeue every dead letter matching provider, event type, error (ILIKE), arrival time and consumer; returns how many';
COMMENT ON FUNCTION @extschema@.webhook_enqueue(text, text, text, jsonb, text) IS
    'Queue a delivery the caller verified (payload as jsonb) for inbox workers: queued (new) or duplicate; answer 2xx either way';
COMMENT ON FUNCTION @extschema@.webhook_enqueue(text, text, text, bytea, text) IS
    'webhook_enqueue with the raw body, archived byte for byte';
COMMENT ON FUNCTION @extschema@.webhook_enqueue(text, text, text, text, text) IS
    'webhook_enqueue with the raw body passed as text';
COMMENT ON FUNCTION @extschema@.webhook_next(integer, text, text, text, interval) IS
    'Lease up to batch ready inbox events of a consumer, never waiting on another worker; finish each with webhook_complete or webhook_fail';

------------------------------------------------------------------------------

SELECT webhook._restrict_privileges();

SELECT pg_catalog.set_config('search_path', '@extschema@, pg_temp', true);
