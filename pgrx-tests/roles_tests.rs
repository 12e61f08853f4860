//! The role model: an application role can only call the handler
//! functions, an operator role can only look and maintain, nobody but the
//! owner reads secrets, and a caller's search_path cannot reach inside the
//! SECURITY DEFINER functions.

#[pgrx::pg_schema]
mod tests {
    use crate::in_db_tests::{assert_error, claim, register_test_providers, run};
    use pgrx::prelude::*;

    fn roles() {
        register_test_providers();
        Spi::run(
            "CREATE ROLE wh_app NOLOGIN;  SELECT webhook_grant_app('wh_app');
             CREATE ROLE wh_ops NOLOGIN;  SELECT webhook_grant_operator('wh_ops');
             -- The test helper is a member of the extension too, so it is
             -- revoked from PUBLIC like every other function.
             GRANT EXECUTE ON FUNCTION error_of(text) TO wh_app, wh_ops;",
        )
        .unwrap();
    }

    fn as_role(role: &str) {
        Spi::run(&format!("SET LOCAL ROLE {role}")).unwrap();
    }

    #[pg_test]
    fn the_app_role_can_handle_webhooks() {
        roles();
        as_role("wh_app");
        let (id, claimed, ..) = claim("stripe", "evt_app", None);
        assert!(claimed);
        run("SELECT webhook_complete($1)", id);
        let status = Spi::get_one::<String>(
            "SELECT status FROM webhook_claim('stripe', 'evt_app', 't', '{}'::jsonb, NULL)",
        );
        assert_eq!(status, Ok(Some("duplicate".into())));
        let received = Spi::get_one::<i32>(
            "SELECT http_status FROM webhook_receive('github', '{}'::jsonb, '\\x7b7d'::bytea)",
        );
        assert_eq!(
            received,
            Ok(Some(401)),
            "webhook_receive is callable, and rejects the unsigned"
        );
        // Outbound keys and the keys of its own API.
        let key = Spi::get_one_with_args::<String>(
            "SELECT webhook_outbound_key($1, 'charge')",
            &[id.into()],
        );
        assert!(key.unwrap().unwrap().starts_with("whk_"));
        Spi::run(
            "SELECT idempotency_finish(request_id, 201, 'created')
               FROM idempotency_begin('tenant', 'key-1', idempotency_fingerprint('POST', '/orders', 'x'::text))",
        )
        .unwrap();
        let replayed = Spi::get_one::<i32>(
            "SELECT http_status FROM idempotency_begin('tenant', 'key-1', idempotency_fingerprint('POST', '/orders', 'x'::text))",
        );
        assert_eq!(replayed, Ok(Some(201)));
    }

    #[pg_test]
    fn the_app_role_cannot_touch_the_tables_or_the_registry() {
        roles();
        let (id, ..) = claim("stripe", "evt_guarded", None);
        as_role("wh_app");
        let denied = [
            "UPDATE webhook.events SET status = 'processed'",
            "DELETE FROM webhook.events",
            "DELETE FROM webhook.delivery_log",
            "INSERT INTO webhook.events (provider, event_id, event_type, status, claim_id)
                 VALUES ('stripe', 'evt_forged', 't', 'processed', gen_random_uuid())",
            "SELECT secret FROM webhook.provider_secrets",
            "SELECT * FROM webhook.providers",
            "SELECT * FROM webhook_providers()",
            "SELECT webhook_register_provider('evil', scheme => 'github')",
            "SELECT webhook_add_secret('github', 'attacker-secret')",
            "SELECT webhook_requeue('stripe', 'evt_guarded')",
            "SELECT webhook_purge('1 day')",
            "SELECT * FROM webhook.dead_letters",
            "SELECT * FROM webhook.idempotency_keys",
            "UPDATE webhook.idempotency_keys SET status = 'finished'",
            "SELECT idempotency_purge()",
        ];
        for sql in denied {
            assert_error(sql, "42501", "permission denied");
        }
        // Marking an event processed takes a claim it owns.
        assert_error(
            "SELECT webhook_complete('00000000-0000-4000-8000-000000000000')",
            "P0002",
            "no delivery",
        );
        Spi::run("RESET ROLE").unwrap();
        let status = Spi::get_one::<String>(
            "SELECT status::text FROM webhook.events WHERE event_id = 'evt_guarded'",
        );
        assert_eq!(status, Ok(Some("processing".into())));
        let _ = id;
    }

