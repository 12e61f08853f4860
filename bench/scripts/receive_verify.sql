SELECT verify_hmac('bench-secret', s.body, substr(s.headers->>'X-Hub-Signature-256', 8))
  FROM bench.signed s WHERE s.n = (SELECT nextval('bench.signed_seq_verify'));
