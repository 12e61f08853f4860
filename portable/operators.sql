-- pg_webhook_inbox, portable edition: what operators call on events
-- (the compiled edition's src/requeue.rs and src/route.rs), in PL/pgSQL.

-- Bound to pg_catalog while this file runs (see schema.sql).
SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);

-- Put dead inbox rows back, ready at once in the order first queued,
-- with a fresh attempt budget, each requeue recorded; returns the leases
-- that had parked them.
CREATE FUNCTION webhook._requeue_queued(provider text, event_id text, event_type text, error_like text,
                                        received_after timestamptz, received_before timestamptz, consumer text)
RETURNS SETOF uuid
LANGUAGE sql VOLATILE
BEGIN ATOMIC
    WITH old AS (
        SELECT i.ctid AS row_id, i.provider, i.event_id, i.consumer, i.attempts, i.last_error, i.claim_id,
               i.queued_at, i.order_value, i.delivery_id
          FROM webhook.inbox i
         WHERE i.status = 'dead'
           AND (_requeue_queued.provider IS NULL OR i.provider = _requeue_queued.provider)
           AND (_requeue_queued.event_id IS NULL OR i.event_id = _requeue_queued.event_id)
           AND (_requeue_queued.event_type IS NULL OR i.event_type = _requeue_queued.event_type)
           AND (_requeue_queued.error_like IS NULL OR i.last_error ILIKE _requeue_queued.error_like)
           AND (_requeue_queued.received_after IS NULL OR i.queued_at >= _requeue_queued.received_after)
           AND (_requeue_queued.received_before IS NULL OR i.queued_at < _requeue_queued.received_before)
           AND (_requeue_queued.consumer IS NULL OR i.consumer = _requeue_queued.consumer)
           FOR UPDATE
    ), requeued AS (
        UPDATE webhook.inbox i
           SET status = 'ready', attempts = 0, requeues = i.requeues + 1,
               run_at = webhook._due_in_turn((SELECT clock_timestamp()), o.n, interval '0')
          FROM (SELECT old.row_id, row_number() OVER (ORDER BY old.queued_at, old.order_value, old.delivery_id, old.consumer) AS n
                  FROM old) o
         WHERE i.ctid = ANY (ARRAY(SELECT old.row_id FROM old)) AND i.ctid = o.row_id
    ), logged AS (
        INSERT INTO webhook.requeues (provider, event_id, consumer, attempts, last_error)
        SELECT old.provider, old.event_id, old.consumer, old.attempts, old.last_error FROM old
    )
    SELECT old.claim_id FROM old;
END;

-- Put a dead or failed claimed event back with a fresh attempt budget;
-- returns the delivery that had parked it (NULL for a failed one), one
-- row for each event requeued.
CREATE FUNCTION webhook._requeue_claimed(provider text, event_id text) RETURNS TABLE (parked_by uuid)
LANGUAGE sql VOLATILE
BEGIN ATOMIC
    WITH old AS (
        SELECT e.provider, e.event_id, e.attempts, e.last_error,
               CASE WHEN e.status = 'dead' THEN e.claim_id END AS parked_by
          FROM webhook.events e
         WHERE e.provider = _requeue_claimed.provider AND e.event_id = _requeue_claimed.event_id
           AND e.status IN ('dead', 'failed')
    ), requeued AS (
        UPDATE webhook.events e
           SET status = 'failed', attempts = 0, requeues = e.requeues + 1
         WHERE e.provider = _requeue_claimed.provider AND e.event_id = _requeue_claimed.event_id
           AND e.status IN ('dead', 'failed')
    ), logged AS (
        INSERT INTO webhook.requeues (provider, event_id, consumer, attempts, last_error)
        SELECT old.provider, old.event_id, NULL, old.attempts, old.last_error FROM old
    )
    SELECT old.parked_by FROM old;
END;

-- The requeued dead letters leave the metrics' dead-letter count now.
CREATE FUNCTION webhook._hold_dead_letters(parked uuid[]) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    parked := array_remove(parked, NULL);
    IF cardinality(parked) > 0 THEN
        PERFORM webhook._metrics_hold('dead_letter', parked);
    END IF;
END
$$;

