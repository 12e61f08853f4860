\set id random(1, 9000000000000000)
INSERT INTO bench.limit_events VALUES ('bench', 'new_' || :id) ON CONFLICT DO NOTHING;
