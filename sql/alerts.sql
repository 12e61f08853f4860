-- pg_webhook_inbox: alerts raised inside the database.
--
-- Rules are set centrally (webhook.alert_rules, one row each, with sane
-- defaults). webhook_alerts_evaluate(), run every minute by pg_cron or any
-- scheduler, rolls the metrics up, finds which rules fire for which
-- provider and consumer, and keeps one alert per rule and subject: opened
-- when it starts firing, its value and last sighting updated while it
-- fires, resolved when it stops. Each change is sent as
-- NOTIFY webhook_alert with a JSON payload, unless the alert is silenced.
-- Operators list alerts (webhook.alerts), acknowledge and silence them.

-- Bound to pg_catalog while this file runs (see schema.sql).
SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);

CREATE TYPE webhook.alert_kind AS ENUM (
    -- Dead letters waiting for an operator now (claimed events and inbox
    -- rows parked as dead): more than threshold. Open exactly while they
    -- wait; a requeue resolves it.
    'dead_letters',
    -- The oldest ready inbox event of a consumer has waited longer than
    -- threshold seconds.
    'oldest_ready',
    -- Failed attempts / (failed + completed) over the window, above
    -- threshold (0 to 1), once min_events attempts were seen.
    'failure_rate',
    -- Deliveries refused for their signature or secret (bad_signature,
    -- no_secret, invalid_secret, unknown_certificate) / all deliveries over
    -- the window, above threshold: a forgery campaign, or a secret
    -- rotated on one side only.
    'rejection_spike',
    -- No delivery for the window from a provider that sent at least
    -- threshold deliveries in the seven windows before it.
    'silence',
    -- An older secret still verifying deliveries longer than the window
    -- after a newer one was added: the sender never switched, and retiring
    -- the old one will reject everything.
    'secret_rotation',
    -- A consumer's circuit breaker (webhook.limits) has been open or half
    -- open for more than threshold seconds.
    'circuit_open'
);
COMMENT ON TYPE webhook.alert_kind IS
    'What an alert rule watches: dead_letters, oldest_ready, failure_rate, rejection_spike, silence, secret_rotation, circuit_open (see docs/observability.md)';

CREATE TYPE webhook.alert_status AS ENUM ('open', 'acknowledged', 'resolved');
COMMENT ON TYPE webhook.alert_status IS
    'open (firing), acknowledged (firing, an operator is on it), resolved (its condition cleared)';

CREATE TABLE webhook.alert_rules (
    name       text             NOT NULL
               CONSTRAINT alert_rules_name_check CHECK (name ~ '^[a-z0-9][a-z0-9_.-]{0,63}$'),
    kind       webhook.alert_kind NOT NULL,
    -- NULL: every provider (every consumer).
    provider   text,
    consumer   text,
    threshold  double precision NOT NULL CONSTRAINT alert_rules_threshold_check CHECK (threshold >= 0),
    "window"   interval         NOT NULL CONSTRAINT alert_rules_window_check CHECK ("window" > interval '0'),
    -- Rates: the fewest observations in the window worth judging.
    min_events bigint           NOT NULL DEFAULT 0 CONSTRAINT alert_rules_min_events_check CHECK (min_events >= 0),
    enabled    boolean          NOT NULL DEFAULT true,
    CONSTRAINT alert_rules_pkey PRIMARY KEY (name),
    CONSTRAINT alert_rules_rate_check CHECK (kind NOT IN ('failure_rate', 'rejection_spike') OR threshold <= 1)
);
COMMENT ON TABLE webhook.alert_rules IS 'The alert rules the DBA set: each adds a rule, or replaces the built-in default of its name (webhook.alert_rules_in_effect)';
COMMENT ON COLUMN webhook.alert_rules.name IS 'The rule''s name, as alerts and notifications show it';
COMMENT ON COLUMN webhook.alert_rules.kind IS 'What it watches (webhook.alert_kind)';
COMMENT ON COLUMN webhook.alert_rules.provider IS 'The provider it watches; NULL: each provider';
COMMENT ON COLUMN webhook.alert_rules.consumer IS 'The inbox consumer it watches; NULL: each consumer';
COMMENT ON COLUMN webhook.alert_rules.threshold IS 'dead_letters: a count; oldest_ready, circuit_open: seconds; failure_rate, rejection_spike: a share from 0 to 1; silence: deliveries before the silence that make a provider one that normally sends; secret_rotation: unused (0)';
COMMENT ON COLUMN webhook.alert_rules."window" IS 'The period the rule looks at (silence: how long without a delivery; secret_rotation: the grace after a newer secret was added; dead_letters: unused, it counts what waits now)';
COMMENT ON COLUMN webhook.alert_rules.min_events IS 'Rates: the fewest attempts or deliveries in the window worth judging';
COMMENT ON COLUMN webhook.alert_rules.enabled IS 'A disabled rule raises nothing, and its open alerts resolve';

