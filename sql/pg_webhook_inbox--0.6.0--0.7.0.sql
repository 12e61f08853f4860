-- pg_webhook_inbox 0.6.0 → 0.7.0
--
-- What changes (CHANGELOG.md says why):
--   * webhook_claim and webhook_receive gain complete_on_commit (default
--     false): a claim that the commit of the caller's transaction
--     completes, for one-transaction handlers, which then call nothing
--     after the claim.
--   * Both return one row of a composite type (webhook.claim_result,
--     webhook.receive_result) instead of a set of one row: the same
--     columns, one call instead of two per delivery.
--   * webhook_grant_app names the new functions. Roles that could call the
--     old ones may call the new ones.
--   * The archive keeps its short text columns in the row, uncompressed,
--     and its signature in the row unless it cannot fit (no TOAST insert
--     per delivery); rows already written stay as they are.
--   * webhook_receive caches the provider registry per backend: statement
--     triggers on webhook.providers and webhook.provider_secrets
--     (webhook_registry_changed) tell every backend when it changes.
-- 0.6.0's SQL keeps working with the 0.7.0 library until this script runs.

-- Everything bound in this script is bound to pg_catalog (see schema.sql).
SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);

-- What webhook_claim and webhook_receive answer: one row each, so each is
-- a function returning a composite, called once per delivery.
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
COMMENT ON TYPE webhook.claim_result IS 'The answer of webhook_claim: one row';
COMMENT ON TYPE webhook.receive_result IS 'The answer of webhook_receive: one row, with what to send the provider';

------------------------------------------------------------------------------
-- The functions that gain complete_on_commit: each old one is renamed, the
-- new one created, the old one's grants carried over, and the old one
-- dropped.

ALTER FUNCTION @extschema@.webhook_receive(text, jsonb, bytea, interval, boolean, text)
    RENAME TO webhook_receive_0_6_0;
ALTER FUNCTION @extschema@.webhook_receive(text, jsonb, text, interval, boolean, text)
    RENAME TO webhook_receive_0_6_0;
ALTER FUNCTION @extschema@.webhook_claim(text, text, text, jsonb, text, interval)
    RENAME TO webhook_claim_0_6_0;
ALTER FUNCTION @extschema@.webhook_claim(text, text, text, bytea, text, interval)
    RENAME TO webhook_claim_0_6_0;
ALTER FUNCTION @extschema@.webhook_claim(text, text, text, text, text, interval)
    RENAME TO webhook_claim_0_6_0;

CREATE FUNCTION @extschema@."webhook_claim"(
	"provider" TEXT,
	"event_id" TEXT,
	"event_type" TEXT,
	"payload" jsonb,
	"signature" TEXT,
	"lease" interval DEFAULT NULL,
	"complete_on_commit" bool DEFAULT false
) RETURNS webhook.claim_result
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'claim_payload_wrapper';

CREATE FUNCTION @extschema@."webhook_claim"(
	"provider" TEXT,
	"event_id" TEXT,
	"event_type" TEXT,
	"body" bytea,
	"signature" TEXT,
	"lease" interval DEFAULT NULL,
	"complete_on_commit" bool DEFAULT false
) RETURNS webhook.claim_result
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'claim_body_wrapper';

CREATE FUNCTION @extschema@."webhook_claim"(
	"provider" TEXT,
	"event_id" TEXT,
	"event_type" TEXT,
	"body" TEXT,
	"signature" TEXT,
	"lease" interval DEFAULT NULL,
	"complete_on_commit" bool DEFAULT false
) RETURNS webhook.claim_result
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'claim_body_text_wrapper';

CREATE FUNCTION @extschema@."webhook_receive"(
	"provider" TEXT,
	"headers" jsonb,
	"body" bytea,
	"lease" interval DEFAULT NULL,
	"inbox" bool DEFAULT NULL,
	"url" TEXT DEFAULT NULL,
	"complete_on_commit" bool DEFAULT false
) RETURNS webhook.receive_result
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'receive_bytes_wrapper';

CREATE FUNCTION @extschema@."webhook_receive"(
	"provider" TEXT,
	"headers" jsonb,
	"body" TEXT,
	"lease" interval DEFAULT NULL,
	"inbox" bool DEFAULT NULL,
	"url" TEXT DEFAULT NULL,
	"complete_on_commit" bool DEFAULT false
) RETURNS webhook.receive_result
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'receive_string_wrapper';

