-- pg_webhook_inbox: what operators look at (views), and the maintenance
-- they run (webhook_purge; webhook_requeue is written in Rust).

-- Bound to pg_catalog while this file runs (see schema.sql).
SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);

-- Deliveries whose processing failed in the last day.
CREATE VIEW webhook.recent_failures AS
SELECT l.id, l.provider, l.event_id, l.event_type, l.claim_status, f.error_message,
       l.created_at, f.failed_at, e.status AS event_status, e.attempts
  FROM webhook.delivery_failures f
  JOIN webhook.delivery_log l ON l.id = f.delivery_id
  LEFT JOIN webhook.events e ON e.provider = l.provider AND e.event_id = l.event_id
 WHERE f.failed_at > pg_catalog.now() - interval '1 day';
COMMENT ON VIEW webhook.recent_failures IS 'Deliveries whose processing failed in the last day, with their event''s status';

-- Claims that committed, were never finished, and whose lease has run out:
-- their worker is gone or stuck. The next delivery will retry them.
CREATE VIEW webhook.stuck_claims AS
SELECT provider, event_id, event_type, attempts, claim_id, first_seen_at, lease_expires_at,
       pg_catalog.clock_timestamp() - lease_expires_at AS overdue
  FROM webhook.events
 WHERE status = 'processing' AND lease_expires_at < pg_catalog.clock_timestamp();
COMMENT ON VIEW webhook.stuck_claims IS 'Claims committed but never finished whose lease has run out: the next delivery retries them';

-- Deliveries webhook_receive refused: forgeries, replays, stale or
-- misconfigured secrets, bodies that are not JSON, missing event ids.
CREATE VIEW webhook.rejected_deliveries AS
-- raw_body holds only the first webhook.rejected_body_limit bytes of each.
SELECT id, provider, reject_reason AS reason, event_id, signature, headers,
       coalesce(body_size, pg_catalog.octet_length(raw_body)) AS body_bytes, created_at,
       body_sha256, raw_body AS body_prefix
  FROM webhook.delivery_log
 WHERE claim_status = 'rejected';
COMMENT ON VIEW webhook.rejected_deliveries IS 'Deliveries webhook_receive refused: forged, replayed, stale, misconfigured or unreadable';

-- Events that failed webhook.max_attempts times (or for good) and wait for
-- an operator: claimed events, and each inbox consumer's dead events.
CREATE VIEW webhook.dead_letters AS
SELECT provider, event_id, event_type, attempts, requeues, last_error, first_seen_at, claim_id,
       NULL::text AS consumer
  FROM webhook.events
 WHERE status = 'dead'
UNION ALL
SELECT provider, event_id, event_type, attempts, requeues, last_error, queued_at, claim_id, consumer
  FROM webhook.inbox
 WHERE status = 'dead';
COMMENT ON VIEW webhook.dead_letters IS 'Events that failed webhook.max_attempts times, claimed or queued (consumer), waiting for webhook_requeue';

-- The inbox per provider and consumer: ready now (a lease that ran out
-- makes its event ready again), scheduled (backing off), leased, dead, and
-- how long the longest-waiting ready event has been ready.
CREATE VIEW webhook.inbox_stats AS
SELECT provider, consumer,
       count(*) FILTER (WHERE status IN ('ready', 'leased') AND run_at <= now) AS ready,
       count(*) FILTER (WHERE status = 'ready' AND run_at > now AND run_at <> 'infinity') AS scheduled,
       count(*) FILTER (WHERE status = 'leased' AND run_at > now) AS leased,
       count(*) FILTER (WHERE status = 'dead') AS dead,
       max(now - run_at) FILTER (WHERE status IN ('ready', 'leased') AND run_at <= now)
           AS oldest_ready_age,
       -- Set aside by a quarantine of their entity (webhook_quarantine).
       count(*) FILTER (WHERE status = 'ready' AND run_at = 'infinity') AS quarantined
  FROM (SELECT provider, consumer, status, run_at FROM webhook.inbox
         WHERE status IN ('ready', 'leased')
        UNION ALL
        SELECT provider, consumer, status, run_at FROM webhook.inbox
         WHERE status = 'dead') AS i,
       pg_catalog.clock_timestamp() AS now
 GROUP BY provider, consumer;
