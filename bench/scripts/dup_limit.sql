\set id random(1, 100000)
INSERT INTO bench.limit_events SELECT 'bench', 'dup_' || :id FROM bench.payloads WHERE name = '1k' AND payload IS NOT NULL ON CONFLICT DO NOTHING;
