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

-- The privilege rule (roles.sql) for what this script made.
SELECT webhook._restrict_privileges();


SELECT pg_catalog.set_config('search_path', '@extschema@, pg_temp', true);
