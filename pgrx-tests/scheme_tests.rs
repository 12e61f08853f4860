//! The schemes that sign with a private key, sign the URL, send batches or
//! forms, or check the endpoint first, through webhook_receive and the
//! registry: what the handler passes, what it gets back, what is archived.

#[pgrx::pg_schema]
mod tests {
    use crate::in_db_tests::{assert_error, receive};
    use pgrx::prelude::*;

    fn quote(text: &str) -> String {
        text.replace('\'', "''")
    }

    /// webhook_receive with a URL: (status, http_status, reason, event_id, event_type).
    fn receive_at(
        provider: &str,
        headers: &serde_json::Value,
        body: &str,
        url: Option<&str>,
    ) -> (String, i32, String, Option<String>, Option<String>) {
        let url = url.map_or("NULL".to_string(), |u| format!("'{}'", quote(u)));
        Spi::connect_mut(|c| {
            let rows = c.update(
                &format!(
                    "SELECT status, http_status, reason, event_id, event_type
                       FROM webhook_receive('{provider}', '{}'::jsonb, convert_to('{}', 'UTF8'), url => {url})",
                    quote(&headers.to_string()),
                    quote(body)
                ),
                None,
                &[],
            )?;
            let row = rows.first();
            Ok::<_, pgrx::spi::Error>((
                row.get::<String>(1)?.unwrap(),
                row.get::<i32>(2)?.unwrap(),
                row.get::<String>(3)?.unwrap(),
                row.get::<String>(4)?,
                row.get::<String>(5)?,
            ))
        })
        .unwrap()
    }

    fn now() -> i64 {
        crate::schemes::now_unix()
    }

    fn hmac_b64(algorithm: crate::signature::Algorithm, key: &[u8], message: &[u8]) -> String {
        use base64::Engine;
        use hmac::{Hmac, Mac};
        let tag = match algorithm {
            crate::signature::Algorithm::Sha1 => {
                let mut mac = <Hmac<sha1::Sha1> as Mac>::new_from_slice(key).unwrap();
                mac.update(message);
                mac.finalize().into_bytes().to_vec()
            }
            _ => {
                let mut mac = <Hmac<sha2::Sha256> as Mac>::new_from_slice(key).unwrap();
                mac.update(message);
                mac.finalize().into_bytes().to_vec()
            }
        };
        base64::engine::general_purpose::STANDARD.encode(tag)
    }

    #[pg_test]
    fn a_twilio_form_callback_is_verified_against_the_url_and_stored_as_fields() {
        Spi::run("SELECT webhook_register_provider('twilio', secret => 'twilio-auth-token')")
            .unwrap();
        let url = "https://hooks.example.com/twilio/status?tenant=7";
        let body = "MessageSid=SM1&MessageStatus=delivered&To=%2B15551234567";
        let signed = format!("{url}MessageSidSM1MessageStatusdeliveredTo+15551234567");
        let headers = serde_json::json!({
            "X-Twilio-Signature": hmac_b64(crate::signature::Algorithm::Sha1, b"twilio-auth-token", signed.as_bytes()),
            "I-Twilio-Idempotency-Token": "idem-1",
        });
        assert_eq!(
            receive_at("twilio", &headers, body, Some(url)),
            (
                "claimed".into(),
                200,
                "ok".into(),
                Some("idem-1".into()),
                Some("delivered".into())
            )
        );
        let payload = Spi::get_one::<String>(
            "SELECT payload ->> 'To' FROM webhook.delivery_log WHERE provider = 'twilio' AND event_id = 'idem-1'",
        )
        .unwrap();
        assert_eq!(payload.as_deref(), Some("+15551234567"));
        // The URL the application saw behind a proxy is not the one signed.
        let (status, http, reason, ..) = receive_at(
            "twilio",
            &headers,
            body,
            Some("http://10.0.0.7:8080/twilio/status?tenant=7"),
        );
        assert_eq!(
            (status.as_str(), http, reason.as_str()),
            ("rejected", 401, "bad_signature")
        );
        let (_, http, reason, ..) = receive_at("twilio", &headers, body, None);
        assert_eq!((http, reason.as_str()), (401, "missing_url"));
        assert_error(
            "SELECT webhook_receive('twilio', '{}'::jsonb, 'a=b'::bytea, url => '/twilio/status')",
            "22023",
            "argument \"url\"",
        );
        assert_error(
            "SELECT webhook_verify('twilio', '{}'::jsonb, 'a=b'::bytea, '{k}', url => 'https://x.test/a b')",
            "22023",
            "argument \"url\"",
        );
    }