COMMENT ON VIEW webhook.inbox_stats IS
    'The inbox per provider and consumer: ready, scheduled (backing off), leased, dead, the age of the oldest ready event, and quarantined (set aside with their entity)';

-- Redeliveries whose payload differs from the first delivery of the same
-- event: a forgery that got hold of a secret, a provider bug, or two
-- senders sharing one provider name.
CREATE VIEW webhook.payload_mismatches AS
SELECT l.id, l.provider, l.event_id, l.event_type, l.claim_status, l.payload, l.created_at
  FROM webhook.delivery_log l
 WHERE l.payload_mismatch;
COMMENT ON VIEW webhook.payload_mismatches IS 'Redeliveries whose payload differs from the first delivery of the same event';

-- Per provider: events by status, retries spent, last activity. An inbox
-- event's own row only says it was queued; where it stands is its
-- consumers' rows: processed once every consumer has processed it (or
-- skipped it as stale, or filtered it out), stale when every consumer
-- skipped it, filtered when every consumer's filter (or the provider's)
-- left it out, dead when one parked it, queued while any is still to do. Retries count the
-- consumers' attempts too.
CREATE VIEW webhook.provider_stats AS
SELECT e.provider,
       count(*) AS events,
       count(*) FILTER (WHERE s.status = 'processed')  AS processed,
       count(*) FILTER (WHERE s.status = 'processing') AS processing,
       count(*) FILTER (WHERE s.status = 'failed')     AS failed,
       count(*) FILTER (WHERE s.status = 'dead')       AS dead,
       coalesce(sum(s.retries), 0)::bigint AS retries,
       max(e.first_seen_at) AS last_event_at,
       count(*) FILTER (WHERE s.status = 'stale')      AS stale,
       count(*) FILTER (WHERE s.status = 'queued')     AS queued,
       count(*) FILTER (WHERE s.status = 'filtered')   AS filtered
  FROM webhook.events e
  LEFT JOIN LATERAL (
       SELECT CASE WHEN pg_catalog.bool_and(i.status = 'stale') THEN 'stale'
                   WHEN pg_catalog.bool_and(i.status::text = 'filtered') THEN 'filtered'
                   WHEN pg_catalog.bool_and(i.status::text IN ('processed', 'stale', 'filtered')) THEN 'processed'
                   WHEN pg_catalog.bool_or(i.status = 'dead') THEN 'dead'
                   ELSE 'queued'
              END AS status,
              pg_catalog.sum(GREATEST(i.attempts - 1, 0)) AS retries
         FROM webhook.inbox i
        WHERE e.status = 'queued' AND i.delivery_id = e.claim_id
          AND i.provider = e.provider AND i.event_id = e.event_id
       ) q ON true
 CROSS JOIN LATERAL (
       SELECT CASE WHEN e.status = 'queued' THEN coalesce(q.status, 'queued') ELSE e.status::text END AS status,
              CASE WHEN e.status = 'queued' THEN coalesce(q.retries, 0) ELSE GREATEST(e.attempts - 1, 0) END AS retries
       ) s
 GROUP BY e.provider;
COMMENT ON VIEW webhook.provider_stats IS 'Per provider: events by status (inbox events by their consumers: processed by all, stale, filtered by all, dead, or still queued), retries spent, last event';

-- The archive's partitions, oldest first: each day's, the default one
-- (no bounds), and after an upgrade from a release before partitioning,
-- the one holding everything archived before it (no lower bound).
CREATE VIEW webhook.archive_partitions AS
SELECT c.oid::pg_catalog.regclass AS partition,
       b.lower_id IS NULL AND b.upper_id IS NULL AS is_default,
       b.lower_id, b.upper_id,
       webhook._id_time(b.lower_id) AS from_time,
       webhook._id_time(b.upper_id) AS to_time,
       GREATEST(c.reltuples, 0)::bigint AS rows_estimate,
       pg_catalog.pg_total_relation_size(c.oid) AS total_bytes
  FROM pg_catalog.pg_inherits i
  JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
 CROSS JOIN LATERAL (
       SELECT m[1]::uuid AS lower_id, m[2]::uuid AS upper_id
         FROM pg_catalog.regexp_match(pg_catalog.pg_get_expr(c.relpartbound, c.oid),
                                      'FROM \((?:''([0-9a-f-]+)''|MINVALUE)\) TO \((?:''([0-9a-f-]+)''|MAXVALUE)\)') AS m
       ) AS b
 WHERE i.inhparent = 'webhook.delivery_log'::pg_catalog.regclass
 ORDER BY b.upper_id NULLS LAST;
