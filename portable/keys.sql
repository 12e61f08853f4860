-- pg_webhook_inbox, portable edition: idempotency keys both ways (the
-- compiled edition's src/idempotency/): stable keys for the calls a
-- handler makes, and keys of the application's own API, each request
-- owning its key under a lease, fenced by its request id.

-- Bound to pg_catalog while this file runs (see schema.sql).
SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);

-- SHA-256 of parts, each preceded by its length (8 bytes, big-endian), so
-- that no two lists of parts run together alike.
CREATE FUNCTION webhook._digest_of(VARIADIC parts bytea[]) RETURNS bytea
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
BEGIN ATOMIC
    SELECT sha256(coalesce(string_agg(int8send(length(x.p)) || x.p, '\x'::bytea ORDER BY x.n), '\x'))
      FROM unnest(parts) WITH ORDINALITY AS x(p, n);
END;

CREATE FUNCTION @extschema@.webhook_outbound_key(provider text, event_id text, operation text) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    fn CONSTANT text := 'webhook_outbound_key';
BEGIN
    PERFORM webhook._required_text(fn, 'provider', provider, 64);
    PERFORM webhook._required_text(fn, 'event_id', event_id, 255);
    PERFORM webhook._required_text(fn, 'operation', operation, 255);
    RETURN 'whk_' || encode(webhook._digest_of('pg_webhook_inbox outbound key v1'::bytea, convert_to(provider, 'UTF8'),
                                               convert_to(event_id, 'UTF8'), convert_to(operation, 'UTF8')), 'hex');
END
$$;

CREATE FUNCTION @extschema@.webhook_outbound_key(id uuid, operation text) RETURNS text
LANGUAGE plpgsql STABLE SECURITY DEFINER PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    fn CONSTANT text := 'webhook_outbound_key';
    event record;
BEGIN
    PERFORM webhook._required(fn, 'id', id);
    PERFORM webhook._required_text(fn, 'operation', operation, 255);
    SELECT x.provider, x.event_id INTO event FROM (
        SELECT l.provider, l.event_id FROM webhook.delivery_log l WHERE l.id = webhook_outbound_key.id AND l.event_id IS NOT NULL
        UNION ALL
        SELECT i.provider, i.event_id FROM webhook.inbox i WHERE i.claim_id = webhook_outbound_key.id
        UNION ALL
        SELECT f.provider, f.event_id FROM webhook.inbox_failures f WHERE f.claim_id = webhook_outbound_key.id
        LIMIT 1) x;
    IF event.provider IS NULL OR event.event_id IS NULL THEN
        PERFORM webhook._raise('P0002', format('%s: argument "id": no delivery %s', fn, id));
    END IF;
    RETURN @extschema@.webhook_outbound_key(event.provider, event.event_id, operation);
END
$$;

CREATE FUNCTION @extschema@.idempotency_fingerprint(method text, path text, body bytea DEFAULT NULL) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    fn CONSTANT text := 'idempotency_fingerprint';
BEGIN
    PERFORM webhook._required_text(fn, 'method', method, 32);
    PERFORM webhook._required_text(fn, 'path', path, 8192);
    RETURN 'sha256:' || encode(webhook._digest_of('pg_webhook_inbox request fingerprint v1'::bytea,
        convert_to(translate(method, 'abcdefghijklmnopqrstuvwxyz', 'ABCDEFGHIJKLMNOPQRSTUVWXYZ'), 'UTF8'),
        convert_to(path, 'UTF8'), coalesce(body, '\x')), 'hex');
END
$$;

