//! webhook_verify and webhook_verify_detail against vectors the providers
//! publish, and every reason a delivery is refused.
//!
//! Sources of the vectors:
//! * GitHub Docs, "Validating webhook deliveries" (testing section): secret
//!   "It's a Secret to Everybody", payload "Hello, World!".
//! * Standard Webhooks specification and Svix docs ("Verifying payloads
//!   manually"): secret whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw, message
//!   msg_p5jXN8AQM9LWM0D4loKWxJek at 1614265330, payload {"test": 2432232314}.
//!
//! Stripe, Slack, Paddle and Shopify publish the construction rather than a
//! fixed vector; their official SDKs sign deliveries for the client-side
//! test `tests/provider_sdks.rs`.

#[pgrx::pg_schema]
mod tests {
    use crate::in_db_tests::assert_error;
    use pgrx::prelude::*;

    const GITHUB_SIG: &str =
        "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
    const SW_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const SW_SIG: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    fn detail(sql_args: &str) -> (bool, String) {
        let (valid, reason) = Spi::get_two::<bool, String>(&format!(
            "SELECT valid, reason FROM webhook_verify_detail({sql_args})"
        ))
        .unwrap();
        (valid.unwrap(), reason.unwrap())
    }

    fn github(headers: &str, body: &str, secrets: &str) -> (bool, String) {
        detail(&format!(
            "'github', '{headers}'::jsonb, convert_to('{body}', 'UTF8'), {secrets}"
        ))
    }

    fn standard(headers: &str, tolerance: &str) -> (bool, String) {
        detail(&format!(
            "'standard', '{headers}'::jsonb, convert_to('{{\"test\": 2432232314}}', 'UTF8'), ARRAY['{SW_SECRET}'], '{tolerance}'"
        ))
    }

    fn sw_headers(prefix: &str, sig: &str) -> String {
        format!(
            r#"{{"{prefix}-id": "msg_p5jXN8AQM9LWM0D4loKWxJek", "{prefix}-timestamp": "1614265330", "{prefix}-signature": "{sig}"}}"#
        )
    }

