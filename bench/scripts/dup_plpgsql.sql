\set id random(1, 100000)
SELECT status FROM handmade.claim('bench', 'dup_' || :id, 'invoice.paid', (SELECT payload FROM bench.payloads WHERE name = '1k'), 'sig');