CREATE FUNCTION @extschema@.idempotency_fingerprint(method text, path text, body text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN @extschema@.idempotency_fingerprint(method, path, convert_to(coalesce(body, ''), 'UTF8'));

CREATE FUNCTION @extschema@.idempotency_purge(older_than interval DEFAULT NULL) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    removed bigint;
BEGIN
    IF pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('idempotency_purge');
    END IF;
    IF older_than <= interval '0' THEN
        PERFORM webhook._raise('22023', 'idempotency_purge: argument "older_than" must be a positive interval');
    END IF;
    older_than := coalesce(older_than, make_interval(secs => webhook._setting_in('webhook.idempotency_retention', 's', 86400)::integer));
    WITH gone AS (
        DELETE FROM webhook.idempotency_keys k
         WHERE k.created_at < now() - older_than
           AND NOT (k.status = 'in_progress' AND k.locked_until > clock_timestamp())
        RETURNING 1)
    SELECT count(*) INTO removed FROM gone;
    RETURN removed;
END
$$;

CREATE FUNCTION @extschema@.idempotency_begin(scope text, key text, fingerprint text,
                                              lease interval DEFAULT '00:01:00')
RETURNS webhook.idempotency_begin_result
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    fn CONSTANT text := 'idempotency_begin';
    locked   boolean;
    k        record;
    running  boolean;
    decision text;
    request  uuid;
    taken    record;
BEGIN
    IF pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('idempotency_begin');
    END IF;
    PERFORM webhook._required_text(fn, 'scope', scope, 255);
    PERFORM webhook._required_text(fn, 'key', key, 255);
    PERFORM webhook._required_text(fn, 'fingerprint', fingerprint, 255);
    PERFORM webhook._required(fn, 'lease', lease);
    lease := webhook._lease(fn, 'lease', lease);
    locked := webhook._try_lock(fn, webhook._lock_key('idempotency', scope, key));
    SELECT x.fingerprint, x.status::text AS status,
           coalesce(x.locked_until > clock_timestamp(), false) AS live,
           x.created_at < now() - make_interval(secs => webhook._setting_in('webhook.idempotency_retention', 's', 86400)::integer) AS expired,
           x.response_status, x.response_headers, x.response_body
      INTO k
      FROM webhook.idempotency_keys x WHERE x.scope = scope AND x.key = key;
    -- Who may go on (src/idempotency/requests/begin.rs, decide).
    IF NOT FOUND THEN
        decision := CASE WHEN locked THEN 'own' ELSE 'in_progress' END;
    ELSE
        running := k.status = 'in_progress' AND k.live;
        decision := CASE
            WHEN k.expired AND NOT running THEN CASE WHEN locked THEN 'own' ELSE 'in_progress' END
            WHEN k.fingerprint <> fingerprint THEN 'mismatch'
            WHEN NOT locked OR running THEN 'in_progress'
            WHEN k.status = 'finished' THEN 'replay'
            ELSE 'own' END;
    END IF;
    IF decision = 'in_progress' THEN
        RETURN ROW('in_progress', NULL, 409, NULL, NULL, NULL, NULL)::webhook.idempotency_begin_result;
    ELSIF decision = 'mismatch' THEN
        RETURN ROW('mismatch', NULL, 422, NULL, NULL, NULL, NULL)::webhook.idempotency_begin_result;
    ELSIF decision = 'replay' THEN
        RETURN ROW('replay', NULL, k.response_status, NULL, NULL, k.response_headers, k.response_body)::webhook.idempotency_begin_result;
    END IF;
    request := webhook._new_id();
    IF k.fingerprint IS NULL THEN
        INSERT INTO webhook.idempotency_keys AS x (scope, key, fingerprint, status, request_id, lease, locked_until)
        VALUES (scope, key, fingerprint, 'in_progress', request, lease, clock_timestamp() + lease)
        ON CONFLICT DO NOTHING;
        IF NOT FOUND THEN
            RETURN ROW('in_progress', NULL, 409, NULL, NULL, NULL, NULL)::webhook.idempotency_begin_result;
        END IF;
        RETURN ROW('new', request, NULL, NULL, NULL, NULL, NULL)::webhook.idempotency_begin_result;
    END IF;
    UPDATE webhook.idempotency_keys x
       SET fingerprint = idempotency_begin.fingerprint, status = 'in_progress', request_id = request,
           lease = idempotency_begin.lease, locked_until = clock_timestamp() + idempotency_begin.lease,
           attempts = CASE WHEN k.expired THEN 1 ELSE x.attempts + 1 END,
           recovery_point = CASE WHEN k.expired THEN NULL ELSE x.recovery_point END,
           recovery = CASE WHEN k.expired THEN '{}'::jsonb ELSE x.recovery END,
           last_error = CASE WHEN k.expired THEN NULL ELSE x.last_error END,
           created_at = CASE WHEN k.expired THEN now() ELSE x.created_at END,
           response_status = NULL, response_headers = NULL, response_body = NULL,
           finished_at = NULL, updated_at = now()
     WHERE x.scope = idempotency_begin.scope AND x.key = idempotency_begin.key
    RETURNING x.recovery_point, nullif(x.recovery, '{}'::jsonb) AS recovery INTO taken;
    RETURN ROW('new', request, NULL, taken.recovery_point, taken.recovery, NULL, NULL)::webhook.idempotency_begin_result;
END
$$;

-- A request's fenced change of its key (src/idempotency/requests/
-- steps.rs): under the key's lock; refused with 55006 when another
-- request took the key over (or none names it), 55000 when it finished.
CREATE FUNCTION webhook._request_key(fn text, request_id uuid) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    k record;
BEGIN
    SELECT x.scope, x.key INTO k FROM webhook.idempotency_keys x WHERE x.request_id = _request_key.request_id;
    IF NOT FOUND THEN
        PERFORM webhook._refuse_request(fn, request_id);
    END IF;
    PERFORM pg_advisory_xact_lock(webhook._lock_key('idempotency', k.scope, k.key));
