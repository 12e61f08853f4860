-- Benchmark fixtures: payloads, bodies with their signatures, the "limit"
-- table, and the handlers the storm scenario runs for each implementation.
CREATE EXTENSION IF NOT EXISTS pg_webhook_inbox;
-- The archive's days, as every install should schedule.
SELECT webhook_create_partitions();
CREATE EXTENSION IF NOT EXISTS pgcrypto;
-- WAL per run split into records, full-page images and bytes.
CREATE EXTENSION IF NOT EXISTS pg_walinspect;
CREATE SCHEMA bench;

-- Read from a table by every script, so no implementation gets its input
-- constant-folded at plan time.
CREATE TABLE bench.payloads (name text PRIMARY KEY, payload jsonb, body bytea, sig text);
INSERT INTO bench.payloads (name, payload)
SELECT '1k', jsonb_build_object(
           'id', 'evt_1Nbench', 'object', 'event', 'type', 'invoice.paid', 'api_version', '2024-06-20',
           'data', jsonb_build_object('object', jsonb_build_object(
               'id', 'in_1Nbench', 'customer', 'cus_bench', 'amount_paid', 1000, 'currency', 'usd',
               'lines', (SELECT jsonb_agg(jsonb_build_object('id', 'il_' || i, 'amount', i * 100,
                                                             'description', repeat('x', 40)))
                           FROM generate_series(1, 10) i))));
INSERT INTO bench.payloads (name, body)
SELECT n, (SELECT string_agg(gen_random_bytes(1024), ''::bytea) FROM generate_series(1, k))
  FROM (VALUES ('body_1k', 1), ('body_64k', 64)) v(n, k);
UPDATE bench.payloads SET sig = encode(hmac(body, 'bench-secret', 'sha256'), 'hex') WHERE body IS NOT NULL;
-- Bodies are random bytes: TOAST cannot compress them, so every read pays
-- the same detoast for both implementations.

-- The limit: the least any correct dedup can do.
CREATE TABLE bench.limit_events (
    provider text NOT NULL,
    event_id text NOT NULL,
    UNIQUE (provider, event_id)
);

-- The floor of a dedup that keeps every delivery: the limit's INSERT, and
-- an archive row holding the payload (no partitions, no other index).
CREATE TABLE bench.floor_archive (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    provider text NOT NULL,
    event_id text NOT NULL,
    payload jsonb NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE bench.side_effects (impl text NOT NULL, event_id bigint NOT NULL);
CREATE INDEX ON bench.side_effects (impl, event_id);
-- The handler scenario's business write: one row per event.
CREATE TABLE bench.handler_effects (event_id text NOT NULL, amount integer NOT NULL);
CREATE SEQUENCE bench.storm_seq;

-- Storm handlers: claim, and do the side effect if the claim says so (ours
-- in one call, its claim completing on commit; PL/pgSQL completes too).
CREATE FUNCTION bench.storm_ours(sid bigint) RETURNS text LANGUAGE plpgsql AS $$
DECLARE c record;
BEGIN
    SELECT * INTO c FROM webhook_claim('storm', sid::text, 't', (SELECT payload FROM bench.payloads WHERE name = '1k'), 'sig',
                                       complete_on_commit => true);
    IF c.claimed THEN
        INSERT INTO bench.side_effects VALUES ('ours', sid);
    END IF;
    RETURN c.status;
END $$;

CREATE FUNCTION bench.storm_plpgsql(sid bigint) RETURNS text LANGUAGE plpgsql AS $$
DECLARE c record;
BEGIN
    SELECT * INTO c FROM handmade.claim('storm', sid::text, 't', (SELECT payload FROM bench.payloads WHERE name = '1k'), 'sig');
    IF c.claimed THEN
        INSERT INTO bench.side_effects VALUES ('plpgsql', sid);
        PERFORM handmade.complete(c.id);
    END IF;
    RETURN c.status;
END $$;

-- What webhook_receive does for a GitHub delivery, by hand: check the
-- signature with pgcrypto, bind the signed bytes to the unsigned delivery
-- id (so the same bytes under another id are refused), then claim and
-- complete with the hand-written PL/pgSQL.
CREATE TABLE handmade.bindings (
    provider text NOT NULL,
    digest   bytea NOT NULL,
    event_id text NOT NULL,
    PRIMARY KEY (provider, digest)
);
CREATE FUNCTION bench.receive_plpgsql(p_headers jsonb, p_body bytea) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_event_id text := p_headers->>'X-GitHub-Delivery';
    v_signature text := p_headers->>'X-Hub-Signature-256';
    v_bound text;
    c record;
BEGIN
    IF v_signature IS DISTINCT FROM 'sha256=' || encode(hmac(p_body, 'bench-secret', 'sha256'), 'hex') THEN
        RETURN 'rejected';
    END IF;
    INSERT INTO handmade.bindings VALUES ('receive', sha256(p_body), v_event_id)
    ON CONFLICT DO NOTHING
    RETURNING event_id INTO v_bound;
    IF v_bound IS NULL AND (SELECT b.event_id FROM handmade.bindings b
                             WHERE b.provider = 'receive' AND b.digest = sha256(p_body)) <> v_event_id THEN
        RETURN 'replayed';
    END IF;
    SELECT * INTO c FROM handmade.claim('receive', v_event_id, p_headers->>'X-GitHub-Event',
                                        convert_from(p_body, 'UTF8')::jsonb, v_signature);
    IF c.claimed THEN
        PERFORM handmade.complete(c.id);
    END IF;
    RETURN c.status;
END $$;

CREATE FUNCTION bench.storm_limit(sid bigint) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO bench.limit_events VALUES ('storm', sid::text) ON CONFLICT DO NOTHING;
    IF FOUND THEN
        INSERT INTO bench.side_effects VALUES ('limit', sid);
        RETURN 'claimed';
    END IF;
    RETURN 'duplicate';
END $$;

-- Events the duplicate scenario redelivers: 100,000 processed events each,
-- committed 1,000 at a time (a transaction holds one event lock per event
-- it claims until it ends).
DO $$
BEGIN
    FOR batch IN 0..99 LOOP
        PERFORM webhook_complete(c.id)
           FROM generate_series(batch * 1000 + 1, batch * 1000 + 1000) i,
                LATERAL webhook_claim('bench', 'dup_' || i, 't', (SELECT payload FROM bench.payloads WHERE name = '1k'), 'sig') c;
        PERFORM handmade.complete(c.id)
           FROM generate_series(batch * 1000 + 1, batch * 1000 + 1000) i,
                LATERAL handmade.claim('bench', 'dup_' || i, 't', (SELECT payload FROM bench.payloads WHERE name = '1k'), 'sig') c;
        COMMIT;
    END LOOP;
    INSERT INTO bench.limit_events SELECT 'bench', 'dup_' || i FROM generate_series(1, 100000) i;
END $$;
VACUUM ANALYZE;