    #[pg_test]
    fn a_sendgrid_batch_is_verified_with_its_public_key_and_claimed_by_its_first_event() {
        use base64::Engine;
        use p256::ecdsa::signature::Signer;
        let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
        let signer = p256::ecdsa::SigningKey::from_bytes(&[5u8; 32].into()).unwrap();
        // The DER SubjectPublicKeyInfo SendGrid shows: the fixed header of
        // an uncompressed P-256 key, then the point.
        let spki = [
            hex::decode("3059301306072a8648ce3d020106082a8648ce3d030107034200").unwrap(),
            signer
                .verifying_key()
                .to_encoded_point(false)
                .as_bytes()
                .to_vec(),
        ]
        .concat();
        let public = b64(&spki);
        Spi::run(&format!(
            "SELECT webhook_register_provider('sendgrid', secret => '{public}')"
        ))
        .unwrap();
        let body = r#"[{"email":"a@example.com","event":"delivered","sg_event_id":"sg-ev-1"},{"email":"b@example.com","event":"open","sg_event_id":"sg-ev-2"}]"#;
        let ts = now().to_string();
        let signature: p256::ecdsa::Signature =
            signer.sign(&[ts.as_bytes(), body.as_bytes()].concat());
        let headers = serde_json::json!({
            "X-Twilio-Email-Event-Webhook-Signature": b64(signature.to_der().as_bytes()),
            "X-Twilio-Email-Event-Webhook-Timestamp": ts,
        });
        assert_eq!(
            receive_at("sendgrid", &headers, body, None),
            (
                "claimed".into(),
                200,
                "ok".into(),
                Some("sg-ev-1".into()),
                Some("delivered".into())
            )
        );
        let tampered = body.replace("open", "spam");
        let (_, http, reason, ..) = receive_at("sendgrid", &headers, &tampered, None);
        assert_eq!((http, reason.as_str()), (401, "bad_signature"));
        // Only batch providers may send an array.
        Spi::run("SELECT webhook_register_provider('typeform', secret => 'tf')").unwrap();
        let headers = format!(
            "jsonb_build_object('Typeform-Signature', 'sha256={}')",
            hmac_b64(crate::signature::Algorithm::Sha256, b"tf", b"[1]")
        );
        assert_eq!(
            receive("typeform", &headers, "[1]"),
            ("rejected".into(), 400, "malformed_body".into())
        );
    }