-- The rules in effect: the table's, and each built-in default whose name
-- no row of the table takes. The defaults are not rows, so that the
-- table holds only what the DBA set (and pg_dump keeps exactly that); a
-- row named as a default replaces it, and one with enabled = false turns
-- it off.
CREATE VIEW webhook.alert_rules_in_effect AS
SELECT r.name, r.kind, r.provider, r.consumer, r.threshold, r."window", r.min_events, r.enabled, false AS builtin
  FROM webhook.alert_rules r
UNION ALL
SELECT d.name, d.kind::webhook.alert_kind, NULL, NULL, d.threshold, d."window", d.min_events, true, true
  FROM (VALUES ('dead_letters', 'dead_letters', 0::float8, interval '1 hour', 0::bigint),
               ('oldest_ready', 'oldest_ready', 300, interval '5 minutes', 0),
               ('failure_rate', 'failure_rate', 0.1, interval '15 minutes', 20),
               ('rejection_spike', 'rejection_spike', 0.5, interval '15 minutes', 10),
               ('silence', 'silence', 20, interval '6 hours', 0),
               ('secret_rotation', 'secret_rotation', 0, interval '7 days', 0),
               ('circuit_open', 'circuit_open', 0, interval '1 minute', 0))
       AS d (name, kind, threshold, "window", min_events)
 WHERE NOT EXISTS (SELECT FROM webhook.alert_rules r WHERE r.name = d.name);
COMMENT ON VIEW webhook.alert_rules_in_effect IS
    'The alert rules evaluated: the rows of webhook.alert_rules, and the built-in defaults (builtin) none of them replaces';

CREATE TABLE webhook.alerts (
    id              bigint GENERATED ALWAYS AS IDENTITY,
    rule            text             NOT NULL,
    kind            webhook.alert_kind NOT NULL,
    -- What it is about; '' when the rule's subject has no consumer.
    provider        text             NOT NULL,
    consumer        text             NOT NULL,
    status          webhook.alert_status NOT NULL DEFAULT 'open',
    value           double precision NOT NULL,
    threshold       double precision NOT NULL,
    message         text             NOT NULL,
    first_seen_at   timestamptz      NOT NULL DEFAULT pg_catalog.now(),
    last_seen_at    timestamptz      NOT NULL DEFAULT pg_catalog.now(),
    acknowledged_at timestamptz,
    acknowledged_by text,
    resolved_at     timestamptz,
    -- No notification about it before this time.
    silenced_until  timestamptz,
    CONSTRAINT alerts_pkey PRIMARY KEY (id)
);
-- One alert per rule and subject until it resolves: a condition that
-- keeps firing updates its alert instead of raising another.
CREATE UNIQUE INDEX alerts_unresolved_idx ON webhook.alerts (rule, provider, consumer) WHERE status <> 'resolved';
COMMENT ON TABLE webhook.alerts IS 'Alerts: open, acknowledged or resolved; one unresolved alert per rule and subject';
COMMENT ON COLUMN webhook.alerts.id IS 'The alert''s id, for webhook_alert_acknowledge and webhook_alert_silence';
COMMENT ON COLUMN webhook.alerts.rule IS 'The rule that raised it';
COMMENT ON COLUMN webhook.alerts.kind IS 'What the rule watches';
COMMENT ON COLUMN webhook.alerts.provider IS 'The provider it is about';
COMMENT ON COLUMN webhook.alerts.consumer IS 'The inbox consumer it is about; empty when none';
COMMENT ON COLUMN webhook.alerts.status IS 'open, acknowledged (an operator is on it), resolved (the condition cleared)';
COMMENT ON COLUMN webhook.alerts.value IS 'What was measured at its last sighting';
COMMENT ON COLUMN webhook.alerts.threshold IS 'The rule''s threshold then';
COMMENT ON COLUMN webhook.alerts.message IS 'What it says, in a sentence';
COMMENT ON COLUMN webhook.alerts.first_seen_at IS 'When it started firing';
COMMENT ON COLUMN webhook.alerts.last_seen_at IS 'When it was last seen firing';
COMMENT ON COLUMN webhook.alerts.acknowledged_at IS 'When an operator acknowledged it';
COMMENT ON COLUMN webhook.alerts.acknowledged_by IS 'Who acknowledged it (the session user)';
COMMENT ON COLUMN webhook.alerts.resolved_at IS 'When its condition cleared';
COMMENT ON COLUMN webhook.alerts.silenced_until IS 'No notification about it before this time';

