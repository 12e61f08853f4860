-- pg_webhook_inbox, portable edition: webhook_receive (the compiled
-- edition's src/receive/, src/sources.rs, src/schemes/handshake.rs), in
-- PL/pgSQL: verify with the provider's registered scheme and secrets,
-- read the event id and type where the provider puts them, bind what the
-- signature does not vouch for, filter, claim, and say what to answer.

-- Bound to pg_catalog while this file runs (see schema.sql).
SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);

-- A W3C traceparent, as the compiled edition checks it (src/trace.rs).
CREATE FUNCTION webhook._traceparent(fn text, value text) RETURNS text
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF value IS NOT NULL AND NOT (
           octet_length(value) BETWEEN 55 AND 512
           AND (octet_length(value) = 55 OR (left(value, 2) <> '00' AND substr(value, 56, 1) = '-'))
           AND substr(value, 1, 55) ~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}'
           AND left(value, 2) <> 'ff'
           AND substr(value, 4, 32) !~ '^0+$' AND substr(value, 37, 16) !~ '^0+$') THEN
        PERFORM webhook._raise('22023', format('%s: argument "traceparent" must be a W3C traceparent: 00-<32 hex digits>-<16 hex digits>-<2 hex digits>, lowercase, neither id all zeros', fn));
    END IF;
    RETURN value;
END
$$;

-- A provider as webhook_receive reads it: the registry's row, its scheme
-- parsed, its window, and its active keys newest first, each public one
-- as read when it was registered (webhook._public_keys).
CREATE TYPE webhook._registered AS (
    scheme          webhook._scheme,
    tolerance       bigint,
    event_id_from   text,
    event_type_from text,
    secrets         text[],
    keys            webhook._key[],
    fingerprints    text[],
    inbox           boolean,
    entity_key_from text,
    order_from      text
);

CREATE FUNCTION webhook._registered(fn text, name text) RETURNS webhook._registered
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    p webhook._registered;
    r record;
BEGIN
    SELECT x.scheme, date_part('epoch', x.tolerance)::int8 AS tolerance, x.event_id_from, x.event_type_from,
           x.inbox, x.entity_key_from, x.order_from,
           array_agg(s.secret ORDER BY s.added_at DESC) FILTER (WHERE s.secret IS NOT NULL AND s.retired_at IS NULL) AS secrets,
           array_agg(k.key ORDER BY s.added_at DESC) FILTER (WHERE s.secret IS NOT NULL AND s.retired_at IS NULL) AS keys,
           array_agg(s.fingerprint ORDER BY s.added_at DESC) FILTER (WHERE s.secret IS NOT NULL AND s.retired_at IS NULL) AS fingerprints
      INTO r
      FROM webhook.providers x
      LEFT JOIN webhook.provider_secrets s ON s.provider = x.name
      -- Read for the scheme the provider has now (a copy a restore left
      -- is the same row again).
      LEFT JOIN LATERAL (SELECT ROW(pk.kind, pk.bytes, pk.nums, pk.name)::webhook._key AS key
                           FROM webhook._public_keys pk
                          WHERE pk.provider = s.provider AND pk.fingerprint = s.fingerprint AND pk.scheme = x.scheme
                          LIMIT 1) k ON true
     WHERE x.name = _registered.name
     GROUP BY x.name;
    IF NOT FOUND THEN
        PERFORM webhook._raise('42704', format('%s: argument "provider": no provider "%s" is registered', fn, name),
            NULL, 'Register it first: SELECT * FROM webhook_register_provider(''<name>'', secret => ''...'').');
    END IF;
    p.scheme := webhook._parse_scheme(fn, 'provider', r.scheme);
    p.tolerance := coalesce(r.tolerance, (p.scheme).tolerance, 0);
    p.event_id_from := r.event_id_from;
    p.event_type_from := r.event_type_from;
    p.secrets := coalesce(r.secrets, '{}');
    p.keys := coalesce(r.keys, '{}');
    p.fingerprints := coalesce(r.fingerprints, '{}');
    p.inbox := coalesce(r.inbox, false);
    p.entity_key_from := r.entity_key_from;
    p.order_from := r.order_from;
    RETURN p;
END
$$;

