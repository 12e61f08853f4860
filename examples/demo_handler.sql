-- A complete webhook handler written in SQL, in the one-transaction style:
-- verify, claim, do the work, complete — or record the failure — all in the
-- caller's transaction. Handlers in Python, Node or Go make the same calls.
CREATE EXTENSION IF NOT EXISTS pg_webhook_inbox;
CREATE SCHEMA IF NOT EXISTS demo;

CREATE TABLE IF NOT EXISTS demo.credit_grants (
    event_id   text        NOT NULL,
    customer   text        NOT NULL,
    credits    integer     NOT NULL,
    granted_at timestamptz NOT NULL DEFAULT now()
);

-- Returns the HTTP status the endpoint answers the provider.
CREATE OR REPLACE FUNCTION demo.handle_delivery(
    body           text,
    signature      text,
    secret         text,
    inject_failure boolean DEFAULT false,
    work_seconds   float8  DEFAULT 0
) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    event jsonb;
    c     record;
BEGIN
    IF NOT verify_hmac(secret, body, signature) THEN
        RETURN 401;                               -- forged or misconfigured
    END IF;
    event := body::jsonb;
    SELECT * INTO c FROM webhook_claim('demo-shop', event->>'id', event->>'type', body, signature);
    IF c.status = 'duplicate' THEN
        RETURN 200;                               -- done before: acknowledge, do nothing
    ELSIF c.status = 'in_progress' THEN
        RETURN 409;                               -- live elsewhere: provider retries later
    END IF;

    BEGIN                                         -- a savepoint around the business work
        INSERT INTO demo.credit_grants (event_id, customer, credits)
        VALUES (event->>'id', event->'data'->>'customer', (event->'data'->>'credits')::int);
        PERFORM pg_sleep(work_seconds);
        IF inject_failure THEN
            RAISE EXCEPTION 'payment service unavailable';
        END IF;
        PERFORM webhook_complete(c.id);
        RETURN 200;
    EXCEPTION WHEN OTHERS THEN                    -- work rolled back; the claim is kept
        PERFORM webhook_fail(c.id, SQLERRM);
        RETURN 500;                               -- provider retries; next one is a 'retry'
    END;
END
$$;
