\set id random(1, 9000000000000000)
BEGIN;
INSERT INTO bench.limit_events SELECT 'bench', 'h_' || :id FROM bench.payloads WHERE name = '1k' AND payload IS NOT NULL ON CONFLICT DO NOTHING;
INSERT INTO bench.handler_effects VALUES ('h_' || :id, 1000);
COMMIT;