COMMENT ON VIEW webhook.archive_partitions IS
    'The partitions of webhook.delivery_log: the ids and times each covers (none: the default partition), rows (estimated) and size';

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

-- How long maintenance waits for a lock on the archive: the setting
-- webhook.maintenance_lock_timeout, or its default when the extension's
-- library is not loaded in this session yet.
CREATE FUNCTION webhook._maintenance_lock_timeout() RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
RETURN COALESCE(webhook._protected_setting('webhook.maintenance_lock_timeout'), '200ms');
COMMENT ON FUNCTION webhook._maintenance_lock_timeout() IS
    'Internal: how long webhook_purge and webhook_create_partitions wait for a lock on the archive';

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

-- Create the archive's partition for one day (UTC), unless a partition
-- covers part of it already, or some of its deliveries are in the default
-- partition (no partition was there when they came): they stay there.
-- The partition is made apart and then attached, which lets claims go on
-- meanwhile. Returns whether it created it.
-- Whether the archive's partition for one day (UTC) may be made: no
-- partition covers part of it, and none of its deliveries is in the
-- default partition.
CREATE FUNCTION webhook._archive_day_free(day date) RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT NOT EXISTS (SELECT FROM webhook.archive_partitions p
                    WHERE NOT p.is_default
                      AND (p.lower_id IS NULL OR p.lower_id < webhook._archive_bound(((day + 1)::timestamp) AT TIME ZONE 'UTC'))
                      AND p.upper_id > webhook._archive_bound((day::timestamp) AT TIME ZONE 'UTC'))
   AND NOT EXISTS (SELECT FROM webhook.delivery_log_default d
                    WHERE d.id >= webhook._archive_bound((day::timestamp) AT TIME ZONE 'UTC')
                      AND d.id < webhook._archive_bound(((day + 1)::timestamp) AT TIME ZONE 'UTC'))
$$;
COMMENT ON FUNCTION webhook._archive_day_free(date) IS
    'Internal: whether the archive''s partition for a day (UTC) may be made: nothing of that day is in another partition';

CREATE FUNCTION webhook._create_archive_partition(day date) RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    lo   uuid := webhook._archive_bound((day::timestamp) AT TIME ZONE 'UTC');
    hi   uuid := webhook._archive_bound(((day + 1)::timestamp) AT TIME ZONE 'UTC');
    name text := 'delivery_log_' || pg_catalog.to_char(day, 'YYYYMMDD');
    lock_timeout_before text := pg_catalog.current_setting('lock_timeout');
BEGIN
    IF NOT webhook._archive_day_free(day) THEN
        RETURN false;
    END IF;
    EXECUTE pg_catalog.format(
        'CREATE TABLE webhook.%I (LIKE webhook.delivery_log INCLUDING DEFAULTS INCLUDING STORAGE INCLUDING COMPRESSION)',
        name);
    PERFORM webhook._prepare_archive_partition(pg_catalog.format('webhook.%I', name)::pg_catalog.regclass);
    -- Attaching locks the default partition while it is checked: wait
    -- for that lock only briefly, since every delivery landing in the
    -- default partition queues behind the waiting attach.
    PERFORM pg_catalog.set_config('lock_timeout', webhook._maintenance_lock_timeout(), true);
    EXECUTE pg_catalog.format('ALTER TABLE webhook.delivery_log ATTACH PARTITION webhook.%I FOR VALUES FROM (%L) TO (%L)',
                              name, lo, hi);
    PERFORM pg_catalog.set_config('lock_timeout', lock_timeout_before, true);
    RETURN true;
EXCEPTION
    WHEN check_violation THEN
        -- A delivery of that day reached the default partition after the
        -- check above: the day stays there.
        RETURN false;
    WHEN lock_not_available THEN
        -- Someone holds the archive (a report, a dump): nothing was made;
        -- the next run makes the day.
        RAISE WARNING 'webhook_create_partitions: the archive''s partition for % was not created: the archive is in use',
            day
            USING DETAIL = pg_catalog.format('Its lock was not granted within webhook.maintenance_lock_timeout (%s).',
                                             webhook._maintenance_lock_timeout()),
                  HINT = 'Run webhook_create_partitions() again later; deliveries of that day go to the default partition meanwhile.';
        RETURN false;
