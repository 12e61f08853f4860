-- pg_webhook_inbox: metrics over time.
--
-- Nothing here runs on the path of a delivery. Claims, leases, completions
-- and failures already leave a time-ordered trace: the archive's ids and
-- the inbox's lease ids are UUIDv7/v8 (their first 48 bits are the
-- millisecond they were made), failures carry their time. A rollup reads
-- what was written since its last run, counts it per minute, provider and
-- consumer into webhook.metric_minutes (kept webhook.metrics_retention)
-- and into webhook.metric_totals (kept for good: Prometheus counters never
-- go down), and moves its marks. A counter row updated by each claim would
-- make every claim of a provider wait for the one before it; the rollup is
-- one writer, once a minute or once a scrape, whatever the traffic.
--
-- Exactness. A row is counted once its transaction has committed, and a
-- rolled-back claim or lease is never seen at all. The rollup counts only
-- up to a bound that no transaction still running can write below: the
-- start of the oldest transaction of this database that holds a
-- transaction id (it has written) or is running a statement (it may be
-- about to), and nothing past the previous bound while a prepared
-- transaction waits. Attempts that have begun but not finished (a claim
-- being handled, a lease being worked) are kept in webhook.metric_open and
-- looked at again by each rollup until they end.

-- Bound to pg_catalog while this file runs (see schema.sql).
SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);

CREATE TABLE webhook.metric_minutes (
    minute    timestamptz      NOT NULL,
    provider  text             NOT NULL,
    -- The inbox consumer; '' for claims, deliveries and rejections.
    consumer  text             NOT NULL,
    metric    text             NOT NULL,
    -- The status, the rejection reason, or a histogram bucket's upper
    -- bound; '' when the metric has none.
    label     text             NOT NULL,
    count     bigint           NOT NULL,
    -- Histograms: the sum of the observations (seconds, or attempts).
    sum       double precision NOT NULL DEFAULT 0,
    CONSTRAINT metric_minutes_pkey PRIMARY KEY (minute, provider, consumer, metric, label)
);
COMMENT ON TABLE webhook.metric_minutes IS
    'Metrics per minute, provider and consumer, kept webhook.metrics_retention: what happened in each minute (rolled up from the archive, the inbox and the failures)';
COMMENT ON COLUMN webhook.metric_minutes.minute IS 'The minute it happened in (a completion: when it completed)';
COMMENT ON COLUMN webhook.metric_minutes.provider IS 'Provider name';
COMMENT ON COLUMN webhook.metric_minutes.consumer IS 'The inbox consumer; empty for claims, deliveries and rejections';
COMMENT ON COLUMN webhook.metric_minutes.metric IS 'deliveries, rejections, completions, failures, dead_letters, latency, processing or attempts (see docs/observability.md)';
COMMENT ON COLUMN webhook.metric_minutes.label IS 'deliveries: the claim status; rejections: the reason; histograms: the upper bound of the bucket (seconds, attempts, or +Inf)';
COMMENT ON COLUMN webhook.metric_minutes.count IS 'How many';
COMMENT ON COLUMN webhook.metric_minutes.sum IS 'Histograms: the sum of the observations';

CREATE TABLE webhook.metric_totals (
    provider  text             NOT NULL,
    consumer  text             NOT NULL,
    metric    text             NOT NULL,
    label     text             NOT NULL,
    count     bigint           NOT NULL,
    sum       double precision NOT NULL DEFAULT 0,
    CONSTRAINT metric_totals_pkey PRIMARY KEY (provider, consumer, metric, label)
);
COMMENT ON TABLE webhook.metric_totals IS
    'Metrics since counting began, never pruned: the counters webhook_metrics() exports';
COMMENT ON COLUMN webhook.metric_totals.provider IS 'Provider name';
COMMENT ON COLUMN webhook.metric_totals.consumer IS 'The inbox consumer; empty for claims, deliveries and rejections';
COMMENT ON COLUMN webhook.metric_totals.metric IS 'As in webhook.metric_minutes';
COMMENT ON COLUMN webhook.metric_totals.label IS 'As in webhook.metric_minutes';
COMMENT ON COLUMN webhook.metric_totals.count IS 'How many, in all';
COMMENT ON COLUMN webhook.metric_totals.sum IS 'Histograms: the sum of all observations';

