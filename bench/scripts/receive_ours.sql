SELECT r.http_status
  FROM (SELECT headers, body FROM bench.signed WHERE n = (SELECT nextval('bench.signed_seq_ours'))) s,
       LATERAL webhook_receive('bench-github-claim', s.headers, s.body, complete_on_commit => true) r;
