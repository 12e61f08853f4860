//! The provider registry and webhook_receive: verify, extract, claim, and
//! the HTTP answer, including every way a delivery is rejected.

#[pgrx::pg_schema]
mod tests {
    use crate::in_db_tests::{
        assert_error, error_of, github_headers, receive, register_test_providers, stripe_headers,
    };
    use pgrx::prelude::*;

    const BODY: &str = r#"{"action": "opened", "number": 7}"#;

    #[pg_test]
    fn registering_a_known_provider_is_one_call() {
        register_test_providers();
        let row = Spi::get_three::<String, String, String>(
            "SELECT scheme, event_id_from, event_type_from FROM webhook_providers() WHERE name = 'github'",
        )
        .unwrap();
        assert_eq!(
            row,
            (
                Some("github".into()),
                Some("header:X-GitHub-Delivery".into()),
                Some("header:X-GitHub-Event".into())
            )
        );
        for (name, scheme, id_from) in [
            ("stripe", "stripe", "body:id"),
            ("clerk", "standard", "header:webhook-id|header:svix-id"),
            ("paddle", "paddle", "body:event_id"),
            ("shopify", "shopify", "header:X-Shopify-Event-Id|header:Shopify-Event-Id|header:X-Shopify-Webhook-Id|header:Shopify-Webhook-Id"),
            (
                "slack",
                "slack",
                "body:event_id|body:trigger_id|header:X-Slack-Signature",
            ),
            ("resend", "standard", "header:webhook-id|header:svix-id"),
            ("typeform", "typeform", "body:event_id"),
        ] {
            let got = Spi::get_two::<String, String>(&format!(
                "SELECT scheme, event_id_from FROM webhook_register_provider('{name}')"
            ))
            .unwrap();
            assert_eq!(got, (Some(scheme.into()), Some(id_from.into())), "{name}");
        }
    }

