-- pg_webhook_inbox, portable edition: the durable inbox (the compiled
-- edition's src/inbox/), in PL/pgSQL: queueing an event for each of its
-- provider's consumers, leasing ready events to workers never waiting on
-- another worker, finishing and failing leases fenced by their ids, the
-- backoff, and what steers a consumer (pauses, quarantines, caps, rates,
-- circuit breakers), and where each queue's ready rows start, as this
-- session last found them (src/inbox/heads.rs), kept in a setting of
-- the session.

-- Bound to pg_catalog while this file runs (see schema.sql).
SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);

-- Take a lock, waiting for its holder: counted against the transaction's
-- budget like a tried one (webhook._try_lock).
CREATE FUNCTION webhook._wait_lock(fn text, key bigint) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    held integer := webhook._locks_held(fn);
BEGIN
    PERFORM pg_advisory_xact_lock(key);
    held := set_config('pg_webhook_inbox.locks_held', (held + 1)::text, true);
END
$$;

-- A lease id: laid out as a delivery id, time first, with version 8 so
-- that it is never taken for one.
CREATE FUNCTION webhook._new_lease_id() RETURNS uuid
LANGUAGE sql VOLATILE PARALLEL SAFE
RETURN webhook._time_ordered_id('8');

-- Wake workers that LISTEN webhook_inbox: one notification, from at most
-- one transaction at a time (a notifying transaction serializes its
-- commit with every other one).
CREATE FUNCTION webhook._wake() RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_variable
BEGIN
    IF webhook._setting_on('webhook.inbox_notify', true)
       AND pg_try_advisory_xact_lock(webhook._lock_key('inbox', 'wake', 'up')) THEN
        PERFORM pg_notify('webhook_inbox', '');
    END IF;
END
$$;

-- Queue a new event for each of its provider's consumers and archive the
-- delivery; for an event seen before, archive the delivery as a
-- duplicate. Waits for a concurrent claim or intake of the same event:
-- only once that transaction ends is a duplicate safe to acknowledge.
CREATE FUNCTION webhook._enqueue(fn text, provider text, event_id text, event_type text, payload jsonb,
                                 raw_body bytea, signature text, headers jsonb, entity_key text,
                                 order_value text, verified_by text)
RETURNS webhook._outcome
LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_variable
DECLARE
    id     uuid := webhook._new_id();
    digest bytea := sha256(convert_to(payload::text, 'UTF8'));
    e      record;
BEGIN
    IF NOT webhook._setting_on('webhook.archive_duplicates', true) THEN
        -- A committed event row is stored for good: safe to acknowledge.
        SELECT x.attempts, x.result INTO e
          FROM webhook.events x WHERE x.provider = _enqueue.provider AND x.event_id = _enqueue.event_id;
        IF FOUND THEN
            RETURN ROW(id, 'duplicate', e.attempts, e.result, false)::webhook._outcome;
        END IF;
    END IF;
    PERFORM webhook._wait_lock(fn, webhook._lock_key(provider, event_id));
    INSERT INTO webhook.events AS x
        (provider, event_id, event_type, status, attempts, claim_id, payload_hash, entity_key, order_value)
    VALUES (provider, event_id, event_type, 'queued', 0, id, digest, entity_key, order_value::numeric)
    ON CONFLICT ON CONSTRAINT events_pkey DO NOTHING;
    IF FOUND THEN
        INSERT INTO webhook.inbox (provider, event_id, consumer, event_type, delivery_id, entity_key, order_value)
        SELECT _enqueue.provider, _enqueue.event_id, c.consumer, _enqueue.event_type, id, _enqueue.entity_key,
               _enqueue.order_value::numeric
          FROM unnest(coalesce((SELECT nullif(p.consumers, '{}') FROM webhook.providers p
                                 WHERE p.name = _enqueue.provider), '{default}')) AS c(consumer);
        PERFORM webhook._archive(id, provider, event_id, event_type, payload, raw_body, signature, headers,
                                 'queued', false, verified_by, NULL);
        PERFORM webhook._wake();
        RETURN ROW(id, 'queued', 0, NULL, false)::webhook._outcome;
    END IF;
    SELECT x.attempts, x.result, x.payload_hash INTO e
      FROM webhook.events x WHERE x.provider = _enqueue.provider AND x.event_id = _enqueue.event_id;
    PERFORM webhook._archive(id, provider, event_id, event_type, payload, raw_body, signature, headers,
                             'duplicate', e.payload_hash IS DISTINCT FROM digest, verified_by, NULL);
    RETURN ROW(id, 'duplicate', e.attempts, e.result, false)::webhook._outcome;
END
$$;

-- What a provider's filters (sql/filters.sql) do not take of a verified
-- delivery, judged on what its signature covers only: the provider's
-- (consumer '') or a consumer's, with why.
CREATE FUNCTION webhook._filter_reasons(provider text, event_type text, type_signed boolean,
                                        payload jsonb, body_signed boolean)
RETURNS TABLE (consumer text, reason text)
LANGUAGE sql STABLE
BEGIN ATOMIC
    SELECT * FROM (
        SELECT coalesce(f.consumer, ''),
               CASE WHEN type_signed AND f.event_types IS NOT NULL AND NOT event_type = ANY (f.event_types)
                        THEN format('event type %s is not among the filter''s event_types', event_type)
                    WHEN body_signed AND f.payload_path IS NOT NULL
                         AND NOT coalesce(jsonb_path_match(payload, f.payload_path, '{}', true), false)
                        THEN format('the body does not match the filter''s payload_path %s', f.payload_path)
               END AS reason
          FROM webhook.filters f
         WHERE f.provider = _filter_reasons.provider) x
     WHERE x.reason IS NOT NULL;
END;

-- A verified delivery queued by webhook_receive in inbox mode: filtered
-- where a filter does not take it, its trace context kept when it queued
-- its event.
CREATE FUNCTION webhook._enqueue_received(fn text, provider text, event_id webhook._sourced,
                                          event_type webhook._sourced, payload jsonb, raw_body bytea,
                                          signature text, headers jsonb, order_at webhook._order,
                                          verified_by text, body_signed boolean, traceparent text)
RETURNS webhook._outcome
LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_variable
DECLARE
    outcome  webhook._outcome;
    event    text;
    names    text[];
    reasons  text[];
BEGIN
    SELECT max(r.reason) FILTER (WHERE r.consumer = ''),
           array_agg(r.consumer ORDER BY r.consumer) FILTER (WHERE r.consumer <> ''),
           array_agg(r.reason ORDER BY r.consumer) FILTER (WHERE r.consumer <> '')
      INTO event, names, reasons
      FROM webhook._filter_reasons(provider, event_type.value, event_type.signed, payload, body_signed) r;
    outcome := webhook._enqueue(fn, provider, event_id.value, event_type.value, payload, raw_body, signature,
                                headers, order_at.entity_key, order_at.value, verified_by);
    IF outcome.status = 'queued' AND (event IS NOT NULL OR names IS NOT NULL) THEN
        -- Set aside as filtered: every consumer's row with the provider's
        -- reason, or the consumers' named with theirs.
        UPDATE webhook.inbox i
           SET status = 'filtered', processed_at = now(),
               last_error = coalesce(event, reasons[array_position(names, i.consumer)])
         WHERE i.delivery_id = outcome.id AND (event IS NOT NULL OR i.consumer = ANY (names));
        IF event IS NOT NULL THEN
            UPDATE webhook.delivery_log l SET claim_status = 'filtered', reject_reason = event
             WHERE l.id = outcome.id;
            outcome.status := 'filtered';
        END IF;
    END IF;
    IF outcome.status = 'queued' AND traceparent IS NOT NULL THEN
        INSERT INTO webhook.trace_contexts (delivery_id, traceparent) VALUES (outcome.id, traceparent);
    END IF;
    RETURN outcome;
END
$$;

