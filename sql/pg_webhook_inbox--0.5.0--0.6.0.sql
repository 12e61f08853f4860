-- pg_webhook_inbox 0.5.0 → 0.6.0
--
-- What changes (CHANGELOG.md says why):
--   * webhook_outbound_key(id, operation) and (provider, event_id,
--     operation): a stable idempotency key for an external call made
--     while processing an event, the same on every attempt.
--   * Idempotency keys for the application's own API: the table
--     webhook.idempotency_keys (with the type webhook.key_status), and
--     idempotency_begin, idempotency_checkpoint, idempotency_finish,
--     idempotency_fail, idempotency_fingerprint and idempotency_purge.
--   * webhook_grant_app grants the new functions a handler uses;
--     webhook_grant_operator the keys' table and idempotency_purge. Roles
--     that could claim get the same now; roles that could read the archive
--     may read the keys, and roles that could purge may purge them.
-- Nothing existing changes shape, so 0.5.0's SQL keeps working with the
-- 0.6.0 library until this script runs.

-- Everything bound in this script is bound to pg_catalog (see schema.sql).
SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);

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

SELECT pg_catalog.pg_extension_config_dump('webhook.idempotency_keys', '');

------------------------------------------------------------------------------
-- The functions, written in Rust.

CREATE FUNCTION @extschema@."webhook_outbound_key"(
	"id" uuid,
	"operation" TEXT
) RETURNS TEXT
STABLE SECURITY DEFINER PARALLEL SAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'outbound_key_of_claim_wrapper';
CREATE FUNCTION @extschema@."webhook_outbound_key"(
	"provider" TEXT,
	"event_id" TEXT,
	"operation" TEXT
) RETURNS TEXT
IMMUTABLE PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'outbound_key_of_event_wrapper';
CREATE FUNCTION @extschema@."idempotency_begin"(
	"scope" TEXT,
	"key" TEXT,
	"fingerprint" TEXT,
	"lease" interval DEFAULT '1 minute'
) RETURNS TABLE (
	"outcome" TEXT,
	"request_id" uuid,
	"http_status" INT,
	"recovery_point" TEXT,
	"recovery" jsonb,
	"response_headers" jsonb,
	"response_body" TEXT
)
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'begin_request_wrapper';
CREATE FUNCTION @extschema@."idempotency_checkpoint"(
	"request_id" uuid,
	"step" TEXT,
	"output" jsonb DEFAULT NULL
) RETURNS VOID
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'checkpoint_request_wrapper';
CREATE FUNCTION @extschema@."idempotency_finish"(
	"request_id" uuid,
	"response_status" INT,
	"response_body" TEXT DEFAULT NULL,
	"response_headers" jsonb DEFAULT NULL
) RETURNS VOID
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'finish_request_wrapper';
CREATE FUNCTION @extschema@."idempotency_fail"(
	"request_id" uuid,
	"error" TEXT,
	"retryable" bool DEFAULT true,
	"response_status" INT DEFAULT NULL,
	"response_body" TEXT DEFAULT NULL,
	"response_headers" jsonb DEFAULT NULL
) RETURNS VOID
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'fail_request_wrapper';
CREATE FUNCTION @extschema@."idempotency_fingerprint"(
	"method" TEXT,
	"path" TEXT,
	"body" bytea DEFAULT NULL
) RETURNS TEXT
IMMUTABLE PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'fingerprint_bytes_wrapper';
CREATE FUNCTION @extschema@."idempotency_fingerprint"(
	"method" TEXT,
	"path" TEXT,
	"body" TEXT
) RETURNS TEXT
IMMUTABLE PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'fingerprint_text_wrapper';
CREATE FUNCTION @extschema@."idempotency_purge"(
	"older_than" interval DEFAULT NULL
) RETURNS bigint
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'purge_keys_wrapper';

COMMENT ON FUNCTION @extschema@.webhook_outbound_key(uuid, text) IS
    'A stable idempotency key for an external call (operation) made while processing the event of a claim, delivery or lease id: the same on every attempt';
