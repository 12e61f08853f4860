-- pg_webhook_inbox 0.4.0 → 0.5.0
--
-- What changes (CHANGELOG.md says why):
--   * webhook_receive, webhook_verify and webhook_verify_detail gain a url
--     argument: the public URL the provider called, for the schemes that
--     sign it (Twilio, Square, HubSpot). webhook_receive appends response
--     and response_type: the answer to an endpoint handshake (Slack's
--     url_verification, Zoom's endpoint.url_validation, Twitch's callback
--     verification, Discord's PING).
--   * 'handshake' is appended to webhook.claim_status: such requests are
--     archived as what they are. webhook.deliveries says HANDSHAKE;
--     webhook_purge purges them as it purges rejections. A label added
--     here cannot be used before this transaction commits, so the views
--     compare it as text (as a fresh install's do).
--   * webhook_register_provider keeps a scheme's options for every scheme
--     (PayPal's webhook id) and refuses options a scheme does not take.
--   * Which secret verified what: webhook.delivery_log.secret_fingerprint
--     (written by webhook_receive), webhook.provider_secrets.last_used_at
--     and the view webhook.secret_usage; webhook_retire_secret gains force,
--     needed to retire a secret used in the last day; webhook_add_secret
--     refuses a key the provider's scheme cannot use (webhook_check_key,
--     new, says why).
--   * Functions whose arguments change are created anew; the grants on the
--     old ones are carried over. Roles that may read the registry summary
--     may read webhook.secret_usage.
-- The library of 0.5.0 must be installed first (it still answers 0.4.0's
-- SQL until this script runs); run ALTER EXTENSION pg_webhook_inbox UPDATE
-- in every database right after.

-- Everything bound in this script is bound to pg_catalog (see schema.sql).
SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);

ALTER TYPE webhook.claim_status ADD VALUE 'handshake';

ALTER TABLE webhook.delivery_log ADD COLUMN secret_fingerprint text;
COMMENT ON COLUMN webhook.delivery_log.secret_fingerprint IS 'The fingerprint of the secret, public key or certificate that verified the delivery (webhook_receive); NULL when the caller verified it';
ALTER TABLE webhook.provider_secrets ADD COLUMN last_used_at timestamptz;
COMMENT ON COLUMN webhook.provider_secrets.last_used_at IS 'When it last verified a delivery (kept to the minute); NULL if never';

CREATE VIEW webhook.secret_usage AS
SELECT s.provider, s.fingerprint, s.added_at, s.retired_at, s.last_used_at
  FROM webhook.provider_secrets s;
COMMENT ON VIEW webhook.secret_usage IS 'Each provider secret by fingerprint: when added, retired and last used to verify a delivery';

COMMENT ON COLUMN webhook.delivery_log.claim_status IS 'What the delivery was answered: claimed, retry, duplicate, in_progress, dead, rejected, queued, stale, or handshake (an endpoint check with no event, answered as its provider expects)';

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
                  AND (l.claim_status IN ('rejected', 'handshake')
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

-- Registering keeps a scheme's options (PayPal's webhook id).
CREATE OR REPLACE FUNCTION @extschema@.webhook_register_provider(
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

------------------------------------------------------------------------------
-- The functions that gain url (and webhook_receive its response columns):
-- each old one is renamed, the new one created, the old one's grants
-- carried over, and the old one dropped.

ALTER FUNCTION @extschema@.webhook_receive(text, jsonb, bytea, interval, boolean)
    RENAME TO webhook_receive_0_4_0;
ALTER FUNCTION @extschema@.webhook_receive(text, jsonb, text, interval, boolean)
    RENAME TO webhook_receive_0_4_0;
ALTER FUNCTION @extschema@.webhook_verify(text, jsonb, bytea, text[], interval)
    RENAME TO webhook_verify_0_4_0;
ALTER FUNCTION @extschema@.webhook_verify(text, jsonb, text, text[], interval)
    RENAME TO webhook_verify_0_4_0;
ALTER FUNCTION @extschema@.webhook_verify_detail(text, jsonb, bytea, text[], interval)
    RENAME TO webhook_verify_detail_0_4_0;
ALTER FUNCTION @extschema@.webhook_verify_detail(text, jsonb, text, text[], interval)
    RENAME TO webhook_verify_detail_0_4_0;
-- webhook_retire_secret gains force.
ALTER FUNCTION @extschema@.webhook_retire_secret(text, text)
    RENAME TO webhook_retire_secret_0_4_0;
CREATE FUNCTION @extschema@.webhook_retire_secret(
    provider              text,
    secret_or_fingerprint text,
    force                 boolean DEFAULT false
) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    target webhook.provider_secrets;
BEGIN
    SELECT * INTO target
      FROM webhook.provider_secrets s
     WHERE s.provider = webhook_retire_secret.provider
       AND s.retired_at IS NULL
       AND s.fingerprint IN (webhook_retire_secret.secret_or_fingerprint,
                             webhook._fingerprint(webhook_retire_secret.secret_or_fingerprint))
       FOR UPDATE;
    IF FOUND AND target.last_used_at > now() - interval '1 day' THEN
        IF NOT coalesce(webhook_retire_secret.force, false) THEN
            RAISE EXCEPTION 'webhook_retire_secret: secret % of provider "%" verified a delivery at %, within the last day',
                target.fingerprint, target.provider, target.last_used_at
                USING ERRCODE = 'object_not_in_prerequisite_state',
                      DETAIL = 'Deliveries the provider still signs with it would be refused once it is retired.',
                      HINT = 'Retire it once webhook.secret_usage shows the new secret verifying deliveries and this one idle, or pass force => true.';
        END IF;
        RAISE WARNING 'webhook_retire_secret: secret % of provider "%" verified a delivery at %; deliveries still signed with it will be refused',
            target.fingerprint, target.provider, target.last_used_at;
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


CREATE FUNCTION @extschema@."webhook_receive"(
	"provider" TEXT,
	"headers" jsonb,
	"body" bytea,
	"lease" interval DEFAULT NULL,
	"inbox" bool DEFAULT NULL,
	"url" TEXT DEFAULT NULL
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
	"event_type_signed" bool,
	"response" TEXT,
	"response_type" TEXT
)
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'receive_request_wrapper';

CREATE FUNCTION @extschema@."webhook_receive"(
	"provider" TEXT,
	"headers" jsonb,
	"body" TEXT,
	"lease" interval DEFAULT NULL,
	"inbox" bool DEFAULT NULL,
	"url" TEXT DEFAULT NULL
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
	"event_type_signed" bool,
	"response" TEXT,
	"response_type" TEXT
)
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'receive_request_text_wrapper';

CREATE FUNCTION @extschema@."webhook_verify"(
	"scheme" TEXT,
	"headers" jsonb,
	"body" bytea,
	"secrets" TEXT[],
	"tolerance" interval DEFAULT NULL,
	"url" TEXT DEFAULT NULL
) RETURNS bool
VOLATILE PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'verify_request_wrapper';

CREATE FUNCTION @extschema@."webhook_verify"(
	"scheme" TEXT,
	"headers" jsonb,
	"body" TEXT,
	"secrets" TEXT[],
	"tolerance" interval DEFAULT NULL,
	"url" TEXT DEFAULT NULL
) RETURNS bool
VOLATILE PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'verify_request_text_wrapper';

CREATE FUNCTION @extschema@."webhook_verify_detail"(
	"scheme" TEXT,
	"headers" jsonb,
	"body" bytea,
	"secrets" TEXT[],
	"tolerance" interval DEFAULT NULL,
	"url" TEXT DEFAULT NULL
) RETURNS TABLE (
	"valid" bool,
	"reason" TEXT,
	"signed_at" timestamp with time zone
)
VOLATILE PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'verify_request_detail_wrapper';

CREATE FUNCTION @extschema@."webhook_verify_detail"(
	"scheme" TEXT,
	"headers" jsonb,
	"body" TEXT,
	"secrets" TEXT[],
	"tolerance" interval DEFAULT NULL,
	"url" TEXT DEFAULT NULL
) RETURNS TABLE (
	"valid" bool,
	"reason" TEXT,
	"signed_at" timestamp with time zone
)
VOLATILE PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'verify_request_detail_text_wrapper';

COMMENT ON FUNCTION @extschema@.webhook_receive(text, jsonb, bytea, interval, boolean, text) IS
    'Verify a delivery with its provider''s registered scheme and secrets (and the URL it was sent to, for schemes that sign it), read its event id and type, claim it or queue it (inbox), and say what to answer (http_status; response for an endpoint handshake)';
COMMENT ON FUNCTION @extschema@.webhook_receive(text, jsonb, text, interval, boolean, text) IS
    'webhook_receive for a body passed as text';
COMMENT ON FUNCTION @extschema@.webhook_verify(text, jsonb, bytea, text[], interval, text) IS
    'Whether a delivery is signed under a provider scheme by one of the secrets (shared secrets, public keys or certificates), within the timestamp tolerance; url for schemes that sign it';
COMMENT ON FUNCTION @extschema@.webhook_verify(text, jsonb, text, text[], interval, text) IS
    'webhook_verify for a body passed as text';
COMMENT ON FUNCTION @extschema@.webhook_verify_detail(text, jsonb, bytea, text[], interval, text) IS
    'webhook_verify, saying why: (valid, reason, signed_at)';
COMMENT ON FUNCTION @extschema@.webhook_verify_detail(text, jsonb, text, text[], interval, text) IS
    'webhook_verify_detail for a body passed as text';

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
           AND n.proname || '_0_4_0' = o.proname
           -- The new one takes the old arguments first, then one more.
           AND (n.proargtypes::pg_catalog.oid[])[0:o.pronargs - 1] = (o.proargtypes::pg_catalog.oid[])[0:o.pronargs - 1]
           AND n.pronargs = o.pronargs + 1
         WHERE o.proname LIKE 'webhook\_%\_0\_4\_0'
    LOOP
        -- An old function nobody changed the privileges of (webhook_verify
        -- is for everyone) leaves the new one as created.
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

DROP FUNCTION @extschema@.webhook_receive_0_4_0(text, jsonb, bytea, interval, boolean);
DROP FUNCTION @extschema@.webhook_receive_0_4_0(text, jsonb, text, interval, boolean);
DROP FUNCTION @extschema@.webhook_verify_0_4_0(text, jsonb, bytea, text[], interval);
DROP FUNCTION @extschema@.webhook_verify_0_4_0(text, jsonb, text, text[], interval);
DROP FUNCTION @extschema@.webhook_verify_detail_0_4_0(text, jsonb, bytea, text[], interval);
DROP FUNCTION @extschema@.webhook_verify_detail_0_4_0(text, jsonb, text, text[], interval);
DROP FUNCTION @extschema@.webhook_retire_secret_0_4_0(text, text);

-- webhook_grant_app names the new webhook_receive.
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
        @extschema@.webhook_extend(uuid, interval)
        TO %s', role);
END
$$;

-- A key in the wrong format is refused when it is added, not discovered
-- as refused deliveries: webhook_check_key says what is wrong with it.
CREATE FUNCTION @extschema@."webhook_check_key"(
	"scheme" TEXT,
	"key" TEXT
) RETURNS TEXT
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'check_key_wrapper';
COMMENT ON FUNCTION @extschema@.webhook_check_key(text, text) IS
    'Why a key (secret, public key or certificate) cannot verify deliveries under a scheme, or NULL when it can';

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
    fp := webhook._fingerprint(webhook_add_secret.secret);
    INSERT INTO webhook.provider_secrets AS s (provider, secret, fingerprint)
    VALUES (webhook_add_secret.provider, webhook_add_secret.secret, fp)
    ON CONFLICT ON CONSTRAINT provider_secrets_pkey DO UPDATE SET retired_at = NULL;
    RETURN fp;
END
$$;

-- webhook_grant_operator grants the new view.
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
        webhook.secret_usage TO %s', role);
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
    'Grant an operator role the archive, the inbox, the watermarks, the views (secret usage by fingerprint included), webhook_requeue, webhook_requeue_dead, webhook_purge, webhook_reset_watermark and webhook_providers; never the secrets';

-- Who may read the registry summary may read the secrets' usage (by
-- fingerprint, never the secrets). Then initial privileges as a fresh
-- install records them.
REVOKE ALL ON webhook.secret_usage FROM PUBLIC;
DO $$
DECLARE
    grant_ record;
BEGIN
    PERFORM webhook._restrict_privileges();
    FOR grant_ IN
        SELECT pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(a.grantee)) AS grantee
          FROM pg_catalog.pg_class c
         CROSS JOIN LATERAL pg_catalog.aclexplode(c.relacl) a
         WHERE c.oid = 'webhook.provider_summary'::pg_catalog.regclass
           AND a.privilege_type = 'SELECT' AND a.grantee NOT IN (0, c.relowner)
    LOOP
        EXECUTE pg_catalog.format('GRANT SELECT ON webhook.secret_usage TO %s', grant_.grantee);
    END LOOP;
    UPDATE pg_catalog.pg_init_privs i
       SET initprivs = pg_catalog.acldefault('r', c.relowner)
      FROM pg_catalog.pg_class c
     WHERE c.oid = 'webhook.secret_usage'::pg_catalog.regclass
       AND i.objoid = c.oid AND i.classoid = 'pg_catalog.pg_class'::pg_catalog.regclass AND i.objsubid = 0;
END
$$;

------------------------------------------------------------------------------

SELECT webhook._restrict_privileges();

SELECT pg_catalog.set_config('search_path', '@extschema@, pg_temp', true);