-- webhook_enqueue's arguments, checked as the compiled edition checks
-- them (src/inbox/enqueue.rs), then the event queued.
CREATE FUNCTION webhook._enqueue_call(provider text, event_id text, event_type text, payload jsonb,
                                      raw_body bytea, signature text, traceparent text)
RETURNS webhook.enqueue_result
LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_variable
DECLARE
    fn CONSTANT text := 'webhook_enqueue';
    order_at webhook._order;
    outcome  webhook._outcome;
BEGIN
    PERFORM webhook._required_text(fn, 'provider', provider, 64);
    PERFORM webhook._required_text(fn, 'event_id', event_id, 255);
    PERFORM webhook._required_text(fn, 'event_type', event_type, 255);
    PERFORM webhook._bounded_text(fn, 'signature', signature, 8192);
    PERFORM webhook._check_scope(fn, 'provider', provider);
    order_at := webhook._order_of_payload(provider, payload);
    outcome := webhook._enqueue(fn, provider, event_id, event_type, payload, raw_body, signature, NULL,
                                order_at.entity_key, order_at.value, NULL);
    IF outcome.status = 'queued' AND traceparent IS NOT NULL THEN
        INSERT INTO webhook.trace_contexts (delivery_id, traceparent) VALUES (outcome.id, traceparent);
    END IF;
    RETURN ROW(outcome.id, outcome.status = 'queued', outcome.status)::webhook.enqueue_result;
END
$$;

CREATE FUNCTION @extschema@.webhook_enqueue(provider text, event_id text, event_type text, payload jsonb,
                                            signature text DEFAULT NULL, traceparent text DEFAULT NULL)
RETURNS webhook.enqueue_result
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    fn CONSTANT text := 'webhook_enqueue';
    checked text := webhook._traceparent(fn, traceparent);
BEGIN
    IF pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('webhook_enqueue');
    END IF;
    PERFORM webhook._required(fn, 'payload', payload);
    PERFORM webhook._payload_size(fn, 'payload', pg_column_size(payload) - 4);
    IF jsonb_typeof(payload) <> 'object' THEN
        PERFORM webhook._raise('2203C', format('%s: argument "payload" must be a JSON object, not %s', fn,
            CASE WHEN jsonb_typeof(payload) = 'array' THEN 'an array' ELSE 'a scalar' END));
    END IF;
    RETURN webhook._enqueue_call(provider, event_id, event_type, payload, NULL, signature, checked);
END
$$;

CREATE FUNCTION @extschema@.webhook_enqueue(provider text, event_id text, event_type text, body bytea,
                                            signature text DEFAULT NULL, traceparent text DEFAULT NULL)
RETURNS webhook.enqueue_result
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    fn CONSTANT text := 'webhook_enqueue';
    checked text := webhook._traceparent(fn, traceparent);
BEGIN
    IF pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('webhook_enqueue');
    END IF;
    PERFORM webhook._required(fn, 'body', body);
    PERFORM webhook._payload_size(fn, 'body', length(body));
    RETURN webhook._enqueue_call(provider, event_id, event_type, webhook._json_body(fn, 'body', body), body,
                                 signature, checked);
END
$$;

CREATE FUNCTION @extschema@.webhook_enqueue(provider text, event_id text, event_type text, body text,
                                            signature text DEFAULT NULL, traceparent text DEFAULT NULL)
RETURNS webhook.enqueue_result
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
RETURN @extschema@.webhook_enqueue(provider, event_id, event_type, convert_to(body, 'UTF8'), signature,
                                   traceparent);

-- The backoff after a failed attempt (src/inbox/backoff.rs): the base
-- delay doubled per attempt, capped, less up to a quarter by the lease
-- id's last two bytes, in microseconds.
CREATE FUNCTION webhook._backoff(attempt integer, lease uuid) RETURNS bigint
LANGUAGE sql STABLE
RETURN round(least(greatest(webhook._setting_in('webhook.backoff_base', 'ms', 10000)::integer, 1) * 1000.0
                   * power(2, least(greatest(attempt - 1, 0), 40)),
                   greatest(webhook._setting_in('webhook.backoff_max', 'ms', 3600000)::integer, 1) * 1000.0)
             * (1 - ((get_byte(uuid_send(lease), 14) * 256 + get_byte(uuid_send(lease), 15)) / 65536.0) / 4))::bigint;

-- What steers a consumer's leases, as webhook_next reads it
-- (src/controls.rs): the consumer paused, providers paused, providers
-- with quarantined entities, and the limits, in provider order.
CREATE TYPE webhook._controls AS (
    paused           boolean,
    paused_providers text[],
    quarantined      text[],
    limit_providers  text[],
    caps             boolean[],
    rate_rests       double precision[],
    breakers         boolean[]
);

CREATE FUNCTION webhook._controls(consumer text) RETURNS webhook._controls
LANGUAGE sql STABLE
BEGIN ATOMIC
    SELECT ROW(EXISTS (SELECT FROM webhook.pauses WHERE provider = '' AND pauses.consumer = _controls.consumer),
               ARRAY(SELECT provider FROM webhook.pauses
                      WHERE provider <> '' AND entity_key = '' AND pauses.consumer IN ('', _controls.consumer)),
               ARRAY(SELECT DISTINCT provider FROM webhook.pauses
                      WHERE entity_key <> '' AND pauses.consumer IN ('', _controls.consumer)),
               ARRAY(SELECT provider FROM webhook.limits WHERE limits.consumer = _controls.consumer ORDER BY provider),
               ARRAY(SELECT max_leases IS NOT NULL FROM webhook.limits WHERE limits.consumer = _controls.consumer ORDER BY provider),
               ARRAY(SELECT burst / rate FROM webhook.limits WHERE limits.consumer = _controls.consumer ORDER BY provider),
               ARRAY(SELECT breaker_failures IS NOT NULL FROM webhook.limits WHERE limits.consumer = _controls.consumer ORDER BY provider))::webhook._controls;
END;

-- Whether a consumer's limits watch a provider with a circuit breaker.
CREATE FUNCTION webhook._breaker_watches(c webhook._controls, provider text) RETURNS boolean
LANGUAGE sql IMMUTABLE
RETURN EXISTS (SELECT FROM unnest((c).limit_providers, (c).breakers) AS l(provider, breaker)
                WHERE l.breaker AND (l.provider = '' OR l.provider = _breaker_watches.provider));

-- The limit of a consumer's breaker over a provider: the provider's own,
-- else the consumer-wide one.
CREATE FUNCTION webhook._breaker_limit(consumer text, provider text) RETURNS webhook.limits
LANGUAGE sql STABLE
BEGIN ATOMIC
    SELECT l.* FROM webhook.limits l
     WHERE l.consumer = _breaker_limit.consumer AND l.provider IN (_breaker_limit.provider, '')
       AND l.breaker_failures IS NOT NULL
     ORDER BY l.provider DESC LIMIT 1;
END;

-- What a steered call of webhook_next may lease (src/inbox/flow.rs):
-- its batch, providers left out, quotas per provider, the providers
-- whose quarantines it applies, the slots and probes it took.
CREATE TYPE webhook._allowance AS (
    batch        integer,
    excluded     text[],
    quarantining text[],
    quota_providers text[],
    quotas       integer[],
    slot_providers text[],
    slot_kinds   text[],
    slot_ns      integer[],
    probes       text[],
    taken_at     timestamptz  -- when the slots were taken: a rate slot rests from then
);

CREATE FUNCTION webhook._allowance(c webhook._controls, consumer text, provider text, batch integer)
RETURNS webhook._allowance
LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_variable
DECLARE
    a        webhook._allowance;
    p        text;
    releasing text[] := '{}';
    b        record;
    l        record;
    kind     text;
    rest     double precision;
    want     integer;
    slots    integer[];
    i        integer;
