BEGIN;
WITH leased AS MATERIALIZED (SELECT * FROM webhook_next(10, provider => 'drain')),
     effects AS (INSERT INTO bench.side_effects SELECT 'drain_ours', substr(event_id, 4)::bigint FROM leased)
SELECT webhook_complete(id) FROM leased;
COMMIT;
