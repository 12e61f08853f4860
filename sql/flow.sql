-- pg_webhook_inbox: steering the inbox.
--
-- Operators steer what webhook_next hands out, never what intake takes:
-- a delivery is verified, archived, deduplicated, queued and answered 2xx
-- whatever is paused or limited here. Everything acts in the statement
-- that leases, with no process of its own:
--
--   webhook.pauses    a provider, a consumer, or both, paused: their ready
--                     events are not leased until webhook_resume. A row
--                     naming an entity quarantines it: its events are set
--                     aside (run_at 'infinity') until webhook_release.
--   webhook.limits    per consumer (and optionally one provider): at most
--                     max_leases leases live at once; at most rate leases
--                     a second, burst at a time; a circuit breaker that
--                     stops leasing after breaker_failures failures in a
--                     row, and lets one event through after
--                     breaker_cooldown. Breakers are kept per provider
--                     even under a consumer-wide limit: one provider's
--                     failures (one team's, where scopes split a database
--                     between teams) never stop another's events.
--   webhook.limit_slots   the rows caps and rates are enforced with.
--   webhook.breakers      each breaker's state, one per consumer and
--                         provider whose events have failed.
--
-- Caps and rates hold across every backend without a lock anyone waits
-- for: a cap of N is N slot rows, each holding the lease it was last
-- given; a rate of R a second with a burst of B is B slot rows, each
-- usable once every B/R seconds. webhook_next takes free slots FOR UPDATE
-- SKIP LOCKED (a slot another worker is filling is skipped, not waited
-- for), leases at most as many events, and writes the leases into the
-- slots it used. A rolled-back lease frees its slot with it.
--
-- Pauses and limits are read by webhook_next from a per-backend cache that
-- a committed change drops in every backend (the trigger in finalize.sql),
-- so a pause takes hold at the next call and a consumer nobody limits pays
-- nothing for the feature.

-- Bound to pg_catalog while this file runs (see schema.sql).
SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);

CREATE TABLE webhook.pauses (
    -- '' : every provider / every consumer / the whole queue.
    provider   text        NOT NULL DEFAULT '',
    consumer   text        NOT NULL DEFAULT '',
    entity_key text        NOT NULL DEFAULT '',
    paused_at  timestamptz NOT NULL DEFAULT pg_catalog.now(),
    paused_by  text        NOT NULL DEFAULT SESSION_USER,
    reason     text,
    CONSTRAINT pauses_pkey PRIMARY KEY (provider, consumer, entity_key),
    CONSTRAINT pauses_scope_check CHECK (provider <> '' OR consumer <> ''),
    CONSTRAINT pauses_entity_check CHECK (entity_key = '' OR provider <> ''),
    CONSTRAINT pauses_reason_check CHECK (pg_catalog.octet_length(reason) <= 2048)
);
COMMENT ON TABLE webhook.pauses IS
    'Paused inbox work: a provider, a consumer or both (entity_key empty), or one entity of a provider quarantined; set with webhook_pause and webhook_quarantine';
COMMENT ON COLUMN webhook.pauses.provider IS 'The provider paused; empty: every provider (of the consumer)';
COMMENT ON COLUMN webhook.pauses.consumer IS 'The consumer paused; empty: every consumer (of the provider)';
COMMENT ON COLUMN webhook.pauses.entity_key IS 'A quarantined entity (the key the provider''s ordering reads); empty for a pause';
COMMENT ON COLUMN webhook.pauses.paused_at IS 'When it was paused';
COMMENT ON COLUMN webhook.pauses.paused_by IS 'Who paused it (the session user)';
COMMENT ON COLUMN webhook.pauses.reason IS 'Why, as the operator said';

