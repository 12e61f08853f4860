-- pg_webhook_inbox: the provider registry's functions.
--
-- Registering a provider is one call for the providers the extension knows:
--   SELECT * FROM webhook_register_provider('stripe', secret => 'whsec_...');
-- Secrets are written here and read only by webhook_receive; they are listed
-- by fingerprint (the first 16 hex digits of their SHA-256), never shown.
--
-- Scheme names, aliases and where each puts the event id and type are not
-- written here: they come from webhook_schemes(), the one list Rust parses
-- scheme names with too.

-- Bound to pg_catalog while this file runs (see schema.sql).
SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);

-- How a secret is named without being shown.
CREATE FUNCTION webhook._fingerprint(secret text) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT left(encode(sha256(convert_to($1, 'UTF8')), 'hex'), 16) $$;
COMMENT ON FUNCTION webhook._fingerprint(text) IS 'Internal: how a secret is listed without being shown';

-- What anyone allowed to see the registry sees: no secrets.
CREATE VIEW webhook.provider_summary AS
SELECT p.name, p.scheme, p.tolerance, p.event_id_from, p.event_type_from,
       count(s.fingerprint) FILTER (WHERE s.retired_at IS NULL)::int AS active_secrets,
       coalesce(array_agg(s.fingerprint ORDER BY s.added_at) FILTER (WHERE s.retired_at IS NULL), '{}')
           AS active_fingerprints,
       coalesce(array_agg(s.fingerprint ORDER BY s.added_at) FILTER (WHERE s.retired_at IS NOT NULL), '{}')
           AS retired_fingerprints,
       p.created_at, p.inbox, p.consumers, p.entity_key_from, p.order_from, p.ties, p.fifo
  FROM webhook.providers p
  LEFT JOIN webhook.provider_secrets s ON s.provider = p.name
 GROUP BY p.name;
COMMENT ON VIEW webhook.provider_summary IS 'The registry, secrets listed by fingerprint only';

-- Which secret (or public key, or certificate) is in use: what a DBA looks
-- at before retiring one.
CREATE VIEW webhook.secret_usage AS
SELECT s.provider, s.fingerprint, s.added_at, s.retired_at, u.last_used_at
  FROM webhook.provider_secrets s
  LEFT JOIN webhook.secret_uses u ON u.provider = s.provider AND u.fingerprint = s.fingerprint;
COMMENT ON VIEW webhook.secret_usage IS 'Each provider secret by fingerprint: when added, retired and last used to verify a delivery';

-- Create or update a provider. Arguments left NULL keep their current value,
-- or take the scheme's defaults for a new provider. The scheme defaults to
-- the name when the name is a known scheme or alias ('svix' and 'clerk'
-- mean 'standard'); it is stored under its canonical name.
--
-- inbox: webhook_receive queues the provider's deliveries for workers and
-- answers 2xx at once. A new GitHub provider is in inbox mode unless told
-- otherwise: GitHub never redelivers a delivery it was not answered 2xx
-- for, so any other answer loses the event. consumers: the inbox's
-- consumers of its events (none: 'default').
--
-- Ordering (off unless asked for): entity_key_from and order_from say
-- where in the signed body the entity an event is about and its order
-- value are; ordering => true takes the scheme's preset for what is not
-- given (webhook_schemes()), ordering => false turns it off. ties: an
-- event as new as its entity's watermark is processed ('process') or
-- skipped as stale ('stale'). fifo: the inbox never leases an event while
-- an earlier one of its entity is leased or backing off.
CREATE FUNCTION @extschema@.webhook_register_provider(
    name            text,
    secret          text     DEFAULT NULL,
    scheme          text     DEFAULT NULL,
    tolerance       interval DEFAULT NULL,
    event_id_from   text     DEFAULT NULL,
    event_type_from text     DEFAULT NULL,
    inbox           boolean  DEFAULT NULL,
    consumers       text[]   DEFAULT NULL,
    ordering        boolean  DEFAULT NULL,
    entity_key_from text     DEFAULT NULL,
    order_from      text     DEFAULT NULL,
    ties            text     DEFAULT NULL,
    fifo            boolean  DEFAULT NULL,
    reroute         boolean  DEFAULT false
) RETURNS SETOF webhook.provider_summary
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p_name     text := lower(webhook_register_provider.name);
    existing   webhook.providers;
    v_scheme   text;
    v_entity   text;
    v_order    text;
    known      record;
    failed_check text;
