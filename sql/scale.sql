-- pg_webhook_inbox: one slot of a tier of databases (docs/scale-out.md).
--
-- A tier splits intake (receive, verify, deduplicate, archive, queue)
-- across 2^k slot databases behind a PL/Proxy database (proxy/). Each
-- delivery belongs to one slot, decided by its route key
-- (webhook_route_key, written in Rust: signed material only) and the
-- hash below, which PL/Proxy's RUN ON masks to the slot count exactly as
-- webhook_route_slot does. The examples compute the same in Python, Node
-- and Rust.

-- Bound to pg_catalog while this file runs (see schema.sql).
SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);

-- The first four bytes of SHA-256(provider || newline || route_key), as a
-- big-endian signed integer.
CREATE FUNCTION @extschema@.webhook_route_hash(provider text, route_key text) RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN ('x' || pg_catalog.left(pg_catalog.encode(pg_catalog.sha256(
            pg_catalog.convert_to(provider || E'\n' || route_key, 'UTF8')), 'hex'), 8))::bit(32)::integer;
COMMENT ON FUNCTION @extschema@.webhook_route_hash(text, text) IS
    'The hash a tier of databases routes by: the first four bytes of SHA-256(provider, newline, route_key) as a big-endian integer';

CREATE FUNCTION @extschema@.webhook_route_slot(provider text, route_key text, slots integer) RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN @extschema@.webhook_route_hash(provider, route_key) & (slots - 1);
COMMENT ON FUNCTION @extschema@.webhook_route_slot(text, text, integer) IS
    'The slot of a route key among slots (a power of two): webhook_route_hash masked, as PL/Proxy''s RUN ON masks it';

-- Ids made in a slot's database carry the slot in their last two bytes.
CREATE FUNCTION @extschema@.webhook_slot_of(id uuid) RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN (pg_catalog.get_byte(pg_catalog.uuid_send(id), 14) << 8)
     | pg_catalog.get_byte(pg_catalog.uuid_send(id), 15);
COMMENT ON FUNCTION @extschema@.webhook_slot_of(uuid) IS
    'The slot a delivery or lease id made in a slot''s database carries (its last two bytes): where webhook_complete, webhook_fail and webhook_extend of it go';

-- Make this database one slot of a tier: every new session of it stamps
-- its ids with the slot and refuses deliveries that route elsewhere. NULL,
-- NULL makes it a database of its own again. A superuser runs it (the
-- settings are superuser-only, so no application role can move a
-- database between slots).
CREATE FUNCTION @extschema@.webhook_set_slot(slot integer, slots integer) RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF pg_catalog.pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('webhook_set_slot');
    END IF;
    IF slot IS NULL AND slots IS NULL THEN
        EXECUTE pg_catalog.format('ALTER DATABASE %I RESET webhook.slot', pg_catalog.current_database());
        EXECUTE pg_catalog.format('ALTER DATABASE %I RESET webhook.slots', pg_catalog.current_database());
        PERFORM pg_catalog.set_config('webhook.slot', '-1', false);
        PERFORM pg_catalog.set_config('webhook.slots', '0', false);
        RETURN;
    END IF;
    IF slots IS NULL OR slots < 1 OR slots > 65536 OR slots & (slots - 1) <> 0 THEN
        RAISE EXCEPTION 'webhook_set_slot: argument "slots" must be a power of two from 1 to 65536, not %',
                coalesce(slots::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF slot IS NULL OR slot < 0 OR slot >= slots THEN
        RAISE EXCEPTION 'webhook_set_slot: argument "slot" must be from 0 to % (slots - 1), not %',
                slots - 1, coalesce(slot::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    EXECUTE pg_catalog.format('ALTER DATABASE %I SET webhook.slot = %s', pg_catalog.current_database(), slot);
    EXECUTE pg_catalog.format('ALTER DATABASE %I SET webhook.slots = %s', pg_catalog.current_database(), slots);
    PERFORM pg_catalog.set_config('webhook.slot', slot::text, false);
    PERFORM pg_catalog.set_config('webhook.slots', slots::text, false);
END;
$$;
COMMENT ON FUNCTION @extschema@.webhook_set_slot(integer, integer) IS
    'For superusers: make this database slot "slot" of a tier of "slots" databases (ids carry the slot, deliveries routed elsewhere are refused); NULL, NULL undoes it';
