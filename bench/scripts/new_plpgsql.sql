\set id random(1, 9000000000000000)
SELECT handmade.complete(c.id) FROM handmade.claim('bench', 'new_' || :id, 'invoice.paid', (SELECT payload FROM bench.payloads WHERE name = '1k'), 'sig') c;