BEGIN
    IF pg_catalog.pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('webhook_register_provider');
    END IF;
    IF p_name IS NULL OR p_name = '' THEN
        RAISE EXCEPTION 'webhook_register_provider: argument "name" must not be empty'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT * INTO existing FROM webhook.providers p WHERE p.name = p_name FOR UPDATE;

    v_scheme := btrim(coalesce(webhook_register_provider.scheme, existing.scheme, p_name));
    SELECT s.* INTO known
      FROM @extschema@.webhook_schemes() s
     WHERE s.scheme = lower(split_part(v_scheme, ';', 1))
        OR lower(split_part(v_scheme, ';', 1)) = ANY (s.aliases);
    IF NOT FOUND THEN
        RAISE EXCEPTION 'webhook_register_provider: argument "scheme": unknown signature scheme "%"', v_scheme
            USING ERRCODE = 'undefined_object',
                  HINT = 'SELECT * FROM webhook_schemes() lists the schemes and their aliases.';
    END IF;
    -- A scheme's options (the generic form's, PayPal's webhook id) are
    -- kept; webhook_verify checks them, and that a scheme needing them has
    -- them.
    BEGIN
        PERFORM @extschema@.webhook_verify(v_scheme, '{}'::jsonb, ''::bytea, '{}'::text[]);
    EXCEPTION WHEN syntax_error THEN
        RAISE EXCEPTION 'webhook_register_provider: argument "scheme": invalid scheme "%"', v_scheme
            USING ERRCODE = 'syntax_error',
                  DETAIL = SQLERRM,
                  HINT = CASE known.scheme
                      WHEN 'paypal' THEN 'PayPal signs with the webhook''s id: paypal;webhook_id=<id>.'
                      WHEN 'hmac' THEN 'The generic form is hmac;header=<name>[;algorithm=sha256|sha1|sha512][;encoding=hex|base64][;prefix=<text>].'
                      ELSE format('Scheme "%s" takes no options.', known.scheme)
                  END;
    END;
    IF pg_catalog.strpos(v_scheme, ';') = 0 THEN
        v_scheme := known.scheme;
    END IF;

    IF webhook_register_provider.ordering IS FALSE THEN
        IF webhook_register_provider.entity_key_from IS NOT NULL
           OR webhook_register_provider.order_from IS NOT NULL THEN
            RAISE EXCEPTION 'webhook_register_provider: argument "ordering": false turns ordering off, but entity_key_from or order_from was given'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
    ELSE
        v_entity := coalesce(webhook_register_provider.entity_key_from,
                             CASE WHEN webhook_register_provider.ordering THEN known.entity_key_from END,
                             existing.entity_key_from);
        v_order := coalesce(webhook_register_provider.order_from,
                            CASE WHEN webhook_register_provider.ordering THEN known.order_from END,
                            existing.order_from);
        IF (webhook_register_provider.ordering OR v_entity IS NOT NULL OR v_order IS NOT NULL)
           AND (v_entity IS NULL OR v_order IS NULL) THEN
            RAISE EXCEPTION 'webhook_register_provider: argument "%": ordering needs both entity_key_from and order_from',
                CASE WHEN v_entity IS NULL THEN 'entity_key_from' ELSE 'order_from' END
                USING ERRCODE = 'null_value_not_allowed',
                      HINT = CASE WHEN v_entity IS NULL
                                  THEN format('Scheme "%s" has no entity key that fits every event type: name the path, for example entity_key_from => ''body:data.id''.', known.scheme)
                                  ELSE format('Scheme "%s" has no order value preset: name the path, for example order_from => ''body:updated_at''.', known.scheme)
                             END;
        END IF;
    END IF;

    -- In an intake tier (webhook_set_slot) a delivery's slot follows from
    -- its route key, and the route key from the scheme, event_id_from and
    -- entity_key_from: changing them sends the redeliveries of every event
    -- received so far to a slot that never saw it, where they would be
    -- taken as new. Refused for a provider registered already, unless
    -- reroute: this slot cannot know whether another holds its events,
    -- and every slot must decide alike (the proxy calls them one by one).
    IF existing.name IS NOT NULL
       AND coalesce(nullif(pg_catalog.current_setting('webhook.slots', true), ''), '0')::integer > 1
       AND (existing.scheme, existing.event_id_from, existing.entity_key_from)
           IS DISTINCT FROM (v_scheme,
                             coalesce(webhook_register_provider.event_id_from, existing.event_id_from),
                             v_entity)
       AND NOT coalesce(webhook_register_provider.reroute, false) THEN
        RAISE EXCEPTION 'webhook_register_provider: changing the scheme, event_id_from or ordering of provider "%" would route its deliveries to other slots', p_name
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = pg_catalog.format('Its route is now scheme %s, event id from %s, entity key from %s; asked: %s, %s, %s. Redeliveries of events received under the old route would reach slots that never saw them, and be processed again.',
                                             existing.scheme, existing.event_id_from, coalesce(existing.entity_key_from, 'none'),
                                             v_scheme, coalesce(webhook_register_provider.event_id_from, existing.event_id_from),
                                             coalesce(v_entity, 'none')),
                  HINT = 'Register the new route under a new provider name (and point the provider''s endpoint at it), or pass reroute => true if it has no deliveries yet or has stopped redelivering what it sent before (docs/scale-out.md).';
    END IF;

    INSERT INTO webhook.providers AS p
           (name, scheme, tolerance, event_id_from, event_type_from, inbox, consumers,
            entity_key_from, order_from, ties, fifo)
    VALUES (p_name,
            v_scheme,
            coalesce(webhook_register_provider.tolerance, existing.tolerance, known.tolerance),
            coalesce(webhook_register_provider.event_id_from, existing.event_id_from, known.event_id_from),
            coalesce(webhook_register_provider.event_type_from, existing.event_type_from, known.event_type_from),
            coalesce(webhook_register_provider.inbox, existing.inbox, known.scheme = 'github'),
            coalesce(webhook_register_provider.consumers, existing.consumers, '{}'),
            v_entity,
            v_order,
            coalesce(webhook_register_provider.ties, existing.ties, 'process'),
            -- Ordering turned off takes FIFO with it.
            CASE WHEN v_entity IS NULL THEN coalesce(webhook_register_provider.fifo, false)
                 ELSE coalesce(webhook_register_provider.fifo, existing.fifo, false) END)
    ON CONFLICT ON CONSTRAINT providers_pkey DO UPDATE
       SET scheme = excluded.scheme, tolerance = excluded.tolerance,
           event_id_from = excluded.event_id_from, event_type_from = excluded.event_type_from,
           inbox = excluded.inbox, consumers = excluded.consumers,
           entity_key_from = excluded.entity_key_from, order_from = excluded.order_from,
           ties = excluded.ties, fifo = excluded.fifo;

    IF webhook_register_provider.secret IS NOT NULL THEN
        PERFORM webhook._add_secret('webhook_register_provider', p_name, webhook_register_provider.secret);
    END IF;
    RETURN QUERY SELECT * FROM webhook.provider_summary s WHERE s.name = p_name;
