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
-- The rule, rather than a list that could miss a new object: every
-- privilege on the extension's schema, tables, views, sequences and
-- functions belongs to the extension owner alone, except EXECUTE on
-- webhook_schemes, verify_hmac, webhook_verify and webhook_verify_detail,
-- which read no table and stay callable by everyone. That includes what
-- ALTER DEFAULT PRIVILEGES granted to other roles before the extension
-- existed (CREATE applied those grants to each new object): a role that
-- held such a default can read no secret and call no registry function.

-- Bound to pg_catalog while this file runs (see schema.sql).
SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);

DO $$
DECLARE
    member record;
BEGIN
    FOR member IN
        WITH members AS (
            SELECT d.classid, d.objid
              FROM pg_catalog.pg_depend d
              JOIN pg_catalog.pg_extension x ON x.oid = d.refobjid
             WHERE d.refclassid = 'pg_catalog.pg_extension'::pg_catalog.regclass
               AND d.deptype = 'e'
               AND x.extname = 'pg_webhook_inbox'
        ), grants AS (
            SELECT 'FUNCTION ' || p.oid::pg_catalog.regprocedure::text AS object,
                   a.grantee, a.privilege_type, p.proowner AS owner,
                   p.proname IN ('webhook_schemes', 'verify_hmac', 'webhook_verify',
                                 'webhook_verify_detail') AS public_function
              FROM members m
              JOIN pg_catalog.pg_proc p ON p.oid = m.objid
             CROSS JOIN LATERAL pg_catalog.aclexplode(
                   coalesce(p.proacl, pg_catalog.acldefault('f', p.proowner))) a
             WHERE m.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass
            UNION ALL
            SELECT 'TABLE ' || c.oid::pg_catalog.regclass::text, a.grantee, a.privilege_type,
                   c.relowner, false
              FROM members m
              JOIN pg_catalog.pg_class c ON c.oid = m.objid
             CROSS JOIN LATERAL pg_catalog.aclexplode(c.relacl) a
             WHERE m.classid = 'pg_catalog.pg_class'::pg_catalog.regclass
            UNION ALL
            SELECT 'SCHEMA ' || pg_catalog.quote_ident(n.nspname), a.grantee, a.privilege_type,
                   n.nspowner, false
              FROM members m
              JOIN pg_catalog.pg_namespace n ON n.oid = m.objid
             CROSS JOIN LATERAL pg_catalog.aclexplode(n.nspacl) a
             WHERE m.classid = 'pg_catalog.pg_namespace'::pg_catalog.regclass
        )
        SELECT DISTINCT g.object,
               CASE WHEN g.grantee = 0 THEN 'PUBLIC'
                    ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(g.grantee)) END AS grantee
          FROM grants g
         WHERE g.grantee <> g.owner
           AND NOT (g.public_function AND g.grantee = 0 AND g.privilege_type = 'EXECUTE')
    LOOP
        EXECUTE pg_catalog.format('REVOKE ALL ON %s FROM %s', member.object, member.grantee);
    END LOOP;
END
$$;

-- Keep the rows across pg_dump / pg_restore: losing webhook.events would
-- lose the dedup of every event ever processed.
SELECT pg_catalog.pg_extension_config_dump('webhook.events', '');
SELECT pg_catalog.pg_extension_config_dump('webhook.signature_bindings', '');
SELECT pg_catalog.pg_extension_config_dump('webhook.delivery_log', '');
SELECT pg_catalog.pg_extension_config_dump('webhook.delivery_failures', '');
SELECT pg_catalog.pg_extension_config_dump('webhook.providers', '');
SELECT pg_catalog.pg_extension_config_dump('webhook.provider_secrets', '');

SELECT pg_catalog.set_config('search_path', '@extschema@, pg_temp', true);
