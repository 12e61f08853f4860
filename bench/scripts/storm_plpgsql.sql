SELECT bench.storm_plpgsql(nextval('bench.storm_seq') / 16);
