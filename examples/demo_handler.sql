-- A complete webhook handler written in SQL, in the one-transaction style:
-- webhook_receive verifies, reads the event id and claims; the work and its
-- completion (or the recorded failure) commit with it. Handlers in Python,
-- Node or Go make the same two calls.
CREATE EXTENSION IF NOT EXISTS pg_webhook_inbox;
CREATE SCHEMA IF NOT EXISTS demo;

CREATE TABLE IF NOT EXISTS demo.credit_grants (
    event_id   text        NOT NULL,
    customer   text        NOT NULL,
    credits    integer     NOT NULL,
    granted_at timestamptz NOT NULL DEFAULT now()
);

-- The demo's sender signs like GitHub: X-Hub-Signature-256 over the body,
-- its delivery id in X-GitHub-Delivery. One call registers it; this sender
-- retries, so its deliveries are claimed and processed in the request
-- (inbox => false) rather than queued for workers.
SELECT name, scheme, event_id_from, active_secrets
  FROM webhook_register_provider('demo-shop', scheme => 'github', secret => :'secret', inbox => false);

-- Returns the HTTP status the endpoint answers the provider.
CREATE OR REPLACE FUNCTION demo.handle_delivery(
    headers        jsonb,
    body           text,
    inject_failure boolean DEFAULT false,
    work_seconds   float8  DEFAULT 0
) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    r     record;
    event jsonb;
BEGIN
    SELECT * INTO r FROM webhook_receive('demo-shop', headers, convert_to(body, 'UTF8'),
                                         complete_on_commit => true);  -- the commit completes it
    IF NOT r.claimed THEN
        -- 200 duplicate, 409 in progress elsewhere, 401 bad signature, 400 unreadable
        RETURN r.http_status;
    END IF;

    event := body::jsonb;
    BEGIN                                         -- a savepoint around the business work
        INSERT INTO demo.credit_grants (event_id, customer, credits)
        VALUES (event->>'id', event->'data'->>'customer', (event->'data'->>'credits')::int);
        PERFORM pg_sleep(work_seconds);
        IF inject_failure THEN
            RAISE EXCEPTION 'payment service unavailable';
        END IF;
        PERFORM webhook_complete(r.id, jsonb_build_object('credits', event->'data'->'credits'));
        RETURN 200;
    EXCEPTION WHEN OTHERS THEN                    -- work rolled back; the claim is kept
        PERFORM webhook_fail(r.id, SQLERRM);
        RETURN 500;                               -- provider retries; next one is a 'retry'
    END;
END
$$;
