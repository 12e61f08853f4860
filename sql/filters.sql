-- pg_webhook_inbox: filters on signed fields.
--
-- A provider (or one of its inbox consumers) may take only some events:
-- an allowlist of event types, a JSON path predicate over the body, or
-- both. webhook_receive still verifies, archives and deduplicates a
-- delivery that does not match, and answers it 2xx; it is just not
-- processed:
--
--   * a provider's filter: the event is filtered for good (status
--     `filtered`, the archive row too, with the reason). Its redeliveries
--     are duplicates of it; in inbox mode each consumer's row is kept as
--     `filtered`, so webhook_replay(statuses => '{filtered}') can run it
--     later;
--   * a consumer's filter (inbox mode): that consumer's row of the event
--     is `filtered`, the others are queued as usual.
--
-- A filter reads only what the delivery's signature covers: an event
-- type the provider's scheme signs, a body it vouches for by a digest.
-- A sender who controls an unsigned header could otherwise drop any event
-- it likes. webhook_set_filter refuses a filter that would read anything
-- else, and webhook_receive, should the provider have been registered
-- again with another scheme since, processes the delivery rather than
-- judge it on unsigned material.
--
-- Filters judge deliveries as webhook_receive verifies them. webhook_claim
-- and webhook_enqueue take what the application hands them: it chose.

-- Bound to pg_catalog while this file runs (see schema.sql).
SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);

CREATE TABLE webhook.filters (
    provider     text        NOT NULL,
    -- '' : the provider's filter, for the event as a whole.
    consumer     text        NOT NULL DEFAULT '',
    -- The event types taken; NULL: any.
    event_types  text[],
    -- A JSON path predicate the body must match; NULL: any body.
    payload_path jsonpath,
    set_at       timestamptz NOT NULL DEFAULT pg_catalog.now(),
    set_by       text        NOT NULL DEFAULT SESSION_USER,
    CONSTRAINT filters_pkey PRIMARY KEY (provider, consumer),
    CONSTRAINT filters_provider_fkey FOREIGN KEY (provider) REFERENCES webhook.providers (name)
        ON UPDATE CASCADE ON DELETE CASCADE,
    CONSTRAINT filters_any_check CHECK (event_types IS NOT NULL OR payload_path IS NOT NULL),
    CONSTRAINT filters_event_types_check
        CHECK (pg_catalog.cardinality(event_types) BETWEEN 1 AND 1000
               AND pg_catalog.array_position(event_types, NULL) IS NULL),
    CONSTRAINT filters_payload_path_check CHECK (pg_catalog.octet_length(payload_path::text) <= 4096)
);
COMMENT ON TABLE webhook.filters IS
    'Which events a provider, or one of its inbox consumers, takes: an event-type allowlist and/or a JSON path predicate over the signed body; set with webhook_set_filter';
COMMENT ON COLUMN webhook.filters.provider IS 'The provider whose deliveries are judged';
COMMENT ON COLUMN webhook.filters.consumer IS 'The inbox consumer it applies to; empty: the event as a whole';
COMMENT ON COLUMN webhook.filters.event_types IS 'The event types taken; NULL: any';
COMMENT ON COLUMN webhook.filters.payload_path IS 'A JSON path predicate the body must match (jsonb_path_match; a path that does not fit is no match); NULL: any';
COMMENT ON COLUMN webhook.filters.set_at IS 'When it was last set';
COMMENT ON COLUMN webhook.filters.set_by IS 'Who last set it (the session user)';

-- Set the filter of a provider (consumer NULL) or of one of its inbox
-- consumers; with neither event_types nor payload_path, remove it. Applies
-- to deliveries received from then on. Returns whether a filter is in
-- place.
CREATE FUNCTION @extschema@.webhook_set_filter(
    provider     text,
    consumer     text DEFAULT NULL,
    event_types  text[] DEFAULT NULL,
    payload_path jsonpath DEFAULT NULL
) RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p text := webhook._check_name('webhook_set_filter', 'provider', webhook_set_filter.provider, true);
    c text := webhook._check_name('webhook_set_filter', 'consumer', webhook_set_filter.consumer, false);
    registered webhook.providers;