BEGIN
    IF c.paused OR provider = ANY (c.paused_providers) THEN
        RETURN NULL;
    END IF;
    a := ROW(batch, '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', clock_timestamp());
    FOREACH p IN ARRAY c.quarantined LOOP
        CONTINUE WHEN provider IS NOT NULL AND provider <> p;
        IF pg_try_advisory_xact_lock_shared(webhook._lock_key('quarantine', p)) THEN
            a.quarantining := a.quarantining || p;
        ELSIF provider IS NOT NULL THEN
            RETURN NULL;
        ELSE
            releasing := releasing || p;
        END IF;
    END LOOP;
    a.excluded := c.paused_providers || releasing;
    -- Circuit breakers: an open one lets one probe through once cooled
    -- down; otherwise its provider waits.
    IF EXISTS (SELECT FROM unnest(c.limit_providers, c.breakers) AS x(provider, breaker)
                WHERE x.breaker AND (provider IS NULL OR x.provider IN ('', provider))) THEN
        FOR b IN SELECT k.provider,
                        (k.state = 'open' AND k.opened_at + (webhook._breaker_limit(consumer, k.provider)).breaker_cooldown
                                              <= clock_timestamp())
                        OR (k.state = 'half_open' AND (k.probe IS NULL OR NOT webhook._lease_live(k.probe))) AS probeable
                   FROM webhook.breakers k
                  WHERE k.consumer = _allowance.consumer AND k.state <> 'closed'
        LOOP
            CONTINUE WHEN (provider IS NOT NULL AND provider <> b.provider) OR NOT webhook._breaker_watches(c, b.provider);
            IF b.probeable
               AND EXISTS (SELECT FROM webhook.breakers k
                            WHERE k.consumer = _allowance.consumer AND k.provider = b.provider
                              FOR UPDATE SKIP LOCKED) THEN
                UPDATE webhook.breakers k
                   SET state = 'half_open', probe = NULL, changed_at = now()
                 WHERE k.consumer = _allowance.consumer AND k.provider = b.provider
                   AND ((k.state = 'open' AND k.opened_at + (webhook._breaker_limit(consumer, b.provider)).breaker_cooldown
                                                 <= clock_timestamp())
                        OR (k.state = 'half_open' AND (k.probe IS NULL OR NOT webhook._lease_live(k.probe))));
                IF FOUND THEN
                    a := webhook._limit(a, b.provider, 1);
                    a.probes := a.probes || b.provider;
                    CONTINUE;
                END IF;
            END IF;
            IF provider IS NOT NULL THEN
                RETURN NULL;
            END IF;
            a.excluded := a.excluded || b.provider;
        END LOOP;
    END IF;
    -- Caps and rates: one slot per lease.
    FOR l IN SELECT * FROM unnest(c.limit_providers, c.caps, c.rate_rests) AS x(provider, cap, rate_rest)
              WHERE provider IS NULL OR x.provider IN ('', provider)
    LOOP
        CONTINUE WHEN l.provider = ANY (a.excluded);
        FOREACH kind IN ARRAY ARRAY['lease', 'rate'] LOOP
            rest := CASE kind WHEN 'lease' THEN CASE WHEN l.cap THEN 0.0 END ELSE l.rate_rest END;
            CONTINUE WHEN rest IS NULL;
            want := webhook._allowed(a, l.provider);
            slots := '{}';
            IF want > 0 THEN
                -- Lock free-looking slots without waiting, then judge them
                -- again in a statement of their own: its snapshot sees the
                -- lease a slot's last holder committed while this one
                -- waited for nothing.
                SELECT coalesce(array_agg(s.n ORDER BY s.n), '{}') INTO slots
                  FROM (SELECT s.n FROM webhook.limit_slots s
                         WHERE s.consumer = consumer AND s.provider = l.provider
                           AND s.kind = kind::webhook.slot_kind
                           AND CASE WHEN s.kind = 'lease' THEN s.lease_id IS NULL OR NOT webhook._lease_live(s.lease_id)
                                    ELSE s.used_at IS NULL OR s.used_at <= clock_timestamp() - rest * interval '1 second' END
                         ORDER BY s.n LIMIT want
                           FOR UPDATE SKIP LOCKED) s;
                IF cardinality(slots) > 0 THEN
                    SELECT coalesce(array_agg(s.n ORDER BY s.n), '{}') INTO slots
                      FROM webhook.limit_slots s
                     WHERE s.consumer = consumer AND s.provider = l.provider
                       AND s.kind = kind::webhook.slot_kind AND s.n = ANY (slots)
                       AND CASE WHEN s.kind = 'lease' THEN s.lease_id IS NULL OR NOT webhook._lease_live(s.lease_id)
                                ELSE s.used_at IS NULL OR s.used_at <= clock_timestamp() - rest * interval '1 second' END;
                END IF;
            END IF;
            a := webhook._limit(a, l.provider, cardinality(slots));
            FOR i IN 1 .. cardinality(slots) LOOP
                a.slot_providers := a.slot_providers || l.provider;
                a.slot_kinds := a.slot_kinds || kind;
                a.slot_ns := a.slot_ns || slots[i];
            END LOOP;
        END LOOP;
    END LOOP;
    IF a.batch = 0 THEN
        RETURN NULL;
    END IF;
    -- A provider with no quota left is left out.
    a.excluded := a.excluded || ARRAY(SELECT q.p FROM unnest(a.quota_providers, a.quotas) AS q(p, n) WHERE q.n = 0);
    SELECT coalesce(array_agg(q.p ORDER BY q.o), '{}'), coalesce(array_agg(q.n ORDER BY q.o), '{}')
      INTO a.quota_providers, a.quotas
      FROM unnest(a.quota_providers, a.quotas) WITH ORDINALITY AS q(p, n, o) WHERE q.n > 0;
    RETURN a;
END
$$;

-- How many a provider may still lease ('' : the whole call).
CREATE FUNCTION webhook._allowed(a webhook._allowance, scope text) RETURNS integer
LANGUAGE sql IMMUTABLE
RETURN CASE WHEN scope = '' THEN (a).batch
            ELSE coalesce(least((a).quotas[array_position((a).quota_providers, scope)], (a).batch), (a).batch) END;

-- At most n more for a provider ('' : the whole call).
CREATE FUNCTION webhook._limit(a webhook._allowance, scope text, n integer) RETURNS webhook._allowance
LANGUAGE plpgsql IMMUTABLE
AS $$
#variable_conflict use_variable
DECLARE
    at integer;
BEGIN
    IF scope = '' THEN
        a.batch := least(a.batch, n);
        RETURN a;
    END IF;
    at := array_position(a.quota_providers, scope);
    IF at IS NULL THEN
        a.quota_providers := a.quota_providers || scope;
        a.quotas := a.quotas || n;
    ELSE
        a.quotas[at] := least(a.quotas[at], n);
    END IF;
    RETURN a;
END
$$;

-- One leased or parked row of a pick.
CREATE TYPE webhook._picked AS (
    id uuid, provider text, event_id text, event_type text, attempts integer, consumer text,
    delivery_id uuid, queued_at timestamptz, lease_expires_at timestamptz, leased boolean,
    replay_id uuid, traceparent text,
    due timestamptz  -- when the row was ready, before this pick
);

-- A ready row a pick found and locked, before it is judged: its row id,
-- what it was, whether a quarantine sets it aside, and its entity's
-- watermark for the row's consumer, set by another event.
CREATE TYPE webhook._candidate AS (
    row_id tid, provider text, event_id text, consumer text, was webhook.inbox_status, previous uuid,
    attempts integer, due timestamptz, held boolean,
    entity_key text, order_value numeric, watermark numeric, set_by text
);

-- Find ready rows (src/inbox/pick.rs) without waiting (SKIP LOCKED), one
-- queue at a time, oldest run time first, and lock them. A FIFO
-- provider's row is found only at the head of its entity's line.
-- Steered: providers left out, quotas, quarantined entities found to be
-- set aside wherever they stand in their line.
CREATE FUNCTION webhook._candidates(consumer text, provider text, event_type text, batch integer,
                                    line_providers text[], line_keys text[], turn bigint,
                                    start_providers text[], starts timestamptz[],
                                    excluded text[], quota_providers text[], quotas integer[], quarantining text[])
