-- pg_webhook_inbox_proxy: the proxy of an intake tier (docs/scale-out.md).
--
-- The proxy database holds no secret and no event: it routes each call to
-- the slot database (pg_webhook_inbox, webhook_set_slot) that owns it,
-- through PL/Proxy, under the same function names a slot has:
--
--   * webhook_receive by the delivery's route key: webhook_route_key
--     (the extension's own library, so the rule is the slots' rule,
--     signed material only) hashed by route_hash below;
--   * webhook_complete, webhook_fail, webhook_extend by the slot their id
--     carries;
--   * webhook_next on every slot (batch is per slot), webhook_next_on on
--     one;
--   * the registry (providers, secrets, filters, pauses, limits) on every
--     slot; each call is idempotent, so a partial failure is fixed by
--     running it again. The proxy keeps what routing needs of each
--     provider (scheme, event id and entity key sources), never a secret;
--   * an entity's quarantine and release on the entity's slot.
--
-- The slots are PL/Proxy's cluster 'webhook_tier', defined by the DBA as
-- a foreign server (partition_0 … partition_<2^k - 1>), with user mappings
-- from the proxy's roles to slot roles that have the application grants.
-- Every remote call runs in autocommit: nothing here joins the caller's
-- transaction (a claim through the tier is a two-phase claim).

\echo Use "CREATE EXTENSION pg_webhook_inbox_proxy CASCADE" to load this file. \quit

-- Bound to pg_catalog while this script runs: every name below is
-- qualified, and a schema the installing role put first on its path
-- cannot stand in for a built-in one. (CREATE EXTENSION restores the
-- caller's search_path when the script ends.)
SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);

CREATE SCHEMA webhook_proxy;
COMMENT ON SCHEMA webhook_proxy IS 'pg_webhook_inbox_proxy: what routing needs, and the PL/Proxy calls behind the public functions';

-- What routing needs of each provider, recorded by webhook_register_provider
-- from what the slots registered.
CREATE TABLE webhook_proxy.providers (
    name            text        PRIMARY KEY,
    scheme          text        NOT NULL,
    event_id_from   text        NOT NULL,
    entity_key_from text,
    registered_at   timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE webhook_proxy.providers IS 'Each provider''s scheme and sources, as its slots registered them: what a delivery is routed by (no secrets)';
SELECT pg_catalog.pg_extension_config_dump('webhook_proxy.providers', '');

CREATE TYPE webhook_proxy.receive_result AS (
    id                uuid,
    claimed           boolean,
    status            text,
    attempts          integer,
    result            jsonb,
    http_status       integer,
    reason            text,
    event_id          text,
    event_type        text,
    event_type_signed boolean,
    response          text,
    response_type     text
);

-- A row of webhook_next, as the slots return it.
CREATE TYPE webhook_proxy.leased AS (
    id uuid, provider text, event_id text, event_type text, payload jsonb, attempts integer,
    consumer text, delivery_id uuid, queued_at timestamptz, lease_expires_at timestamptz,
    replay_id uuid, traceparent text, origin text
);

-- webhook.provider_summary as the slots return it.
CREATE TYPE webhook_proxy.provider_summary AS (
    name text, scheme text, tolerance interval, event_id_from text, event_type_from text,
    active_secrets integer, active_fingerprints text[], retired_fingerprints text[],
    created_at timestamptz, inbox boolean, consumers text[], entity_key_from text,
    order_from text, ties text, fifo boolean
);

-- The route key, computed by the extension's library (the same code the
-- slots check deliveries with): installed on the proxy's server, not
-- created in this database.
CREATE FUNCTION webhook_proxy.route_key(scheme text, event_id_from text, entity_key_from text,
                                        headers jsonb, body bytea, url text)
RETURNS text
LANGUAGE c IMMUTABLE PARALLEL SAFE
AS '$libdir/pg_webhook_inbox', 'route_key_wrapper';

-- As webhook_route_hash on a slot.
CREATE FUNCTION webhook_proxy.route_hash(provider text, route_key text) RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN ('x' || pg_catalog.left(pg_catalog.encode(pg_catalog.sha256(
            pg_catalog.convert_to(provider || E'\n' || route_key, 'UTF8')), 'hex'), 8))::bit(32)::integer;

