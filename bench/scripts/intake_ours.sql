\set id random(1, 9000000000000000)
SELECT status FROM webhook_enqueue('bench', 'intake_' || :id, 'invoice.paid', (SELECT payload FROM bench.payloads WHERE name = '1k'), 'sig');