RETURNS webhook._candidate[]
LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_column
BEGIN
    RETURN ARRAY(
    WITH RECURSIVE found (provider) AS (
        (SELECT i.provider FROM webhook.inbox i
          WHERE i.consumer = _candidates.consumer AND i.status IN ('ready', 'leased') AND _candidates.provider IS NULL
            AND cardinality(_candidates.start_providers) = 0
          ORDER BY i.provider LIMIT 1)
        UNION ALL
        SELECT (SELECT i.provider FROM webhook.inbox i
                 WHERE i.consumer = _candidates.consumer AND i.status IN ('ready', 'leased')
                   AND i.provider > f.provider
                 ORDER BY i.provider LIMIT 1)
          FROM found f WHERE f.provider IS NOT NULL
    ), queues (provider, place) AS (
        SELECT _candidates.provider, 0::int8 WHERE _candidates.provider IS NOT NULL
        UNION ALL
        SELECT q.provider, (q.n + _candidates.turn) % q.total
          FROM (SELECT f.provider, row_number() OVER (ORDER BY f.provider) AS n, count(*) OVER () AS total
                  FROM (SELECT f.provider FROM found f WHERE f.provider IS NOT NULL
                        UNION ALL
                        SELECT h.provider FROM unnest(_candidates.start_providers) AS h(provider)
                         WHERE _candidates.provider IS NULL) f) q
    )
    SELECT c.c
      FROM (SELECT q.provider,
                   -- Where the queue's ready rows start, as this session
                   -- last found them; a FIFO queue from its start.
                   CASE WHEN EXISTS (SELECT FROM webhook.providers f WHERE f.name = q.provider AND f.fifo)
                        THEN '-infinity'::timestamptz
                        ELSE coalesce((SELECT h.since FROM unnest(_candidates.start_providers, _candidates.starts) AS h (provider, since)
                                        WHERE h.provider = q.provider), '-infinity')
                   END AS since,
                   coalesce((SELECT l.quota FROM unnest(_candidates.quota_providers, _candidates.quotas) AS l (provider, quota)
                              WHERE l.provider = q.provider), _candidates.batch) AS quota
              FROM queues q
             WHERE q.provider <> ALL (_candidates.excluded)
             ORDER BY q.place) q
     CROSS JOIN LATERAL (
           SELECT (i.ctid, i.provider, i.event_id, i.consumer, i.status, i.claim_id, i.attempts, i.run_at,
                   i.entity_key IS NOT NULL AND i.provider = ANY (_candidates.quarantining)
                       AND (i.provider, i.entity_key) IN (
                           SELECT s.provider, s.entity_key FROM webhook.pauses s
                            WHERE s.entity_key <> '' AND s.consumer IN ('', _candidates.consumer)
                              AND s.provider = ANY (_candidates.quarantining)),
                   i.entity_key, i.order_value, w.order_value, w.event_id)::webhook._candidate AS c
             FROM webhook.inbox i
             LEFT JOIN webhook.watermarks w
               ON w.provider = i.provider AND w.consumer = i.consumer
              AND w.entity_key = i.entity_key AND w.event_id <> i.event_id
            WHERE i.consumer = _candidates.consumer AND i.provider = q.provider
              AND (_candidates.event_type IS NULL OR i.event_type = _candidates.event_type)
              AND i.status IN ('ready', 'leased')
              AND i.run_at >= q.since
              AND i.run_at <= (SELECT clock_timestamp())
              AND (i.entity_key IS NULL
                   OR NOT EXISTS (SELECT FROM webhook.providers f WHERE f.name = i.provider AND f.fifo)
                   OR ((i.provider, i.entity_key) IN (SELECT * FROM unnest(_candidates.line_providers, _candidates.line_keys))
                       AND NOT EXISTS (SELECT FROM webhook.inbox j
                                        WHERE j.provider = i.provider AND j.consumer = i.consumer
                                          AND j.entity_key = i.entity_key AND j.event_id <> i.event_id
                                          AND j.status IN ('ready', 'leased')
                                          AND ((j.order_value, j.queued_at, j.event_id)
                                                   < (i.order_value, i.queued_at, i.event_id)
                                               OR (j.status = 'leased' AND j.run_at > clock_timestamp()))))
                   OR (i.provider = ANY (_candidates.quarantining)
                       AND (i.provider, i.entity_key) IN (
                           SELECT s.provider, s.entity_key FROM webhook.pauses s
                            WHERE s.entity_key <> '' AND s.consumer IN ('', _candidates.consumer)
                              AND s.provider = ANY (_candidates.quarantining))))
            ORDER BY i.run_at
            LIMIT q.quota
              FOR UPDATE OF i SKIP LOCKED
     ) c
     LIMIT _candidates.batch);
END
$$;

-- The same for the call most worker pools make: one provider's queue,
-- with no FIFO line and nothing steering the consumer. A statement of its
-- own, short enough to be planned once per session: the one above is
-- planned again on most calls.
CREATE FUNCTION webhook._queue_candidates(consumer text, provider text, event_type text, batch integer,
                                          since timestamptz)
RETURNS webhook._candidate[]
LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_column
BEGIN
    RETURN ARRAY(
    SELECT (i.ctid, i.provider, i.event_id, i.consumer, i.status, i.claim_id, i.attempts, i.run_at, false,
            i.entity_key, i.order_value, w.order_value, w.event_id)::webhook._candidate
      FROM webhook.inbox i
      LEFT JOIN webhook.watermarks w
        ON w.provider = i.provider AND w.consumer = i.consumer
       AND w.entity_key = i.entity_key AND w.event_id <> i.event_id
     WHERE i.consumer = _queue_candidates.consumer AND i.provider = _queue_candidates.provider
       AND (_queue_candidates.event_type IS NULL OR i.event_type = _queue_candidates.event_type)
       AND i.status IN ('ready', 'leased')
       AND i.run_at >= _queue_candidates.since
       AND i.run_at <= (SELECT clock_timestamp())
     ORDER BY i.run_at
     LIMIT _queue_candidates.batch
       FOR UPDATE OF i SKIP LOCKED);
END
$$;

-- Judge and lease what a pick found, locked (src/inbox/pick.rs): a lease
-- that ran out is recorded as a failed attempt, one that was its last
-- attempt is parked as dead, a row older than its entity's watermark (or
-- as old, where ties are stale) as stale, a quarantined one set aside,
-- the rest leased. By row id, a TID scan: a join back on the key would
-- be planned blind and could scan the whole inbox.
CREATE FUNCTION webhook._lease_candidates(candidates webhook._candidate[], lease interval, max_attempts integer)
RETURNS webhook._picked[]
LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_column
DECLARE
    picked webhook._picked[];