END
$$;

CREATE FUNCTION webhook._refuse_request(fn text, request_id uuid) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    status text := (SELECT x.status::text FROM webhook.idempotency_keys x WHERE x.request_id = _refuse_request.request_id);
BEGIN
    IF status = 'finished' OR status = 'retryable' THEN
        PERFORM webhook._raise('55000', format('%s: argument "request_id": request %s is already %s', fn, request_id,
            CASE status WHEN 'finished' THEN 'finished' ELSE 'failed' END));
    END IF;
    PERFORM webhook._raise('55006',
        format('%s: argument "request_id": request %s lost its lease to another request with the same idempotency key', fn, request_id),
        'No idempotency key names this request: another request with the key took it over after its lease ran out, or it never began one.',
        'Roll back this transaction: another request with the same key took it over after this one''s lease ran out. Use a longer lease, or record recovery points more often.');
END
$$;

CREATE FUNCTION @extschema@.idempotency_checkpoint(request_id uuid, step text, output jsonb DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    fn CONSTANT text := 'idempotency_checkpoint';
    size integer;
BEGIN
    IF pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('idempotency_checkpoint');
    END IF;
    PERFORM webhook._required(fn, 'request_id', request_id);
    PERFORM webhook._required_text(fn, 'step', step, 255);
    IF pg_column_size(output) - 4 > 65536 THEN
        PERFORM webhook._raise('22001', format('%s: argument "output" is longer than 65536 bytes', fn),
            format('The limit is 65536 bytes; %s bytes were given.', pg_column_size(output) - 4));
    END IF;
    PERFORM webhook._request_key(fn, request_id);
    UPDATE webhook.idempotency_keys x
       SET recovery_point = step, recovery = x.recovery || jsonb_build_object(step, output),
           locked_until = clock_timestamp() + x.lease, updated_at = now()
     WHERE x.request_id = request_id AND x.status = 'in_progress'
    RETURNING pg_column_size(x.recovery) INTO size;
    IF NOT FOUND THEN
        PERFORM webhook._refuse_request(fn, request_id);
    END IF;
    IF size > 262144 THEN
        PERFORM webhook._raise('22001', format('%s: argument "output" is longer than 262144 bytes', fn),
            format('The limit is 262144 bytes; %s bytes were given.', size));
    END IF;
END
$$;

-- A response to store: a status of 100 to 599, headers an object, the
-- whole at most webhook.idempotency_max_response.
CREATE FUNCTION webhook._check_response(fn text, status integer, body text, headers jsonb) RETURNS void
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    size    integer;
    "limit" integer := webhook._setting_in('webhook.idempotency_max_response', 'kB', 1024)::integer * 1024;
BEGIN
    IF webhook._required(fn, 'response_status', status) NOT BETWEEN 100 AND 599 THEN
        PERFORM webhook._raise('22023', format('%s: argument "response_status" must be an HTTP status code, 100 to 599', fn));
    END IF;
    IF headers IS NOT NULL AND jsonb_typeof(headers) <> 'object' THEN
        PERFORM webhook._raise('2203C', format('%s: argument "response_headers" must be a JSON object, not %s', fn,
            CASE WHEN jsonb_typeof(headers) = 'array' THEN 'an array' ELSE 'a scalar' END));
    END IF;
    size := coalesce(octet_length(body), 0) + coalesce(pg_column_size(headers) - 4, 0);
    IF size > "limit" THEN
        PERFORM webhook._raise('22001', format('%s: argument "response_body" is longer than %s bytes', fn, "limit"),
            format('The limit is %s bytes; %s bytes were given.', "limit", size));
    END IF;
END
$$;

-- Store a request's response: its key finished, replayed to every later
-- request with it.
CREATE FUNCTION webhook._finish_request(fn text, request_id uuid, status integer, body text, headers jsonb,
                                        error text)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_variable
BEGIN
    PERFORM webhook._request_key(fn, request_id);
    UPDATE webhook.idempotency_keys x
       SET status = 'finished', response_status = status, response_headers = headers, response_body = body,
           last_error = coalesce(error, x.last_error), locked_until = NULL, finished_at = now(), updated_at = now()
     WHERE x.request_id = request_id AND x.status = 'in_progress';
    IF NOT FOUND THEN
        PERFORM webhook._refuse_request(fn, request_id);
    END IF;
END
$$;

CREATE FUNCTION @extschema@.idempotency_finish(request_id uuid, response_status integer,
                                               response_body text DEFAULT NULL, response_headers jsonb DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    fn CONSTANT text := 'idempotency_finish';
BEGIN
    IF pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('idempotency_finish');
    END IF;
    PERFORM webhook._required(fn, 'request_id', request_id);
    PERFORM webhook._check_response(fn, response_status, response_body, response_headers);
    PERFORM webhook._finish_request(fn, request_id, response_status, response_body, response_headers, NULL);
END
$$;

CREATE FUNCTION @extschema@.idempotency_fail(request_id uuid, error text, retryable boolean DEFAULT true,
                                             response_status integer DEFAULT NULL, response_body text DEFAULT NULL,
                                             response_headers jsonb DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    fn CONSTANT text := 'idempotency_fail';
    message text;
BEGIN
    IF pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('idempotency_fail');
    END IF;
    PERFORM webhook._required(fn, 'request_id', request_id);
    message := webhook._truncated(webhook._required(fn, 'error', error), 2048);
    IF webhook._required(fn, 'retryable', retryable) THEN
        IF response_status IS NOT NULL OR response_body IS NOT NULL OR response_headers IS NOT NULL THEN
            PERFORM webhook._raise('22023', format('%s: argument "response_status" must be NULL for a retryable failure: nothing is replayed, the next request runs again', fn));
        END IF;
        PERFORM webhook._request_key(fn, request_id);
        UPDATE webhook.idempotency_keys x
           SET status = 'retryable', last_error = message, locked_until = NULL, updated_at = now()
         WHERE x.request_id = request_id AND x.status = 'in_progress';
        IF NOT FOUND THEN
            PERFORM webhook._refuse_request(fn, request_id);
        END IF;
        RETURN;
    END IF;
    PERFORM webhook._check_response(fn, response_status, response_body, response_headers);
    PERFORM webhook._finish_request(fn, request_id, response_status, response_body, response_headers, message);
END
$$;

SELECT pg_catalog.set_config('search_path', '@extschema@, pg_temp', true);
