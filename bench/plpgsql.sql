-- What a careful user writes by hand, following the same playbook: the same
-- statuses, a lease, an archive row per delivery, never waiting on a locked
-- event row (SKIP LOCKED), and the retry-poisoning fix. Written as well as
-- we could; the benchmark compares the extension against this.
CREATE SCHEMA handmade;

CREATE TABLE handmade.events (
    provider         text        NOT NULL,
    event_id         text        NOT NULL,
    event_type       text        NOT NULL,
    status           text        NOT NULL,
    attempts         integer     NOT NULL DEFAULT 1,
    claim_id         uuid        NOT NULL,
    lease_expires_at timestamptz,
    first_seen_at    timestamptz NOT NULL DEFAULT now(),
    processed_at     timestamptz,
    last_error       text,
    PRIMARY KEY (provider, event_id)
);

CREATE TABLE handmade.deliveries (
    id                uuid        PRIMARY KEY,
    provider          text        NOT NULL,
    event_id          text        NOT NULL,
    event_type        text        NOT NULL,
    payload           jsonb       NOT NULL,
    signature         text,
    claim_status      text        NOT NULL,
    processing_status text        NOT NULL,
    error_message     text,
    created_at        timestamptz NOT NULL DEFAULT now(),
    finished_at       timestamptz
);
CREATE INDEX ON handmade.deliveries (provider, event_id);
CREATE INDEX ON handmade.deliveries (created_at);

CREATE FUNCTION handmade.claim(
    p_provider text, p_event_id text, p_event_type text, p_payload jsonb, p_signature text,
    p_lease interval DEFAULT '5 minutes'
) RETURNS TABLE (id uuid, claimed boolean, status text, attempts integer)
LANGUAGE plpgsql AS $$
DECLARE
    v_id uuid := gen_random_uuid();
    e    handmade.events;
BEGIN
    INSERT INTO handmade.events AS ev (provider, event_id, event_type, status, attempts, claim_id, lease_expires_at)
    VALUES (p_provider, p_event_id, p_event_type, 'processing', 1, v_id, clock_timestamp() + p_lease)
    ON CONFLICT (provider, event_id) DO NOTHING;
    IF FOUND THEN
        INSERT INTO handmade.deliveries (id, provider, event_id, event_type, payload, signature, claim_status, processing_status)
        VALUES (v_id, p_provider, p_event_id, p_event_type, p_payload, p_signature, 'claimed', 'PENDING');
        RETURN QUERY SELECT v_id, true, 'claimed'::text, 1;
        RETURN;
    END IF;

    -- Someone else's open transaction holds the row: in progress, at once.
    SELECT * INTO e FROM handmade.events ev
     WHERE ev.provider = p_provider AND ev.event_id = p_event_id
       FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        INSERT INTO handmade.deliveries (id, provider, event_id, event_type, payload, signature, claim_status, processing_status)
        VALUES (v_id, p_provider, p_event_id, p_event_type, p_payload, p_signature, 'in_progress', 'SKIPPED');
        RETURN QUERY SELECT v_id, false, 'in_progress'::text, 0;
        RETURN;
    END IF;

    IF e.status = 'failed' OR (e.status = 'processing' AND e.lease_expires_at <= clock_timestamp()) THEN
        UPDATE handmade.events ev
           SET status = 'processing', attempts = ev.attempts + 1, claim_id = v_id,
               lease_expires_at = clock_timestamp() + p_lease
         WHERE ev.provider = p_provider AND ev.event_id = p_event_id;
        INSERT INTO handmade.deliveries (id, provider, event_id, event_type, payload, signature, claim_status, processing_status)
        VALUES (v_id, p_provider, p_event_id, p_event_type, p_payload, p_signature, 'retry', 'PENDING');
        RETURN QUERY SELECT v_id, true, 'retry'::text, e.attempts + 1;
        RETURN;
    END IF;

    INSERT INTO handmade.deliveries (id, provider, event_id, event_type, payload, signature, claim_status, processing_status)
    VALUES (v_id, p_provider, p_event_id, p_event_type, p_payload, p_signature,
            CASE WHEN e.status = 'processed' THEN 'duplicate' ELSE 'in_progress' END, 'SKIPPED');
    RETURN QUERY SELECT v_id, false,
                        CASE WHEN e.status = 'processed' THEN 'duplicate' ELSE 'in_progress' END, e.attempts;
END
$$;

CREATE FUNCTION handmade.complete(p_id uuid) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    d handmade.deliveries;
BEGIN
    UPDATE handmade.deliveries dl SET processing_status = 'PROCESSED', finished_at = now()
     WHERE dl.id = p_id AND dl.processing_status = 'PENDING'
    RETURNING * INTO d;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'delivery % is unknown or already finished', p_id;
    END IF;
    UPDATE handmade.events ev SET status = 'processed', processed_at = now(), lease_expires_at = NULL
     WHERE ev.provider = d.provider AND ev.event_id = d.event_id AND ev.claim_id = p_id AND ev.status = 'processing';
    IF NOT FOUND THEN
        RAISE EXCEPTION 'delivery % lost its lease', p_id;
    END IF;
END
$$;
