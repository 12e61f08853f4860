-- pg_webhook_inbox: who may do what.
--
-- Everything that reads or writes webhook state runs as the extension
-- owner with a pinned search_path (set on each function), and nobody may
-- call it until a DBA grants it:
--   SELECT webhook_grant_app('app_role');        -- handlers and workers
--   SELECT webhook_grant_operator('ops_role');   -- views and maintenance
-- Managing providers and secrets stays with the extension owner unless
-- granted explicitly.

-- Bound to pg_catalog while this file runs (see schema.sql).
SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);

-- Grant an application role exactly what a webhook handler and an inbox
-- worker need: EXECUTE on their functions. No table privilege at all.
CREATE FUNCTION @extschema@.webhook_grant_app(role regrole)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF pg_catalog.pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('webhook_grant_app');
    END IF;
    EXECUTE format('GRANT EXECUTE ON FUNCTION
        @extschema@.webhook_receive(text, jsonb, bytea, interval, boolean, text, boolean, text),
        @extschema@.webhook_receive(text, jsonb, text, interval, boolean, text, boolean, text),
        @extschema@.webhook_receivable_providers(),
        @extschema@.webhook_claim(text, text, text, jsonb, text, interval, boolean),
        @extschema@.webhook_claim(text, text, text, bytea, text, interval, boolean),
        @extschema@.webhook_claim(text, text, text, text, text, interval, boolean),
        @extschema@.webhook_enqueue(text, text, text, jsonb, text, text),
        @extschema@.webhook_enqueue(text, text, text, bytea, text, text),
        @extschema@.webhook_enqueue(text, text, text, text, text, text),
        @extschema@.webhook_enqueue_polled(text, text, text, jsonb),
        @extschema@.webhook_next(integer, text, text, text, interval),
        @extschema@.webhook_complete(uuid, jsonb),
        @extschema@.webhook_fail(uuid, text, interval, boolean),
        @extschema@.webhook_complete_batch(uuid[]),
        @extschema@.webhook_fail_batch(uuid[], text, interval, boolean),
        @extschema@.webhook_extend(uuid, interval),
        @extschema@.webhook_outbound_key(uuid, text),
        @extschema@.webhook_outbound_key(text, text, text),
        @extschema@.idempotency_begin(text, text, text, interval),
        @extschema@.idempotency_checkpoint(uuid, text, jsonb),
        @extschema@.idempotency_finish(uuid, integer, text, jsonb),
        @extschema@.idempotency_fail(uuid, text, boolean, integer, text, jsonb),
        @extschema@.idempotency_fingerprint(text, text, bytea),
        @extschema@.idempotency_fingerprint(text, text, text)
        TO %s', role);
    EXECUTE format('GRANT EXECUTE ON PROCEDURE
        @extschema@.webhook_enqueue_batches(text, jsonb, integer, bigint)
        TO %s', role);
END
$$;
COMMENT ON FUNCTION @extschema@.webhook_grant_app(regrole) IS
    'Grant a handler or worker role EXECUTE on webhook_receive, webhook_receivable_providers, webhook_claim, webhook_enqueue, webhook_enqueue_batches, webhook_enqueue_polled, webhook_next, webhook_complete, webhook_fail (and their _batch forms), webhook_extend, webhook_outbound_key and the idempotency_ functions of its own API (begin, checkpoint, finish, fail, fingerprint); no table privilege';

-- Grant a read-only role what an operator sees: the archive, the inbox,
-- the views, the metrics and alerts, the registry without its secrets
-- (secrets by fingerprint and last use); no function that changes
-- anything. What the web console's viewers connect as.
CREATE FUNCTION @extschema@.webhook_grant_viewer(role regrole)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF pg_catalog.pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('webhook_grant_viewer');
    END IF;
    EXECUTE format('GRANT USAGE ON SCHEMA webhook TO %s', role);
    EXECUTE format('GRANT SELECT ON webhook.events, webhook.deliveries, webhook.delivery_log,
        webhook.delivery_failures, webhook.signature_bindings, webhook.providers,
        webhook.provider_summary, webhook.recent_failures, webhook.stuck_claims,
        webhook.rejected_deliveries, webhook.dead_letters, webhook.payload_mismatches,
        webhook.provider_stats, webhook.inbox, webhook.inbox_failures, webhook.inbox_stats,
        webhook.requeues, webhook.watermarks, webhook.blocked_entities,
        webhook.secret_usage, webhook.idempotency_keys, webhook.archive_partitions,
        webhook.app_scopes, webhook.metric_minutes, webhook.metric_totals, webhook.alerts,
        webhook.alert_rules, webhook.alert_rules_in_effect, webhook.pauses, webhook.paused,
        webhook.limits, webhook.limits_in_effect, webhook.breakers, webhook.polled,
        webhook.missed_deliveries, webhook.replays, webhook.replay_items,
        webhook.replay_progress, webhook.trace_contexts, webhook.filters TO %s', role);
    EXECUTE format('GRANT EXECUTE ON FUNCTION
        @extschema@.webhook_providers(),
        @extschema@.webhook_source_signed(text, text)
        TO %s', role);
END
$$;
COMMENT ON FUNCTION @extschema@.webhook_grant_viewer(regrole) IS
    'Grant a read-only role SELECT on the archive, the inbox, the watermarks, the idempotency keys, the application roles'' scopes, the metrics, the alerts, the steering tables, the replays, the filters and every view (secret usage by fingerprint included), and webhook_providers(); no function that changes anything, never the secrets';

-- Grant an operator role the archive, the views and the maintenance
-- functions; never the secrets.
CREATE FUNCTION @extschema@.webhook_grant_operator(role regrole)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF pg_catalog.pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('webhook_grant_operator');
    END IF;
    -- What a viewer sees.
    PERFORM @extschema@.webhook_grant_viewer(role);
    EXECUTE format('GRANT EXECUTE ON FUNCTION
        @extschema@.webhook_requeue(text, text, text),
        @extschema@.webhook_requeue_dead(text, text, text, timestamptz, timestamptz, text),
        @extschema@.webhook_purge(interval, integer, integer),
        @extschema@.webhook_create_partitions(integer),
        @extschema@.webhook_reset_watermark(text, text, text),
        @extschema@.idempotency_purge(interval),
        @extschema@.webhook_metrics(text),
        @extschema@.webhook_metrics_prometheus(),
        @extschema@.webhook_metrics_rollup(),
        @extschema@.webhook_metric_quantile(double precision, text, timestamptz, text, text),
        @extschema@.webhook_alerts_evaluate(),
        @extschema@.webhook_alert_acknowledge(bigint),
        @extschema@.webhook_alert_silence(bigint, interval),
        @extschema@.webhook_pause(text, text, text),
        @extschema@.webhook_resume(text, text),
        @extschema@.webhook_quarantine(text, text, text, text),
        @extschema@.webhook_release(text, text, text),
        @extschema@.webhook_set_limit(text, text, integer, double precision, integer, integer, interval),
        @extschema@.webhook_backfill(text, text, timestamptz, timestamptz, double precision),
        @extschema@.webhook_replay(text, text, text[], text[], timestamptz, timestamptz, text, jsonpath,
                                   text, double precision, boolean, integer),
        @extschema@.webhook_replay_pause(uuid),
        @extschema@.webhook_replay_resume(uuid),
        @extschema@.webhook_replay_cancel(uuid),
        @extschema@.webhook_set_filter(text, text, text[], jsonpath)
        TO %s', role);
END
$$;
COMMENT ON FUNCTION @extschema@.webhook_grant_operator(regrole) IS
    'Grant an operator role the archive, the inbox, the watermarks, the idempotency keys, the application roles'' scopes, the views (secret usage by fingerprint included), webhook_requeue, webhook_requeue_dead, webhook_purge, webhook_create_partitions, webhook_reset_watermark, webhook_providers, idempotency_purge, the metrics (webhook_metrics, webhook_metrics_prometheus, webhook_metric_quantile, webhook.metric_minutes), the alerts (webhook.alerts, webhook_alerts_evaluate, webhook_alert_acknowledge, webhook_alert_silence), the steering of the inbox (webhook_pause, webhook_resume, webhook_quarantine, webhook_release, webhook_set_limit, webhook.paused, webhook.limits_in_effect), webhook_backfill, replays (webhook_replay, webhook_replay_pause, webhook_replay_resume, webhook_replay_cancel, webhook.replays, webhook.replay_progress), reconciliation (webhook.polled, webhook.missed_deliveries) and filters (webhook_set_filter, webhook_source_signed, webhook.filters); never the secrets';

-- Grant a monitoring role (the one a Prometheus exporter logs in as) the
-- metrics and nothing else: no payload, no event id, no table.
CREATE FUNCTION @extschema@.webhook_grant_monitor(role regrole)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF pg_catalog.pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('webhook_grant_monitor');
    END IF;
    EXECUTE format('GRANT EXECUTE ON FUNCTION
        @extschema@.webhook_metrics(text),
        @extschema@.webhook_metrics_prometheus(),
        @extschema@.webhook_metric_quantile(double precision, text, timestamptz, text, text)
        TO %s', role);
END
$$;
COMMENT ON FUNCTION @extschema@.webhook_grant_monitor(regrole) IS
    'Grant a monitoring role (a Prometheus exporter''s) EXECUTE on webhook_metrics, webhook_metrics_prometheus and webhook_metric_quantile: counts by provider, consumer and status only, no table';

-- Scope an application role to some providers and, for inbox workers,
-- consumers: a DBA serving several teams from one database gives each
-- team's role its own. From then on a session acting as the role, or as
-- any role inheriting its privileges, may receive, claim and queue events
-- of these providers only, and lease and finish only their events for
-- these consumers; webhook_next must name the provider. A session bound
-- by several scopes may use each. Superusers are never bound. Replaces
-- the role's scope; webhook_unscope_app removes it.
CREATE FUNCTION @extschema@.webhook_scope_app(role regrole, providers text[], consumers text[] DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF pg_catalog.pg_is_in_recovery() THEN
        PERFORM webhook._refuse_on_standby('webhook_scope_app');
    END IF;
    IF webhook_scope_app.role IS NULL THEN
        RAISE EXCEPTION 'webhook_scope_app: argument "role" must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF webhook_scope_app.providers IS NULL THEN
        RAISE EXCEPTION 'webhook_scope_app: argument "providers" must not be NULL'
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = 'To let the role use every provider again: webhook_unscope_app(role).';
    END IF;
    IF (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.oid = webhook_scope_app.role) THEN
        RAISE EXCEPTION 'webhook_scope_app: argument "role": % is a superuser, which no scope binds', webhook_scope_app.role
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- The table's checks say the same; here the error names the argument.
    IF pg_catalog.cardinality(webhook_scope_app.providers) NOT BETWEEN 1 AND 1000
       OR pg_catalog.array_position(webhook_scope_app.providers, NULL) IS NOT NULL
       OR '' = ANY (webhook_scope_app.providers) THEN
        RAISE EXCEPTION 'webhook_scope_app: argument "providers" must list 1 to 1000 names, none NULL or empty'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF pg_catalog.cardinality(webhook_scope_app.consumers) NOT BETWEEN 1 AND 1000
       OR pg_catalog.array_position(webhook_scope_app.consumers, NULL) IS NOT NULL
       OR '' = ANY (webhook_scope_app.consumers) THEN
        RAISE EXCEPTION 'webhook_scope_app: argument "consumers" must be NULL (every consumer) or list 1 to 1000 names, none NULL or empty'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO webhook.app_scopes AS s (role, providers, consumers)
    VALUES (webhook_scope_app.role,
            ARRAY(SELECT DISTINCT p FROM pg_catalog.unnest(webhook_scope_app.providers) AS p ORDER BY p),
            CASE WHEN webhook_scope_app.consumers IS NOT NULL THEN
                ARRAY(SELECT DISTINCT c FROM pg_catalog.unnest(webhook_scope_app.consumers) AS c ORDER BY c)
            END)
    ON CONFLICT ON CONSTRAINT app_scopes_pkey
    DO UPDATE SET providers = excluded.providers, consumers = excluded.consumers,
                  scoped_at = excluded.scoped_at, scoped_by = excluded.scoped_by;
END
$$;
COMMENT ON FUNCTION @extschema@.webhook_scope_app(regrole, text[], text[]) IS
    'Scope an application role (and the roles inheriting its privileges) to these providers and, for the inbox, consumers (NULL: all of theirs); replaces its scope';

-- Let a scoped role use every provider again.
CREATE FUNCTION @extschema@.webhook_unscope_app(role regrole)
RETURNS boolean
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT webhook._refuse_on_standby('webhook_unscope_app') WHERE pg_catalog.pg_is_in_recovery();
    WITH removed AS (
        DELETE FROM webhook.app_scopes s WHERE s.role = webhook_unscope_app.role RETURNING 1
    )
    SELECT EXISTS (SELECT FROM removed)
$$;
COMMENT ON FUNCTION @extschema@.webhook_unscope_app(regrole) IS
    'Remove an application role''s scope: it may use every provider and consumer again; false if it had none';

-- The rule, rather than a list that could miss a new object, applied by
-- finalize.sql and at the end of every upgrade script (which may add
-- objects):
--   * no member function is executable by PUBLIC, except webhook_schemes,
--     verify_hmac, webhook_verify and webhook_verify_detail, which read no
--     table and stay callable by everyone;
--   * whatever ALTER DEFAULT PRIVILEGES grants the owner's new schemas,
--     tables, views, sequences and functions to other roles (CREATE
--     applies such defaults to every object it makes, so a role holding
--     them could read the secrets) is revoked from the extension's
--     objects again.
-- Grants a DBA makes afterwards (webhook_grant_app, webhook_grant_operator,
-- or by hand) are left alone, so an upgrade keeps them.
CREATE FUNCTION webhook._restrict_privileges() RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    unwanted record;
BEGIN
    FOR unwanted IN
        WITH members AS (
            SELECT d.classid, d.objid
              FROM pg_catalog.pg_depend d
              JOIN pg_catalog.pg_extension x ON x.oid = d.refobjid
             WHERE d.refclassid = 'pg_catalog.pg_extension'::pg_catalog.regclass
               AND d.deptype = 'e'
               AND x.extname = 'pg_webhook_inbox'
        ), objects AS (
            SELECT 'ROUTINE ' || p.oid::pg_catalog.regprocedure::text AS object,
                   'f'::"char" AS objtype, p.proowner AS owner, p.pronamespace AS nsp,
                   p.proacl AS acl,
                   p.proname IN ('webhook_schemes', 'verify_hmac', 'webhook_verify',
                                 'webhook_verify_detail') AS for_everyone
              FROM members m
              JOIN pg_catalog.pg_proc p ON p.oid = m.objid
             WHERE m.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass
            UNION ALL
            SELECT 'TABLE ' || c.oid::pg_catalog.regclass::text,
                   CASE c.relkind WHEN 'S' THEN 'S' ELSE 'r' END::"char",
                   c.relowner, c.relnamespace, c.relacl, false
              FROM members m
              JOIN pg_catalog.pg_class c ON c.oid = m.objid
             WHERE m.classid = 'pg_catalog.pg_class'::pg_catalog.regclass
            UNION ALL
            SELECT 'SCHEMA ' || pg_catalog.quote_ident(n.nspname), 'n'::"char",
                   n.nspowner, 0::pg_catalog.oid, n.nspacl, false
              FROM members m
              JOIN pg_catalog.pg_namespace n ON n.oid = m.objid
             WHERE m.classid = 'pg_catalog.pg_namespace'::pg_catalog.regclass
        ), defaults AS (
            -- What default privileges (global, or for the object's schema)
            -- hand out when an object is created.
            SELECT o.object, a.grantee, a.privilege_type
              FROM objects o
              JOIN pg_catalog.pg_default_acl d
                ON d.defaclrole = o.owner AND d.defaclobjtype = o.objtype
               AND d.defaclnamespace IN (0, o.nsp)
             CROSS JOIN LATERAL pg_catalog.aclexplode(d.defaclacl) a
            UNION
            -- PostgreSQL's own default: functions are executable by PUBLIC.
            SELECT o.object, 0, 'EXECUTE'
              FROM objects o
             WHERE o.objtype = 'f' AND NOT o.for_everyone
        ), held AS (
            SELECT o.object, a.grantee, a.privilege_type
              FROM objects o
             -- No ACL means the default: PUBLIC may execute a function;
             -- nobody but the owner has anything on a relation or schema.
             CROSS JOIN LATERAL pg_catalog.aclexplode(
                   coalesce(o.acl, CASE o.objtype WHEN 'f' THEN pg_catalog.acldefault('f', o.owner) END)) a
             WHERE a.grantee <> o.owner
        )
        -- Only what is held: a REVOKE inside an extension script records the
        -- object's whole ACL as its initial privileges (pg_init_privs), so
        -- one that changes nothing must not run (it would record the grants
        -- a DBA made since as the extension's own, and pg_dump would then
        -- leave them out).
        SELECT h.object, h.privilege_type,
               CASE WHEN h.grantee = 0 THEN 'PUBLIC'
                    ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(h.grantee)) END AS grantee
          FROM held h
          JOIN defaults d USING (object, grantee, privilege_type)
         WHERE NOT (h.grantee = 0 AND h.privilege_type = 'EXECUTE'
                    AND h.object IN (SELECT o.object FROM objects o WHERE o.for_everyone))
    LOOP
        EXECUTE pg_catalog.format('REVOKE %s ON %s FROM %s',
                                  unwanted.privilege_type, unwanted.object, unwanted.grantee);
    END LOOP;
END
$$;
COMMENT ON FUNCTION webhook._restrict_privileges() IS
    'Internal: the privilege rule every install and upgrade applies';


SELECT pg_catalog.set_config('search_path', '@extschema@, pg_temp', true);