CREATE TABLE webhook.limits (
    consumer         text             NOT NULL,
    -- '' : every provider's events of the consumer, together.
    provider         text             NOT NULL DEFAULT '',
    max_leases       integer
                     CONSTRAINT limits_max_leases_check CHECK (max_leases BETWEEN 1 AND 10000),
    rate             double precision
                     CONSTRAINT limits_rate_check CHECK (rate > 0 AND rate <= 100000),
    burst            integer
                     CONSTRAINT limits_burst_check CHECK (burst BETWEEN 1 AND 10000),
    breaker_failures integer
                     CONSTRAINT limits_breaker_failures_check CHECK (breaker_failures BETWEEN 1 AND 1000000),
    breaker_cooldown interval
                     CONSTRAINT limits_breaker_cooldown_check CHECK (breaker_cooldown > interval '0'),
    updated_at       timestamptz      NOT NULL DEFAULT pg_catalog.now(),
    updated_by       text             NOT NULL DEFAULT SESSION_USER,
    CONSTRAINT limits_pkey PRIMARY KEY (consumer, provider),
    CONSTRAINT limits_rate_burst_check CHECK ((rate IS NULL) = (burst IS NULL)),
    CONSTRAINT limits_breaker_check CHECK ((breaker_failures IS NULL) = (breaker_cooldown IS NULL)),
    CONSTRAINT limits_any_check CHECK (max_leases IS NOT NULL OR rate IS NOT NULL OR breaker_failures IS NOT NULL)
);
COMMENT ON TABLE webhook.limits IS
    'Limits on what webhook_next leases for a consumer (optionally of one provider): a concurrency cap, a rate, a circuit breaker; set with webhook_set_limit';
COMMENT ON COLUMN webhook.limits.consumer IS 'The consumer limited';
COMMENT ON COLUMN webhook.limits.provider IS 'The provider whose events are limited; empty: all of the consumer''s, together';
COMMENT ON COLUMN webhook.limits.max_leases IS 'At most this many leases live at once';
COMMENT ON COLUMN webhook.limits.rate IS 'At most this many leases a second, on average';
COMMENT ON COLUMN webhook.limits.burst IS 'At most this many leases at once within the rate';
COMMENT ON COLUMN webhook.limits.breaker_failures IS 'Failed attempts in a row (webhook_fail) that open the circuit breaker';
COMMENT ON COLUMN webhook.limits.breaker_cooldown IS 'How long an open breaker leases nothing before letting one event through';
COMMENT ON COLUMN webhook.limits.updated_at IS 'When the limit was last set';
COMMENT ON COLUMN webhook.limits.updated_by IS 'Who set it (the session user)';

CREATE TYPE webhook.slot_kind AS ENUM ('lease', 'rate');
COMMENT ON TYPE webhook.slot_kind IS
    'What a limit slot stands for: lease (one of max_leases live leases), rate (one of burst leases per burst/rate seconds)';

CREATE TABLE webhook.limit_slots (
    consumer text              NOT NULL,
    provider text              NOT NULL,
    kind     webhook.slot_kind NOT NULL,
    n        integer           NOT NULL,
    -- The lease the slot was last given; a lease slot is free once that
    -- lease is no longer live.
    lease_id uuid,
    -- When it was last given; a rate slot is free burst/rate seconds after.
    used_at  timestamptz,
    CONSTRAINT limit_slots_pkey PRIMARY KEY (consumer, provider, kind, n),
    CONSTRAINT limit_slots_limit_fkey FOREIGN KEY (consumer, provider)
        REFERENCES webhook.limits (consumer, provider) ON DELETE CASCADE
);
COMMENT ON TABLE webhook.limit_slots IS
    'The slots concurrency caps and rates are enforced with: max_leases lease slots, burst rate slots per limit';
