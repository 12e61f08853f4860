//! Properties of the header parsers and the verification engine, on random
//! input: no panic, no false accept, and every correctly signed request
//! accepted until one byte of it changes.

use super::genuine::{b64, hmac_sha256, rfc3339, URL};
use super::*;
use proptest::prelude::*;
use serde_json::json;

const NOW: i64 = 1_700_000_000;
const TOLERANCE: i64 = 300;

fn all_schemes() -> Vec<Scheme> {
    vec![
        Scheme::Plain(Kind::Stripe),
        Scheme::Plain(Kind::Github),
        Scheme::Plain(Kind::Standard),
        Scheme::Plain(Kind::Paddle),
        Scheme::Plain(Kind::Shopify),
        Scheme::Plain(Kind::Slack),
        Scheme::parse("t", "scheme", "typeform").unwrap(),
        Scheme::parse("t", "scheme", "woocommerce").unwrap(),
        Scheme::parse("t", "scheme", "supabase").unwrap(),
        Scheme::Plain(Kind::Discord),
        Scheme::Plain(Kind::SendGrid),
        Scheme::parse("t", "scheme", "paypal;webhook_id=WH-1").unwrap(),
        Scheme::Plain(Kind::Twilio),
        Scheme::Plain(Kind::Square),
        Scheme::Plain(Kind::Zoom),
        Scheme::Plain(Kind::Twitch),
        Scheme::Plain(Kind::Mailgun),
        Scheme::Plain(Kind::Linear),
        Scheme::Plain(Kind::HubSpot),
        Scheme::Plain(Kind::Calendly),
        Scheme::Plain(Kind::WorkOs),
        Scheme::Plain(Kind::Zendesk),
        Scheme::Plain(Kind::Telnyx),
        Scheme::Plain(Kind::Sns),
        Scheme::Plain(Kind::Adyen),
        Scheme::parse("t", "scheme", "hmac;header=X-Signature;prefix=sha256=").unwrap(),
        Scheme::parse(
            "t",
            "scheme",
            "hmac;header=X-Sig;algorithm=sha512;encoding=base64",
        )
        .unwrap(),
    ]
}

/// Header names the schemes read, in assorted case, plus noise.
fn header_name() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("Stripe-Signature".to_string()),
        Just("stripe-signature".to_string()),
        Just("X-Hub-Signature-256".to_string()),
        Just("X-Hub-Signature".to_string()),
        Just("webhook-id".to_string()),
        Just("webhook-timestamp".to_string()),
        Just("webhook-signature".to_string()),
        Just("svix-id".to_string()),
        Just("svix-timestamp".to_string()),
        Just("svix-signature".to_string()),
        Just("Paddle-Signature".to_string()),
        Just("X-Shopify-Hmac-Sha256".to_string()),
        Just("X-Slack-Signature".to_string()),
        Just("X-Slack-Request-Timestamp".to_string()),
        Just("Typeform-Signature".to_string()),
        Just("X-WC-Webhook-Signature".to_string()),
        Just("X-Signature-Ed25519".to_string()),
        Just("X-Signature-Timestamp".to_string()),
        Just("X-Twilio-Email-Event-Webhook-Signature".to_string()),
        Just("X-Twilio-Email-Event-Webhook-Timestamp".to_string()),
        Just("PAYPAL-TRANSMISSION-ID".to_string()),
        Just("PAYPAL-TRANSMISSION-TIME".to_string()),
        Just("PAYPAL-TRANSMISSION-SIG".to_string()),
        Just("PAYPAL-CERT-URL".to_string()),
        Just("PAYPAL-AUTH-ALGO".to_string()),
        Just("X-Twilio-Signature".to_string()),
        Just("x-square-hmacsha256-signature".to_string()),
        Just("x-zm-signature".to_string()),
        Just("x-zm-request-timestamp".to_string()),
        Just("Twitch-Eventsub-Message-Signature".to_string()),
        Just("Twitch-Eventsub-Message-Id".to_string()),
        Just("Twitch-Eventsub-Message-Timestamp".to_string()),
        Just("Linear-Signature".to_string()),
        Just("X-HubSpot-Signature-v3".to_string()),
        Just("X-HubSpot-Request-Timestamp".to_string()),
        Just("Calendly-Webhook-Signature".to_string()),
        Just("WorkOS-Signature".to_string()),
        Just("X-Zendesk-Webhook-Signature".to_string()),
        Just("X-Zendesk-Webhook-Signature-Timestamp".to_string()),
        Just("telnyx-signature-ed25519".to_string()),
        Just("telnyx-timestamp".to_string()),
        Just("X-Signature".to_string()),
        Just("X-Sig".to_string()),
        "[A-Za-z-]{1,20}",
    ]
}

