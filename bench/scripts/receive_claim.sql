SELECT c.status
  FROM bench.signed s,
       LATERAL webhook_claim('bench-claim', s.headers->>'X-GitHub-Delivery', 'push', s.body, s.headers->>'X-Hub-Signature-256', complete_on_commit => true) c
 WHERE s.n = (SELECT nextval('bench.signed_seq_claim'));