COMMENT ON COLUMN webhook.limit_slots.consumer IS 'The limit''s consumer';
COMMENT ON COLUMN webhook.limit_slots.provider IS 'The limit''s provider (empty: all)';
COMMENT ON COLUMN webhook.limit_slots.kind IS 'lease (a concurrency slot) or rate (a rate slot)';
COMMENT ON COLUMN webhook.limit_slots.n IS 'The slot''s number, from 0';
COMMENT ON COLUMN webhook.limit_slots.lease_id IS 'The lease it was last given';
COMMENT ON COLUMN webhook.limit_slots.used_at IS 'When it was last given';

CREATE TYPE webhook.breaker_state AS ENUM ('closed', 'open', 'half_open');
COMMENT ON TYPE webhook.breaker_state IS
    'A circuit breaker: closed (leasing), open (leasing nothing until its cooldown ends), half_open (one event let through: its success closes the breaker, its failure opens it again)';

-- A breaker follows the most specific limit with a breaker that covers
-- its provider (webhook.limits: the provider's own, else the consumer's);
-- its row is made by the first failure it counts.
CREATE TABLE webhook.breakers (
    consumer   text                  NOT NULL,
    provider   text                  NOT NULL,
    state      webhook.breaker_state NOT NULL DEFAULT 'closed',
    failures   integer               NOT NULL DEFAULT 0,
    opened_at  timestamptz,
    -- Half open: the lease let through.
    probe      uuid,
    changed_at timestamptz           NOT NULL DEFAULT pg_catalog.now(),
    CONSTRAINT breakers_pkey PRIMARY KEY (consumer, provider)
);
COMMENT ON TABLE webhook.breakers IS 'Each circuit breaker''s state (its settings are in webhook.limits)';
COMMENT ON COLUMN webhook.breakers.consumer IS 'The consumer it guards';
COMMENT ON COLUMN webhook.breakers.provider IS 'The provider whose events it guards (each has its own, under a consumer-wide limit too)';
COMMENT ON COLUMN webhook.breakers.state IS 'closed, open or half_open';
COMMENT ON COLUMN webhook.breakers.failures IS 'Failed attempts since the last success';
COMMENT ON COLUMN webhook.breakers.opened_at IS 'When it last opened';
COMMENT ON COLUMN webhook.breakers.probe IS 'Half open: the lease let through';
COMMENT ON COLUMN webhook.breakers.changed_at IS 'When its state last changed';

-- Whether a lease is live: its row is leased and the lease has not run
-- out. What frees a lease slot and a half-open breaker's probe. (A view
-- says it in full: its readers would need EXECUTE on this.)
CREATE FUNCTION webhook._lease_live(lease uuid) RETURNS boolean
LANGUAGE sql STABLE
AS $$
SELECT EXISTS (SELECT FROM webhook.inbox i
                WHERE i.claim_id = lease AND i.status = 'leased'
                  AND i.run_at > pg_catalog.clock_timestamp())
$$;
COMMENT ON FUNCTION webhook._lease_live(uuid) IS 'Internal: whether a lease is live (leased, not run out)';

-- The checks every steering function makes of a name it is given.
CREATE FUNCTION webhook._check_name(fn text, arg text, value text, required boolean) RETURNS text
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF value IS NULL THEN
        IF required THEN
            RAISE EXCEPTION '%: argument "%" must not be NULL', fn, arg
                USING ERRCODE = 'null_value_not_allowed';
        END IF;
        RETURN '';
    END IF;
    IF value = '' OR pg_catalog.octet_length(value) > 255 THEN
        RAISE EXCEPTION '%: argument "%" must be 1 to 255 bytes', fn, arg
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN value;
END
$$;
COMMENT ON FUNCTION webhook._check_name(text, text, text, boolean) IS
    'Internal: a steering function''s name argument checked (NULL refused when required, else read as every one: empty)';