-- A delivery's hash, where PL/Proxy sends it. A provider the proxy does
-- not know routes by its body's digest, so its refusal is archived in one
-- place. Names are looked up and hashed exactly as given, as the slots
-- look them up: a name in other letters is a provider nobody registered
-- there either. complete_on_commit cannot cross the tier: the slot commits the
-- claim before the proxy's call returns. PL/pgSQL, whose plans last the
-- session: PL/Proxy evaluates RUN ON anew for every call, and a SQL
-- function would plan its body each time.
CREATE FUNCTION webhook_proxy.delivery_hash(provider text, headers jsonb, body bytea, url text,
                                            complete_on_commit boolean)
RETURNS integer
LANGUAGE plpgsql STABLE SECURITY DEFINER PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    registered webhook_proxy.providers;
BEGIN
    IF complete_on_commit THEN
        RAISE EXCEPTION 'webhook_receive: argument "complete_on_commit" cannot be kept through an intake tier'
            USING ERRCODE = 'feature_not_supported',
                  DETAIL = 'The slot database commits the claim before this call returns, not with this transaction.',
                  HINT = 'Queue through the tier and claim with complete_on_commit in the application''s own database (docs/scale-out.md).';
    END IF;
    SELECT * INTO registered FROM webhook_proxy.providers p WHERE p.name = delivery_hash.provider;
    RETURN webhook_proxy.route_hash(delivery_hash.provider, CASE
        WHEN registered.name IS NULL THEN 'body:' || encode(sha256(body), 'hex')
        ELSE webhook_proxy.route_key(registered.scheme, registered.event_id_from, registered.entity_key_from,
                                     headers, body, url)
    END);
END;
$$;

-- As webhook_slot_of on a slot: PL/Proxy masks it to the slot count.
CREATE FUNCTION webhook_proxy.id_hash(id uuid) RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN (pg_catalog.get_byte(pg_catalog.uuid_send(id), 14) << 8)
     | pg_catalog.get_byte(pg_catalog.uuid_send(id), 15);

---------------------------------------------------------------------------
-- Intake.

-- webhook_receive as a slot declares it, on the delivery's slot.
CREATE FUNCTION @extschema@.webhook_receive(
    provider           text,
    headers            jsonb,
    body               bytea,
    lease              interval DEFAULT NULL,
    inbox              boolean  DEFAULT NULL,
    url                text     DEFAULT NULL,
    complete_on_commit boolean  DEFAULT false,
    traceparent        text     DEFAULT NULL
) RETURNS webhook_proxy.receive_result
LANGUAGE plproxy
AS $$
    CLUSTER 'webhook_tier';
    RUN ON webhook_proxy.delivery_hash(provider, headers, body, url, complete_on_commit);
    SELECT * FROM webhook_receive(provider, headers, body, lease, inbox, url, false, traceparent);
$$;

CREATE FUNCTION @extschema@.webhook_receive(
    provider           text,
    headers            jsonb,
    body               text,
    lease              interval DEFAULT NULL,
    inbox              boolean  DEFAULT NULL,
    url                text     DEFAULT NULL,
    complete_on_commit boolean  DEFAULT false,
    traceparent        text     DEFAULT NULL
) RETURNS webhook_proxy.receive_result
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
RETURN @extschema@.webhook_receive(provider, headers, pg_catalog.convert_to(body, 'UTF8'), lease, inbox,
                                   url, complete_on_commit, traceparent);

---------------------------------------------------------------------------
-- Workers.

-- Up to batch events from every slot (batch per slot, so up to batch ×
-- slots rows); one slot down fails the call.
CREATE FUNCTION @extschema@.webhook_next(
    batch      integer  DEFAULT 1,
    consumer   text     DEFAULT 'default',
    provider   text     DEFAULT NULL,
    event_type text     DEFAULT NULL,
    lease      interval DEFAULT NULL
) RETURNS SETOF webhook_proxy.leased
LANGUAGE plproxy
AS $$
    CLUSTER 'webhook_tier';
    RUN ON ALL;
$$;