    #[pg_test]
    fn the_operator_role_looks_and_maintains_but_never_sees_secrets() {
        roles();
        let (id, ..) = claim("stripe", "evt_ops", None);
        run("SELECT webhook_fail($1, 'x')", id);
        as_role("wh_ops");
        for sql in [
            "SELECT count(*) FROM webhook.recent_failures",
            "SELECT count(*) FROM webhook.stuck_claims",
            "SELECT count(*) FROM webhook.rejected_deliveries",
            "SELECT count(*) FROM webhook.dead_letters",
            "SELECT count(*) FROM webhook.payload_mismatches",
            "SELECT count(*) FROM webhook.provider_stats",
            "SELECT count(*) FROM webhook.deliveries",
            "SELECT count(*) FROM webhook_providers()",
            "SELECT webhook_requeue('stripe', 'evt_ops')",
            "SELECT webhook_purge('90 days')",
            "SELECT count(*) FROM webhook.idempotency_keys",
            "SELECT idempotency_purge()",
        ] {
            assert_eq!(
                Spi::get_one::<String>(&format!("SELECT error_of($${sql}$$)")),
                Ok(None),
                "{sql}"
            );
        }
        assert_error(
            "SELECT secret FROM webhook.provider_secrets",
            "42501",
            "permission denied",
        );
        assert_error(
            "SELECT webhook_claim('stripe', 'e', 't', '{}'::jsonb, NULL)",
            "42501",
            "permission denied",
        );
        assert_error(
            "UPDATE webhook.events SET status = 'processed'",
            "42501",
            "permission denied",
        );
    }

    #[pg_test]
    fn a_callers_search_path_cannot_reach_inside() {
        roles();
        // Functions and an operator that would shadow the built-ins the
        // extension's SQL uses, were its search_path not pinned.
        Spi::run(
            "CREATE SCHEMA evil;
             GRANT USAGE ON SCHEMA evil TO wh_app;
             CREATE FUNCTION evil.clock_timestamp() RETURNS timestamptz
                 LANGUAGE sql AS $$ SELECT 'infinity'::timestamptz $$;
             CREATE FUNCTION evil.now() RETURNS timestamptz
                 LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'hijacked now()'; END $$;
             CREATE FUNCTION evil.sha256(bytea) RETURNS bytea
                 LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'hijacked sha256()'; END $$;
             CREATE FUNCTION evil.textsend(text) RETURNS bytea
                 LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'hijacked textsend()'; END $$;
             CREATE FUNCTION evil.plus(timestamptz, interval) RETURNS timestamptz
                 LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'hijacked +'; END $$;
             CREATE OPERATOR evil.+ (LEFTARG = timestamptz, RIGHTARG = interval, FUNCTION = evil.plus);
             CREATE TABLE evil.events (LIKE webhook.events);
             GRANT ALL ON evil.events TO wh_app;",
        )
        .unwrap();
        as_role("wh_app");
        Spi::run("SET LOCAL search_path = evil, pg_temp, pg_catalog, public").unwrap();
        Spi::run("CREATE TEMP TABLE deliveries (id uuid)").unwrap();

        let (id, claimed, status, _) = claim("stripe", "evt_path", None);
        assert!(claimed && status == "claimed");
        run("SELECT webhook_complete($1)", id);
        Spi::run("RESET ROLE").unwrap();
        Spi::run("SET LOCAL search_path = public, pg_catalog").unwrap();
        let lease_sane = Spi::get_one::<bool>(
            "SELECT processed_at < now() + interval '1 day' FROM webhook.events WHERE event_id = 'evt_path'",
        );
        assert_eq!(
            lease_sane,
            Ok(Some(true)),
            "the real tables and clock were used"
        );
        assert_eq!(
            Spi::get_one::<i64>("SELECT count(*) FROM evil.events"),
            Ok(Some(0))
        );
    }

    /// A role granted the application functions, scoped to `providers`
    /// (and `consumers`, an SQL array or NULL).
    fn scoped_app(role: &str, providers: &str, consumers: &str) {
        Spi::run(&format!(
            "CREATE ROLE {role} NOLOGIN; SELECT webhook_grant_app('{role}');
             GRANT EXECUTE ON FUNCTION error_of(text) TO {role};
             SELECT webhook_scope_app('{role}', {providers}, {consumers});"
        ))
        .unwrap();
    }

    fn status_of(provider: &str, event_id: &str) -> Option<String> {
        Spi::get_one_with_args::<String>(
            "SELECT (SELECT status::text FROM webhook.events WHERE provider = $1 AND event_id = $2)",
            &[provider.into(), event_id.into()],
        )
        .unwrap()
    }