    #[pg_test]
    fn github_published_vector() {
        let secret = "ARRAY['It''s a Secret to Everybody']";
        let headers = format!(r#"{{"X-Hub-Signature-256": "{GITHUB_SIG}"}}"#);
        assert_eq!(
            github(&headers, "Hello, World!", secret),
            (true, "ok".into())
        );
        // Header names are case-insensitive.
        let lower = format!(r#"{{"x-hub-signature-256": "{GITHUB_SIG}"}}"#);
        assert_eq!(github(&lower, "Hello, World!", secret), (true, "ok".into()));
        // One byte of the body or the secret changed.
        assert_eq!(
            github(&headers, "Hello, World?", secret),
            (false, "bad_signature".into())
        );
        assert_eq!(
            github(
                &headers,
                "Hello, World!",
                "ARRAY['It''s a Secret to Everybodz']"
            ),
            (false, "bad_signature".into())
        );
        // Rotation: the right secret anywhere in the list.
        assert_eq!(
            github(
                &headers,
                "Hello, World!",
                "ARRAY['old-secret', NULL, 'It''s a Secret to Everybody']"
            ),
            (true, "ok".into())
        );
        let ok = Spi::get_one::<bool>(&format!(
            "SELECT webhook_verify('github', '{headers}'::jsonb, 'Hello, World!', ARRAY['It''s a Secret to Everybody'])"
        ));
        assert_eq!(ok, Ok(Some(true)), "text body overload");
    }

    #[pg_test]
    fn standard_webhooks_published_vector() {
        // Signed in 2021: authentic, but a replay today.
        assert_eq!(
            standard(&sw_headers("webhook", SW_SIG), "5 minutes"),
            (false, "timestamp_too_old".into())
        );
        assert_eq!(
            standard(&sw_headers("webhook", SW_SIG), "100 years"),
            (true, "ok".into())
        );
        assert_eq!(
            standard(&sw_headers("svix", SW_SIG), "100 years"),
            (true, "ok".into())
        );
        // Several signatures in the header: any valid one passes.
        let several =
            format!("v1,Zm9vYmFyYmF6cXV4Zm9vYmFyYmF6cXV4Zm9vYmFyYmE= v1a,ignored {SW_SIG}");
        assert_eq!(
            standard(&sw_headers("webhook", &several), "100 years"),
            (true, "ok".into())
        );
        let signed_at = Spi::get_one::<String>(&format!(
            "SELECT signed_at::text FROM webhook_verify_detail('standard', '{}'::jsonb,
                 convert_to('{{\"test\": 2432232314}}', 'UTF8'), ARRAY['{SW_SECRET}'])",
            sw_headers("webhook", SW_SIG)
        ));
        assert_eq!(signed_at, Ok(Some("2021-02-25 15:02:10+00".into())));
        // The secret is the base64 after whsec_, and only in that form: a
        // bare base64 key could be a public key pasted without its whpk_.
        let bare = detail(&format!(
            "'standard', '{}'::jsonb, convert_to('{{\"test\": 2432232314}}', 'UTF8'),
             ARRAY['MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'], '100 years'",
            sw_headers("webhook", SW_SIG)
        ));
        assert_eq!(bare, (false, "invalid_secret".into()));
    }

    #[pg_test]
    fn every_reason_has_a_case() {
        let body = "convert_to('{}', 'UTF8')";
        let cases = [
            (format!("'stripe', '{{}}'::jsonb, {body}, ARRAY['s']"), "missing_header"),
            (format!("'stripe', '[]'::jsonb, {body}, ARRAY['s']"), "malformed_header"),
            (format!("'stripe', '{{\"Stripe-Signature\": 42}}'::jsonb, {body}, ARRAY['s']"), "malformed_header"),
            (format!("'stripe', '{{\"Stripe-Signature\": \"t=abc,v1=00\"}}'::jsonb, {body}, ARRAY['s']"), "malformed_header"),
            (format!("'stripe', '{{\"Stripe-Signature\": \"t=1,v0=00\"}}'::jsonb, {body}, ARRAY['s']"), "malformed_header"),
            (
                format!("'stripe', '{{\"Stripe-Signature\": \"t=1,v1={}\", \"stripe-signature\": \"t=1\"}}'::jsonb, {body}, ARRAY['s']", "0".repeat(64)),
                "malformed_header",
            ),
            (format!("'stripe', '{{\"Stripe-Signature\": \"t=1,v1={}\"}}'::jsonb, {body}, ARRAY['s']", "0".repeat(64)), "bad_signature"),
            (format!("'stripe', '{{\"Stripe-Signature\": \"t=1,v1={}\"}}'::jsonb, {body}, ARRAY[]::text[]", "0".repeat(64)), "no_secret"),
            (format!("'stripe', '{{\"Stripe-Signature\": \"t=1,v1={}\"}}'::jsonb, {body}, ARRAY[NULL, '']", "0".repeat(64)), "no_secret"),
            (format!("'standard', '{}'::jsonb, {body}, ARRAY['whsec_!!!not base64']", sw_headers("webhook", SW_SIG)), "invalid_secret"),
            (format!("'slack', '{{\"X-Slack-Signature\": \"v0=00\"}}'::jsonb, {body}, ARRAY['s']"), "missing_header"),
            (format!("'shopify', '{{\"X-Shopify-Hmac-Sha256\": \"not base64!\"}}'::jsonb, {body}, ARRAY['s']"), "malformed_header"),
            (format!("'github', '{{\"X-Hub-Signature-256\": \"{}\"}}'::jsonb, {body}, ARRAY['s']", "x".repeat(9000)), "malformed_header"),
        ];
        for (args, reason) in &cases {
            assert_eq!(detail(args), (false, reason.to_string()), "{args}");
        }
    }

    /// Slack deliveries signed by the tests' SQL hmac (an independent HMAC) at chosen
    /// times relative to now.
    fn slack_at(offset_secs: i64, tolerance: &str) -> (bool, String) {
        detail(&format!(
            "'slack',
             (SELECT jsonb_build_object(
                 'X-Slack-Signature', 'v0=' || encode(hmac('v0:' || ts || ':payload=1', 'slack-secret', 'sha256'), 'hex'),
                 'X-Slack-Request-Timestamp', ts)
                FROM (SELECT (extract(epoch FROM clock_timestamp())::bigint + {offset_secs})::text AS ts) t),
             convert_to('payload=1', 'UTF8'), ARRAY['slack-secret'], '{tolerance}'"
        ))
    }

    #[pg_test]
    fn timestamps_are_checked_in_both_directions() {
        assert_eq!(slack_at(0, "5 minutes"), (true, "ok".into()));
        assert_eq!(slack_at(-240, "5 minutes"), (true, "ok".into()));
        assert_eq!(
            slack_at(-3600, "5 minutes"),
            (false, "timestamp_too_old".into())
        );
        assert_eq!(
            slack_at(3600, "5 minutes"),
            (false, "timestamp_in_future".into())
        );
        // The tolerance is the caller's: a tight one (Paddle's SDK default is
        // 5 seconds) and a generous one.
        assert_eq!(
            slack_at(-30, "5 seconds"),
            (false, "timestamp_too_old".into())
        );
        assert_eq!(slack_at(-3600, "2 hours"), (true, "ok".into()));
    }

    #[pg_test]
    fn generic_hmac_scheme() {
        let headers = format!(r#"{{"X-Signature": "{GITHUB_SIG}"}}"#);
        let args = |scheme: &str| {
            format!("'{scheme}', '{headers}'::jsonb, convert_to('Hello, World!', 'UTF8'), ARRAY['It''s a Secret to Everybody']")
        };
        assert_eq!(
            detail(&args("hmac;header=X-Signature;prefix=sha256=")),
            (true, "ok".into())
        );
        assert_eq!(
            detail(&args(
                "hmac;header=x-signature;algorithm=sha256;encoding=hex;prefix=sha256="
            )),
            (true, "ok".into())
        );
        assert_eq!(
            detail(&args("hmac;header=X-Signature")),
            (false, "malformed_header".into())
        );
        assert_eq!(
            detail(&args("hmac;header=X-Other;prefix=sha256=")),
            (false, "missing_header".into())
        );
    }

    #[pg_test]
    fn bad_arguments_are_errors() {
        let body = "convert_to('{}', 'UTF8')";
        let cases = [
            (format!("SELECT webhook_verify('venmo', '{{}}'::jsonb, {body}, ARRAY['s'])"), "42704", "known: stripe"),
            (format!("SELECT webhook_verify(NULL, '{{}}'::jsonb, {body}, ARRAY['s'])"), "22004", "\"scheme\""),
            (format!("SELECT webhook_verify('stripe', NULL, {body}, ARRAY['s'])"), "22004", "\"headers\""),
            ("SELECT webhook_verify('stripe', '{}'::jsonb, NULL::bytea, ARRAY['s'])".to_string(), "22004", "\"body\""),
            (format!("SELECT webhook_verify('stripe', '{{}}'::jsonb, {body}, NULL)"), "22004", "\"secrets\""),
            (format!("SELECT webhook_verify('stripe', '{{}}'::jsonb, {body}, ARRAY['s'], '-5 minutes')"), "22023", "\"tolerance\""),
            (format!("SELECT webhook_verify('stripe', '{{}}'::jsonb, {body}, ARRAY['s'], '0 s')"), "22023", "\"tolerance\""),
            (format!("SELECT webhook_verify('hmac', '{{}}'::jsonb, {body}, ARRAY['s'])"), "42601", "\"scheme\""),
            (format!("SELECT webhook_verify('hmac;header=X;encoding=rot13', '{{}}'::jsonb, {body}, ARRAY['s'])"), "42601", "\"scheme\""),
            (format!("SELECT webhook_verify('hmac;header=X;algorithm=md5', '{{}}'::jsonb, {body}, ARRAY['s'])"), "42601", "\"scheme\""),
            (format!("SELECT webhook_verify('hmac;header=X;colour=blue', '{{}}'::jsonb, {body}, ARRAY['s'])"), "42601", "\"scheme\""),
            (format!("SELECT webhook_verify('paypal', '{{}}'::jsonb, {body}, ARRAY['s'])"), "42601", "\"scheme\""),
            (format!("SELECT webhook_verify('stripe;t=1', '{{}}'::jsonb, {body}, ARRAY['s'])"), "42601", "\"scheme\""),
            (format!("SELECT webhook_verify('square', '{{}}'::jsonb, {body}, ARRAY['s'], url => 'ftp://x.test/')"), "22023", "\"url\""),
        ];
        for (sql, sqlstate, needle) in &cases {
            assert_error(sql, sqlstate, needle);
        }
    }

    /// What anyone may call is bounded: at most 16 keys, at most 8
    /// signatures in a delivery (a public-key check costs a hundred HMACs),
    /// and a Standard Webhooks HMAC key only in its whsec_ form (a bare
    /// base64 key could be a public key pasted without its whpk_).
    #[pg_test]
    fn keys_and_signatures_are_bounded_and_hmac_keys_keep_their_form() {
        assert_error(
            "SELECT webhook_verify('github', '{}'::jsonb, 'x'::bytea,
                                   array_fill('k'::text, ARRAY[17]))",
            "22023",
            "argument \"secrets\" must hold at most 16 keys",
        );
        let nine = (0..9)
            .map(|_| "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
            .collect::<Vec<_>>()
            .join(" ");
        let headers = format!(
            r#"'{{"webhook-id": "msg_p5jXN8AQM9LWM0D4loKWxJek", "webhook-timestamp": "1614265330", "webhook-signature": "{nine}"}}'::jsonb"#
        );
        assert_eq!(
            detail(&format!(
                "'standard', {headers}, '{{\"test\": 2432232314}}'::bytea, ARRAY['{SW_SECRET}'], interval '100 years'"
            )),
            (false, "malformed_header".into())
        );
        assert!(
            Spi::get_one::<String>(
                "SELECT webhook_check_key('standard', 'MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw')"
            )
            .unwrap()
            .is_some(),
            "a bare base64 key is not taken as an HMAC secret"
        );
        assert_eq!(
            Spi::get_one::<String>(&format!(
                "SELECT webhook_check_key('standard', '{SW_SECRET}')"
            ))
            .unwrap(),
            None
        );
        // A provider keeps at most 16 active secrets.
        Spi::run("SELECT webhook_register_provider('many', scheme => 'github')").unwrap();
        Spi::run("SELECT webhook_add_secret('many', 'secret-' || n) FROM generate_series(1, 16) n")
            .unwrap();
        assert_error(
            "SELECT webhook_add_secret('many', 'secret-17')",
            "54000",
            "16 active secrets",
        );
        // Adding one it has is no new secret.
        Spi::run("SELECT webhook_add_secret('many', 'secret-16')").unwrap();
    }
}
