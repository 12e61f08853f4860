//! Which secret verified what: the archive says, each secret shows when it
//! was last used, and retiring one in use needs force.

#[pgrx::pg_schema]
mod tests {
    use crate::in_db_tests::{assert_error, receive};
    use pgrx::prelude::*;

    fn stripe_headers(body: &str, secret: &str) -> String {
        crate::in_db_tests::stripe_headers(body, secret, 0)
    }

    #[pg_test]
    fn each_delivery_records_the_secret_that_verified_it() {
        Spi::run(
            "SELECT webhook_register_provider('stripe', secret => 'whsec_old');
             SELECT webhook_add_secret('stripe', 'whsec_new');",
        )
        .unwrap();
        let body = r#"{"id":"evt_rot","type":"invoice.paid"}"#;
        assert_eq!(
            receive("stripe", &stripe_headers(body, "whsec_old"), body),
            ("claimed".into(), 200, "ok".into())
        );
        let archived = Spi::get_one::<String>(
            "SELECT secret_fingerprint FROM webhook.delivery_log WHERE event_id = 'evt_rot'",
        )
        .unwrap();
        let old = Spi::get_one::<String>("SELECT webhook._fingerprint('whsec_old')").unwrap();
        assert_eq!(archived, old);
        let usage = Spi::get_two::<bool, bool>(
            "SELECT bool_or(last_used_at IS NOT NULL) FILTER (WHERE fingerprint = webhook._fingerprint('whsec_old')),
                    bool_or(last_used_at IS NOT NULL) FILTER (WHERE fingerprint = webhook._fingerprint('whsec_new'))
               FROM webhook.secret_usage WHERE provider = 'stripe'",
        )
        .unwrap();
        assert_eq!(usage, (Some(true), Some(false)));
        // A claim the caller verified itself names no secret.
        Spi::run("SELECT webhook_claim('stripe', 'evt_own', 'invoice.paid', '{}'::jsonb, NULL)")
            .unwrap();
        let own = Spi::get_one::<String>(
            "SELECT secret_fingerprint FROM webhook.delivery_log WHERE event_id = 'evt_own'",
        )
        .unwrap();
        assert_eq!(own, None);

        // The secret in use cannot be retired by mistake; the idle one can.
        assert_error(
            "SELECT webhook_retire_secret('stripe', 'whsec_old')",
            "55000",
            "within the last day",
        );
        Spi::run("SELECT webhook_retire_secret('stripe', 'whsec_new')").unwrap();
        Spi::run("SELECT webhook_add_secret('stripe', 'whsec_new')").unwrap();
        Spi::run("SELECT webhook_retire_secret('stripe', webhook._fingerprint('whsec_old'), force => true)")
            .unwrap();
        let retired = Spi::get_one::<bool>(
            "SELECT retired_at IS NOT NULL FROM webhook.secret_usage WHERE fingerprint = webhook._fingerprint('whsec_old')",
        )
        .unwrap();
        assert_eq!(retired, Some(true));
        assert_eq!(
            receive(
                "stripe",
                &stripe_headers(r#"{"id":"evt_after","type":"x"}"#, "whsec_old"),
                r#"{"id":"evt_after","type":"x"}"#
            ),
            ("rejected".into(), 401, "bad_signature".into())
        );
    }
}
