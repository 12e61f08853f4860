-- pg_webhook_inbox: schema and tables.
--
-- Two tables, one job each:
--   webhook.events      small and hot: one row per (provider, event_id), kept
--                       forever, no payload. Its primary key is the dedup.
--   webhook.deliveries  large and cold: one row per call of webhook_claim,
--                       with the payload, raw body and signature. Purging it
--                       never loses dedup, because nothing reads it to decide.
--
-- Applications never write these tables: the SECURITY DEFINER functions do.

CREATE SCHEMA webhook;
COMMENT ON SCHEMA webhook IS
    'pg_webhook_inbox: event state (dedup) and the delivery archive';

CREATE TABLE webhook.events (
    provider         text        NOT NULL,
    event_id         text        NOT NULL,
    event_type       text        NOT NULL,
    status           text        NOT NULL
                     CONSTRAINT events_status_check
                     CHECK (status IN ('processing', 'processed', 'failed')),
    attempts         integer     NOT NULL DEFAULT 1
                     CONSTRAINT events_attempts_check CHECK (attempts >= 1),
    -- The delivery that owns the event now (the last claim or retry).
    claim_id         uuid        NOT NULL,
    -- Set while status = 'processing'; after it, the next delivery may take
    -- the event over as a retry.
    lease_expires_at timestamptz,
    first_seen_at    timestamptz NOT NULL DEFAULT pg_catalog.now(),
    processed_at     timestamptz,
    last_error       text,
    CONSTRAINT events_pkey PRIMARY KEY (provider, event_id)
)
-- Status and lease updates touch no indexed column; free space on the page
-- lets them be HOT updates that leave the index alone.
WITH (fillfactor = 80);

COMMENT ON TABLE webhook.events IS
    'One row per (provider, event_id), kept forever: the dedup and the claim state machine';

CREATE TABLE webhook.deliveries (
    id                uuid        NOT NULL,
    provider          text        NOT NULL,
    event_id          text        NOT NULL,
    event_type        text        NOT NULL,
    payload           jsonb       NOT NULL,
    -- The exact bytes received, when the claim was given them; signatures
    -- cover these bytes, which jsonb does not preserve.
    raw_body          bytea,
    signature         text,
    -- What webhook_claim answered this delivery.
    claim_status      text        NOT NULL
                      CONSTRAINT deliveries_claim_status_check
                      CHECK (claim_status IN ('claimed', 'retry', 'duplicate', 'in_progress')),
    processing_status text        NOT NULL
                      CONSTRAINT deliveries_processing_status_check
                      CHECK (processing_status IN ('PENDING', 'PROCESSED', 'SKIPPED', 'FAILED')),
    error_message     text,
    created_at        timestamptz NOT NULL DEFAULT pg_catalog.now(),
    finished_at       timestamptz,
    CONSTRAINT deliveries_pkey PRIMARY KEY (id)
);

CREATE INDEX deliveries_event_idx ON webhook.deliveries (provider, event_id);
CREATE INDEX deliveries_created_at_idx ON webhook.deliveries (created_at);

COMMENT ON TABLE webhook.deliveries IS
    'One row per webhook_claim call: payload, raw body, signature and outcome, for forensics; safe to purge';

-- Nobody but the extension's functions writes here. (New tables grant
-- nothing to PUBLIC; these statements make that explicit for DBAs.)
REVOKE ALL ON SCHEMA webhook FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA webhook FROM PUBLIC;
