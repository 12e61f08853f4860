-- pg_webhook_inbox: reconciliation with a provider's events API.
--
-- A webhook that never arrives is invisible: the provider gave up, a
-- firewall dropped it, GitHub never redelivers. A poller that lists the
-- provider's events through its API (Stripe's /v1/events, GitHub's
-- deliveries) feeds each one to webhook_enqueue_polled: it enters through
-- the same dedup key as deliveries (provider, event id), so an event both
-- polled and delivered is queued, and processed, once. Which archive rows
-- a poll made is recorded (webhook.polled), so that the events seen only
-- by polling — the webhooks that never came — can be listed
-- (webhook.missed_deliveries).
--
-- The poller vouches for what it feeds in, as a handler calling
-- webhook_enqueue does: it read the event from the provider's API over
-- TLS with its own credentials. Nothing polled goes through a signature.

-- Bound to pg_catalog while this file runs (see schema.sql).
SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);

CREATE TABLE webhook.polled (
    -- The archive row the poll made (a duplicate's too, when duplicates
    -- are archived).
    delivery_id uuid        NOT NULL,
    provider    text        NOT NULL,
    event_id    text        NOT NULL,
    polled_at   timestamptz NOT NULL DEFAULT pg_catalog.now(),
    CONSTRAINT polled_pkey PRIMARY KEY (delivery_id)
);
CREATE INDEX polled_event_idx ON webhook.polled (provider, event_id);
COMMENT ON TABLE webhook.polled IS
    'Events fed in by polling a provider''s API (webhook_enqueue_polled), by the archive row each poll made';
COMMENT ON COLUMN webhook.polled.delivery_id IS 'The archive row (webhook.delivery_log) the poll made';
COMMENT ON COLUMN webhook.polled.provider IS 'Provider name';
COMMENT ON COLUMN webhook.polled.event_id IS 'The event''s id';
COMMENT ON COLUMN webhook.polled.polled_at IS 'When the poll fed it in';

-- Queue an event read from the provider's events API: webhook_enqueue
-- (the same checks, the same dedup, the application role's scope), and a
-- record that the archive row is a poll's.
CREATE FUNCTION @extschema@.webhook_enqueue_polled(
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
COMMENT ON FUNCTION @extschema@.webhook_enqueue_polled(text, text, text, jsonb) IS
    'Queue an event read from the provider''s events API (a poller reconciling missed webhooks): webhook_enqueue''s dedup, so an event both polled and delivered is processed once; recorded in webhook.polled';

-- The webhooks that never came: events the poller found that no delivery
-- brought (a rejected one, a forgery or a bad secret, does not count).
-- As far back as the archive goes: a poll whose archive row webhook_purge
-- removed is not compared any more.
CREATE VIEW webhook.missed_deliveries AS
SELECT p.provider, p.event_id, e.event_type, e.status, pg_catalog.min(p.polled_at) AS first_polled_at,
       pg_catalog.count(*) AS polls
  FROM webhook.polled p
  JOIN webhook.events e ON e.provider = p.provider AND e.event_id = p.event_id
 WHERE EXISTS (SELECT FROM webhook.delivery_log o WHERE o.id = p.delivery_id)
   AND NOT EXISTS (SELECT FROM webhook.delivery_log l
                    WHERE l.provider = p.provider AND l.event_id = p.event_id
                      AND l.claim_status <> 'rejected'
                      AND NOT EXISTS (SELECT FROM webhook.polled q WHERE q.delivery_id = l.id))
 GROUP BY p.provider, p.event_id, e.event_type, e.status;
COMMENT ON VIEW webhook.missed_deliveries IS
    'Events seen only by polling the provider''s API: the webhooks that never arrived (as far back as the archive goes)';

SELECT pg_catalog.set_config('search_path', '@extschema@, pg_temp', true);