-- Where the last rollup stopped. One row.
CREATE TABLE webhook.metric_marks (
    only_row      boolean     NOT NULL DEFAULT true CONSTRAINT metric_marks_only_row_check CHECK (only_row),
    -- Everything written before this time is counted: deliveries and
    -- leases whose id was made before it, failures that happened before it.
    counted_until timestamptz NOT NULL,
    rolled_up_at  timestamptz,
    CONSTRAINT metric_marks_pkey PRIMARY KEY (only_row)
);
-- Counting starts with the extension (or the upgrade that brought it).
-- The row is not kept by pg_dump: a restored database counts from its
-- restore on, its restored archive counted already in the restored totals.
INSERT INTO webhook.metric_marks (counted_until) VALUES (pg_catalog.now());
COMMENT ON TABLE webhook.metric_marks IS 'Where the metrics rollup stopped: everything before counted_until is counted';
COMMENT ON COLUMN webhook.metric_marks.only_row IS 'Always true: the table has one row';
COMMENT ON COLUMN webhook.metric_marks.counted_until IS 'Deliveries and leases whose id was made before it, and failures before it, are counted';
COMMENT ON COLUMN webhook.metric_marks.rolled_up_at IS 'When the last rollup ran';

-- Attempts begun but not finished when a rollup looked: a claim still
-- processing, a lease still held. Each rollup looks at them again.
CREATE TABLE webhook.metric_open (
    -- The claim's delivery id, or the lease's id.
    id         uuid        NOT NULL,
    provider   text        NOT NULL,
    event_id   text        NOT NULL,
    -- '' for a claim; the consumer for a lease.
    consumer   text        NOT NULL,
    started_at timestamptz NOT NULL,
    CONSTRAINT metric_open_pkey PRIMARY KEY (id)
);
COMMENT ON TABLE webhook.metric_open IS 'Attempts the metrics rollup saw begun and not yet finished; looked at again by every rollup';
COMMENT ON COLUMN webhook.metric_open.id IS 'The claim''s delivery id, or the lease''s id';
COMMENT ON COLUMN webhook.metric_open.provider IS 'Provider name';
COMMENT ON COLUMN webhook.metric_open.event_id IS 'The event''s id';
COMMENT ON COLUMN webhook.metric_open.consumer IS 'Empty for a claim; the consumer for a lease';
COMMENT ON COLUMN webhook.metric_open.started_at IS 'When the attempt began';

-- Outcomes an operator took back before a rollup had counted them. The
-- rollup reads a lease's completion off its inbox row, and a dead letter
-- off the dead row or event its failure parked: a replay or a requeue
-- that puts the row back to work (its next lease rewrites it) would
-- otherwise take the count with it. webhook._metrics_hold writes them
-- here; the next rollup counts and deletes them.
CREATE TABLE webhook.metric_held (
    -- The lease (or, for a claim, the delivery) the outcome belongs to.
    id          uuid        NOT NULL,
    outcome     text        NOT NULL CONSTRAINT metric_held_outcome_check CHECK (outcome IN ('completion', 'dead_letter')),
    provider    text        NOT NULL,
    consumer    text        NOT NULL,
    -- When it completed, or when the failure that parked it happened.
    at          timestamptz NOT NULL,
    -- Completions: when the event was queued, when the lease began, and
    -- the attempts it took.
    received_at timestamptz,
    started_at  timestamptz,
    attempts    integer,
    CONSTRAINT metric_held_pkey PRIMARY KEY (id)
);
COMMENT ON TABLE webhook.metric_held IS 'Completions and dead letters a replay or requeue undid before the metrics rollup counted them; the next rollup counts them';
COMMENT ON COLUMN webhook.metric_held.id IS 'The lease (or claimed delivery) the outcome belongs to';
COMMENT ON COLUMN webhook.metric_held.outcome IS 'completion or dead_letter';
COMMENT ON COLUMN webhook.metric_held.provider IS 'Provider name';
COMMENT ON COLUMN webhook.metric_held.consumer IS 'The inbox consumer; empty for a claim';
COMMENT ON COLUMN webhook.metric_held.at IS 'When it completed, or when the failure that parked it happened';
COMMENT ON COLUMN webhook.metric_held.received_at IS 'Completions: when the event was queued';
COMMENT ON COLUMN webhook.metric_held.started_at IS 'Completions: when the lease began';
COMMENT ON COLUMN webhook.metric_held.attempts IS 'Completions: the attempts the event took';

