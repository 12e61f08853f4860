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
REVOKE EXECUTE ON FUNCTION
    @extschema@.webhook_receive(text, jsonb, bytea, interval),
    @extschema@.webhook_receive(text, jsonb, text, interval),
    @extschema@.webhook_claim(text, text, text, jsonb, text, interval),
    @extschema@.webhook_claim(text, text, text, bytea, text, interval),
    @extschema@.webhook_claim(text, text, text, text, text, interval),
    @extschema@.webhook_complete(uuid, jsonb),
    @extschema@.webhook_fail(uuid, text),
    @extschema@.webhook_extend(uuid, interval),
    @extschema@.webhook_requeue(text, text),
    @extschema@.webhook_purge(interval, integer, integer),
    @extschema@.webhook_register_provider(text, text, text, interval, text, text),
    @extschema@.webhook_add_secret(text, text),
    @extschema@.webhook_retire_secret(text, text),
    @extschema@.webhook_providers(),
    @extschema@.webhook_grant_app(regrole),
    @extschema@.webhook_grant_operator(regrole)
FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA webhook FROM PUBLIC;
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA webhook FROM PUBLIC;

-- verify_hmac, webhook_verify and webhook_verify_detail read no table;
-- they stay callable by everyone.

-- Keep the rows across pg_dump / pg_restore: losing webhook.events would
-- lose the dedup of every event ever processed.
SELECT pg_catalog.pg_extension_config_dump('webhook.events', '');
SELECT pg_catalog.pg_extension_config_dump('webhook.delivery_log', '');
SELECT pg_catalog.pg_extension_config_dump('webhook.delivery_failures', '');
SELECT pg_catalog.pg_extension_config_dump('webhook.providers', '');
SELECT pg_catalog.pg_extension_config_dump('webhook.provider_secrets', '');
