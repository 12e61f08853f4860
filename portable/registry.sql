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

-- The public keys of the registry (Ed25519, P-256, PayPal's certificates'
-- RSA keys), each read once, when it is registered: in PL/pgSQL, reading
-- a key is a fair part of a check (decoding an Ed25519 point, walking a
-- certificate's DER), and webhook_receive would otherwise do it for every
-- delivery. The compiled edition reads a key in microseconds and has no
-- such table.
--
-- Each row is derived from a secret and the scheme it was read for, and
-- webhook_receive takes it only while the provider has that scheme, else
-- reads the secret itself. So no key is wrong for being old or missing:
-- the triggers below keep the rows as the registry is, an upgrade reads
-- every key again, and a plain script's database restored by pg_dump may
-- hold a row twice (its triggers read the keys as the secrets are
-- restored, then the rows are restored too): there is no primary key to
-- refuse the copy, which is the same row again.
CREATE TABLE IF NOT EXISTS webhook._public_keys (
    provider    text    NOT NULL,
    fingerprint text    NOT NULL,
    scheme      text    NOT NULL,   -- the provider's scheme it was read for
    kind        text    NOT NULL CONSTRAINT _public_keys_kind_check CHECK (kind IN ('ed25519', 'p256', 'rsa')),
    bytes       bytea,              -- ed25519: the point's encoding
    nums        numeric[],          -- ed25519, p256: {x, y}; rsa: {n, e, n's length in bytes}
    name        text,               -- rsa: the certificate's URL
    CONSTRAINT _public_keys_secret_fkey FOREIGN KEY (provider, fingerprint)
        REFERENCES webhook.provider_secrets (provider, fingerprint) ON DELETE CASCADE ON UPDATE CASCADE
);
CREATE INDEX IF NOT EXISTS _public_keys_secret_idx ON webhook._public_keys (provider, fingerprint);
REVOKE ALL ON webhook._public_keys FROM PUBLIC;
COMMENT ON TABLE webhook._public_keys IS
    'The registry''s public keys as read when registered (portable edition): what webhook_receive verifies with. Derived from webhook.provider_secrets; never granted to anyone.';

-- Read the public keys of one provider's secrets (all of them, when
-- fingerprint is NULL) for the scheme it has now.
CREATE FUNCTION webhook._read_public_keys(provider text, fingerprint text) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    scheme text;
    s      webhook._scheme;
BEGIN
    DELETE FROM webhook._public_keys pk
     WHERE pk.provider = _read_public_keys.provider
       AND (_read_public_keys.fingerprint IS NULL OR pk.fingerprint = _read_public_keys.fingerprint);
    SELECT x.scheme INTO scheme FROM webhook.providers x WHERE x.name = _read_public_keys.provider;
    -- The registry's schemes were checked when registered; a row a DBA
    -- wrote by hand with one that is no scheme is webhook_receive's to
    -- refuse, by its name, when a delivery comes.
    BEGIN
        s := webhook._parse_scheme('webhook_register_provider', 'scheme', scheme);
    EXCEPTION WHEN undefined_object OR syntax_error OR invalid_parameter_value THEN
        RETURN;
    END;
    INSERT INTO webhook._public_keys (provider, fingerprint, scheme, kind, bytes, nums, name)
    SELECT ps.provider, ps.fingerprint, scheme, (r.k).kind, (r.k).bytes, (r.k).nums, (r.k).name
      FROM webhook.provider_secrets ps
     CROSS JOIN LATERAL (SELECT webhook._scheme_key(s, ps.secret) AS k) r
     WHERE ps.provider = _read_public_keys.provider
       AND (_read_public_keys.fingerprint IS NULL OR ps.fingerprint = _read_public_keys.fingerprint)
       AND (r.k).kind IN ('ed25519', 'p256', 'rsa');
END
$$;

CREATE FUNCTION webhook._public_keys_changed() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF TG_TABLE_NAME = 'providers' THEN
        PERFORM webhook._read_public_keys(NEW.name, NULL);
    ELSE
        PERFORM webhook._read_public_keys(NEW.provider, NEW.fingerprint);
    END IF;
    RETURN NULL;
END
$$;

-- Always, as the registry's own triggers: a restore or a logical
-- replication apply (session_replication_role = replica) reads the keys
-- as well.
CREATE OR REPLACE TRIGGER _public_keys_read
    AFTER INSERT OR UPDATE OF provider, secret, fingerprint ON webhook.provider_secrets
    FOR EACH ROW EXECUTE FUNCTION webhook._public_keys_changed();
CREATE OR REPLACE TRIGGER _public_keys_read
    AFTER UPDATE OF scheme ON webhook.providers
    FOR EACH ROW WHEN (OLD.scheme IS DISTINCT FROM NEW.scheme) EXECUTE FUNCTION webhook._public_keys_changed();
ALTER TABLE webhook.provider_secrets ENABLE ALWAYS TRIGGER _public_keys_read;
ALTER TABLE webhook.providers ENABLE ALWAYS TRIGGER _public_keys_read;

-- Every key read again: at install there are none; an upgrade reads the
-- registered ones with this version's code.
DELETE FROM webhook._public_keys;
SELECT webhook._read_public_keys(x.name, NULL) FROM webhook.providers x;

-- Wait until no call of webhook_next may still set aside a provider's
-- quarantined events, and keep new ones from it until the transaction
-- ends: the quarantines' lock, taken alone (webhook_next takes it shared).
CREATE FUNCTION webhook._lock_quarantines(provider text) RETURNS void
LANGUAGE sql VOLATILE STRICT
BEGIN ATOMIC
    SELECT pg_advisory_xact_lock(webhook._lock_key('quarantine', provider));
END;

SELECT pg_catalog.set_config('search_path', '@extschema@, pg_temp', true);
