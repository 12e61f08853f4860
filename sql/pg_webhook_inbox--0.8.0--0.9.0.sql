-- pg_webhook_inbox 0.8.0 → 0.9.0
--
-- What changes (CHANGELOG.md says why):
--   * webhook_purge finds the deliveries it must keep in a day it drops
--     from the unfinished events, read once per purge, instead of from
--     the day's deliveries: dropping a day no longer reads the day.
--
-- Nothing else changes: no table, index, type or grant.

-- Everything bound in this script is bound to pg_catalog (see schema.sql).
SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);

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
    -- ways of purging; a delivery of no such event may go.
    unfinished CONSTANT text := $rule$
        NOT (e.status IN ('processed', 'stale')
             OR (e.status = 'queued'
                 AND NOT EXISTS (SELECT FROM webhook.inbox i
                                  WHERE i.provider = e.provider AND i.event_id = e.event_id
                                    AND i.status NOT IN ('processed', 'stale'))))$rule$;
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
    day       pg_catalog.regclass;
BEGIN
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
                                                AND NOT EXISTS (SELECT FROM webhook.events e
                                                                 WHERE e.provider = l.provider
                                                                   AND e.event_id = l.event_id AND %2$s)
                                              LIMIT $2))
                    RETURNING id
                ), failures AS (
                    DELETE FROM webhook.delivery_failures f USING gone WHERE f.delivery_id = gone.id
                )
                SELECT count(*) FROM gone$sql$, part.partition, unfinished)
            INTO batch USING cutoff, batch_size;
            deleted := deleted + batch;
            batches := batches + 1;
            EXIT WHEN batch < batch_size OR batches >= coalesce(max_batches, batches + 1);
        END LOOP;
    END LOOP;

    DELETE FROM webhook.inbox_failures f
     WHERE f.failed_at < cutoff
       AND EXISTS (SELECT FROM webhook.inbox i
                    WHERE (i.provider, i.event_id, i.consumer) = (f.provider, f.event_id, f.consumer)
                      AND i.status IN ('processed', 'stale') AND i.processed_at < cutoff);
    DELETE FROM webhook.inbox i WHERE i.status IN ('processed', 'stale') AND i.processed_at < cutoff;

    -- Whole days, oldest first. Each is read before any is detached: the
    -- first detach locks the archive until the transaction ends, and
    -- claims wait for only what follows it.
    FOR part IN
        SELECT p.partition FROM webhook.archive_partitions p
         WHERE NOT p.is_default AND p.upper_id <= webhook._archive_bound(cutoff)
         ORDER BY p.upper_id
    LOOP
        -- The deliveries that stay are those of unfinished events: few,
        -- found once for every day (one read of webhook.events; the
        -- inbox's unfinished rows come from its partial indexes), then
        -- looked up in each day's event index, so a day costs the same
        -- whatever its size. The candidates must cover every event the
        -- rule calls unfinished; the rule decides.
        IF event_ids IS NULL THEN
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
        END IF;
        EXECUTE pg_catalog.format($sql$
            SELECT coalesce(array_agg(l.id), '{}')
              FROM unnest($1, $2) AS k (provider, event_id)
              JOIN %s l ON l.provider = k.provider AND l.event_id = k.event_id$sql$, part.partition)
        INTO kept USING providers, event_ids;
        kept_all := kept_all || kept;
        EXECUTE pg_catalog.format('SELECT count(*) FROM %s', part.partition) INTO total;
        deleted := deleted + total - pg_catalog.cardinality(kept);
        days := days || part.partition;
    END LOOP;
    FOREACH day IN ARRAY days LOOP
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
    END LOOP;
    RETURN deleted;
END
$$;
COMMENT ON FUNCTION @extschema@.webhook_purge(interval, integer, integer) IS
    'Remove archive rows older than older_than whose event is processed by everyone (and rejections): whole days by dropping their partition, the rest row by row; and old processed inbox rows. Never touches webhook.events. Returns the archive rows removed';