BEGIN
    IF EXISTS (SELECT FROM unnest(_lease_candidates.candidates) c WHERE c.was = 'leased') THEN
        INSERT INTO webhook.inbox_failures (claim_id, provider, event_id, consumer, attempt, error_message, lease_expired)
        SELECT c.previous, c.provider, c.event_id, c.consumer, c.attempts, 'lease expired', true
          FROM unnest(_lease_candidates.candidates) c
         WHERE c.was = 'leased'
        ON CONFLICT (claim_id) DO NOTHING;
    END IF;
    WITH picked AS (
        SELECT c.*,
               CASE WHEN c.held THEN 'held'
                    WHEN c.watermark > c.order_value
                         OR (c.watermark = c.order_value
                             AND EXISTS (SELECT FROM webhook.providers t WHERE t.name = c.provider AND t.ties = 'stale'))
                        THEN 'stale'
                    WHEN c.was = 'leased' AND _lease_candidates.max_attempts > 0
                         AND c.attempts >= _lease_candidates.max_attempts THEN 'dead'
                    ELSE 'leased'
               END AS verdict
          FROM unnest(_lease_candidates.candidates) c
    ), leased AS (
        UPDATE webhook.inbox i
           SET status = (CASE WHEN p.verdict = 'held' THEN 'ready' ELSE p.verdict END)::webhook.inbox_status,
               attempts = CASE WHEN p.verdict = 'leased' THEN i.attempts + 1 ELSE i.attempts END,
               claim_id = CASE WHEN p.verdict = 'leased' THEN webhook._new_lease_id() ELSE i.claim_id END,
               run_at = CASE WHEN p.verdict = 'held' THEN 'infinity' ELSE clock_timestamp() + _lease_candidates.lease END,
               last_error = CASE WHEN p.verdict = 'stale'
                                     THEN webhook._stale_reason(p.order_value, p.entity_key, p.watermark, p.set_by)
                                 WHEN i.status = 'leased' THEN 'lease expired' ELSE i.last_error END,
               processed_at = CASE WHEN p.verdict = 'stale' THEN now() ELSE i.processed_at END
          FROM picked p
         WHERE i.ctid = ANY (ARRAY(SELECT q.row_id FROM picked q)) AND i.ctid = p.row_id
     RETURNING i.claim_id, i.provider, i.event_id, i.event_type, i.attempts, i.consumer, i.delivery_id,
               i.queued_at, i.run_at, i.status, i.replay_id, p.due
    )
    SELECT coalesce(array_agg((l.claim_id, l.provider, l.event_id, l.event_type, l.attempts, l.consumer,
                               l.delivery_id, l.queued_at, l.run_at, l.status = 'leased', l.replay_id,
                               (SELECT t.traceparent FROM webhook.trace_contexts t WHERE t.delivery_id = l.delivery_id),
                               l.due)::webhook._picked ORDER BY l.queued_at, l.due), '{}')
      INTO picked
      FROM leased l;
    RETURN picked;
END
$$;

-- Where a call's queues' ready rows start, as this session last found
-- them (src/inbox/heads.rs): per call filter (consumer, provider, event
-- type), per provider, the ready time of the oldest row its last full
-- pick took. A session setting holds them: {"<filter>": {"calls": n,
-- "heads": {"<provider>": "<timestamptz>"}}}, read once per call of
-- webhook_next and written back after each pick. After 64 calls from its
-- heads, or a short pick, a filter is read from the start again.
CREATE FUNCTION webhook._heads_of(kept jsonb, filter text) RETURNS jsonb
LANGUAGE sql STABLE
RETURN CASE WHEN (kept -> filter ->> 'calls')::integer < 64 THEN kept -> filter -> 'heads' END;

-- The heads kept, once a call started from its filter's heads: counted,
-- or forgotten after 64 calls.
CREATE FUNCTION webhook._heads_counted(kept jsonb, filter text) RETURNS jsonb
LANGUAGE sql STABLE
RETURN CASE WHEN NOT kept ? filter THEN kept
            WHEN (kept -> filter ->> 'calls')::integer >= 64 THEN kept - filter
            ELSE jsonb_set(kept, ARRAY[filter, 'calls'], to_jsonb((kept -> filter ->> 'calls')::integer + 1)) END;