    #[pg_test]
    fn a_twitch_revocation_is_acknowledged_and_never_claimed_as_an_event() {
        Spi::run("SELECT webhook_register_provider('twitch', secret => 'twitch-secret-123')")
            .unwrap();
        // The message-type header is not signed: what tells a revocation is
        // its signed body, the subscription without an event.
        let deliver = |id: &str, kind: &str, body: &str| {
            Spi::get_three::<String, String, i32>(&format!(
                "SELECT r.status, r.event_type, r.http_status
                   FROM (SELECT to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"') AS sent) t,
                        webhook_receive('twitch',
                            jsonb_build_object('Twitch-Eventsub-Message-Id', '{id}',
                                'Twitch-Eventsub-Message-Timestamp', t.sent,
                                'Twitch-Eventsub-Message-Type', '{kind}',
                                'Twitch-Eventsub-Message-Signature',
                                'sha256=' || encode(hmac('{id}' || t.sent || '{body}', 'twitch-secret-123', 'sha256'), 'hex')),
                            '{body}'::text) r"
            ))
            .unwrap()
        };
        let revoked = r#"{"subscription":{"id":"f1c2a387","status":"authorization_revoked","type":"channel.follow"}}"#;
        assert_eq!(
            deliver("rev-1", "revocation", revoked),
            (
                Some("handshake".into()),
                Some("revocation".into()),
                Some(200)
            )
        );
        // Sent as a notification, it is still no event.
        assert_eq!(
            deliver("rev-2", "notification", revoked).1,
            Some("revocation".into())
        );
        let events =
            Spi::get_one::<i64>("SELECT count(*) FROM webhook.events WHERE provider = 'twitch'")
                .unwrap();
        assert_eq!(events, Some(0));
        let archived = Spi::get_one::<i64>(
            "SELECT count(*) FROM webhook.delivery_log WHERE provider = 'twitch' AND event_type = 'revocation'",
        )
        .unwrap();
        assert_eq!(archived, Some(2));
        // A notification is an event.
        let followed =
            r#"{"subscription":{"id":"f1c2a387","type":"channel.follow"},"event":{"user_id":"1"}}"#;
        assert_eq!(
            deliver("ev-1", "revocation", followed).0,
            Some("claimed".into())
        );
    }

    #[pg_test]
    fn a_slack_url_verification_is_answered_and_archived_as_a_handshake() {
        Spi::run("SELECT webhook_register_provider('slack', secret => 'slack-signing-secret')")
            .unwrap();
        let body = r#"{"token":"x","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}"#;
        let ts = now();
        let signature = |secret: &[u8]| {
            use hmac::{Hmac, Mac};
            let mut mac = <Hmac<sha2::Sha256> as Mac>::new_from_slice(secret).unwrap();
            mac.update(format!("v0:{ts}:{body}").as_bytes());
            format!("v0={}", hex::encode(mac.finalize().into_bytes()))
        };
        let headers = |secret: &[u8]| serde_json::json!({ "X-Slack-Signature": signature(secret), "X-Slack-Request-Timestamp": ts.to_string() });
        let row = Spi::get_three::<String, String, String>(&format!(
            "SELECT status, response, response_type
               FROM webhook_receive('slack', '{}'::jsonb, '{body}'::text)",
            headers(b"slack-signing-secret")
        ))
        .unwrap();
        assert_eq!(
            row,
            (
                Some("handshake".into()),
                Some(
                    r#"{"challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"}"#
                        .into()
                ),
                Some("application/json".into())
            )
        );
        let archived = Spi::get_two::<String, String>(
            "SELECT event_type, processing_status FROM webhook.deliveries WHERE provider = 'slack'",
        )
        .unwrap();
        assert_eq!(
            archived,
            (Some("url_verification".into()), Some("HANDSHAKE".into()))
        );
        assert_eq!(
            Spi::get_one::<i64>("SELECT count(*) FROM webhook.events").unwrap(),
            Some(0)
        );
        // A forged one is a forgery, not a handshake.
        let (status, http, reason, ..) = receive_at("slack", &headers(b"guess"), body, None);
        assert_eq!(
            (status.as_str(), http, reason.as_str()),
            ("rejected", 401, "bad_signature")
        );
    }

    #[pg_test]
    fn a_zoom_endpoint_validation_is_answered_with_the_token_signed() {
        Spi::run("SELECT webhook_register_provider('zoom', secret => 'zoom_secret', event_id_from => 'header:x-zm-trackingid')").unwrap();
        let body = r#"{"payload":{"plainToken":"qgg8vlvZRS6UYooatFL8Aw"},"event_ts":1654503849680,"event":"endpoint.url_validation"}"#;
        let ts = now();
        use hmac::{Hmac, Mac};
        let mut mac = <Hmac<sha2::Sha256> as Mac>::new_from_slice(b"zoom_secret").unwrap();
        mac.update(format!("v0:{ts}:{body}").as_bytes());
        let headers = serde_json::json!({
            "x-zm-signature": format!("v0={}", hex::encode(mac.finalize().into_bytes())),
            "x-zm-request-timestamp": ts.to_string(),
        });
        let response = Spi::get_one::<pgrx::JsonB>(&format!(
            "SELECT response::jsonb FROM webhook_receive('zoom', '{}'::jsonb, '{body}'::text)",
            quote(&headers.to_string())
        ))
        .unwrap()
        .unwrap();
        assert_eq!(
            response.0,
            serde_json::json!({ "plainToken": "qgg8vlvZRS6UYooatFL8Aw",
                                "encryptedToken": "46a324cfb7c2ec760e4cd561586a53aadb6fc7561eb8d626d6ee1b71d808b3c0" })
        );
    }

    #[pg_test]
    fn a_discord_ping_is_answered_with_a_pong_and_an_interaction_claimed() {
        use ed25519_dalek::Signer;
        let signer = ed25519_dalek::SigningKey::from_bytes(&[4u8; 32]);
        let public = hex::encode(signer.verifying_key().to_bytes());
        Spi::run(&format!(
            "SELECT webhook_register_provider('discord', secret => '{public}')"
        ))
        .unwrap();
        let sign = |body: &str| {
            let ts = now().to_string();
            let signature = signer.sign(format!("{ts}{body}").as_bytes());
            serde_json::json!({ "X-Signature-Ed25519": hex::encode(signature.to_bytes()), "X-Signature-Timestamp": ts })
        };
        let ping = r#"{"id":"1","type":1}"#;
        let response = Spi::get_one::<String>(&format!(
            "SELECT response FROM webhook_receive('discord', '{}'::jsonb, '{ping}'::text)",
            sign(ping)
        ))
        .unwrap();
        assert_eq!(response.as_deref(), Some(r#"{"type":1}"#));
        let command = r#"{"id":"1150","type":2,"data":{"name":"ping"}}"#;
        assert_eq!(
            receive_at("discord", &sign(command), command, None),
            (
                "claimed".into(),
                200,
                "ok".into(),
                Some("1150".into()),
                Some("2".into())
            )
        );
    }

    #[pg_test]
    fn paypal_needs_its_webhook_id_and_verifies_with_the_registered_certificate() {
        assert_error(
            "SELECT webhook_register_provider('paypal')",
            "42601",
            "argument \"scheme\"",
        );
        assert_error(
            "SELECT webhook_register_provider('acme', scheme => 'stripe;webhook_id=x')",
            "42601",
            "argument \"scheme\"",
        );
        let cert = include_str!("../src/schemes/testdata/paypal-cert.pem");
        let url = "https://api.paypal.com/v1/notifications/certs/CERT-360caa42-fca2a594-test";
        Spi::run(&format!(
            "SELECT webhook_register_provider('paypal', scheme => 'paypal;webhook_id=1JE4291016473214C',
                 tolerance => '100 years', secret => '{url}\n{cert}')"
        ))
        .unwrap();
        let scheme =
            Spi::get_one::<String>("SELECT scheme FROM webhook_providers() WHERE name = 'paypal'")
                .unwrap();
        assert_eq!(
            scheme.as_deref(),
            Some("paypal;webhook_id=1JE4291016473214C")
        );
        let body = r#"{"id":"WH-2WR32451HC0233532-67976317FL4543714","event_type":"PAYMENT.CAPTURE.COMPLETED","create_time":"2026-11-30T10:00:00Z","resource":{"id":"5O190127TN364715T"}}"#;
        let mut headers = serde_json::json!({
            "PAYPAL-TRANSMISSION-ID": "103e3700-8a1a-11ee-9a6c-6b3b8a0d5e1f",
            "PAYPAL-TRANSMISSION-TIME": "2026-11-30T10:00:05Z",
            "PAYPAL-AUTH-ALGO": "SHA256withRSA",
            "PAYPAL-CERT-URL": url,
            "PAYPAL-TRANSMISSION-SIG": "G6YT+rR22XCekDS/o9K1pWaP2kNs4IBRXR2k0MjJrWW05BbVtbzuqi17iCYPNKXiTpsoJ0pMcmZy1qP48PlpWo0hXpq8CMlGXvTC9yN4RSwnGlOnI7b3yTBG7U3LCevYmeZWMVeXJSweLrK3ZtnoGvBdhD7j2SPOZaKbUfjqkmZe8qhAIxp/FU26sUuAeDuMWa/NN1W7+gs3Mc5zGMIfj4r7yL/ejYzJeTp0AcMOrbbUzq5QVxX0Y0Bj9ZQNO+4Qjoe4VDxN0B1WYAlvNrCtj3fHYqaIC6jjS8NV50rTd8rtlyDMzrXph1HTqi3hYh4pD8+Ujz6iXO8EgadB0Rwjxw=="
        });
        assert_eq!(
            receive_at("paypal", &headers, body, None),
            (
                "claimed".into(),
                200,
                "ok".into(),
                Some("WH-2WR32451HC0233532-67976317FL4543714".into()),
                Some("PAYMENT.CAPTURE.COMPLETED".into())
            )
        );
        headers["PAYPAL-CERT-URL"] = serde_json::json!("https://attacker.example/cert.pem");
        let (_, http, reason, ..) = receive_at("paypal", &headers, body, None);
        assert_eq!((http, reason.as_str()), (401, "unknown_certificate"));
    }
}
