-- pg_webhook_inbox 0.11.0 → 0.12.0 (in progress, not published).
--
-- Every change to the SQL surface since 0.11.0 lands here, until 0.12.0 is
-- recorded in sql/RELEASES; the upgrade test proves that a database
-- upgraded through this script equals a fresh install of 0.12.0.

\echo Use "ALTER EXTENSION pg_webhook_inbox UPDATE TO '0.12.0'" to load this file. \quit

-- Bound to pg_catalog while this script runs, as every file of a fresh
-- install is (see schema.sql).
SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);

-- An integer setting of the extension in `unit`, whatever unit it was
-- set in ('2h', '700ms', '64kB'; a bare number is in the setting's own
-- unit; '' for a setting without one), or `fallback` where nobody set it.
-- The compiled edition's library defines the settings with their units;
-- where it is not loaded (the portable edition, or a session that has
-- not loaded it yet) they are placeholders, which PostgreSQL keeps as
-- they were written.
CREATE FUNCTION webhook._setting_value(name text, value text, unit text) RETURNS numeric
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    parts  text[] := pg_catalog.regexp_match(value, '^(-?[0-9]+(\.[0-9]+)?)\s*([A-Za-z]*)$');
    -- Bytes, and milliseconds.
    memory CONSTANT jsonb := '{"B": 1, "kB": 1024, "MB": 1048576, "GB": 1073741824, "TB": 1099511627776}';
    time   CONSTANT jsonb := '{"us": 0.001, "ms": 1, "s": 1000, "min": 60000, "h": 3600000, "d": 86400000}';
    family jsonb := CASE WHEN memory ? unit THEN memory ELSE time END;
BEGIN
    IF parts IS NULL OR (parts[3] <> '' AND (unit = '' OR NOT family ? parts[3])) THEN
        RAISE EXCEPTION 'invalid value for setting "%": "%"', name, value
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = pg_catalog.format('Give a number of %s, or a number with a unit of its kind.', unit);
    END IF;
    IF parts[3] = '' THEN
        RETURN parts[1]::numeric;
    END IF;
    RETURN parts[1]::numeric * (family ->> parts[3])::numeric / (family ->> unit)::numeric;
END
$$;
COMMENT ON FUNCTION webhook._setting_value(text, text, text) IS
    'Internal: a setting''s value as written, in the given unit';

-- The common cases (not set, a bare number) in one expression, which a
-- caller's plan takes in (an inlined SQL function).
CREATE FUNCTION webhook._setting_in(name text, unit text, fallback numeric) RETURNS numeric
LANGUAGE sql STABLE
RETURN CASE WHEN NULLIF(pg_catalog.current_setting(name, true), '') IS NULL THEN fallback
            WHEN pg_catalog.current_setting(name, true) OPERATOR(pg_catalog.~) '^[0-9]{1,15}$'
                THEN pg_catalog.current_setting(name, true)::pg_catalog.numeric
            ELSE webhook._setting_value(name, pg_catalog.btrim(pg_catalog.current_setting(name, true)), unit)
       END;
COMMENT ON FUNCTION webhook._setting_in(text, text, numeric) IS
    'Internal: an integer setting of the extension in the given unit, whatever unit it was set in, or the default where none was set';

-- The metrics' retention read with it: as set in any unit, and its
-- default where nobody set it.
CREATE OR REPLACE FUNCTION @extschema@.webhook_metrics_rollup()
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    since   timestamptz;
    bound   timestamptz := pg_catalog.clock_timestamp();
    counted bigint := 0;
    retention interval;
BEGIN
    -- One rollup at a time; whoever comes second has nothing to add.
    IF NOT pg_catalog.pg_try_advisory_xact_lock(pg_catalog.hashtext('pg_webhook_inbox.metrics')) THEN
        RETURN 0;
    END IF;
    IF NOT pg_catalog.pg_has_role(current_user, 'pg_read_all_stats', 'USAGE') THEN
        RAISE EXCEPTION 'webhook_metrics_rollup: the extension''s owner (%) cannot see other sessions'' transactions', current_user
            USING ERRCODE = '42501',
                  HINT = pg_catalog.format('GRANT pg_read_all_stats TO %I; the rollup counts only what no running transaction can still write.', current_user);
    END IF;
    -- The row is made with the extension; were it deleted, counting
    -- starts again from now.
    INSERT INTO webhook.metric_marks (counted_until) VALUES (pg_catalog.now()) ON CONFLICT DO NOTHING;
    SELECT counted_until INTO STRICT since FROM webhook.metric_marks FOR UPDATE;

    -- The bound (see the top of this file): taken after the clock, so a
    -- transaction that starts writing after this read writes above it.
    SELECT LEAST(bound, pg_catalog.min(a.xact_start)) INTO bound
      FROM pg_catalog.pg_stat_activity a
     WHERE a.datname = pg_catalog.current_database()
       AND a.pid <> pg_catalog.pg_backend_pid()
       AND a.backend_type IN ('client backend', 'background worker')
       AND (a.backend_xid IS NOT NULL OR a.state IN ('active', 'fastpath function call'));
    IF EXISTS (SELECT FROM pg_catalog.pg_prepared_xacts p WHERE p.database = pg_catalog.current_database()) THEN
        bound := since;
    END IF;
    -- At most ten minutes of traffic per call, so that one call after a
    -- long pause (nobody scraped for a day) is not one statement of hours;
    -- the calls after it catch up, and the lag gauge shows how far.
    bound := LEAST(GREATEST(bound, since), since + interval '10 minutes');

    -- The deliveries since the last mark, read once: by what they were
    -- answered, rejections by reason, and the claims among them (with
    -- those still open from before).
    counted := counted + webhook._metrics_add(
        $q$arrived AS MATERIALIZED (
               SELECT l.id, l.provider, l.event_id, l.claim_status, l.reject_reason, l.created_at, l.claim_completes
                 FROM webhook.delivery_log l WHERE l.id >= $1 AND l.id < $2
           ), failed_here AS (
               SELECT f.delivery_id FROM webhook.delivery_failures f WHERE f.delivery_id >= $1 AND f.delivery_id < $2
           ), seen AS (
               -- A claim of a new event that completed on commit, and did
               -- not fail before it, needs no look at its event (below).
               SELECT a.id, a.provider, a.event_id, a.created_at AS started_at, e.status, e.processed_at,
                      e.first_seen_at, e.attempts, e.claim_id = a.id AS owner
                 FROM arrived a
                 JOIN webhook.events e ON e.provider = a.provider AND e.event_id = a.event_id
                WHERE a.claim_status IN ('claimed', 'retry')
                  AND (a.claim_completes IS NOT TRUE OR a.id IN (SELECT delivery_id FROM failed_here))
               UNION ALL
               SELECT o.id, o.provider, o.event_id, o.started_at, e.status, e.processed_at,
                      e.first_seen_at, e.attempts, e.claim_id = o.id
                 FROM webhook.metric_open o
                 JOIN webhook.events e ON e.provider = o.provider AND e.event_id = o.event_id
                WHERE o.consumer = ''
           ), closed AS (
               DELETE FROM webhook.metric_open o USING seen s
                WHERE o.id = s.id AND NOT (s.owner AND s.status = 'processing')
           ), opened AS (
               INSERT INTO webhook.metric_open (id, provider, event_id, consumer, started_at)
               SELECT s.id, s.provider, s.event_id, '', s.started_at FROM seen s
                WHERE s.owner AND s.status = 'processing'
               ON CONFLICT (id) DO NOTHING
           ), done AS (
               SELECT s.processed_at AS at, s.provider, ''::text AS consumer, s.first_seen_at AS received_at,
                      s.started_at, s.attempts
                 FROM seen s WHERE s.owner AND s.status = 'processed'
               UNION ALL
               -- Its event was made processed, first seen and completed
               -- at the start of the claim's transaction (now()), which
               -- is the archive row's created_at: one attempt, no wait.
               SELECT a.created_at, a.provider, '', a.created_at, a.created_at, 1
                 FROM arrived a
                WHERE a.claim_completes AND a.id NOT IN (SELECT delivery_id FROM failed_here)
           )$q$,
        webhook._completion_counts() || $q$
           UNION ALL
           SELECT d.minute, d.provider, '', o.metric, o.label, d.n, 0
             FROM (SELECT webhook._minute(a.created_at) AS minute, a.provider, a.claim_status, a.reject_reason,
                          count(*) AS n
                     FROM arrived a GROUP BY 1, 2, 3, 4) d
            CROSS JOIN LATERAL (VALUES
                  ('deliveries', d.claim_status::text, true),
                  ('rejections', coalesce(d.reject_reason, 'unknown'), d.claim_status = 'rejected')
                  ) AS o (metric, label, counts)
            WHERE o.counts$q$,
        since, bound);

    -- Inbox leases: those still held before, and those taken since.
    counted := counted + webhook._metrics_add(
        $q$attempts AS (
               SELECT o.id FROM webhook.metric_open o WHERE o.consumer <> ''
               UNION ALL
               SELECT i.claim_id FROM webhook.inbox i WHERE i.claim_id >= $1 AND i.claim_id < $2
           ), seen AS (
               SELECT a.id, i.provider, i.event_id, i.consumer, i.status, i.processed_at, i.queued_at, i.attempts
                 FROM attempts a LEFT JOIN webhook.inbox i ON i.claim_id = a.id
           ), closed AS (
               DELETE FROM webhook.metric_open o USING seen s
                WHERE o.id = s.id AND s.status IS DISTINCT FROM 'leased'
           ), opened AS (
               INSERT INTO webhook.metric_open (id, provider, event_id, consumer, started_at)
               SELECT s.id, s.provider, s.event_id, s.consumer, webhook._id_time(s.id) FROM seen s
                WHERE s.status = 'leased'
               ON CONFLICT (id) DO NOTHING
           ), done AS (
               SELECT s.processed_at AS at, s.provider, s.consumer, s.queued_at AS received_at,
                      webhook._id_time(s.id) AS started_at, s.attempts
                 FROM seen s WHERE s.status = 'processed'
           )$q$,
        webhook._completion_counts(), since, bound);

    -- Failed attempts, of claims and of leases, and the dead letters they
    -- made: a failure whose event (or inbox row) is parked under the same
    -- claim or lease.
    counted := counted + webhook._metrics_add(
        $q$failed AS (
               SELECT f.failed_at AS at, l.provider, ''::text AS consumer, l.created_at AS started_at,
                      (e.status = 'dead' AND e.claim_id = f.delivery_id) AS parked
                 FROM webhook.delivery_failures f
                 JOIN webhook.delivery_log l ON l.id = f.delivery_id
                 JOIN webhook.events e ON e.provider = l.provider AND e.event_id = l.event_id
                WHERE f.failed_at >= $3 AND f.failed_at < $4
               UNION ALL
               SELECT f.failed_at, f.provider, f.consumer, webhook._id_time(f.claim_id),
                      coalesce(i.status = 'dead', false)
                 FROM webhook.inbox_failures f
                 LEFT JOIN webhook.inbox i ON i.claim_id = f.claim_id
                WHERE f.failed_at >= $3 AND f.failed_at < $4
           )$q$,
        webhook._failure_counts(), since, bound);

    -- Outcomes a replay or requeue undid before they were counted: each
    -- once, whenever it was held (its own minute, already passed or not).
    counted := counted + webhook._metrics_add(
        $q$held AS (
               DELETE FROM webhook.metric_held h RETURNING h.*
           ), done AS (
               SELECT h.at, h.provider, h.consumer, h.received_at, h.started_at, h.attempts
                 FROM held h WHERE h.outcome = 'completion'
           )$q$,
        webhook._completion_counts() || $q$
           UNION ALL
           SELECT webhook._minute(h.at), h.provider, h.consumer, 'dead_letters', '', count(*), 0
             FROM held h WHERE h.outcome = 'dead_letter'
            GROUP BY 1, 2, 3$q$,
        since, bound);

    UPDATE webhook.metric_marks SET counted_until = bound, rolled_up_at = pg_catalog.clock_timestamp();

    -- In minutes, its unit, whatever unit it was set in; fourteen days
    -- where nobody set it.
    retention := pg_catalog.make_interval(
        mins => webhook._setting_in('webhook.metrics_retention', 'min', 14 * 24 * 60)::integer);
    DELETE FROM webhook.metric_minutes WHERE minute < pg_catalog.now() - retention;
    -- A name no registered provider owns, quiet for the retention: its
    -- series go (a counter Prometheus then sees end), and its place
    -- under webhook.metrics_unregistered_providers is free again.
    DELETE FROM webhook.metric_totals t
     WHERE t.provider NOT IN ('', '(other)')
       AND NOT EXISTS (SELECT FROM webhook.providers p WHERE p.name = t.provider)
       AND NOT EXISTS (SELECT FROM webhook.metric_minutes m WHERE m.provider = t.provider)
       AND NOT EXISTS (SELECT FROM webhook.metric_open o WHERE o.provider = t.provider);
    RETURN counted;
END
$$;

-- A standby takes no writes. PostgreSQL refuses them anyway, at the first
-- statement that writes and naming neither the function nor the reason;
-- every function that writes calls this first instead (behind a cheap
-- pg_is_in_recovery() test), with the same SQLSTATE and the same words as
-- the library's functions.
CREATE FUNCTION webhook._refuse_on_standby(fn text) RETURNS void
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RAISE EXCEPTION '%: this server is a standby (in recovery) and takes no writes', fn
        USING ERRCODE = 'read_only_sql_transaction',
              HINT = 'Writes go to the primary: list every host in the connection string with '
                     'target_session_attrs=read-write, and the client finds the primary after a '
                     'failover (docs/high-availability.md).';
END
$$;
COMMENT ON FUNCTION webhook._refuse_on_standby(text) IS
    'Internal: refuses a function that writes, on a standby';

-- Every function that writes refuses on a standby first (above). The
-- rollup made anew at the top of this script gets the same refusal here.
CREATE OR REPLACE FUNCTION @extschema@.webhook_metrics_rollup()
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    since   timestamptz;
    bound   timestamptz := pg_catalog.clock_timestamp();
    counted bigint := 0;
    retention interval;
BEGIN
    IF pg_catalog.pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('webhook_metrics_rollup');
    END IF;
    -- One rollup at a time; whoever comes second has nothing to add.
    IF NOT pg_catalog.pg_try_advisory_xact_lock(pg_catalog.hashtext('pg_webhook_inbox.metrics')) THEN
        RETURN 0;
    END IF;
    IF NOT pg_catalog.pg_has_role(current_user, 'pg_read_all_stats', 'USAGE') THEN
        RAISE EXCEPTION 'webhook_metrics_rollup: the extension''s owner (%) cannot see other sessions'' transactions', current_user
            USING ERRCODE = '42501',
                  HINT = pg_catalog.format('GRANT pg_read_all_stats TO %I; the rollup counts only what no running transaction can still write.', current_user);
    END IF;
    -- The row is made with the extension; were it deleted, counting
    -- starts again from now.
    INSERT INTO webhook.metric_marks (counted_until) VALUES (pg_catalog.now()) ON CONFLICT DO NOTHING;
    SELECT counted_until INTO STRICT since FROM webhook.metric_marks FOR UPDATE;

    -- The bound (see the top of this file): taken after the clock, so a
    -- transaction that starts writing after this read writes above it.
    SELECT LEAST(bound, pg_catalog.min(a.xact_start)) INTO bound
      FROM pg_catalog.pg_stat_activity a
     WHERE a.datname = pg_catalog.current_database()
       AND a.pid <> pg_catalog.pg_backend_pid()
       AND a.backend_type IN ('client backend', 'background worker')
       AND (a.backend_xid IS NOT NULL OR a.state IN ('active', 'fastpath function call'));
    IF EXISTS (SELECT FROM pg_catalog.pg_prepared_xacts p WHERE p.database = pg_catalog.current_database()) THEN
        bound := since;
    END IF;
    -- At most ten minutes of traffic per call, so that one call after a
    -- long pause (nobody scraped for a day) is not one statement of hours;
    -- the calls after it catch up, and the lag gauge shows how far.
    bound := LEAST(GREATEST(bound, since), since + interval '10 minutes');

    -- The deliveries since the last mark, read once: by what they were
    -- answered, rejections by reason, and the claims among them (with
    -- those still open from before).
    counted := counted + webhook._metrics_add(
        $q$arrived AS MATERIALIZED (
               SELECT l.id, l.provider, l.event_id, l.claim_status, l.reject_reason, l.created_at, l.claim_completes
                 FROM webhook.delivery_log l WHERE l.id >= $1 AND l.id < $2
           ), failed_here AS (
               SELECT f.delivery_id FROM webhook.delivery_failures f WHERE f.delivery_id >= $1 AND f.delivery_id < $2
           ), seen AS (
               -- A claim of a new event that completed on commit, and did
               -- not fail before it, needs no look at its event (below).
               SELECT a.id, a.provider, a.event_id, a.created_at AS started_at, e.status, e.processed_at,
                      e.first_seen_at, e.attempts, e.claim_id = a.id AS owner
                 FROM arrived a
                 JOIN webhook.events e ON e.provider = a.provider AND e.event_id = a.event_id
                WHERE a.claim_status IN ('claimed', 'retry')
                  AND (a.claim_completes IS NOT TRUE OR a.id IN (SELECT delivery_id FROM failed_here))
               UNION ALL
               SELECT o.id, o.provider, o.event_id, o.started_at, e.status, e.processed_at,
                      e.first_seen_at, e.attempts, e.claim_id = o.id
                 FROM webhook.metric_open o
                 JOIN webhook.events e ON e.provider = o.provider AND e.event_id = o.event_id
                WHERE o.consumer = ''
           ), closed AS (
               DELETE FROM webhook.metric_open o USING seen s
                WHERE o.id = s.id AND NOT (s.owner AND s.status = 'processing')
           ), opened AS (
               INSERT INTO webhook.metric_open (id, provider, event_id, consumer, started_at)
               SELECT s.id, s.provider, s.event_id, '', s.started_at FROM seen s
                WHERE s.owner AND s.status = 'processing'
               ON CONFLICT (id) DO NOTHING
           ), done AS (
               SELECT s.processed_at AS at, s.provider, ''::text AS consumer, s.first_seen_at AS received_at,
                      s.started_at, s.attempts
                 FROM seen s WHERE s.owner AND s.status = 'processed'
               UNION ALL
               -- Its event was made processed, first seen and completed
               -- at the start of the claim's transaction (now()), which
               -- is the archive row's created_at: one attempt, no wait.
               SELECT a.created_at, a.provider, '', a.created_at, a.created_at, 1
                 FROM arrived a
                WHERE a.claim_completes AND a.id NOT IN (SELECT delivery_id FROM failed_here)
           )$q$,
        webhook._completion_counts() || $q$
           UNION ALL
           SELECT d.minute, d.provider, '', o.metric, o.label, d.n, 0
             FROM (SELECT webhook._minute(a.created_at) AS minute, a.provider, a.claim_status, a.reject_reason,
                          count(*) AS n
                     FROM arrived a GROUP BY 1, 2, 3, 4) d
            CROSS JOIN LATERAL (VALUES
                  ('deliveries', d.claim_status::text, true),
                  ('rejections', coalesce(d.reject_reason, 'unknown'), d.claim_status = 'rejected')
                  ) AS o (metric, label, counts)
            WHERE o.counts$q$,
        since, bound);

    -- Inbox leases: those still held before, and those taken since.
    counted := counted + webhook._metrics_add(
        $q$attempts AS (
               SELECT o.id FROM webhook.metric_open o WHERE o.consumer <> ''
               UNION ALL
               SELECT i.claim_id FROM webhook.inbox i WHERE i.claim_id >= $1 AND i.claim_id < $2
           ), seen AS (
               SELECT a.id, i.provider, i.event_id, i.consumer, i.status, i.processed_at, i.queued_at, i.attempts
                 FROM attempts a LEFT JOIN webhook.inbox i ON i.claim_id = a.id
           ), closed AS (
               DELETE FROM webhook.metric_open o USING seen s
                WHERE o.id = s.id AND s.status IS DISTINCT FROM 'leased'
           ), opened AS (
               INSERT INTO webhook.metric_open (id, provider, event_id, consumer, started_at)
               SELECT s.id, s.provider, s.event_id, s.consumer, webhook._id_time(s.id) FROM seen s
                WHERE s.status = 'leased'
               ON CONFLICT (id) DO NOTHING
           ), done AS (
               SELECT s.processed_at AS at, s.provider, s.consumer, s.queued_at AS received_at,
                      webhook._id_time(s.id) AS started_at, s.attempts
                 FROM seen s WHERE s.status = 'processed'
           )$q$,
        webhook._completion_counts(), since, bound);

    -- Failed attempts, of claims and of leases, and the dead letters they
    -- made: a failure whose event (or inbox row) is parked under the same
    -- claim or lease.
    counted := counted + webhook._metrics_add(
        $q$failed AS (
               SELECT f.failed_at AS at, l.provider, ''::text AS consumer, l.created_at AS started_at,
                      (e.status = 'dead' AND e.claim_id = f.delivery_id) AS parked
                 FROM webhook.delivery_failures f
                 JOIN webhook.delivery_log l ON l.id = f.delivery_id
                 JOIN webhook.events e ON e.provider = l.provider AND e.event_id = l.event_id
                WHERE f.failed_at >= $3 AND f.failed_at < $4
               UNION ALL
               SELECT f.failed_at, f.provider, f.consumer, webhook._id_time(f.claim_id),
                      coalesce(i.status = 'dead', false)
                 FROM webhook.inbox_failures f
                 LEFT JOIN webhook.inbox i ON i.claim_id = f.claim_id
                WHERE f.failed_at >= $3 AND f.failed_at < $4
           )$q$,
        webhook._failure_counts(), since, bound);

    -- Outcomes a replay or requeue undid before they were counted: each
    -- once, whenever it was held (its own minute, already passed or not).
    counted := counted + webhook._metrics_add(
        $q$held AS (
               DELETE FROM webhook.metric_held h RETURNING h.*
           ), done AS (
               SELECT h.at, h.provider, h.consumer, h.received_at, h.started_at, h.attempts
                 FROM held h WHERE h.outcome = 'completion'
           )$q$,
        webhook._completion_counts() || $q$
           UNION ALL
           SELECT webhook._minute(h.at), h.provider, h.consumer, 'dead_letters', '', count(*), 0
             FROM held h WHERE h.outcome = 'dead_letter'
            GROUP BY 1, 2, 3$q$,
        since, bound);

    UPDATE webhook.metric_marks SET counted_until = bound, rolled_up_at = pg_catalog.clock_timestamp();

    -- In minutes, its unit, whatever unit it was set in; fourteen days
    -- where nobody set it.
    retention := pg_catalog.make_interval(
        mins => webhook._setting_in('webhook.metrics_retention', 'min', 14 * 24 * 60)::integer);
    DELETE FROM webhook.metric_minutes WHERE minute < pg_catalog.now() - retention;
    -- A name no registered provider owns, quiet for the retention: its
    -- series go (a counter Prometheus then sees end), and its place
    -- under webhook.metrics_unregistered_providers is free again.
    DELETE FROM webhook.metric_totals t
     WHERE t.provider NOT IN ('', '(other)')
       AND NOT EXISTS (SELECT FROM webhook.providers p WHERE p.name = t.provider)
       AND NOT EXISTS (SELECT FROM webhook.metric_minutes m WHERE m.provider = t.provider)
       AND NOT EXISTS (SELECT FROM webhook.metric_open o WHERE o.provider = t.provider);
    RETURN counted;
