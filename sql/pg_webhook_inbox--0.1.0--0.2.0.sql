-- pg_webhook_inbox 0.1.0 → 0.2.0
--
-- What changes (CHANGELOG.md says why):
--   * webhook.signature_bindings binds the signed bytes of deliveries whose
--     event id is not signed (GitHub, Shopify, generic HMACs) to that id;
--     it is filled here from the archive, so deliveries received before the
--     upgrade cannot be replayed under a fresh id either.
--   * webhook.delivery_log gains body_size and body_sha256 (a rejected
--     delivery keeps only a prefix of its body); rejected_deliveries shows
--     them.
--   * webhook_receive returns event_type_signed as well: recreated, its
--     grants carried over.
--   * webhook_schemes() is the one list of schemes, aliases and default
--     tolerances; webhook_register_provider reads it (svix and clerk now
--     register as standard), webhook._scheme_defaults is gone, and a
--     provider's tolerance may be NULL (the scheme's default), as may
--     webhook_verify's.
--   * Views and constraints are bound again with the search path pinned to
--     pg_catalog, and the archive's partial index is rebuilt if anything
--     but PostgreSQL's own operators was bound into it at install.
--   * Every function, table, column and view has a comment.
--   * webhook._restrict_privileges() is the privilege rule, run by every
--     install and upgrade.
-- The library (pg_webhook_inbox.so) of 0.2.0 must be installed first; run
-- ALTER EXTENSION pg_webhook_inbox UPDATE in every database right after.

\echo Use "ALTER EXTENSION pg_webhook_inbox UPDATE TO '0.2.0'" to load this file. \quit

-- Everything bound in this script is bound to pg_catalog (see schema.sql).
SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);

------------------------------------------------------------------------------
-- Signature bindings, filled from the archive. For the schemes that sign
-- the body only, the signed bytes are the raw body; the first delivery of
-- each body (in archive order) names its event.

CREATE TABLE webhook.signature_bindings (
    provider      text        NOT NULL,
    -- SHA-256 of the signed material: the scheme's signed prefix and the body.
    digest        bytea       NOT NULL,
    event_id      text        NOT NULL,
    first_seen_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    CONSTRAINT signature_bindings_pkey PRIMARY KEY (provider, digest)
);

INSERT INTO webhook.signature_bindings (provider, digest, event_id, first_seen_at)
SELECT DISTINCT ON (l.provider, pg_catalog.sha256(l.raw_body))
       l.provider, pg_catalog.sha256(l.raw_body), l.event_id, l.created_at
  FROM webhook.delivery_log l
  JOIN webhook.providers p ON p.name = l.provider
 WHERE l.raw_body IS NOT NULL
   AND l.event_id IS NOT NULL
   AND l.claim_status <> 'rejected'
   AND (p.scheme IN ('github', 'shopify') OR p.scheme LIKE 'hmac%')
 ORDER BY l.provider, pg_catalog.sha256(l.raw_body), l.created_at, l.id;

SELECT pg_catalog.pg_extension_config_dump('webhook.signature_bindings', '');
REVOKE ALL ON webhook.signature_bindings FROM PUBLIC;

-- Operators (webhook_grant_operator) read it too. A GRANT inside an
-- extension script records the whole ACL as the table's initial
-- privileges, and pg_dump leaves out whatever is initial: set them back to
-- what a fresh install records, so that pg_dump keeps these grants.
DO $$
DECLARE
    reader record;
BEGIN
    FOR reader IN
        SELECT DISTINCT pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(a.grantee)) AS name
          FROM pg_catalog.pg_class c
         CROSS JOIN LATERAL pg_catalog.aclexplode(c.relacl) a
         WHERE c.oid = 'webhook.delivery_log'::pg_catalog.regclass
           AND a.privilege_type = 'SELECT' AND a.grantee NOT IN (0, c.relowner)
    LOOP
        EXECUTE pg_catalog.format('GRANT SELECT ON webhook.signature_bindings TO %s', reader.name);
    END LOOP;
    UPDATE pg_catalog.pg_init_privs i
       SET initprivs = pg_catalog.acldefault('r', c.relowner)
      FROM pg_catalog.pg_class c
     WHERE c.oid = 'webhook.signature_bindings'::pg_catalog.regclass
       AND i.objoid = c.oid AND i.classoid = 'pg_catalog.pg_class'::pg_catalog.regclass
       AND i.objsubid = 0;
