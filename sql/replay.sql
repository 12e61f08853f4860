-- pg_webhook_inbox: replaying inbox events.
--
-- A bug shipped and last Tuesday's invoice.paid events were handled
-- wrong: after the fix, an operator runs them again, including those that
-- "succeeded". webhook_replay selects inbox work by a filter (provider,
-- consumer, event types, what became of it, a time range, error text, a
-- JSON path over the payload) and, once confirmed, puts each matching
-- event back in its consumer's queue, once:
--
--   webhook.replays        every replay: who, when, why, its filter, its
--                          rate and state (running, paused, cancelled);
--                          webhook.replay_progress, what is done and left.
--   webhook.replay_items   each event and consumer a replay queued, and
--                          what it was before (for webhook_replay_cancel).
--   webhook.inbox.replay_id  the replay that last queued the row;
--                          webhook_next returns it, so a worker knows it
--                          runs a replay, and of which.
--
-- Exactly once per replay: a replay is one statement (all its events are
-- queued, or none), and the same filter with the same reason names the
-- same replay, so running the command again (after a crash, or by
-- mistake) returns the replay already queued instead of a second one.
-- Only finished work (processed, dead, stale, filtered) is queued again: an event
-- still ready or leased is processed anyway and is left out. From then on
-- the inbox's own guarantee holds (a worker's effects commit with its
-- webhook_complete, a lease that ran out is taken over and its worker
-- fenced), across crashes and restarts.
--
-- Live traffic first: with a rate, the replay's events are due one after
-- another from now, so events arriving meanwhile are leased as soon as
-- they come, never behind the rest of the replay.

-- Bound to pg_catalog while this file runs (see schema.sql).
SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);

CREATE TYPE webhook.replay_state AS ENUM ('running', 'paused', 'cancelled');
COMMENT ON TYPE webhook.replay_state IS
    'Where a replay is: running (its events are due at their times), paused (set aside until webhook_replay_resume), cancelled (what had not started was put back)';

