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
--   * webhook_schemes() is the one list of schemes and aliases;
--     webhook_register_provider reads it (svix and clerk now register as
--     standard), webhook._scheme_defaults is gone.
--   * Views and constraints are bound again with the search path pinned to
--     pg_catalog, and the archive's partial index is rebuilt if anything
--     but PostgreSQL's own operators was bound into it at install.
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

COMMENT ON TABLE webhook.signature_bindings IS
    'For providers that sign the body but not the event id: which id each signed body first came with';

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
-- Constraints and the partial index, bound again.

ALTER TABLE webhook.providers
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
-- The scheme catalog, and the registry reading it.

CREATE FUNCTION @extschema@."webhook_schemes"() RETURNS TABLE (
	"scheme" TEXT,
	"aliases" TEXT[],
	"event_id_from" TEXT,
	"event_type_from" TEXT,
	"event_id_signed" bool,
	"event_type_signed" bool,
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
            coalesce(webhook_register_provider.tolerance, existing.tolerance, interval '5 minutes'),
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
        RAISE EXCEPTION 'webhook_register_provider: %', SQLERRM
            USING ERRCODE = 'check_violation',
                  HINT = 'Names are lower-case [a-z0-9_.-]; sources are ''header:<name>'' or ''body:<dotted.path>''; the tolerance is positive.';
END
$$;

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
-- The privilege rule, as a function every install and upgrade runs.

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

SELECT webhook._restrict_privileges();

SELECT pg_catalog.set_config('search_path', '@extschema@, pg_temp', true);