END
$$;

------------------------------------------------------------------------------
-- Rejected bodies: a bounded prefix, with the whole body's size and digest.

ALTER TABLE webhook.delivery_log
    ADD COLUMN body_size   integer,
    ADD COLUMN body_sha256 bytea;

------------------------------------------------------------------------------
-- Views, bound again under the pinned search path (rejected_deliveries
-- with its new columns, appended so that grants on it are kept).

CREATE OR REPLACE VIEW webhook.deliveries AS
SELECT l.id, l.provider, l.event_id, l.event_type, l.payload, l.raw_body, l.signature, l.headers,
       l.claim_status,
       CASE
           WHEN l.claim_status = 'rejected' THEN 'REJECTED'
           WHEN l.claim_status IN ('duplicate', 'in_progress', 'dead') THEN 'SKIPPED'
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

CREATE OR REPLACE VIEW webhook.stuck_claims AS
SELECT provider, event_id, event_type, attempts, claim_id, first_seen_at, lease_expires_at,
       pg_catalog.clock_timestamp() - lease_expires_at AS overdue
  FROM webhook.events
 WHERE status = 'processing' AND lease_expires_at < pg_catalog.clock_timestamp();

CREATE OR REPLACE VIEW webhook.rejected_deliveries AS
-- raw_body holds only the first webhook.rejected_body_limit bytes of each.
SELECT id, provider, reject_reason AS reason, event_id, signature, headers,
       coalesce(body_size, pg_catalog.octet_length(raw_body)) AS body_bytes, created_at,
       body_sha256, raw_body AS body_prefix
  FROM webhook.delivery_log
 WHERE claim_status = 'rejected';

CREATE OR REPLACE VIEW webhook.dead_letters AS
SELECT provider, event_id, event_type, attempts, requeues, last_error, first_seen_at, claim_id
  FROM webhook.events
 WHERE status = 'dead';

CREATE OR REPLACE VIEW webhook.payload_mismatches AS
SELECT l.id, l.provider, l.event_id, l.event_type, l.claim_status, l.payload, l.created_at
  FROM webhook.delivery_log l
 WHERE l.payload_mismatch;

CREATE OR REPLACE VIEW webhook.provider_stats AS
SELECT provider,
       count(*) AS events,
       count(*) FILTER (WHERE status = 'processed')  AS processed,
       count(*) FILTER (WHERE status = 'processing') AS processing,
       count(*) FILTER (WHERE status = 'failed')     AS failed,
       count(*) FILTER (WHERE status = 'dead')       AS dead,
       coalesce(sum(attempts - 1) FILTER (WHERE attempts > 1), 0) AS retries,
       max(first_seen_at) AS last_event_at
  FROM webhook.events
 GROUP BY provider;

CREATE OR REPLACE VIEW webhook.provider_summary AS
SELECT p.name, p.scheme, p.tolerance, p.event_id_from, p.event_type_from,
       count(s.fingerprint) FILTER (WHERE s.retired_at IS NULL)::int AS active_secrets,
       coalesce(array_agg(s.fingerprint ORDER BY s.added_at) FILTER (WHERE s.retired_at IS NULL), '{}')
           AS active_fingerprints,
       coalesce(array_agg(s.fingerprint ORDER BY s.added_at) FILTER (WHERE s.retired_at IS NOT NULL), '{}')
           AS retired_fingerprints,
       p.created_at
  FROM webhook.providers p
  LEFT JOIN webhook.provider_secrets s ON s.provider = p.name
 GROUP BY p.name;

------------------------------------------------------------------------------
-- Constraints and the partial index, bound again; a provider's tolerance
-- may now be left to its scheme.

