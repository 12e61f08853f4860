-- pg_webhook_inbox: privileges and dump registration, run after every
-- function exists.

-- Functions that change webhook state run as the extension owner with a
-- pinned search_path (set on each function). Nobody may call them until a
-- DBA grants it to the application role:
--   GRANT EXECUTE ON FUNCTION webhook_claim(text, text, text, jsonb, text, interval),
--                             webhook_claim(text, text, text, bytea, text, interval),
--                             webhook_claim(text, text, text, text, text, interval),
--                             webhook_complete(uuid), webhook_fail(uuid, text),
--                             webhook_extend(uuid, interval)
--         TO app_role;
REVOKE EXECUTE ON FUNCTION
    @extschema@.webhook_claim(text, text, text, jsonb, text, interval),
    @extschema@.webhook_claim(text, text, text, bytea, text, interval),
    @extschema@.webhook_claim(text, text, text, text, text, interval),
    @extschema@.webhook_complete(uuid),
    @extschema@.webhook_fail(uuid, text),
    @extschema@.webhook_extend(uuid, interval)
FROM PUBLIC;

-- verify_hmac reads no table; it stays callable by everyone.

-- Keep the rows across pg_dump / pg_restore: losing webhook.events would
-- lose the dedup of every event ever processed.
SELECT pg_catalog.pg_extension_config_dump('webhook.events', '');
SELECT pg_catalog.pg_extension_config_dump('webhook.deliveries', '');