COMMENT ON FUNCTION @extschema@.webhook_receive(text, jsonb, bytea, interval, boolean, text, boolean) IS
    'Verify a delivery with its provider''s registered scheme and secrets (and the URL it was sent to, for schemes that sign it), read its event id and type, claim it or queue it (inbox), and say what to answer (http_status; response for an endpoint handshake); complete_on_commit: the commit of this transaction completes a claimed event';
COMMENT ON FUNCTION @extschema@.webhook_receive(text, jsonb, text, interval, boolean, text, boolean) IS
    'webhook_receive for a body passed as text';
COMMENT ON FUNCTION @extschema@.webhook_claim(text, text, text, jsonb, text, interval, boolean) IS
    'Claim a delivery (payload as jsonb): claimed/retry (do the work, then webhook_complete, or with complete_on_commit just commit), duplicate, in_progress, dead or stale';
COMMENT ON FUNCTION @extschema@.webhook_claim(text, text, text, bytea, text, interval, boolean) IS
    'webhook_claim with the raw body, archived byte for byte';
COMMENT ON FUNCTION @extschema@.webhook_claim(text, text, text, text, text, interval, boolean) IS
    'webhook_claim with the raw body passed as text';

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
           AND n.proname || '_0_6_0' = o.proname
           -- The new one takes the old arguments first, then one more.
           AND (n.proargtypes::pg_catalog.oid[])[0:o.pronargs - 1] = (o.proargtypes::pg_catalog.oid[])[0:o.pronargs - 1]
           AND n.pronargs = o.pronargs + 1
         WHERE o.proname LIKE 'webhook\_%\_0\_6\_0'
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

DROP FUNCTION @extschema@.webhook_receive_0_6_0(text, jsonb, bytea, interval, boolean, text);
DROP FUNCTION @extschema@.webhook_receive_0_6_0(text, jsonb, text, interval, boolean, text);
DROP FUNCTION @extschema@.webhook_claim_0_6_0(text, text, text, jsonb, text, interval);
DROP FUNCTION @extschema@.webhook_claim_0_6_0(text, text, text, bytea, text, interval);
DROP FUNCTION @extschema@.webhook_claim_0_6_0(text, text, text, text, text, interval);

-- webhook_grant_app names the new functions.
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

------------------------------------------------------------------------------
-- webhook_receive caches the registry in each backend; a change to it,
-- committed, drops every backend's copy. Touching a secret's last_used_at
-- changes nothing webhook_receive reads.
CREATE FUNCTION @extschema@."webhook_registry_changed"()
	RETURNS TRIGGER
	LANGUAGE c
	AS 'MODULE_PATHNAME', 'webhook_registry_changed_wrapper';
CREATE TRIGGER registry_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON webhook.providers
    FOR EACH STATEMENT EXECUTE FUNCTION @extschema@.webhook_registry_changed();
CREATE TRIGGER registry_changed
    AFTER INSERT OR UPDATE OF provider, secret, fingerprint, added_at, retired_at OR DELETE OR TRUNCATE
    ON webhook.provider_secrets
    FOR EACH STATEMENT EXECUTE FUNCTION @extschema@.webhook_registry_changed();
COMMENT ON FUNCTION @extschema@.webhook_registry_changed() IS
    'Trigger on the provider registry: drops every backend''s cached copy of it once the change commits';

-- The privilege rule, for the new trigger function.
SELECT webhook._restrict_privileges();

COMMENT ON FUNCTION @extschema@.webhook_extend(uuid, interval) IS
    'Renew a live claim''s lease, from now (at most webhook.max_lease); returns the new expiry. A claim that completes on commit has no lease';

------------------------------------------------------------------------------
-- The archive's text columns: in the row (see schema.sql).
ALTER TABLE webhook.delivery_log
    ALTER COLUMN provider SET STORAGE PLAIN,
    ALTER COLUMN event_id SET STORAGE MAIN,
    ALTER COLUMN event_type SET STORAGE MAIN,
    ALTER COLUMN secret_fingerprint SET STORAGE PLAIN,
    ALTER COLUMN signature SET STORAGE MAIN,
    ALTER COLUMN reject_reason SET STORAGE MAIN;