    #[pg_test]
    fn a_typeform_delivery_is_verified_and_claimed_by_its_signed_event_id() {
        Spi::run("SELECT webhook_register_provider('typeform', secret => 'tf-secret')").unwrap();
        let body = r#"{"event_id": "01HTF", "event_type": "form_response", "form_response": {"form_id": "f1"}}"#;
        let headers = |secret: &str| {
            format!(
                "jsonb_build_object('Typeform-Signature',
                     'sha256=' || encode(hmac('{body}', '{secret}', 'sha256'), 'base64'))"
            )
        };
        assert_eq!(
            receive("typeform", &headers("tf-secret"), body),
            ("claimed".into(), 200, "ok".into())
        );
        Spi::run(
            "SELECT webhook_complete(claim_id) FROM webhook.events WHERE provider = 'typeform'",
        )
        .unwrap();
        assert_eq!(
            receive("typeform", &headers("tf-secret"), body),
            ("duplicate".into(), 200, "ok".into())
        );
        assert_eq!(
            receive("typeform", &headers("another-secret"), body),
            ("rejected".into(), 401, "bad_signature".into())
        );
        let event = Spi::get_two::<String, String>(
            "SELECT event_id, event_type FROM webhook.events WHERE provider = 'typeform'",
        )
        .unwrap();
        assert_eq!(event, (Some("01HTF".into()), Some("form_response".into())));
    }

    #[pg_test]
    fn providers_are_listed_without_secrets() {
        register_test_providers();
        let listed = Spi::get_one::<String>(
            "SELECT row_to_json(p)::text FROM webhook_providers() p WHERE name = 'github'",
        )
        .unwrap()
        .unwrap();
        assert!(!listed.contains("gh-secret"), "{listed}");
        let fingerprint =
            Spi::get_one::<String>("SELECT left(encode(sha256('gh-secret'), 'hex'), 16)")
                .unwrap()
                .unwrap();
        assert!(
            listed.contains(&fingerprint),
            "listed by fingerprint: {listed}"
        );
    }

    #[pg_test]
    fn a_signed_delivery_is_claimed_then_a_duplicate() {
        register_test_providers();
        let headers = github_headers("d-1", "pull_request", BODY, "gh-secret");
        assert_eq!(
            receive("github", &headers, BODY),
            ("claimed".into(), 200, "ok".into())
        );
        let (event_type, signature, has_headers) = Spi::get_three::<String, String, bool>(
            "SELECT event_type, signature, headers ? 'X-GitHub-Event' FROM webhook.deliveries WHERE event_id = 'd-1'",
        )
        .unwrap();
        assert_eq!(event_type.as_deref(), Some("pull_request"));
        assert!(signature.unwrap().starts_with("sha256="));
        assert_eq!(has_headers, Some(true));
        // Still running: a redelivery is in progress (409).
        assert_eq!(
            receive("github", &headers, BODY),
            ("in_progress".into(), 409, "ok".into())
        );
        Spi::run("SELECT webhook_complete(id, '{\"pr\": 7}') FROM webhook.deliveries WHERE event_id = 'd-1' AND claim_status = 'claimed'").unwrap();
        assert_eq!(
            receive("github", &headers, BODY),
            ("duplicate".into(), 200, "ok".into())
        );
        // The stored result comes back with the duplicate.
        let result = Spi::get_one::<String>(&format!(
            "SELECT result->>'pr' FROM webhook_receive('github', {headers}, convert_to('{BODY}', 'UTF8'))"
        ));
        assert_eq!(result, Ok(Some("7".into())));
    }

    #[pg_test]
    fn bad_deliveries_are_rejected_and_archived_without_a_claim() {
        register_test_providers();
        let forged = github_headers("d-2", "push", BODY, "not-the-secret");
        assert_eq!(
            receive("github", &forged, BODY),
            ("rejected".into(), 401, "bad_signature".into())
        );
        let unsigned = "'{\"X-GitHub-Delivery\": \"d-3\", \"X-GitHub-Event\": \"push\"}'::jsonb";
        assert_eq!(
            receive("github", unsigned, BODY),
            ("rejected".into(), 401, "missing_header".into())
        );
        let not_json = "not json";
        let signed_not_json = github_headers("d-4", "push", not_json, "gh-secret");
        assert_eq!(
            receive("github", &signed_not_json, not_json),
            ("rejected".into(), 400, "malformed_body".into())
        );
        let no_id = "jsonb_build_object('X-GitHub-Event', 'push', 'X-Hub-Signature-256',
                         'sha256=' || encode(hmac('{}', 'gh-secret', 'sha256'), 'hex'))";
        assert_eq!(
            receive("github", no_id, "{}"),
            ("rejected".into(), 400, "missing_event_id".into())
        );
        // GitHub's event type is its X-GitHub-Event header: named as what
        // is missing.
        let no_type = "jsonb_build_object('X-GitHub-Delivery', 'd-5', 'X-Hub-Signature-256',
                         'sha256=' || encode(hmac('{}', 'gh-secret', 'sha256'), 'hex'))";
        assert_eq!(
            receive("github", no_type, "{}"),
            ("rejected".into(), 400, "missing_event_type".into())
        );
        // Only the legacy SHA-1 header, as GitHub's own library reads it:
        // no signature.
        let sha1_only = "jsonb_build_object('X-GitHub-Delivery', 'd-6', 'X-GitHub-Event', 'push',
                         'X-Hub-Signature', 'sha1=' || repeat('0', 40))";
        assert_eq!(
            receive("github", sha1_only, "{}"),
            ("rejected".into(), 401, "missing_header".into())
        );

        assert_eq!(
            Spi::get_one::<i64>("SELECT count(*) FROM webhook.events"),
            Ok(Some(0)),
            "nothing claimed"
        );
        let reasons = Spi::get_one::<String>(
            "SELECT string_agg(reason, ',' ORDER BY reason) FROM webhook.rejected_deliveries",
        );
        assert_eq!(
            reasons,
            Ok(Some(
                "bad_signature,malformed_body,missing_event_id,missing_event_type,missing_header,missing_header"
                    .into()
            ))
        );
    }

    /// Valid JSON that jsonb cannot hold is refused like unreadable JSON:
    /// archived byte for byte with its reason, never an ERROR.
    #[pg_test]
    fn a_body_jsonb_cannot_store_is_rejected_not_an_error() {
        register_test_providers();
        let body = r#"{"zen": "a\u0000b"}"#;
        let headers = github_headers("d-nul", "push", body, "gh-secret");
        assert_eq!(
            receive("github", &headers, body),
            ("rejected".into(), 400, "malformed_body".into())
        );
        assert_eq!(
            Spi::get_one::<String>(
                "SELECT convert_from(raw_body, 'UTF8') FROM webhook.delivery_log WHERE reject_reason IS NOT NULL"
            ),
            Ok(Some(body.into()))
        );
    }

    #[pg_test]
    fn a_stale_stripe_delivery_is_a_replay() {
        register_test_providers();
        let body = r#"{"id": "evt_stale", "type": "charge.succeeded"}"#;
        let at = |offset: i64| stripe_headers(body, "whsec_stripe_test", offset);
        assert_eq!(
            receive("stripe", &at(-3600), body),
            ("rejected".into(), 401, "timestamp_too_old".into())
        );
        assert_eq!(
            receive("stripe", &at(0), body),
            ("claimed".into(), 200, "ok".into())
        );
        let event = Spi::get_two::<String, String>(
            "SELECT event_id, event_type FROM webhook.events WHERE provider = 'stripe'",
        );
        assert_eq!(
            event,
            Ok((Some("evt_stale".into()), Some("charge.succeeded".into())))
        );
    }

    #[pg_test]
    fn secrets_rotate_and_retire() {
        register_test_providers();
        let old = github_headers("d-rot-1", "push", BODY, "gh-secret");
        Spi::run("SELECT webhook_add_secret('github', 'gh-secret-2')").unwrap();
        // Another delivery, so another body: the same signed bytes under a
        // second id would be refused as a replay.
        const BODY_2: &str = r#"{"action": "closed", "number": 7}"#;
        let new = github_headers("d-rot-2", "push", BODY_2, "gh-secret-2");
        assert_eq!(
            receive("github", &old, BODY).1,
            200,
            "old secret still active"
        );
        assert_eq!(receive("github", &new, BODY_2).1, 200, "new secret active");
        // Both verified a delivery just now: retiring either needs force.
        Spi::run("SELECT webhook_retire_secret('github', 'gh-secret', force => true)").unwrap();
        let old_again = github_headers("d-rot-3", "push", BODY, "gh-secret");
        assert_eq!(
            receive("github", &old_again, BODY),
            ("rejected".into(), 401, "bad_signature".into())
        );
        // Retiring by fingerprint works too.
        Spi::run("SELECT webhook_retire_secret('github', left(encode(sha256('gh-secret-2'), 'hex'), 16), force => true)").unwrap();
        let none = github_headers("d-rot-4", "push", BODY, "gh-secret-2");
        assert_eq!(
            receive("github", &none, BODY),
            ("rejected".into(), 401, "no_secret".into())
        );
    }

    #[pg_test]
    fn registry_mistakes_are_clear_errors() {
        register_test_providers();
        let cases = [
            ("SELECT webhook_receive('nobody', '{}'::jsonb, '\\x7b7d'::bytea)", "42704", "no provider \"nobody\""),
            ("SELECT webhook_register_provider('acme')", "42704", "unknown signature scheme"),
            ("SELECT webhook_register_provider('acme', scheme => 'hmac;header=X-Sig')", "22004", "event_id_from"),
            (
                "SELECT webhook_register_provider('acme', scheme => 'hmac;header=X-Sig', event_id_from => 'query:id', event_type_from => 'body:type')",
                "23514",
                "webhook_register_provider: argument \"event_id_from\"",
            ),
            ("SELECT webhook_register_provider('Bad Name!', scheme => 'github')", "23514", "argument \"name\""),
            ("SELECT webhook_register_provider('acme', scheme => 'stripe', tolerance => '-1 minute')", "23514", "argument \"tolerance\""),
            ("SELECT webhook_add_secret('github', '')", "2200F", "\"secret\""),
            ("SELECT webhook_add_secret('nobody', 's')", "42704", "nobody"),
            ("SELECT webhook_retire_secret('github', 'never-added')", "P0002", "no active secret"),
        ];
        for (sql, sqlstate, needle) in cases {
            assert_error(sql, sqlstate, needle);
        }
        // A secret given to retire is never echoed into the error (and the log).
        let err = error_of("SELECT webhook_retire_secret('github', 'whsec_not_for_the_log')");
        assert!(!err.contains("not_for"), "{err}");
        let generic = Spi::get_one::<String>(
            "SELECT scheme FROM webhook_register_provider('acme', scheme => 'hmac;header=X-Sig',
                 event_id_from => 'header:X-Id', event_type_from => 'body:kind')",
        );
        assert_eq!(generic, Ok(Some("hmac;header=X-Sig".into())));
    }

    #[pg_test]
    fn a_registry_change_holds_for_the_next_delivery_of_the_same_session() {
        register_test_providers();
        let body = r#"{"n":1}"#;
        let first = receive(
            "github",
            &github_headers("gh-cache-1", "push", body, "gh-secret"),
            body,
        );
        assert_eq!(first, ("claimed".into(), 200, "ok".into()));
        // The secret rotates in this same transaction: the cached copy of
        // the registry is dropped at once.
        Spi::run(
            "SELECT webhook_add_secret('github', 'gh-secret-2');
             SELECT webhook_retire_secret('github', 'gh-secret', force => true);",
        )
        .unwrap();
        let body = r#"{"n":2}"#;
        let old = receive(
            "github",
            &github_headers("gh-cache-2", "push", body, "gh-secret"),
            body,
        );
        assert_eq!(old, ("rejected".into(), 401, "bad_signature".into()));
        let new = receive(
            "github",
            &github_headers("gh-cache-3", "push", body, "gh-secret-2"),
            body,
        );
        assert_eq!(new, ("claimed".into(), 200, "ok".into()));
        // So does a change of mode.
        Spi::run("SELECT webhook_register_provider('github', inbox => true)").unwrap();
        let body = r#"{"n":3}"#;
        let queued = receive(
            "github",
            &github_headers("gh-cache-4", "push", body, "gh-secret-2"),
            body,
        );
        assert_eq!(queued, ("queued".into(), 200, "ok".into()));
    }
}
