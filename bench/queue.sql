-- The inbox a careful user writes by hand: a dedup table, a job table
-- with the payload, one queue per provider (an index led by it), leases
-- taken with FOR UPDATE SKIP LOCKED, fenced by a lease id, a batch of
-- leases finished in one statement, a failure scheduled with exponential
-- backoff. The benchmark compares the extension's inbox against this.
CREATE SCHEMA handqueue;

CREATE TABLE handqueue.events (
    provider text NOT NULL,
    event_id text NOT NULL,
    PRIMARY KEY (provider, event_id)
);

CREATE TABLE handqueue.jobs (
    id          bigserial   PRIMARY KEY,
    provider    text        NOT NULL,
    event_id    text        NOT NULL,
    event_type  text        NOT NULL,
    payload     jsonb       NOT NULL,
    status      text        NOT NULL DEFAULT 'ready',
    run_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    attempts    integer     NOT NULL DEFAULT 0,
    lease_id    uuid,
    last_error  text
);
CREATE INDEX ON handqueue.jobs (provider, run_at) WHERE status IN ('ready', 'leased');
CREATE UNIQUE INDEX ON handqueue.jobs (lease_id);

CREATE FUNCTION handqueue.enqueue(p_provider text, p_event_id text, p_event_type text, p_payload jsonb)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO handqueue.events VALUES (p_provider, p_event_id) ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    INSERT INTO handqueue.jobs (provider, event_id, event_type, payload)
    VALUES (p_provider, p_event_id, p_event_type, p_payload);
    RETURN true;
END
$$;

CREATE FUNCTION handqueue.next(p_batch integer, p_provider text, p_lease interval DEFAULT '5 minutes')
RETURNS TABLE (lease_id uuid, provider text, event_id text, payload jsonb, attempts integer)
LANGUAGE plpgsql AS $$
BEGIN
    RETURN QUERY
    UPDATE handqueue.jobs j
       SET status = 'leased', attempts = j.attempts + 1, lease_id = gen_random_uuid(),
           run_at = clock_timestamp() + p_lease
     WHERE j.id IN (SELECT q.id FROM handqueue.jobs q
                     WHERE q.provider = p_provider
                       AND q.status IN ('ready', 'leased') AND q.run_at <= clock_timestamp()
                     ORDER BY q.run_at LIMIT p_batch
                       FOR UPDATE SKIP LOCKED)
    RETURNING j.lease_id, j.provider, j.event_id, j.payload, j.attempts;
END
$$;

CREATE FUNCTION handqueue.complete(p_lease uuid) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE handqueue.jobs SET status = 'done' WHERE lease_id = p_lease AND status = 'leased';
    IF NOT FOUND THEN
        RAISE EXCEPTION 'lease % lost or finished', p_lease;
    END IF;
END
$$;

CREATE FUNCTION handqueue.complete_batch(p_leases uuid[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE finished bigint;
BEGIN
    UPDATE handqueue.jobs SET status = 'done' WHERE lease_id = ANY (p_leases) AND status = 'leased';
    GET DIAGNOSTICS finished = ROW_COUNT;
    IF finished <> cardinality(p_leases) THEN
        RAISE EXCEPTION 'a lease of % lost or finished', p_leases;
    END IF;
END
$$;

CREATE FUNCTION handqueue.fail(p_lease uuid, p_error text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE handqueue.jobs
       SET status = 'ready', last_error = p_error,
           run_at = clock_timestamp() + least(interval '1 hour', interval '10 seconds' * 2 ^ (attempts - 1))
     WHERE lease_id = p_lease AND status = 'leased';
    IF NOT FOUND THEN
        RAISE EXCEPTION 'lease % lost or finished', p_lease;
    END IF;
END
$$;
