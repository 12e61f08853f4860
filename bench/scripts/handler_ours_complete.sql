\set id random(1, 9000000000000000)
BEGIN;
SELECT id AS claim_id FROM webhook_claim('bench', 'h_' || :id, 'invoice.paid', (SELECT payload FROM bench.payloads WHERE name = '1k'), 'sig') \gset
INSERT INTO bench.handler_effects VALUES ('h_' || :id, 1000);
SELECT webhook_complete(:claim_id);
COMMIT;