END
$$;

-- When the n-th of the events an operator puts back in the queue
-- (released, requeued, replayed, resumed) is due: from one instant
-- (`start`, read once per statement), in the order they were first
-- queued (an ordered provider's events of one transaction by their
-- order), `spacing` and a microsecond after the one before. Workers lease
-- by due time; put back due "now", each row's clock read as the UPDATE
-- happened to reach it, an ordered provider's events would come out in
-- the heap's order and the older ones be refused as stale.
CREATE FUNCTION webhook._due_in_turn(start timestamptz, n bigint, spacing interval) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN start + (n - 1) * (spacing + interval '1 microsecond');
COMMENT ON FUNCTION webhook._due_in_turn(timestamptz, bigint, interval) IS
    'Internal: when the n-th event put back in the queue is due, in the order it was first queued';

-- End a quarantine (the same provider, entity and consumer): the events
-- set aside are ready again, behind what is queued now, unless another
-- quarantine still covers them. Returns how many are ready again. Calls
-- of webhook_next leave the provider's events alone until it commits.
CREATE OR REPLACE FUNCTION @extschema@.webhook_release(
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

-- Replay finished inbox work matching a filter. A dry run (the default)
-- changes nothing and says how many event and consumer pairs would be
-- queued, with a sample; a run queues them (each once, at `rate` a
-- second from now, or all at once) and returns the replay's id.
CREATE OR REPLACE FUNCTION @extschema@.webhook_replay(
    provider       text DEFAULT NULL,
    consumer       text DEFAULT NULL,
    event_types    text[] DEFAULT NULL,
    statuses       text[] DEFAULT '{processed}',
    since          timestamptz DEFAULT NULL,
    until          timestamptz DEFAULT NULL,
    error_contains text DEFAULT NULL,
    payload_path   jsonpath DEFAULT NULL,
    reason         text DEFAULT NULL,
    rate           double precision DEFAULT NULL,
    dry_run        boolean DEFAULT true,
    sample         integer DEFAULT 10
) RETURNS webhook.replay_result
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p text := NULLIF(webhook._check_name('webhook_replay', 'provider', webhook_replay.provider, false), '');
    c text := NULLIF(webhook._check_name('webhook_replay', 'consumer', webhook_replay.consumer, false), '');
    request jsonb;
    result webhook.replay_result;
    started uuid;
BEGIN
    IF pg_catalog.pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('webhook_replay');
    END IF;
    IF webhook_replay.statuses IS NULL OR pg_catalog.cardinality(webhook_replay.statuses) = 0
       OR NOT webhook_replay.statuses <@ ARRAY['processed', 'dead', 'stale', 'filtered', 'failed']
       OR array_position(webhook_replay.statuses, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'webhook_replay: argument "statuses" must list some of processed, dead, stale, filtered, failed'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF pg_catalog.cardinality(webhook_replay.event_types) > 1000
       OR array_position(webhook_replay.event_types, NULL) IS NOT NULL
       OR EXISTS (SELECT FROM pg_catalog.unnest(webhook_replay.event_types) t
                   WHERE t = '' OR pg_catalog.octet_length(t) > 255) THEN
        RAISE EXCEPTION 'webhook_replay: argument "event_types" must hold at most 1000 types of 1 to 255 bytes'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF webhook_replay.until <= webhook_replay.since THEN
        RAISE EXCEPTION 'webhook_replay: argument "until" must be later than "since"'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF webhook_replay.error_contains = '' OR pg_catalog.octet_length(webhook_replay.error_contains) > 2048 THEN
        RAISE EXCEPTION 'webhook_replay: argument "error_contains" must be 1 to 2048 bytes'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF pg_catalog.octet_length(webhook_replay.payload_path::text) > 4096 THEN
        RAISE EXCEPTION 'webhook_replay: argument "payload_path" must be at most 4096 bytes'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT (webhook_replay.rate > 0 AND webhook_replay.rate <= 100000) THEN
        RAISE EXCEPTION 'webhook_replay: argument "rate" must be more than 0 and at most 100000 (events a second)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF webhook_replay.dry_run IS NULL THEN
        RAISE EXCEPTION 'webhook_replay: argument "dry_run" must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF webhook_replay.sample IS NULL OR webhook_replay.sample NOT BETWEEN 0 AND 1000 THEN
        RAISE EXCEPTION 'webhook_replay: argument "sample" must be between 0 and 1000'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p IS NOT NULL AND NOT EXISTS (SELECT FROM webhook.providers r WHERE r.name = p) THEN
        RAISE EXCEPTION 'webhook_replay: argument "provider": no provider "%" is registered', p
            USING ERRCODE = 'undefined_object';
    END IF;

    IF webhook_replay.dry_run THEN
        SELECT NULL, true, false, pg_catalog.count(*),
               coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
                            'provider', m.provider, 'event_id', m.event_id, 'consumer', m.consumer,
                            'event_type', m.event_type, 'status', m.status, 'queued_at', m.queued_at)
                            ORDER BY m.queued_at, m.delivery_id)
                        FILTER (WHERE m.n <= webhook_replay.sample), '[]')
          INTO result
          FROM (SELECT x.*, pg_catalog.row_number() OVER (ORDER BY x.queued_at, x.delivery_id) AS n
                  FROM webhook._replay_matches(p, c, webhook_replay.event_types, webhook_replay.statuses,
                                               webhook_replay.since, webhook_replay.until,
                                               webhook_replay.error_contains, webhook_replay.payload_path) x) m;
        RETURN result;
    END IF;

    IF webhook_replay.reason IS NULL THEN
        RAISE EXCEPTION 'webhook_replay: argument "reason" must not be NULL for a run'
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = 'Say why (the fix deployed, the ticket): it names the replay, with its filter.';
    END IF;
    IF webhook_replay.reason = '' OR pg_catalog.octet_length(webhook_replay.reason) > 2048 THEN
        RAISE EXCEPTION 'webhook_replay: argument "reason" must be 1 to 2048 bytes'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    request := pg_catalog.jsonb_strip_nulls(pg_catalog.jsonb_build_object(
        'provider', p, 'consumer', c, 'event_types', webhook_replay.event_types,
        'statuses', webhook_replay.statuses, 'since', webhook_replay.since, 'until', webhook_replay.until,
        'error_contains', webhook_replay.error_contains, 'payload_path', webhook_replay.payload_path::text));

    -- The same request twice (a retry after a crash, a double click)
    -- waits for the first, then finds it.
    PERFORM pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('pg_webhook_inbox replay'),
                                             pg_catalog.hashtext(request::text || webhook_replay.reason));
    SELECT r.id, false, false, r.events, NULL INTO result
      FROM webhook.replays r
     WHERE r.filter = request AND r.reason = webhook_replay.reason;
    IF FOUND THEN
        RAISE NOTICE 'webhook_replay: replay % with this filter and reason was started at %; not queued again',
            result.replay_id, (SELECT r.requested_at FROM webhook.replays r WHERE r.id = result.replay_id)
            USING HINT = 'To run it again, give another reason.';
        RETURN result;
    END IF;

    -- webhook_purge decides which archive rows may go from the events'
    -- inbox rows; it must not decide while finished rows become ready.
    PERFORM pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('pg_webhook_inbox archive partitions'));
    INSERT INTO webhook.replays (reason, filter, rate, events)
    VALUES (webhook_replay.reason, request, webhook_replay.rate, 0)
    RETURNING webhook.replays.id INTO started;
    -- Row locks, no lock per event: a replay of any size fits the lock table.
    INSERT INTO webhook.replay_items (replay_id, delivery_id, consumer, prior_status, prior_attempts,
                                      prior_replay_id)
    SELECT started, i.delivery_id, i.consumer, i.status, i.attempts, i.replay_id
      FROM webhook.inbox i
     WHERE (i.delivery_id, i.consumer) IN (
               SELECT m.delivery_id, m.consumer
                 FROM webhook._replay_matches(p, c, webhook_replay.event_types, webhook_replay.statuses,
                                              webhook_replay.since, webhook_replay.until,
                                              webhook_replay.error_contains, webhook_replay.payload_path) m)
       -- Read again once locked: a row finished meanwhile, or queued by
       -- another replay, is as it is now.
       AND i.status::text IN ('processed', 'dead', 'stale', 'filtered')
       FOR UPDATE OF i;
    -- The metrics read a completion or a dead letter off its row, which
    -- the replay's lease rewrites: keep what no rollup has counted yet.
    PERFORM webhook._metrics_hold(h.outcome, ARRAY(
                SELECT i.claim_id FROM webhook.replay_items t
                  JOIN webhook.inbox i ON i.delivery_id = t.delivery_id AND i.consumer = t.consumer
                 WHERE t.replay_id = started AND t.prior_status::text = h.status))
       FROM (VALUES ('completion', 'processed'), ('dead_letter', 'dead')) AS h (outcome, status);
    UPDATE webhook.inbox i
       SET status = 'ready', attempts = 0, requeues = i.requeues + 1, replay_id = started,
           run_at = webhook._due_in_turn((SELECT pg_catalog.clock_timestamp()), q.n,
                                         coalesce(1 / webhook_replay.rate, 0) * interval '1 second')
      FROM (SELECT t.delivery_id, t.consumer,
                   pg_catalog.row_number() OVER (ORDER BY j.queued_at, j.order_value, t.delivery_id, t.consumer) AS n
              FROM webhook.replay_items t
              JOIN webhook.inbox j ON j.delivery_id = t.delivery_id AND j.consumer = t.consumer
             WHERE t.replay_id = started) q
     WHERE i.delivery_id = q.delivery_id AND i.consumer = q.consumer;
    GET DIAGNOSTICS result.events = ROW_COUNT;
    UPDATE webhook.replays r SET events = result.events WHERE r.id = started;
    PERFORM pg_catalog.pg_notify('webhook_inbox', '');
    SELECT started, false, true, result.events, NULL INTO result;
    RETURN result;
END
$$;

-- A paused replay's events are due again, spread at its rate from now.
CREATE OR REPLACE FUNCTION @extschema@.webhook_replay_resume(replay_id uuid) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    spread double precision;
    due bigint;
BEGIN
    IF pg_catalog.pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('webhook_replay_resume');
    END IF;
    spread := webhook._replay_change('webhook_replay_resume', webhook_replay_resume.replay_id, 'paused', 'running');
    -- A quarantined entity's events stay aside.
    UPDATE webhook.inbox i
       SET run_at = webhook._due_in_turn((SELECT pg_catalog.clock_timestamp()), q.n,
                                         coalesce(1 / spread, 0) * interval '1 second')
      FROM (SELECT j.delivery_id, j.consumer,
                   pg_catalog.row_number() OVER (ORDER BY j.queued_at, j.order_value, j.delivery_id, j.consumer) AS n
              FROM webhook.inbox j
             WHERE j.replay_id = webhook_replay_resume.replay_id AND j.status = 'ready'
               AND j.run_at = '9999-01-01 00:00:00+00') q
     WHERE i.delivery_id = q.delivery_id AND i.consumer = q.consumer;
    GET DIAGNOSTICS due = ROW_COUNT;
    PERFORM pg_catalog.pg_notify('webhook_inbox', '');
    RETURN due;
END
$$;

-- Every metric now, one row per series: the counters and histograms since
-- counting began, and the gauges read at once; or only one family's
-- series (an exporter's query each: the gauges that count the inbox are
-- then counted once a scrape, not once a query). Rolls up first, unless a
-- rollup ran in the last second (the other queries of the same scrape).
-- Labels are bounded: provider, consumer, and one of status, reason, le,
-- state, rule.
CREATE OR REPLACE FUNCTION @extschema@.webhook_metrics(family text DEFAULT NULL)
RETURNS TABLE (metric text, kind text, provider text, consumer text, label text, label_value text, value double precision)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    only_family text := webhook_metrics.family;
BEGIN
    IF only_family IS NOT NULL
       AND NOT EXISTS (SELECT FROM webhook._metric_families() f WHERE f.family = only_family) THEN
        RAISE EXCEPTION 'webhook_metrics: argument "family" must name a metric family (webhook._metric_families()), not %',
            pg_catalog.quote_literal(only_family) USING ERRCODE = '22023';
    END IF;
    -- A standby (in recovery) cannot write: it shows what the primary
    -- last rolled up, replicated, as far behind as webhook_metrics_lag_seconds says.
    IF NOT pg_catalog.pg_is_in_recovery()
       AND NOT EXISTS (SELECT FROM webhook.metric_marks m
                        WHERE m.rolled_up_at > pg_catalog.clock_timestamp() - interval '1 second') THEN
        PERFORM @extschema@.webhook_metrics_rollup();
    END IF;
    RETURN QUERY
    WITH counters (family, metric, label) AS (VALUES
            ('webhook_deliveries_total', 'deliveries', 'status'),
            ('webhook_rejections_total', 'rejections', 'reason'),
            ('webhook_completions_total', 'completions', NULL),
            ('webhook_failures_total', 'failures', NULL),
            ('webhook_dead_letters_total', 'dead_letters', NULL)),
         histograms (family, metric) AS (VALUES
            ('webhook_latency_seconds', 'latency'),
            ('webhook_processing_seconds', 'processing'),
            ('webhook_attempts', 'attempts')),
         series AS (
            SELECT c.family AS metric, 'counter' AS kind, t.provider, t.consumer, c.label,
                   CASE WHEN c.label IS NULL THEN NULL ELSE t.label END AS label_value, t.count::float8 AS value
              FROM counters c JOIN webhook.metric_totals t ON t.metric = c.metric
             WHERE only_family IS NULL OR c.family = only_family
            UNION ALL
            -- Histograms: every bucket, cumulative, then sum and count.
            SELECT h.family || '_bucket', 'histogram', p.provider, p.consumer, 'le',
                   CASE WHEN b = 'Infinity' THEN '+Inf' ELSE b::text END,
                   (SELECT coalesce(sum(t.count), 0) FROM webhook.metric_totals t
                     WHERE t.metric = h.metric AND t.provider = p.provider AND t.consumer = p.consumer
                       AND (t.label = '+Inf' AND b = 'Infinity' OR t.label <> '+Inf' AND t.label::float8 <= b))::float8
              FROM histograms h
              JOIN (SELECT DISTINCT t.metric, t.provider, t.consumer FROM webhook.metric_totals t) p ON p.metric = h.metric
             CROSS JOIN LATERAL pg_catalog.unnest(webhook._metric_buckets(h.metric)) AS b
             WHERE only_family IS NULL OR h.family = only_family
            UNION ALL
            SELECT h.family || s.suffix, 'histogram', t.provider, t.consumer, NULL, NULL,
                   CASE s.suffix WHEN '_sum' THEN sum(t.sum) ELSE sum(t.count)::float8 END
              FROM histograms h JOIN webhook.metric_totals t ON t.metric = h.metric
             CROSS JOIN (VALUES ('_sum'), ('_count')) AS s (suffix)
             WHERE only_family IS NULL OR h.family = only_family
             GROUP BY h.family, s.suffix, t.provider, t.consumer
            UNION ALL
            SELECT 'webhook_inbox_events', 'gauge', st.provider, st.consumer, 'state', g.state, pg_catalog.sum(g.n)::float8
              FROM (SELECT webhook._metric_provider(x.provider) AS provider, x.consumer, x.ready, x.scheduled,
                           x.leased, x.dead, x.quarantined
                      FROM webhook.inbox_stats x) st
             CROSS JOIN LATERAL (VALUES ('ready', st.ready), ('scheduled', st.scheduled),
                                        ('leased', st.leased), ('dead', st.dead),
                                        ('quarantined', st.quarantined)) AS g (state, n)
             WHERE only_family IS NULL OR only_family = 'webhook_inbox_events'
             GROUP BY st.provider, st.consumer, g.state
            UNION ALL
            SELECT 'webhook_inbox_oldest_ready_seconds', 'gauge', webhook._metric_provider(st.provider), st.consumer, NULL, NULL,
                   coalesce(pg_catalog.date_part('epoch', pg_catalog.max(st.oldest_ready_age)), 0)
              FROM webhook.inbox_stats st
             WHERE only_family IS NULL OR only_family = 'webhook_inbox_oldest_ready_seconds'
             GROUP BY 3, 4
            UNION ALL
            SELECT 'webhook_oldest_unfinished_claim_seconds', 'gauge', webhook._metric_provider(o.provider), '', NULL, NULL,
                   pg_catalog.date_part('epoch', pg_catalog.clock_timestamp() - pg_catalog.min(o.started_at))
              FROM webhook.metric_open o
             WHERE o.consumer = '' AND (only_family IS NULL OR only_family = 'webhook_oldest_unfinished_claim_seconds')
             GROUP BY 3
            UNION ALL
            SELECT 'webhook_steering_paused', 'gauge', s.provider, s.consumer, 'kind', s.kind, pg_catalog.count(*)::float8
              FROM (SELECT p.provider, p.consumer,
                           CASE WHEN p.entity_key <> '' THEN 'quarantine' ELSE 'pause' END AS kind
                      FROM webhook.pauses p) s
             WHERE only_family IS NULL OR only_family = 'webhook_steering_paused'
             GROUP BY s.provider, s.consumer, s.kind
            UNION ALL
            SELECT 'webhook_circuit_breaker_open', 'gauge', webhook._metric_provider(b.provider), b.consumer, 'state',
                   b.state::text, pg_catalog.count(*)::float8
              FROM webhook.breakers b
             WHERE b.state <> 'closed'
               AND (only_family IS NULL OR only_family = 'webhook_circuit_breaker_open')
             GROUP BY 3, 4, 6
            UNION ALL
            SELECT 'webhook_alerts_open', 'gauge', '', '', 'rule', r.name,
                   (SELECT count(*) FROM webhook.alerts a WHERE a.rule = r.name AND a.status <> 'resolved')::float8
              FROM webhook.alert_rules_in_effect r
             WHERE only_family IS NULL OR only_family = 'webhook_alerts_open'
            UNION ALL
            SELECT 'webhook_metrics_lag_seconds', 'gauge', '', '', NULL, NULL,
                   pg_catalog.date_part('epoch', pg_catalog.clock_timestamp() - m.counted_until)
              FROM webhook.metric_marks m
             WHERE only_family IS NULL OR only_family = 'webhook_metrics_lag_seconds')
    SELECT * FROM series s ORDER BY s.metric, s.provider, s.consumer, s.label_value;