ALTER TABLE webhook.providers
    ALTER COLUMN tolerance DROP DEFAULT,
    ALTER COLUMN tolerance DROP NOT NULL,
    DROP CONSTRAINT providers_name_check,
    DROP CONSTRAINT providers_tolerance_check,
    DROP CONSTRAINT providers_event_id_from_check,
    DROP CONSTRAINT providers_event_type_from_check,
    ADD CONSTRAINT providers_name_check CHECK (name ~ '^[a-z0-9][a-z0-9_.-]{0,63}$'),
    ADD CONSTRAINT providers_tolerance_check CHECK (tolerance > interval '0'),
    ADD CONSTRAINT providers_event_id_from_check
        CHECK (event_id_from ~ '^(header|body):[^|]+(\|(header|body):[^|]+)*$'),
    ADD CONSTRAINT providers_event_type_from_check
        CHECK (event_type_from ~ '^(header|body):[^|]+(\|(header|body):[^|]+)*$');
ALTER TABLE webhook.provider_secrets
    DROP CONSTRAINT provider_secrets_secret_check,
    ADD CONSTRAINT provider_secrets_secret_check CHECK (secret <> '');

-- Rebuilding scans the whole archive: only when the predicate was bound to
-- an operator that is not PostgreSQL's own.
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_depend d
                 JOIN pg_catalog.pg_operator o ON o.oid = d.refobjid
                WHERE d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass
                  AND d.objid = 'webhook.delivery_log_attention_idx'::pg_catalog.regclass
                  AND d.refclassid = 'pg_catalog.pg_operator'::pg_catalog.regclass
                  AND o.oprnamespace <> 'pg_catalog'::pg_catalog.regnamespace) THEN
        DROP INDEX webhook.delivery_log_attention_idx;
        CREATE INDEX delivery_log_attention_idx ON webhook.delivery_log (created_at)
            WHERE claim_status = 'rejected' OR payload_mismatch;
    END IF;
END
$$;

------------------------------------------------------------------------------
-- The scheme catalog, the registry reading it, and the verification
-- functions leaving the tolerance to the scheme by default.

CREATE FUNCTION @extschema@."webhook_schemes"() RETURNS TABLE (
	"scheme" TEXT,
	"aliases" TEXT[],
	"event_id_from" TEXT,
	"event_type_from" TEXT,
	"event_id_signed" bool,
	"event_type_signed" bool,
	"tolerance" interval,
	"signs" TEXT
)
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'webhook_schemes_wrapper';

DROP FUNCTION webhook._scheme_defaults(text);

