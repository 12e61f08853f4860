SELECT bench.storm_ours(nextval('bench.storm_seq') / 16);