-- The heads kept, once a pick took these rows: a full pick moves its
-- providers' heads to the oldest row it took of each; a short one forgets
-- the filter.
CREATE FUNCTION webhook._heads_recorded(kept jsonb, filter text, picked webhook._picked[], filled boolean)
RETURNS jsonb
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    IF NOT filled THEN
        RETURN kept - filter;
    END IF;
    IF NOT kept ? filter THEN
        -- A bound on what a session keeps, whatever callers pass.
        IF (SELECT count(*) FROM jsonb_object_keys(kept)) >= 256 THEN
            kept := '{}';
        END IF;
        kept := jsonb_set(kept, ARRAY[filter], '{"calls": 0, "heads": {}}');
    END IF;
    RETURN jsonb_set(kept, ARRAY[filter, 'heads'],
                     (kept #> ARRAY[filter, 'heads'])
                     || coalesce((SELECT jsonb_object_agg(x.provider, x.due)
                                    FROM (SELECT p.provider, min(p.due) AS due
                                            FROM unnest(picked) p GROUP BY p.provider) x), '{}'));
END
$$;

-- One leased event, as webhook_next returns it.
CREATE TYPE webhook._next AS (
    id uuid, provider text, event_id text, event_type text, payload jsonb, attempts integer,
    consumer text, delivery_id uuid, queued_at timestamptz, lease_expires_at timestamptz,
    replay_id uuid, traceparent text, origin text
);

-- webhook_next (src/inbox/next.rs): its arguments under names of their
-- own, since PL/pgSQL cannot tell an argument from a result column of the
-- same name.
CREATE FUNCTION webhook._next(batch integer, consumer text, provider text, event_type text, lease interval)
RETURNS SETOF webhook._next
LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_variable
DECLARE
    fn CONSTANT text := 'webhook_next';
    leased_for  interval;
    scoped      boolean;
    steered     boolean;
    fifo        boolean;
    controls    webhook._controls;
    allowance   webhook._allowance;
    one_queue   boolean;
    max_attempts integer := webhook._setting_in('webhook.max_attempts', '', 10)::integer;
    line_providers text[];
    line_keys   text[];
    turn        bigint;
    round       integer;
    candidates  webhook._candidate[];
    picked      webhook._picked[];
    leases      webhook._picked[];
    archived    uuid[];
    filter      text := concat_ws(E'\x1f', consumer, coalesce(provider, E'\x1e'), coalesce(event_type, E'\x1e'));
    kept        jsonb := coalesce(nullif(current_setting('pg_webhook_inbox.heads', true), ''), '{}')::jsonb;
    heads       jsonb;
    from_start  boolean := false;
    written     text;
    checked     text;
BEGIN
    IF pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('webhook_next');
    END IF;
    IF webhook._required(fn, 'batch', batch) NOT BETWEEN 1 AND 1000 THEN
        PERFORM webhook._raise('22023', format('%s: argument "batch" must be between 1 and 1000', fn));
    END IF;
    -- Assignments, which PL/pgSQL evaluates without running a query.
    checked := webhook._required_text(fn, 'consumer', consumer, 64);
    checked := webhook._bounded_text(fn, 'provider', provider, 64);
    checked := webhook._bounded_text(fn, 'event_type', event_type, 255);
    leased_for := webhook._lease(fn, 'lease', lease);
    -- Nothing scopes or steers most inboxes, and most providers keep no
    -- FIFO lines: one statement of probes says so.
    SELECT EXISTS (SELECT FROM webhook.app_scopes),
           EXISTS (SELECT FROM webhook.pauses) OR EXISTS (SELECT FROM webhook.limits),
           EXISTS (SELECT FROM webhook.providers f WHERE f.name = provider AND f.fifo)
      INTO scoped, steered, fifo;
    IF NOT scoped THEN
        NULL;
    ELSIF provider IS NOT NULL THEN
        PERFORM webhook._check_scope(fn, 'provider', provider);
        PERFORM webhook._check_consumer_scope(fn, 'consumer', provider, consumer);
    ELSE
        PERFORM webhook._check_every_provider(fn);
    END IF;
    IF steered THEN
        controls := webhook._controls(consumer);
    END IF;
    IF controls.paused OR cardinality(controls.paused_providers) > 0 OR cardinality(controls.quarantined) > 0
       OR cardinality(controls.limit_providers) > 0 THEN
        allowance := webhook._allowance(controls, consumer, provider, batch);
        IF allowance IS NULL THEN
            RETURN;
        END IF;
    END IF;
    -- One provider's queue, unsteered and with no FIFO line: the short
    -- statement of webhook._queue_candidates.
    one_queue := allowance IS NULL AND provider IS NOT NULL AND NOT fifo;
    FOR round IN 1 .. 100 LOOP
        -- The FIFO lines this transaction may lease from, each under its
        -- line's lock, taken before the pick so that its snapshot sees
        -- every lease an earlier holder committed.
        line_providers := '{}';
        line_keys := '{}';
        IF NOT one_queue AND EXISTS (SELECT FROM webhook.providers f WHERE f.fifo) THEN
            SELECT coalesce(array_agg(h.provider), '{}'), coalesce(array_agg(h.entity_key), '{}')
              INTO line_providers, line_keys
              FROM webhook._fifo_heads(consumer, provider, event_type, coalesce(allowance.batch, batch)) h
             WHERE pg_try_advisory_xact_lock(webhook._lock_key('fifo', h.provider, consumer, h.entity_key));
        END IF;
        turn := coalesce(nullif(current_setting('pg_webhook_inbox.turn', true), '')::bigint, 0);
        written := set_config('pg_webhook_inbox.turn', ((turn + 1) % 9223372036854775807)::text, false);
        heads := NULL;
        IF NOT from_start THEN
            heads := webhook._heads_of(kept, filter);
            kept := webhook._heads_counted(kept, filter);
        END IF;
        IF one_queue THEN
            candidates := webhook._queue_candidates(consumer, provider, event_type, batch,
                                                    coalesce((heads ->> provider)::timestamptz, '-infinity'));
        ELSE
            candidates := webhook._candidates(
                consumer, provider, event_type, coalesce(allowance.batch, batch), line_providers, line_keys, turn,
                ARRAY(SELECT jsonb_object_keys(coalesce(heads, '{}')) ORDER BY 1),
                ARRAY(SELECT (heads ->> k)::timestamptz FROM jsonb_object_keys(coalesce(heads, '{}')) k ORDER BY k),
                coalesce(allowance.excluded, '{}'), coalesce(allowance.quota_providers, '{}'),
                coalesce(allowance.quotas, '{}'), coalesce(allowance.quarantining, '{}'));
        END IF;
        picked := webhook._lease_candidates(candidates, leased_for, max_attempts);
        kept := webhook._heads_recorded(kept, filter, picked, cardinality(picked) = coalesce(allowance.batch, batch));
        written := set_config('pg_webhook_inbox.heads', kept::text, false);
        IF cardinality(picked) = 0 AND heads IS NOT NULL AND heads <> '{}' THEN
            -- Nothing after the heads: look once from the start, past
            -- whatever appeared before them, before answering "none".
            from_start := true;
            CONTINUE;
        END IF;
        SELECT coalesce(array_agg(p ORDER BY p.queued_at), '{}'), coalesce(array_agg(p.delivery_id), '{}')
          INTO leases, archived
          FROM unnest(picked) p WHERE p.leased;
        -- A round that only parked rows (stale, or out of attempts) says
        -- nothing about what is ready behind them: try again.
        IF cardinality(leases) > 0 OR cardinality(picked) = 0 THEN
            IF allowance IS NOT NULL THEN
                PERFORM webhook._record_allowance(allowance, consumer, leases);
            END IF;
            RETURN QUERY
                SELECT p.id, p.provider, p.event_id, p.event_type, l.payload, p.attempts, p.consumer,
                       p.delivery_id, p.queued_at, p.lease_expires_at, p.replay_id, p.traceparent,
                       CASE WHEN l.secret_fingerprint IS NOT NULL THEN 'verified'
                            WHEN EXISTS (SELECT FROM webhook.polled o WHERE o.delivery_id = l.id) THEN 'polled'
                            ELSE 'enqueued' END
                  FROM unnest(leases) WITH ORDINALITY AS p
                  -- By the ids in hand: a join on the leases would open
                  -- every partition of the archive on each call.
                  LEFT JOIN (SELECT l.id, l.payload, l.secret_fingerprint FROM webhook.delivery_log l
                              WHERE l.id = ANY (archived)) l
                         ON l.id = p.delivery_id
                 ORDER BY p.ordinality;
            RETURN;
        END IF;
    END LOOP;
END
$$;

CREATE FUNCTION @extschema@.webhook_next(batch integer DEFAULT 1, consumer text DEFAULT 'default',
                                         provider text DEFAULT NULL, event_type text DEFAULT NULL,
                                         lease interval DEFAULT NULL)
RETURNS TABLE (id uuid, provider text, event_id text, event_type text, payload jsonb, attempts integer,
               consumer text, delivery_id uuid, queued_at timestamptz, lease_expires_at timestamptz,
               replay_id uuid, traceparent text, origin text)
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT * FROM webhook._next($1, $2, $3, $4, $5);
END;

-- The FIFO lines whose heads a pick would lease.
CREATE FUNCTION webhook._fifo_heads(of_consumer text, of_provider text, of_type text, at_most integer)
RETURNS TABLE (provider text, entity_key text)
LANGUAGE plpgsql STABLE
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT h.provider, h.entity_key
      FROM webhook.providers f
     CROSS JOIN LATERAL (
           SELECT i.provider, i.entity_key, i.run_at
             FROM webhook.inbox i
            WHERE i.consumer = of_consumer AND i.provider = f.name
              AND (of_type IS NULL OR i.event_type = of_type)
              AND i.status IN ('ready', 'leased') AND i.run_at <= (SELECT clock_timestamp())
              AND i.entity_key IS NOT NULL
              AND NOT EXISTS (SELECT FROM webhook.inbox j
                               WHERE j.provider = i.provider AND j.consumer = i.consumer
                                 AND j.entity_key = i.entity_key AND j.event_id <> i.event_id
                                 AND j.status IN ('ready', 'leased')
                                 AND ((j.order_value, j.queued_at, j.event_id) < (i.order_value, i.queued_at, i.event_id)
                                      OR (j.status = 'leased' AND j.run_at > clock_timestamp())))
            ORDER BY i.run_at
            LIMIT at_most) h
     WHERE f.fifo AND (of_provider IS NULL OR f.name = of_provider)
     ORDER BY h.run_at
     LIMIT at_most;
END
$$;

-- Give the slots and probes a steered call took to the leases it made.
CREATE FUNCTION webhook._record_allowance(a webhook._allowance, consumer text, leases webhook._picked[])
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_variable
DECLARE
    g     record;
    mine  uuid[];
    i     integer;
    scope text;
BEGIN
    -- The k-th slot a limit gave goes to the k-th lease it covers.
    FOR g IN SELECT t.provider, t.kind, array_agg(t.n ORDER BY t.o) AS ns
               FROM unnest(a.slot_providers, a.slot_kinds, a.slot_ns) WITH ORDINALITY AS t(provider, kind, n, o)
              GROUP BY t.provider, t.kind
    LOOP
        mine := ARRAY(SELECT l.id FROM unnest(leases) WITH ORDINALITY AS l
                       WHERE g.provider = '' OR l.provider = g.provider ORDER BY l.ordinality);
        FOR i IN 1 .. least(cardinality(g.ns), cardinality(mine)) LOOP
            UPDATE webhook.limit_slots s
               SET lease_id = mine[i], used_at = a.taken_at
             WHERE s.consumer = consumer AND s.provider = g.provider
               AND s.kind = g.kind::webhook.slot_kind AND s.n = g.ns[i];
        END LOOP;
    END LOOP;
    FOREACH scope IN ARRAY a.probes LOOP
        mine := ARRAY(SELECT l.id FROM unnest(leases) WITH ORDINALITY AS l
                       WHERE scope = '' OR l.provider = scope ORDER BY l.ordinality LIMIT 1);
        IF cardinality(mine) > 0 THEN
            UPDATE webhook.breakers b SET probe = mine[1] WHERE b.consumer = consumer AND b.provider = scope;
        END IF;
    END LOOP;
END
$$;

-- The scopes of webhook_next (src/scopes.rs): a consumer of a provider
-- the session may use, and no call without a provider from a scoped role.
CREATE FUNCTION webhook._check_consumer_scope(fn text, arg text, provider text, consumer text) RETURNS void
LANGUAGE plpgsql STABLE
AS $$
#variable_conflict use_variable
DECLARE
    acting name := webhook._scoped_role();
BEGIN
    IF acting IS NULL
       OR EXISTS (SELECT FROM webhook.app_scopes s
                   WHERE pg_has_role(acting, s.role, 'USAGE') AND provider = ANY (s.providers)
                     AND (s.consumers IS NULL OR consumer = ANY (s.consumers))) THEN
        RETURN;
    END IF;
    PERFORM webhook._raise('42501',
        format('%s: argument "%s": role "%s" may not use consumer "%s" of provider "%s"', fn, arg, acting, consumer, provider),
        format('Its scope allows %s.', webhook._scopes_allowed(acting)),
        'A DBA sets application roles'' scopes with webhook_scope_app(role, providers, consumers); webhook.app_scopes lists them.');
END
$$;

CREATE FUNCTION webhook._check_every_provider(fn text) RETURNS void
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    acting name := webhook._scoped_role();
BEGIN
    IF acting IS NOT NULL THEN
        PERFORM webhook._raise('42501',
            format('%s: argument "provider" must name a provider: role "%s" is scoped to some providers', fn, acting),
            format('Its scope allows %s.', webhook._scopes_allowed(acting)),
            'Name one of them: webhook_next(provider => ''<name>'', ...).');
    END IF;
END
$$;

-- A circuit breaker watching a consumer's provider hears of a success or
-- of failed attempts (src/inbox/flow.rs).
CREATE FUNCTION webhook._breaker_heard(consumer text, provider text, failures integer) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_variable
DECLARE
    threshold integer;
BEGIN
    -- Most consumers have no breaker: one probe says so.
    IF NOT EXISTS (SELECT FROM webhook.limits l
                    WHERE l.consumer = consumer AND l.breaker_failures IS NOT NULL AND l.provider IN ('', provider))
    THEN
        RETURN;
    END IF;
    IF failures = 0 THEN
        UPDATE webhook.breakers b
           SET failures = 0, state = 'closed', probe = NULL,
               changed_at = CASE WHEN b.state <> 'closed' THEN now() ELSE b.changed_at END
         WHERE b.consumer = _breaker_heard.consumer AND b.provider = _breaker_heard.provider
           AND (b.failures > 0 OR b.state <> 'closed');
        RETURN;
    END IF;
    threshold := (webhook._breaker_limit(consumer, provider)).breaker_failures;
    IF threshold IS NULL THEN
        RETURN;
    END IF;
    INSERT INTO webhook.breakers AS b (consumer, provider, failures, state, opened_at)
    VALUES (consumer, provider, failures,
            CASE WHEN failures >= threshold THEN 'open' ELSE 'closed' END::webhook.breaker_state,
            CASE WHEN failures >= threshold THEN clock_timestamp() END)
    ON CONFLICT ON CONSTRAINT breakers_pkey DO UPDATE
       SET failures = b.failures + excluded.failures,
           state = CASE WHEN b.state = 'half_open' OR b.failures + excluded.failures >= threshold
                        THEN 'open' ELSE b.state END,
           opened_at = CASE WHEN b.state = 'half_open'
                              OR (b.state = 'closed' AND b.failures + excluded.failures >= threshold)
                            THEN clock_timestamp() ELSE b.opened_at END,
           probe = CASE WHEN b.state = 'half_open' THEN NULL ELSE b.probe END,
           changed_at = CASE WHEN b.state = 'half_open'
                               OR (b.state = 'closed' AND b.failures + excluded.failures >= threshold)
                             THEN now() ELSE b.changed_at END;
END
$$;

-- Refuse leases of a provider or consumer outside the session's scope.
CREATE FUNCTION webhook._leases_in_scope(fn text, ids uuid[]) RETURNS void
LANGUAGE plpgsql STABLE
AS $$
#variable_conflict use_variable
DECLARE
    r record;
BEGIN
    IF NOT EXISTS (SELECT FROM webhook.app_scopes) THEN
        RETURN;
    END IF;
    FOR r IN SELECT x.provider, x.consumer
               FROM unnest(ids) WITH ORDINALITY AS g(id, n)
              CROSS JOIN LATERAL (SELECT i.provider, i.consumer FROM webhook.inbox i WHERE i.claim_id = g.id
                                  UNION ALL
                                  SELECT f.provider, f.consumer FROM webhook.inbox_failures f WHERE f.claim_id = g.id
                                  LIMIT 1) x
              ORDER BY g.n
    LOOP
        PERFORM webhook._check_scope(fn, 'id', r.provider);
        PERFORM webhook._check_consumer_scope(fn, 'id', r.provider, r.consumer);
    END LOOP;
END
$$;

-- Why a lease could not be finished (src/inbox/lease.rs, standing),
-- raised: 55006 run out and leased again (or parked), 55000 finished,
-- P0002 no such lease (nor delivery).
CREATE FUNCTION webhook._refuse_lease(fn text, id uuid) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_variable
DECLARE
    status  text := (SELECT i.status::text FROM webhook.inbox i WHERE i.claim_id = id);
    expired boolean := (SELECT f.lease_expired FROM webhook.inbox_failures f WHERE f.claim_id = id);
BEGIN
    IF status IS NULL AND expired IS NULL THEN
        PERFORM webhook._raise('P0002', format('%s: argument "id": no delivery or lease %s', fn, id));
    ELSIF expired THEN
        PERFORM webhook._raise('55006', format('%s: argument "id": delivery or lease %s lost its lease to another worker', fn, id),
            'Its lease ran out: the event was leased again, or parked once out of attempts.',
            'Roll back this transaction: another worker owns the event now. Use a longer lease or webhook_extend() for long work.');
    END IF;
    PERFORM webhook._raise('55000', format('%s: argument "id": delivery or lease %s is already %s', fn, id,
        CASE WHEN status IS NULL OR status = 'ready' THEN 'failed' ELSE status END));
END
$$;

-- webhook_complete of a lease: its row processed; an ordered event moves
-- its entity's watermark for the lease's consumer.
CREATE FUNCTION webhook._lease_complete(fn text, id uuid, result jsonb) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_variable
DECLARE
    done record;
BEGIN
    PERFORM webhook._leases_in_scope(fn, ARRAY[id]);
    UPDATE webhook.inbox i
       SET status = 'processed', processed_at = now(), result = _lease_complete.result
     WHERE i.claim_id = _lease_complete.id AND i.status = 'leased'
    RETURNING i.provider, i.consumer, i.event_id, i.entity_key, i.order_value::text AS order_value INTO done;
    IF NOT FOUND THEN
        PERFORM webhook._refuse_lease(fn, id);
    END IF;
    PERFORM webhook._breaker_heard(done.consumer, done.provider, 0);
    IF done.entity_key IS NOT NULL AND done.order_value IS NOT NULL THEN
        PERFORM webhook._advance(fn, id, done.provider, done.consumer, done.event_id, done.entity_key, done.order_value);
    END IF;
END
$$;

-- webhook_fail of a lease: ready again after retry_in or the backoff, or
-- dead when permanent or out of attempts.
CREATE FUNCTION webhook._lease_fail(fn text, id uuid, err text, retry_in interval, permanent boolean) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_variable
DECLARE
    attempt integer;
    ceiling integer := webhook._setting_in('webhook.max_attempts', '', 10)::integer;
    failed  record;
BEGIN
    PERFORM webhook._leases_in_scope(fn, ARRAY[id]);
    SELECT i.attempts INTO attempt FROM webhook.inbox i WHERE i.claim_id = _lease_fail.id AND i.status = 'leased';
    IF NOT FOUND THEN
        PERFORM webhook._refuse_lease(fn, id);
    END IF;
    UPDATE webhook.inbox i
       SET status = CASE WHEN permanent OR (ceiling > 0 AND attempt >= ceiling) THEN 'dead' ELSE 'ready' END::webhook.inbox_status,
           run_at = clock_timestamp() + coalesce(retry_in, webhook._backoff(attempt, id) * interval '1 microsecond'),
           last_error = err
     WHERE i.claim_id = _lease_fail.id AND i.status = 'leased'
    RETURNING i.provider, i.event_id, i.consumer, i.attempts INTO failed;
    IF NOT FOUND THEN
        PERFORM webhook._refuse_lease(fn, id);
    END IF;
    INSERT INTO webhook.inbox_failures (claim_id, provider, event_id, consumer, attempt, error_message)
    VALUES (id, failed.provider, failed.event_id, failed.consumer, failed.attempts, err);
    PERFORM webhook._breaker_heard(failed.consumer, failed.provider, 1);
END
$$;

CREATE FUNCTION webhook._lease_extend(fn text, id uuid, lease interval) RETURNS timestamptz
LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_variable
DECLARE
    expires timestamptz;
BEGIN
    PERFORM webhook._leases_in_scope(fn, ARRAY[id]);
    UPDATE webhook.inbox i SET run_at = clock_timestamp() + lease
     WHERE i.claim_id = _lease_extend.id AND i.status = 'leased'
    RETURNING i.run_at INTO expires;
    IF NOT FOUND THEN
        PERFORM webhook._refuse_lease(fn, id);
    END IF;
    RETURN expires;
END
$$;

-- The leases of a batch call: 1 to 1000 ids, none NULL, each once.
CREATE FUNCTION webhook._batch_of_leases(fn text, ids uuid[]) RETURNS uuid[]
LANGUAGE plpgsql IMMUTABLE
AS $$
#variable_conflict use_variable
BEGIN
    IF webhook._required(fn, 'ids', ids) IS NULL OR cardinality(ids) NOT BETWEEN 1 AND 1000 THEN
        PERFORM webhook._raise('22023', format('%s: argument "ids" must hold 1 to 1000 leases', fn));
    END IF;
    IF array_position(ids, NULL) IS NOT NULL THEN
        PERFORM webhook._raise('22004', format('%s: argument "ids" must not be NULL', fn));
    END IF;
    RETURN ARRAY(SELECT g.id FROM unnest(ids) WITH ORDINALITY AS g(id, n)
                  GROUP BY g.id ORDER BY min(g.n));
END
$$;

CREATE FUNCTION @extschema@.webhook_complete_batch(ids uuid[]) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    fn CONSTANT text := 'webhook_complete_batch';
    leases   uuid[] := webhook._batch_of_leases(fn, ids);
    missing  uuid;
    done     jsonb;
    finished uuid[];
    consumers text[];
    providers text[];
    ordered  record;
    i        integer;
    scoped   boolean;
    breakers boolean;
BEGIN
    IF pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('webhook_complete_batch');
    END IF;
    -- Most inboxes scope no role and most consumers have no breaker: one
    -- statement of probes says so.
    SELECT EXISTS (SELECT FROM webhook.app_scopes),
           EXISTS (SELECT FROM webhook.limits l WHERE l.breaker_failures IS NOT NULL)
      INTO scoped, breakers;
    IF scoped THEN
        PERFORM webhook._leases_in_scope(fn, leases);
    END IF;
    WITH changed AS (
        UPDATE webhook.inbox i
           SET status = 'processed', processed_at = now(), result = NULL
         WHERE i.claim_id = ANY (leases) AND i.status = 'leased'
        RETURNING i.claim_id, i.provider, i.consumer, i.event_id, i.entity_key, i.order_value::text AS order_value
    )
    SELECT array_agg(c.claim_id), array_agg(c.consumer), array_agg(c.provider),
           coalesce(jsonb_agg(to_jsonb(c)) FILTER (WHERE c.entity_key IS NOT NULL AND c.order_value IS NOT NULL), '[]')
      INTO finished, consumers, providers, done
      FROM changed c;
    IF coalesce(cardinality(finished), 0) < cardinality(leases) THEN
        -- The first lease, in the order given, that may not finish.
        SELECT g.l INTO missing FROM unnest(leases) WITH ORDINALITY AS g(l, n)
         WHERE g.l <> ALL (coalesce(finished, '{}')) ORDER BY g.n LIMIT 1;
        PERFORM webhook._refuse_lease(fn, missing);
    END IF;
    -- Most events have no order: an empty list says so.
    IF breakers THEN
        FOR ordered IN SELECT DISTINCT x.consumer, x.provider FROM unnest(consumers, providers) AS x(consumer, provider)
                        ORDER BY 1, 2 LOOP
            PERFORM webhook._breaker_heard(ordered.consumer, ordered.provider, 0);
        END LOOP;
    END IF;
    IF done = '[]' THEN
        RETURN;
    END IF;
    FOR ordered IN SELECT (d ->> 'claim_id')::uuid AS claim_id, d ->> 'provider' AS provider,
                          d ->> 'consumer' AS consumer, d ->> 'event_id' AS event_id,
                          d ->> 'entity_key' AS entity_key, d ->> 'order_value' AS order_value
                     FROM jsonb_array_elements(done) d
                     JOIN unnest(leases) WITH ORDINALITY AS g(l, n) ON g.l = (d ->> 'claim_id')::uuid
                    ORDER BY g.n LOOP
        PERFORM webhook._advance(fn, ordered.claim_id, ordered.provider, ordered.consumer, ordered.event_id,
                                 ordered.entity_key, ordered.order_value);
    END LOOP;
END
$$;

CREATE FUNCTION @extschema@.webhook_fail_batch(ids uuid[], err text, retry_in interval DEFAULT NULL,
                                               permanent boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    fn CONSTANT text := 'webhook_fail_batch';
    leases  uuid[] := webhook._batch_of_leases(fn, ids);
    message text;
    ceiling integer := webhook._setting_in('webhook.max_attempts', '', 10)::integer;
    missing uuid;
    failed  record;
BEGIN
    IF pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('webhook_fail_batch');
    END IF;
    PERFORM webhook._required(fn, 'err', err);
    PERFORM webhook._required(fn, 'permanent', permanent);
    PERFORM webhook._check_retry_in(fn, retry_in);
    message := webhook._truncated(err, 2048);
    PERFORM webhook._leases_in_scope(fn, leases);
    SELECT g.l INTO missing FROM unnest(leases) WITH ORDINALITY AS g(l, n)
     WHERE NOT EXISTS (SELECT FROM webhook.inbox i WHERE i.claim_id = g.l AND i.status = 'leased')
     ORDER BY g.n LIMIT 1;
    IF missing IS NOT NULL THEN
        PERFORM webhook._refuse_lease(fn, missing);
    END IF;
    FOR failed IN
        WITH changed AS (
            UPDATE webhook.inbox i
               SET status = CASE WHEN permanent OR (ceiling > 0 AND i.attempts >= ceiling) THEN 'dead' ELSE 'ready' END::webhook.inbox_status,
                   run_at = clock_timestamp() + coalesce(retry_in, webhook._backoff(i.attempts, i.claim_id) * interval '1 microsecond'),
                   last_error = message
             WHERE i.claim_id = ANY (leases) AND i.status = 'leased'
            RETURNING i.claim_id, i.provider, i.event_id, i.consumer, i.attempts
        ), recorded AS (
            INSERT INTO webhook.inbox_failures (claim_id, provider, event_id, consumer, attempt, error_message)
            SELECT c.claim_id, c.provider, c.event_id, c.consumer, c.attempts, message FROM changed c
            RETURNING provider, consumer
        )
        SELECT r.consumer, r.provider, count(*)::integer AS n FROM recorded r GROUP BY 1, 2 ORDER BY 1, 2
    LOOP
        PERFORM webhook._breaker_heard(failed.consumer, failed.provider, failed.n);
    END LOOP;
END
$$;

SELECT pg_catalog.set_config('search_path', '@extschema@, pg_temp', true);