-- Before a replay or a requeue puts finished attempts back to work: keep
-- what no rollup has counted of them. `ids` are inbox leases (completed,
-- or failed and parked) or claimed deliveries whose failure parked their
-- event. Counted already is an outcome whose attempt a rollup saw
-- finished: a completion whose lease is below the marks and no longer
-- open, a failure before the marks. The marks are read under a share
-- lock taken first, in a statement of its own: a rollup running now
-- finishes before this looks, and the next one waits for this
-- transaction, so each outcome is counted by exactly one of the two.
CREATE FUNCTION webhook._metrics_hold(outcome text, ids uuid[]) RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    since timestamptz;
BEGIN
    SELECT m.counted_until INTO since FROM webhook.metric_marks m FOR SHARE;
    IF since IS NULL THEN
        RETURN;  -- counting starts again from the next rollup
    END IF;
    IF outcome = 'completion' THEN
        INSERT INTO webhook.metric_held (id, outcome, provider, consumer, at, received_at, started_at, attempts)
        SELECT i.claim_id, 'completion', i.provider, i.consumer, i.processed_at, i.queued_at,
               webhook._id_time(i.claim_id), i.attempts
          FROM webhook.inbox i
         WHERE i.claim_id = ANY (ids) AND i.status = 'processed'
           AND (i.claim_id >= webhook._archive_bound(since)
                OR EXISTS (SELECT FROM webhook.metric_open o WHERE o.id = i.claim_id))
        ON CONFLICT (id) DO NOTHING;
    ELSE
        INSERT INTO webhook.metric_held (id, outcome, provider, consumer, at)
        SELECT f.claim_id, 'dead_letter', f.provider, f.consumer, f.failed_at
          FROM webhook.inbox_failures f
         WHERE f.claim_id = ANY (ids) AND f.failed_at >= since
        UNION ALL
        SELECT f.delivery_id, 'dead_letter', l.provider, '', f.failed_at
          FROM webhook.delivery_failures f
          JOIN webhook.delivery_log l ON l.id = f.delivery_id
         WHERE f.delivery_id = ANY (ids) AND f.failed_at >= since
        ON CONFLICT (id) DO NOTHING;
    END IF;
END
$$;
COMMENT ON FUNCTION webhook._metrics_hold(text, uuid[]) IS
    'Internal: before a replay or requeue, keep the completions or dead letters of these attempts that no rollup has counted yet (webhook.metric_held)';