/// Values shaped like signature headers, and not.
fn header_value() -> impl Strategy<Value = serde_json::Value> {
    prop_oneof![
        "t=[0-9]{0,12},v1=[0-9a-f]{0,70}(,v1=[0-9a-f]{64})?".prop_map(serde_json::Value::from),
        "ts=[0-9]{0,12};h1=[0-9a-f]{0,70}".prop_map(serde_json::Value::from),
        "(sha256|sha1|v0)=[0-9a-fA-F]{0,130}".prop_map(serde_json::Value::from),
        "(v1,[A-Za-z0-9+/=]{0,50} ?){0,3}".prop_map(serde_json::Value::from),
        "[A-Za-z0-9+/=_-]{0,90}".prop_map(serde_json::Value::from),
        "[0-9]{0,25}".prop_map(serde_json::Value::from),
        "20[0-9]{2}-[01][0-9]-[0-3][0-9]T[0-2][0-9]:[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,9})?Z"
            .prop_map(serde_json::Value::from),
        Just(serde_json::Value::from("SHA256withRSA")),
        "(v1a?,[A-Za-z0-9+/=]{0,90} ?){0,3}".prop_map(serde_json::Value::from),
        "[0-9a-f]{128}".prop_map(serde_json::Value::from),
        ".{0,200}".prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        Just(serde_json::Value::Null),
        Just(json!(["a", "b"])),
    ]
}

fn headers() -> impl Strategy<Value = serde_json::Value> {
    prop_oneof![
        9 => proptest::collection::btree_map(header_name(), header_value(), 0..8)
            .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        1 => prop_oneof![Just(json!(null)), Just(json!([1, 2])), Just(json!("x")), Just(json!(7))],
    ]
}

fn secrets() -> impl Strategy<Value = Vec<Option<String>>> {
    proptest::collection::vec(
        prop_oneof![
            Just(None),
            "whsec_[A-Za-z0-9+/]{0,44}".prop_map(Some),
            "whpk_[A-Za-z0-9+/]{43}=".prop_map(Some),
            "[0-9a-f]{64}".prop_map(Some),
            Just(Some(format!(
                "https://api.paypal.com/c\n{}",
                include_str!("testdata/paypal-cert.pem")
            ))),
            ".{0,40}".prop_map(Some),
        ],
        0..4,
    )
}

fn as_refs(secrets: &[Option<String>]) -> Vec<Option<&str>> {
    secrets.iter().map(Option::as_deref).collect()
}

