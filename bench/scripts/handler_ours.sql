\set id random(1, 9000000000000000)
BEGIN;
SELECT id FROM webhook_claim('bench', 'h_' || :id, 'invoice.paid', (SELECT payload FROM bench.payloads WHERE name = '1k'), 'sig', complete_on_commit => true);
INSERT INTO bench.handler_effects VALUES ('h_' || :id, 1000);
COMMIT;