    #[pg_test]
    fn a_scoped_role_takes_in_and_finishes_its_providers_events_only() {
        roles();
        scoped_app("wh_team_a", "'{stripe}'", "NULL");
        // Another team's claim, made by the owner.
        let (theirs, ..) = claim("github", "evt_theirs", None);
        as_role("wh_team_a");
        let (mine, claimed, ..) = claim("stripe", "evt_mine", None);
        assert!(claimed);
        let refused = "role \"wh_team_a\" may not use provider \"github\"";
        for sql in [
            "SELECT * FROM webhook_claim('github', 'evt_squat', 't', '{}'::jsonb, NULL)",
            "SELECT * FROM webhook_claim('github', 'evt_squat', 't', '{}'::bytea, NULL)",
            "SELECT * FROM webhook_enqueue('github', 'evt_squat', 't', '{}'::jsonb, NULL)",
            "SELECT * FROM webhook_receive('github', '{}'::jsonb, '\\x7b7d'::bytea)",
            "SELECT * FROM webhook_next(provider => 'github')",
        ] {
            assert_error(sql, "42501", &format!("argument \"provider\": {refused}"));
        }
        for sql in [
            format!("SELECT webhook_complete('{theirs}')"),
            format!("SELECT webhook_fail('{theirs}', 'sabotage')"),
            format!("SELECT webhook_extend('{theirs}', '1 minute')"),
        ] {
            assert_error(&sql, "42501", &format!("argument \"id\": {refused}"));
        }
        assert_error(
            "SELECT * FROM webhook_next()",
            "42501",
            "argument \"provider\" must name a provider",
        );
        run("SELECT webhook_complete($1)", mine);
        Spi::run("RESET ROLE").unwrap();
        assert_eq!(status_of("github", "evt_squat"), None, "nothing squatted");
        assert_eq!(
            status_of("github", "evt_theirs").as_deref(),
            Some("processing")
        );
        assert_eq!(
            status_of("stripe", "evt_mine").as_deref(),
            Some("processed")
        );
        assert_eq!(
            crate::in_db_tests::count(
                "SELECT count(*) FROM webhook.delivery_log WHERE provider = 'github' AND event_id = 'evt_squat'"
            ),
            0,
            "a refusal archives nothing"
        );
        run("SELECT webhook_complete($1)", theirs);
    }

