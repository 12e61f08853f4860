-- pg_webhook_inbox, portable edition: claims and their finishing (the
-- compiled edition's src/claim/, src/lifecycle.rs, src/ordering.rs,
-- src/scopes.rs, src/archive.rs), in PL/pgSQL.
--
-- The rules are the compiled edition's, statement for statement: one
-- event row per (provider, event_id), written only under the event's
-- lock, which a claim tries without waiting; a finishing call changes
-- the event only where it is still this delivery's (the fence). Where
-- the compiled edition releases an event's lock on finding the event
-- finished, PL/pgSQL cannot release a transaction's lock: a claim reads
-- the committed state first, and one that needs no lock to be answered
-- takes none.

-- Bound to pg_catalog while this file runs (see schema.sql).
SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);

-- What a claim tells its caller, and whether an ordered event tied with
-- its entity's watermark.
CREATE TYPE webhook._outcome AS (id uuid, status text, attempts integer, result jsonb, tie boolean);

-- What a delivery of an event is answered, from its committed state:
-- duplicate, dead, in_progress, or NULL when the delivery may take the
-- event over. `held_elsewhere`: another transaction holds the event's
-- lock. The same decision as the compiled edition's answer! macro.
CREATE FUNCTION webhook._answer(status webhook.event_status, lease timestamptz, held_elsewhere boolean)
RETURNS text
LANGUAGE sql VOLATILE PARALLEL SAFE
RETURN CASE WHEN status IS NULL THEN 'in_progress'
            WHEN status = 'dead' THEN 'dead'
            WHEN status::text IN ('processed', 'queued', 'stale', 'filtered') THEN 'duplicate'
            WHEN status IN ('processing', 'failed') THEN
                CASE WHEN held_elsewhere OR (status = 'processing' AND lease > clock_timestamp())
                     THEN 'in_progress' END
       END;

-- The role the session acts as: the login role, or the one SET ROLE set
-- (SECURITY DEFINER changes the current user, not the role setting).
CREATE FUNCTION webhook._session_role() RETURNS name
LANGUAGE sql STABLE
RETURN CASE WHEN current_setting('role') = 'none' THEN session_user ELSE current_setting('role')::name END;

-- The session's role when some scope binds it (src/scopes.rs): it, or a
-- role it inherits from, is scoped, and it is no superuser; NULL when no
-- scope binds it (with no scope anywhere, one look at an empty table).
CREATE FUNCTION webhook._scoped_role() RETURNS name
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    acting name;
BEGIN
    IF NOT EXISTS (SELECT FROM webhook.app_scopes) THEN
        RETURN NULL;
    END IF;
    acting := webhook._session_role();
    IF (SELECT r.rolsuper FROM pg_roles r WHERE r.rolname = acting)
       OR NOT EXISTS (SELECT FROM webhook.app_scopes s WHERE pg_has_role(acting, s.role, 'USAGE')) THEN
        RETURN NULL;
    END IF;
    RETURN acting;
END
$$;

-- What the scopes binding a role allow, in words: "providers stripe,
-- paddle (consumers billing)" for each, joined by "; or ".
CREATE FUNCTION webhook._scopes_allowed(acting name) RETURNS text
LANGUAGE sql STABLE
BEGIN ATOMIC
    SELECT string_agg(format('providers %s (%s)', array_to_string(s.providers, ', '),
                             CASE WHEN s.consumers IS NULL THEN 'every consumer'
                                  ELSE 'consumers ' || array_to_string(s.consumers, ', ') END),
                      '; or ' ORDER BY s.scoped_at, s.role)
      FROM webhook.app_scopes s WHERE pg_has_role(acting, s.role, 'USAGE');
END;

-- Refuse `provider` unless the session's role may use its events.
CREATE FUNCTION webhook._check_scope(fn text, arg text, provider text) RETURNS void
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    acting name := webhook._scoped_role();
BEGIN
    IF acting IS NULL
       OR EXISTS (SELECT FROM webhook.app_scopes s
                   WHERE pg_has_role(acting, s.role, 'USAGE') AND provider = ANY (s.providers)) THEN
        RETURN;
    END IF;
    PERFORM webhook._raise('42501',
        format('%s: argument "%s": role "%s" may not use provider "%s"', fn, arg, acting, provider),
        format('Its scope allows %s.', webhook._scopes_allowed(acting)),
        'A DBA sets application roles'' scopes with webhook_scope_app(role, providers, consumers); webhook.app_scopes lists them.');
END
$$;

-- The value at a dotted path of a JSON document, as text: a non-empty
-- string as it is, a number in its JSON digits; NULL for anything else.
-- Array elements are reached by position (`0.sg_event_id`).
CREATE FUNCTION webhook._body_value(document jsonb, path text) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
DECLARE
    node jsonb := document;
    key  text;
