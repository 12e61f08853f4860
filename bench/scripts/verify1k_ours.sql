SELECT verify_hmac('bench-secret', body, sig) FROM bench.payloads WHERE name = 'body_1k';