BEGIN
    IF pg_catalog.pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('webhook_set_filter');
    END IF;
    SELECT r.* INTO registered FROM webhook.providers r WHERE r.name = p FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'webhook_set_filter: argument "provider": no provider "%" is registered', p
            USING ERRCODE = 'undefined_object';
    END IF;
    IF c <> '' AND NOT c = ANY (CASE WHEN pg_catalog.cardinality(registered.consumers) = 0
                                     THEN ARRAY['default'] ELSE registered.consumers END) THEN
        RAISE EXCEPTION 'webhook_set_filter: argument "consumer": provider "%" has no consumer "%"', p, c
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Its consumers are listed in webhook.providers.consumers (none: default).';
    END IF;
    IF webhook_set_filter.event_types IS NULL AND webhook_set_filter.payload_path IS NULL THEN
        DELETE FROM webhook.filters f WHERE f.provider = p AND f.consumer = c;
        RETURN false;
    END IF;
    IF pg_catalog.cardinality(webhook_set_filter.event_types) NOT BETWEEN 1 AND 1000
       OR pg_catalog.array_position(webhook_set_filter.event_types, NULL) IS NOT NULL
       OR EXISTS (SELECT FROM pg_catalog.unnest(webhook_set_filter.event_types) t
                   WHERE t = '' OR pg_catalog.octet_length(t) > 255) THEN
        RAISE EXCEPTION 'webhook_set_filter: argument "event_types" must hold 1 to 1000 types of 1 to 255 bytes'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF pg_catalog.octet_length(webhook_set_filter.payload_path::text) > 4096 THEN
        RAISE EXCEPTION 'webhook_set_filter: argument "payload_path" must be at most 4096 bytes'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- Signed material only: whoever controls what the signature does not
    -- cover could pick which events are dropped.
    IF webhook_set_filter.event_types IS NOT NULL
       AND NOT @extschema@.webhook_source_signed(registered.scheme, registered.event_type_from) THEN
        RAISE EXCEPTION 'webhook_set_filter: argument "event_types": provider "%" reads the event type from %, which its scheme "%" does not sign',
                p, registered.event_type_from, registered.scheme
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = CASE WHEN @extschema@.webhook_source_signed(registered.scheme, 'body:')
                              THEN 'Filter on what the signed body says instead, with payload_path.'
                              ELSE 'This scheme signs no body a filter could read either: filter in the handler.' END;
    END IF;
    IF webhook_set_filter.payload_path IS NOT NULL
       AND NOT @extschema@.webhook_source_signed(registered.scheme, 'body:') THEN
        RAISE EXCEPTION 'webhook_set_filter: argument "payload_path": the signature of provider "%" (scheme "%") does not vouch for the body',
                p, registered.scheme
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'SELECT body_covered FROM webhook_schemes() says what each scheme signs; only a digest of the body may be filtered on.';
    END IF;
    INSERT INTO webhook.filters AS f (provider, consumer, event_types, payload_path)
    VALUES (p, c, webhook_set_filter.event_types, webhook_set_filter.payload_path)
    ON CONFLICT ON CONSTRAINT filters_pkey DO UPDATE
       SET event_types = EXCLUDED.event_types, payload_path = EXCLUDED.payload_path,
           set_at = pg_catalog.now(), set_by = SESSION_USER;
    RETURN true;
END
$$;
COMMENT ON FUNCTION @extschema@.webhook_set_filter(text, text, text[], jsonpath) IS
    'For operators: let a provider (or one of its inbox consumers) take only the event types listed and/or bodies matching a JSON path; refused where the signature does not cover what the filter reads; with neither, remove the filter';

SELECT pg_catalog.set_config('search_path', '@extschema@, pg_temp', true);