END
$$;
COMMENT ON FUNCTION webhook._create_archive_partition(date) IS
    'Internal: create and attach the archive''s partition for one day (UTC), if nothing of that day is elsewhere';

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
CREATE FUNCTION @extschema@.webhook_create_partitions(days_ahead integer DEFAULT 7)
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
COMMENT ON FUNCTION @extschema@.webhook_create_partitions(integer) IS
    'Create the archive''s daily partitions (UTC) for today and the next days_ahead days; returns how many it created. Schedule it daily';

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
CREATE FUNCTION @extschema@.webhook_purge(
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
COMMENT ON FUNCTION @extschema@.webhook_purge(interval, integer, integer) IS
    'Remove archive rows older than older_than whose event is processed by everyone (and rejections): whole days by dropping their partition, the rest row by row; and old processed inbox rows. Never touches webhook.events. Returns the archive rows removed';

-- Ordering in the inbox: entities whose line of events is held up, and
-- why. The head (the earliest unfinished event) is leased, its lease ran
-- out and it waits to be leased again, or it failed and backs off;
-- `waiting` events of the entity queue behind it. Only providers
-- registered with fifo hold events back.
CREATE VIEW webhook.blocked_entities AS
SELECT i.provider, i.consumer, i.entity_key,
       i.event_id AS head_event_id, i.order_value AS head_order_value,
       CASE WHEN i.status = 'leased' AND i.run_at > now THEN 'leased'
            WHEN i.status = 'leased' THEN 'lease_expired'
            ELSE 'backing_off'
       END AS reason,
       i.run_at AS until, i.attempts, i.last_error,
       (SELECT count(*) FROM webhook.inbox j
         WHERE j.provider = i.provider AND j.consumer = i.consumer AND j.entity_key = i.entity_key
           AND j.status IN ('ready', 'leased')
           AND (j.order_value, j.queued_at, j.event_id) > (i.order_value, i.queued_at, i.event_id)) AS waiting
  FROM webhook.inbox i
  JOIN webhook.providers p ON p.name = i.provider AND p.fifo,
       pg_catalog.clock_timestamp() AS now
 WHERE i.entity_key IS NOT NULL AND i.status IN ('ready', 'leased')
   AND (i.status = 'leased' OR i.run_at > now)
   AND NOT EXISTS (SELECT FROM webhook.inbox j
                    WHERE j.provider = i.provider AND j.consumer = i.consumer AND j.entity_key = i.entity_key
                      AND j.status IN ('ready', 'leased')
                      AND (j.order_value, j.queued_at, j.event_id) < (i.order_value, i.queued_at, i.event_id))
   AND EXISTS (SELECT FROM webhook.inbox j
                WHERE j.provider = i.provider AND j.consumer = i.consumer AND j.entity_key = i.entity_key
                  AND j.status IN ('ready', 'leased')
                  AND (j.order_value, j.queued_at, j.event_id) > (i.order_value, i.queued_at, i.event_id));
COMMENT ON VIEW webhook.blocked_entities IS
    'Inbox FIFO: entities whose earliest unfinished event is leased or backing off, and how many events wait behind it';

-- Forget an entity's watermark (of one consumer, or of all): its next
-- event is processed whatever its order value, and moves the watermark
-- again. For an entity whose state was repaired by hand, or a watermark
-- set by a bad order value. Events already skipped as stale stay skipped.
-- Returns how many watermarks were removed.
CREATE FUNCTION @extschema@.webhook_reset_watermark(
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
COMMENT ON FUNCTION @extschema@.webhook_reset_watermark(text, text, text) IS
    'For operators: forget an entity''s ordering watermark (one consumer''s, or all); returns how many were removed';

SELECT pg_catalog.set_config('search_path', '@extschema@, pg_temp', true);

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
CREATE PROCEDURE @extschema@.webhook_enqueue_batches(
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
COMMENT ON PROCEDURE @extschema@.webhook_enqueue_batches(text, jsonb, integer, bigint) IS
    'Queue any number of verified events ({"event_id", "event_type", "payload"} objects), committing every batch_size: a backfill or an import; returns how many were queued';
