\set id random(1, 9000000000000000)
INSERT INTO bench.limit_events VALUES ('intake', 'in_' || :id) ON CONFLICT DO NOTHING;