CREATE TABLE webhook.replays (
    id           uuid        NOT NULL DEFAULT pg_catalog.gen_random_uuid(),
    requested_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    requested_by text        NOT NULL DEFAULT SESSION_USER,
    reason       text        NOT NULL,
    -- The filter as given (webhook_replay's arguments), NULLs left out.
    filter       jsonb       NOT NULL,
    -- Events a second; NULL: all due at once.
    rate         double precision,
    state        webhook.replay_state NOT NULL DEFAULT 'running',
    -- Event and consumer pairs queued.
    events       bigint      NOT NULL,
    -- Put back as they were by webhook_replay_cancel.
    cancelled    bigint      NOT NULL DEFAULT 0,
    changed_at   timestamptz,
    changed_by   text,
    CONSTRAINT replays_pkey PRIMARY KEY (id),
    -- The same request names the same replay.
    CONSTRAINT replays_request_key UNIQUE (filter, reason),
    CONSTRAINT replays_reason_check CHECK (reason <> '' AND pg_catalog.octet_length(reason) <= 2048)
);
COMMENT ON TABLE webhook.replays IS
    'Every replay of inbox events: who asked, when, why, with which filter and rate, how many events, its state; see webhook.replay_progress';
COMMENT ON COLUMN webhook.replays.id IS 'The replay id, as webhook_next returns it with each of its events';
COMMENT ON COLUMN webhook.replays.requested_at IS 'When it was started';
COMMENT ON COLUMN webhook.replays.requested_by IS 'Who started it (the session user)';
COMMENT ON COLUMN webhook.replays.reason IS 'Why, as the operator said; with the filter, what names the replay';
COMMENT ON COLUMN webhook.replays.filter IS 'webhook_replay''s filter arguments (those given)';
COMMENT ON COLUMN webhook.replays.rate IS 'Events a second it was spread at; NULL: all at once';
COMMENT ON COLUMN webhook.replays.state IS 'running, paused (webhook_replay_pause) or cancelled (webhook_replay_cancel)';
COMMENT ON COLUMN webhook.replays.events IS 'How many event and consumer pairs it queued';
COMMENT ON COLUMN webhook.replays.cancelled IS 'How many of them webhook_replay_cancel put back before they ran';
COMMENT ON COLUMN webhook.replays.changed_at IS 'When it was last paused, resumed or cancelled';
COMMENT ON COLUMN webhook.replays.changed_by IS 'Who last paused, resumed or cancelled it';

CREATE TABLE webhook.replay_items (
    replay_id      uuid    NOT NULL,
    -- The inbox row: webhook.inbox's key.
    delivery_id    uuid    NOT NULL,
    consumer       text    NOT NULL,
    -- What the row was before the replay queued it.
    prior_status   webhook.inbox_status NOT NULL,
    prior_attempts integer NOT NULL,
    -- The replay that had queued it before, if any.
    prior_replay_id uuid,
    CONSTRAINT replay_items_pkey PRIMARY KEY (replay_id, delivery_id, consumer),
    CONSTRAINT replay_items_replay_fkey FOREIGN KEY (replay_id) REFERENCES webhook.replays (id) ON DELETE CASCADE
);
COMMENT ON TABLE webhook.replay_items IS 'Each inbox row (event and consumer) a replay queued, and what it was before';
COMMENT ON COLUMN webhook.replay_items.replay_id IS 'The replay';
COMMENT ON COLUMN webhook.replay_items.delivery_id IS 'The inbox row''s delivery_id';
COMMENT ON COLUMN webhook.replay_items.consumer IS 'The inbox row''s consumer';
COMMENT ON COLUMN webhook.replay_items.prior_status IS 'Its status before the replay: processed, dead, stale or filtered';
COMMENT ON COLUMN webhook.replay_items.prior_attempts IS 'Its attempts before the replay (which gave it a fresh budget)';
COMMENT ON COLUMN webhook.replay_items.prior_replay_id IS 'The replay that had queued it before, if any';

-- What webhook_replay's filter matches: finished inbox rows (with their
-- archive row still there, the payload a worker is given). The dry run
-- and the run read the same rows through this one function.
CREATE FUNCTION webhook._replay_matches(
    provider       text,
    consumer       text,
    event_types    text[],
    statuses       text[],
    since          timestamptz,
    until          timestamptz,
    error_contains text,
    payload_path   jsonpath
) RETURNS TABLE (delivery_id uuid, consumer text, provider text, event_id text, event_type text,
                 status webhook.inbox_status, attempts integer, queued_at timestamptz)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT i.delivery_id, i.consumer, i.provider, i.event_id, i.event_type, i.status, i.attempts, i.queued_at
  FROM webhook.inbox i
 WHERE i.status::text IN ('processed', 'dead', 'stale', 'filtered')
   AND ($1 IS NULL OR i.provider = $1)
   AND ($2 IS NULL OR i.consumer = $2)
   AND ($3 IS NULL OR i.event_type = ANY ($3))
   AND ($5 IS NULL OR i.queued_at >= $5)
   AND ($6 IS NULL OR i.queued_at < $6)
   AND (i.status::text = ANY ($4)
        -- failed: finished after at least one failed attempt.
        OR ('failed' = ANY ($4) AND i.status IN ('processed', 'dead')
            AND EXISTS (SELECT FROM webhook.inbox_failures f
                         WHERE f.provider = i.provider AND f.event_id = i.event_id
                           AND f.consumer = i.consumer)))
   AND ($7 IS NULL
        OR pg_catalog.strpos(pg_catalog.lower(i.last_error), pg_catalog.lower($7)) > 0
        OR EXISTS (SELECT FROM webhook.inbox_failures f
                    WHERE f.provider = i.provider AND f.event_id = i.event_id AND f.consumer = i.consumer
                      AND pg_catalog.strpos(pg_catalog.lower(f.error_message), pg_catalog.lower($7)) > 0))
   -- The archive row is still there (and its payload matches): one probe
   -- of its key per row, a subquery the planner cannot turn into a join,
   -- which it would plan blind (the filter's arguments are parameters)
   -- and could make a scan of the archive for every inbox row.
   AND coalesce((SELECT $8 IS NULL
                        -- silent: a payload the path does not fit is no match, not an error.
                        OR pg_catalog.jsonb_path_match(l.payload, $8, '{}', true) IS TRUE
                   FROM webhook.delivery_log l
                  WHERE l.id = i.delivery_id), false)
$$;
COMMENT ON FUNCTION webhook._replay_matches(text, text, text[], text[], timestamptz, timestamptz, text, jsonpath) IS
    'Internal: the finished inbox rows webhook_replay''s filter matches';

CREATE TYPE webhook.replay_result AS (
    replay_id uuid,
    dry_run   boolean,
    -- A run: false when the same filter and reason had already started it.
    started   boolean,
    events    bigint,
    sample    jsonb
);
COMMENT ON TYPE webhook.replay_result IS
    'webhook_replay''s answer: the replay (NULL for a dry run), whether this call started it, how many event and consumer pairs it holds (or would), and a sample of them';

-- Replay finished inbox work matching a filter. A dry run (the default)
-- changes nothing and says how many event and consumer pairs would be
-- queued, with a sample; a run queues them (each once, at `rate` a
-- second from now, or all at once) and returns the replay's id.
CREATE FUNCTION @extschema@.webhook_replay(
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
COMMENT ON FUNCTION @extschema@.webhook_replay(text, text, text[], text[], timestamptz, timestamptz, text, jsonpath, text, double precision, boolean, integer) IS
    'For operators: run finished inbox events again (processed, dead, stale, filtered out, or failed at least once), chosen by provider, consumer, event types, time range, error text and a JSON path over the payload; a dry run (the default) counts and samples them, a run with a reason queues each once (the same filter and reason again returns the same replay), optionally at rate a second';

-- A running replay's events not yet leased are set aside until
-- webhook_replay_resume: due at the start of the year 9999, past every
-- pick (and apart from a quarantine's 'infinity', which a resume must not
-- undo, nor a release this). Leases already taken run to their end.
-- Returns how many were set aside.
CREATE FUNCTION @extschema@.webhook_replay_pause(replay_id uuid) RETURNS bigint
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
COMMENT ON FUNCTION @extschema@.webhook_replay_pause(uuid) IS
    'For operators: set a running replay''s events not yet leased aside until webhook_replay_resume; returns how many';

-- A paused replay's events are due again, spread at its rate from now.
CREATE FUNCTION @extschema@.webhook_replay_resume(replay_id uuid) RETURNS bigint
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
COMMENT ON FUNCTION @extschema@.webhook_replay_resume(uuid) IS
    'For operators: let a paused replay''s events be leased again, spread at its rate from now; returns how many';

-- A replay's events not yet leased are put back as they were before it
-- (processed, dead, stale or filtered, with their attempts); leases already taken
-- run to their end. Returns how many were put back.
CREATE FUNCTION @extschema@.webhook_replay_cancel(replay_id uuid) RETURNS bigint
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
COMMENT ON FUNCTION @extschema@.webhook_replay_cancel(uuid) IS
    'For operators: stop a replay: its events not yet leased are put back as they were before it; returns how many';

-- A replay's state changed from `from` (NULL: running or paused) to `to`,
-- under its row lock, with who and when; its rate returned.
CREATE FUNCTION webhook._replay_change(fn text, replay uuid, from_state webhook.replay_state,
                                       to_state webhook.replay_state) RETURNS double precision
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    was webhook.replay_state;
    spread double precision;
BEGIN
    IF replay IS NULL THEN
        RAISE EXCEPTION '%: argument "replay_id" must not be NULL', fn
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    SELECT r.state, r.rate INTO was, spread FROM webhook.replays r WHERE r.id = replay FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION '%: argument "replay_id": no replay %', fn, replay
            USING ERRCODE = 'undefined_object';
    END IF;
    IF was = 'cancelled' OR (from_state IS NOT NULL AND was <> from_state) THEN
        RAISE EXCEPTION '%: replay % is %', fn, replay, was
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    UPDATE webhook.replays r
       SET state = to_state, changed_at = pg_catalog.now(), changed_by = SESSION_USER
     WHERE r.id = replay;
    RETURN spread;
END
$$;
COMMENT ON FUNCTION webhook._replay_change(text, uuid, webhook.replay_state, webhook.replay_state) IS
    'Internal: a replay''s state changed (refused with 55000 when it is not in the state the change starts from)';

-- Each replay's progress: of its events, how many are still to run
-- (ready or leased for it, set aside while paused included), how many
-- ran, and how many a cancel put back. A running replay with nothing left
-- to run says finished. processed, dead and stale count the rows it still
-- holds (a later replay of the same rows holds them from then on).
CREATE VIEW webhook.replay_progress AS
SELECT r.id, r.requested_at, r.requested_by, r.reason, r.filter, r.rate,
       CASE WHEN r.state = 'running' AND coalesce(s.remaining, 0) = 0 THEN 'finished'
            ELSE r.state::text END AS state,
       r.events,
       r.events - coalesce(s.remaining, 0) - r.cancelled AS done,
       coalesce(s.remaining, 0) AS remaining,
       coalesce(s.processed, 0) AS processed,
       coalesce(s.dead, 0) AS dead,
       coalesce(s.stale, 0) AS stale,
       r.cancelled,
       r.changed_at, r.changed_by
  FROM webhook.replays r
  LEFT JOIN LATERAL (
      SELECT pg_catalog.count(*) FILTER (WHERE i.status IN ('ready', 'leased')) AS remaining,
             pg_catalog.count(*) FILTER (WHERE i.status = 'processed') AS processed,
             pg_catalog.count(*) FILTER (WHERE i.status = 'dead') AS dead,
             pg_catalog.count(*) FILTER (WHERE i.status = 'stale') AS stale
        FROM webhook.inbox i
       WHERE i.replay_id = r.id) s ON true;
COMMENT ON VIEW webhook.replay_progress IS
    'Each replay: its request, state (running, paused, cancelled, finished), events, done and remaining, how the events it holds ended, and how many a cancel put back';

SELECT pg_catalog.set_config('search_path', '@extschema@, pg_temp', true);