COMMENT ON FUNCTION @extschema@.webhook_outbound_key(text, text, text) IS
    'webhook_outbound_key for an event named by provider and event id';
COMMENT ON FUNCTION @extschema@.idempotency_begin(text, text, text, interval) IS
    'Begin a request carrying an idempotency key: new (owned under a lease; resume from recovery_point), in_progress (409), replay (the stored response) or mismatch (422)';
COMMENT ON FUNCTION @extschema@.idempotency_checkpoint(uuid, text, jsonb) IS
    'Record that a keyed request passed a step, with its output, in the step''s own transaction; renews the lease';
COMMENT ON FUNCTION @extschema@.idempotency_finish(uuid, integer, text, jsonb) IS
    'Finish a keyed request with the response every later request with the key gets back';
COMMENT ON FUNCTION @extschema@.idempotency_fail(uuid, text, boolean, integer, text, jsonb) IS
    'Record a keyed request''s failure: retryable frees the key (the next request resumes); final stores the response later requests get back';
COMMENT ON FUNCTION @extschema@.idempotency_fingerprint(text, text, bytea) IS
    'A request fingerprint for idempotency_begin: SHA-256 of the method, path and body';
COMMENT ON FUNCTION @extschema@.idempotency_fingerprint(text, text, text) IS
    'idempotency_fingerprint for a body passed as text';
COMMENT ON FUNCTION @extschema@.idempotency_purge(interval) IS
    'Remove idempotency keys first used longer ago than older_than (default webhook.idempotency_retention), never one still in progress; returns how many';

------------------------------------------------------------------------------
-- The grant helpers name the new functions and the keys' table.