/// A request signed exactly as each provider documents it, built here
/// independently of the scheme modules.
fn signed_request(scheme: &str, secret: &str, body: &[u8], ts: i64) -> serde_json::Value {
    match scheme {
        "stripe" => {
            let sig = hex::encode(hmac_sha256(
                secret.as_bytes(),
                &[format!("{ts}.").as_bytes(), body],
            ));
            json!({ "Stripe-Signature": format!("t={ts},v1={sig}") })
        }
        "github" => {
            let sig = hex::encode(hmac_sha256(secret.as_bytes(), &[body]));
            json!({ "X-Hub-Signature-256": format!("sha256={sig}") })
        }
        "standard" => {
            use base64::Engine;
            let key = base64::engine::general_purpose::STANDARD
                .decode(secret.strip_prefix("whsec_").unwrap())
                .unwrap();
            let sig = b64(&hmac_sha256(
                &key,
                &[format!("msg_1.{ts}.").as_bytes(), body],
            ));
            json!({ "webhook-id": "msg_1", "webhook-timestamp": ts.to_string(),
                    "webhook-signature": format!("v1,{sig}") })
        }
        "paddle" => {
            let sig = hex::encode(hmac_sha256(
                secret.as_bytes(),
                &[format!("{ts}:").as_bytes(), body],
            ));
            json!({ "Paddle-Signature": format!("ts={ts};h1={sig}") })
        }
        "shopify" => {
            json!({ "X-Shopify-Hmac-Sha256": b64(&hmac_sha256(secret.as_bytes(), &[body])) })
        }
        "slack" => {
            let sig = hex::encode(hmac_sha256(
                secret.as_bytes(),
                &[format!("v0:{ts}:").as_bytes(), body],
            ));
            json!({ "X-Slack-Signature": format!("v0={sig}"), "X-Slack-Request-Timestamp": ts.to_string() })
        }
        "typeform" => {
            let sig = b64(&hmac_sha256(secret.as_bytes(), &[body]));
            json!({ "Typeform-Signature": format!("sha256={sig}") })
        }
        "woocommerce" => {
            json!({ "X-WC-Webhook-Signature": b64(&hmac_sha256(secret.as_bytes(), &[body])) })
        }
        "zoom" => {
            let sig = hex::encode(hmac_sha256(
                secret.as_bytes(),
                &[format!("v0:{ts}:").as_bytes(), body],
            ));
            json!({ "x-zm-signature": format!("v0={sig}"), "x-zm-request-timestamp": ts.to_string() })
        }
        "twitch" => {
            let sent = rfc3339(ts);
            let sig = hex::encode(hmac_sha256(
                secret.as_bytes(),
                &[b"msg-1", sent.as_bytes(), body],
            ));
            json!({ "Twitch-Eventsub-Message-Signature": format!("sha256={sig}"),
                    "Twitch-Eventsub-Message-Id": "msg-1",
                    "Twitch-Eventsub-Message-Timestamp": sent })
        }
        "calendly" => {
            let sig = hex::encode(hmac_sha256(
                secret.as_bytes(),
                &[format!("{ts}.").as_bytes(), body],
            ));
            json!({ "Calendly-Webhook-Signature": format!("t={ts},v1={sig}") })
        }
        "workos" => {
            let millis = ts * 1000 + 417;
            let sig = hex::encode(hmac_sha256(
                secret.as_bytes(),
                &[format!("{millis}.").as_bytes(), body],
            ));
            json!({ "WorkOS-Signature": format!("t={millis}, v1={sig}") })
        }
        "zendesk" => {
            let sent = rfc3339(ts);
            let sig = b64(&hmac_sha256(secret.as_bytes(), &[sent.as_bytes(), body]));
            json!({ "X-Zendesk-Webhook-Signature": sig,
                    "X-Zendesk-Webhook-Signature-Timestamp": sent })
        }
        "square" => {
            json!({ "x-square-hmacsha256-signature": b64(&hmac_sha256(secret.as_bytes(), &[URL.as_bytes(), body])) })
        }
        "hubspot" => {
            let millis = (ts * 1000).to_string();
            let sig = b64(&hmac_sha256(
                secret.as_bytes(),
                &[b"POST", URL.as_bytes(), body, millis.as_bytes()],
            ));
            json!({ "X-HubSpot-Signature-v3": sig, "X-HubSpot-Request-Timestamp": millis })
        }
        _ => unreachable!(),
    }
}