-- Pause a provider (for every consumer), a consumer (for every provider),
-- or one consumer's events of one provider. Intake goes on; webhook_next
-- leases none of their events until webhook_resume. Leases already taken
-- run to their end. Returns whether it was not paused already.
CREATE FUNCTION @extschema@.webhook_pause(
    provider text DEFAULT NULL,
    consumer text DEFAULT NULL,
    reason   text DEFAULT NULL
) RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p text := webhook._check_name('webhook_pause', 'provider', webhook_pause.provider, false);
    c text := webhook._check_name('webhook_pause', 'consumer', webhook_pause.consumer, false);
    added boolean;
BEGIN
    IF pg_catalog.pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('webhook_pause');
    END IF;
    IF p = '' AND c = '' THEN
        RAISE EXCEPTION 'webhook_pause: argument "provider" or "consumer" must be given'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF pg_catalog.octet_length(webhook_pause.reason) > 2048 THEN
        RAISE EXCEPTION 'webhook_pause: argument "reason" must be at most 2048 bytes'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO webhook.pauses (provider, consumer, reason)
    VALUES (p, c, webhook_pause.reason)
    ON CONFLICT ON CONSTRAINT pauses_pkey DO NOTHING
    RETURNING true INTO added;
    RETURN coalesce(added, false);
END
$$;
COMMENT ON FUNCTION @extschema@.webhook_pause(text, text, text) IS
    'For operators: stop leasing a provider''s events, a consumer''s, or one consumer''s of one provider (intake goes on); returns whether it was not paused already';

-- Undo webhook_pause for exactly that provider and consumer, and close
-- their open circuit breakers (an operator who says "go" means it).
-- Returns whether anything was paused or open.
CREATE FUNCTION @extschema@.webhook_resume(
    provider text DEFAULT NULL,
    consumer text DEFAULT NULL
) RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p text := webhook._check_name('webhook_resume', 'provider', webhook_resume.provider, false);
    c text := webhook._check_name('webhook_resume', 'consumer', webhook_resume.consumer, false);
    resumed bigint;
    closed bigint;
BEGIN
    IF pg_catalog.pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('webhook_resume');
    END IF;
    IF p = '' AND c = '' THEN
        RAISE EXCEPTION 'webhook_resume: argument "provider" or "consumer" must be given'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    DELETE FROM webhook.pauses s WHERE s.provider = p AND s.consumer = c AND s.entity_key = '';
    GET DIAGNOSTICS resumed = ROW_COUNT;
    UPDATE webhook.breakers b
       SET state = 'closed', failures = 0, probe = NULL, changed_at = pg_catalog.now()
     WHERE b.state <> 'closed'
       AND (p = '' OR b.provider = p) AND (c = '' OR b.consumer = c);
    GET DIAGNOSTICS closed = ROW_COUNT;
    RETURN resumed + closed > 0;
END
$$;
COMMENT ON FUNCTION @extschema@.webhook_resume(text, text) IS
    'For operators: lease a paused provider''s or consumer''s events again (the same provider and consumer as webhook_pause), and close their open circuit breakers; returns whether anything was paused or open';