END
$$;

-- Add a signing secret (or re-activate a retired one). Returns its fingerprint.
CREATE OR REPLACE FUNCTION @extschema@.webhook_add_secret(provider text, secret text)
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    fp       text;
    v_scheme text;
    problem  text;
BEGIN
    IF pg_catalog.pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('webhook_add_secret');
    END IF;
    IF webhook_add_secret.secret IS NULL OR webhook_add_secret.secret = '' THEN
        RAISE EXCEPTION 'webhook_add_secret: argument "secret" must not be empty'
            USING ERRCODE = 'zero_length_character_string';
    END IF;
    SELECT p.scheme INTO v_scheme FROM webhook.providers p WHERE p.name = webhook_add_secret.provider;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'webhook_add_secret: argument "provider": no provider "%" is registered', webhook_add_secret.provider
            USING ERRCODE = 'undefined_object';
    END IF;
    -- A public key or certificate in the wrong format would only show up
    -- later, as every delivery refused: say so now. (The message never
    -- echoes the secret.)
    problem := @extschema@.webhook_check_key(v_scheme, webhook_add_secret.secret);
    IF problem IS NOT NULL THEN
        RAISE EXCEPTION 'webhook_add_secret: argument "secret" is not a key for scheme "%"', v_scheme
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = problem || '.';
    END IF;
    -- Each delivery is checked against every active secret: keep them few.
    IF (SELECT pg_catalog.count(*) FROM webhook.provider_secrets s
         WHERE s.provider = webhook_add_secret.provider AND s.retired_at IS NULL
           AND s.secret <> webhook_add_secret.secret) >= 16 THEN
        RAISE EXCEPTION 'webhook_add_secret: argument "provider": "%" has 16 active secrets already', webhook_add_secret.provider
            USING ERRCODE = 'program_limit_exceeded',
                  HINT = 'Retire the secrets the provider no longer signs with: webhook_retire_secret(provider, fingerprint).';
    END IF;
    fp := webhook._fingerprint(webhook_add_secret.secret);
    INSERT INTO webhook.provider_secrets AS s (provider, secret, fingerprint)
    VALUES (webhook_add_secret.provider, webhook_add_secret.secret, fp)
    ON CONFLICT ON CONSTRAINT provider_secrets_pkey DO UPDATE SET retired_at = NULL;
    -- Its use row, made now: deliveries then only ever update it, and skip
    -- it while another holds it (src/receive/secrets.rs).
    INSERT INTO webhook.secret_uses (provider, fingerprint)
    VALUES (webhook_add_secret.provider, fp)
    ON CONFLICT ON CONSTRAINT secret_uses_pkey DO NOTHING;
    RETURN fp;
END
$$;

-- An operator is on it: it stays until its condition clears.
CREATE OR REPLACE FUNCTION @extschema@.webhook_alert_acknowledge(alert_id bigint)
RETURNS webhook.alerts
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    a webhook.alerts;
BEGIN
    IF pg_catalog.pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('webhook_alert_acknowledge');
    END IF;
    IF alert_id IS NULL THEN
        RAISE EXCEPTION 'webhook_alert_acknowledge: argument "alert_id" must not be NULL' USING ERRCODE = '22004';
    END IF;
    UPDATE webhook.alerts x
       SET status = 'acknowledged', acknowledged_at = pg_catalog.now(), acknowledged_by = session_user
     WHERE x.id = alert_id AND x.status = 'open'
    RETURNING x.* INTO a;
    IF a.id IS NULL THEN
        SELECT * INTO a FROM webhook.alerts x WHERE x.id = alert_id;
        IF a.id IS NULL THEN
            RAISE EXCEPTION 'webhook_alert_acknowledge: no alert with id %', alert_id USING ERRCODE = 'P0002';
        END IF;
        IF a.status = 'resolved' THEN
            RAISE EXCEPTION 'webhook_alert_acknowledge: alert % is resolved', alert_id USING ERRCODE = '55000';
        END IF;
        RETURN a;  -- acknowledged already
    END IF;
    PERFORM webhook._alert_notify(a, 'acknowledged');
    RETURN a;
END
$$;

-- No notification about an alert for a while (it is still tracked).
CREATE OR REPLACE FUNCTION @extschema@.webhook_alert_silence(alert_id bigint, duration interval)
RETURNS webhook.alerts
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    a webhook.alerts;
BEGIN
    IF pg_catalog.pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('webhook_alert_silence');
    END IF;
    IF alert_id IS NULL THEN
        RAISE EXCEPTION 'webhook_alert_silence: argument "alert_id" must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF duration IS NULL OR duration <= interval '0' OR duration > interval '30 days' THEN
        RAISE EXCEPTION 'webhook_alert_silence: argument "duration" must be more than 0 and at most 30 days'
            USING ERRCODE = '22023';
    END IF;
    UPDATE webhook.alerts x SET silenced_until = pg_catalog.now() + duration
     WHERE x.id = alert_id AND x.status <> 'resolved'
    RETURNING x.* INTO a;
    IF a.id IS NULL THEN
        IF EXISTS (SELECT FROM webhook.alerts x WHERE x.id = alert_id) THEN
            RAISE EXCEPTION 'webhook_alert_silence: alert % is resolved', alert_id USING ERRCODE = '55000';
        END IF;
        RAISE EXCEPTION 'webhook_alert_silence: no alert with id %', alert_id USING ERRCODE = 'P0002';
    END IF;
    RETURN a;
END
$$;

-- Roll up the metrics, then open, update and resolve alerts. Returns the
-- alerts that changed (opened, resolved) with the change.
CREATE OR REPLACE FUNCTION @extschema@.webhook_alerts_evaluate()
RETURNS TABLE (id bigint, change text, rule text, provider text, consumer text, status webhook.alert_status, message text)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    IF pg_catalog.pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('webhook_alerts_evaluate');
    END IF;
    -- Two evaluations at once would both open the same alert.
    PERFORM pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('pg_webhook_inbox.alerts'));
    PERFORM @extschema@.webhook_metrics_rollup();
    -- One statement, one snapshot: what fires is measured once, and each
    -- unresolved alert is either still firing or resolved.
    RETURN QUERY
    WITH firing AS (
        SELECT * FROM webhook._alert_conditions()
    ), still AS (
        UPDATE webhook.alerts x
           SET value = f.value, threshold = f.threshold, message = f.message, last_seen_at = pg_catalog.now()
          FROM firing f
         WHERE x.status <> 'resolved' AND x.rule = f.rule AND x.provider = f.provider AND x.consumer = f.consumer
    ), opened AS (
        INSERT INTO webhook.alerts AS x (rule, kind, provider, consumer, value, threshold, message)
        SELECT f.rule, f.kind, f.provider, f.consumer, f.value, f.threshold, f.message
          FROM firing f
         WHERE NOT EXISTS (SELECT FROM webhook.alerts y
                            WHERE y.status <> 'resolved' AND y.rule = f.rule AND y.provider = f.provider
                              AND y.consumer = f.consumer)
        RETURNING x.*
    ), resolved AS (
        UPDATE webhook.alerts x SET status = 'resolved', resolved_at = pg_catalog.now()
         WHERE x.status <> 'resolved'
           AND NOT EXISTS (SELECT FROM firing f
                            WHERE x.rule = f.rule AND x.provider = f.provider AND x.consumer = f.consumer)
        RETURNING x.*
    ), changed AS (
        SELECT o::webhook.alerts AS a, 'opened' AS change FROM opened o
        UNION ALL
        SELECT r::webhook.alerts, 'resolved' FROM resolved r
    )
    SELECT (c.a).id, c.change, (c.a).rule, (c.a).provider, (c.a).consumer, (c.a).status, (c.a).message
      FROM changed c, LATERAL webhook._alert_notify(c.a, c.change)
     ORDER BY (c.a).id;
END
$$;

-- Queue for `consumer` the provider's inbox events first seen in
-- [since, until), at `rate` a second from now (their run times spread, so
-- that the events queued live meanwhile are not behind all of them), or
-- all ready at once. Returns how many were queued.
CREATE OR REPLACE FUNCTION @extschema@.webhook_backfill(
    provider text,
    consumer text,
    since    timestamptz,
    until    timestamptz DEFAULT NULL,
    rate     double precision DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p text := webhook._check_name('webhook_backfill', 'provider', webhook_backfill.provider, true);
    c text := webhook._check_name('webhook_backfill', 'consumer', webhook_backfill.consumer, true);
    upto timestamptz := coalesce(webhook_backfill.until, pg_catalog.now());
    queued bigint;
BEGIN
    IF pg_catalog.pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('webhook_backfill');
    END IF;
    IF webhook_backfill.since IS NULL THEN
        RAISE EXCEPTION 'webhook_backfill: argument "since" must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF NOT (webhook_backfill.rate > 0 AND webhook_backfill.rate <= 100000) THEN
        RAISE EXCEPTION 'webhook_backfill: argument "rate" must be more than 0 and at most 100000 (events a second)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT EXISTS (SELECT FROM webhook.providers r WHERE r.name = p) THEN
        RAISE EXCEPTION 'webhook_backfill: argument "provider": no provider "%" is registered', p
            USING ERRCODE = 'undefined_object';
    END IF;
    IF NOT EXISTS (SELECT FROM webhook.providers r
                    WHERE r.name = p AND c = ANY (coalesce(NULLIF(r.consumers, '{}'), '{default}'))) THEN
        RAISE EXCEPTION 'webhook_backfill: argument "consumer": "%" is not a consumer of "%"', c, p
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Add it first: webhook_register_provider(provider, consumers => ARRAY[..., consumer]).';
    END IF;
    -- webhook_purge decides which archive rows may go from the events'
    -- inbox rows; it must not decide while rows are added here.
    PERFORM pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('pg_webhook_inbox archive partitions'));
    INSERT INTO webhook.inbox AS i (provider, event_id, consumer, event_type, delivery_id, entity_key,
                                    order_value, run_at)
    SELECT e.provider, e.event_id, c, e.event_type, e.claim_id, e.entity_key, e.order_value,
           pg_catalog.clock_timestamp()
               + coalesce((pg_catalog.row_number() OVER (ORDER BY e.first_seen_at, e.event_id) - 1)
                          / webhook_backfill.rate, 0) * interval '1 second'
      FROM webhook.events e
     WHERE e.provider = p AND e.status = 'queued'
       AND e.first_seen_at >= webhook_backfill.since AND e.first_seen_at < upto
       -- The archive row it was queued from is still there.
       AND EXISTS (SELECT FROM webhook.delivery_log l WHERE l.id = e.claim_id)
    ON CONFLICT ON CONSTRAINT inbox_pkey DO NOTHING;
    GET DIAGNOSTICS queued = ROW_COUNT;
    RETURN queued;
END
$$;

-- Create the archive's partitions for today (UTC) and the next days_ahead
-- days, those that do not exist yet. Schedule it daily at least (with
-- pg_cron: SELECT cron.schedule('webhook-partitions', '15 * * * *',
-- 'SELECT webhook_create_partitions()')); without it, deliveries land in
-- webhook.delivery_log_default, which works but is purged row by row.
-- Returns how many partitions it created.
--
-- Attaching a partition makes PostgreSQL read the whole default partition
-- (is nothing of the new range in it?), holding it locked until the
-- transaction ends: once per day made, and claims that read the archive
-- would wait behind all of them. Instead, one ALTER TABLE first adds to
-- the default partition a constraint per day excluding its range, which
-- reads it once for every day; each attach then finds its range excluded
-- and reads nothing. The constraints go again before the call returns.
CREATE OR REPLACE FUNCTION @extschema@.webhook_create_partitions(days_ahead integer DEFAULT 7)
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    today date := (pg_catalog.now() AT TIME ZONE 'UTC')::date;
    days  date[];
    made  integer;
    guards text[] := '{}';
    lock_timeout_before text := pg_catalog.current_setting('lock_timeout');
BEGIN
    IF pg_catalog.pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('webhook_create_partitions');
    END IF;
    IF days_ahead IS NULL OR days_ahead < 0 OR days_ahead > 366 THEN
        RAISE EXCEPTION 'webhook_create_partitions: argument "days_ahead" must be between 0 and 366'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- One maintenance at a time (webhook_purge takes the same lock).
    PERFORM pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('pg_webhook_inbox archive partitions'));
    SELECT pg_catalog.array_agg(today + i ORDER BY i) INTO days
      FROM pg_catalog.generate_series(0, days_ahead) AS i
     WHERE webhook._archive_day_free(today + i);
    IF pg_catalog.cardinality(days) > 1 THEN
        SELECT pg_catalog.array_agg(pg_catalog.format('delivery_log_default_not_%s', pg_catalog.to_char(d, 'YYYYMMDD')))
          INTO guards FROM pg_catalog.unnest(days) AS d;
        BEGIN
            PERFORM pg_catalog.set_config('lock_timeout', webhook._maintenance_lock_timeout(), true);
            EXECUTE 'ALTER TABLE webhook.delivery_log_default '
                    || (SELECT pg_catalog.string_agg(pg_catalog.format('ADD CONSTRAINT %I CHECK (id < %L::uuid OR id >= %L::uuid)',
                                                                       g, webhook._archive_bound((d::timestamp) AT TIME ZONE 'UTC'),
                                                                       webhook._archive_bound(((d + 1)::timestamp) AT TIME ZONE 'UTC')), ', ')
                          FROM ROWS FROM (pg_catalog.unnest(days), pg_catalog.unnest(guards)) AS x (d, g));
            PERFORM pg_catalog.set_config('lock_timeout', lock_timeout_before, true);
        EXCEPTION WHEN check_violation OR lock_not_available THEN
            -- A delivery of one of those days reached the default partition
            -- meanwhile, or the archive is in use: each day is attached (or
            -- skipped) on its own, as below.
            guards := '{}';
        END;
    END IF;
    SELECT pg_catalog.count(*) FILTER (WHERE webhook._create_archive_partition(d)) INTO made
      FROM pg_catalog.unnest(days) AS d;
    IF pg_catalog.cardinality(guards) > 0 THEN
        EXECUTE 'ALTER TABLE webhook.delivery_log_default '
                || (SELECT pg_catalog.string_agg(pg_catalog.format('DROP CONSTRAINT %I', g), ', ')
                      FROM pg_catalog.unnest(guards) AS g);
    END IF;
    RETURN coalesce(made, 0);
END
$$;

-- Queue any number of verified events, committing every batch_size of
-- them: a backfill or an import. Each event queued holds its lock until
-- its transaction commits, and one transaction may hold only so many
-- (webhook_enqueue refuses more with SQLSTATE 54000); this procedure
-- commits between batches instead. CALL it on its own, not inside a
-- transaction block. events: a JSON array of objects with event_id,
-- event_type and payload. Batches committed before a failure stay queued;
-- calling it again with the same events queues only the rest, the others
-- being duplicates. Returns how many were queued (duplicates not counted).
-- SECURITY INVOKER, with no SET clause (a procedure with one cannot
-- commit): it does nothing the caller could not do with webhook_enqueue,
-- and names everything with its schema.
CREATE OR REPLACE PROCEDURE @extschema@.webhook_enqueue_batches(
    provider     text,
    events       jsonb,
    batch_size   integer DEFAULT 1000,
    INOUT queued bigint  DEFAULT NULL
)
LANGUAGE plpgsql
AS $$
DECLARE
    total    integer;
    position integer := 0;
    event    jsonb;
    answer   text;
BEGIN
    IF pg_catalog.pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('webhook_enqueue_batches');
    END IF;
    IF webhook_enqueue_batches.provider IS NULL THEN
        RAISE EXCEPTION 'webhook_enqueue_batches: argument "provider" must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF events IS NULL OR pg_catalog.jsonb_typeof(events) IS DISTINCT FROM 'array' THEN
        RAISE EXCEPTION 'webhook_enqueue_batches: argument "events" must be a JSON array of {"event_id", "event_type", "payload"} objects'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF batch_size IS NULL OR batch_size < 1 OR batch_size > 10000 THEN
        RAISE EXCEPTION 'webhook_enqueue_batches: argument "batch_size" must be between 1 and 10000'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    queued := 0;
    total := pg_catalog.jsonb_array_length(events);
    WHILE position < total LOOP
        event := events -> position;
        SELECT e.status::text INTO answer
          FROM @extschema@.webhook_enqueue(webhook_enqueue_batches.provider,
                                           event ->> 'event_id', event ->> 'event_type',
                                           event -> 'payload') AS e;
        IF answer = 'queued' THEN
            queued := queued + 1;
        END IF;
        position := position + 1;
        IF position % batch_size = 0 THEN
            COMMIT;
        END IF;
    END LOOP;
END
$$;

-- Queue an event read from the provider's events API: webhook_enqueue
-- (the same checks, the same dedup, the application role's scope), and a
-- record that the archive row is a poll's.
CREATE OR REPLACE FUNCTION @extschema@.webhook_enqueue_polled(
    provider   text,
    event_id   text,
    event_type text,
    payload    jsonb
) RETURNS webhook.enqueue_result
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    queued webhook.enqueue_result;
BEGIN
    IF pg_catalog.pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('webhook_enqueue_polled');
    END IF;
    -- Named as this function, not as the one it calls; the other checks
    -- are webhook_enqueue's.
    IF webhook_enqueue_polled.provider IS NULL THEN
        RAISE EXCEPTION 'webhook_enqueue_polled: argument "provider" must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    ELSIF webhook_enqueue_polled.event_id IS NULL THEN
        RAISE EXCEPTION 'webhook_enqueue_polled: argument "event_id" must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    ELSIF webhook_enqueue_polled.event_type IS NULL THEN
        RAISE EXCEPTION 'webhook_enqueue_polled: argument "event_type" must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    ELSIF webhook_enqueue_polled.payload IS NULL THEN
        RAISE EXCEPTION 'webhook_enqueue_polled: argument "payload" must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    queued := @extschema@.webhook_enqueue(webhook_enqueue_polled.provider, webhook_enqueue_polled.event_id,
                                          webhook_enqueue_polled.event_type, webhook_enqueue_polled.payload);
    INSERT INTO webhook.polled (delivery_id, provider, event_id)
    VALUES (queued.id, webhook_enqueue_polled.provider, webhook_enqueue_polled.event_id)
    ON CONFLICT ON CONSTRAINT polled_pkey DO NOTHING;
    RETURN queued;
