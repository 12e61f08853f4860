\set id random(1, 9000000000000000)
SELECT handqueue.enqueue('intake', 'in_' || :id, 'invoice.paid', (SELECT payload FROM bench.payloads WHERE name = '1k'));