    #[pg_test]
    fn scopes_bind_the_roles_inheriting_them_and_name_consumers() {
        roles();
        Spi::run(
            "SELECT webhook_register_provider('shop', scheme => 'github', secret => 's',
                                              consumers => '{billing,analytics}');
             SELECT webhook_enqueue('shop', 'evt_1', 't', '{}'::jsonb, NULL);",
        )
        .unwrap();
        scoped_app("wh_billing", "'{shop}'", "'{billing}'");
        scoped_app("wh_payments", "'{stripe}'", "NULL");
        Spi::run(
            "CREATE ROLE wh_worker NOLOGIN IN ROLE wh_billing, wh_payments;
             CREATE ROLE wh_unscoped NOLOGIN; SELECT webhook_grant_app('wh_unscoped');",
        )
        .unwrap();
        // The analytics consumer's lease, taken by the owner.
        let analytics = Spi::get_one::<pgrx::Uuid>(
            "SELECT id FROM webhook_next(provider => 'shop', consumer => 'analytics')",
        )
        .unwrap()
        .unwrap();
        as_role("wh_worker");
        // Bound by both scopes: each allows what it lists.
        let (claimed_stripe, claimed, ..) = claim("stripe", "evt_pay", None);
        assert!(claimed);
        run("SELECT webhook_complete($1)", claimed_stripe);
        let billing = Spi::get_one::<pgrx::Uuid>(
            "SELECT id FROM webhook_next(provider => 'shop', consumer => 'billing')",
        )
        .unwrap()
        .expect("billing's lease");
        assert_error(
            "SELECT * FROM webhook_next(provider => 'shop', consumer => 'analytics')",
            "42501",
            "argument \"consumer\": role \"wh_worker\" may not use consumer \"analytics\" of provider \"shop\"",
        );
        assert_error(
            "SELECT * FROM webhook_next(provider => 'github', consumer => 'billing')",
            "42501",
            "argument \"provider\": role \"wh_worker\" may not use provider \"github\"",
        );
        for sql in [
            format!("SELECT webhook_complete('{analytics}')"),
            format!("SELECT webhook_fail('{analytics}', 'x', '1 second')"),
            format!("SELECT webhook_extend('{analytics}', '1 minute')"),
        ] {
            assert_error(&sql, "42501", "argument \"id\"");
        }
        run("SELECT webhook_complete($1)", billing);
        Spi::run("RESET ROLE").unwrap();
        assert_eq!(
            Spi::get_one::<String>(
                "SELECT string_agg(consumer || ' ' || status, ', ' ORDER BY consumer)
                   FROM webhook.inbox WHERE event_id = 'evt_1'"
            )
            .unwrap()
            .as_deref(),
            Some("analytics leased, billing processed")
        );
        // A role outside every scope, and the owner, are not bound.
        as_role("wh_unscoped");
        run("SELECT webhook_complete($1)", analytics);
        Spi::run("RESET ROLE").unwrap();
        // Unscoped again: every consumer.
        assert_eq!(
            Spi::get_one::<bool>("SELECT webhook_unscope_app('wh_billing')"),
            Ok(Some(true))
        );
        assert_eq!(
            Spi::get_one::<bool>("SELECT webhook_unscope_app('wh_billing')"),
            Ok(Some(false))
        );
        Spi::run("SELECT webhook_enqueue('shop', 'evt_2', 't', '{}'::jsonb, NULL)").unwrap();
        as_role("wh_worker");
        // Still bound by the scope it inherits from wh_payments.
        assert_error(
            "SELECT * FROM webhook_next(provider => 'shop', consumer => 'analytics')",
            "42501",
            "may not use provider \"shop\"",
        );
        Spi::run("RESET ROLE").unwrap();
        Spi::run("SELECT webhook_unscope_app('wh_payments')").unwrap();
        as_role("wh_worker");
        assert_eq!(
            crate::in_db_tests::count(
                "SELECT count(*) FROM webhook_next(provider => 'shop', consumer => 'analytics')"
            ),
            1
        );
    }

    #[pg_test]
    fn a_scope_change_applies_to_the_next_call() {
        roles();
        scoped_app("wh_team", "'{stripe}'", "NULL");
        as_role("wh_team");
        assert!(claim("stripe", "evt_1", None).1);
        Spi::run("RESET ROLE").unwrap();
        Spi::run("SELECT webhook_scope_app('wh_team', '{github}')").unwrap();
        as_role("wh_team");
        assert_error(
            "SELECT * FROM webhook_claim('stripe', 'evt_2', 't', '{}'::jsonb, NULL)",
            "42501",
            "may not use provider \"stripe\"",
        );
        assert!(claim("github", "evt_3", None).1);
    }

    #[pg_test]
    fn scoping_refuses_bad_arguments() {
        roles();
        Spi::run("CREATE ROLE wh_root SUPERUSER NOLOGIN").unwrap();
        for (sql, sqlstate, needle) in [
            (
                "SELECT webhook_scope_app(NULL, '{stripe}')",
                "22004",
                "argument \"role\"",
            ),
            (
                "SELECT webhook_scope_app('wh_app', NULL)",
                "22004",
                "argument \"providers\"",
            ),
            (
                "SELECT webhook_scope_app('wh_app', '{}')",
                "22023",
                "argument \"providers\"",
            ),
            (
                "SELECT webhook_scope_app('wh_app', '{stripe,\"\"}')",
                "22023",
                "argument \"providers\"",
            ),
            (
                "SELECT webhook_scope_app('wh_app', ARRAY['stripe', NULL])",
                "22023",
                "argument \"providers\"",
            ),
            (
                "SELECT webhook_scope_app('wh_app', '{stripe}', '{}')",
                "22023",
                "argument \"consumers\"",
            ),
            (
                "SELECT webhook_scope_app('wh_root', '{stripe}')",
                "22023",
                "superuser",
            ),
            (
                "SELECT webhook_scope_app('no_such_role', '{stripe}')",
                "42704",
                "no_such_role",
            ),
        ] {
            assert_error(sql, sqlstate, needle);
        }
        assert_eq!(
            crate::in_db_tests::count("SELECT count(*) FROM webhook.app_scopes"),
            0
        );
        // Kept sorted, without repeats; a second call replaces the first.
        Spi::run(
            "SELECT webhook_scope_app('wh_app', '{stripe,github,stripe}', '{b,a}');
             SELECT webhook_scope_app('wh_app', '{stripe,github,stripe}');",
        )
        .unwrap();
        assert_eq!(
            Spi::get_one::<String>(
                "SELECT role::text || ' ' || providers::text || ' ' || coalesce(consumers::text, 'all')
                   FROM webhook.app_scopes"
            )
            .unwrap()
            .as_deref(),
            Some("wh_app {github,stripe} all")
        );
        // An application role can neither read nor change scopes.
        as_role("wh_app");
        for sql in [
            "SELECT * FROM webhook.app_scopes",
            "DELETE FROM webhook.app_scopes",
            "SELECT webhook_unscope_app('wh_app')",
            "SELECT webhook_scope_app('wh_app', '{github,stripe,paypal}')",
        ] {
            assert_error(sql, "42501", "permission denied");
        }
    }
}
