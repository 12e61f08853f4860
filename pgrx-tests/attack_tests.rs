//! Attacks on the central path that must fail: replays under forged id
//! headers, archives filled by forgeries, secrets kept in headers, leases
//! held forever, claim ids leaked through errors, ids that collide.

#[pgrx::pg_schema]
mod tests {
    use crate::in_db_tests::{
        assert_error, claim, count, github_headers, receive_with_id, register_test_providers, run,
        stripe_headers,
    };
    use pgrx::prelude::*;

    const BODY: &str = r#"{"action": "opened", "number": 7}"#;

    /// Headers of a Standard Webhooks delivery signed now, in the given
    /// header family (`svix` or `webhook`), with extra headers merged in.
    fn standard_headers(family: &str, id: &str, body: &str, extra: &str) -> String {
        format!(
            "(SELECT jsonb_build_object('{family}-id', '{id}', '{family}-timestamp', ts,
                     '{family}-signature', 'v1,' || encode(hmac(convert_to('{id}.' || ts || '.' || '{body}', 'UTF8'),
                                                              'standard-test-key'::bytea, 'sha256'), 'base64'))
                     || '{extra}'::jsonb
                FROM (SELECT extract(epoch FROM now())::bigint::text AS ts) t)"
        )
    }

    fn register_standard(name: &str) {
        Spi::run(&format!(
            "SELECT webhook_register_provider('{name}',
                 secret => 'whsec_' || encode('standard-test-key'::bytea, 'base64'))"
        ))
        .unwrap();
    }

    #[pg_test]
    fn svix_and_clerk_mean_standard_under_every_spelling() {
        for (name, scheme) in [
            ("svix", None),
            ("clerk", None),
            ("acme", Some("Svix")),
            ("beta", Some("standard-webhooks")),
        ] {
            let scheme_arg = scheme
                .map(|s| format!(", scheme => '{s}'"))
                .unwrap_or_default();
            let got = Spi::get_two::<String, String>(&format!(
                "SELECT scheme, event_id_from FROM webhook_register_provider('{name}'{scheme_arg})"
            ))
            .unwrap();
            assert_eq!(
                got,
                (
                    Some("standard".into()),
                    Some("header:webhook-id|header:svix-id".into())
                ),
                "{name}"
            );
        }
        assert_eq!(
            Spi::get_one::<bool>(
                "SELECT aliases @> ARRAY['svix', 'clerk'] FROM webhook_schemes() WHERE scheme = 'standard'"
            ),
            Ok(Some(true))
        );
        assert_error(
            "SELECT webhook_register_provider('acme2', scheme => 'stripey')",
            "42704",
            "webhook_register_provider: argument \"scheme\"",
        );
    }

    /// A genuine svix-* delivery replayed with an added webhook-id header is
    /// the same event: the id comes from the verified header family.
    #[pg_test]
    fn a_standard_replay_with_another_id_header_is_the_same_event() {
        register_standard("svix");
        let body = r#"{"type": "user.created"}"#;
        let genuine = standard_headers("svix", "msg_1", body, "{}");
        assert_eq!(
            receive_with_id("svix", &genuine, body),
            ("claimed".into(), 200, "ok".into(), Some("msg_1".into()))
        );
        let replay = standard_headers("svix", "msg_1", body, r#"{"webhook-id": "replay-2"}"#);
        let (status, _, _, event_id) = receive_with_id("svix", &replay, body);
        assert_eq!(
            event_id.as_deref(),
            Some("msg_1"),
            "the verified id, not the added header"
        );
        assert_ne!(status, "claimed");
        assert_eq!(count("SELECT count(*) FROM webhook.events"), 1);
        // The webhook-* family on its own is read from itself.
        let modern = standard_headers("webhook", "msg_2", body, r#"{"svix-id": "replay-3"}"#);
        assert_eq!(
            receive_with_id("svix", &modern, body).3.as_deref(),
            Some("msg_2")
        );
    }

    /// GitHub signs only the body: the same body and signature under a
    /// fresh X-GitHub-Delivery is a replay, refused; the genuine
    /// redelivery of the same id is still answered as before.
    #[pg_test]
    fn a_github_replay_under_a_fresh_delivery_id_is_refused() {
        register_test_providers();
        let genuine = github_headers("d-1", "pull_request", BODY, "gh-secret");
        assert_eq!(receive_with_id("github", &genuine, BODY).0, "claimed");
        let forged = github_headers("d-evil-2", "release", BODY, "gh-secret");
        assert_eq!(
            receive_with_id("github", &forged, BODY),
            ("rejected".into(), 401, "replayed".into(), None)
        );
        assert_eq!(receive_with_id("github", &genuine, BODY).0, "in_progress");
        assert_eq!(count("SELECT count(*) FROM webhook.events"), 1);
        assert_eq!(
            Spi::get_two::<String, String>(
                "SELECT reason, event_id FROM webhook.rejected_deliveries"
            ),
            Ok((Some("replayed".into()), Some("d-evil-2".into())))
        );
        // Event types from unsigned headers are marked as such.
        let signed = Spi::get_one::<bool>(&format!(
            "SELECT event_type_signed FROM webhook_receive('github', {genuine}, convert_to('{BODY}', 'UTF8'))"
        ));
        assert_eq!(signed, Ok(Some(false)));
    }

    #[pg_test]
    fn a_shopify_replay_under_a_fresh_event_id_is_refused() {
        Spi::run("SELECT webhook_register_provider('shopify', secret => 'shpss_test')").unwrap();
        let headers = |id: &str, topic: &str| {
            format!(
                "jsonb_build_object('X-Shopify-Event-Id', '{id}', 'X-Shopify-Topic', '{topic}',
                     'X-Shopify-Hmac-Sha256', encode(hmac('{BODY}', 'shpss_test', 'sha256'), 'base64'))"
            )
        };
        assert_eq!(
            receive_with_id("shopify", &headers("e-1", "orders/paid"), BODY).0,
            "claimed"
        );
        assert_eq!(
            receive_with_id("shopify", &headers("e-2", "refunds/create"), BODY).2,
            "replayed"
        );
    }

    #[pg_test]
    fn stripe_event_types_are_signed() {
        register_test_providers();
        let body = r#"{"id": "evt_sig", "type": "charge.succeeded"}"#;
        let signed = Spi::get_one::<bool>(&format!(
            "SELECT event_type_signed FROM webhook_receive('stripe', {},
                 convert_to('{body}', 'UTF8'))",
            stripe_headers(body, "whsec_stripe_test", 0)
        ));
        assert_eq!(signed, Ok(Some(true)));
    }

    /// A forged body is kept only as a prefix, with its size and digest.
    #[pg_test]
    fn a_rejected_body_is_kept_as_a_bounded_prefix() {
        register_test_providers();
        let big = format!(r#"{{"pad": "{}"}}"#, "x".repeat(100_000));
        let forged = github_headers("d-big", "push", "x", "gh-secret");
        assert_eq!(receive_with_id("github", &forged, &big).2, "bad_signature");
        let (kept, size, digest_ok) = Spi::get_three::<i32, i32, bool>(&format!(
            "SELECT octet_length(raw_body), body_size, body_sha256 = sha256(convert_to('{big}', 'UTF8'))
               FROM webhook.delivery_log WHERE claim_status = 'rejected'"
        ))
        .unwrap();
        assert_eq!(
            (kept, size, digest_ok),
            (Some(4096), Some(big.len() as i32), Some(true))
        );
        assert_eq!(
            Spi::get_one::<i32>("SELECT body_bytes FROM webhook.rejected_deliveries"),
            Ok(Some(big.len() as i32))
        );
        // Headers and signature padded to their limits: a forgery's row
        // stays small whatever it carried.
        let padded = format!(
            "({forged} || jsonb_build_object('X-Pad', repeat('p', 50000),
                 'X-Hub-Signature-256', 'sha256=' || repeat('0', 8000)))"
        );
        assert_eq!(
            receive_with_id("github", &padded, &big).2,
            "malformed_header"
        );
        let stored = Spi::get_one::<i32>(
            "SELECT pg_column_size(l.*) FROM webhook.delivery_log l
              WHERE claim_status = 'rejected' ORDER BY id DESC LIMIT 1",
        )
        .unwrap()
        .unwrap();
        assert!(stored < 16 * 1024, "a rejection stored {stored} bytes");
    }

    #[pg_test]
    fn credentials_in_request_headers_are_redacted() {
        register_test_providers();
        let headers = format!(
            "{} || '{{\"Authorization\": \"Bearer sk_live_x\", \"cookie\": \"session=abc\", \"X-Api-Key\": \"k\"}}'::jsonb",
            github_headers("d-redact", "push", BODY, "gh-secret")
        );
        assert_eq!(receive_with_id("github", &headers, BODY).0, "claimed");
        let archived = Spi::get_one::<String>(
            "SELECT headers::text FROM webhook.delivery_log WHERE event_id = 'd-redact'",
        )
        .unwrap()
        .unwrap();
        for secret in ["sk_live_x", "session=abc", "\"k\""] {
            assert!(!archived.contains(secret), "{archived}");
        }
        assert!(
            archived.contains("\"Authorization\": \"[redacted]\""),
            "{archived}"
        );
        assert!(archived.contains("X-GitHub-Delivery"), "{archived}");
        // Forgeries are redacted too.
        let forged = format!(
            "{} || '{{\"Authorization\": \"Bearer sk_live_y\"}}'::jsonb",
            github_headers("d-redact-2", "push", BODY, "wrong")
        );
        assert_eq!(receive_with_id("github", &forged, BODY).2, "bad_signature");
        assert_eq!(
            Spi::get_one::<String>(
                "SELECT headers->>'Authorization' FROM webhook.rejected_deliveries"
            ),
            Ok(Some("[redacted]".into()))
        );
    }

    /// Ids above 2^53 are distinct events: their exact digits are kept.
    #[pg_test]
    fn numeric_event_ids_keep_their_exact_digits() {
        Spi::run(
            "SELECT webhook_register_provider('numeric', secret => 'num-secret', scheme => 'hmac;header=X-Sig',
                 event_id_from => 'body:id', event_type_from => 'body:type')",
        )
        .unwrap();
        for id in [
            "9007199254740993",
            "9007199254740992",
            "123456789012345678901234567890",
        ] {
            let body = format!(r#"{{"id": {id}, "type": "t"}}"#);
            let headers = format!(
                "jsonb_build_object('X-Sig', encode(hmac('{body}', 'num-secret', 'sha256'), 'hex'))"
            );
            let (status, _, _, event_id) = receive_with_id("numeric", &headers, &body);
            assert_eq!(
                (status.as_str(), event_id.as_deref()),
                ("claimed", Some(id))
            );
        }
        assert_eq!(count("SELECT count(*) FROM webhook.events"), 3);
    }

    /// A header serde cannot hold as f64 is no internal error.
    #[pg_test]
    fn huge_numbers_in_headers_are_not_internal_errors() {
        let reason = Spi::get_one::<String>(
            "SELECT reason FROM webhook_verify_detail('github', '{\"X-Hub-Signature-256\": 1e400}'::jsonb,
                 '\\x7b7d'::bytea, ARRAY['s'])",
        );
        assert_eq!(reason, Ok(Some("malformed_header".into())));
        let valid = Spi::get_one::<bool>(
            "SELECT webhook_verify('github',
                 jsonb_build_object('X-Big', 1e400, 'X-Hub-Signature-256',
                                    'sha256=' || encode(hmac('{}', 's', 'sha256'), 'hex')),
                 '\\x7b7d'::bytea, ARRAY['s'])",
        );
        assert_eq!(valid, Ok(Some(true)));
    }

    #[pg_test]
    fn leases_have_a_ceiling() {
        assert_error(
            "SELECT * FROM webhook_claim('stripe', 'evt_long', 't', '{}'::jsonb, NULL, '2 hours')",
            "22023",
            "webhook.max_lease",
        );
        let (id, ..) = claim("stripe", "evt_ok", Some("1 minute"));
        assert_error(
            &format!("SELECT webhook_extend('{id}', '1 day')"),
            "22023",
            "argument \"lease\" is longer than webhook.max_lease",
        );
        // A session's own lease_timeout is cut to the ceiling.
        Spi::run("SET LOCAL webhook.lease_timeout = '10h'").unwrap();
        claim("stripe", "evt_default", None);
        let seconds = Spi::get_one::<f64>(
            "SELECT extract(epoch FROM lease_expires_at - clock_timestamp())::float8
               FROM webhook.events WHERE event_id = 'evt_default'",
        )
        .unwrap()
        .unwrap();
        assert!(seconds <= 3600.0, "{seconds}");
    }

    #[pg_test]
    fn failure_messages_are_capped() {
        let (id, ..) = claim("stripe", "evt_long_error", None);
        run("SELECT webhook_fail($1, repeat('é', 5000))", id);
        let (len, marked) = Spi::get_two::<i32, bool>(
            "SELECT octet_length(last_error), last_error LIKE '%é… [% bytes cut]'
               FROM webhook.events WHERE event_id = 'evt_long_error'",
        )
        .unwrap();
        assert!(len.unwrap() <= 2048, "{len:?}");
        assert_eq!(marked, Some(true));
    }

    /// A stale owner learns it lost the event, never who has it now: a
    /// claim id is all webhook_complete needs.
    #[pg_test]
    fn a_lost_lease_never_names_the_new_owner() {
        let (stale, ..) = claim("stripe", "evt_leak", Some("1 millisecond"));
        Spi::run("SELECT pg_sleep(0.02)").unwrap();
        let (current, _, status, _) = claim("stripe", "evt_leak", None);
        assert_eq!(status, "retry");
        let detail = Spi::get_one::<String>(&format!(
            "SELECT error_detail_of('SELECT webhook_complete(''{stale}'')')"
        ))
        .unwrap()
        .unwrap_or_default();
        assert!(!detail.contains(&current.to_string()), "{detail}");
        assert!(detail.contains("Another delivery"), "{detail}");
    }

    /// Tolerances have one home, the scheme catalog: five minutes for the
    /// schemes that sign a time, none for those that do not.
    #[pg_test]
    fn tolerances_come_from_the_scheme_catalog() {
        let from_catalog = Spi::get_two::<String, bool>(
            "SELECT (SELECT tolerance::text FROM webhook_schemes() WHERE scheme = 'stripe'),
                    (SELECT tolerance IS NULL FROM webhook_schemes() WHERE scheme = 'github')",
        )
        .unwrap();
        assert_eq!(from_catalog, (Some("00:05:00".into()), Some(true)));
        register_test_providers();
        let registered = Spi::get_two::<String, bool>(
            "SELECT (SELECT tolerance::text FROM webhook.providers WHERE name = 'stripe'),
                    (SELECT tolerance IS NULL FROM webhook.providers WHERE name = 'github')",
        )
        .unwrap();
        assert_eq!(registered, (Some("00:05:00".into()), Some(true)));
    }
}
