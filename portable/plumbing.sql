-- pg_webhook_inbox, portable edition: what the twins share. The compiled
-- edition has these in Rust (src/input.rs, src/errors.rs, src/uuid.rs,
-- src/event_lock.rs, src/signature.rs); here they are small SQL functions
-- in schema webhook, none callable by anyone but the extension owner.

-- Bound to pg_catalog while this file runs (see schema.sql).
SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);

-- HMAC is pgcrypto's, which every managed host offers. Its schema is
-- wherever the host or the DBA installed it (public, extensions, …); the
-- functions below call it by that name, written in when they are made,
-- so that no search_path can put another hmac() in its place.
DO $$
DECLARE
    crypto text := (SELECT n.nspname
                      FROM pg_extension e
                      JOIN pg_namespace n ON n.oid = e.extnamespace
                     WHERE e.extname = 'pgcrypto');
BEGIN
    IF crypto IS NULL THEN
        RAISE EXCEPTION USING
            ERRCODE = '0A000',
            MESSAGE = 'pg_webhook_inbox: the portable edition needs the extension pgcrypto',
            HINT = 'CREATE EXTENSION pgcrypto; then install pg_webhook_inbox again.';
    END IF;
    EXECUTE format(
        'CREATE FUNCTION webhook._hmac(data bytea, key bytea, algorithm text) RETURNS bytea
         LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
         RETURN %I.hmac(data, key, algorithm)', crypto);
END
$$;
COMMENT ON FUNCTION webhook._hmac(bytea, bytea, text) IS
    'Internal: pgcrypto''s hmac(), by the schema it was installed in';

-- Whether two MACs are the same, in time that does not depend on where
-- they first differ: their SHA-256 digests are compared instead, and a
-- caller who does not hold the key can neither choose nor predict the
-- digest of the MAC it is compared with.
CREATE FUNCTION webhook._same_mac(a bytea, b bytea) RETURNS boolean
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN sha256(a) = sha256(b);

-- Hex of exactly len bytes, either case; NULL for anything else.
CREATE FUNCTION webhook._hex(text text, len integer) RETURNS bytea
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN CASE WHEN octet_length(text) = len * 2
             AND text ~ '^[0-9A-Fa-f]*$'
            THEN decode(text, 'hex') END;

-- A provider's hex signature: lower case only, as every provider writes
-- it and its own library compares it (src/signature.rs).
CREATE FUNCTION webhook._signature_hex(text text, len integer) RETURNS bytea
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN CASE WHEN text ~ '^[0-9a-f]*$' THEN webhook._hex(text, len) END;

-- Base64 as the compiled edition reads it: the standard or the URL-safe
-- alphabet (not both at once), with canonical padding or none, and no
-- stray bits in the last character. NULL for anything else.
CREATE FUNCTION webhook._base64_any(text text) RETURNS bytea
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $$
DECLARE
    data    text := rtrim(text, '=');
    padding integer := length(text) - length(rtrim(text, '='));
    rest    integer := length(rtrim(text, '=')) % 4;
    last    integer;
BEGIN
    IF data ~ '[^A-Za-z0-9+/]' AND data ~ '[^A-Za-z0-9_-]' THEN
        RETURN NULL;
    END IF;
    -- Padded exactly to a multiple of four, or not at all.
    IF rest = 1 OR (padding > 0 AND padding <> (4 - rest) % 4) OR rest = 0 AND padding > 0 THEN
        RETURN NULL;
    END IF;
    data := translate(data, '-_', '+/');
    IF rest > 0 THEN
        last := strpos('ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/',
                       right(data, 1)) - 1;
        IF (rest = 2 AND last & 15 <> 0) OR (rest = 3 AND last & 3 <> 0) THEN
            RETURN NULL;
        END IF;
        data := data || repeat('=', 4 - rest);
    END IF;
    RETURN decode(data, 'base64');
END
$$;

-- Base64 of exactly len bytes.
CREATE FUNCTION webhook._base64(text text, len integer) RETURNS bytea
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN (SELECT d FROM (SELECT webhook._base64_any(text) AS d) x
         WHERE length(x.d) = len);

-- Standard base64 on one line (encode() breaks lines every 76 characters).
CREATE FUNCTION webhook._to_base64(data bytea) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN translate(encode(data, 'base64'), E'\n', '');

-- A time-ordered id of a UUID version: the first 48 bits are the
-- milliseconds it was made at, then the version, then a random UUID's
-- random bits and variant. One expression, in SQL so that the planner
-- inlines it into the statement that makes ids, row by row.
CREATE FUNCTION webhook._time_ordered_id(version text) RETURNS uuid
LANGUAGE sql VOLATILE PARALLEL SAFE
RETURN (overlay(lpad(to_hex(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint), 12, '0')
                PLACING '-' FROM 9 FOR 0)
        || '-' || version || substr(gen_random_uuid()::text, 16))::uuid;

-- A delivery's or claim's id (UUID version 7), which is how the archive
-- is partitioned.
CREATE FUNCTION webhook._new_id() RETURNS uuid
LANGUAGE sql VOLATILE PARALLEL SAFE
RETURN webhook._time_ordered_id('7');

-- Raise one of the extension's errors: its SQLSTATE, its message, and
-- the detail and hint when there are (RAISE takes no NULL option).
CREATE FUNCTION webhook._raise(code text, message text, detail text DEFAULT NULL, hint text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF detail IS NULL AND hint IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = code, MESSAGE = message;
    ELSIF hint IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = code, MESSAGE = message, DETAIL = detail;
    ELSIF detail IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = code, MESSAGE = message, HINT = hint;
    ELSE
        RAISE EXCEPTION USING ERRCODE = code, MESSAGE = message, DETAIL = detail, HINT = hint;
    END IF;
END
$$;

-- An argument refused: NULL (22004), empty (2200F), or longer than
-- `limit` bytes (22001), naming it. Raises; the checks below call it
-- only for an argument they refuse.
CREATE FUNCTION webhook._refused(fn text, arg text, problem text, "limit" integer DEFAULT NULL,
                                 given integer DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    CASE problem
    WHEN 'null' THEN
        PERFORM webhook._raise('22004', format('%s: argument "%s" must not be NULL', fn, arg));
    WHEN 'empty' THEN
        PERFORM webhook._raise('2200F', format('%s: argument "%s" must not be empty', fn, arg));
    ELSE
        PERFORM webhook._raise('22001',
            format('%s: argument "%s" is longer than %s bytes', fn, arg, "limit"),
            format('The limit is %s bytes; %s bytes were given.', "limit", given));
    END CASE;
    RETURN NULL;
END
$$;

-- A NULL argument of any type, refused.
CREATE FUNCTION webhook._refused_null(fn text, arg text, value anyelement) RETURNS anyelement
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    PERFORM webhook._refused(fn, arg, 'null');
    RETURN value;
END
$$;

-- A required argument: NULL is refused with 22004, naming it. This and
-- the checks below are expressions their callers take in (inlined SQL):
-- an argument that is fine costs no call of a function. Each refusal is
-- given the value checked: a call of constants only would be folded by
-- the planner, branch not taken or not, and raise on every call.
CREATE FUNCTION webhook._required(fn text, arg text, value anyelement) RETURNS anyelement
LANGUAGE sql IMMUTABLE
-- Quoted: a polymorphic SQL function cannot have a parsed body.
AS $$ SELECT CASE WHEN value IS NULL THEN webhook._refused_null(fn, arg, value) ELSE value END $$;

-- A required, non-empty text argument of at most `limit` bytes.
CREATE FUNCTION webhook._required_text(fn text, arg text, value text, "limit" integer) RETURNS text
LANGUAGE sql IMMUTABLE
RETURN CASE WHEN value IS NULL THEN webhook._refused(fn, arg, 'null', "limit", octet_length(value))
            WHEN value = '' THEN webhook._refused(fn, arg, 'empty', "limit", octet_length(value))
            WHEN octet_length(value) > "limit" THEN webhook._refused(fn, arg, 'long', "limit", octet_length(value))
            ELSE value
       END;

-- An optional text argument of at most `limit` bytes.
CREATE FUNCTION webhook._bounded_text(fn text, arg text, value text, "limit" integer) RETURNS text
LANGUAGE sql IMMUTABLE
RETURN CASE WHEN octet_length(value) > "limit" THEN webhook._refused(fn, arg, 'long', "limit", octet_length(value))
            ELSE value
       END;

-- A body or payload within webhook.max_payload_size (bytes).
CREATE FUNCTION webhook._payload_size(fn text, arg text, size integer) RETURNS void
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    "limit" integer := webhook._setting_in('webhook.max_payload_size', 'kB', 25 * 1024)::integer * 1024;
BEGIN
    IF size > "limit" THEN
        PERFORM webhook._raise('54000',
            format('%s: argument "%s" is larger than webhook.max_payload_size', fn, arg),
            format('The limit is %s bytes; %s bytes were given.', "limit", size),
            'The limit is the setting webhook.max_payload_size.');
    END IF;
END
$$;

-- The extension's settings that protect a guarantee: those the compiled
-- edition lets only a superuser change (src/gucs.rs, GucContext::Suset).
CREATE FUNCTION webhook._protected_settings() RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN ARRAY['webhook.slot', 'webhook.slots', 'webhook.max_payload_size',
             'webhook.archive_duplicates', 'webhook.max_attempts', 'webhook.max_lease',
             'webhook.backoff_base', 'webhook.backoff_max', 'webhook.rejected_body_limit',
             'webhook.idempotency_retention', 'webhook.idempotency_max_response',
             'webhook.maintenance_lock_timeout', 'webhook.metrics_retention',
             'webhook.metrics_unregistered_providers', 'webhook.order_max_future',
             'webhook.redact_headers'];

-- An extension setting as this call must take it; NULL where it is not
-- set (or set to ''), for the caller's default. Without the compiled
-- library the settings are placeholders, which any role may SET for its
-- session or ALTER ROLE … SET for itself. So a protected one is taken
-- only as the database has it (ALTER DATABASE … SET, by a database owner
-- who is the extension's owner or a superuser), and a session holding
-- another value is refused, unless its role is a superuser or the
-- extension's owner, whom the compiled edition lets change them too. The
-- others (webhook.lease_timeout, webhook.inbox_notify) are the session's.
CREATE FUNCTION webhook._setting(name text) RETURNS text
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    session  text := nullif(current_setting(name, true), '');
    database text;
    caller   name;
BEGIN
    -- Nothing set in this session (a database's values are a session's
    -- from its start): the common case, without a look at the catalog.
    IF current_setting(name, true) IS NULL OR NOT name = ANY (webhook._protected_settings()) THEN
        RETURN session;
    END IF;
    SELECT nullif(substr(c, length(name) + 2), '') INTO database
      FROM pg_db_role_setting s
           JOIN pg_database d ON d.oid = s.setdatabase AND d.datname = current_database(),
           unnest(s.setconfig) AS c
     WHERE s.setrole = 0 AND starts_with(c, name || '=')
       AND (pg_has_role(d.datdba, current_user, 'MEMBER')
            OR (SELECT r.rolsuper FROM pg_roles r WHERE r.oid = d.datdba));
    IF session IS NOT DISTINCT FROM database THEN
        RETURN session;
    END IF;
    caller := webhook._session_role();
    IF coalesce((SELECT r.rolsuper FROM pg_roles r WHERE r.rolname = caller), false)
       OR pg_has_role(caller, current_user, 'MEMBER') THEN
        RETURN session;
    END IF;
    PERFORM webhook._raise('42501',
        format('permission denied to take setting "%s" as this session has it', name),
        format('Without the compiled library it is a placeholder any role may set for itself; '
               'it protects a guarantee, so it is taken only as the database has it (%s).',
               coalesce(quote_literal(database), 'not set')),
        format('RESET %s, and drop any ALTER ROLE … SET of it; the extension''s owner sets it '
               'with ALTER DATABASE … SET.', name));
    RETURN NULL;
END
$$;

-- An integer setting as webhook._setting takes it, in the given unit
-- (webhook._setting_value, sql/operations.sql, reads a bare number too).
CREATE FUNCTION webhook._setting_number(name text, unit text, fallback numeric) RETURNS numeric
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v text := webhook._setting(name);
BEGIN
    RETURN CASE WHEN v IS NULL THEN fallback ELSE webhook._setting_value(name, btrim(v), unit) END;
END
$$;

-- The shared reading of an integer setting (sql/operations.sql), taken
-- through webhook._setting. A setting this session never had, the
-- common case, is its default at the cost of one current_setting: an
-- expression its callers' plans take in (inlined SQL), as the shared
-- one is; anything else is checked.
CREATE OR REPLACE FUNCTION webhook._setting_in(name text, unit text, fallback numeric) RETURNS numeric
LANGUAGE sql STABLE
RETURN CASE WHEN current_setting(name, true) IS NULL THEN fallback
            ELSE webhook._setting_number(name, unit, fallback)
       END;

-- A setting as text, the same way: NULL where this session never had it.
CREATE FUNCTION webhook._setting_text(name text) RETURNS text
LANGUAGE sql STABLE
RETURN CASE WHEN current_setting(name, true) IS NOT NULL THEN webhook._setting(name) END;

-- A boolean setting of the extension, or its default where nobody set it
-- (integer ones are read with webhook._setting_in).
CREATE FUNCTION webhook._setting_on(name text, fallback boolean) RETURNS boolean
LANGUAGE sql STABLE
RETURN coalesce(webhook._setting_text(name)::boolean, fallback);

-- A lease refused: not positive, or longer than webhook.max_lease.
CREATE FUNCTION webhook._refused_lease(fn text, arg text, lease interval) RETURNS interval
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    ceiling integer := webhook._setting_in('webhook.max_lease', 's', 3600)::integer;
BEGIN
    IF lease <= interval '0' THEN
        PERFORM webhook._raise('22023', format('%s: argument "%s" must be a positive interval', fn, arg));
    END IF;
    PERFORM webhook._raise('22023',
        format('%s: argument "%s" is longer than webhook.max_lease (%s s)', fn, arg, ceiling),
        NULL,
        'Long work renews a short lease with webhook_extend(); a superuser may raise webhook.max_lease.');
    RETURN NULL;
END
$$;

-- The lease a claim takes: `lease`, positive and at most
-- webhook.max_lease; NULL for webhook.lease_timeout (itself cut to that
-- ceiling). An expression its callers take in (inlined SQL).
CREATE FUNCTION webhook._lease(fn text, arg text, lease interval) RETURNS interval
LANGUAGE sql STABLE
RETURN CASE WHEN lease IS NULL
                THEN make_interval(secs => least(webhook._setting_in('webhook.lease_timeout', 's', 300)::integer,
                                                 webhook._setting_in('webhook.max_lease', 's', 3600)::integer))
            WHEN lease > interval '0'
                 AND lease <= make_interval(secs => webhook._setting_in('webhook.max_lease', 's', 3600)::integer)
                THEN lease
            ELSE webhook._refused_lease(fn, arg, lease)
       END;

-- Text kept forever, cut to at most `limit` bytes on a character
-- boundary, with a marker saying how much was dropped.
CREATE FUNCTION webhook._truncated(text text, "limit" integer) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT
AS $$
DECLARE
    kept text;
BEGIN
    IF octet_length(text) <= "limit" THEN
        RETURN text;
    END IF;
    kept := left(text, greatest("limit" - 40, 0));
    WHILE octet_length(kept) > greatest("limit" - 40, 0) LOOP
        kept := left(kept, -1);
    END LOOP;
    RETURN kept || format('… [%s bytes cut]', octet_length(text) - octet_length(kept));
END
$$;

-- What a transaction has done through the extension, kept between its
-- calls in a transaction-local setting (so that a rollback, to a
-- savepoint too, forgets it with the writes). Any role can write any
-- setting, so a value the extension relies on is sealed: an HMAC under
-- webhook.state_key (the owner's alone) of the setting's name and value,
-- this backend and this transaction's start, so that a caller can
-- neither forge a value nor carry one into another transaction.
--
-- Not sealed, because no guarantee rests on them: the count of event
-- locks (pg_webhook_inbox.locks_held) is a budget against an honest
-- runaway transaction, and a role that rewrites it holds no more locks
-- than pg_advisory_xact_lock, which PostgreSQL lets every role call,
-- gives it anyway; the inbox's starting points (pg_webhook_inbox.heads,
-- .turn) only order this session's own leases, and a lease that finds
-- nothing after them looks again from the start.
--
-- The key of webhook.state_key. Reading it is most of what sealing and
-- locking cost (a statement: about 10 µs), so a claim reads it once and
-- hands it to both (webhook._claim).
CREATE FUNCTION webhook._state_key() RETURNS bytea
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN (SELECT k.key FROM webhook.state_key k);
END
$$;

-- The seal of state `name` holding `value`, under `key`: written as
-- `seal:value` (webhook._owned). SQL, inlined into its callers'
-- expressions: a call of a function from PL/pgSQL costs more than the
-- seal.
CREATE FUNCTION webhook._state_mac(name text, value text, key bytea) RETURNS text
LANGUAGE sql STABLE
RETURN encode(substr(webhook._hmac(convert_to(concat_ws(chr(31), name, pg_backend_pid()::text,
                                                        extract(epoch FROM now())::text, value), 'UTF8'),
                                   key, 'sha256'), 1, 16), 'hex');

-- The sealed state `name` of this transaction; NULL where the extension
-- wrote none. A value it did not seal is taken for none, as the compiled
-- edition, which keeps this state in memory, never sees the setting: the
-- call is then answered as it would be there.
CREATE FUNCTION webhook._state(name text) RETURNS text
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    held text := current_setting(name, true);
BEGIN
    IF held ~ '^[0-9a-f]{32}:'
       AND webhook._same_mac(decode(left(held, 32), 'hex'),
                             decode(webhook._state_mac(name, substr(held, 34), webhook._state_key()), 'hex')) THEN
        RETURN substr(held, 34);
    END IF;
    RETURN NULL;
END
$$;

-- A setting that protects a guarantee (sql/operations.sql): here, where
-- the settings are placeholders, as webhook._setting takes it.
CREATE OR REPLACE FUNCTION webhook._protected_setting(name text) RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
RETURN webhook._setting(name);

-- The per-event lock (src/event_lock.rs in the compiled edition): a
-- transaction-scoped advisory lock on a 64-bit key of the lock's parts,
-- taken without waiting by claims and waited for by the functions that
-- finish one. SQL reaches only the bigint key space of advisory locks,
-- which every role may take (pg_advisory_lock is PUBLIC's): so the key is
-- an HMAC of the parts under webhook.state_key, which only the owner
-- reads. Nobody else can compute an event's key and hold it ahead of the
-- event's deliveries (they would be answered in_progress for as long);
-- 64 bits make a collision with an application's own keys as unlikely
-- as it is in the compiled edition's space of its own.
-- STABLE, as convert_to is: an IMMUTABLE one would not be inlined.
CREATE FUNCTION webhook._keyed_lock(key bytea, VARIADIC parts text[]) RETURNS bigint
LANGUAGE sql STABLE STRICT PARALLEL SAFE
RETURN ('x' || encode(substr(webhook._hmac(convert_to(array_to_string(parts, chr(1)), 'UTF8'), key, 'sha256'),
                             1, 8), 'hex'))::bit(64)::bigint;

CREATE FUNCTION webhook._lock_key(VARIADIC parts text[]) RETURNS bigint
LANGUAGE plpgsql STABLE STRICT PARALLEL SAFE
AS $$
BEGIN
    RETURN webhook._keyed_lock(webhook._state_key(), VARIADIC parts);
END
$$;

-- A transaction that holds as many event locks as its budget allows:
-- refused with 54000.
CREATE FUNCTION webhook._lock_budget_spent(fn text) RETURNS integer
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    PERFORM webhook._raise('54000',
        format('%s: this transaction holds %s events already, as many as the lock table allows one transaction',
               fn, current_setting('max_locks_per_transaction')::integer
                   * current_setting('max_connections')::integer / 2),
        NULL,
        'Each event holds a lock until its transaction commits: commit in batches, or queue a backfill with CALL webhook_enqueue_batches(provider, events), which commits every batch_size events.');
    RETURN NULL;
END
$$;

-- The event locks this transaction holds, checked against its budget:
-- half of the shared lock table, refused with 54000 past it. This and
-- _try_lock are expressions the planner takes into their callers
-- (inlined SQL): a claim's lock costs no call of a function.
CREATE FUNCTION webhook._locks_held(fn text) RETURNS integer
LANGUAGE sql VOLATILE
RETURN CASE WHEN coalesce(nullif(current_setting('pg_webhook_inbox.locks_held', true), ''), '0')::integer
                 < current_setting('max_locks_per_transaction')::integer
                   * current_setting('max_connections')::integer / 2
            THEN coalesce(nullif(current_setting('pg_webhook_inbox.locks_held', true), ''), '0')::integer
            ELSE webhook._lock_budget_spent(fn)
       END;

-- Try an event's lock without waiting, counted against the budget (a
-- lock past it is refused, and goes with the transaction it aborts).
CREATE FUNCTION webhook._try_lock(fn text, key bigint) RETURNS boolean
LANGUAGE sql VOLATILE
RETURN CASE WHEN pg_try_advisory_xact_lock(key)
            THEN set_config('pg_webhook_inbox.locks_held', (webhook._locks_held(fn) + 1)::text, true) IS NOT NULL
            ELSE false
       END;

-- The functions' own settings are theirs alone: nobody else calls these.
REVOKE ALL ON FUNCTION webhook._hmac(bytea, bytea, text), webhook._same_mac(bytea, bytea),
    webhook._hex(text, integer), webhook._signature_hex(text, integer), webhook._base64_any(text), webhook._base64(text, integer),
    webhook._to_base64(bytea), webhook._time_ordered_id(text), webhook._new_id(), webhook._raise(text, text, text, text),
    webhook._refused(text, text, text, integer, integer), webhook._refused_null(text, text, anyelement),
    webhook._refused_lease(text, text, interval),
    webhook._required(text, text, anyelement), webhook._required_text(text, text, text, integer),
    webhook._bounded_text(text, text, text, integer), webhook._payload_size(text, text, integer),
    webhook._protected_settings(), webhook._setting(text), webhook._setting_number(text, text, numeric),
    webhook._setting_text(text), webhook._setting_on(text, boolean),
    webhook._lease(text, text, interval), webhook._truncated(text, integer),
    webhook._lock_key(text[]), webhook._locks_held(text), webhook._lock_budget_spent(text),
    webhook._try_lock(text, bigint), webhook._state_key(), webhook._state_mac(text, text, bytea),
    webhook._state(text), webhook._keyed_lock(bytea, text[]),
    webhook._protected_setting(text)
    FROM PUBLIC;

SELECT pg_catalog.set_config('search_path', '@extschema@, pg_temp', true);