-- Up to batch events from one slot: workers that each poll their own
-- slots, and keep working while another slot is down.
CREATE FUNCTION @extschema@.webhook_next_on(
    slot       integer,
    batch      integer  DEFAULT 1,
    consumer   text     DEFAULT 'default',
    provider   text     DEFAULT NULL,
    event_type text     DEFAULT NULL,
    lease      interval DEFAULT NULL
) RETURNS SETOF webhook_proxy.leased
LANGUAGE plproxy
AS $$
    CLUSTER 'webhook_tier';
    RUN ON slot;
    SELECT * FROM webhook_next(batch, consumer, provider, event_type, lease);
$$;

CREATE FUNCTION @extschema@.webhook_complete(id uuid, result jsonb DEFAULT NULL) RETURNS void
LANGUAGE plproxy
AS $$
    CLUSTER 'webhook_tier';
    RUN ON webhook_proxy.id_hash(id);
$$;

CREATE FUNCTION @extschema@.webhook_fail(id uuid, err text, retry_in interval DEFAULT NULL,
                                         permanent boolean DEFAULT false) RETURNS void
LANGUAGE plproxy
AS $$
    CLUSTER 'webhook_tier';
    RUN ON webhook_proxy.id_hash(id);
$$;

CREATE FUNCTION @extschema@.webhook_extend(id uuid, lease interval DEFAULT NULL) RETURNS timestamptz
LANGUAGE plproxy
AS $$
    CLUSTER 'webhook_tier';
    RUN ON webhook_proxy.id_hash(id);
$$;

-- A batch goes to the slot its first id carries, and is finished there in
-- one transaction, as on a slot: take it from one webhook_next_on call
-- (whose rows share a slot). An id of another slot is unknown there, and
-- refuses the whole batch; nothing of it is finished.
CREATE FUNCTION @extschema@.webhook_complete_batch(ids uuid[]) RETURNS void
LANGUAGE plproxy
AS $$
    CLUSTER 'webhook_tier';
    RUN ON webhook_proxy.id_hash(ids[1]);
$$;

CREATE FUNCTION @extschema@.webhook_fail_batch(ids uuid[], err text, retry_in interval DEFAULT NULL,
                                               permanent boolean DEFAULT false) RETURNS void
LANGUAGE plproxy
AS $$
    CLUSTER 'webhook_tier';
    RUN ON webhook_proxy.id_hash(ids[1]);
$$;

-- Which database PL/Proxy sends a slot's calls to, and what it says it
-- holds: for operators checking the cluster map.
CREATE FUNCTION webhook_proxy.slot_database(which integer)
RETURNS TABLE (server text, database text, slot integer, slots integer)
LANGUAGE plproxy
AS $$
    CLUSTER 'webhook_tier';
    RUN ON which;
    SELECT coalesce(pg_catalog.host(pg_catalog.inet_server_addr()), 'local') || ':'
               || pg_catalog.current_setting('port') AS server,
           pg_catalog.current_database()::text AS database,
           pg_catalog.current_setting('webhook.slot')::integer AS slot,
           pg_catalog.current_setting('webhook.slots')::integer AS slots;
$$;

---------------------------------------------------------------------------
-- The registry, on every slot.

CREATE FUNCTION webhook_proxy.register_provider(
    name text, secret text, scheme text, tolerance interval, event_id_from text, event_type_from text,
    inbox boolean, consumers text[], ordering boolean, entity_key_from text, order_from text, ties text,
    fifo boolean, reroute boolean
) RETURNS SETOF webhook_proxy.provider_summary
LANGUAGE plproxy
AS $$
    CLUSTER 'webhook_tier';
    RUN ON ALL;
    TARGET webhook_register_provider;
$$;

-- webhook_register_provider on every slot, then what routing needs of it
-- here. The slots must agree on it (they do, unless one was changed by
-- hand): otherwise nothing is recorded and the call fails. Every slot
-- refuses alike to change the route of a provider it has registered,
-- unless reroute => true (the redeliveries of its events would reach
-- slots that never saw them).
CREATE FUNCTION @extschema@.webhook_register_provider(
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
    fifo            boolean  DEFAULT NULL,
    reroute         boolean  DEFAULT false
) RETURNS SETOF webhook_proxy.provider_summary
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    slot   webhook_proxy.provider_summary;
    agreed webhook_proxy.provider_summary;