END
$$;

-- Grant an application role exactly what a webhook handler and an inbox
-- worker need: EXECUTE on their functions. No table privilege at all.
CREATE OR REPLACE FUNCTION @extschema@.webhook_grant_app(role regrole)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF pg_catalog.pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('webhook_grant_app');
    END IF;
    EXECUTE format('GRANT EXECUTE ON FUNCTION
        @extschema@.webhook_receive(text, jsonb, bytea, interval, boolean, text, boolean, text),
        @extschema@.webhook_receive(text, jsonb, text, interval, boolean, text, boolean, text),
        @extschema@.webhook_receivable_providers(),
        @extschema@.webhook_claim(text, text, text, jsonb, text, interval, boolean),
        @extschema@.webhook_claim(text, text, text, bytea, text, interval, boolean),
        @extschema@.webhook_claim(text, text, text, text, text, interval, boolean),
        @extschema@.webhook_enqueue(text, text, text, jsonb, text, text),
        @extschema@.webhook_enqueue(text, text, text, bytea, text, text),
        @extschema@.webhook_enqueue(text, text, text, text, text, text),
        @extschema@.webhook_enqueue_polled(text, text, text, jsonb),
        @extschema@.webhook_next(integer, text, text, text, interval),
        @extschema@.webhook_complete(uuid, jsonb),
        @extschema@.webhook_fail(uuid, text, interval, boolean),
        @extschema@.webhook_complete_batch(uuid[]),
        @extschema@.webhook_fail_batch(uuid[], text, interval, boolean),
        @extschema@.webhook_extend(uuid, interval),
        @extschema@.webhook_outbound_key(uuid, text),
        @extschema@.webhook_outbound_key(text, text, text),
        @extschema@.idempotency_begin(text, text, text, interval),
        @extschema@.idempotency_checkpoint(uuid, text, jsonb),
        @extschema@.idempotency_finish(uuid, integer, text, jsonb),
        @extschema@.idempotency_fail(uuid, text, boolean, integer, text, jsonb),
        @extschema@.idempotency_fingerprint(text, text, bytea),
        @extschema@.idempotency_fingerprint(text, text, text)
        TO %s', role);
    EXECUTE format('GRANT EXECUTE ON PROCEDURE
        @extschema@.webhook_enqueue_batches(text, jsonb, integer, bigint)
        TO %s', role);
END
$$;

-- Grant a monitoring role (the one a Prometheus exporter logs in as) the
-- metrics and nothing else: no payload, no event id, no table.
CREATE OR REPLACE FUNCTION @extschema@.webhook_grant_monitor(role regrole)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF pg_catalog.pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('webhook_grant_monitor');
    END IF;
    EXECUTE format('GRANT EXECUTE ON FUNCTION
        @extschema@.webhook_metrics(text),
        @extschema@.webhook_metrics_prometheus(),
        @extschema@.webhook_metric_quantile(double precision, text, timestamptz, text, text)
        TO %s', role);
END
$$;

-- Grant an operator role the archive, the views and the maintenance
-- functions; never the secrets.
CREATE OR REPLACE FUNCTION @extschema@.webhook_grant_operator(role regrole)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF pg_catalog.pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('webhook_grant_operator');
    END IF;
    -- What a viewer sees.
    PERFORM @extschema@.webhook_grant_viewer(role);
    EXECUTE format('GRANT EXECUTE ON FUNCTION
        @extschema@.webhook_requeue(text, text, text),
        @extschema@.webhook_requeue_dead(text, text, text, timestamptz, timestamptz, text),
        @extschema@.webhook_purge(interval, integer, integer),
        @extschema@.webhook_create_partitions(integer),
        @extschema@.webhook_reset_watermark(text, text, text),
        @extschema@.idempotency_purge(interval),
        @extschema@.webhook_metrics(text),
        @extschema@.webhook_metrics_prometheus(),
        @extschema@.webhook_metrics_rollup(),
        @extschema@.webhook_metric_quantile(double precision, text, timestamptz, text, text),
        @extschema@.webhook_alerts_evaluate(),
        @extschema@.webhook_alert_acknowledge(bigint),
        @extschema@.webhook_alert_silence(bigint, interval),
        @extschema@.webhook_pause(text, text, text),
        @extschema@.webhook_resume(text, text),
        @extschema@.webhook_quarantine(text, text, text, text),
        @extschema@.webhook_release(text, text, text),
        @extschema@.webhook_set_limit(text, text, integer, double precision, integer, integer, interval),
        @extschema@.webhook_backfill(text, text, timestamptz, timestamptz, double precision),
        @extschema@.webhook_replay(text, text, text[], text[], timestamptz, timestamptz, text, jsonpath,
                                   text, double precision, boolean, integer),
        @extschema@.webhook_replay_pause(uuid),
        @extschema@.webhook_replay_resume(uuid),
        @extschema@.webhook_replay_cancel(uuid),
        @extschema@.webhook_set_filter(text, text, text[], jsonpath)
        TO %s', role);
END
$$;

-- Grant a read-only role what an operator sees: the archive, the inbox,
-- the views, the metrics and alerts, the registry without its secrets
-- (secrets by fingerprint and last use); no function that changes
-- anything. What the web console's viewers connect as.
CREATE OR REPLACE FUNCTION @extschema@.webhook_grant_viewer(role regrole)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF pg_catalog.pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('webhook_grant_viewer');
    END IF;
    EXECUTE format('GRANT USAGE ON SCHEMA webhook TO %s', role);
    EXECUTE format('GRANT SELECT ON webhook.events, webhook.deliveries, webhook.delivery_log,
        webhook.delivery_failures, webhook.signature_bindings, webhook.providers,
        webhook.provider_summary, webhook.recent_failures, webhook.stuck_claims,
        webhook.rejected_deliveries, webhook.dead_letters, webhook.payload_mismatches,
        webhook.provider_stats, webhook.inbox, webhook.inbox_failures, webhook.inbox_stats,
        webhook.requeues, webhook.watermarks, webhook.blocked_entities,
        webhook.secret_usage, webhook.idempotency_keys, webhook.archive_partitions,
        webhook.app_scopes, webhook.metric_minutes, webhook.metric_totals, webhook.alerts,
        webhook.alert_rules, webhook.alert_rules_in_effect, webhook.pauses, webhook.paused,
        webhook.limits, webhook.limits_in_effect, webhook.breakers, webhook.polled,
        webhook.missed_deliveries, webhook.replays, webhook.replay_items,
        webhook.replay_progress, webhook.trace_contexts, webhook.filters TO %s', role);
    EXECUTE format('GRANT EXECUTE ON FUNCTION
        @extschema@.webhook_providers(),
        @extschema@.webhook_source_signed(text, text)
        TO %s', role);
END
$$;

-- Pause a provider (for every consumer), a consumer (for every provider),
-- or one consumer's events of one provider. Intake goes on; webhook_next
-- leases none of their events until webhook_resume. Leases already taken
-- run to their end. Returns whether it was not paused already.
CREATE OR REPLACE FUNCTION @extschema@.webhook_pause(
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

-- Remove archive rows older than `older_than`, except the deliveries of
-- events not finished: processing, failed, dead, or queued and not yet
-- processed by every consumer (the workers read the payload from here).
-- Deliveries of no event (rejections, handshakes) go too. Inbox rows
-- processed before the cutoff go, with their failures. webhook.events is
-- never touched: a replay after the purge is still a duplicate. Returns
-- the number of archive rows removed.
--
-- A day's partition wholly older than the cutoff is dropped whole, with
-- almost no WAL: the deliveries it must keep are first moved to the
-- default partition, and their failures stay. Finding them starts from
-- the unfinished events, found once per purge, each looked up in the
-- day's event index; the day itself is not read, and nothing is written
-- for the rest. The default partition (and the partition holding what was
-- archived before an upgrade to partitioning) is purged row by row,
-- `batch_size` rows per statement; pass max_batches for a large backlog
-- and call it repeatedly. Dropping a partition locks the archive until
-- the transaction ends: call it on its own, not inside other work. A day
-- whose lock is not granted within webhook.maintenance_lock_timeout (a
-- report or a dump is reading the archive) is skipped with a WARNING, and
-- dropped by a later run: claims never queue behind the purge for longer.
CREATE OR REPLACE FUNCTION @extschema@.webhook_purge(
    older_than  interval DEFAULT '90 days',
    batch_size  integer  DEFAULT 10000,
    max_batches integer  DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    -- An event whose deliveries must stay (as `e`): not finished, or
    -- queued and not finished by every consumer. The one rule, for both
    -- ways of purging (applied once, below); a delivery of no such event
    -- may go.
    unfinished CONSTANT text := $rule$
        NOT (e.status IN ('processed', 'stale', 'filtered')
             OR (e.status = 'queued'
                 AND NOT EXISTS (SELECT FROM webhook.inbox i
                                  WHERE i.delivery_id = e.claim_id
                                    AND i.provider = e.provider AND i.event_id = e.event_id
                                    AND i.status NOT IN ('processed', 'stale', 'filtered'))))$rule$;
    columns CONSTANT text := 'id, provider, event_id, event_type, payload, raw_body, signature, headers, '
                             'claim_status, reject_reason, payload_mismatch, created_at, body_size, '
                             'body_sha256, secret_fingerprint';
    cutoff    timestamptz;
    deleted   bigint := 0;
    batch     bigint;
    batches   integer;
    part      record;
    total     bigint;
    kept      uuid[];
    kept_all  uuid[] := '{}';
    providers text[];
    event_ids text[];
    days      pg_catalog.regclass[] := '{}';
    day_rows  bigint[] := '{}';
    skipped   pg_catalog.regclass[] := '{}';
    day       pg_catalog.regclass;
    lock_timeout_before CONSTANT text := pg_catalog.current_setting('lock_timeout');
BEGIN
    IF pg_catalog.pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('webhook_purge');
    END IF;
    IF older_than IS NULL OR older_than <= interval '0' THEN
        RAISE EXCEPTION 'webhook_purge: argument "older_than" must be a positive interval'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF batch_size IS NULL OR batch_size < 1 THEN
        RAISE EXCEPTION 'webhook_purge: argument "batch_size" must be at least 1'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF max_batches IS NOT NULL AND max_batches < 1 THEN
        RAISE EXCEPTION 'webhook_purge: argument "max_batches" must be at least 1'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('pg_webhook_inbox archive partitions'));
    cutoff := pg_catalog.now() - older_than;

    -- The events whose deliveries stay, found once for the whole purge:
    -- few, and reached without reading the archive (one pass over
    -- webhook.events for those processing, failed or dead; the inbox's
    -- unfinished rows from its partial indexes). The candidates must
    -- cover every event the rule calls unfinished; the rule decides. No
    -- event goes from finished back to unfinished (a requeue takes only
    -- failed or dead ones), so the list stays right while the purge runs.
    EXECUTE pg_catalog.format($sql$
        SELECT coalesce(array_agg(e.provider), '{}'), coalesce(array_agg(e.event_id), '{}')
          FROM (SELECT c.provider, c.event_id FROM webhook.events c
                 WHERE c.status IN ('processing', 'failed', 'dead')
                UNION
                SELECT i.provider, i.event_id FROM webhook.inbox i WHERE i.status IN ('ready', 'leased')
                UNION
                SELECT i.provider, i.event_id FROM webhook.inbox i WHERE i.status = 'dead') AS k
          JOIN webhook.events e ON e.provider = k.provider AND e.event_id = k.event_id
         WHERE %s$sql$, unfinished)
    INTO providers, event_ids;

    -- Row by row where a partition spans more than a day, before any lock
    -- on the archive as a whole is taken.
    FOR part IN
        SELECT p.partition FROM webhook.archive_partitions p
         WHERE p.is_default OR (p.lower_id IS NULL AND p.upper_id > webhook._archive_bound(cutoff))
    LOOP
        batches := 0;
        LOOP
            EXECUTE pg_catalog.format($sql$
                WITH gone AS (
                    DELETE FROM %1$s
                     WHERE ctid = ANY (ARRAY(SELECT l.ctid FROM %1$s l
                                              WHERE l.created_at < $1
                                                AND NOT EXISTS (SELECT FROM unnest($3, $4) AS k (provider, event_id)
                                                                 WHERE k.provider = l.provider
                                                                   AND k.event_id = l.event_id)
                                              LIMIT $2))
                    RETURNING id
                ), failures AS (
                    DELETE FROM webhook.delivery_failures f USING gone WHERE f.delivery_id = gone.id
                )
                SELECT count(*) FROM gone$sql$, part.partition)
            INTO batch USING cutoff, batch_size, providers, event_ids;
            deleted := deleted + batch;
            batches := batches + 1;
            EXIT WHEN batch < batch_size OR batches >= coalesce(max_batches, batches + 1);
        END LOOP;
    END LOOP;

    DELETE FROM webhook.inbox_failures f
     WHERE f.failed_at < cutoff
       AND EXISTS (SELECT FROM webhook.events e
                      JOIN webhook.inbox i ON i.delivery_id = e.claim_id AND i.consumer = f.consumer
                    WHERE e.provider = f.provider AND e.event_id = f.event_id
                      AND i.provider = f.provider AND i.event_id = f.event_id
                      AND i.status IN ('processed', 'stale', 'filtered') AND i.processed_at < cutoff);
    DELETE FROM webhook.inbox i WHERE i.status IN ('processed', 'stale', 'filtered') AND i.processed_at < cutoff;
    -- A trace context serves the event's workers: kept while an inbox row
    -- of it is.
    DELETE FROM webhook.trace_contexts t
     WHERE NOT EXISTS (SELECT FROM webhook.inbox i WHERE i.delivery_id = t.delivery_id);

    -- Whole days, oldest first. Each is read before any is detached: the
    -- first detach locks the archive until the transaction ends, and
    -- claims wait for only what follows it.
    FOR part IN
        SELECT p.partition FROM webhook.archive_partitions p
         WHERE NOT p.is_default AND p.upper_id <= webhook._archive_bound(cutoff)
         ORDER BY p.upper_id
    LOOP
        -- Each unfinished event looked up in the day's event index: a
        -- day costs the same whatever its size.
        EXECUTE pg_catalog.format($sql$
            SELECT coalesce(array_agg(l.id), '{}')
              FROM unnest($1, $2) AS k (provider, event_id)
              JOIN %s l ON l.provider = k.provider AND l.event_id = k.event_id$sql$, part.partition)
        INTO kept USING providers, event_ids;
        kept_all := kept_all || kept;
        EXECUTE pg_catalog.format('SELECT count(*) FROM %s', part.partition) INTO total;
        day_rows := day_rows || (total - pg_catalog.cardinality(kept));
        days := days || part.partition;
    END LOOP;
    -- Detaching a day waits for every reader of the archive (a report, a
    -- dump), and every claim queues behind the waiting detach: wait only
    -- briefly, skip the day if its lock is not granted, and say so.
    FOR i IN 1 .. pg_catalog.cardinality(days) LOOP
        day := days[i];
        BEGIN
            PERFORM pg_catalog.set_config('lock_timeout', webhook._maintenance_lock_timeout(), true);
            SELECT p.lower_id, p.upper_id INTO part FROM webhook.archive_partitions p WHERE p.partition = day;
            EXECUTE pg_catalog.format('ALTER TABLE webhook.delivery_log DETACH PARTITION %s', day);
            -- No partition covers their ids any more: they go to the default
            -- partition, under the same ids.
            EXECUTE pg_catalog.format('INSERT INTO webhook.delivery_log (%1$s) SELECT %1$s FROM %2$s WHERE id = ANY ($1)',
                                      columns, day)
            USING kept_all;
            DELETE FROM webhook.delivery_failures f
             WHERE (part.lower_id IS NULL OR f.delivery_id >= part.lower_id) AND f.delivery_id < part.upper_id
               AND f.delivery_id <> ALL (kept_all);
            EXECUTE pg_catalog.format('DROP TABLE %s', day);
            deleted := deleted + day_rows[i];
        EXCEPTION WHEN lock_not_available THEN
            skipped := skipped || day;
        END;
    END LOOP;
    PERFORM pg_catalog.set_config('lock_timeout', lock_timeout_before, true);
    IF pg_catalog.cardinality(skipped) > 0 THEN
        RAISE WARNING 'webhook_purge: % day(s) of the archive not dropped: the archive is in use', pg_catalog.cardinality(skipped)
            USING DETAIL = pg_catalog.format('Not dropped: %s. Their lock was not granted within webhook.maintenance_lock_timeout (%s).',
                                             pg_catalog.array_to_string(skipped, ', '), webhook._maintenance_lock_timeout()),
                  HINT = 'Run webhook_purge again later, when no long read of webhook.delivery_log is running.';
    END IF;
    RETURN deleted;
END
$$;

-- Quarantine one entity of a provider registered with ordering (for one
-- consumer, or all): its ready events are set aside now, and so is every
-- later one webhook_next comes across, until webhook_release. The rest of
-- the queue drains past them. Returns how many were set aside now.
CREATE OR REPLACE FUNCTION @extschema@.webhook_quarantine(
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

-- Create or update a provider. Arguments left NULL keep their current value,
-- or take the scheme's defaults for a new provider. The scheme defaults to
-- the name when the name is a known scheme or alias ('svix' and 'clerk'
-- mean 'standard'); it is stored under its canonical name.
--
-- inbox: webhook_receive queues the provider's deliveries for workers and
-- answers 2xx at once. A new GitHub provider is in inbox mode unless told
-- otherwise: GitHub never redelivers a delivery it was not answered 2xx
-- for, so any other answer loses the event. consumers: the inbox's
-- consumers of its events (none: 'default').
--
-- Ordering (off unless asked for): entity_key_from and order_from say
-- where in the signed body the entity an event is about and its order
-- value are; ordering => true takes the scheme's preset for what is not
-- given (webhook_schemes()), ordering => false turns it off. ties: an
-- event as new as its entity's watermark is processed ('process') or
-- skipped as stale ('stale'). fifo: the inbox never leases an event while
-- an earlier one of its entity is leased or backing off.
CREATE OR REPLACE FUNCTION @extschema@.webhook_register_provider(
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
) RETURNS SETOF webhook.provider_summary
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p_name     text := lower(webhook_register_provider.name);
    existing   webhook.providers;
    v_scheme   text;
    v_entity   text;
    v_order    text;
    known      record;
    failed_check text;
BEGIN
    IF pg_catalog.pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('webhook_register_provider');
    END IF;
    IF p_name IS NULL OR p_name = '' THEN
        RAISE EXCEPTION 'webhook_register_provider: argument "name" must not be empty'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT * INTO existing FROM webhook.providers p WHERE p.name = p_name FOR UPDATE;

    v_scheme := btrim(coalesce(webhook_register_provider.scheme, existing.scheme, p_name));
    SELECT s.* INTO known
      FROM @extschema@.webhook_schemes() s
     WHERE s.scheme = lower(split_part(v_scheme, ';', 1))
        OR lower(split_part(v_scheme, ';', 1)) = ANY (s.aliases);
    IF NOT FOUND THEN
        RAISE EXCEPTION 'webhook_register_provider: argument "scheme": unknown signature scheme "%"', v_scheme
            USING ERRCODE = 'undefined_object',
                  HINT = 'SELECT * FROM webhook_schemes() lists the schemes and their aliases.';
    END IF;
    -- A scheme's options (the generic form's, PayPal's webhook id) are
    -- kept; webhook_verify checks them, and that a scheme needing them has
    -- them.
    BEGIN
        PERFORM @extschema@.webhook_verify(v_scheme, '{}'::jsonb, ''::bytea, '{}'::text[]);
    EXCEPTION WHEN syntax_error THEN
        RAISE EXCEPTION 'webhook_register_provider: argument "scheme": invalid scheme "%"', v_scheme
            USING ERRCODE = 'syntax_error',
                  DETAIL = SQLERRM,
                  HINT = CASE known.scheme
                      WHEN 'paypal' THEN 'PayPal signs with the webhook''s id: paypal;webhook_id=<id>.'
                      WHEN 'hmac' THEN 'The generic form is hmac;header=<name>[;algorithm=sha256|sha1|sha512][;encoding=hex|base64][;prefix=<text>].'
                      ELSE format('Scheme "%s" takes no options.', known.scheme)
                  END;
    END;
    IF pg_catalog.strpos(v_scheme, ';') = 0 THEN
        v_scheme := known.scheme;
    END IF;

    IF webhook_register_provider.ordering IS FALSE THEN
        IF webhook_register_provider.entity_key_from IS NOT NULL
           OR webhook_register_provider.order_from IS NOT NULL THEN
            RAISE EXCEPTION 'webhook_register_provider: argument "ordering": false turns ordering off, but entity_key_from or order_from was given'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
    ELSE
        v_entity := coalesce(webhook_register_provider.entity_key_from,
                             CASE WHEN webhook_register_provider.ordering THEN known.entity_key_from END,
                             existing.entity_key_from);
        v_order := coalesce(webhook_register_provider.order_from,
                            CASE WHEN webhook_register_provider.ordering THEN known.order_from END,
                            existing.order_from);
        IF (webhook_register_provider.ordering OR v_entity IS NOT NULL OR v_order IS NOT NULL)
           AND (v_entity IS NULL OR v_order IS NULL) THEN
            RAISE EXCEPTION 'webhook_register_provider: argument "%": ordering needs both entity_key_from and order_from',
                CASE WHEN v_entity IS NULL THEN 'entity_key_from' ELSE 'order_from' END
                USING ERRCODE = 'null_value_not_allowed',
                      HINT = CASE WHEN v_entity IS NULL
                                  THEN format('Scheme "%s" has no entity key that fits every event type: name the path, for example entity_key_from => ''body:data.id''.', known.scheme)
                                  ELSE format('Scheme "%s" has no order value preset: name the path, for example order_from => ''body:updated_at''.', known.scheme)
                             END;
        END IF;
    END IF;

    -- In an intake tier (webhook_set_slot) a delivery's slot follows from
    -- its route key, and the route key from the scheme, event_id_from and
    -- entity_key_from: changing them sends the redeliveries of every event
    -- received so far to a slot that never saw it, where they would be
    -- taken as new. Refused for a provider registered already, unless
    -- reroute: this slot cannot know whether another holds its events,
    -- and every slot must decide alike (the proxy calls them one by one).
    IF existing.name IS NOT NULL
       AND coalesce(nullif(pg_catalog.current_setting('webhook.slots', true), ''), '0')::integer > 1
       AND (existing.scheme, existing.event_id_from, existing.entity_key_from)
           IS DISTINCT FROM (v_scheme,
                             coalesce(webhook_register_provider.event_id_from, existing.event_id_from),
                             v_entity)
       AND NOT coalesce(webhook_register_provider.reroute, false) THEN
        RAISE EXCEPTION 'webhook_register_provider: changing the scheme, event_id_from or ordering of provider "%" would route its deliveries to other slots', p_name
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = pg_catalog.format('Its route is now scheme %s, event id from %s, entity key from %s; asked: %s, %s, %s. Redeliveries of events received under the old route would reach slots that never saw them, and be processed again.',
                                             existing.scheme, existing.event_id_from, coalesce(existing.entity_key_from, 'none'),
                                             v_scheme, coalesce(webhook_register_provider.event_id_from, existing.event_id_from),
                                             coalesce(v_entity, 'none')),
                  HINT = 'Register the new route under a new provider name (and point the provider''s endpoint at it), or pass reroute => true if it has no deliveries yet or has stopped redelivering what it sent before (docs/scale-out.md).';
    END IF;

    INSERT INTO webhook.providers AS p
           (name, scheme, tolerance, event_id_from, event_type_from, inbox, consumers,
            entity_key_from, order_from, ties, fifo)
    VALUES (p_name,
            v_scheme,
            coalesce(webhook_register_provider.tolerance, existing.tolerance, known.tolerance),
            coalesce(webhook_register_provider.event_id_from, existing.event_id_from, known.event_id_from),
            coalesce(webhook_register_provider.event_type_from, existing.event_type_from, known.event_type_from),
            coalesce(webhook_register_provider.inbox, existing.inbox, known.scheme = 'github'),
            coalesce(webhook_register_provider.consumers, existing.consumers, '{}'),
            v_entity,
            v_order,
            coalesce(webhook_register_provider.ties, existing.ties, 'process'),
            -- Ordering turned off takes FIFO with it.
            CASE WHEN v_entity IS NULL THEN coalesce(webhook_register_provider.fifo, false)
                 ELSE coalesce(webhook_register_provider.fifo, existing.fifo, false) END)
    ON CONFLICT ON CONSTRAINT providers_pkey DO UPDATE
       SET scheme = excluded.scheme, tolerance = excluded.tolerance,
           event_id_from = excluded.event_id_from, event_type_from = excluded.event_type_from,
           inbox = excluded.inbox, consumers = excluded.consumers,
           entity_key_from = excluded.entity_key_from, order_from = excluded.order_from,
           ties = excluded.ties, fifo = excluded.fifo;

    IF webhook_register_provider.secret IS NOT NULL THEN
        PERFORM @extschema@.webhook_add_secret(p_name, webhook_register_provider.secret);
    END IF;
    RETURN QUERY SELECT * FROM webhook.provider_summary s WHERE s.name = p_name;
EXCEPTION
    WHEN not_null_violation THEN
        RAISE EXCEPTION 'webhook_register_provider: scheme "%" has no defaults; give event_id_from and event_type_from', v_scheme
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = 'Sources are ''header:<name>'' or ''body:<dotted.path>'', alternatives joined by ''|''.';
    WHEN check_violation THEN
        -- Each check guards one argument: name it.
        GET STACKED DIAGNOSTICS failed_check = CONSTRAINT_NAME;
        RAISE EXCEPTION 'webhook_register_provider: argument "%" is invalid',
            CASE failed_check
                WHEN 'providers_name_check' THEN 'name'
                WHEN 'providers_tolerance_check' THEN 'tolerance'
                WHEN 'providers_event_id_from_check' THEN 'event_id_from'
                WHEN 'providers_event_type_from_check' THEN 'event_type_from'
                WHEN 'providers_consumers_check' THEN 'consumers'
                WHEN 'providers_entity_key_from_check' THEN 'entity_key_from'
                WHEN 'providers_order_from_check' THEN 'order_from'
                WHEN 'providers_ties_check' THEN 'ties'
                WHEN 'providers_fifo_check' THEN 'fifo'
                ELSE failed_check
            END
            USING ERRCODE = 'check_violation',
                  DETAIL = SQLERRM,
                  HINT = CASE failed_check
                      WHEN 'providers_entity_key_from_check' THEN 'Ordering reads the signed body only: ''body:<dotted.path>'', alternatives joined by ''|''.'
                      WHEN 'providers_order_from_check' THEN 'Ordering reads the signed body only: ''body:<dotted.path>'', alternatives joined by ''|''.'
                      WHEN 'providers_ties_check' THEN 'ties is ''process'' or ''stale''.'
                      WHEN 'providers_fifo_check' THEN 'FIFO keeps each entity''s events in order: turn ordering on first (ordering => true, or entity_key_from and order_from).'
                      ELSE 'Names (and consumers) are lower-case [a-z0-9_.-]; sources are ''header:<name>'' or ''body:<dotted.path>''; the tolerance is positive.'
                  END;
END
$$;

-- A replay's events not yet leased are put back as they were before it
-- (processed, dead, stale or filtered, with their attempts); leases already taken
-- run to their end. Returns how many were put back.
CREATE OR REPLACE FUNCTION @extschema@.webhook_replay_cancel(replay_id uuid) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    undone bigint;
BEGIN
    IF pg_catalog.pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('webhook_replay_cancel');
    END IF;
    PERFORM webhook._replay_change('webhook_replay_cancel', webhook_replay_cancel.replay_id, NULL, 'cancelled');
    UPDATE webhook.inbox i
       SET status = t.prior_status, attempts = t.prior_attempts, requeues = i.requeues - 1,
           replay_id = t.prior_replay_id, run_at = pg_catalog.clock_timestamp()
      FROM webhook.replay_items t
     WHERE t.replay_id = webhook_replay_cancel.replay_id
       AND i.delivery_id = t.delivery_id AND i.consumer = t.consumer
       -- Not an index condition: each item reaches its row by the inbox's
       -- key. On inbox_replay_idx the planner, blind to a replay just
       -- made, could scan the whole replay for every item.
       AND i.replay_id IS NOT DISTINCT FROM webhook_replay_cancel.replay_id AND i.status = 'ready';
    GET DIAGNOSTICS undone = ROW_COUNT;
    UPDATE webhook.replays r SET cancelled = undone WHERE r.id = webhook_replay_cancel.replay_id;
    RETURN undone;
END
$$;

-- A running replay's events not yet leased are set aside until
-- webhook_replay_resume: due at the start of the year 9999, past every
-- pick (and apart from a quarantine's 'infinity', which a resume must not
-- undo, nor a release this). Leases already taken run to their end.
-- Returns how many were set aside.
CREATE OR REPLACE FUNCTION @extschema@.webhook_replay_pause(replay_id uuid) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    held bigint;
BEGIN
    IF pg_catalog.pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('webhook_replay_pause');
    END IF;
    PERFORM webhook._replay_change('webhook_replay_pause', webhook_replay_pause.replay_id, 'running', 'paused');
    UPDATE webhook.inbox i SET run_at = '9999-01-01 00:00:00+00'
     WHERE i.replay_id = webhook_replay_pause.replay_id AND i.status = 'ready' AND i.run_at <> 'infinity';
    GET DIAGNOSTICS held = ROW_COUNT;
    RETURN held;
END
$$;

-- Forget an entity's watermark (of one consumer, or of all): its next
-- event is processed whatever its order value, and moves the watermark
-- again. For an entity whose state was repaired by hand, or a watermark
-- set by a bad order value. Events already skipped as stale stay skipped.
-- Returns how many watermarks were removed.
CREATE OR REPLACE FUNCTION @extschema@.webhook_reset_watermark(
    provider   text,
    entity_key text,
    consumer   text DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    removed bigint;
BEGIN
    IF pg_catalog.pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('webhook_reset_watermark');
    END IF;
    IF webhook_reset_watermark.provider IS NULL THEN
        RAISE EXCEPTION 'webhook_reset_watermark: argument "provider" must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF webhook_reset_watermark.entity_key IS NULL THEN
        RAISE EXCEPTION 'webhook_reset_watermark: argument "entity_key" must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    DELETE FROM webhook.watermarks w
     WHERE w.provider = webhook_reset_watermark.provider
       AND w.entity_key = webhook_reset_watermark.entity_key
       AND (webhook_reset_watermark.consumer IS NULL OR w.consumer = webhook_reset_watermark.consumer);
    GET DIAGNOSTICS removed = ROW_COUNT;
    RETURN removed;
END
$$;

-- Undo webhook_pause for exactly that provider and consumer, and close
-- their open circuit breakers (an operator who says "go" means it).
-- Returns whether anything was paused or open.
CREATE OR REPLACE FUNCTION @extschema@.webhook_resume(
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

-- Retire a secret, named by its fingerprint (as listed) or by itself.
-- Deliveries signed with it fail from now on. One that verified a delivery
-- in the last day is still in use by the provider: retiring it needs
-- force => true, and warns even then. A leaked key must stop verifying
-- now: deliveries noting its use never hold the secret's row, and another
-- transaction that does (a registry change left open) is waited for at
-- most webhook.maintenance_lock_timeout, then named in the error.
CREATE OR REPLACE FUNCTION @extschema@.webhook_retire_secret(
    provider              text,
    secret_or_fingerprint text,
    force                 boolean DEFAULT false
) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    target   webhook.provider_secrets;
    used_at  timestamptz;
    wait     text := pg_catalog.current_setting('webhook.maintenance_lock_timeout', true);
    previous text := pg_catalog.current_setting('lock_timeout');
    holder   xid;
    blockers text;
BEGIN
    IF pg_catalog.pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('webhook_retire_secret');
    END IF;
    PERFORM pg_catalog.set_config('lock_timeout', coalesce(wait, '5s'), true);
    BEGIN
        SELECT * INTO target
          FROM webhook.provider_secrets s
         WHERE s.provider = webhook_retire_secret.provider
           AND s.retired_at IS NULL
           AND s.fingerprint IN (webhook_retire_secret.secret_or_fingerprint,
                                 webhook._fingerprint(webhook_retire_secret.secret_or_fingerprint))
           FOR UPDATE;
    EXCEPTION WHEN lock_not_available THEN
        -- The row's locker, from its xmax, and the sessions of that
        -- transaction.
        SELECT s.xmax INTO holder FROM webhook.provider_secrets s
         WHERE s.provider = webhook_retire_secret.provider
           AND s.fingerprint IN (webhook_retire_secret.secret_or_fingerprint,
                                 webhook._fingerprint(webhook_retire_secret.secret_or_fingerprint));
        SELECT pg_catalog.string_agg(pg_catalog.format('pid %s (user %s, application %L, transaction open since %s)',
                                                       a.pid, a.usename, a.application_name, a.xact_start), ', ')
          INTO blockers
          FROM pg_catalog.pg_locks l JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
         WHERE l.locktype = 'transactionid' AND l.granted AND l.transactionid = holder;
        RAISE EXCEPTION 'webhook_retire_secret: the secret of provider "%" is locked by another transaction; waited %',
            webhook_retire_secret.provider, coalesce(wait, '5s')
            USING ERRCODE = 'lock_not_available',
                  DETAIL = 'Held by ' || coalesce(blockers, 'a transaction that has since ended') || '.',
                  HINT = 'End that transaction (pg_terminate_backend) and retire the secret again.';
    END;
    PERFORM pg_catalog.set_config('lock_timeout', previous, true);
    SELECT u.last_used_at INTO used_at FROM webhook.secret_uses u
     WHERE u.provider = target.provider AND u.fingerprint = target.fingerprint;
    IF target.provider IS NOT NULL AND used_at > now() - interval '1 day' THEN
        IF NOT coalesce(webhook_retire_secret.force, false) THEN
            RAISE EXCEPTION 'webhook_retire_secret: secret % of provider "%" verified a delivery at %, within the last day',
                target.fingerprint, target.provider, used_at
                USING ERRCODE = 'object_not_in_prerequisite_state',
                      DETAIL = 'Deliveries the provider still signs with it would be refused once it is retired.',
                      HINT = 'Retire it once webhook.secret_usage shows the new secret verifying deliveries and this one idle, or pass force => true.';
        END IF;
        RAISE WARNING 'webhook_retire_secret: secret % of provider "%" verified a delivery at %; deliveries still signed with it will be refused',
            target.fingerprint, target.provider, used_at;
    END IF;
    UPDATE webhook.provider_secrets s
       SET retired_at = now()
     WHERE s.provider = target.provider AND s.fingerprint = target.fingerprint;
    IF NOT FOUND THEN
        -- The argument may be the secret itself: never echo it into an
        -- error message, which ends up in the server log.
        RAISE EXCEPTION 'webhook_retire_secret: provider "%" has no active secret with that value or fingerprint',
            webhook_retire_secret.provider
            USING ERRCODE = 'no_data_found',
                  HINT = 'webhook_providers() lists the fingerprints of active secrets.';
    END IF;
END
$$;

-- Scope an application role to some providers and, for inbox workers,
-- consumers: a DBA serving several teams from one database gives each
-- team's role its own. From then on a session acting as the role, or as
-- any role inheriting its privileges, may receive, claim and queue events
-- of these providers only, and lease and finish only their events for
-- these consumers; webhook_next must name the provider. A session bound
-- by several scopes may use each. Superusers are never bound. Replaces
-- the role's scope; webhook_unscope_app removes it.
CREATE OR REPLACE FUNCTION @extschema@.webhook_scope_app(role regrole, providers text[], consumers text[] DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF pg_catalog.pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('webhook_scope_app');
    END IF;
    IF webhook_scope_app.role IS NULL THEN
        RAISE EXCEPTION 'webhook_scope_app: argument "role" must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF webhook_scope_app.providers IS NULL THEN
        RAISE EXCEPTION 'webhook_scope_app: argument "providers" must not be NULL'
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = 'To let the role use every provider again: webhook_unscope_app(role).';
    END IF;
    IF (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.oid = webhook_scope_app.role) THEN
        RAISE EXCEPTION 'webhook_scope_app: argument "role": % is a superuser, which no scope binds', webhook_scope_app.role
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- The table's checks say the same; here the error names the argument.
    IF pg_catalog.cardinality(webhook_scope_app.providers) NOT BETWEEN 1 AND 1000
       OR pg_catalog.array_position(webhook_scope_app.providers, NULL) IS NOT NULL
       OR '' = ANY (webhook_scope_app.providers) THEN
        RAISE EXCEPTION 'webhook_scope_app: argument "providers" must list 1 to 1000 names, none NULL or empty'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF pg_catalog.cardinality(webhook_scope_app.consumers) NOT BETWEEN 1 AND 1000
       OR pg_catalog.array_position(webhook_scope_app.consumers, NULL) IS NOT NULL
       OR '' = ANY (webhook_scope_app.consumers) THEN
        RAISE EXCEPTION 'webhook_scope_app: argument "consumers" must be NULL (every consumer) or list 1 to 1000 names, none NULL or empty'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO webhook.app_scopes AS s (role, providers, consumers)
    VALUES (webhook_scope_app.role,
            ARRAY(SELECT DISTINCT p FROM pg_catalog.unnest(webhook_scope_app.providers) AS p ORDER BY p),
            CASE WHEN webhook_scope_app.consumers IS NOT NULL THEN
                ARRAY(SELECT DISTINCT c FROM pg_catalog.unnest(webhook_scope_app.consumers) AS c ORDER BY c)
            END)
    ON CONFLICT ON CONSTRAINT app_scopes_pkey
    DO UPDATE SET providers = excluded.providers, consumers = excluded.consumers,
                  scoped_at = excluded.scoped_at, scoped_by = excluded.scoped_by;
END
$$;

-- Set the filter of a provider (consumer NULL) or of one of its inbox
-- consumers; with neither event_types nor payload_path, remove it. Applies
-- to deliveries received from then on. Returns whether a filter is in
-- place.
CREATE OR REPLACE FUNCTION @extschema@.webhook_set_filter(
    provider     text,
    consumer     text DEFAULT NULL,
    event_types  text[] DEFAULT NULL,
    payload_path jsonpath DEFAULT NULL
) RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p text := webhook._check_name('webhook_set_filter', 'provider', webhook_set_filter.provider, true);
    c text := webhook._check_name('webhook_set_filter', 'consumer', webhook_set_filter.consumer, false);
    registered webhook.providers;
BEGIN
    IF pg_catalog.pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('webhook_set_filter');
    END IF;
    SELECT r.* INTO registered FROM webhook.providers r WHERE r.name = p FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'webhook_set_filter: argument "provider": no provider "%" is registered', p
            USING ERRCODE = 'undefined_object';
    END IF;
    IF c <> '' AND NOT c = ANY (CASE WHEN pg_catalog.cardinality(registered.consumers) = 0
                                     THEN ARRAY['default'] ELSE registered.consumers END) THEN
        RAISE EXCEPTION 'webhook_set_filter: argument "consumer": provider "%" has no consumer "%"', p, c
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Its consumers are listed in webhook.providers.consumers (none: default).';
    END IF;
    IF webhook_set_filter.event_types IS NULL AND webhook_set_filter.payload_path IS NULL THEN
        DELETE FROM webhook.filters f WHERE f.provider = p AND f.consumer = c;
        RETURN false;
    END IF;
    IF pg_catalog.cardinality(webhook_set_filter.event_types) NOT BETWEEN 1 AND 1000
       OR pg_catalog.array_position(webhook_set_filter.event_types, NULL) IS NOT NULL
       OR EXISTS (SELECT FROM pg_catalog.unnest(webhook_set_filter.event_types) t
                   WHERE t = '' OR pg_catalog.octet_length(t) > 255) THEN
        RAISE EXCEPTION 'webhook_set_filter: argument "event_types" must hold 1 to 1000 types of 1 to 255 bytes'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF pg_catalog.octet_length(webhook_set_filter.payload_path::text) > 4096 THEN
        RAISE EXCEPTION 'webhook_set_filter: argument "payload_path" must be at most 4096 bytes'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- Signed material only: whoever controls what the signature does not
    -- cover could pick which events are dropped.
    IF webhook_set_filter.event_types IS NOT NULL
       AND NOT @extschema@.webhook_source_signed(registered.scheme, registered.event_type_from) THEN
        RAISE EXCEPTION 'webhook_set_filter: argument "event_types": provider "%" reads the event type from %, which its scheme "%" does not sign',
                p, registered.event_type_from, registered.scheme
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = CASE WHEN @extschema@.webhook_source_signed(registered.scheme, 'body:')
                              THEN 'Filter on what the signed body says instead, with payload_path.'
                              ELSE 'This scheme signs no body a filter could read either: filter in the handler.' END;
    END IF;
    IF webhook_set_filter.payload_path IS NOT NULL
       AND NOT @extschema@.webhook_source_signed(registered.scheme, 'body:') THEN
        RAISE EXCEPTION 'webhook_set_filter: argument "payload_path": the signature of provider "%" (scheme "%") does not vouch for the body',
                p, registered.scheme
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'SELECT body_covered FROM webhook_schemes() says what each scheme signs; only a digest of the body may be filtered on.';
    END IF;
    INSERT INTO webhook.filters AS f (provider, consumer, event_types, payload_path)
    VALUES (p, c, webhook_set_filter.event_types, webhook_set_filter.payload_path)
    ON CONFLICT ON CONSTRAINT filters_pkey DO UPDATE
       SET event_types = EXCLUDED.event_types, payload_path = EXCLUDED.payload_path,
           set_at = pg_catalog.now(), set_by = SESSION_USER;
    RETURN true;
END
$$;

-- Set (or, with every limit NULL, remove) a consumer's limits, for all
-- its events or one provider's. Lowering a cap refuses new leases until
-- the live ones fit; a limit changed resets its rate and breaker.
CREATE OR REPLACE FUNCTION @extschema@.webhook_set_limit(
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

-- Make this database one slot of a tier: every new session of it stamps
-- its ids with the slot and refuses deliveries that route elsewhere. NULL,
-- NULL makes it a database of its own again. A superuser runs it (the
-- settings are superuser-only, so no application role can move a
-- database between slots).
CREATE OR REPLACE FUNCTION @extschema@.webhook_set_slot(slot integer, slots integer) RETURNS void
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

-- Let a scoped role use every provider again.
CREATE OR REPLACE FUNCTION @extschema@.webhook_unscope_app(role regrole)
RETURNS boolean
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT webhook._refuse_on_standby('webhook_unscope_app') WHERE pg_catalog.pg_is_in_recovery();
    WITH removed AS (
        DELETE FROM webhook.app_scopes s WHERE s.role = webhook_unscope_app.role RETURNING 1
    )
    SELECT EXISTS (SELECT FROM removed)
$$;

-- Application roles may list what they may receive.
COMMENT ON FUNCTION @extschema@.webhook_grant_app(regrole) IS
    'Grant a handler or worker role EXECUTE on webhook_receive, webhook_receivable_providers, webhook_claim, webhook_enqueue, webhook_enqueue_batches, webhook_enqueue_polled, webhook_next, webhook_complete, webhook_fail (and their _batch forms), webhook_extend, webhook_outbound_key and the idempotency_ functions of its own API (begin, checkpoint, finish, fail, fingerprint); no table privilege';

-- What an HTTP front door (webhook-ingress) asks at start and now and
-- then: the providers the session's role may receive deliveries for
-- (every one, unless webhook_scope_app binds the role), each with its
-- scheme and whether webhook_receive queues its deliveries in the inbox.
-- No secret, no setting beyond that: granted to application roles.
CREATE FUNCTION @extschema@.webhook_receivable_providers()
RETURNS TABLE (provider text, scheme text, inbox boolean)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    -- The role the session acts as (SET ROLE's, else the login's): the
    -- one scopes bind, which SECURITY DEFINER leaves in the setting.
    WITH acting AS (
        SELECT CASE WHEN pg_catalog.current_setting('role') = 'none' THEN session_user
                    ELSE pg_catalog.current_setting('role')::name END AS name
    ), binding AS (
        SELECT s.providers
          FROM webhook.app_scopes s, acting a
         WHERE pg_catalog.pg_has_role(a.name, s.role, 'USAGE')
           AND NOT (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = a.name)
    )
    SELECT p.name, p.scheme, p.inbox
      FROM webhook.providers p
     WHERE NOT EXISTS (SELECT FROM binding)
        OR EXISTS (SELECT FROM binding b WHERE p.name = ANY (b.providers))
     ORDER BY p.name
$$;
COMMENT ON FUNCTION @extschema@.webhook_receivable_providers() IS
    'The providers this session may receive deliveries for (its scope''s, or all), with their scheme and whether they queue in the inbox; no secrets';

-- Slack's slash commands and interactions and Twilio's callbacks without
-- an idempotency token have ids under the schemes' defaults now
-- (docs/providers.md): providers registered with the earlier defaults take
-- the new ones, which read the same id wherever the earlier ones found one.
UPDATE webhook.providers
   SET event_id_from = 'body:event_id|body:trigger_id|header:X-Slack-Signature'
 WHERE scheme = 'slack' AND event_id_from = 'body:event_id';
UPDATE webhook.providers
   SET event_type_from = 'body:event.type|body:command|body:type'
 WHERE scheme = 'slack' AND event_type_from = 'body:event.type';
UPDATE webhook.providers
   SET event_id_from = 'header:I-Twilio-Idempotency-Token|header:X-Twilio-Signature'
 WHERE scheme = 'twilio' AND event_id_from = 'header:I-Twilio-Idempotency-Token';

-- A setting that protects a guarantee, read by a function that roles
-- other than the extension's owner may call (webhook.maintenance_lock_timeout,
-- by webhook_create_partitions and webhook_purge), as this call must take
-- it; NULL where it is not set.
-- The compiled edition's library lets only a superuser set these, so the
-- session's value is the one. The portable edition, where they are
-- placeholders any role may set for itself, replaces this function with
-- one that takes them only as the database has them
-- (portable/plumbing.sql, webhook._setting).
CREATE FUNCTION webhook._protected_setting(name text) RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
RETURN NULLIF(pg_catalog.current_setting(name, true), '');
COMMENT ON FUNCTION webhook._protected_setting(text) IS
    'Internal: a setting that protects a guarantee, as this session may take it';

-- How long maintenance waits for a lock on the archive, taken as every
-- protected setting is.
CREATE OR REPLACE FUNCTION webhook._maintenance_lock_timeout() RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
RETURN COALESCE(webhook._protected_setting('webhook.maintenance_lock_timeout'), '200ms');

-- A random key made at install, readable by the extension's owner only.
-- The portable edition keeps what a transaction has done so far (the
-- claims whose commit completes their event) in a setting, which any
-- role can write; it seals the value with an HMAC under this key, bound
-- to the backend and the transaction, and takes a value it did not seal
-- for none (portable/plumbing.sql, webhook._state). The compiled
-- edition keeps that state in its backend's memory and never reads it.
-- Not dumped: a restore's install makes a key of its own, and a sealed
-- value lives no longer than its transaction.
CREATE TABLE webhook.state_key (
    one boolean NOT NULL DEFAULT true CONSTRAINT state_key_pkey PRIMARY KEY
        CONSTRAINT state_key_one_check CHECK (one),
    key bytea   NOT NULL
);
INSERT INTO webhook.state_key (key)
SELECT pg_catalog.decode(pg_catalog.replace(pg_catalog.gen_random_uuid()::text || pg_catalog.gen_random_uuid()::text,
                                            '-', ''), 'hex');
COMMENT ON TABLE webhook.state_key IS
    'The key the portable edition seals a transaction''s state with; the extension owner''s alone';
COMMENT ON COLUMN webhook.state_key.one IS 'Always true: the table holds one row';
COMMENT ON COLUMN webhook.state_key.key IS 'Random bytes made at install';
REVOKE ALL ON TABLE webhook.state_key FROM PUBLIC;

-- The locks of the extension's own maintenance: one run at a time of
-- the archive's partitioning and purging (with the backfills and replays
-- that add inbox rows while it decides), of the metrics' rollup, of alert
-- evaluation, of replays. Each is a row here, locked FOR UPDATE by the
-- run that holds it: a table only the extension's owner may touch, so no
-- other role can take such a lock and stop the maintenance, as it could
-- an advisory lock on a known key (pg_advisory_lock is PUBLIC's).
CREATE TABLE webhook.maintenance_locks (
    name text NOT NULL CONSTRAINT maintenance_locks_pkey PRIMARY KEY
);
INSERT INTO webhook.maintenance_locks (name)
VALUES ('archive partitions'), ('metrics'), ('alerts'), ('replay');
COMMENT ON TABLE webhook.maintenance_locks IS
    'A row per kind of maintenance, locked by the one run of it at a time; the extension owner''s alone';
COMMENT ON COLUMN webhook.maintenance_locks.name IS 'The kind of maintenance';
REVOKE ALL ON TABLE webhook.maintenance_locks FROM PUBLIC;

-- Take the lock of a kind of maintenance (webhook.maintenance_locks) for
-- this transaction, waiting for the run that holds it.
CREATE FUNCTION webhook._maintenance_lock(name text) RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM FROM webhook.maintenance_locks l WHERE l.name = _maintenance_lock.name FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pg_webhook_inbox: no maintenance lock "%"', name USING ERRCODE = 'XX000';
    END IF;
END
$$;
COMMENT ON FUNCTION webhook._maintenance_lock(text) IS
    'Internal: take the lock of a kind of maintenance for this transaction, waiting for its holder';

-- The same without waiting: false while another run holds it.
CREATE FUNCTION webhook._try_maintenance_lock(name text) RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM FROM webhook.maintenance_locks l WHERE l.name = _try_maintenance_lock.name FOR UPDATE SKIP LOCKED;
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION webhook._try_maintenance_lock(text) IS
    'Internal: take the lock of a kind of maintenance for this transaction, unless another run holds it';

-- The maintenance that took an advisory lock on a known key, which any
-- role could take first, now takes its row of webhook.maintenance_locks.
CREATE OR REPLACE FUNCTION @extschema@.webhook_create_partitions(days_ahead integer DEFAULT 7)
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    today date := (pg_catalog.now() AT TIME ZONE 'UTC')::date;
    days  date[];
    made  integer;
    guards text[] := '{}';
    lock_timeout_before text := pg_catalog.current_setting('lock_timeout');
BEGIN
    IF pg_catalog.pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('webhook_create_partitions');
    END IF;
    IF days_ahead IS NULL OR days_ahead < 0 OR days_ahead > 366 THEN
        RAISE EXCEPTION 'webhook_create_partitions: argument "days_ahead" must be between 0 and 366'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- One maintenance at a time (webhook_purge takes the same lock).
    PERFORM webhook._maintenance_lock('archive partitions');
    SELECT pg_catalog.array_agg(today + i ORDER BY i) INTO days
      FROM pg_catalog.generate_series(0, days_ahead) AS i
     WHERE webhook._archive_day_free(today + i);
    IF pg_catalog.cardinality(days) > 1 THEN
        SELECT pg_catalog.array_agg(pg_catalog.format('delivery_log_default_not_%s', pg_catalog.to_char(d, 'YYYYMMDD')))
          INTO guards FROM pg_catalog.unnest(days) AS d;
        BEGIN
            PERFORM pg_catalog.set_config('lock_timeout', webhook._maintenance_lock_timeout(), true);
            EXECUTE 'ALTER TABLE webhook.delivery_log_default '
                    || (SELECT pg_catalog.string_agg(pg_catalog.format('ADD CONSTRAINT %I CHECK (id < %L::uuid OR id >= %L::uuid)',
                                                                       g, webhook._archive_bound((d::timestamp) AT TIME ZONE 'UTC'),
                                                                       webhook._archive_bound(((d + 1)::timestamp) AT TIME ZONE 'UTC')), ', ')
                          FROM ROWS FROM (pg_catalog.unnest(days), pg_catalog.unnest(guards)) AS x (d, g));
            PERFORM pg_catalog.set_config('lock_timeout', lock_timeout_before, true);
        EXCEPTION WHEN check_violation OR lock_not_available THEN
            -- A delivery of one of those days reached the default partition
            -- meanwhile, or the archive is in use: each day is attached (or
            -- skipped) on its own, as below.
            guards := '{}';
        END;
    END IF;
    SELECT pg_catalog.count(*) FILTER (WHERE webhook._create_archive_partition(d)) INTO made
      FROM pg_catalog.unnest(days) AS d;
    IF pg_catalog.cardinality(guards) > 0 THEN
        EXECUTE 'ALTER TABLE webhook.delivery_log_default '
                || (SELECT pg_catalog.string_agg(pg_catalog.format('DROP CONSTRAINT %I', g), ', ')
                      FROM pg_catalog.unnest(guards) AS g);
    END IF;
    RETURN coalesce(made, 0);
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.webhook_purge(
    older_than  interval DEFAULT '90 days',
    batch_size  integer  DEFAULT 10000,
    max_batches integer  DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    -- An event whose deliveries must stay (as `e`): not finished, or
    -- queued and not finished by every consumer. The one rule, for both
    -- ways of purging (applied once, below); a delivery of no such event
    -- may go.
    unfinished CONSTANT text := $rule$
        NOT (e.status IN ('processed', 'stale', 'filtered')
             OR (e.status = 'queued'
                 AND NOT EXISTS (SELECT FROM webhook.inbox i
                                  WHERE i.delivery_id = e.claim_id
                                    AND i.provider = e.provider AND i.event_id = e.event_id
                                    AND i.status NOT IN ('processed', 'stale', 'filtered'))))$rule$;
    columns CONSTANT text := 'id, provider, event_id, event_type, payload, raw_body, signature, headers, '
                             'claim_status, reject_reason, payload_mismatch, created_at, body_size, '
                             'body_sha256, secret_fingerprint';
    cutoff    timestamptz;
    deleted   bigint := 0;
    batch     bigint;
    batches   integer;
    part      record;
    total     bigint;
    kept      uuid[];
    kept_all  uuid[] := '{}';
    providers text[];
    event_ids text[];
    days      pg_catalog.regclass[] := '{}';
    day_rows  bigint[] := '{}';
    skipped   pg_catalog.regclass[] := '{}';
    day       pg_catalog.regclass;
    lock_timeout_before CONSTANT text := pg_catalog.current_setting('lock_timeout');
BEGIN
    IF pg_catalog.pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('webhook_purge');
    END IF;
    IF older_than IS NULL OR older_than <= interval '0' THEN
        RAISE EXCEPTION 'webhook_purge: argument "older_than" must be a positive interval'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF batch_size IS NULL OR batch_size < 1 THEN
        RAISE EXCEPTION 'webhook_purge: argument "batch_size" must be at least 1'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF max_batches IS NOT NULL AND max_batches < 1 THEN
        RAISE EXCEPTION 'webhook_purge: argument "max_batches" must be at least 1'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM webhook._maintenance_lock('archive partitions');
    cutoff := pg_catalog.now() - older_than;

    -- The events whose deliveries stay, found once for the whole purge:
    -- few, and reached without reading the archive (one pass over
    -- webhook.events for those processing, failed or dead; the inbox's
    -- unfinished rows from its partial indexes). The candidates must
    -- cover every event the rule calls unfinished; the rule decides. No
    -- event goes from finished back to unfinished (a requeue takes only
    -- failed or dead ones), so the list stays right while the purge runs.
    EXECUTE pg_catalog.format($sql$
        SELECT coalesce(array_agg(e.provider), '{}'), coalesce(array_agg(e.event_id), '{}')
          FROM (SELECT c.provider, c.event_id FROM webhook.events c
                 WHERE c.status IN ('processing', 'failed', 'dead')
                UNION
                SELECT i.provider, i.event_id FROM webhook.inbox i WHERE i.status IN ('ready', 'leased')
                UNION
                SELECT i.provider, i.event_id FROM webhook.inbox i WHERE i.status = 'dead') AS k
          JOIN webhook.events e ON e.provider = k.provider AND e.event_id = k.event_id
         WHERE %s$sql$, unfinished)
    INTO providers, event_ids;

    -- Row by row where a partition spans more than a day, before any lock
    -- on the archive as a whole is taken.
    FOR part IN
        SELECT p.partition FROM webhook.archive_partitions p
         WHERE p.is_default OR (p.lower_id IS NULL AND p.upper_id > webhook._archive_bound(cutoff))
    LOOP
        batches := 0;
        LOOP
            EXECUTE pg_catalog.format($sql$
                WITH gone AS (
                    DELETE FROM %1$s
                     WHERE ctid = ANY (ARRAY(SELECT l.ctid FROM %1$s l
                                              WHERE l.created_at < $1
                                                AND NOT EXISTS (SELECT FROM unnest($3, $4) AS k (provider, event_id)
                                                                 WHERE k.provider = l.provider
                                                                   AND k.event_id = l.event_id)
                                              LIMIT $2))
                    RETURNING id
                ), failures AS (
                    DELETE FROM webhook.delivery_failures f USING gone WHERE f.delivery_id = gone.id
                )
                SELECT count(*) FROM gone$sql$, part.partition)
            INTO batch USING cutoff, batch_size, providers, event_ids;
            deleted := deleted + batch;
            batches := batches + 1;
            EXIT WHEN batch < batch_size OR batches >= coalesce(max_batches, batches + 1);
        END LOOP;
    END LOOP;

    DELETE FROM webhook.inbox_failures f
     WHERE f.failed_at < cutoff
       AND EXISTS (SELECT FROM webhook.events e
                      JOIN webhook.inbox i ON i.delivery_id = e.claim_id AND i.consumer = f.consumer
                    WHERE e.provider = f.provider AND e.event_id = f.event_id
                      AND i.provider = f.provider AND i.event_id = f.event_id
                      AND i.status IN ('processed', 'stale', 'filtered') AND i.processed_at < cutoff);
    DELETE FROM webhook.inbox i WHERE i.status IN ('processed', 'stale', 'filtered') AND i.processed_at < cutoff;
    -- A trace context serves the event's workers: kept while an inbox row
    -- of it is.
    DELETE FROM webhook.trace_contexts t
     WHERE NOT EXISTS (SELECT FROM webhook.inbox i WHERE i.delivery_id = t.delivery_id);

    -- Whole days, oldest first. Each is read before any is detached: the
    -- first detach locks the archive until the transaction ends, and
    -- claims wait for only what follows it.
    FOR part IN
        SELECT p.partition FROM webhook.archive_partitions p
         WHERE NOT p.is_default AND p.upper_id <= webhook._archive_bound(cutoff)
         ORDER BY p.upper_id
    LOOP
        -- Each unfinished event looked up in the day's event index: a
        -- day costs the same whatever its size.
        EXECUTE pg_catalog.format($sql$
            SELECT coalesce(array_agg(l.id), '{}')
              FROM unnest($1, $2) AS k (provider, event_id)
              JOIN %s l ON l.provider = k.provider AND l.event_id = k.event_id$sql$, part.partition)
        INTO kept USING providers, event_ids;
        kept_all := kept_all || kept;
        EXECUTE pg_catalog.format('SELECT count(*) FROM %s', part.partition) INTO total;
        day_rows := day_rows || (total - pg_catalog.cardinality(kept));
        days := days || part.partition;
    END LOOP;
    -- Detaching a day waits for every reader of the archive (a report, a
    -- dump), and every claim queues behind the waiting detach: wait only
    -- briefly, skip the day if its lock is not granted, and say so.
    FOR i IN 1 .. pg_catalog.cardinality(days) LOOP
        day := days[i];
        BEGIN
            PERFORM pg_catalog.set_config('lock_timeout', webhook._maintenance_lock_timeout(), true);
            SELECT p.lower_id, p.upper_id INTO part FROM webhook.archive_partitions p WHERE p.partition = day;
            EXECUTE pg_catalog.format('ALTER TABLE webhook.delivery_log DETACH PARTITION %s', day);
            -- No partition covers their ids any more: they go to the default
            -- partition, under the same ids.
            EXECUTE pg_catalog.format('INSERT INTO webhook.delivery_log (%1$s) SELECT %1$s FROM %2$s WHERE id = ANY ($1)',
                                      columns, day)
            USING kept_all;
            DELETE FROM webhook.delivery_failures f
             WHERE (part.lower_id IS NULL OR f.delivery_id >= part.lower_id) AND f.delivery_id < part.upper_id
               AND f.delivery_id <> ALL (kept_all);
            EXECUTE pg_catalog.format('DROP TABLE %s', day);
            deleted := deleted + day_rows[i];
        EXCEPTION WHEN lock_not_available THEN
            skipped := skipped || day;
        END;
    END LOOP;
    PERFORM pg_catalog.set_config('lock_timeout', lock_timeout_before, true);
    IF pg_catalog.cardinality(skipped) > 0 THEN
        RAISE WARNING 'webhook_purge: % day(s) of the archive not dropped: the archive is in use', pg_catalog.cardinality(skipped)
            USING DETAIL = pg_catalog.format('Not dropped: %s. Their lock was not granted within webhook.maintenance_lock_timeout (%s).',
                                             pg_catalog.array_to_string(skipped, ', '), webhook._maintenance_lock_timeout()),
                  HINT = 'Run webhook_purge again later, when no long read of webhook.delivery_log is running.';
    END IF;
    RETURN deleted;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.webhook_backfill(
    provider text,
    consumer text,
    since    timestamptz,
    until    timestamptz DEFAULT NULL,
    rate     double precision DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p text := webhook._check_name('webhook_backfill', 'provider', webhook_backfill.provider, true);
    c text := webhook._check_name('webhook_backfill', 'consumer', webhook_backfill.consumer, true);
    upto timestamptz := coalesce(webhook_backfill.until, pg_catalog.now());
    queued bigint;
BEGIN
    IF pg_catalog.pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('webhook_backfill');
    END IF;
    IF webhook_backfill.since IS NULL THEN
        RAISE EXCEPTION 'webhook_backfill: argument "since" must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF NOT (webhook_backfill.rate > 0 AND webhook_backfill.rate <= 100000) THEN
        RAISE EXCEPTION 'webhook_backfill: argument "rate" must be more than 0 and at most 100000 (events a second)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT EXISTS (SELECT FROM webhook.providers r WHERE r.name = p) THEN
        RAISE EXCEPTION 'webhook_backfill: argument "provider": no provider "%" is registered', p
            USING ERRCODE = 'undefined_object';
    END IF;
    IF NOT EXISTS (SELECT FROM webhook.providers r
                    WHERE r.name = p AND c = ANY (coalesce(NULLIF(r.consumers, '{}'), '{default}'))) THEN
        RAISE EXCEPTION 'webhook_backfill: argument "consumer": "%" is not a consumer of "%"', c, p
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Add it first: webhook_register_provider(provider, consumers => ARRAY[..., consumer]).';
    END IF;
    -- webhook_purge decides which archive rows may go from the events'
    -- inbox rows; it must not decide while rows are added here.
    PERFORM webhook._maintenance_lock('archive partitions');
    INSERT INTO webhook.inbox AS i (provider, event_id, consumer, event_type, delivery_id, entity_key,
                                    order_value, run_at)
    SELECT e.provider, e.event_id, c, e.event_type, e.claim_id, e.entity_key, e.order_value,
           pg_catalog.clock_timestamp()
               + coalesce((pg_catalog.row_number() OVER (ORDER BY e.first_seen_at, e.event_id) - 1)
                          / webhook_backfill.rate, 0) * interval '1 second'
      FROM webhook.events e
     WHERE e.provider = p AND e.status = 'queued'
       AND e.first_seen_at >= webhook_backfill.since AND e.first_seen_at < upto
       -- The archive row it was queued from is still there.
       AND EXISTS (SELECT FROM webhook.delivery_log l WHERE l.id = e.claim_id)
    ON CONFLICT ON CONSTRAINT inbox_pkey DO NOTHING;
    GET DIAGNOSTICS queued = ROW_COUNT;
    RETURN queued;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.webhook_replay(
    provider       text DEFAULT NULL,
    consumer       text DEFAULT NULL,
    event_types    text[] DEFAULT NULL,
    statuses       text[] DEFAULT '{processed}',
    since          timestamptz DEFAULT NULL,
    until          timestamptz DEFAULT NULL,
    error_contains text DEFAULT NULL,
    payload_path   jsonpath DEFAULT NULL,
    reason         text DEFAULT NULL,
    rate           double precision DEFAULT NULL,
    dry_run        boolean DEFAULT true,
    sample         integer DEFAULT 10
) RETURNS webhook.replay_result
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p text := NULLIF(webhook._check_name('webhook_replay', 'provider', webhook_replay.provider, false), '');
    c text := NULLIF(webhook._check_name('webhook_replay', 'consumer', webhook_replay.consumer, false), '');
    request jsonb;
    result webhook.replay_result;
    started uuid;
BEGIN
    IF pg_catalog.pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('webhook_replay');
    END IF;
    IF webhook_replay.statuses IS NULL OR pg_catalog.cardinality(webhook_replay.statuses) = 0
       OR NOT webhook_replay.statuses <@ ARRAY['processed', 'dead', 'stale', 'filtered', 'failed']
       OR array_position(webhook_replay.statuses, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'webhook_replay: argument "statuses" must list some of processed, dead, stale, filtered, failed'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF pg_catalog.cardinality(webhook_replay.event_types) > 1000
       OR array_position(webhook_replay.event_types, NULL) IS NOT NULL
       OR EXISTS (SELECT FROM pg_catalog.unnest(webhook_replay.event_types) t
                   WHERE t = '' OR pg_catalog.octet_length(t) > 255) THEN
        RAISE EXCEPTION 'webhook_replay: argument "event_types" must hold at most 1000 types of 1 to 255 bytes'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF webhook_replay.until <= webhook_replay.since THEN
        RAISE EXCEPTION 'webhook_replay: argument "until" must be later than "since"'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF webhook_replay.error_contains = '' OR pg_catalog.octet_length(webhook_replay.error_contains) > 2048 THEN
        RAISE EXCEPTION 'webhook_replay: argument "error_contains" must be 1 to 2048 bytes'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF pg_catalog.octet_length(webhook_replay.payload_path::text) > 4096 THEN
        RAISE EXCEPTION 'webhook_replay: argument "payload_path" must be at most 4096 bytes'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT (webhook_replay.rate > 0 AND webhook_replay.rate <= 100000) THEN
        RAISE EXCEPTION 'webhook_replay: argument "rate" must be more than 0 and at most 100000 (events a second)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF webhook_replay.dry_run IS NULL THEN
        RAISE EXCEPTION 'webhook_replay: argument "dry_run" must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF webhook_replay.sample IS NULL OR webhook_replay.sample NOT BETWEEN 0 AND 1000 THEN
        RAISE EXCEPTION 'webhook_replay: argument "sample" must be between 0 and 1000'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p IS NOT NULL AND NOT EXISTS (SELECT FROM webhook.providers r WHERE r.name = p) THEN
        RAISE EXCEPTION 'webhook_replay: argument "provider": no provider "%" is registered', p
            USING ERRCODE = 'undefined_object';
    END IF;

    IF webhook_replay.dry_run THEN
        SELECT NULL, true, false, pg_catalog.count(*),
               coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
                            'provider', m.provider, 'event_id', m.event_id, 'consumer', m.consumer,
                            'event_type', m.event_type, 'status', m.status, 'queued_at', m.queued_at)
                            ORDER BY m.queued_at, m.delivery_id)
                        FILTER (WHERE m.n <= webhook_replay.sample), '[]')
          INTO result
          FROM (SELECT x.*, pg_catalog.row_number() OVER (ORDER BY x.queued_at, x.delivery_id) AS n
                  FROM webhook._replay_matches(p, c, webhook_replay.event_types, webhook_replay.statuses,
                                               webhook_replay.since, webhook_replay.until,
                                               webhook_replay.error_contains, webhook_replay.payload_path) x) m;
        RETURN result;
    END IF;

    IF webhook_replay.reason IS NULL THEN
        RAISE EXCEPTION 'webhook_replay: argument "reason" must not be NULL for a run'
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = 'Say why (the fix deployed, the ticket): it names the replay, with its filter.';
    END IF;
    IF webhook_replay.reason = '' OR pg_catalog.octet_length(webhook_replay.reason) > 2048 THEN
        RAISE EXCEPTION 'webhook_replay: argument "reason" must be 1 to 2048 bytes'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    request := pg_catalog.jsonb_strip_nulls(pg_catalog.jsonb_build_object(
        'provider', p, 'consumer', c, 'event_types', webhook_replay.event_types,
        'statuses', webhook_replay.statuses, 'since', webhook_replay.since, 'until', webhook_replay.until,
        'error_contains', webhook_replay.error_contains, 'payload_path', webhook_replay.payload_path::text));

    -- The same request twice (a retry after a crash, a double click)
    -- waits for the first, then finds it: replays start one at a time.
    PERFORM webhook._maintenance_lock('replay');
    SELECT r.id, false, false, r.events, NULL INTO result
      FROM webhook.replays r
     WHERE r.filter = request AND r.reason = webhook_replay.reason;
    IF FOUND THEN
        RAISE NOTICE 'webhook_replay: replay % with this filter and reason was started at %; not queued again',
            result.replay_id, (SELECT r.requested_at FROM webhook.replays r WHERE r.id = result.replay_id)
            USING HINT = 'To run it again, give another reason.';
        RETURN result;
    END IF;

    -- webhook_purge decides which archive rows may go from the events'
    -- inbox rows; it must not decide while finished rows become ready.
    PERFORM webhook._maintenance_lock('archive partitions');
    INSERT INTO webhook.replays (reason, filter, rate, events)
    VALUES (webhook_replay.reason, request, webhook_replay.rate, 0)
    RETURNING webhook.replays.id INTO started;
    -- Row locks, no lock per event: a replay of any size fits the lock table.
    INSERT INTO webhook.replay_items (replay_id, delivery_id, consumer, prior_status, prior_attempts,
                                      prior_replay_id)
    SELECT started, i.delivery_id, i.consumer, i.status, i.attempts, i.replay_id
      FROM webhook.inbox i
     WHERE (i.delivery_id, i.consumer) IN (
               SELECT m.delivery_id, m.consumer
                 FROM webhook._replay_matches(p, c, webhook_replay.event_types, webhook_replay.statuses,
                                              webhook_replay.since, webhook_replay.until,
                                              webhook_replay.error_contains, webhook_replay.payload_path) m)
       -- Read again once locked: a row finished meanwhile, or queued by
       -- another replay, is as it is now.
       AND i.status::text IN ('processed', 'dead', 'stale', 'filtered')
       FOR UPDATE OF i;
    -- The metrics read a completion or a dead letter off its row, which
    -- the replay's lease rewrites: keep what no rollup has counted yet.
    PERFORM webhook._metrics_hold(h.outcome, ARRAY(
                SELECT i.claim_id FROM webhook.replay_items t
                  JOIN webhook.inbox i ON i.delivery_id = t.delivery_id AND i.consumer = t.consumer
                 WHERE t.replay_id = started AND t.prior_status::text = h.status))
       FROM (VALUES ('completion', 'processed'), ('dead_letter', 'dead')) AS h (outcome, status);
    UPDATE webhook.inbox i
       SET status = 'ready', attempts = 0, requeues = i.requeues + 1, replay_id = started,
           run_at = webhook._due_in_turn((SELECT pg_catalog.clock_timestamp()), q.n,
                                         coalesce(1 / webhook_replay.rate, 0) * interval '1 second')
      FROM (SELECT t.delivery_id, t.consumer,
                   pg_catalog.row_number() OVER (ORDER BY j.queued_at, j.order_value, t.delivery_id, t.consumer) AS n
              FROM webhook.replay_items t
              JOIN webhook.inbox j ON j.delivery_id = t.delivery_id AND j.consumer = t.consumer
             WHERE t.replay_id = started) q
     WHERE i.delivery_id = q.delivery_id AND i.consumer = q.consumer;
    GET DIAGNOSTICS result.events = ROW_COUNT;
    UPDATE webhook.replays r SET events = result.events WHERE r.id = started;
    PERFORM pg_catalog.pg_notify('webhook_inbox', '');
    SELECT started, false, true, result.events, NULL INTO result;
    RETURN result;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.webhook_metrics_rollup()
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    since   timestamptz;
    bound   timestamptz := pg_catalog.clock_timestamp();
    counted bigint := 0;
    retention interval;
BEGIN
    IF pg_catalog.pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('webhook_metrics_rollup');
    END IF;
    -- One rollup at a time; whoever comes second has nothing to add.
    IF NOT webhook._try_maintenance_lock('metrics') THEN
        RETURN 0;
    END IF;
    IF NOT pg_catalog.pg_has_role(current_user, 'pg_read_all_stats', 'USAGE') THEN
        RAISE EXCEPTION 'webhook_metrics_rollup: the extension''s owner (%) cannot see other sessions'' transactions', current_user
            USING ERRCODE = '42501',
                  HINT = pg_catalog.format('GRANT pg_read_all_stats TO %I; the rollup counts only what no running transaction can still write.', current_user);
    END IF;
    -- The row is made with the extension; were it deleted, counting
    -- starts again from now.
    INSERT INTO webhook.metric_marks (counted_until) VALUES (pg_catalog.now()) ON CONFLICT DO NOTHING;
    SELECT counted_until INTO STRICT since FROM webhook.metric_marks FOR UPDATE;

    -- The bound (see the top of this file): taken after the clock, so a
    -- transaction that starts writing after this read writes above it.
    SELECT LEAST(bound, pg_catalog.min(a.xact_start)) INTO bound
      FROM pg_catalog.pg_stat_activity a
     WHERE a.datname = pg_catalog.current_database()
       AND a.pid <> pg_catalog.pg_backend_pid()
       AND a.backend_type IN ('client backend', 'background worker')
       AND (a.backend_xid IS NOT NULL OR a.state IN ('active', 'fastpath function call'));
    IF EXISTS (SELECT FROM pg_catalog.pg_prepared_xacts p WHERE p.database = pg_catalog.current_database()) THEN
        bound := since;
    END IF;
    -- At most ten minutes of traffic per call, so that one call after a
    -- long pause (nobody scraped for a day) is not one statement of hours;
    -- the calls after it catch up, and the lag gauge shows how far.
    bound := LEAST(GREATEST(bound, since), since + interval '10 minutes');

    -- The deliveries since the last mark, read once: by what they were
    -- answered, rejections by reason, and the claims among them (with
    -- those still open from before).
    counted := counted + webhook._metrics_add(
        $q$arrived AS MATERIALIZED (
               SELECT l.id, l.provider, l.event_id, l.claim_status, l.reject_reason, l.created_at, l.claim_completes
                 FROM webhook.delivery_log l WHERE l.id >= $1 AND l.id < $2
           ), failed_here AS (
               SELECT f.delivery_id FROM webhook.delivery_failures f WHERE f.delivery_id >= $1 AND f.delivery_id < $2
           ), seen AS (
               -- A claim of a new event that completed on commit, and did
               -- not fail before it, needs no look at its event (below).
               SELECT a.id, a.provider, a.event_id, a.created_at AS started_at, e.status, e.processed_at,
                      e.first_seen_at, e.attempts, e.claim_id = a.id AS owner
                 FROM arrived a
                 JOIN webhook.events e ON e.provider = a.provider AND e.event_id = a.event_id
                WHERE a.claim_status IN ('claimed', 'retry')
                  AND (a.claim_completes IS NOT TRUE OR a.id IN (SELECT delivery_id FROM failed_here))
               UNION ALL
               SELECT o.id, o.provider, o.event_id, o.started_at, e.status, e.processed_at,
                      e.first_seen_at, e.attempts, e.claim_id = o.id
                 FROM webhook.metric_open o
                 JOIN webhook.events e ON e.provider = o.provider AND e.event_id = o.event_id
                WHERE o.consumer = ''
           ), closed AS (
               DELETE FROM webhook.metric_open o USING seen s
                WHERE o.id = s.id AND NOT (s.owner AND s.status = 'processing')
           ), opened AS (
               INSERT INTO webhook.metric_open (id, provider, event_id, consumer, started_at)
               SELECT s.id, s.provider, s.event_id, '', s.started_at FROM seen s
                WHERE s.owner AND s.status = 'processing'
               ON CONFLICT (id) DO NOTHING
           ), done AS (
               SELECT s.processed_at AS at, s.provider, ''::text AS consumer, s.first_seen_at AS received_at,
                      s.started_at, s.attempts
                 FROM seen s WHERE s.owner AND s.status = 'processed'
               UNION ALL
               -- Its event was made processed, first seen and completed
               -- at the start of the claim's transaction (now()), which
               -- is the archive row's created_at: one attempt, no wait.
               SELECT a.created_at, a.provider, '', a.created_at, a.created_at, 1
                 FROM arrived a
                WHERE a.claim_completes AND a.id NOT IN (SELECT delivery_id FROM failed_here)
           )$q$,
        webhook._completion_counts() || $q$
           UNION ALL
           SELECT d.minute, d.provider, '', o.metric, o.label, d.n, 0
             FROM (SELECT webhook._minute(a.created_at) AS minute, a.provider, a.claim_status, a.reject_reason,
                          count(*) AS n
                     FROM arrived a GROUP BY 1, 2, 3, 4) d
            CROSS JOIN LATERAL (VALUES
                  ('deliveries', d.claim_status::text, true),
                  ('rejections', coalesce(d.reject_reason, 'unknown'), d.claim_status = 'rejected')
                  ) AS o (metric, label, counts)
            WHERE o.counts$q$,
        since, bound);

    -- Inbox leases: those still held before, and those taken since.
    counted := counted + webhook._metrics_add(
        $q$attempts AS (
               SELECT o.id FROM webhook.metric_open o WHERE o.consumer <> ''
               UNION ALL
               SELECT i.claim_id FROM webhook.inbox i WHERE i.claim_id >= $1 AND i.claim_id < $2
           ), seen AS (
               SELECT a.id, i.provider, i.event_id, i.consumer, i.status, i.processed_at, i.queued_at, i.attempts
                 FROM attempts a LEFT JOIN webhook.inbox i ON i.claim_id = a.id
           ), closed AS (
               DELETE FROM webhook.metric_open o USING seen s
                WHERE o.id = s.id AND s.status IS DISTINCT FROM 'leased'
           ), opened AS (
               INSERT INTO webhook.metric_open (id, provider, event_id, consumer, started_at)
               SELECT s.id, s.provider, s.event_id, s.consumer, webhook._id_time(s.id) FROM seen s
                WHERE s.status = 'leased'
               ON CONFLICT (id) DO NOTHING
           ), done AS (
               SELECT s.processed_at AS at, s.provider, s.consumer, s.queued_at AS received_at,
                      webhook._id_time(s.id) AS started_at, s.attempts
                 FROM seen s WHERE s.status = 'processed'
           )$q$,
        webhook._completion_counts(), since, bound);

    -- Failed attempts, of claims and of leases, and the dead letters they
    -- made: a failure whose event (or inbox row) is parked under the same
    -- claim or lease.
    counted := counted + webhook._metrics_add(
        $q$failed AS (
               SELECT f.failed_at AS at, l.provider, ''::text AS consumer, l.created_at AS started_at,
                      (e.status = 'dead' AND e.claim_id = f.delivery_id) AS parked
                 FROM webhook.delivery_failures f
                 JOIN webhook.delivery_log l ON l.id = f.delivery_id
                 JOIN webhook.events e ON e.provider = l.provider AND e.event_id = l.event_id
                WHERE f.failed_at >= $3 AND f.failed_at < $4
               UNION ALL
               SELECT f.failed_at, f.provider, f.consumer, webhook._id_time(f.claim_id),
                      coalesce(i.status = 'dead', false)
                 FROM webhook.inbox_failures f
                 LEFT JOIN webhook.inbox i ON i.claim_id = f.claim_id
                WHERE f.failed_at >= $3 AND f.failed_at < $4
           )$q$,
        webhook._failure_counts(), since, bound);

    -- Outcomes a replay or requeue undid before they were counted: each
    -- once, whenever it was held (its own minute, already passed or not).
    counted := counted + webhook._metrics_add(
        $q$held AS (
               DELETE FROM webhook.metric_held h RETURNING h.*
           ), done AS (
               SELECT h.at, h.provider, h.consumer, h.received_at, h.started_at, h.attempts
                 FROM held h WHERE h.outcome = 'completion'
           )$q$,
        webhook._completion_counts() || $q$
           UNION ALL
           SELECT webhook._minute(h.at), h.provider, h.consumer, 'dead_letters', '', count(*), 0
             FROM held h WHERE h.outcome = 'dead_letter'
            GROUP BY 1, 2, 3$q$,
        since, bound);

    UPDATE webhook.metric_marks SET counted_until = bound, rolled_up_at = pg_catalog.clock_timestamp();

    -- In minutes, its unit, whatever unit it was set in; fourteen days
    -- where nobody set it.
    retention := pg_catalog.make_interval(
        mins => webhook._setting_in('webhook.metrics_retention', 'min', 14 * 24 * 60)::integer);
    DELETE FROM webhook.metric_minutes WHERE minute < pg_catalog.now() - retention;
    -- A name no registered provider owns, quiet for the retention: its
    -- series go (a counter Prometheus then sees end), and its place
    -- under webhook.metrics_unregistered_providers is free again.
    DELETE FROM webhook.metric_totals t
     WHERE t.provider NOT IN ('', '(other)')
       AND NOT EXISTS (SELECT FROM webhook.providers p WHERE p.name = t.provider)
       AND NOT EXISTS (SELECT FROM webhook.metric_minutes m WHERE m.provider = t.provider)
       AND NOT EXISTS (SELECT FROM webhook.metric_open o WHERE o.provider = t.provider);
    RETURN counted;
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.webhook_alerts_evaluate()
RETURNS TABLE (id bigint, change text, rule text, provider text, consumer text, status webhook.alert_status, message text)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    IF pg_catalog.pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('webhook_alerts_evaluate');
    END IF;
    -- Two evaluations at once would both open the same alert.
    PERFORM webhook._maintenance_lock('alerts');
    PERFORM @extschema@.webhook_metrics_rollup();
    -- One statement, one snapshot: what fires is measured once, and each
    -- unresolved alert is either still firing or resolved.
    RETURN QUERY
    WITH firing AS (
        SELECT * FROM webhook._alert_conditions()
    ), still AS (
        UPDATE webhook.alerts x
           SET value = f.value, threshold = f.threshold, message = f.message, last_seen_at = pg_catalog.now()
          FROM firing f
         WHERE x.status <> 'resolved' AND x.rule = f.rule AND x.provider = f.provider AND x.consumer = f.consumer
    ), opened AS (
        INSERT INTO webhook.alerts AS x (rule, kind, provider, consumer, value, threshold, message)
        SELECT f.rule, f.kind, f.provider, f.consumer, f.value, f.threshold, f.message
          FROM firing f
         WHERE NOT EXISTS (SELECT FROM webhook.alerts y
                            WHERE y.status <> 'resolved' AND y.rule = f.rule AND y.provider = f.provider
                              AND y.consumer = f.consumer)
        RETURNING x.*
    ), resolved AS (
        UPDATE webhook.alerts x SET status = 'resolved', resolved_at = pg_catalog.now()
         WHERE x.status <> 'resolved'
           AND NOT EXISTS (SELECT FROM firing f
                            WHERE x.rule = f.rule AND x.provider = f.provider AND x.consumer = f.consumer)
        RETURNING x.*
    ), changed AS (
        SELECT o::webhook.alerts AS a, 'opened' AS change FROM opened o
        UNION ALL
        SELECT r::webhook.alerts, 'resolved' FROM resolved r
    )
    SELECT (c.a).id, c.change, (c.a).rule, (c.a).provider, (c.a).consumer, (c.a).status, (c.a).message
      FROM changed c, LATERAL webhook._alert_notify(c.a, c.change)
     ORDER BY (c.a).id;
END
$$;

-- A secret given to webhook_register_provider is refused in
-- webhook_register_provider's name, not webhook_add_secret's; Supabase's
-- v1,whsec_… secrets are keys (src/schemes/standard.rs).
-- Create or update a provider. Arguments left NULL keep their current value,
-- or take the scheme's defaults for a new provider. The scheme defaults to
-- the name when the name is a known scheme or alias ('svix' and 'clerk'
-- mean 'standard'); it is stored under its canonical name.
--
-- inbox: webhook_receive queues the provider's deliveries for workers and
-- answers 2xx at once. A new GitHub provider is in inbox mode unless told
-- otherwise: GitHub never redelivers a delivery it was not answered 2xx
-- for, so any other answer loses the event. consumers: the inbox's
-- consumers of its events (none: 'default').
--
-- Ordering (off unless asked for): entity_key_from and order_from say
-- where in the signed body the entity an event is about and its order
-- value are; ordering => true takes the scheme's preset for what is not
-- given (webhook_schemes()), ordering => false turns it off. ties: an
-- event as new as its entity's watermark is processed ('process') or
-- skipped as stale ('stale'). fifo: the inbox never leases an event while
-- an earlier one of its entity is leased or backing off.
CREATE OR REPLACE FUNCTION @extschema@.webhook_register_provider(
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
) RETURNS SETOF webhook.provider_summary
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p_name     text := lower(webhook_register_provider.name);
    existing   webhook.providers;
    v_scheme   text;
    v_entity   text;
    v_order    text;
    known      record;
    failed_check text;
BEGIN
    IF pg_catalog.pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('webhook_register_provider');
    END IF;
    IF p_name IS NULL OR p_name = '' THEN
        RAISE EXCEPTION 'webhook_register_provider: argument "name" must not be empty'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT * INTO existing FROM webhook.providers p WHERE p.name = p_name FOR UPDATE;

    v_scheme := btrim(coalesce(webhook_register_provider.scheme, existing.scheme, p_name));
    SELECT s.* INTO known
      FROM @extschema@.webhook_schemes() s
     WHERE s.scheme = lower(split_part(v_scheme, ';', 1))
        OR lower(split_part(v_scheme, ';', 1)) = ANY (s.aliases);
    IF NOT FOUND THEN
        RAISE EXCEPTION 'webhook_register_provider: argument "scheme": unknown signature scheme "%"', v_scheme
            USING ERRCODE = 'undefined_object',
                  HINT = 'SELECT * FROM webhook_schemes() lists the schemes and their aliases.';
    END IF;
    -- A scheme's options (the generic form's, PayPal's webhook id) are
    -- kept; webhook_verify checks them, and that a scheme needing them has
    -- them.
    BEGIN
        PERFORM @extschema@.webhook_verify(v_scheme, '{}'::jsonb, ''::bytea, '{}'::text[]);
    EXCEPTION WHEN syntax_error THEN
        RAISE EXCEPTION 'webhook_register_provider: argument "scheme": invalid scheme "%"', v_scheme
            USING ERRCODE = 'syntax_error',
                  DETAIL = SQLERRM,
                  HINT = CASE known.scheme
                      WHEN 'paypal' THEN 'PayPal signs with the webhook''s id: paypal;webhook_id=<id>.'
                      WHEN 'hmac' THEN 'The generic form is hmac;header=<name>[;algorithm=sha256|sha1|sha512][;encoding=hex|base64][;prefix=<text>].'
                      ELSE format('Scheme "%s" takes no options.', known.scheme)
                  END;
    END;
    IF pg_catalog.strpos(v_scheme, ';') = 0 THEN
        v_scheme := known.scheme;
    END IF;

    IF webhook_register_provider.ordering IS FALSE THEN
        IF webhook_register_provider.entity_key_from IS NOT NULL
           OR webhook_register_provider.order_from IS NOT NULL THEN
            RAISE EXCEPTION 'webhook_register_provider: argument "ordering": false turns ordering off, but entity_key_from or order_from was given'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
    ELSE
        v_entity := coalesce(webhook_register_provider.entity_key_from,
                             CASE WHEN webhook_register_provider.ordering THEN known.entity_key_from END,
                             existing.entity_key_from);
        v_order := coalesce(webhook_register_provider.order_from,
                            CASE WHEN webhook_register_provider.ordering THEN known.order_from END,
                            existing.order_from);
        IF (webhook_register_provider.ordering OR v_entity IS NOT NULL OR v_order IS NOT NULL)
           AND (v_entity IS NULL OR v_order IS NULL) THEN
            RAISE EXCEPTION 'webhook_register_provider: argument "%": ordering needs both entity_key_from and order_from',
                CASE WHEN v_entity IS NULL THEN 'entity_key_from' ELSE 'order_from' END
                USING ERRCODE = 'null_value_not_allowed',
                      HINT = CASE WHEN v_entity IS NULL
                                  THEN format('Scheme "%s" has no entity key that fits every event type: name the path, for example entity_key_from => ''body:data.id''.', known.scheme)
                                  ELSE format('Scheme "%s" has no order value preset: name the path, for example order_from => ''body:updated_at''.', known.scheme)
                             END;
        END IF;
    END IF;

    -- In an intake tier (webhook_set_slot) a delivery's slot follows from
    -- its route key, and the route key from the scheme, event_id_from and
    -- entity_key_from: changing them sends the redeliveries of every event
    -- received so far to a slot that never saw it, where they would be
    -- taken as new. Refused for a provider registered already, unless
    -- reroute: this slot cannot know whether another holds its events,
    -- and every slot must decide alike (the proxy calls them one by one).
    IF existing.name IS NOT NULL
       AND coalesce(nullif(pg_catalog.current_setting('webhook.slots', true), ''), '0')::integer > 1
       AND (existing.scheme, existing.event_id_from, existing.entity_key_from)
           IS DISTINCT FROM (v_scheme,
                             coalesce(webhook_register_provider.event_id_from, existing.event_id_from),
                             v_entity)
       AND NOT coalesce(webhook_register_provider.reroute, false) THEN
        RAISE EXCEPTION 'webhook_register_provider: changing the scheme, event_id_from or ordering of provider "%" would route its deliveries to other slots', p_name
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = pg_catalog.format('Its route is now scheme %s, event id from %s, entity key from %s; asked: %s, %s, %s. Redeliveries of events received under the old route would reach slots that never saw them, and be processed again.',
                                             existing.scheme, existing.event_id_from, coalesce(existing.entity_key_from, 'none'),
                                             v_scheme, coalesce(webhook_register_provider.event_id_from, existing.event_id_from),
                                             coalesce(v_entity, 'none')),
                  HINT = 'Register the new route under a new provider name (and point the provider''s endpoint at it), or pass reroute => true if it has no deliveries yet or has stopped redelivering what it sent before (docs/scale-out.md).';
    END IF;

    INSERT INTO webhook.providers AS p
           (name, scheme, tolerance, event_id_from, event_type_from, inbox, consumers,
            entity_key_from, order_from, ties, fifo)
    VALUES (p_name,
            v_scheme,
            coalesce(webhook_register_provider.tolerance, existing.tolerance, known.tolerance),
            coalesce(webhook_register_provider.event_id_from, existing.event_id_from, known.event_id_from),
            coalesce(webhook_register_provider.event_type_from, existing.event_type_from, known.event_type_from),
            coalesce(webhook_register_provider.inbox, existing.inbox, known.scheme = 'github'),
            coalesce(webhook_register_provider.consumers, existing.consumers, '{}'),
            v_entity,
            v_order,
            coalesce(webhook_register_provider.ties, existing.ties, 'process'),
            -- Ordering turned off takes FIFO with it.
            CASE WHEN v_entity IS NULL THEN coalesce(webhook_register_provider.fifo, false)
                 ELSE coalesce(webhook_register_provider.fifo, existing.fifo, false) END)
    ON CONFLICT ON CONSTRAINT providers_pkey DO UPDATE
       SET scheme = excluded.scheme, tolerance = excluded.tolerance,
           event_id_from = excluded.event_id_from, event_type_from = excluded.event_type_from,
           inbox = excluded.inbox, consumers = excluded.consumers,
           entity_key_from = excluded.entity_key_from, order_from = excluded.order_from,
           ties = excluded.ties, fifo = excluded.fifo;

    IF webhook_register_provider.secret IS NOT NULL THEN
        PERFORM webhook._add_secret('webhook_register_provider', p_name, webhook_register_provider.secret);
    END IF;
    RETURN QUERY SELECT * FROM webhook.provider_summary s WHERE s.name = p_name;
EXCEPTION
    WHEN not_null_violation THEN
        RAISE EXCEPTION 'webhook_register_provider: scheme "%" has no defaults; give event_id_from and event_type_from', v_scheme
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = 'Sources are ''header:<name>'' or ''body:<dotted.path>'', alternatives joined by ''|''.';
    WHEN check_violation THEN
        -- Each check guards one argument: name it.
        GET STACKED DIAGNOSTICS failed_check = CONSTRAINT_NAME;
        RAISE EXCEPTION 'webhook_register_provider: argument "%" is invalid',
            CASE failed_check
                WHEN 'providers_name_check' THEN 'name'
                WHEN 'providers_tolerance_check' THEN 'tolerance'
                WHEN 'providers_event_id_from_check' THEN 'event_id_from'
                WHEN 'providers_event_type_from_check' THEN 'event_type_from'
                WHEN 'providers_consumers_check' THEN 'consumers'
                WHEN 'providers_entity_key_from_check' THEN 'entity_key_from'
                WHEN 'providers_order_from_check' THEN 'order_from'
                WHEN 'providers_ties_check' THEN 'ties'
                WHEN 'providers_fifo_check' THEN 'fifo'
                ELSE failed_check
            END
            USING ERRCODE = 'check_violation',
                  DETAIL = SQLERRM,
                  HINT = CASE failed_check
                      WHEN 'providers_entity_key_from_check' THEN 'Ordering reads the signed body only: ''body:<dotted.path>'', alternatives joined by ''|''.'
                      WHEN 'providers_order_from_check' THEN 'Ordering reads the signed body only: ''body:<dotted.path>'', alternatives joined by ''|''.'
                      WHEN 'providers_ties_check' THEN 'ties is ''process'' or ''stale''.'
                      WHEN 'providers_fifo_check' THEN 'FIFO keeps each entity''s events in order: turn ordering on first (ordering => true, or entity_key_from and order_from).'
                      ELSE 'Names (and consumers) are lower-case [a-z0-9_.-]; sources are ''header:<name>'' or ''body:<dotted.path>''; the tolerance is positive.'
                  END;
END
$$;
COMMENT ON FUNCTION @extschema@.webhook_register_provider(text, text, text, interval, text, text, boolean, text[], boolean, text, text, text, boolean, boolean) IS
    'Create or update a provider: scheme (default: its name or alias), tolerance, where the event id and type are, inbox mode and consumers, ordering (entity key, order value, ties, FIFO), and optionally a secret; in an intake tier, a change of its route for a provider with events needs reroute => true';

-- Add a signing secret (or re-activate a retired one). Returns its
-- fingerprint. Its errors name the function the caller called
-- (webhook_add_secret, or webhook_register_provider's secret).
CREATE OR REPLACE FUNCTION webhook._add_secret(caller text, provider text, secret text)
RETURNS text
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    fp       text;
    v_scheme text;
    problem  text;
BEGIN
    IF pg_catalog.pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby(caller);
    END IF;
    IF _add_secret.secret IS NULL OR _add_secret.secret = '' THEN
        RAISE EXCEPTION '%: argument "secret" must not be empty', caller
            USING ERRCODE = 'zero_length_character_string';
    END IF;
    SELECT p.scheme INTO v_scheme FROM webhook.providers p WHERE p.name = _add_secret.provider;
    IF NOT FOUND THEN
        RAISE EXCEPTION '%: argument "provider": no provider "%" is registered', caller, _add_secret.provider
            USING ERRCODE = 'undefined_object';
    END IF;
    -- A public key or certificate in the wrong format would only show up
    -- later, as every delivery refused: say so now. (The message never
    -- echoes the secret.)
    problem := @extschema@.webhook_check_key(v_scheme, _add_secret.secret);
    IF problem IS NOT NULL THEN
        RAISE EXCEPTION '%: argument "secret" is not a key for scheme "%"', caller, v_scheme
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = problem || '.';
    END IF;
    -- Each delivery is checked against every active secret: keep them few.
    IF (SELECT pg_catalog.count(*) FROM webhook.provider_secrets s
         WHERE s.provider = _add_secret.provider AND s.retired_at IS NULL
           AND s.secret <> _add_secret.secret) >= 16 THEN
        RAISE EXCEPTION '%: argument "provider": "%" has 16 active secrets already', caller, _add_secret.provider
            USING ERRCODE = 'program_limit_exceeded',
                  HINT = 'Retire the secrets the provider no longer signs with: webhook_retire_secret(provider, fingerprint).';
    END IF;
    fp := webhook._fingerprint(_add_secret.secret);
    INSERT INTO webhook.provider_secrets AS s (provider, secret, fingerprint)
    VALUES (_add_secret.provider, _add_secret.secret, fp)
    ON CONFLICT ON CONSTRAINT provider_secrets_pkey DO UPDATE SET retired_at = NULL;
    -- Its use row, made now: deliveries then only ever update it, and skip
    -- it while another holds it (src/receive/secrets.rs).
    INSERT INTO webhook.secret_uses (provider, fingerprint)
    VALUES (_add_secret.provider, fp)
    ON CONFLICT ON CONSTRAINT secret_uses_pkey DO NOTHING;
    RETURN fp;
END
$$;

COMMENT ON FUNCTION webhook._add_secret(text, text, text) IS
    'Add a signing secret for webhook_add_secret and webhook_register_provider, its errors in the caller''s name';

CREATE OR REPLACE FUNCTION @extschema@.webhook_add_secret(provider text, secret text)
RETURNS text
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
RETURN webhook._add_secret('webhook_add_secret', provider, secret);
COMMENT ON FUNCTION @extschema@.webhook_add_secret(text, text) IS
    'Add a signing secret to a provider (several may be active while rotating); returns its fingerprint';

-- Supabase's Auth hooks other than Send Email name their hook in
-- metadata.name: providers registered with the earlier default take it.
UPDATE webhook.providers
   SET event_type_from = 'body:type|body:email_data.email_action_type|body:metadata.name'
 WHERE scheme = 'supabase' AND event_type_from = 'body:type|body:email_data.email_action_type';

-- Shopify's deliveries without X-Shopify-Event-Id, and its Events
-- deliveries (headers without the X-), under the scheme's defaults now:
-- the same id wherever the earlier default found one.
UPDATE webhook.providers
   SET event_id_from = 'header:X-Shopify-Event-Id|header:Shopify-Event-Id|header:X-Shopify-Webhook-Id|header:Shopify-Webhook-Id'
 WHERE scheme = 'shopify' AND event_id_from = 'header:X-Shopify-Event-Id';
UPDATE webhook.providers
   SET event_type_from = 'header:X-Shopify-Topic|header:Shopify-Topic'
 WHERE scheme = 'shopify' AND event_type_from = 'header:X-Shopify-Topic';

-- The privilege rule (roles.sql) for what this script made.
SELECT webhook._restrict_privileges();


SELECT pg_catalog.set_config('search_path', '@extschema@, pg_temp', true);
