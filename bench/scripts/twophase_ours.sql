\set id random(1, 9000000000000000)
SELECT id AS claim_id FROM webhook_claim('bench', 't_' || :id, 'invoice.paid', (SELECT payload FROM bench.payloads WHERE name = '1k'), 'sig') \gset
SELECT webhook_complete(:claim_id);