const SIGNED_SCHEMES: [&str; 15] = [
    "stripe",
    "github",
    "standard",
    "paddle",
    "shopify",
    "slack",
    "typeform",
    "woocommerce",
    "zoom",
    "twitch",
    "calendly",
    "workos",
    "zendesk",
    "square",
    "hubspot",
];
const TIMESTAMPED: [&str; 9] = [
    "stripe", "standard", "paddle", "slack", "zoom", "twitch", "hubspot", "workos", "zendesk",
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, .. ProptestConfig::default() })]

    /// Random headers, body and secrets: never a panic, never accepted.
    #[test]
    fn random_input_is_never_accepted(
        headers in headers(),
        body in proptest::collection::vec(any::<u8>(), 0..256),
        secrets in secrets(),
        skew in -1000i64..1000,
        url in proptest::option::of("https://[a-z.]{1,20}/[ -~]{0,40}"),
    ) {
        for scheme in all_schemes() {
            let verdict = verify(&scheme, &headers, &body, url.as_deref(), &as_refs(&secrets), TOLERANCE, NOW + skew);
            prop_assert!(!verdict.valid(), "{scheme:?} accepted {headers}");
        }
    }

    /// A correctly signed request is accepted; changing one byte of the
    /// body, or using another secret, makes it bad_signature.
    #[test]
    fn signed_requests_verify_until_tampered(
        scheme_index in 0..SIGNED_SCHEMES.len(),
        body in proptest::collection::vec(any::<u8>(), 1..512),
        key in proptest::collection::vec(any::<u8>(), 16..40),
        flip in any::<proptest::sample::Index>(),
        skew in -TOLERANCE..=TOLERANCE,
    ) {
        let name = SIGNED_SCHEMES[scheme_index];
        let secret = format!("whsec_{}", b64(&key));
        let scheme = Scheme::parse("t", "scheme", name).unwrap();
        let headers = signed_request(name, &secret, &body, NOW + skew);
        let ok = verify(&scheme, &headers, &body, Some(URL), &[Some(secret.as_str())], TOLERANCE, NOW);
        prop_assert_eq!(ok.reason, Reason::Ok);

        let mut tampered = body.clone();
        let i = flip.index(tampered.len());
        tampered[i] ^= 0x01;
        let bad = verify(&scheme, &headers, &tampered, Some(URL), &[Some(secret.as_str())], TOLERANCE, NOW);
        prop_assert_eq!(bad.reason, Reason::BadSignature);

        let other = format!("whsec_{}", b64(&[key.as_slice(), b"x"].concat()));
        let wrong = verify(&scheme, &headers, &body, Some(URL), &[Some(other.as_str())], TOLERANCE, NOW);
        prop_assert_eq!(wrong.reason, Reason::BadSignature);

        // Secret rotation: the right secret anywhere in the list passes.
        let rotated = verify(&scheme, &headers, &body, Some(URL), &[Some(other.as_str()), None, Some(secret.as_str())], TOLERANCE, NOW);
        prop_assert_eq!(rotated.reason, Reason::Ok);
    }

    /// Authentic but outside the window: refused, in both directions.
    #[test]
    fn timestamps_outside_the_window_are_refused(
        scheme_index in 0..TIMESTAMPED.len(),
        body in proptest::collection::vec(any::<u8>(), 0..64),
        beyond in 1i64..10_000_000,
    ) {
        let name = TIMESTAMPED[scheme_index];
        let secret = "whsec_c2VjcmV0LWtleS1mb3ItdGVzdHM=";
        let scheme = Scheme::parse("t", "scheme", name).unwrap();
        let old = signed_request(name, secret, &body, NOW - TOLERANCE - beyond);
        let verdict = verify(&scheme, &old, &body, Some(URL), &[Some(secret)], TOLERANCE, NOW);
        prop_assert_eq!(verdict.reason, Reason::TimestampTooOld);
        prop_assert_eq!(verdict.signed_at, Some(NOW - TOLERANCE - beyond));
        let future = signed_request(name, secret, &body, NOW + TOLERANCE + beyond);
        let verdict = verify(&scheme, &future, &body, Some(URL), &[Some(secret)], TOLERANCE, NOW);
        prop_assert_eq!(verdict.reason, Reason::TimestampInFuture);
    }
}
