\set id random(1, 9000000000000000)
WITH event AS (INSERT INTO bench.limit_events VALUES ('bench', 'new_' || :id) ON CONFLICT DO NOTHING RETURNING 1) INSERT INTO bench.floor_archive (provider, event_id, payload) SELECT 'bench', 'new_' || :id, payload FROM bench.payloads WHERE name = '1k';