-- Quarantine one entity of a provider registered with ordering (for one
-- consumer, or all): its ready events are set aside now, and so is every
-- later one webhook_next comes across, until webhook_release. The rest of
-- the queue drains past them. Returns how many were set aside now.
CREATE FUNCTION @extschema@.webhook_quarantine(
    provider   text,
    entity_key text,
    consumer   text DEFAULT NULL,
    reason     text DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p text := webhook._check_name('webhook_quarantine', 'provider', webhook_quarantine.provider, true);
    e text := webhook._check_name('webhook_quarantine', 'entity_key', webhook_quarantine.entity_key, true);
    c text := webhook._check_name('webhook_quarantine', 'consumer', webhook_quarantine.consumer, false);
    set_aside bigint;
BEGIN
    IF pg_catalog.pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('webhook_quarantine');
    END IF;
    IF NOT EXISTS (SELECT FROM webhook.providers r WHERE r.name = p) THEN
        RAISE EXCEPTION 'webhook_quarantine: argument "provider": no provider "%" is registered', p
            USING ERRCODE = 'undefined_object';
    END IF;
    IF NOT EXISTS (SELECT FROM webhook.providers r WHERE r.name = p AND r.entity_key_from IS NOT NULL) THEN
        RAISE EXCEPTION 'webhook_quarantine: argument "provider": "%" has no entity key', p
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'An entity is what the provider''s ordering reads (entity_key_from): register it with ordering first.';
    END IF;
    IF pg_catalog.octet_length(webhook_quarantine.reason) > 2048 THEN
        RAISE EXCEPTION 'webhook_quarantine: argument "reason" must be at most 2048 bytes'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO webhook.pauses (provider, consumer, entity_key, reason)
    VALUES (p, c, e, webhook_quarantine.reason)
    ON CONFLICT ON CONSTRAINT pauses_pkey DO NOTHING;
    UPDATE webhook.inbox i SET run_at = 'infinity'
     WHERE i.provider = p AND i.entity_key = e AND (c = '' OR i.consumer = c)
       AND i.status = 'ready' AND i.run_at <> 'infinity';
    GET DIAGNOSTICS set_aside = ROW_COUNT;
    RETURN set_aside;
END
$$;
COMMENT ON FUNCTION @extschema@.webhook_quarantine(text, text, text, text) IS
    'For operators: set one entity''s inbox events aside (one consumer''s, or all), now and as more arrive, until webhook_release; intake goes on; returns how many were set aside now';

-- End a quarantine (the same provider, entity and consumer): the events
-- set aside are ready again, behind what is queued now, unless another
-- quarantine still covers them. Returns how many are ready again. Calls
-- of webhook_next leave the provider's events alone until it commits.
CREATE FUNCTION @extschema@.webhook_release(
    provider   text,
    entity_key text,
    consumer   text DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p text := webhook._check_name('webhook_release', 'provider', webhook_release.provider, true);
    e text := webhook._check_name('webhook_release', 'entity_key', webhook_release.entity_key, true);
    c text := webhook._check_name('webhook_release', 'consumer', webhook_release.consumer, false);
    released bigint;
BEGIN
    IF pg_catalog.pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('webhook_release');
    END IF;
    -- Wait for the calls of webhook_next that may still set this
    -- provider's events aside, and keep new ones from doing so until this
    -- transaction ends: the UPDATE below must see every event set aside.
    PERFORM webhook._lock_quarantines(p);
    DELETE FROM webhook.pauses s WHERE s.provider = p AND s.consumer = c AND s.entity_key = e;
    UPDATE webhook.inbox i
       SET run_at = webhook._due_in_turn((SELECT pg_catalog.clock_timestamp()), q.n, interval '0')
      FROM (SELECT j.delivery_id, j.consumer,
                   pg_catalog.row_number() OVER (ORDER BY j.queued_at, j.order_value, j.delivery_id, j.consumer) AS n
              FROM webhook.inbox j
             WHERE j.provider = p AND j.entity_key = e AND (c = '' OR j.consumer = c)
               AND j.status = 'ready' AND j.run_at = 'infinity'
               AND NOT EXISTS (SELECT FROM webhook.pauses s
                                WHERE s.provider = p AND s.entity_key = e AND s.consumer IN ('', j.consumer))) q
     WHERE i.delivery_id = q.delivery_id AND i.consumer = q.consumer
       AND i.status = 'ready' AND i.run_at = 'infinity';
    GET DIAGNOSTICS released = ROW_COUNT;
    RETURN released;
END
$$;
COMMENT ON FUNCTION @extschema@.webhook_release(text, text, text) IS
    'For operators: end an entity''s quarantine (the same consumer as webhook_quarantine); its events are ready again unless another quarantine covers them; returns how many';

-- Set (or, with every limit NULL, remove) a consumer's limits, for all
-- its events or one provider's. Lowering a cap refuses new leases until
-- the live ones fit; a limit changed resets its rate and breaker.
CREATE FUNCTION @extschema@.webhook_set_limit(
    consumer         text,
    provider         text DEFAULT NULL,
    max_leases       integer DEFAULT NULL,
    rate             double precision DEFAULT NULL,
    burst            integer DEFAULT NULL,
    breaker_failures integer DEFAULT NULL,
    breaker_cooldown interval DEFAULT NULL
) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c text := webhook._check_name('webhook_set_limit', 'consumer', webhook_set_limit.consumer, true);
    p text := webhook._check_name('webhook_set_limit', 'provider', webhook_set_limit.provider, false);
    b integer := webhook_set_limit.burst;
    cooldown interval := webhook_set_limit.breaker_cooldown;
    live uuid[];
BEGIN
    IF pg_catalog.pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('webhook_set_limit');
    END IF;
    IF webhook_set_limit.max_leases NOT BETWEEN 1 AND 10000 THEN
        RAISE EXCEPTION 'webhook_set_limit: argument "max_leases" must be between 1 and 10000'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT (webhook_set_limit.rate > 0 AND webhook_set_limit.rate <= 100000) THEN
        RAISE EXCEPTION 'webhook_set_limit: argument "rate" must be more than 0 and at most 100000 (leases a second)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF b NOT BETWEEN 1 AND 10000 THEN
        RAISE EXCEPTION 'webhook_set_limit: argument "burst" must be between 1 and 10000'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF b IS NOT NULL AND webhook_set_limit.rate IS NULL THEN
        RAISE EXCEPTION 'webhook_set_limit: argument "burst" needs a rate'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF webhook_set_limit.breaker_failures NOT BETWEEN 1 AND 1000000 THEN
        RAISE EXCEPTION 'webhook_set_limit: argument "breaker_failures" must be between 1 and 1000000'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF cooldown <= interval '0' THEN
        RAISE EXCEPTION 'webhook_set_limit: argument "breaker_cooldown" must be positive'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF cooldown IS NOT NULL AND webhook_set_limit.breaker_failures IS NULL THEN
        RAISE EXCEPTION 'webhook_set_limit: argument "breaker_cooldown" needs breaker_failures'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- A second's worth at once, and half a minute to cool down, unless said.
    IF webhook_set_limit.rate IS NOT NULL AND b IS NULL THEN
        b := LEAST(10000, GREATEST(1, pg_catalog.ceil(webhook_set_limit.rate)::integer));
    END IF;
    IF webhook_set_limit.breaker_failures IS NOT NULL AND cooldown IS NULL THEN
        cooldown := interval '30 seconds';
    END IF;

    -- The live leases the old cap's slots hold stay counted under the new.
    SELECT pg_catalog.array_agg(s.lease_id ORDER BY s.n) INTO live
      FROM webhook.limit_slots s
     WHERE s.consumer = c AND s.provider = p AND s.kind = 'lease' AND webhook._lease_live(s.lease_id);
    DELETE FROM webhook.limits l WHERE l.consumer = c AND l.provider = p;
    -- The breakers this limit governed start again closed under the new
    -- one (or none): the provider's own, or, for a consumer-wide limit,
    -- those of providers without a breaker of their own.
    DELETE FROM webhook.breakers b
     WHERE b.consumer = c
       AND (b.provider = p
            OR p = '' AND NOT EXISTS (SELECT FROM webhook.limits l
                                       WHERE l.consumer = c AND l.provider = b.provider
                                         AND l.breaker_failures IS NOT NULL));
    IF webhook_set_limit.max_leases IS NULL AND webhook_set_limit.rate IS NULL
       AND webhook_set_limit.breaker_failures IS NULL THEN
        RETURN;
    END IF;
    INSERT INTO webhook.limits (consumer, provider, max_leases, rate, burst, breaker_failures, breaker_cooldown)
    VALUES (c, p, webhook_set_limit.max_leases, webhook_set_limit.rate, b,
            webhook_set_limit.breaker_failures, cooldown);
    INSERT INTO webhook.limit_slots (consumer, provider, kind, n, lease_id)
    SELECT c, p, 'lease', g.n, live[g.n + 1]
      FROM pg_catalog.generate_series(0, webhook_set_limit.max_leases - 1) AS g (n);
    INSERT INTO webhook.limit_slots (consumer, provider, kind, n)
    SELECT c, p, 'rate', g.n FROM pg_catalog.generate_series(0, b - 1) AS g (n);
END
$$;
COMMENT ON FUNCTION @extschema@.webhook_set_limit(text, text, integer, double precision, integer, integer, interval) IS
    'For operators: limit what webhook_next leases for a consumer (all its events, or one provider''s): max_leases live at once, rate a second with burst at once (default: a second''s worth), a circuit breaker opening after breaker_failures failures in a row for breaker_cooldown (default 30 s); every limit NULL removes them';

-- What is paused and quarantined, and how much waits behind each.
CREATE VIEW webhook.paused AS
SELECT s.provider, s.consumer, s.entity_key,
       CASE WHEN s.entity_key <> '' THEN 'quarantine' ELSE 'pause' END AS kind,
       s.paused_at, s.paused_by, s.reason,
       (SELECT pg_catalog.count(*) FROM webhook.inbox i
         WHERE i.status = 'ready'
           AND (s.provider = '' OR i.provider = s.provider)
           AND (s.consumer = '' OR i.consumer = s.consumer)
           AND (s.entity_key = '' OR i.entity_key = s.entity_key)) AS waiting
  FROM webhook.pauses s;
COMMENT ON VIEW webhook.paused IS
    'Pauses and quarantines in effect, with how many ready events each holds back (waiting)';

-- Each limit with what it allows now.
CREATE VIEW webhook.limits_in_effect AS
SELECT l.consumer, l.provider, l.max_leases,
       (SELECT pg_catalog.count(*) FROM webhook.limit_slots s
         WHERE s.consumer = l.consumer AND s.provider = l.provider AND s.kind = 'lease'
           AND EXISTS (SELECT FROM webhook.inbox i
                        WHERE i.claim_id = s.lease_id AND i.status = 'leased'
                          AND i.run_at > pg_catalog.clock_timestamp())) AS live_leases,
       l.rate, l.burst,
       (SELECT pg_catalog.count(*) FROM webhook.limit_slots s
         WHERE s.consumer = l.consumer AND s.provider = l.provider AND s.kind = 'rate'
           AND s.used_at > pg_catalog.clock_timestamp() - pg_catalog.make_interval(secs => l.burst / l.rate))
           AS rate_used,
       l.breaker_failures, l.breaker_cooldown, b.state AS breaker_state, b.failures AS breaker_failures_now,
       b.opened_at AS breaker_opened_at, l.updated_at, l.updated_by
  FROM webhook.limits l
  -- The breakers it governs (one per provider), the worst first.
  LEFT JOIN LATERAL (
       SELECT x.state, x.failures, x.opened_at
         FROM webhook.breakers x
        WHERE l.breaker_failures IS NOT NULL AND x.consumer = l.consumer
          AND (x.provider = l.provider
               OR l.provider = '' AND NOT EXISTS (SELECT FROM webhook.limits y
                                                   WHERE y.consumer = x.consumer AND y.provider = x.provider
                                                     AND y.breaker_failures IS NOT NULL))
        ORDER BY x.state = 'open' DESC, x.state = 'half_open' DESC, x.failures DESC
        LIMIT 1) b ON true;
COMMENT ON VIEW webhook.limits_in_effect IS
    'Each limit with its live leases (of max_leases), the rate slots used in the last burst/rate seconds, and the state of the worst circuit breaker it governs (one per provider)';

SELECT pg_catalog.set_config('search_path', '@extschema@, pg_temp', true);