-- The headers that carry a scheme's signature, in the order they are
-- read: the first present one is archived with the delivery.
CREATE FUNCTION webhook._signature_headers(s webhook._scheme) RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE (s).kind
    WHEN 'stripe' THEN '{stripe-signature}'
    WHEN 'github' THEN '{x-hub-signature-256}'
    WHEN 'standard' THEN '{webhook-signature,svix-signature}'
    WHEN 'paddle' THEN '{paddle-signature}'
    WHEN 'shopify' THEN '{x-shopify-hmac-sha256,shopify-hmac-sha256}'
    WHEN 'slack' THEN '{x-slack-signature}'
    WHEN 'discord' THEN '{x-signature-ed25519}'
    WHEN 'telnyx' THEN '{telnyx-signature-ed25519}'
    WHEN 'aws_sns' THEN '{}'
    WHEN 'adyen' THEN '{}'
    WHEN 'sendgrid' THEN '{x-twilio-email-event-webhook-signature}'
    WHEN 'paypal' THEN '{paypal-transmission-sig}'
    WHEN 'twilio' THEN '{x-twilio-signature}'
    WHEN 'square' THEN '{x-square-hmacsha256-signature}'
    WHEN 'zoom' THEN '{x-zm-signature}'
    WHEN 'twitch' THEN '{twitch-eventsub-message-signature}'
    WHEN 'mailgun' THEN '{}'
    WHEN 'linear' THEN '{linear-signature}'
    WHEN 'hubspot' THEN '{x-hubspot-signature-v3}'
    WHEN 'calendly' THEN '{calendly-webhook-signature}'
    WHEN 'workos' THEN '{workos-signature}'
    WHEN 'zendesk' THEN '{x-zendesk-webhook-signature}'
    -- The token is the secret: never archived as the signature.
    WHEN 'token' THEN '{}'
    ELSE ARRAY[lower((s).header)]
END;

-- Request headers as archived: none past 64 kB; the values of the
-- headers webhook.redact_headers names replaced.
CREATE FUNCTION webhook._archived_headers(headers jsonb) RETURNS jsonb
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    redact text[] := ARRAY(
        SELECT lower(btrim(name))
          FROM unnest(string_to_array(coalesce(webhook._setting_text('webhook.redact_headers'),
              'authorization, proxy-authorization, cookie, set-cookie, x-api-key, api-key, x-auth-token, x-access-token, x-csrf-token'), ',')) AS name
         WHERE btrim(name) <> '');
BEGIN
    IF pg_column_size(headers) - 4 > 65536 THEN
        RETURN NULL;
    END IF;
    IF jsonb_typeof(headers) <> 'object'
       OR NOT EXISTS (SELECT FROM jsonb_object_keys(headers) k WHERE lower(k) = ANY (redact)) THEN
        RETURN headers;
    END IF;
    RETURN (SELECT jsonb_object_agg(k, CASE WHEN lower(k) = ANY (redact) THEN '"[redacted]"'::jsonb ELSE v END)
              FROM jsonb_each(headers) AS e(k, v));
END
$$;

-- Archive a refused delivery with its reason, bounded: a prefix of the
-- body with its size and SHA-256, headers and signature of a real
-- request's size at most.
CREATE FUNCTION webhook._reject(provider text, body bytea, signature text, headers jsonb, reason text,
                                http_status integer, event_id text DEFAULT NULL)
RETURNS webhook.receive_result
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    id uuid := webhook._new_id();
BEGIN
    INSERT INTO webhook.delivery_log
        (id, provider, event_id, raw_body, signature, headers, claim_status, reject_reason, body_size, body_sha256)
    VALUES (id, provider, event_id,
            substr(body, 1, greatest(webhook._setting_in('webhook.rejected_body_limit', 'B', 4096)::integer, 0)),
            CASE WHEN octet_length(signature) <= 1024 THEN signature END,
            CASE WHEN pg_column_size(headers) - 4 <= 8192 THEN headers END,
            'rejected', reason, length(body), sha256(body));
    RETURN ROW(id, false, 'rejected', 0, NULL, http_status, reason, NULL, NULL, NULL, NULL, NULL)::webhook.receive_result;
END
$$;

-- The body as the scheme's provider sends it: one event (an object), a
-- batch (a non-empty array), or form fields (an object of strings); NULL
-- for anything else.
CREATE FUNCTION webhook._document(s webhook._scheme, body bytea) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    document jsonb := webhook._json_or_null(body);
    interaction jsonb;
