SELECT bench.receive_plpgsql(s.headers, s.body)
  FROM bench.signed s WHERE s.n = (SELECT nextval('bench.signed_seq_plpgsql'));