CREATE OR REPLACE FUNCTION @extschema@.webhook_register_provider(
    name            text,
    secret          text     DEFAULT NULL,
    scheme          text     DEFAULT NULL,
    tolerance       interval DEFAULT NULL,
    event_id_from   text     DEFAULT NULL,
    event_type_from text     DEFAULT NULL
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

    INSERT INTO webhook.providers AS p (name, scheme, tolerance, event_id_from, event_type_from)
    VALUES (p_name,
            v_scheme,
            coalesce(webhook_register_provider.tolerance, existing.tolerance, known.tolerance),
            coalesce(webhook_register_provider.event_id_from, existing.event_id_from, known.event_id_from),
            coalesce(webhook_register_provider.event_type_from, existing.event_type_from, known.event_type_from))
    ON CONFLICT ON CONSTRAINT providers_pkey DO UPDATE
       SET scheme = excluded.scheme, tolerance = excluded.tolerance,
           event_id_from = excluded.event_id_from, event_type_from = excluded.event_type_from;

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
                ELSE failed_check
            END
            USING ERRCODE = 'check_violation',
                  DETAIL = SQLERRM,
                  HINT = 'Names are lower-case [a-z0-9_.-]; sources are ''header:<name>'' or ''body:<dotted.path>''; the tolerance is positive.';
END
$$;

CREATE OR REPLACE FUNCTION @extschema@."webhook_verify"(
	"scheme" TEXT,
	"headers" jsonb,
	"body" bytea,
	"secrets" TEXT[],
	"tolerance" interval DEFAULT NULL
) RETURNS bool
VOLATILE PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'webhook_verify_wrapper';

CREATE OR REPLACE FUNCTION @extschema@."webhook_verify"(
	"scheme" TEXT,
	"headers" jsonb,
	"body" TEXT,
	"secrets" TEXT[],
	"tolerance" interval DEFAULT NULL
) RETURNS bool
VOLATILE PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'webhook_verify_text_wrapper';

CREATE OR REPLACE FUNCTION @extschema@."webhook_verify_detail"(
	"scheme" TEXT,
	"headers" jsonb,
	"body" bytea,
	"secrets" TEXT[],
	"tolerance" interval DEFAULT NULL
) RETURNS TABLE (
	"valid" bool,
	"reason" TEXT,
	"signed_at" timestamp with time zone
)
VOLATILE PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'webhook_verify_detail_wrapper';

CREATE OR REPLACE FUNCTION @extschema@."webhook_verify_detail"(
	"scheme" TEXT,
	"headers" jsonb,
	"body" TEXT,
	"secrets" TEXT[],
	"tolerance" interval DEFAULT NULL
) RETURNS TABLE (
	"valid" bool,
	"reason" TEXT,
	"signed_at" timestamp with time zone
)
VOLATILE PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'webhook_verify_detail_text_wrapper';

------------------------------------------------------------------------------
-- webhook_receive gains event_type_signed. A function's result type cannot
-- change in place: the old overloads are renamed, the new ones created,
-- the old ones' grants carried over, and the old ones dropped.

ALTER FUNCTION @extschema@.webhook_receive(text, jsonb, bytea, interval) RENAME TO webhook_receive_0_1_0;
ALTER FUNCTION @extschema@.webhook_receive(text, jsonb, text, interval) RENAME TO webhook_receive_0_1_0;

CREATE FUNCTION @extschema@."webhook_receive"(
	"provider" TEXT,
	"headers" jsonb,
	"body" bytea,
	"lease" interval DEFAULT NULL
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
AS 'MODULE_PATHNAME', 'webhook_receive_wrapper';

CREATE FUNCTION @extschema@."webhook_receive"(
	"provider" TEXT,
	"headers" jsonb,
	"body" TEXT,
	"lease" interval DEFAULT NULL
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
AS 'MODULE_PATHNAME', 'webhook_receive_text_wrapper';

DO $$
DECLARE
    pair  record;
    grant_ record;
BEGIN
    FOR pair IN
        SELECT o.oid AS old, n.oid AS new
          FROM pg_catalog.pg_proc o
          JOIN pg_catalog.pg_proc n ON n.pronamespace = o.pronamespace
                                   AND n.proargtypes = o.proargtypes
                                   AND n.proname = 'webhook_receive'
         WHERE o.proname = 'webhook_receive_0_1_0'
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
        -- alone): see signature_bindings above.
        UPDATE pg_catalog.pg_init_privs i
           SET initprivs = ARRAY[pg_catalog.makeaclitem(p.proowner, p.proowner, 'EXECUTE', false)]
          FROM pg_catalog.pg_proc p
         WHERE p.oid = pair.new AND i.objoid = p.oid
           AND i.classoid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND i.objsubid = 0;
    END LOOP;
END
$$;

DROP FUNCTION @extschema@.webhook_receive_0_1_0(text, jsonb, bytea, interval);
DROP FUNCTION @extschema@.webhook_receive_0_1_0(text, jsonb, text, interval);

------------------------------------------------------------------------------
-- Roles: the operator grant covers the new table; the privilege rule, as a
-- function every install and upgrade runs.

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
        webhook.provider_stats TO %s', role);
    EXECUTE format('GRANT EXECUTE ON FUNCTION
        @extschema@.webhook_requeue(text, text),
        @extschema@.webhook_purge(interval, integer, integer),
        @extschema@.webhook_providers()
        TO %s', role);
END
$$;

CREATE FUNCTION webhook._restrict_privileges() RETURNS void
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
            SELECT 'FUNCTION ' || p.oid::pg_catalog.regprocedure::text AS object,
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

------------------------------------------------------------------------------
-- What \df+ and \d+ show.

COMMENT ON SCHEMA webhook IS
    'pg_webhook_inbox: event state (dedup) and the delivery archive';
COMMENT ON TYPE webhook.event_status IS 'Where an event is: processing, processed, failed (retried by its next delivery), dead (parked)';
COMMENT ON TYPE webhook.claim_status IS 'What a delivery was answered';
COMMENT ON TABLE webhook.events IS
    'One row per (provider, event_id), kept forever: the dedup and the claim state machine';
COMMENT ON COLUMN webhook.events.provider IS 'Registered provider name (or the name given to webhook_claim)';
COMMENT ON COLUMN webhook.events.event_id IS 'The provider''s event id; with provider, the dedup key';
COMMENT ON COLUMN webhook.events.event_type IS 'The event type of the first delivery';
COMMENT ON COLUMN webhook.events.status IS 'processing (claimed, lease running), processed (done), failed (next delivery retries), dead (parked for an operator)';
COMMENT ON COLUMN webhook.events.attempts IS 'Claims that owned the event: the first, plus every retry';
COMMENT ON COLUMN webhook.events.claim_id IS 'The delivery that owns the event now (its webhook.delivery_log id)';
COMMENT ON COLUMN webhook.events.lease_expires_at IS 'While processing: when another delivery may take the event over';
COMMENT ON COLUMN webhook.events.first_seen_at IS 'When the first delivery was claimed';
COMMENT ON COLUMN webhook.events.processed_at IS 'When webhook_complete marked it processed';
COMMENT ON COLUMN webhook.events.last_error IS 'The latest webhook_fail message (at most 2 kB), or why it was parked';
COMMENT ON COLUMN webhook.events.payload_hash IS 'SHA-256 of the first delivery''s payload; redeliveries that differ are flagged payload_mismatch';
COMMENT ON COLUMN webhook.events.result IS 'What webhook_complete stored; returned to every later duplicate';
COMMENT ON COLUMN webhook.events.requeues IS 'How many times an operator put the event back with webhook_requeue';
COMMENT ON TABLE webhook.delivery_log IS
    'One row per webhook_claim / webhook_receive call, written once: payload, raw body, signature, headers, answer';
COMMENT ON COLUMN webhook.delivery_log.id IS 'The delivery''s id (UUIDv7, time-ordered): what webhook_claim and webhook_receive return';
COMMENT ON COLUMN webhook.delivery_log.provider IS 'Provider name';
COMMENT ON COLUMN webhook.delivery_log.event_id IS 'The event id it carried; NULL when rejected before it could be read';
COMMENT ON COLUMN webhook.delivery_log.event_type IS 'The event type it carried; NULL when rejected';
COMMENT ON COLUMN webhook.delivery_log.payload IS 'The payload as jsonb; NULL for rejections';
COMMENT ON COLUMN webhook.delivery_log.raw_body IS 'The exact bytes received (signatures cover these); for rejections only the first webhook.rejected_body_limit bytes';
COMMENT ON COLUMN webhook.delivery_log.signature IS 'The signature header''s value, for verifying the delivery again later';
COMMENT ON COLUMN webhook.delivery_log.headers IS 'Request headers given to webhook_receive, webhook.redact_headers redacted; NULL past 64 kB';
COMMENT ON COLUMN webhook.delivery_log.claim_status IS 'What the delivery was answered: claimed, retry, duplicate, in_progress, dead, or rejected';
COMMENT ON COLUMN webhook.delivery_log.reject_reason IS 'For rejections: why (bad_signature, replayed, timestamp_too_old, ...)';
COMMENT ON COLUMN webhook.delivery_log.payload_mismatch IS 'This redelivery''s payload differs from the first delivery''s';
COMMENT ON COLUMN webhook.delivery_log.created_at IS 'When the delivery arrived';
COMMENT ON COLUMN webhook.delivery_log.body_size IS 'For rejections: the whole body''s size in bytes';
COMMENT ON COLUMN webhook.delivery_log.body_sha256 IS 'For rejections: the whole body''s SHA-256';
COMMENT ON TABLE webhook.delivery_failures IS
    'Failed attempts: the error given to webhook_fail, or the lease that ran out and was taken over';
COMMENT ON COLUMN webhook.delivery_failures.delivery_id IS 'The delivery whose attempt failed';
COMMENT ON COLUMN webhook.delivery_failures.error_message IS 'The webhook_fail message, or the lease that ran out';
COMMENT ON COLUMN webhook.delivery_failures.failed_at IS 'When it failed';
COMMENT ON VIEW webhook.deliveries IS
    'The archive: one row per delivery with processing_status PENDING, PROCESSED, SKIPPED, FAILED or REJECTED';
COMMENT ON TABLE webhook.signature_bindings IS
    'For providers that sign the body but not the event id: which id each signed body first came with';
COMMENT ON COLUMN webhook.signature_bindings.provider IS 'Provider name';
COMMENT ON COLUMN webhook.signature_bindings.digest IS 'SHA-256 of the signed material (the scheme''s signed prefix and the body)';
COMMENT ON COLUMN webhook.signature_bindings.event_id IS 'The event id those bytes first came with; under any other id they are refused as replayed';
COMMENT ON COLUMN webhook.signature_bindings.first_seen_at IS 'When they were first seen';
COMMENT ON TABLE webhook.providers IS
    'Registered providers: signature scheme, timestamp tolerance, where the event id and type are';
COMMENT ON COLUMN webhook.providers.name IS 'The name handlers pass to webhook_receive';
COMMENT ON COLUMN webhook.providers.scheme IS 'Signature scheme (webhook_schemes()), or a generic hmac;header=... string';
COMMENT ON COLUMN webhook.providers.tolerance IS 'How far a signed timestamp may be from now; NULL: the scheme''s default';
COMMENT ON COLUMN webhook.providers.event_id_from IS 'Where the event id is: header:<name> or body:<dotted.path>, alternatives joined by |';
COMMENT ON COLUMN webhook.providers.event_type_from IS 'Where the event type is, in the same form';
COMMENT ON COLUMN webhook.providers.created_at IS 'When the provider was registered';
COMMENT ON TABLE webhook.provider_secrets IS
    'Signing secrets per provider; active while retired_at is NULL. Never granted to anyone.';
COMMENT ON COLUMN webhook.provider_secrets.provider IS 'Provider name';
COMMENT ON COLUMN webhook.provider_secrets.secret IS 'The signing secret, as the provider shows it; readable by the extension owner only';
COMMENT ON COLUMN webhook.provider_secrets.fingerprint IS 'First 16 hex digits of the secret''s SHA-256: how it is listed';
COMMENT ON COLUMN webhook.provider_secrets.added_at IS 'When it was added (the newest is tried first)';
COMMENT ON COLUMN webhook.provider_secrets.retired_at IS 'When it was retired; NULL while active';
COMMENT ON VIEW webhook.recent_failures IS 'Deliveries whose processing failed in the last day, with their event''s status';
COMMENT ON VIEW webhook.stuck_claims IS 'Claims committed but never finished whose lease has run out: the next delivery retries them';
COMMENT ON VIEW webhook.rejected_deliveries IS 'Deliveries webhook_receive refused: forged, replayed, stale, misconfigured or unreadable';
COMMENT ON VIEW webhook.dead_letters IS 'Events that failed webhook.max_attempts times and wait for webhook_requeue';
COMMENT ON VIEW webhook.payload_mismatches IS 'Redeliveries whose payload differs from the first delivery of the same event';
COMMENT ON VIEW webhook.provider_stats IS 'Per provider: events by status, retries spent, last event';
COMMENT ON FUNCTION @extschema@.webhook_purge(interval, integer, integer) IS
    'Delete archive rows older than older_than whose event is processed (and rejections); never touches webhook.events. Returns the rows deleted';
COMMENT ON FUNCTION webhook._fingerprint(text) IS 'Internal: how a secret is listed without being shown';
COMMENT ON VIEW webhook.provider_summary IS 'The registry, secrets listed by fingerprint only';
COMMENT ON FUNCTION @extschema@.webhook_register_provider(text, text, text, interval, text, text) IS
    'Create or update a provider: scheme (default: its name or alias), tolerance, where the event id and type are, and optionally a secret';
COMMENT ON FUNCTION @extschema@.webhook_add_secret(text, text) IS
    'Add a signing secret to a provider (several may be active while rotating); returns its fingerprint';
COMMENT ON FUNCTION @extschema@.webhook_retire_secret(text, text) IS
    'Retire a provider''s secret, named by its fingerprint or by itself';
COMMENT ON FUNCTION @extschema@.webhook_providers() IS 'The registry, without secrets';
COMMENT ON FUNCTION @extschema@.webhook_grant_app(regrole) IS
    'Grant a handler role EXECUTE on webhook_receive, webhook_claim, webhook_complete, webhook_fail, webhook_extend; no table privilege';
COMMENT ON FUNCTION @extschema@.webhook_grant_operator(regrole) IS
    'Grant an operator role the archive, the views, webhook_requeue, webhook_purge and webhook_providers; never the secrets';
COMMENT ON FUNCTION webhook._restrict_privileges() IS
    'Internal: the privilege rule every install and upgrade applies';
COMMENT ON FUNCTION @extschema@.webhook_receive(text, jsonb, bytea, interval) IS
    'Verify a delivery with its provider''s registered scheme and secrets, read its event id and type, claim it, and say what to answer (http_status)';
COMMENT ON FUNCTION @extschema@.webhook_receive(text, jsonb, text, interval) IS
    'webhook_receive for a body passed as text';
COMMENT ON FUNCTION @extschema@.webhook_claim(text, text, text, jsonb, text, interval) IS
    'Claim a delivery (payload as jsonb): claimed/retry (do the work, then webhook_complete), duplicate, in_progress or dead';
COMMENT ON FUNCTION @extschema@.webhook_claim(text, text, text, bytea, text, interval) IS
    'webhook_claim with the raw body, archived byte for byte';
COMMENT ON FUNCTION @extschema@.webhook_claim(text, text, text, text, text, interval) IS
    'webhook_claim with the raw body passed as text';
COMMENT ON FUNCTION @extschema@.webhook_complete(uuid, jsonb) IS
    'Mark a claimed delivery''s event processed, in the transaction of its work; result is returned to later duplicates';
COMMENT ON FUNCTION @extschema@.webhook_fail(uuid, text) IS
    'Record a failed attempt and release the event: its next delivery is a retry (or it is parked as dead after webhook.max_attempts)';
COMMENT ON FUNCTION @extschema@.webhook_extend(uuid, interval) IS
    'Renew a live claim''s lease, from now (at most webhook.max_lease); returns the new expiry';
COMMENT ON FUNCTION @extschema@.webhook_requeue(text, text) IS
    'For operators: put a dead or failed event back with a fresh attempt budget';
COMMENT ON FUNCTION @extschema@.verify_hmac(text, bytea, text, text) IS
    'Constant-time check of an HMAC signature (hex or base64) over the raw body';
COMMENT ON FUNCTION @extschema@.verify_hmac(text, text, text, text) IS
    'verify_hmac for a body passed as text';
COMMENT ON FUNCTION @extschema@.webhook_verify(text, jsonb, bytea, text[], interval) IS
    'Whether a delivery is signed under a provider scheme by one of the secrets, within the timestamp tolerance';
COMMENT ON FUNCTION @extschema@.webhook_verify(text, jsonb, text, text[], interval) IS
    'webhook_verify for a body passed as text';
COMMENT ON FUNCTION @extschema@.webhook_verify_detail(text, jsonb, bytea, text[], interval) IS
    'webhook_verify, saying why: (valid, reason, signed_at)';
COMMENT ON FUNCTION @extschema@.webhook_verify_detail(text, jsonb, text, text[], interval) IS
    'webhook_verify_detail for a body passed as text';
COMMENT ON FUNCTION @extschema@.webhook_schemes() IS
    'The signature schemes, their aliases, and the registry defaults each gives a provider';

------------------------------------------------------------------------------

SELECT webhook._restrict_privileges();

SELECT pg_catalog.set_config('search_path', '@extschema@, pg_temp', true);
