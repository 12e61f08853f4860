\set id random(1, 9000000000000000)
INSERT INTO bench.limit_events SELECT 'bench', 'new_' || :id FROM bench.payloads WHERE name = '1k' AND payload IS NOT NULL ON CONFLICT DO NOTHING;