BEGIN
    IF jsonb_typeof(document) = 'object'
       OR (s).body = 'batch' AND jsonb_typeof(document) = 'array' AND jsonb_array_length(document) > 0 THEN
        RETURN document;
    END IF;
    IF (s).body NOT IN ('form', 'form_or_payload') THEN
        RETURN NULL;
    END IF;
    BEGIN
        document := coalesce((SELECT jsonb_object_agg(convert_from(f.name, 'UTF8'), convert_from(f.value, 'UTF8') ORDER BY f.n)
                           FROM (SELECT webhook._percent_decode(p.name) AS name,
                                        webhook._percent_decode(p.value) AS value, p.n
                                   FROM webhook._form_pairs(body) p) f),
                        '{}');
    EXCEPTION WHEN character_not_in_repertoire OR untranslatable_character THEN
        RETURN NULL;
    END;
    -- A form whose one field is `payload` is the JSON object it holds
    -- (Slack's interactivity; src/sources.rs).
    IF (s).body = 'form_or_payload' AND document ? 'payload' AND
       (SELECT count(*) FROM jsonb_object_keys(document)) = 1 THEN
        interaction := webhook._json_or_null(convert_to(document ->> 'payload', 'UTF8'));
        RETURN CASE WHEN jsonb_typeof(interaction) = 'object' THEN interaction END;
    END IF;
    RETURN document;
END
$$;

-- A value read off a delivery, and whether its signature covers it.
CREATE TYPE webhook._sourced AS (value text, signed boolean);

-- Where a provider puts a value (src/sources.rs): the first present
-- signed alternative wins; only if none is present, the first present
-- unsigned one. A header the scheme signs in another family than the one
-- verified is not read at all: a relay added it.
CREATE FUNCTION webhook._extract(source text, h jsonb, s webhook._scheme, covered text[], document jsonb)
RETURNS webhook._sourced
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    alternative text;
    name  text;
    value text;
    first webhook._sourced;
BEGIN
    FOREACH alternative IN ARRAY string_to_array(source, '|') LOOP
        value := NULL;
        IF alternative LIKE 'header:%' THEN
            name := translate(substr(alternative, 8), 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz');
            CONTINUE WHEN NOT name = ANY (covered) AND name = ANY ((s).headers_covered);
            value := nullif(h ->> name, '');
            CONTINUE WHEN value IS NULL;
            IF name = ANY (covered) THEN
                RETURN ROW(value, true);
            END IF;
            first := coalesce(first, ROW(value, false)::webhook._sourced);
        ELSIF alternative LIKE 'body:%' THEN
            value := webhook._body_value(document, substr(alternative, 6));
            CONTINUE WHEN value IS NULL;
            IF (s).body_covered = 'digest' THEN
                RETURN ROW(value, true);
            END IF;
            first := coalesce(first, ROW(value, false)::webhook._sourced);
        END IF;
    END LOOP;
    RETURN first;
END
$$;

-- An endpoint check, verified like any delivery and recognised only from
-- the signed body (src/schemes/handshake.rs): its kind, what to answer,
-- and the answer's content type; NULL for an event.
CREATE TYPE webhook._handshake AS (kind text, response text, content_type text);

CREATE FUNCTION webhook._handshake(s webhook._scheme, document jsonb, key bytea) RETURNS webhook._handshake
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    plain text;
BEGIN
    -- Each answer cast to its type: a ROW of bare literals is of unknown
    -- types, which PL/pgSQL refuses to return as this composite (42804).
    IF jsonb_typeof(document) <> 'object' THEN
        RETURN NULL;
    END IF;
    IF (s).kind = 'slack' AND document ->> 'type' = 'url_verification' AND jsonb_typeof(document -> 'type') = 'string' THEN
        IF jsonb_typeof(document -> 'challenge') = 'string' AND document ->> 'challenge' <> '' THEN
            RETURN ROW('url_verification', '{"challenge":' || to_json(document ->> 'challenge') || '}',
                       'application/json')::webhook._handshake;
        END IF;
    ELSIF (s).kind = 'slack' AND jsonb_typeof(document -> 'ssl_check') = 'string' AND document ->> 'ssl_check' = '1' THEN
        -- Slack's SSL check (a form): a 200 is all it wants. No event.
        RETURN ROW('ssl_check', '', 'text/plain')::webhook._handshake;
    ELSIF (s).kind = 'zoom' AND jsonb_typeof(document -> 'event') = 'string'
          AND document ->> 'event' = 'endpoint.url_validation' THEN
        plain := CASE WHEN jsonb_typeof(document #> '{payload,plainToken}') = 'string'
                      THEN nullif(document #>> '{payload,plainToken}', '') END;
        IF plain IS NOT NULL AND key IS NOT NULL THEN
            -- Compact, keys in order: as the compiled edition writes it.
            RETURN ROW('endpoint.url_validation',
                       '{"encryptedToken":' || to_json(encode(webhook._hmac(convert_to(plain, 'UTF8'), key, 'sha256'), 'hex'))
                       || ',"plainToken":' || to_json(plain) || '}',
                       'application/json')::webhook._handshake;
        END IF;
    ELSIF (s).kind = 'twitch' AND document ? 'challenge' THEN
        IF jsonb_typeof(document -> 'challenge') = 'string' AND document ->> 'challenge' <> '' THEN
            RETURN ROW('webhook_callback_verification', document ->> 'challenge', 'text/plain')::webhook._handshake;
        END IF;
    ELSIF (s).kind = 'twitch' AND document ? 'subscription' AND NOT document ? 'event' THEN
        RETURN ROW('revocation', '', 'text/plain')::webhook._handshake;
    ELSIF (s).kind = 'aws_sns' AND document ->> 'Type' IN ('SubscriptionConfirmation', 'UnsubscribeConfirmation')
          AND jsonb_typeof(document -> 'Type') = 'string' THEN
        -- Confirmed by visiting its SubscribeURL, which the database does
        -- not do: archived, answered 200 (src/schemes/handshake.rs).
        RETURN ROW(CASE document ->> 'Type' WHEN 'SubscriptionConfirmation' THEN 'subscription_confirmation'
                                            ELSE 'unsubscribe_confirmation' END,
                   '', 'text/plain')::webhook._handshake;
    ELSIF (s).kind = 'discord' AND jsonb_typeof(document -> 'type') = 'number' AND document ->> 'type' = '1' THEN
        -- A PING (type 1, an integer) is answered with a PONG.
        RETURN ROW('ping', '{"type":1}', 'application/json')::webhook._handshake;
    END IF;
    RETURN NULL;
END
$$;

-- Bind a delivery's signed bytes (their SHA-256, `digest`) to the one
-- delivery they may vouch for (src/receive/bindings.rs): bound (NULL),
-- 'busy' (another open transaction is binding them), or 'replayed'. A
-- binding found committed decides without a lock; a new one is made
-- under the signed bytes' lock, tried (claims) or waited for (inbox).
CREATE FUNCTION webhook._bind(fn text, provider text, digest bytea, event_id text, body_digest bytea, wait boolean)
RETURNS text
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    bound record;
    key   bigint := webhook._lock_key('signed', provider, encode(digest, 'hex'));
BEGIN
    SELECT b.event_id, b.body_digest INTO bound
      FROM webhook.signature_bindings b WHERE b.provider = _bind.provider AND b.digest = _bind.digest;
    IF NOT FOUND OR (bound.body_digest IS NULL AND body_digest IS NOT NULL AND bound.event_id = event_id) THEN
        IF wait THEN
            PERFORM pg_advisory_xact_lock(key);
        ELSIF NOT webhook._try_lock(fn, key) THEN
            RETURN 'busy';
        END IF;
        SELECT b.event_id, b.body_digest INTO bound
          FROM webhook.signature_bindings b WHERE b.provider = _bind.provider AND b.digest = _bind.digest;
        IF NOT FOUND THEN
            INSERT INTO webhook.signature_bindings (provider, digest, event_id, body_digest)
            VALUES (provider, digest, event_id, body_digest)
            ON CONFLICT ON CONSTRAINT signature_bindings_pkey DO NOTHING;
            RETURN NULL;
        END IF;
        IF bound.body_digest IS NULL AND body_digest IS NOT NULL AND bound.event_id = event_id THEN
            -- Bound by id only: the first body seen since is the one.
            UPDATE webhook.signature_bindings b SET body_digest = _bind.body_digest
             WHERE b.provider = _bind.provider AND b.digest = _bind.digest AND b.body_digest IS NULL;
            RETURN NULL;
        END IF;
    END IF;
    IF bound.event_id IS DISTINCT FROM event_id OR bound.body_digest IS DISTINCT FROM body_digest THEN
        RETURN 'replayed';
    END IF;
    RETURN NULL;
END
$$;

-- Note that a key verified a delivery, at most once a minute, never
-- waiting for a transaction that noted it already.
CREATE FUNCTION webhook._secret_used(provider text, fingerprint text) RETURNS void
LANGUAGE sql VOLATILE
BEGIN ATOMIC
    WITH touched AS (
        UPDATE webhook.secret_uses u
           SET last_used_at = now()
         WHERE u.ctid = (SELECT t.ctid FROM webhook.secret_uses t
                          WHERE t.provider = _secret_used.provider AND t.fingerprint = _secret_used.fingerprint
                            AND (t.last_used_at IS NULL OR t.last_used_at < now() - interval '1 minute')
                            FOR UPDATE SKIP LOCKED)
    )
    INSERT INTO webhook.secret_uses (provider, fingerprint, last_used_at)
    SELECT _secret_used.provider, _secret_used.fingerprint, now()
     WHERE NOT EXISTS (SELECT FROM webhook.secret_uses t
                        WHERE t.provider = _secret_used.provider AND t.fingerprint = _secret_used.fingerprint)
    ON CONFLICT ON CONSTRAINT secret_uses_pkey DO NOTHING;
END;

-- A provider's filter (sql/filters.sql), judged on what the delivery's
-- signature covers only: the reason the provider does not take the
-- event, or NULL.
CREATE FUNCTION webhook._filtered_out(provider text, event_type text, type_signed boolean,
                                      payload jsonb, body_signed boolean)
RETURNS text
LANGUAGE sql STABLE
BEGIN ATOMIC
    SELECT CASE WHEN type_signed AND f.event_types IS NOT NULL AND NOT event_type = ANY (f.event_types)
                    THEN format('event type %s is not among the filter''s event_types', event_type)
                WHEN body_signed AND f.payload_path IS NOT NULL
                     AND NOT coalesce(jsonb_path_match(payload, f.payload_path, '{}', true), false)
                    THEN format('the body does not match the filter''s payload_path %s', f.payload_path)
           END
      FROM webhook.filters f
     WHERE f.provider = _filtered_out.provider AND coalesce(f.consumer, '') = ''
     LIMIT 1;
END;

-- A new event the provider's filter does not take: kept filtered for
-- good; an event seen before is claimed (answered) as usual.
CREATE FUNCTION webhook._filter_out(fn text, provider text, event_id text, event_type text, payload jsonb,
                                    raw_body bytea, signature text, headers jsonb, lease interval,
                                    order_at webhook._order, verified_by text, reason text)
RETURNS webhook._outcome
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    id uuid;
BEGIN
    IF webhook._try_lock(fn, webhook._lock_key(provider, event_id)) THEN
        id := webhook._new_id();
        INSERT INTO webhook.events
            (provider, event_id, event_type, status, attempts, claim_id, payload_hash, last_error, processed_at)
        VALUES (provider, event_id, event_type, 'filtered', 0, id, sha256(convert_to(payload::text, 'UTF8')),
                reason, now())
        ON CONFLICT ON CONSTRAINT events_pkey DO NOTHING;
        IF FOUND THEN
            PERFORM webhook._archive(id, provider, event_id, event_type, payload, raw_body, signature, headers,
                                     'filtered', false, verified_by, reason);
            RETURN ROW(id, 'filtered', 0, NULL, false)::webhook._outcome;
        END IF;
    END IF;
    RETURN webhook._claim(fn, provider, event_id, event_type, payload, raw_body, signature, headers, lease,
                          order_at.entity_key, order_at.value, verified_by);
END
$$;

-- webhook_receive (src/receive/mod.rs, flow), top to bottom.
CREATE FUNCTION webhook._receive(provider text, headers jsonb, body bytea, lease interval, inbox boolean,
                                 url text, traceparent text)
RETURNS webhook.receive_result
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    fn CONSTANT text := 'webhook_receive';
    p          webhook._registered;
    queued     boolean;
    h          jsonb;
    archived   jsonb;
    signature  text;
    verdict    webhook._verdict;
    verified_by text;
    document   jsonb;
    handshake  webhook._handshake;
    id         uuid;
    event_id   webhook._sourced;
    event_type webhook._sourced;
    order_at   webhook._order;
    unordered  boolean := false;
    body_digest bytea;
    bound      text;
    reason     text;
    outcome    webhook._outcome;
BEGIN
    PERFORM webhook._required_text(fn, 'provider', provider, 64);
    PERFORM webhook._required(fn, 'headers', headers);
    PERFORM webhook._required(fn, 'body', body);
    PERFORM webhook._payload_size(fn, 'body', length(body));
    PERFORM webhook._url(fn, 'url', url);
    PERFORM webhook._check_scope(fn, 'provider', provider);
    p := webhook._registered(fn, provider);
    queued := coalesce(inbox, p.inbox);
    IF webhook._setting_in('webhook.slot', '', -1)::integer >= 0 OR webhook._setting_in('webhook.slots', '', 0)::integer <> 0 THEN
        PERFORM webhook._raise('0A000',
            format('%s: this database is set up as a slot of a tier (webhook.slot, webhook.slots), which only the compiled edition of pg_webhook_inbox routes', fn),
            NULL, 'A tier of databases needs PL/Proxy and the compiled edition on every slot (docs/scale-out.md).');
    END IF;

    h := webhook._headers(headers);
    SELECT h ->> s.name INTO signature
      FROM unnest(webhook._signature_headers(p.scheme)) WITH ORDINALITY AS s(name, n)
     WHERE h ->> s.name IS NOT NULL
     ORDER BY s.n LIMIT 1;
    signature := CASE WHEN octet_length(signature) <= 8192 THEN signature END;
    IF h IS NULL THEN
        RETURN webhook._reject(provider, body, signature, NULL, 'malformed_header', 401);
    END IF;
    archived := webhook._archived_headers(headers);
    IF (p.scheme).kind = 'token' AND jsonb_typeof(archived) = 'object'
       AND EXISTS (SELECT FROM jsonb_object_keys(archived) k WHERE lower(k) = lower((p.scheme).header)) THEN
        -- The shared token's header holds the secret itself (src/receive/headers.rs).
        archived := (SELECT jsonb_object_agg(a.key, CASE WHEN lower(a.key) = lower((p.scheme).header)
                                                         THEN to_jsonb('[redacted]'::text) ELSE a.value END)
                       FROM jsonb_each(archived) a);
    END IF;

    -- Verify.
    verdict := webhook._authenticate(fn, p.scheme, headers, body, url, p.secrets, p.keys, p.tolerance,
                                     floor(extract(epoch FROM clock_timestamp()))::bigint);
    IF verdict.reason <> 'ok' THEN
        RETURN webhook._reject(provider, body, signature, archived, verdict.reason, 401);
    END IF;
    verified_by := p.fingerprints[verdict.secret];
    IF verified_by IS NOT NULL THEN
        PERFORM webhook._secret_used(provider, verified_by);
    END IF;

    -- An endpoint check in the headers alone (Okta's, a GET with no
    -- body): answered before the body is read, archived with an empty
    -- payload (src/schemes/handshake.rs, recognise_headers).
    IF (p.scheme).name = 'okta' AND coalesce(h ->> 'x-okta-verification-challenge', '') <> '' THEN
        handshake := ROW('verification', '{"verification":' || to_json(h ->> 'x-okta-verification-challenge') || '}',
                         'application/json')::webhook._handshake;
        document := '{}';
    ELSE
        -- Read.
        document := webhook._document(p.scheme, body);
        IF document IS NULL THEN
            RETURN webhook._reject(provider, body, signature, archived, 'malformed_body', 400);
        END IF;
        handshake := webhook._handshake(p.scheme, document, webhook._hmac_key(p.scheme, p.secrets[verdict.secret]));
    END IF;
    IF handshake IS NOT NULL THEN
        id := webhook._new_id();
        INSERT INTO webhook.delivery_log
            (id, provider, event_type, payload, raw_body, signature, headers, claim_status, secret_fingerprint)
        VALUES (id, provider, handshake.kind, document, body, signature, archived, 'handshake', verified_by);
        RETURN ROW(id, false, 'handshake', 0, NULL, 200, 'handshake', NULL, handshake.kind, true,
                   handshake.response, handshake.content_type)::webhook.receive_result;
    END IF;
    event_id := webhook._extract(p.event_id_from, h, p.scheme, verdict.covered, document);
    event_type := webhook._extract(p.event_type_from, h, p.scheme, verdict.covered, document);
    IF event_id IS NULL THEN
        RETURN webhook._reject(provider, body, signature, archived, 'missing_event_id', 400);
    END IF;
    IF event_type IS NULL THEN
        RETURN webhook._reject(provider, body, signature, archived, 'missing_event_type', 400);
    END IF;
    IF octet_length(event_id.value) > 255 OR octet_length(event_type.value) > 255 THEN
        RETURN webhook._reject(provider, body, signature, archived, 'malformed_event_id', 400);
    END IF;
    IF p.entity_key_from IS NOT NULL THEN
        order_at := webhook._order_of(p.entity_key_from, p.order_from, document);
        unordered := order_at IS NULL;
    END IF;

    -- Bind the signed bytes to the one delivery they may vouch for; a
    -- shared token signs nothing, and has none (src/receive/mod.rs).
    body_digest := CASE WHEN (p.scheme).body_covered <> 'digest' THEN sha256(body) END;
    IF (p.scheme).kind <> 'token' AND (NOT event_id.signed OR body_digest IS NOT NULL) THEN
        bound := webhook._bind(fn, provider,
                               sha256(verdict.prefix || CASE WHEN verdict.body_signed THEN body ELSE '\x' END
                                      || verdict.suffix),
                               event_id.value, body_digest, queued);
        IF bound = 'busy' THEN
            -- Another open transaction is receiving these very bytes.
            id := webhook._new_id();
            PERFORM webhook._archive(id, provider, event_id.value, event_type.value, document, body, signature,
                                     archived, 'in_progress', false, verified_by, NULL);
            outcome := ROW(id, 'in_progress', 0, NULL, false);
        ELSIF bound = 'replayed' THEN
            RETURN webhook._reject(provider, body, signature, archived, 'replayed', 401, event_id.value);
        END IF;
    END IF;

    IF outcome IS NULL THEN
        -- Filter, on what the signature covers; then claim, or queue.
        IF queued THEN
            outcome := webhook._enqueue_received(fn, provider, event_id, event_type, document, body, signature,
                                                 archived, order_at, verified_by,
                                                 (p.scheme).body_covered = 'digest', traceparent);
        ELSE
            reason := webhook._filtered_out(provider, event_type.value, event_type.signed, document,
                                            (p.scheme).body_covered = 'digest');
            outcome := CASE WHEN reason IS NOT NULL
                THEN webhook._filter_out(fn, provider, event_id.value, event_type.value, document, body, signature,
                                         archived, lease, order_at, verified_by, reason)
                ELSE webhook._claim(fn, provider, event_id.value, event_type.value, document, body, signature,
                                    archived, lease, order_at.entity_key, order_at.value, verified_by)
            END;
        END IF;
    END IF;
    RETURN ROW(outcome.id, outcome.status IN ('claimed', 'retry'), outcome.status, outcome.attempts, outcome.result,
               CASE WHEN outcome.status = 'in_progress' THEN 409 ELSE 200 END,
               CASE WHEN outcome.tie THEN 'tie' WHEN outcome.status = 'stale' THEN 'older'
                    WHEN outcome.status = 'filtered' THEN 'filtered' WHEN unordered THEN 'unordered' ELSE 'ok' END,
               event_id.value, event_type.value, event_type.signed, NULL, NULL)::webhook.receive_result;
END
$$;

CREATE FUNCTION @extschema@.webhook_receive(provider text, headers jsonb, body bytea, lease interval DEFAULT NULL,
                                            inbox boolean DEFAULT NULL, url text DEFAULT NULL,
                                            complete_on_commit boolean DEFAULT false, traceparent text DEFAULT NULL)
RETURNS webhook.receive_result
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    fn CONSTANT text := 'webhook_receive';
    checked text := webhook._traceparent(fn, traceparent);
BEGIN
    IF pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('webhook_receive');
    END IF;
    RETURN webhook._receive(provider, headers, body, webhook._claim_lease(fn, lease, complete_on_commit), inbox, url,
                            checked);
END
$$;

CREATE FUNCTION @extschema@.webhook_receive(provider text, headers jsonb, body text, lease interval DEFAULT NULL,
                                            inbox boolean DEFAULT NULL, url text DEFAULT NULL,
                                            complete_on_commit boolean DEFAULT false, traceparent text DEFAULT NULL)
RETURNS webhook.receive_result
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
RETURN @extschema@.webhook_receive(provider, headers, convert_to(body, 'UTF8'), lease, inbox, url,
                                   complete_on_commit, traceparent);

SELECT pg_catalog.set_config('search_path', '@extschema@, pg_temp', true);
