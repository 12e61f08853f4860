SELECT r.http_status
  FROM (SELECT headers, body FROM bench.signed WHERE n = (SELECT nextval('bench.signed_seq'))) s,
       LATERAL webhook_receive('bench-github', s.headers, s.body, inbox => true) r;