BEGIN
    FOR slot IN
        SELECT * FROM webhook_proxy.register_provider(
            webhook_register_provider.name, webhook_register_provider.secret,
            webhook_register_provider.scheme, webhook_register_provider.tolerance,
            webhook_register_provider.event_id_from, webhook_register_provider.event_type_from,
            webhook_register_provider.inbox, webhook_register_provider.consumers,
            webhook_register_provider.ordering, webhook_register_provider.entity_key_from,
            webhook_register_provider.order_from, webhook_register_provider.ties,
            webhook_register_provider.fifo, webhook_register_provider.reroute)
    LOOP
        IF agreed IS NULL THEN
            agreed := slot;
        ELSIF (slot.name, slot.scheme, slot.event_id_from, slot.entity_key_from)
              IS DISTINCT FROM (agreed.name, agreed.scheme, agreed.event_id_from, agreed.entity_key_from) THEN
            RAISE EXCEPTION 'webhook_register_provider: the slots route provider "%" differently', slot.name
                USING ERRCODE = 'object_not_in_prerequisite_state',
                      DETAIL = pg_catalog.format('One slot has scheme %s, event id from %s, entity key from %s; another %s, %s, %s.',
                                                 agreed.scheme, agreed.event_id_from, coalesce(agreed.entity_key_from, 'none'),
                                                 slot.scheme, slot.event_id_from, coalesce(slot.entity_key_from, 'none')),
                      HINT = 'Register the provider through the proxy again, with every argument given.';
        END IF;
    END LOOP;
    INSERT INTO webhook_proxy.providers AS p (name, scheme, event_id_from, entity_key_from)
    VALUES (agreed.name, agreed.scheme, agreed.event_id_from, agreed.entity_key_from)
    ON CONFLICT ON CONSTRAINT providers_pkey DO UPDATE
       SET scheme = excluded.scheme, event_id_from = excluded.event_id_from,
           entity_key_from = excluded.entity_key_from, registered_at = now();
    RETURN NEXT agreed;
END;
$$;

-- One row per slot.
CREATE FUNCTION @extschema@.webhook_add_secret(provider text, secret text) RETURNS SETOF text
LANGUAGE plproxy
AS $$
    CLUSTER 'webhook_tier';
    RUN ON ALL;
$$;

CREATE FUNCTION @extschema@.webhook_retire_secret(provider text, secret_or_fingerprint text,
                                                  force boolean DEFAULT false) RETURNS SETOF void
LANGUAGE plproxy
AS $$
    CLUSTER 'webhook_tier';
    RUN ON ALL;
$$;

CREATE FUNCTION @extschema@.webhook_set_filter(provider text, consumer text DEFAULT NULL,
                                               event_types text[] DEFAULT NULL,
                                               payload_path jsonpath DEFAULT NULL) RETURNS SETOF boolean
LANGUAGE plproxy
AS $$
    CLUSTER 'webhook_tier';
    RUN ON ALL;
$$;

CREATE FUNCTION @extschema@.webhook_pause(provider text DEFAULT NULL, consumer text DEFAULT NULL,
                                          reason text DEFAULT NULL) RETURNS SETOF boolean
LANGUAGE plproxy
AS $$
    CLUSTER 'webhook_tier';
    RUN ON ALL;
$$;

CREATE FUNCTION @extschema@.webhook_resume(provider text DEFAULT NULL, consumer text DEFAULT NULL)
RETURNS SETOF boolean
LANGUAGE plproxy
AS $$
    CLUSTER 'webhook_tier';
    RUN ON ALL;
$$;

-- Limits hold per slot: a cap of 8 leases is 8 in each slot, a rate of
-- 100 a second is 100 in each.
CREATE FUNCTION @extschema@.webhook_set_limit(consumer text, provider text DEFAULT NULL,
                                              max_leases integer DEFAULT NULL,
                                              rate double precision DEFAULT NULL,
                                              burst integer DEFAULT NULL,
                                              breaker_failures integer DEFAULT NULL,
                                              breaker_cooldown interval DEFAULT NULL) RETURNS SETOF void
LANGUAGE plproxy
AS $$
    CLUSTER 'webhook_tier';
    RUN ON ALL;