EXCEPTION
    WHEN not_null_violation THEN
        RAISE EXCEPTION 'webhook_register_provider: scheme "%" has no defaults; give event_id_from and event_type_from', v_scheme
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = 'Sources are ''header:<name>'' or ''body:<dotted.path>'', alternatives joined by ''|''.';
    WHEN check_violation THEN
        -- Each check guards one argument: name it.
        GET STACKED DIAGNOSTICS failed_check = CONSTRAINT_NAME;
        RAISE EXCEPTION 'webhook_register_provider: argument "%" is invalid',
            CASE failed_check
                WHEN 'providers_name_check' THEN 'name'
                WHEN 'providers_tolerance_check' THEN 'tolerance'
                WHEN 'providers_event_id_from_check' THEN 'event_id_from'
                WHEN 'providers_event_type_from_check' THEN 'event_type_from'
                WHEN 'providers_consumers_check' THEN 'consumers'
                WHEN 'providers_entity_key_from_check' THEN 'entity_key_from'
                WHEN 'providers_order_from_check' THEN 'order_from'
                WHEN 'providers_ties_check' THEN 'ties'
                WHEN 'providers_fifo_check' THEN 'fifo'
                ELSE failed_check
            END
            USING ERRCODE = 'check_violation',
                  DETAIL = SQLERRM,
                  HINT = CASE failed_check
                      WHEN 'providers_entity_key_from_check' THEN 'Ordering reads the signed body only: ''body:<dotted.path>'', alternatives joined by ''|''.'
                      WHEN 'providers_order_from_check' THEN 'Ordering reads the signed body only: ''body:<dotted.path>'', alternatives joined by ''|''.'
                      WHEN 'providers_ties_check' THEN 'ties is ''process'' or ''stale''.'
                      WHEN 'providers_fifo_check' THEN 'FIFO keeps each entity''s events in order: turn ordering on first (ordering => true, or entity_key_from and order_from).'
                      ELSE 'Names (and consumers) are lower-case [a-z0-9_.-]; sources are ''header:<name>'' or ''body:<dotted.path>''; the tolerance is positive.'
                  END;
