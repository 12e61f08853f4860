-- pg_webhook_inbox: privileges and dump registration, run after every
-- function exists.
--
-- Everything that reads or writes webhook state runs as the extension
-- owner with a pinned search_path (set on each function), and nobody may
-- call it until a DBA grants it:
--   SELECT webhook_grant_app('app_role');        -- handlers
--   SELECT webhook_grant_operator('ops_role');   -- views and maintenance
-- Managing providers and secrets stays with the extension owner unless
-- granted explicitly.
--
-- The rule, rather than a list that could miss a new function: every
-- function of the extension is revoked from PUBLIC, except verify_hmac,
-- webhook_verify and webhook_verify_detail, which read no table and stay
-- callable by everyone.
DO $$
DECLARE
    f pg_catalog.regprocedure;
BEGIN
    FOR f IN
        SELECT d.objid::pg_catalog.regprocedure
          FROM pg_catalog.pg_depend d
          JOIN pg_catalog.pg_extension x ON x.oid = d.refobjid
          JOIN pg_catalog.pg_proc p ON p.oid = d.objid
         WHERE d.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass
           AND d.refclassid = 'pg_catalog.pg_extension'::pg_catalog.regclass
           AND d.deptype = 'e'
           AND x.extname = 'pg_webhook_inbox'
           AND p.proname NOT IN ('verify_hmac', 'webhook_verify', 'webhook_verify_detail')
    LOOP
        EXECUTE pg_catalog.format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f);
    END LOOP;
END
$$;
REVOKE ALL ON ALL TABLES IN SCHEMA webhook FROM PUBLIC;

-- Keep the rows across pg_dump / pg_restore: losing webhook.events would
-- lose the dedup of every event ever processed.
SELECT pg_catalog.pg_extension_config_dump('webhook.events', '');
SELECT pg_catalog.pg_extension_config_dump('webhook.delivery_log', '');
SELECT pg_catalog.pg_extension_config_dump('webhook.delivery_failures', '');
SELECT pg_catalog.pg_extension_config_dump('webhook.providers', '');
SELECT pg_catalog.pg_extension_config_dump('webhook.provider_secrets', '');
