SELECT encode(hmac(body, 'bench-secret', 'sha256'), 'hex') = sig FROM bench.payloads WHERE name = 'body_64k';