-- The histograms' buckets (inlined, like webhook._id_time): fixed, so
-- that Prometheus (histogram_quantile) and SQL (webhook_metric_quantile)
-- compute quantiles from the same counts.
CREATE FUNCTION webhook._metric_buckets(metric text) RETURNS double precision[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
SELECT CASE metric
       -- From receipt to processed: sub-second for a handler, hours for
       -- an event retried or backed off.
       WHEN 'latency' THEN '{0.01,0.05,0.1,0.25,0.5,1,2.5,5,10,30,60,300,900,3600,21600,86400,Infinity}'::float8[]
       -- One attempt, from its claim or lease to its end.
       WHEN 'processing' THEN '{0.005,0.01,0.025,0.05,0.1,0.25,0.5,1,2.5,5,10,30,60,300,Infinity}'::float8[]
       WHEN 'attempts' THEN '{1,2,3,4,5,10,25,Infinity}'::float8[]
       END
$$;
COMMENT ON FUNCTION webhook._metric_buckets(text) IS 'Internal: the upper bounds of a histogram''s buckets';

-- The bucket of a histogram an observation falls in, by its index in
-- webhook._metric_buckets: the first bound at least as large
-- (width_bucket counts the bounds at most as large, and an observation on
-- a bound belongs to it). Inlined, the metric a constant: the bounds are
-- folded into the plan.
CREATE FUNCTION webhook._metric_bucket(metric text, value double precision) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
SELECT pg_catalog.width_bucket(value, webhook._metric_buckets(metric))
       + CASE WHEN (webhook._metric_buckets(metric))[pg_catalog.width_bucket(value, webhook._metric_buckets(metric))]
                   OPERATOR(pg_catalog.=) value
              THEN 0 ELSE 1 END
$$;
COMMENT ON FUNCTION webhook._metric_bucket(text, double precision) IS
    'Internal: the index of the histogram bucket a value falls in';

-- A bucket's label, Prometheus's `le`: its upper bound.
CREATE FUNCTION webhook._metric_bucket_label(metric text, bucket integer) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
SELECT CASE WHEN (webhook._metric_buckets(metric))[bucket] OPERATOR(pg_catalog.=) 'Infinity' THEN '+Inf'
            ELSE ((webhook._metric_buckets(metric))[bucket])::text END
$$;
COMMENT ON FUNCTION webhook._metric_bucket_label(text, integer) IS
    'Internal: the label (upper bound) of a histogram bucket';

-- The provider a series, an alert or the console's overview names: the
-- provider itself where it is registered or already has series of its
-- own, (other) for a name no registered provider owns that the rollup
-- counted there (webhook.metrics_unregistered_providers). webhook_claim
-- and webhook_enqueue take any name an application passes; the metrics
-- must not grow with every name invented.
CREATE FUNCTION webhook._metric_provider(provider text) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT CASE WHEN _metric_provider.provider IN ('', '(other)')
                 OR EXISTS (SELECT FROM webhook.providers p WHERE p.name = _metric_provider.provider)
                 OR EXISTS (SELECT FROM webhook.metric_totals t WHERE t.provider = _metric_provider.provider)
            THEN _metric_provider.provider ELSE '(other)' END
$$;
COMMENT ON FUNCTION webhook._metric_provider(text) IS
    'Internal: the provider label metrics and alerts use for a name: itself when registered or already counted, else (other)';

-- Add counts to webhook.metric_minutes and webhook.metric_totals. `counts`
-- is a query of (minute, provider, consumer, metric, label, count, sum),
-- aggregated as far as it could be: per delivery nothing but a few
-- hash-table updates, then a row per group. It reads `ctes`, common table
-- expressions some of which delete or insert (they run in the same
-- snapshot as it), and $1 to $4: the marks as ids, then as times.
CREATE FUNCTION webhook._metrics_add(ctes text, counts text, lower_bound timestamptz, upper_bound timestamptz)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
-- The planner cannot know how many rows a range of new ids holds (the
-- statistics predate them) and would sort tens of thousands of rows to
-- group them into a handful: hashing is what grouping them costs least.
-- What little must still be sorted (the unregistered names, in order)
-- then looks dear to the planner: JIT would spend most of a second
-- compiling a statement that runs in milliseconds.
SET enable_sort = off
SET jit = off
AS $$
DECLARE
    added bigint;
BEGIN
    EXECUTE 'WITH ' || coalesce(ctes || ', ', '') || 'uncapped AS (' || counts || '),
        -- Names no registered provider owns, with no series yet: in name
        -- order, those past webhook.metrics_unregistered_providers are
        -- counted as (other).
        newcomers AS (
            SELECT n.provider, pg_catalog.row_number() OVER (ORDER BY n.provider) AS k
              FROM (SELECT DISTINCT u.provider FROM uncapped u) n
             WHERE webhook._metric_provider(n.provider) = ''(other)''
        ), room AS (
            SELECT GREATEST(coalesce(pg_catalog.current_setting(''webhook.metrics_unregistered_providers'', true), ''100'')::integer
                            - (SELECT pg_catalog.count(DISTINCT t.provider) FROM webhook.metric_totals t
                                WHERE t.provider <> ''(other)''
                                  AND NOT EXISTS (SELECT FROM webhook.providers p WHERE p.name = t.provider)), 0) AS n
        ), counted AS (
            SELECT u.minute, CASE WHEN w.k > r.n THEN ''(other)'' ELSE u.provider END AS provider,
                   u.consumer, u.metric, u.label, u.count, u.sum
              FROM uncapped u CROSS JOIN room r LEFT JOIN newcomers w ON w.provider = u.provider
        ),
        minutes AS (
            INSERT INTO webhook.metric_minutes AS m (minute, provider, consumer, metric, label, count, sum)
            SELECT minute, provider, consumer, metric, label, sum(count), sum(sum)
              FROM counted
             GROUP BY 1, 2, 3, 4, 5
            ON CONFLICT (minute, provider, consumer, metric, label)
            DO UPDATE SET count = m.count + excluded.count, sum = m.sum + excluded.sum
        ), totals AS (
            INSERT INTO webhook.metric_totals AS t (provider, consumer, metric, label, count, sum)
            SELECT provider, consumer, metric, label, sum(count), sum(sum)
              FROM counted
             GROUP BY 1, 2, 3, 4
            ON CONFLICT (provider, consumer, metric, label)
            DO UPDATE SET count = t.count + excluded.count, sum = t.sum + excluded.sum
        )
        SELECT coalesce(sum(count), 0)::bigint FROM counted'
      INTO added
      USING webhook._archive_bound(lower_bound), webhook._archive_bound(upper_bound), lower_bound, upper_bound;
    RETURN added;
END
$$;
COMMENT ON FUNCTION webhook._metrics_add(text, text, timestamptz, timestamptz) IS
    'Internal: add aggregated counts (minute, provider, consumer, metric, label, count, sum) to webhook.metric_minutes and webhook.metric_totals';

-- The minute of a time, the same in every time zone (and without the
-- time zone lookup per row that date_trunc makes).
CREATE FUNCTION webhook._minute(at timestamptz) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
SELECT pg_catalog.date_bin('1 minute', at, '2000-01-01 00:00:00+00')
$$;
COMMENT ON FUNCTION webhook._minute(timestamptz) IS 'Internal: the minute a time falls in';

-- What finished attempts add: completions, latency from receipt, their
-- own duration, and the attempts their event took. Reads `done` (at,
-- provider, consumer, received_at, started_at, attempts): grouped by
-- minute and the three buckets, then one row per metric and group.
CREATE FUNCTION webhook._completion_counts() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT $q$SELECT g.minute, g.provider, g.consumer, o.metric, o.label, g.n AS count, o.sum
          FROM (SELECT webhook._minute(d.at) AS minute, d.provider, d.consumer,
                       webhook._metric_bucket('latency', d.latency) AS latency_bucket,
                       webhook._metric_bucket('processing', d.processing) AS processing_bucket,
                       webhook._metric_bucket('attempts', d.attempts) AS attempts_bucket,
                       count(*) AS n, sum(d.latency) AS latency, sum(d.processing) AS processing,
                       sum(d.attempts) AS attempts
                  FROM (SELECT d.at, d.provider, d.consumer, d.attempts::float8 AS attempts,
                               GREATEST(pg_catalog.date_part('epoch', d.at - d.received_at), 0) AS latency,
                               GREATEST(pg_catalog.date_part('epoch', d.at - d.started_at), 0) AS processing
                          FROM done d) d
                 GROUP BY 1, 2, 3, 4, 5, 6) g
         CROSS JOIN LATERAL (VALUES
               ('completions', '', 0::float8),
               ('latency', webhook._metric_bucket_label('latency', g.latency_bucket), g.latency),
               ('processing', webhook._metric_bucket_label('processing', g.processing_bucket), g.processing),
               ('attempts', webhook._metric_bucket_label('attempts', g.attempts_bucket), g.attempts)
               ) AS o (metric, label, sum)$q$
$$;
COMMENT ON FUNCTION webhook._completion_counts() IS 'Internal: the counts of finished attempts, for webhook._metrics_add';

-- What failed attempts add: failures, their duration, and dead letters
-- where they parked their event. Reads `failed` (at, provider, consumer,
-- started_at, parked).
CREATE FUNCTION webhook._failure_counts() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT $q$SELECT g.minute, g.provider, g.consumer, o.metric, o.label, o.count, o.sum
          FROM (SELECT webhook._minute(f.at) AS minute, f.provider, f.consumer,
                       webhook._metric_bucket('processing', f.processing) AS processing_bucket,
                       count(*) AS n, count(*) FILTER (WHERE f.parked) AS parked, sum(f.processing) AS processing
                  FROM (SELECT f.at, f.provider, f.consumer, f.parked,
                               GREATEST(pg_catalog.date_part('epoch', f.at - f.started_at), 0) AS processing
                          FROM failed f) f
                 GROUP BY 1, 2, 3, 4) g
         CROSS JOIN LATERAL (VALUES
               ('failures', '', g.n, 0::float8),
               ('processing', webhook._metric_bucket_label('processing', g.processing_bucket), g.n, g.processing),
               ('dead_letters', '', g.parked, 0::float8)
               ) AS o (metric, label, count, sum)
         WHERE o.count > 0$q$
$$;
COMMENT ON FUNCTION webhook._failure_counts() IS 'Internal: the counts of failed attempts, for webhook._metrics_add';

-- Roll up everything written since the last run. Cheap when nothing
-- happened; safe to call from many sessions (one rolls up, the others
-- return at once). webhook_metrics() and webhook_alerts_evaluate() call it.
CREATE FUNCTION @extschema@.webhook_metrics_rollup()
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
COMMENT ON FUNCTION @extschema@.webhook_metrics_rollup() IS
    'Count what was written since the last rollup into webhook.metric_minutes and webhook.metric_totals; returns the observations added (0 when another session is rolling up)';

-- The metric families webhook_metrics() exports: Prometheus name, type,
-- and what it says.
CREATE FUNCTION webhook._metric_families()
RETURNS TABLE (family text, kind text, help text)
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
VALUES
    ('webhook_deliveries_total', 'counter', 'Deliveries received, by what they were answered (claimed and queued: new events; duplicate; retry; in_progress; dead; rejected; stale; handshake; filtered)'),
    ('webhook_rejections_total', 'counter', 'Deliveries refused before claiming, by reason'),
    ('webhook_completions_total', 'counter', 'Attempts completed (webhook_complete), per consumer for the inbox'),
    ('webhook_failures_total', 'counter', 'Attempts failed (webhook_fail, or a lease that ran out)'),
    ('webhook_dead_letters_total', 'counter', 'Events parked as dead by a failed attempt'),
    ('webhook_latency_seconds', 'histogram', 'From the first delivery of an event to its completion'),
    ('webhook_processing_seconds', 'histogram', 'One attempt, from its claim or lease to its completion or failure'),
    ('webhook_attempts', 'histogram', 'Attempts an event took, counted at its completion'),
    ('webhook_inbox_events', 'gauge', 'Inbox events per consumer by state: ready, scheduled (backing off), leased, dead, quarantined'),
    ('webhook_inbox_oldest_ready_seconds', 'gauge', 'Age of the oldest ready inbox event per consumer (a backing-off event is not ready)'),
    ('webhook_oldest_unfinished_claim_seconds', 'gauge', 'Age of the oldest claim neither completed nor failed'),
    ('webhook_steering_paused', 'gauge', 'Pauses and quarantines in effect, by provider and consumer (empty: every one) and kind (pause, quarantine)'),
    ('webhook_circuit_breaker_open', 'gauge', '1 per circuit breaker open or half open, by consumer and provider (empty: every one) and state'),
    ('webhook_alerts_open', 'gauge', 'Alerts open or acknowledged, by rule'),
    ('webhook_metrics_lag_seconds', 'gauge', 'How far behind the clock the counters are (the oldest running writing transaction holds them back)')
$$;
COMMENT ON FUNCTION webhook._metric_families() IS 'Internal: the metric families webhook_metrics() exports, with their type and help';

-- Every metric now, one row per series: the counters and histograms since
-- counting began, and the gauges read at once; or only one family's
-- series (an exporter's query each: the gauges that count the inbox are
-- then counted once a scrape, not once a query). Rolls up first, unless a
-- rollup ran in the last second (the other queries of the same scrape).
-- Labels are bounded: provider, consumer, and one of status, reason, le,
-- state, rule.
CREATE FUNCTION @extschema@.webhook_metrics(family text DEFAULT NULL)
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
COMMENT ON FUNCTION @extschema@.webhook_metrics(text) IS
    'Every metric now, one row per series (counters since counting began, histogram buckets cumulative, gauges read at once), or only one family''s; rolls up first unless a rollup ran in the last second';

CREATE FUNCTION webhook._prometheus_escape(value text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT pg_catalog.replace(pg_catalog.replace(pg_catalog.replace(value, '\', '\\'), '"', '\"'), E'\n', '\n')
$$;
COMMENT ON FUNCTION webhook._prometheus_escape(text) IS 'Internal: a label value escaped for the Prometheus text format';

-- The same in the Prometheus text exposition format (version 0.0.4), for
-- an exporter or a scrape endpoint to pass through as it is.
CREATE FUNCTION @extschema@.webhook_metrics_prometheus()
RETURNS text
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
WITH m AS (SELECT * FROM @extschema@.webhook_metrics()),
     lines AS (
        SELECT f.family, 0 AS part, NULL::text AS metric, NULL::text AS labels, NULL::float8 AS bound,
               '# HELP ' || f.family || ' ' || f.help || E'\n# TYPE ' || f.family || ' ' || f.kind AS line
          FROM webhook._metric_families() f
        UNION ALL
        SELECT f.family, 1, m.metric, m.provider || ',' || m.consumer,
               CASE WHEN m.label = 'le' THEN pg_catalog.replace(m.label_value, '+Inf', 'Infinity')::float8 END,
               m.metric || '{' || pg_catalog.concat_ws(',',
                   CASE WHEN m.provider <> '' THEN 'provider="' || webhook._prometheus_escape(m.provider) || '"' END,
                   CASE WHEN m.consumer <> '' THEN 'consumer="' || webhook._prometheus_escape(m.consumer) || '"' END,
                   CASE WHEN m.label IS NOT NULL THEN m.label || '="' || webhook._prometheus_escape(m.label_value) || '"' END)
               || '} ' || CASE WHEN m.value = 'Infinity' THEN '+Inf' ELSE m.value::text END
          FROM m JOIN webhook._metric_families() f
            ON m.metric = f.family OR (f.kind = 'histogram' AND m.metric IN (f.family || '_bucket', f.family || '_sum', f.family || '_count')))
SELECT pg_catalog.string_agg(line, E'\n' ORDER BY family, part, metric, labels, bound, line) || E'\n' FROM lines
$$;
COMMENT ON FUNCTION @extschema@.webhook_metrics_prometheus() IS
    'webhook_metrics() in the Prometheus text exposition format';

-- A quantile of a histogram over a period, from the per-minute counts,
-- interpolated within its bucket the way Prometheus's histogram_quantile
-- does. NULL when nothing was observed.
CREATE FUNCTION @extschema@.webhook_metric_quantile(
    quantile double precision,
    metric   text,
    since    timestamptz DEFAULT pg_catalog.now() - interval '1 hour',
    provider text DEFAULT NULL,
    consumer text DEFAULT NULL)
RETURNS double precision
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    bounds float8[] := webhook._metric_buckets(webhook_metric_quantile.metric);
    total  float8;
    rank   float8;
    below  float8 := 0;
    lower  float8 := 0;
    upper  float8;
    n      float8;
BEGIN
    IF webhook_metric_quantile.quantile IS NULL OR webhook_metric_quantile.quantile < 0 OR webhook_metric_quantile.quantile > 1 THEN
        RAISE EXCEPTION 'webhook_metric_quantile: argument "quantile" must be between 0 and 1' USING ERRCODE = '22023';
    END IF;
    IF bounds IS NULL THEN
        RAISE EXCEPTION 'webhook_metric_quantile: argument "metric" must be latency, processing or attempts, not %',
            coalesce(pg_catalog.quote_literal(webhook_metric_quantile.metric), 'NULL') USING ERRCODE = '22023';
    END IF;
    SELECT sum(m.count) INTO total
      FROM webhook.metric_minutes m
     WHERE m.metric = webhook_metric_quantile.metric AND m.minute >= pg_catalog.date_trunc('minute', since)
       AND (webhook_metric_quantile.provider IS NULL OR m.provider = webhook_metric_quantile.provider)
       AND (webhook_metric_quantile.consumer IS NULL OR m.consumer = webhook_metric_quantile.consumer);
    IF total IS NULL OR total = 0 THEN
        RETURN NULL;
    END IF;
    rank := webhook_metric_quantile.quantile * total;
    FOREACH upper IN ARRAY bounds LOOP
        SELECT coalesce(sum(m.count), 0) INTO n
          FROM webhook.metric_minutes m
         WHERE m.metric = webhook_metric_quantile.metric AND m.minute >= pg_catalog.date_trunc('minute', since)
           AND m.label = CASE WHEN upper = 'Infinity' THEN '+Inf' ELSE upper::text END
           AND (webhook_metric_quantile.provider IS NULL OR m.provider = webhook_metric_quantile.provider)
           AND (webhook_metric_quantile.consumer IS NULL OR m.consumer = webhook_metric_quantile.consumer);
        IF below + n >= rank AND n > 0 THEN
            -- As Prometheus: the highest finite bound for the last bucket.
            IF upper = 'Infinity' THEN
                RETURN lower;
            END IF;
            RETURN lower + (upper - lower) * (rank - below) / n;
        END IF;
        below := below + n;
        IF upper <> 'Infinity' THEN
            lower := upper;
        END IF;
    END LOOP;
    RETURN lower;
END
$$;
COMMENT ON FUNCTION @extschema@.webhook_metric_quantile(double precision, text, timestamptz, text, text) IS
    'A quantile (0 to 1) of latency, processing or attempts since a time, from the per-minute histograms, interpolated as Prometheus''s histogram_quantile does';