CREATE FUNCTION @extschema@.webhook_requeue(provider text, event_id text, consumer text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    fn CONSTANT text := 'webhook_requeue';
    status text;
    parked uuid[];
    standing record;
BEGIN
    IF pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('webhook_requeue');
    END IF;
    PERFORM webhook._required_text(fn, 'provider', provider, 64);
    PERFORM webhook._required_text(fn, 'event_id', event_id, 255);
    PERFORM webhook._bounded_text(fn, 'consumer', consumer, 64);
    PERFORM pg_advisory_xact_lock(webhook._lock_key(provider, event_id));
    SELECT e.status::text INTO status FROM webhook.events e WHERE e.provider = provider AND e.event_id = event_id;
    IF NOT FOUND THEN
        PERFORM webhook._raise('P0002',
            format('%s: argument "event_id": no event "%s" from provider "%s"', fn, event_id, provider));
    END IF;
    IF status = 'queued' THEN
        parked := ARRAY(SELECT webhook._requeue_queued(provider, event_id, NULL, NULL, NULL, NULL, consumer));
        IF cardinality(parked) > 0 THEN
            PERFORM webhook._hold_dead_letters(parked);
            PERFORM webhook._wake();
            RETURN;
        END IF;
        SELECT bool_and(i.status::text IN ('processed', 'stale', 'filtered')) AS done,
               bool_and(i.status = 'stale') AS stale, bool_and(i.status::text = 'filtered') AS filtered
          INTO standing
          FROM webhook.inbox i
         WHERE i.delivery_id = (SELECT e.claim_id FROM webhook.events e WHERE e.provider = provider AND e.event_id = event_id)
           AND i.provider = provider AND i.event_id = event_id AND (consumer IS NULL OR i.consumer = consumer);
        status := CASE WHEN standing.done AND standing.stale THEN 'stale for every consumer'
                       WHEN standing.done AND standing.filtered THEN 'filtered for every consumer'
                       WHEN standing.done THEN 'processed by every consumer'
                       ELSE 'queued, with no dead consumer (ready or leased)' END;
    ELSIF consumer IS NOT NULL THEN
        PERFORM webhook._raise('22023', format('%s: argument "consumer" applies to queued events only: this event was claimed, not queued', fn));
    ELSE
        parked := ARRAY(SELECT r.parked_by FROM webhook._requeue_claimed(provider, event_id) r);
        IF cardinality(parked) > 0 THEN
            PERFORM webhook._hold_dead_letters(parked);
            RETURN;
        END IF;
    END IF;
    PERFORM webhook._raise('55000',
        format('%s: argument "event_id": the event is %s; only dead or failed events can be requeued', fn, status),
        NULL, 'A processed event is never requeued: that would process it twice.');
END
$$;

CREATE FUNCTION @extschema@.webhook_requeue_dead(provider text DEFAULT NULL, event_type text DEFAULT NULL,
                                                 error_like text DEFAULT NULL,
                                                 received_after timestamptz DEFAULT NULL,
                                                 received_before timestamptz DEFAULT NULL,
                                                 consumer text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    fn CONSTANT text := 'webhook_requeue_dead';
    parked  uuid[];
    queued  bigint;
    claimed bigint := 0;
    dead    record;
BEGIN
    IF pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('webhook_requeue_dead');
    END IF;
    PERFORM webhook._bounded_text(fn, 'provider', provider, 64);
    PERFORM webhook._bounded_text(fn, 'event_type', event_type, 255);
    PERFORM webhook._bounded_text(fn, 'consumer', consumer, 64);
    parked := ARRAY(SELECT webhook._requeue_queued(provider, NULL, event_type, error_like, received_after,
                                                   received_before, consumer));
    queued := cardinality(parked);
    PERFORM webhook._hold_dead_letters(parked);
    IF queued > 0 THEN
        PERFORM webhook._wake();
    END IF;
    IF consumer IS NOT NULL THEN
        RETURN queued;
    END IF;
    FOR dead IN SELECT e.provider, e.event_id FROM webhook.events e
                 WHERE e.status = 'dead'
                   AND (provider IS NULL OR e.provider = provider)
                   AND (event_type IS NULL OR e.event_type = event_type)
                   AND (error_like IS NULL OR e.last_error ILIKE error_like)
                   AND (received_after IS NULL OR e.first_seen_at >= received_after)
                   AND (received_before IS NULL OR e.first_seen_at < received_before)
    LOOP
        PERFORM pg_advisory_xact_lock(webhook._lock_key(dead.provider, dead.event_id));
        parked := ARRAY(SELECT r.parked_by FROM webhook._requeue_claimed(dead.provider, dead.event_id) r);
        claimed := claimed + cardinality(parked);
        PERFORM webhook._hold_dead_letters(parked);
    END LOOP;
    RETURN queued + claimed;
END
$$;

-- A delivery's route key in a tier of databases: a tier routes through
-- PL/Proxy to the compiled edition on every slot, which the portable
-- edition is not.
CREATE FUNCTION @extschema@.webhook_route_key(scheme text, event_id_from text, entity_key_from text,
                                              headers jsonb, body bytea, url text DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM webhook._raise('0A000',
        'webhook_route_key: a tier of databases is routed by the compiled edition of pg_webhook_inbox only',
        'This is the portable edition, in SQL and PL/pgSQL: a tier needs PL/Proxy and the compiled edition on every slot.',
        'docs/scale-out.md describes the tier; docs/managed.md how to move to the compiled edition.');
    RETURN NULL;
END
$$;

SELECT pg_catalog.set_config('search_path', '@extschema@, pg_temp', true);
