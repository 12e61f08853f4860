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
}