-- What fires now: one row per rule and subject, with the value measured.
CREATE FUNCTION webhook._alert_conditions()
RETURNS TABLE (rule text, kind webhook.alert_kind, provider text, consumer text,
               value double precision, threshold double precision, message text)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
WITH rules AS (
    SELECT * FROM webhook.alert_rules_in_effect r WHERE r.enabled
), minutes AS (
    -- Each rule's window of the per-minute metrics.
    SELECT r.name, m.provider, m.consumer, m.metric, m.label, m.count
      FROM rules r
      JOIN webhook.metric_minutes m
        ON m.minute >= pg_catalog.date_trunc('minute', pg_catalog.now() - r."window")
       AND (r.provider IS NULL OR m.provider = r.provider)
       AND (r.consumer IS NULL OR m.consumer = r.consumer)
     WHERE r.kind IN ('failure_rate', 'rejection_spike')
), measured AS (
    SELECT r.name, r.kind, m.provider, m.consumer, r.threshold, r.min_events,
           sum(m.count) FILTER (WHERE m.metric = 'failures') AS failures,
           sum(m.count) FILTER (WHERE m.metric = 'completions') AS completions,
           sum(m.count) FILTER (WHERE m.metric = 'deliveries') AS deliveries,
           sum(m.count) FILTER (WHERE m.metric = 'rejections'
                                  AND m.label IN ('bad_signature', 'no_secret', 'invalid_secret', 'unknown_certificate')) AS forged
      FROM rules r JOIN minutes m ON m.name = r.name
     GROUP BY r.name, r.kind, m.provider, m.consumer, r.threshold, r.min_events
), dead AS (
    -- The dead letters waiting now: inbox rows (from their partial
    -- index), and claimed events found from their parking failure (the
    -- archive keeps those of unfinished events), so that no evaluation
    -- reads every event ever received.
    SELECT webhook._metric_provider(x.provider) AS provider, x.consumer, pg_catalog.count(*) AS n
      FROM (SELECT i.provider, i.consumer FROM webhook.inbox i WHERE i.status = 'dead'
            UNION ALL
            SELECT e.provider, ''
              FROM webhook.delivery_failures f
              JOIN webhook.delivery_log l ON l.id = f.delivery_id
              JOIN webhook.events e ON e.provider = l.provider AND e.event_id = l.event_id
             WHERE e.status = 'dead' AND e.claim_id = f.delivery_id) x
     WHERE EXISTS (SELECT FROM rules r WHERE r.kind = 'dead_letters')
     GROUP BY 1, 2
)
SELECT r.name, r.kind, d.provider, d.consumer, d.n::float8, r.threshold,
       pg_catalog.format('%s dead letter(s) of %s%s waiting for an operator', d.n, d.provider,
                         CASE WHEN d.consumer <> '' THEN ' (consumer ' || d.consumer || ')' ELSE '' END)
  FROM rules r
  JOIN dead d ON (r.provider IS NULL OR d.provider = r.provider) AND (r.consumer IS NULL OR d.consumer = r.consumer)
 WHERE r.kind = 'dead_letters' AND d.n > r.threshold
