BEGIN;
WITH leased AS MATERIALIZED (SELECT * FROM handqueue.next(10)),
     effects AS (INSERT INTO bench.side_effects SELECT 'drain_plpgsql', substr(event_id, 4)::bigint FROM leased)
SELECT handqueue.complete(lease_id) FROM leased;
COMMIT;