-- Grant an application role exactly what a webhook handler and an inbox
-- worker need: EXECUTE on their functions. No table privilege at all.
CREATE OR REPLACE FUNCTION @extschema@.webhook_grant_app(role regrole)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    EXECUTE format('GRANT EXECUTE ON FUNCTION
        @extschema@.webhook_receive(text, jsonb, bytea, interval, boolean, text),
        @extschema@.webhook_receive(text, jsonb, text, interval, boolean, text),
        @extschema@.webhook_claim(text, text, text, jsonb, text, interval),
        @extschema@.webhook_claim(text, text, text, bytea, text, interval),
        @extschema@.webhook_claim(text, text, text, text, text, interval),
        @extschema@.webhook_enqueue(text, text, text, jsonb, text),
        @extschema@.webhook_enqueue(text, text, text, bytea, text),
        @extschema@.webhook_enqueue(text, text, text, text, text),
        @extschema@.webhook_next(integer, text, text, text, interval),
        @extschema@.webhook_complete(uuid, jsonb),
        @extschema@.webhook_fail(uuid, text, interval, boolean),
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
END
$$;
COMMENT ON FUNCTION @extschema@.webhook_grant_app(regrole) IS
    'Grant a handler or worker role EXECUTE on webhook_receive, webhook_claim, webhook_enqueue, webhook_next, webhook_complete, webhook_fail, webhook_extend, webhook_outbound_key and the idempotency_ functions of its own API (begin, checkpoint, finish, fail, fingerprint); no table privilege';

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
        webhook.secret_usage, webhook.idempotency_keys TO %s', role);
    EXECUTE format('GRANT EXECUTE ON FUNCTION
        @extschema@.webhook_requeue(text, text, text),
        @extschema@.webhook_requeue_dead(text, text, text, timestamptz, timestamptz, text),
        @extschema@.webhook_purge(interval, integer, integer),
        @extschema@.webhook_reset_watermark(text, text, text),
        @extschema@.webhook_providers(),
        @extschema@.idempotency_purge(interval)
        TO %s', role);
END
$$;
COMMENT ON FUNCTION @extschema@.webhook_grant_operator(regrole) IS
    'Grant an operator role the archive, the inbox, the watermarks, the idempotency keys, the views (secret usage by fingerprint included), webhook_requeue, webhook_requeue_dead, webhook_purge, webhook_reset_watermark, webhook_providers and idempotency_purge; never the secrets';

-- Who may already do the like may do the new: roles that may claim may use
-- outbound keys and the API's keys; roles that may read the archive may
-- read the keys; roles that may purge may purge them. Then initial
-- privileges as a fresh install records them.
REVOKE ALL ON webhook.idempotency_keys FROM PUBLIC;
DO $$
DECLARE
    grant_ record;
BEGIN
    PERFORM webhook._restrict_privileges();
    FOR grant_ IN
        SELECT 'EXECUTE' AS privilege, 'FUNCTION ' || f.object AS object,
               pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(a.grantee)) AS grantee
          FROM pg_catalog.pg_proc p
         CROSS JOIN LATERAL pg_catalog.aclexplode(p.proacl) a
         CROSS JOIN (VALUES ('@extschema@.webhook_outbound_key(uuid, text)'),
                            ('@extschema@.webhook_outbound_key(text, text, text)'),
                            ('@extschema@.idempotency_begin(text, text, text, interval)'),
                            ('@extschema@.idempotency_checkpoint(uuid, text, jsonb)'),
                            ('@extschema@.idempotency_finish(uuid, integer, text, jsonb)'),
                            ('@extschema@.idempotency_fail(uuid, text, boolean, integer, text, jsonb)'),
                            ('@extschema@.idempotency_fingerprint(text, text, bytea)'),
                            ('@extschema@.idempotency_fingerprint(text, text, text)')) AS f(object)
         WHERE p.oid = '@extschema@.webhook_claim(text, text, text, jsonb, text, interval)'::pg_catalog.regprocedure
           AND a.privilege_type = 'EXECUTE' AND a.grantee NOT IN (0, p.proowner)
        UNION ALL
        SELECT 'EXECUTE', 'FUNCTION @extschema@.idempotency_purge(interval)',
               pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(a.grantee))
          FROM pg_catalog.pg_proc p
         CROSS JOIN LATERAL pg_catalog.aclexplode(p.proacl) a
         WHERE p.oid = '@extschema@.webhook_purge(interval, integer, integer)'::pg_catalog.regprocedure
           AND a.privilege_type = 'EXECUTE' AND a.grantee NOT IN (0, p.proowner)
        UNION ALL
        SELECT 'SELECT', 'TABLE webhook.idempotency_keys', pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(a.grantee))
          FROM pg_catalog.pg_class c
         CROSS JOIN LATERAL pg_catalog.aclexplode(c.relacl) a
         WHERE c.oid = 'webhook.delivery_log'::pg_catalog.regclass
           AND a.privilege_type = 'SELECT' AND a.grantee NOT IN (0, c.relowner)
    LOOP
        EXECUTE pg_catalog.format('GRANT %s ON %s TO %s', grant_.privilege, grant_.object, grant_.grantee);
    END LOOP;
    UPDATE pg_catalog.pg_init_privs i
       SET initprivs = ARRAY[pg_catalog.makeaclitem(p.proowner, p.proowner, 'EXECUTE', false)]
      FROM pg_catalog.pg_proc p
     WHERE p.pronamespace = '@extschema@'::pg_catalog.regnamespace
       AND p.proname IN ('webhook_outbound_key', 'idempotency_begin', 'idempotency_checkpoint',
                         'idempotency_finish', 'idempotency_fail', 'idempotency_fingerprint',
                         'idempotency_purge')
       AND i.objoid = p.oid AND i.classoid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND i.objsubid = 0;
    UPDATE pg_catalog.pg_init_privs i
       SET initprivs = pg_catalog.acldefault('r', c.relowner)
      FROM pg_catalog.pg_class c
     WHERE c.oid = 'webhook.idempotency_keys'::pg_catalog.regclass
       AND i.objoid = c.oid AND i.classoid = 'pg_catalog.pg_class'::pg_catalog.regclass AND i.objsubid = 0;
END
$$;

------------------------------------------------------------------------------

SELECT webhook._restrict_privileges();

SELECT pg_catalog.set_config('search_path', '@extschema@, pg_temp', true);
