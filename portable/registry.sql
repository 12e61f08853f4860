-- pg_webhook_inbox, portable edition: the registry's trigger and the
-- quarantines' lock (src/registry.rs and src/inbox/flow.rs in the
-- compiled edition).

-- Bound to pg_catalog while this file runs (see schema.sql).
SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);

-- The compiled edition keeps a copy of the registry in each backend, and
-- this trigger drops every copy when the registry changes. The portable
-- edition reads the registry's tables at each call and keeps no copy:
-- there is nothing to drop, and the trigger (which sql/finalize.sql puts
-- on the same tables in both editions) returns at once.
CREATE FUNCTION @extschema@.webhook_registry_changed() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN NULL;
END
$$;

-- Wait until no call of webhook_next may still set aside a provider's
-- quarantined events, and keep new ones from it until the transaction
-- ends: the quarantines' lock, taken alone (webhook_next takes it shared).
CREATE FUNCTION webhook._lock_quarantines(provider text) RETURNS void
LANGUAGE sql VOLATILE STRICT
BEGIN ATOMIC
    SELECT pg_advisory_xact_lock(webhook._lock_key('quarantine', provider));
END;

SELECT pg_catalog.set_config('search_path', '@extschema@, pg_temp', true);
