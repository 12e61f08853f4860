-- pg_webhook_inbox 0.8.0 → 0.9.0
--
-- What changes (CHANGELOG.md says why):
--   * webhook_purge finds the unfinished events once per purge, and keeps
--     their deliveries from that list: dropping a day no longer reads the
--     day, and a batch of row-by-row deletes no longer reads
--     webhook.events.
--
-- Nothing else changes: no table, index, type or grant.

-- Everything bound in this script is bound to pg_catalog (see schema.sql).
SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);

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
-- the transaction ends: call it on its own, not inside other work.
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
        -- Each unfinished event looked up in the day's event index: a
        -- day costs the same whatever its size.
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
