-- pg_webhook_inbox: backfilling a new consumer.
--
-- A consumer added to a provider (webhook_register_provider's consumers)
-- gets the events queued from then on. webhook_backfill queues it the
-- provider's earlier inbox events too, those first seen in a time range,
-- for that consumer only: each event once (a second run, or one crashed
-- and run again, adds only what is missing), from the archive row that
-- queued it, with its ordering. The other consumers are not touched.

-- Bound to pg_catalog while this file runs (see schema.sql).
SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);

-- Queue for `consumer` the provider's inbox events first seen in
-- [since, until), at `rate` a second from now (their run times spread, so
-- that the events queued live meanwhile are not behind all of them), or
-- all ready at once. Returns how many were queued.
CREATE FUNCTION @extschema@.webhook_backfill(
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
COMMENT ON FUNCTION @extschema@.webhook_backfill(text, text, timestamptz, timestamptz, double precision) IS
    'For operators: queue a provider''s inbox events first seen in [since, until) for one of its consumers (one added later), each once, optionally spread at rate a second; returns how many';

SELECT pg_catalog.set_config('search_path', '@extschema@, pg_temp', true);