$$;

-- An entity lives in one slot (its route key is its entity key): its
-- quarantine and release go there.
CREATE FUNCTION @extschema@.webhook_quarantine(provider text, entity_key text, consumer text DEFAULT NULL,
                                               reason text DEFAULT NULL) RETURNS bigint
LANGUAGE plproxy
AS $$
    CLUSTER 'webhook_tier';
    RUN ON webhook_proxy.route_hash(provider, 'entity:' || entity_key);
$$;

CREATE FUNCTION @extschema@.webhook_release(provider text, entity_key text, consumer text DEFAULT NULL)
RETURNS bigint
LANGUAGE plproxy
AS $$
    CLUSTER 'webhook_tier';
    RUN ON webhook_proxy.route_hash(provider, 'entity:' || entity_key);
$$;

---------------------------------------------------------------------------
-- Privileges: nothing for PUBLIC; an application role gets the intake,
-- the workers' and the finishing calls; the registry stays the DBA's.

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA webhook_proxy FROM PUBLIC;
REVOKE ALL ON TABLE webhook_proxy.providers FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION
    @extschema@.webhook_receive(text, jsonb, bytea, interval, boolean, text, boolean, text),
    @extschema@.webhook_receive(text, jsonb, text, interval, boolean, text, boolean, text),
    @extschema@.webhook_next(integer, text, text, text, interval),
    @extschema@.webhook_next_on(integer, integer, text, text, text, interval),
    @extschema@.webhook_complete(uuid, jsonb),
    @extschema@.webhook_fail(uuid, text, interval, boolean),
    @extschema@.webhook_extend(uuid, interval),
    @extschema@.webhook_complete_batch(uuid[]),
    @extschema@.webhook_fail_batch(uuid[], text, interval, boolean),
    @extschema@.webhook_register_provider(text, text, text, interval, text, text, boolean, text[], boolean,
                                          text, text, text, boolean, boolean),
    @extschema@.webhook_add_secret(text, text),
    @extschema@.webhook_retire_secret(text, text, boolean),
    @extschema@.webhook_set_filter(text, text, text[], jsonpath),
    @extschema@.webhook_pause(text, text, text),
    @extschema@.webhook_resume(text, text),
    @extschema@.webhook_set_limit(text, text, integer, double precision, integer, integer, interval),
    @extschema@.webhook_quarantine(text, text, text, text),
    @extschema@.webhook_release(text, text, text)
FROM PUBLIC;

-- An application role of the tier: it may call the intake, workers' and
-- finishing functions. Its calls reach the slots as the role its user
-- mapping on server webhook_tier names (which needs webhook_grant_app
-- there), and it needs USAGE on that server.
CREATE FUNCTION @extschema@.webhook_proxy_grant_app(role regrole) RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    EXECUTE pg_catalog.format('GRANT USAGE ON SCHEMA webhook_proxy TO %s', role);
    EXECUTE pg_catalog.format($grant$GRANT EXECUTE ON FUNCTION
        @extschema@.webhook_receive(text, jsonb, bytea, interval, boolean, text, boolean, text),
        @extschema@.webhook_receive(text, jsonb, text, interval, boolean, text, boolean, text),
        @extschema@.webhook_next(integer, text, text, text, interval),
        @extschema@.webhook_next_on(integer, integer, text, text, text, interval),
        @extschema@.webhook_complete(uuid, jsonb),
        @extschema@.webhook_fail(uuid, text, interval, boolean),
        @extschema@.webhook_extend(uuid, interval),
        @extschema@.webhook_complete_batch(uuid[]),
        @extschema@.webhook_fail_batch(uuid[], text, interval, boolean),
        webhook_proxy.delivery_hash(text, jsonb, bytea, text, boolean),
        webhook_proxy.route_hash(text, text),
        webhook_proxy.id_hash(uuid)
        TO %s$grant$, role);
END;
$$;
REVOKE ALL ON FUNCTION @extschema@.webhook_proxy_grant_app(regrole) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.webhook_proxy_grant_app(regrole) IS
    'Let an application role receive, lease and finish through the tier; it also needs USAGE on server webhook_tier and a user mapping to a slot role with webhook_grant_app';