BEGIN
    FOREACH key IN ARRAY string_to_array(path, '.') LOOP
        IF jsonb_typeof(node) = 'array' THEN
            IF key !~ '^[0-9]{1,9}$' THEN
                RETURN NULL;
            END IF;
            node := node -> key::integer;
        ELSIF jsonb_typeof(node) = 'object' THEN
            node := node -> key;
        ELSE
            RETURN NULL;
        END IF;
        IF node IS NULL THEN
            RETURN NULL;
        END IF;
    END LOOP;
    RETURN CASE jsonb_typeof(node)
               WHEN 'string' THEN nullif(node #>> '{}', '')
               WHEN 'number' THEN node::text
           END;
END
$$;

-- The first present body: alternative of a registry source.
CREATE FUNCTION webhook._first_in_body(source text, document jsonb) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
BEGIN ATOMIC
    SELECT webhook._body_value(document, substr(a.alternative, 6))
      FROM unnest(string_to_array(source, '|')) WITH ORDINALITY AS a(alternative, n)
     WHERE a.alternative LIKE 'body:%' AND webhook._body_value(document, substr(a.alternative, 6)) IS NOT NULL
     ORDER BY a.n
     LIMIT 1;
END;

-- An order value as a decimal number (src/ordering.rs, order_value): a
-- decimal as it is, an RFC 3339 timestamp as seconds since the epoch
-- with its fraction; NULL for anything else.
CREATE FUNCTION webhook._order_value(text text) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
DECLARE
    seconds  bigint;
    fraction text;
BEGIN
    IF octet_length(text) > 64 THEN
        RETURN NULL;
    END IF;
    IF text ~ '^-?[0-9]+(\.[0-9]+)?$' THEN
        RETURN text;
    END IF;
    seconds := webhook._rfc3339(text);
    IF seconds IS NULL THEN
        RETURN NULL;
    END IF;
    fraction := substring(text FROM '^.{19}\.([0-9]+)');
    IF fraction IS NULL OR fraction ~ '^0+$' AND seconds < 0 THEN
        RETURN seconds::text;
    END IF;
    RETURN (seconds + ('0.' || fraction)::numeric)::text;
END
$$;

-- Whether an order value lies at most `max_future` seconds past now, read
-- as a time in seconds, or past 10^11 milliseconds, past 10^14
-- microseconds, past 10^17 nanoseconds (src/ordering.rs, within_clock).
CREATE FUNCTION webhook._within_clock(value text, max_future integer) RETURNS boolean
LANGUAGE plpgsql VOLATILE PARALLEL SAFE
AS $$
DECLARE
    whole text := split_part(value, '.', 1);
    n     numeric;
BEGIN
    IF whole LIKE '-%' THEN
        RETURN true;
    END IF;
    IF whole !~ '^[0-9]{1,38}$' THEN
        RETURN false;
    END IF;
    n := whole::numeric;
    n := CASE WHEN n >= 1e17 THEN div(n, 1e9) WHEN n >= 1e14 THEN div(n, 1e6)
              WHEN n >= 1e11 THEN div(n, 1e3) ELSE n END;
    RETURN n <= greatest(floor(extract(epoch FROM clock_timestamp())), 0) + greatest(max_future, 0);
END
$$;

-- Where an event sits in its entity's order, for a provider registered
-- with ordering: read from the payload at the registry's paths.
CREATE TYPE webhook._order AS (entity_key text, value text);

-- The order of an event given to webhook_claim or webhook_enqueue, whose
-- caller verified it (src/ordering.rs, of_payload).
CREATE FUNCTION webhook._order_of_payload(provider text, payload jsonb) RETURNS webhook._order
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    p          record;
    order_at   webhook._order;
    max_future integer := webhook._setting_in('webhook.order_max_future', 's', 86400)::integer;
BEGIN
    SELECT r.entity_key_from, r.order_from INTO p FROM webhook.providers r WHERE r.name = provider;
    IF p.entity_key_from IS NULL THEN
        RETURN NULL;
    END IF;
    order_at := webhook._order_of(p.entity_key_from, p.order_from, payload);
    IF order_at.value IS NULL THEN
        RETURN NULL;
    END IF;
    IF NOT webhook._within_clock(order_at.value, max_future) THEN
        RAISE WARNING 'argument "payload": order value % of entity "%" lies more than webhook.order_max_future (% s) past the clock; the event is taken unordered (it neither waits for nor moves its entity''s watermark)',
            order_at.value, order_at.entity_key, max_future;
        RETURN NULL;
    END IF;
    RETURN order_at;
END
$$;

-- A body's entity key and order value at the registry's paths; NULL when
-- either is missing, the key is longer than 255 bytes, or the value is
-- neither a number nor an RFC 3339 timestamp.
CREATE FUNCTION webhook._order_of(entity_key_from text, order_from text, document jsonb) RETURNS webhook._order
LANGUAGE sql IMMUTABLE PARALLEL SAFE
BEGIN ATOMIC
    SELECT ROW(k.key, v.value)::webhook._order
      FROM (SELECT webhook._first_in_body(entity_key_from, document) AS key) k,
           (SELECT webhook._order_value(webhook._first_in_body(order_from, document)) AS value) v
     WHERE octet_length(k.key) <= 255 AND v.value IS NOT NULL;
END;

-- Why an event is skipped as stale: the one wording the archive, the
-- events and the inbox record (src/ordering.rs, stale_reason!).
CREATE FUNCTION webhook._stale_reason(order_value numeric, entity_key text, watermark numeric, set_by text)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN 'stale: order ' || order_value || ' of entity ' || entity_key
       || CASE WHEN watermark = order_value THEN ' is tied with' ELSE ' is older than' END
       || ' its watermark ' || watermark || ' (event ' || set_by || ')';

-- An event against its entity's committed watermark, locking nothing:
-- fresh (NULL), tie, or stale with the reason. A watermark this very
-- event set is no reason to skip it.
CREATE TYPE webhook._judged AS (verdict text, reason text);

CREATE FUNCTION webhook._judge(provider text, consumer text, event_id text, entity_key text, value text)
RETURNS webhook._judged
LANGUAGE sql STABLE
BEGIN ATOMIC
    SELECT CASE WHEN w.order_value > value::numeric THEN 'stale'
                WHEN w.order_value = value::numeric AND p.ties = 'stale' THEN 'stale_tie'
                WHEN w.order_value = value::numeric THEN 'tie'
           END,
           webhook._stale_reason(value::numeric, _judge.entity_key, w.order_value, w.event_id)
      FROM webhook.watermarks w
      LEFT JOIN webhook.providers p ON p.name = _judge.provider
     WHERE w.provider = _judge.provider AND w.consumer = _judge.consumer
       AND w.entity_key = _judge.entity_key AND w.event_id <> _judge.event_id;
END;

-- Move the watermark forward at a completion, under the watermark row's
-- lock; refused with 40001 when a newer event of the entity completed
-- first (or an equal one, where ties are stale), so that the caller's
-- business writes roll back instead of overwriting newer state. True
-- once moved, for callers that are expressions.
CREATE FUNCTION webhook._advance(fn text, id uuid, provider text, consumer text, event_id text,
                                 entity_key text, value text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    w record;
BEGIN
    INSERT INTO webhook.watermarks AS m (provider, consumer, entity_key, order_value, event_id)
    VALUES (provider, consumer, entity_key, value::numeric, event_id)
    ON CONFLICT ON CONSTRAINT watermarks_pkey DO UPDATE
       SET order_value = GREATEST(m.order_value, excluded.order_value),
           event_id = CASE WHEN excluded.order_value > m.order_value THEN excluded.event_id ELSE m.event_id END,
           updated_at = CASE WHEN excluded.order_value > m.order_value THEN now() ELSE m.updated_at END
    RETURNING m.order_value > value::numeric AS newer,
              m.order_value = value::numeric AND m.event_id <> _advance.event_id AS equal,
              m.order_value AS watermark, m.event_id AS set_by
         INTO w;
    IF w.newer OR (w.equal AND EXISTS (SELECT FROM webhook.providers p WHERE p.name = provider AND p.ties = 'stale')) THEN
        PERFORM webhook._raise('40001',
            format('%s: argument "id": the event of %s is stale: a newer event of its entity was processed first', fn, id),
            webhook._stale_reason(value::numeric, entity_key, w.watermark, w.set_by),
            'Roll back this transaction, as after any serialization failure: a newer event of the same entity was processed first. The event''s next delivery is answered "stale", and an inbox lease of it is parked as stale.');
    END IF;
    RETURN true;
END
$$;

-- The claims of this transaction that complete on commit: only they may
-- still be finished with their event already written as processed. Kept
-- sealed (webhook._state): a caller that could add a delivery here could
-- fail or rewrite an event processed long ago.
CREATE FUNCTION webhook._completes_here(id uuid) RETURNS boolean
LANGUAGE sql STABLE
RETURN strpos(coalesce(webhook._state('pg_webhook_inbox.completes_here'), ''), id::text) > 0;

-- Archive one delivery that reached a claim: one row, never updated.
CREATE FUNCTION webhook._archive(id uuid, provider text, event_id text, event_type text, payload jsonb,
                                 raw_body bytea, signature text, headers jsonb, status text,
                                 payload_mismatch boolean, verified_by text, reason text,
                                 completes boolean DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    -- PL/pgSQL keeps the INSERT's plan for the session.
    INSERT INTO webhook.delivery_log
        (id, provider, event_id, event_type, payload, raw_body, signature, headers,
         claim_status, payload_mismatch, secret_fingerprint, reject_reason, claim_completes)
    VALUES (id, provider, event_id, event_type, payload, raw_body, signature, headers,
            status::webhook.claim_status, payload_mismatch, verified_by, reason, completes);
END
$$;

-- Record that a claim's lease ran out and its event was taken over, so
-- the archive never shows that delivery PENDING forever.
CREATE FUNCTION webhook._record_lost_lease(delivery uuid, note text) RETURNS void
LANGUAGE sql VOLATILE
BEGIN ATOMIC
    INSERT INTO webhook.delivery_failures (delivery_id, error_message)
    SELECT delivery, note WHERE EXISTS (SELECT FROM webhook.delivery_log l WHERE l.id = delivery)
    ON CONFLICT (delivery_id) DO NOTHING;
END;

-- The claim: the shared core of webhook_claim and webhook_receive
-- (src/claim/mod.rs). `lease` NULL: the claim completes on commit.
CREATE FUNCTION webhook._claim(fn text, provider text, event_id text, event_type text, payload jsonb,
                               raw_body bytea, signature text, headers jsonb, lease interval,
                               entity_key text, order_value text, verified_by text)
RETURNS webhook._outcome
LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_variable
DECLARE
    id       uuid := webhook._new_id();
    digest   bytea := sha256(convert_to(payload::text, 'UTF8'));
    e        record;
    answer   text;
    judged   webhook._judged;
    tie      boolean := false;
    attempts integer;
    ceiling  integer;
    noted    text;
    sealing  bytea;  -- webhook.state_key's, read once for the lock and the seal
BEGIN
    IF NOT webhook._setting_on('webhook.archive_duplicates', true) THEN
        -- Processed is final: answered without a lock, and nothing written.
        SELECT x.status, x.attempts, x.result INTO e
          FROM webhook.events x WHERE x.provider = _claim.provider AND x.event_id = _claim.event_id;
        IF FOUND AND webhook._answer(e.status, NULL, true) = 'duplicate' THEN
            RETURN ROW(id, 'duplicate', e.attempts, e.result, false)::webhook._outcome;
        END IF;
    END IF;

    -- A committed state that answers the delivery by itself (finished,
    -- dead, or live under a running lease) needs no lock.
    SELECT x.status, x.attempts, x.claim_id, x.result, x.payload_hash, x.lease_expires_at INTO e
      FROM webhook.events x WHERE x.provider = _claim.provider AND x.event_id = _claim.event_id;
    answer := CASE WHEN FOUND THEN webhook._answer(e.status, e.lease_expires_at, false) END;
    IF answer IS NOT NULL THEN
        PERFORM webhook._archive(id, provider, event_id, event_type, payload, raw_body, signature, headers,
                                 answer, e.payload_hash IS DISTINCT FROM digest, verified_by, NULL);
        RETURN ROW(id, answer, e.attempts, CASE WHEN answer = 'duplicate' THEN e.result END, false)::webhook._outcome;
    END IF;

    sealing := webhook._state_key();
    IF NOT webhook._try_lock(fn, webhook._keyed_lock(sealing, provider, event_id)) THEN
        -- Another transaction is working on the event right now.
        SELECT x.status, x.attempts, x.result, x.payload_hash, x.lease_expires_at INTO e
          FROM webhook.events x WHERE x.provider = _claim.provider AND x.event_id = _claim.event_id;
        answer := CASE WHEN FOUND THEN webhook._answer(e.status, e.lease_expires_at, true) ELSE 'in_progress' END;
        PERFORM webhook._archive(id, provider, event_id, event_type, payload, raw_body, signature, headers,
                                 answer, e.payload_hash IS NOT NULL AND e.payload_hash IS DISTINCT FROM digest,
                                 verified_by, NULL);
        RETURN ROW(id, answer, coalesce(e.attempts, 0), CASE WHEN answer = 'duplicate' THEN e.result END, false)::webhook._outcome;
    END IF;

    -- An ordered event is judged against its entity's watermark first.
    IF entity_key IS NOT NULL THEN
        judged := webhook._judge(provider, 'default', event_id, entity_key, order_value);
        IF judged.verdict = 'tie' THEN
            tie := true;
        ELSIF judged.verdict IN ('stale', 'stale_tie') THEN
            SELECT x.status, x.attempts, x.claim_id, x.payload_hash, x.lease_expires_at INTO e
              FROM webhook.events x WHERE x.provider = _claim.provider AND x.event_id = _claim.event_id;
            IF NOT FOUND OR webhook._answer(e.status, e.lease_expires_at, false) IS NULL THEN
                attempts := CASE WHEN FOUND THEN e.attempts ELSE 0 END;
                IF FOUND AND e.status = 'processing' THEN
                    PERFORM webhook._record_lost_lease(e.claim_id,
                        format('lease expired; event skipped as stale by delivery %s', id));
                END IF;
                INSERT INTO webhook.events AS x
                    (provider, event_id, event_type, status, attempts, claim_id, payload_hash,
                     entity_key, order_value, last_error, processed_at)
                VALUES (provider, event_id, event_type, 'stale', 0, id, digest, entity_key,
                        order_value::numeric, judged.reason, now())
                ON CONFLICT ON CONSTRAINT events_pkey DO UPDATE
                   SET status = 'stale', lease_expires_at = NULL, entity_key = excluded.entity_key,
                       order_value = excluded.order_value, last_error = excluded.last_error,
                       processed_at = now();
                PERFORM webhook._archive(id, provider, event_id, event_type, payload, raw_body, signature,
                                         headers, 'stale',
                                         coalesce(e.payload_hash IS NOT NULL AND e.payload_hash <> digest, false),
                                         verified_by, judged.reason);
                RETURN ROW(id, 'stale', attempts, NULL, judged.verdict = 'stale_tie')::webhook._outcome;
            END IF;
        END IF;
    END IF;

    -- A new event and its delivery's archive row, in one statement.
    WITH new_event AS (
        INSERT INTO webhook.events AS x
            (provider, event_id, event_type, status, attempts, claim_id, lease_expires_at,
             processed_at, payload_hash, entity_key, order_value)
        VALUES (provider, event_id, event_type,
                CASE WHEN lease IS NULL THEN 'processed' ELSE 'processing' END::webhook.event_status,
                1, id, clock_timestamp() + lease, CASE WHEN lease IS NULL THEN now() END, digest,
                entity_key, order_value::numeric)
        ON CONFLICT ON CONSTRAINT events_pkey DO NOTHING
        RETURNING 1
    ), archived AS (
        INSERT INTO webhook.delivery_log
            (id, provider, event_id, event_type, payload, raw_body, signature, headers,
             claim_status, payload_mismatch, secret_fingerprint, reject_reason, claim_completes)
        SELECT id, provider, event_id, event_type, payload, raw_body, signature, headers,
               'claimed', false, verified_by, NULL, nullif(lease IS NULL, false)
          FROM new_event
    )
    SELECT count(*) INTO attempts FROM new_event;
    IF attempts > 0 THEN
        IF lease IS NULL THEN
            -- An assignment: PL/pgSQL evaluates it without running a query.
            noted := webhook._owned(fn, id, provider, event_id, lease, entity_key, order_value, sealing);
        END IF;
        RETURN ROW(id, 'claimed', 1, NULL, tie)::webhook._outcome;
    END IF;

    -- The event exists and, under its lock, no open transaction is
    -- changing it: its committed state decides.
    SELECT x.status, x.attempts, x.claim_id, x.result, x.payload_hash, x.lease_expires_at INTO e
      FROM webhook.events x WHERE x.provider = _claim.provider AND x.event_id = _claim.event_id;
    answer := webhook._answer(e.status, e.lease_expires_at, false);
    IF answer IS NOT NULL THEN
        PERFORM webhook._archive(id, provider, event_id, event_type, payload, raw_body, signature, headers,
                                 answer, e.payload_hash IS DISTINCT FROM digest, verified_by, NULL);
        RETURN ROW(id, answer, e.attempts, CASE WHEN answer = 'duplicate' THEN e.result END, false)::webhook._outcome;
    END IF;

    -- Failed, or its lease ran out: retry it, or park it once out of attempts.
    IF e.status = 'processing' THEN
        PERFORM webhook._record_lost_lease(e.claim_id,
            format('lease expired; event taken over by delivery %s', id));
    END IF;
    ceiling := webhook._setting_in('webhook.max_attempts', '', 10)::integer;
    IF ceiling > 0 AND e.attempts >= ceiling THEN
        UPDATE webhook.events x
           SET status = 'dead', lease_expires_at = NULL,
               last_error = coalesce(x.last_error, format('gave up after %s attempts', e.attempts))
         WHERE x.provider = _claim.provider AND x.event_id = _claim.event_id;
        PERFORM webhook._archive(id, provider, event_id, event_type, payload, raw_body, signature, headers,
                                 'dead', coalesce(e.payload_hash <> digest, false), verified_by, NULL);
        RETURN ROW(id, 'dead', e.attempts, NULL, false)::webhook._outcome;
    END IF;
    UPDATE webhook.events x
       SET status = CASE WHEN lease IS NULL THEN 'processed' ELSE 'processing' END::webhook.event_status,
           attempts = x.attempts + 1,
           claim_id = id,
           lease_expires_at = clock_timestamp() + lease,
           processed_at = CASE WHEN lease IS NULL THEN now() END,
           entity_key = coalesce(_claim.entity_key, x.entity_key),
           order_value = coalesce(_claim.order_value::numeric, x.order_value)
     WHERE x.provider = _claim.provider AND x.event_id = _claim.event_id
    RETURNING x.attempts INTO attempts;
    PERFORM webhook._archive(id, provider, event_id, event_type, payload, raw_body, signature, headers,
                             'retry', coalesce(e.payload_hash <> digest, false), verified_by, NULL);
    noted := webhook._owned(fn, id, provider, event_id, lease, entity_key, order_value, sealing);
    RETURN ROW(id, 'retry', attempts, NULL, tie)::webhook._outcome;
END
$$;

-- The claims this transaction remembers, `id` added (webhook._owned). The
-- transaction's first has nothing to check.
CREATE FUNCTION webhook._remembered(id uuid) RETURNS text
LANGUAGE sql STABLE
RETURN CASE WHEN coalesce(current_setting('pg_webhook_inbox.completes_here', true), '') = '' THEN ''
            ELSE coalesce(webhook._state('pg_webhook_inbox.completes_here'), '')
       END || id::text || ',';

-- The delivery `id` now owns its event. A claim that completes on commit
-- wrote the event as processed: an ordered event moves its watermark now,
-- as webhook_complete would, and the transaction remembers the claim
-- (returned: the claims it remembers). An expression its caller takes in
-- (inlined SQL).
CREATE FUNCTION webhook._owned(fn text, id uuid, provider text, event_id text, lease interval,
                               entity_key text, order_value text, sealing bytea)
RETURNS text
LANGUAGE sql VOLATILE
RETURN CASE WHEN lease IS NOT NULL THEN NULL
            WHEN CASE WHEN entity_key IS NULL THEN true
                      ELSE webhook._advance(fn, id, provider, 'default', event_id, entity_key, order_value) END
                -- Sealed under the key the claim read for its lock.
                -- webhook._remembered appears twice, as an inlined
                -- expression must: for a transaction's first claim (the
                -- hot path) that is two looks at a setting; a later claim
                -- checks the seal twice, still less than a call of a
                -- PL/pgSQL function here would cost every claim.
                THEN set_config('pg_webhook_inbox.completes_here',
                                webhook._state_mac('pg_webhook_inbox.completes_here', webhook._remembered(id), sealing)
                                    || ':' || webhook._remembered(id), true)
       END;

-- A claim's complete_on_commit NULL, or true with a lease: refused.
CREATE FUNCTION webhook._claim_lease_refused(fn text, lease interval, complete_on_commit boolean) RETURNS interval
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    IF complete_on_commit IS NULL THEN
        PERFORM webhook._required(fn, 'complete_on_commit', complete_on_commit);
    END IF;
    PERFORM webhook._raise('22023', format('%s: argument "lease" must be NULL when complete_on_commit is true: the claim owns its event until its transaction ends, and the commit completes it', fn));
    RETURN NULL;
END
$$;

-- How a claim owns its event: for a lease (NULL: the default), or, with
-- complete_on_commit, until its transaction ends (NULL is returned). An
-- expression its callers take in (inlined SQL).
CREATE FUNCTION webhook._claim_lease(fn text, lease interval, complete_on_commit boolean) RETURNS interval
LANGUAGE sql STABLE
RETURN CASE WHEN complete_on_commit AND lease IS NULL THEN NULL
            WHEN NOT complete_on_commit THEN webhook._lease(fn, 'lease', lease)
            ELSE webhook._claim_lease_refused(fn, lease, complete_on_commit)
       END;

-- A raw body as the JSON object (or, for a batch, non-empty array) it
-- must be: UTF-8, JSON jsonb can store, an object.
CREATE FUNCTION webhook._json_body(fn text, arg text, body bytea, batch boolean DEFAULT false) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    text     text;
    document jsonb;
BEGIN
    BEGIN
        text := convert_from(body, 'UTF8');
    EXCEPTION WHEN character_not_in_repertoire OR untranslatable_character THEN
        PERFORM webhook._raise('22021', format('%s: argument "%s" is not valid UTF-8', fn, arg), SQLERRM || '.');
    END;
    BEGIN
        document := text::jsonb;
    EXCEPTION WHEN untranslatable_character THEN
        PERFORM webhook._raise('22032', format('%s: argument "%s" is not valid JSON', fn, arg),
            'It contains the escape \u0000, which PostgreSQL''s jsonb cannot store.');
    WHEN data_exception THEN
        PERFORM webhook._raise('22032', format('%s: argument "%s" is not valid JSON', fn, arg), SQLERRM || '.');
    END;
    IF NOT (jsonb_typeof(document) = 'object'
            OR batch AND jsonb_typeof(document) = 'array' AND jsonb_array_length(document) > 0) THEN
        PERFORM webhook._raise('2203C', format('%s: argument "%s" must be a JSON object, not %s', fn, arg,
            CASE jsonb_typeof(document) WHEN 'null' THEN 'null' WHEN 'boolean' THEN 'a boolean'
                 WHEN 'number' THEN 'a number' WHEN 'string' THEN 'a string' WHEN 'array' THEN 'an array'
                 ELSE 'an object' END));
    END IF;
    RETURN document;
END
$$;

-- webhook_claim's arguments, checked as the compiled edition checks them
-- (src/claim/api.rs), then the claim.
CREATE FUNCTION webhook._claim_call(provider text, event_id text, event_type text, payload jsonb,
                                    raw_body bytea, signature text, lease interval)
RETURNS webhook.claim_result
LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_variable
DECLARE
    fn CONSTANT text := 'webhook_claim';
    order_at webhook._order;
    outcome  webhook._outcome;
    scoped   boolean;
    ordered  boolean;
BEGIN
    -- The checks inline, their errors raised by the helpers: the hot path
    -- calls no function for an argument that is fine.
    IF provider IS NULL OR provider = '' OR octet_length(provider) > 64 THEN
        PERFORM webhook._required_text(fn, 'provider', provider, 64);
    END IF;
    IF event_id IS NULL OR event_id = '' OR octet_length(event_id) > 255 THEN
        PERFORM webhook._required_text(fn, 'event_id', event_id, 255);
    END IF;
    IF event_type IS NULL OR event_type = '' OR octet_length(event_type) > 255 THEN
        PERFORM webhook._required_text(fn, 'event_type', event_type, 255);
    END IF;
    IF octet_length(signature) > 8192 THEN
        PERFORM webhook._bounded_text(fn, 'signature', signature, 8192);
    END IF;
    -- Scopes and ordering, each only where the tables say there is any:
    -- both asked in one query.
    SELECT EXISTS (SELECT FROM webhook.app_scopes),
           EXISTS (SELECT FROM webhook.providers p WHERE p.name = provider AND p.entity_key_from IS NOT NULL)
      INTO scoped, ordered;
    IF scoped THEN
        PERFORM webhook._check_scope(fn, 'provider', provider);
    END IF;
    IF ordered THEN
        order_at := webhook._order_of_payload(provider, payload);
    END IF;
    outcome := webhook._claim(fn, provider, event_id, event_type, payload, raw_body, signature, NULL, lease,
                              order_at.entity_key, order_at.value, NULL);
    RETURN ROW(outcome.id, outcome.status IN ('claimed', 'retry'), outcome.status, outcome.attempts,
               outcome.result)::webhook.claim_result;
END
$$;

CREATE FUNCTION @extschema@.webhook_claim(provider text, event_id text, event_type text, payload jsonb,
                                          signature text, lease interval DEFAULT NULL,
                                          complete_on_commit boolean DEFAULT false)
RETURNS webhook.claim_result
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    fn CONSTANT text := 'webhook_claim';
BEGIN
    IF pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('webhook_claim');
    END IF;
    IF payload IS NULL THEN
        PERFORM webhook._required(fn, 'payload', payload);
    END IF;
    IF pg_column_size(payload) - 4 > webhook._setting_in('webhook.max_payload_size', 'kB', 25 * 1024) * 1024 THEN
        PERFORM webhook._payload_size(fn, 'payload', pg_column_size(payload) - 4);
    END IF;
    IF jsonb_typeof(payload) <> 'object' THEN
        PERFORM webhook._raise('2203C', format('%s: argument "payload" must be a JSON object, not %s', fn,
            CASE WHEN jsonb_typeof(payload) = 'array' THEN 'an array' ELSE 'a scalar' END));
    END IF;
    RETURN webhook._claim_call(provider, event_id, event_type, payload, NULL, signature,
                               webhook._claim_lease(fn, lease, complete_on_commit));
END
$$;

CREATE FUNCTION @extschema@.webhook_claim(provider text, event_id text, event_type text, body bytea,
                                          signature text, lease interval DEFAULT NULL,
                                          complete_on_commit boolean DEFAULT false)
RETURNS webhook.claim_result
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    fn CONSTANT text := 'webhook_claim';
    owned interval := webhook._claim_lease(fn, lease, complete_on_commit);
BEGIN
    IF pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('webhook_claim');
    END IF;
    PERFORM webhook._required(fn, 'body', body);
    PERFORM webhook._payload_size(fn, 'body', length(body));
    RETURN webhook._claim_call(provider, event_id, event_type, webhook._json_body(fn, 'body', body), body,
                               signature, owned);
END
$$;

CREATE FUNCTION @extschema@.webhook_claim(provider text, event_id text, event_type text, body text,
                                          signature text, lease interval DEFAULT NULL,
                                          complete_on_commit boolean DEFAULT false)
RETURNS webhook.claim_result
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
RETURN @extschema@.webhook_claim(provider, event_id, event_type, convert_to(body, 'UTF8'), signature,
                                 lease, complete_on_commit);

-- A delivery that may finish its event: its provider, event id, and
-- whether its claim completed the event in this very transaction; NULL
-- when `id` is no delivery (it may be an inbox lease). Takes the event's
-- lock, waiting for a competing claim's transaction to end.
CREATE TYPE webhook._owner AS (provider text, event_id text, completed_here boolean);

CREATE FUNCTION webhook._take_ownership(fn text, id uuid) RETURNS webhook._owner
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    d record;
BEGIN
    -- A delivery id is a UUID of version 7.
    IF get_byte(uuid_send(id), 6) >> 4 <> 7 THEN
        RETURN NULL;
    END IF;
    SELECT l.provider, l.event_id, l.claim_status::text AS claim_status INTO d
      FROM webhook.delivery_log l WHERE l.id = _take_ownership.id;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    PERFORM webhook._check_scope(fn, 'id', d.provider);
    IF d.claim_status NOT IN ('claimed', 'retry') THEN
        PERFORM webhook._raise('42501',
            format('%s: argument "id": delivery %s was answered "%s" and does not own its event', fn, id, d.claim_status),
            NULL,
            'Only a delivery answered "claimed" or "retry", or a lease from webhook_next, may be completed, failed or extended.');
    END IF;
    PERFORM pg_advisory_xact_lock(webhook._lock_key(d.provider, d.event_id));
    RETURN ROW(d.provider, d.event_id, webhook._completes_here(id))::webhook._owner;
END
$$;

-- Why a finishing call found nothing to change (src/lifecycle.rs,
-- standing), raised: 55006 lost to another claim, 55000 finished, P0002
-- no such delivery.
CREATE FUNCTION webhook._refuse_finish(fn text, id uuid, owner webhook._owner) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    d record;
BEGIN
    SELECT EXISTS (SELECT FROM webhook.delivery_log l WHERE l.id = _refuse_finish.id) AS exists,
           e.claim_id, e.status::text AS status, e.attempts,
           EXISTS (SELECT FROM webhook.delivery_failures f WHERE f.delivery_id = _refuse_finish.id) AS failed
      INTO d
      FROM (VALUES (1)) AS one (x)
      LEFT JOIN webhook.events e ON e.provider = owner.provider AND e.event_id = owner.event_id;
    IF NOT d.exists THEN
        PERFORM webhook._raise('P0002', format('%s: argument "id": no delivery %s', fn, id));
    ELSIF d.status IS NULL OR d.claim_id IS DISTINCT FROM id THEN
        PERFORM webhook._raise('55006', format('%s: argument "id": delivery %s lost its lease to another claim', fn, id),
            CASE WHEN d.status IS NULL THEN 'The event row no longer exists.'
                 ELSE format('Another delivery took the event over (attempt %s, status %s).', d.attempts, d.status) END,
            'Roll back this transaction: another worker owns the event now. Use a longer lease or webhook_extend() for long work.');
    END IF;
    PERFORM webhook._raise('55000', format('%s: argument "id": delivery %s is already %s', fn, id,
        CASE WHEN d.failed THEN 'FAILED' WHEN d.status = 'processed' THEN 'PROCESSED' ELSE d.status END));
END
$$;

CREATE FUNCTION @extschema@.webhook_complete(id uuid, result jsonb DEFAULT NULL) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    fn CONSTANT text := 'webhook_complete';
    owner webhook._owner;
    done  record;
BEGIN
    IF pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('webhook_complete');
    END IF;
    PERFORM webhook._required(fn, 'id', id);
    IF result IS NOT NULL AND pg_column_size(result) - 4 > 65536 THEN
        PERFORM webhook._raise('22001', format('%s: argument "result" is longer than 65536 bytes', fn),
            format('The limit is 65536 bytes; %s bytes were given.', pg_column_size(result) - 4));
    END IF;
    owner := webhook._take_ownership(fn, id);
    IF owner IS NULL THEN
        PERFORM webhook._lease_complete(fn, id, result);
        RETURN;
    END IF;
    UPDATE webhook.events e
       SET status = 'processed', processed_at = now(), lease_expires_at = NULL,
           result = webhook_complete.result
     WHERE e.provider = owner.provider AND e.event_id = owner.event_id AND e.claim_id = webhook_complete.id
       AND e.status = CASE WHEN owner.completed_here THEN 'processed' ELSE 'processing' END::webhook.event_status
    RETURNING e.entity_key, e.order_value::text AS order_value INTO done;
    IF NOT FOUND THEN
        PERFORM webhook._refuse_finish(fn, id, owner);
    END IF;
    -- A claim that completes on commit moved its watermark already.
    IF NOT owner.completed_here AND done.entity_key IS NOT NULL AND done.order_value IS NOT NULL THEN
        PERFORM webhook._advance(fn, id, owner.provider, 'default', owner.event_id, done.entity_key, done.order_value);
    END IF;
END
$$;

CREATE FUNCTION @extschema@.webhook_fail(id uuid, err text, retry_in interval DEFAULT NULL,
                                         permanent boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    fn CONSTANT text := 'webhook_fail';
    owner   webhook._owner;
    message text;
    ceiling integer := webhook._setting_in('webhook.max_attempts', '', 10)::integer;
BEGIN
    IF pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('webhook_fail');
    END IF;
    PERFORM webhook._required(fn, 'id', id);
    PERFORM webhook._required(fn, 'err', err);
    PERFORM webhook._required(fn, 'permanent', permanent);
    PERFORM webhook._check_retry_in(fn, retry_in);
    -- Kept forever with the event: cut, not refused, since failing must not fail.
    message := webhook._truncated(err, 2048);
    owner := webhook._take_ownership(fn, id);
    IF owner IS NULL THEN
        PERFORM webhook._lease_fail(fn, id, message, retry_in, permanent);
        RETURN;
    END IF;
    IF retry_in IS NOT NULL THEN
        PERFORM webhook._raise('22023', format('%s: argument "retry_in" applies to inbox leases only: a claimed delivery is retried by its provider''s next delivery', fn));
    END IF;
    UPDATE webhook.events e
       -- Permanent, or out of attempts: parked as dead, not retried again.
       SET status = CASE WHEN permanent OR (ceiling > 0 AND e.attempts >= ceiling) THEN 'dead' ELSE 'failed' END::webhook.event_status,
           last_error = message, lease_expires_at = NULL, processed_at = NULL
     WHERE e.provider = owner.provider AND e.event_id = owner.event_id AND e.claim_id = webhook_fail.id
       AND e.status = CASE WHEN owner.completed_here THEN 'processed' ELSE 'processing' END::webhook.event_status;
    IF NOT FOUND THEN
        PERFORM webhook._refuse_finish(fn, id, owner);
    END IF;
    INSERT INTO webhook.delivery_failures (delivery_id, error_message) VALUES (id, message);
END
$$;

-- retry_in: not negative, and at most webhook.backoff_max.
CREATE FUNCTION webhook._check_retry_in(fn text, retry_in interval) RETURNS void
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    IF retry_in < interval '0' THEN
        PERFORM webhook._raise('22023', format('%s: argument "retry_in" must not be negative', fn));
    ELSIF retry_in > make_interval(secs => webhook._setting_in('webhook.backoff_max', 'ms', 3600000)::integer / 1000.0) THEN
        PERFORM webhook._raise('22023', format('%s: argument "retry_in" must not exceed webhook.backoff_max', fn));
    END IF;
END
$$;

CREATE FUNCTION @extschema@.webhook_extend(id uuid, lease interval) RETURNS timestamptz
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    fn CONSTANT text := 'webhook_extend';
    owner   webhook._owner;
    expires timestamptz;
BEGIN
    IF pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('webhook_extend');
    END IF;
    PERFORM webhook._required(fn, 'id', id);
    PERFORM webhook._lease(fn, 'lease', webhook._required(fn, 'lease', lease));
    owner := webhook._take_ownership(fn, id);
    IF owner IS NULL THEN
        RETURN webhook._lease_extend(fn, id, lease);
    END IF;
    IF owner.completed_here THEN
        PERFORM webhook._raise('55000',
            format('%s: argument "id": delivery %s completes on commit and holds no lease', fn, id), NULL,
            'Its transaction holds the event until it ends, however long that takes: there is nothing to extend.');
    END IF;
    UPDATE webhook.events e
       SET lease_expires_at = clock_timestamp() + lease
     WHERE e.provider = owner.provider AND e.event_id = owner.event_id AND e.claim_id = webhook_extend.id
       AND e.status = 'processing'
    RETURNING e.lease_expires_at INTO expires;
    IF NOT FOUND THEN
        PERFORM webhook._refuse_finish(fn, id, owner);
    END IF;
    RETURN expires;
END
$$;

SELECT pg_catalog.set_config('search_path', '@extschema@, pg_temp', true);
