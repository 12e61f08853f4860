SELECT bench.storm_limit(nextval('bench.storm_seq') / 16);
