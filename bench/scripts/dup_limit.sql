\set id random(1, 100000)
INSERT INTO bench.limit_events VALUES ('bench', 'dup_' || :id) ON CONFLICT DO NOTHING;