UNION ALL
SELECT name, kind, provider, consumer, failures::float8 / (failures + coalesce(completions, 0)), threshold,
       pg_catalog.format('%s of %s attempts failed for %s%s', failures, failures + coalesce(completions, 0), provider,
                         CASE WHEN consumer <> '' THEN ' (consumer ' || consumer || ')' ELSE '' END)
  FROM measured
 WHERE kind = 'failure_rate' AND failures > 0 AND failures + coalesce(completions, 0) >= GREATEST(min_events, 1)
   AND failures::float8 / (failures + coalesce(completions, 0)) > threshold
UNION ALL
SELECT name, kind, provider, consumer, coalesce(forged, 0)::float8 / deliveries, threshold,
       pg_catalog.format('%s of %s deliveries from %s refused for their signature or secret: a forgery, or a secret rotated on one side only',
                         coalesce(forged, 0), deliveries, provider)
  FROM measured
 WHERE kind = 'rejection_spike' AND deliveries >= GREATEST(min_events, 1)
   AND coalesce(forged, 0)::float8 / deliveries > threshold
UNION ALL
SELECT r.name, r.kind, s.provider, s.consumer, pg_catalog.date_part('epoch', s.oldest_ready_age), r.threshold,
       pg_catalog.format('the oldest ready event of %s for consumer %s has waited %s', s.provider, s.consumer,
                         pg_catalog.date_trunc('second', s.oldest_ready_age))
  FROM rules r
  JOIN (SELECT webhook._metric_provider(x.provider) AS provider, x.consumer,
               pg_catalog.max(x.oldest_ready_age) AS oldest_ready_age
          FROM webhook.inbox_stats x GROUP BY 1, 2) s
    ON (r.provider IS NULL OR s.provider = r.provider) AND (r.consumer IS NULL OR s.consumer = r.consumer)
 WHERE r.kind = 'oldest_ready' AND pg_catalog.date_part('epoch', s.oldest_ready_age) > r.threshold
UNION ALL
-- Silence: read from the totals of deliveries per minute, up to where the
-- rollup has counted, so that a lagging rollup is not taken for silence.
-- Refused deliveries are not the provider speaking: one forged request
-- every few hours must not hide a webhook disabled at the provider.
SELECT r.name, r.kind, d.provider, '', pg_catalog.date_part('epoch', mk.counted_until - d.last_minute), r.threshold,
       pg_catalog.format('no delivery from %s since %s, after %s in the %s before', d.provider,
                         d.last_minute, d.before, r."window" * 7)
  FROM rules r
 CROSS JOIN webhook.metric_marks mk
 CROSS JOIN LATERAL (
       SELECT m.provider,
              pg_catalog.max(m.minute) + interval '1 minute' AS last_minute,
              sum(m.count) FILTER (WHERE m.minute < mk.counted_until - r."window") AS before,
              sum(m.count) FILTER (WHERE m.minute >= pg_catalog.date_trunc('minute', mk.counted_until - r."window")) AS recent
         FROM webhook.metric_minutes m
        WHERE m.metric = 'deliveries' AND m.label <> 'rejected' AND m.minute >= mk.counted_until - r."window" * 8
          AND (r.provider IS NULL OR m.provider = r.provider)
        GROUP BY m.provider) d
 WHERE r.kind = 'silence' AND r.consumer IS NULL AND coalesce(d.recent, 0) = 0 AND coalesce(d.before, 0) >= GREATEST(r.threshold, 1)