END
$$;
COMMENT ON FUNCTION @extschema@.webhook_register_provider(text, text, text, interval, text, text, boolean, text[], boolean, text, text, text, boolean, boolean) IS
    'Create or update a provider: scheme (default: its name or alias), tolerance, where the event id and type are, inbox mode and consumers, ordering (entity key, order value, ties, FIFO), and optionally a secret; in an intake tier, a change of its route for a provider with events needs reroute => true';

-- Add a signing secret (or re-activate a retired one). Returns its
-- fingerprint. Its errors name the function the caller called
-- (webhook_add_secret, or webhook_register_provider's secret).
CREATE FUNCTION webhook._add_secret(caller text, provider text, secret text)
RETURNS text
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    fp       text;
    v_scheme text;
    problem  text;
BEGIN
    IF pg_catalog.pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby(caller);
    END IF;
    IF _add_secret.secret IS NULL OR _add_secret.secret = '' THEN
        RAISE EXCEPTION '%: argument "secret" must not be empty', caller
            USING ERRCODE = 'zero_length_character_string';
    END IF;
    SELECT p.scheme INTO v_scheme FROM webhook.providers p WHERE p.name = _add_secret.provider;
    IF NOT FOUND THEN
        RAISE EXCEPTION '%: argument "provider": no provider "%" is registered', caller, _add_secret.provider
            USING ERRCODE = 'undefined_object';
    END IF;
    -- A public key or certificate in the wrong format would only show up
    -- later, as every delivery refused: say so now. (The message never
    -- echoes the secret.)
    problem := @extschema@.webhook_check_key(v_scheme, _add_secret.secret);
    IF problem IS NOT NULL THEN
        RAISE EXCEPTION '%: argument "secret" is not a key for scheme "%"', caller, v_scheme
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = problem || '.';
    END IF;
    -- Each delivery is checked against every active secret: keep them few.
    IF (SELECT pg_catalog.count(*) FROM webhook.provider_secrets s
         WHERE s.provider = _add_secret.provider AND s.retired_at IS NULL
           AND s.secret <> _add_secret.secret) >= 16 THEN
        RAISE EXCEPTION '%: argument "provider": "%" has 16 active secrets already', caller, _add_secret.provider
            USING ERRCODE = 'program_limit_exceeded',
                  HINT = 'Retire the secrets the provider no longer signs with: webhook_retire_secret(provider, fingerprint).';
    END IF;
    fp := webhook._fingerprint(_add_secret.secret);
    INSERT INTO webhook.provider_secrets AS s (provider, secret, fingerprint)
    VALUES (_add_secret.provider, _add_secret.secret, fp)
    ON CONFLICT ON CONSTRAINT provider_secrets_pkey DO UPDATE SET retired_at = NULL;
    -- Its use row, made now: deliveries then only ever update it, and skip
    -- it while another holds it (src/receive/secrets.rs).
    INSERT INTO webhook.secret_uses (provider, fingerprint)
    VALUES (_add_secret.provider, fp)
    ON CONFLICT ON CONSTRAINT secret_uses_pkey DO NOTHING;
    RETURN fp;
END
$$;

COMMENT ON FUNCTION webhook._add_secret(text, text, text) IS
    'Add a signing secret for webhook_add_secret and webhook_register_provider, its errors in the caller''s name';

CREATE FUNCTION @extschema@.webhook_add_secret(provider text, secret text)
RETURNS text
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
RETURN webhook._add_secret('webhook_add_secret', provider, secret);
COMMENT ON FUNCTION @extschema@.webhook_add_secret(text, text) IS
    'Add a signing secret to a provider (several may be active while rotating); returns its fingerprint';

-- Retire a secret, named by its fingerprint (as listed) or by itself.
-- Deliveries signed with it fail from now on. One that verified a delivery
-- in the last day is still in use by the provider: retiring it needs
-- force => true, and warns even then. A leaked key must stop verifying
-- now: deliveries noting its use never hold the secret's row, and another
-- transaction that does (a registry change left open) is waited for at
-- most webhook.maintenance_lock_timeout, then named in the error.
CREATE FUNCTION @extschema@.webhook_retire_secret(
    provider              text,
    secret_or_fingerprint text,
    force                 boolean DEFAULT false
) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    target   webhook.provider_secrets;
    used_at  timestamptz;
    wait     text := pg_catalog.current_setting('webhook.maintenance_lock_timeout', true);
    previous text := pg_catalog.current_setting('lock_timeout');
    holder   xid;
    blockers text;
BEGIN
    IF pg_catalog.pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('webhook_retire_secret');
    END IF;
    PERFORM pg_catalog.set_config('lock_timeout', coalesce(wait, '5s'), true);
    BEGIN
        SELECT * INTO target
          FROM webhook.provider_secrets s
         WHERE s.provider = webhook_retire_secret.provider
           AND s.retired_at IS NULL
           AND s.fingerprint IN (webhook_retire_secret.secret_or_fingerprint,
                                 webhook._fingerprint(webhook_retire_secret.secret_or_fingerprint))
           FOR UPDATE;
    EXCEPTION WHEN lock_not_available THEN
        -- The row's locker, from its xmax, and the sessions of that
        -- transaction.
        SELECT s.xmax INTO holder FROM webhook.provider_secrets s
         WHERE s.provider = webhook_retire_secret.provider
           AND s.fingerprint IN (webhook_retire_secret.secret_or_fingerprint,
                                 webhook._fingerprint(webhook_retire_secret.secret_or_fingerprint));
        SELECT pg_catalog.string_agg(pg_catalog.format('pid %s (user %s, application %L, transaction open since %s)',
                                                       a.pid, a.usename, a.application_name, a.xact_start), ', ')
          INTO blockers
          FROM pg_catalog.pg_locks l JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
         WHERE l.locktype = 'transactionid' AND l.granted AND l.transactionid = holder;
        RAISE EXCEPTION 'webhook_retire_secret: the secret of provider "%" is locked by another transaction; waited %',
            webhook_retire_secret.provider, coalesce(wait, '5s')
            USING ERRCODE = 'lock_not_available',
                  DETAIL = 'Held by ' || coalesce(blockers, 'a transaction that has since ended') || '.',
                  HINT = 'End that transaction (pg_terminate_backend) and retire the secret again.';
    END;
    PERFORM pg_catalog.set_config('lock_timeout', previous, true);
    SELECT u.last_used_at INTO used_at FROM webhook.secret_uses u
     WHERE u.provider = target.provider AND u.fingerprint = target.fingerprint;
    IF target.provider IS NOT NULL AND used_at > now() - interval '1 day' THEN
        IF NOT coalesce(webhook_retire_secret.force, false) THEN
            RAISE EXCEPTION 'webhook_retire_secret: secret % of provider "%" verified a delivery at %, within the last day',
                target.fingerprint, target.provider, used_at
                USING ERRCODE = 'object_not_in_prerequisite_state',
                      DETAIL = 'Deliveries the provider still signs with it would be refused once it is retired.',
                      HINT = 'Retire it once webhook.secret_usage shows the new secret verifying deliveries and this one idle, or pass force => true.';
        END IF;
        RAISE WARNING 'webhook_retire_secret: secret % of provider "%" verified a delivery at %; deliveries still signed with it will be refused',
            target.fingerprint, target.provider, used_at;
    END IF;
    UPDATE webhook.provider_secrets s
       SET retired_at = now()
     WHERE s.provider = target.provider AND s.fingerprint = target.fingerprint;
    IF NOT FOUND THEN
        -- The argument may be the secret itself: never echo it into an
        -- error message, which ends up in the server log.
        RAISE EXCEPTION 'webhook_retire_secret: provider "%" has no active secret with that value or fingerprint',
            webhook_retire_secret.provider
            USING ERRCODE = 'no_data_found',
                  HINT = 'webhook_providers() lists the fingerprints of active secrets.';
    END IF;
END
$$;
COMMENT ON FUNCTION @extschema@.webhook_retire_secret(text, text, boolean) IS
    'Retire a provider''s secret, named by its fingerprint or by itself; one used in the last day needs force => true';

-- The registry, without secrets.
CREATE FUNCTION @extschema@.webhook_providers()
RETURNS SETOF webhook.provider_summary
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ SELECT * FROM webhook.provider_summary ORDER BY name $$;
COMMENT ON FUNCTION @extschema@.webhook_providers() IS 'The registry, without secrets';

-- What an HTTP front door (webhook-ingress) asks at start and now and
-- then: the providers the session's role may receive deliveries for
-- (every one, unless webhook_scope_app binds the role), each with its
-- scheme and whether webhook_receive queues its deliveries in the inbox.
-- No secret, no setting beyond that: granted to application roles.
CREATE FUNCTION @extschema@.webhook_receivable_providers()
RETURNS TABLE (provider text, scheme text, inbox boolean)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    -- The role the session acts as (SET ROLE's, else the login's): the
    -- one scopes bind, which SECURITY DEFINER leaves in the setting.
    WITH acting AS (
        SELECT CASE WHEN pg_catalog.current_setting('role') = 'none' THEN session_user
                    ELSE pg_catalog.current_setting('role')::name END AS name
    ), binding AS (
        SELECT s.providers
          FROM webhook.app_scopes s, acting a
         WHERE pg_catalog.pg_has_role(a.name, s.role, 'USAGE')
           AND NOT (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = a.name)
    )
    SELECT p.name, p.scheme, p.inbox
      FROM webhook.providers p
     WHERE NOT EXISTS (SELECT FROM binding)
        OR EXISTS (SELECT FROM binding b WHERE p.name = ANY (b.providers))
     ORDER BY p.name
$$;
COMMENT ON FUNCTION @extschema@.webhook_receivable_providers() IS
    'The providers this session may receive deliveries for (its scope''s, or all), with their scheme and whether they queue in the inbox; no secrets';

SELECT pg_catalog.set_config('search_path', '@extschema@, pg_temp', true);