UNION ALL
SELECT r.name, r.kind, o.provider, '', pg_catalog.date_part('epoch', o.last_used_at - n.added_at), r.threshold,
       pg_catalog.format('secret %s of %s still verified a delivery at %s, %s after secret %s was added: the sender still signs with the old one',
                         o.fingerprint, o.provider, o.last_used_at, pg_catalog.date_trunc('second', o.last_used_at - n.added_at), n.fingerprint)
  FROM rules r
  JOIN (SELECT s.provider, s.fingerprint, s.added_at, u.last_used_at
          FROM webhook.provider_secrets s
          JOIN webhook.secret_uses u ON u.provider = s.provider AND u.fingerprint = s.fingerprint
         WHERE s.retired_at IS NULL) o ON (r.provider IS NULL OR o.provider = r.provider)
  JOIN LATERAL (SELECT s.fingerprint, s.added_at FROM webhook.provider_secrets s
                 WHERE s.provider = o.provider AND s.retired_at IS NULL AND s.added_at > o.added_at
                 ORDER BY s.added_at DESC LIMIT 1) n ON true
 WHERE r.kind = 'secret_rotation' AND r.consumer IS NULL
   AND o.last_used_at >= n.added_at + r."window"
   AND o.last_used_at >= pg_catalog.now() - r."window"
UNION ALL
SELECT r.name, r.kind, b.provider, b.consumer, pg_catalog.date_part('epoch', pg_catalog.now() - b.opened_at), r.threshold,
       pg_catalog.format('the circuit breaker of consumer %s%s is %s after %s failures in a row, since %s',
                         b.consumer, CASE WHEN b.provider <> '' THEN ' for ' || b.provider ELSE '' END,
                         b.state, b.failures, b.opened_at)
  FROM rules r
  JOIN (SELECT DISTINCT ON (1, 2) webhook._metric_provider(x.provider) AS provider, x.consumer, x.state,
               x.failures, x.opened_at
          FROM webhook.breakers x WHERE x.state <> 'closed'
         ORDER BY 1, 2, x.opened_at) b
    ON (r.provider IS NULL OR b.provider = r.provider) AND (r.consumer IS NULL OR b.consumer = r.consumer)
 WHERE r.kind = 'circuit_open' AND b.state <> 'closed'
   AND pg_catalog.date_part('epoch', pg_catalog.now() - b.opened_at) >= r.threshold
$$;
COMMENT ON FUNCTION webhook._alert_conditions() IS 'Internal: the rules that fire now, per subject, with the value measured';

-- Tell listeners an alert changed, unless it is silenced.
CREATE FUNCTION webhook._alert_notify(alert webhook.alerts, change text) RETURNS void
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT pg_catalog.pg_notify('webhook_alert', pg_catalog.json_build_object(
           'id', alert.id, 'change', change, 'rule', alert.rule, 'kind', alert.kind,
           'status', alert.status, 'provider', alert.provider, 'consumer', alert.consumer,
           'value', alert.value, 'threshold', alert.threshold, 'message', alert.message,
           'first_seen_at', alert.first_seen_at)::text)
 WHERE alert.silenced_until IS NULL OR alert.silenced_until <= pg_catalog.now()
$$;
COMMENT ON FUNCTION webhook._alert_notify(webhook.alerts, text) IS 'Internal: NOTIFY webhook_alert about a change, unless the alert is silenced';

-- Roll up the metrics, then open, update and resolve alerts. Returns the
-- alerts that changed (opened, resolved) with the change.
CREATE FUNCTION @extschema@.webhook_alerts_evaluate()
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
COMMENT ON FUNCTION @extschema@.webhook_alerts_evaluate() IS
    'Roll the metrics up, then open, update and resolve alerts (NOTIFY webhook_alert on each change); returns what changed. Run it every minute (pg_cron: see docs/observability.md)';

-- An operator is on it: it stays until its condition clears.
CREATE FUNCTION @extschema@.webhook_alert_acknowledge(alert_id bigint)
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
COMMENT ON FUNCTION @extschema@.webhook_alert_acknowledge(bigint) IS
    'Acknowledge an open alert (an operator is on it); it resolves by itself when its condition clears';

-- No notification about an alert for a while (it is still tracked).
CREATE FUNCTION @extschema@.webhook_alert_silence(alert_id bigint, duration interval)
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
COMMENT ON FUNCTION @extschema@.webhook_alert_silence(bigint, interval) IS
    'Send no notification about an unresolved alert for a while (at most 30 days); it is still evaluated, and resolves as usual';
