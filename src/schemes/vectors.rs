//! Each new scheme against a vector: the provider's published example
//! where there is one (Twilio's), otherwise bytes signed outside this code
//! (OpenSSL for PayPal's RSA, Python's `hmac` for the HMAC schemes, the
//! RustCrypto signers for Ed25519 and P-256), then tampered with.

use super::genuine::b64;
use super::*;
use serde_json::json;

const PAYPAL_CERT: &str = include_str!("testdata/paypal-cert.pem");
const PAYPAL_OTHER_CERT: &str = include_str!("testdata/paypal-other-cert.pem");
const PAYPAL_CERT_URL: &str =
    "https://api.paypal.com/v1/notifications/certs/CERT-360caa42-fca2a594-test";

fn check(
    scheme: &str,
    headers: serde_json::Value,
    body: &[u8],
    url: Option<&str>,
    secret: &str,
    now: i64,
) -> Reason {
    let scheme = Scheme::parse("t", "scheme", scheme).unwrap();
    verify(&scheme, &headers, body, url, &[Some(secret)], 300, now).reason
}

fn flipped(body: &[u8]) -> Vec<u8> {
    let mut body = body.to_vec();
    let middle = body.len() / 2;
    body[middle] ^= 0x01;
    body
}

/// Twilio's own example (its security documentation): auth token 12345.
#[test]
fn twilio_documented_example() {
    let url = "https://mycompany.com/myapp.php?foo=1&bar=2";
    let body = b"CallSid=CA1234567890ABCDE&Caller=%2B12349013030&Digits=1234&From=%2B12349013030&To=%2B18005551212";
    let headers = json!({ "X-Twilio-Signature": "0/KCTR6DLpKmkAf8muzZqo1nDgQ=" });
    assert_eq!(
        check("twilio", headers.clone(), body, Some(url), "12345", 0),
        Reason::Ok
    );
    // Twilio has signed the URL both with and without the default port.
    let with_port = "https://mycompany.com:443/myapp.php?foo=1&bar=2";
    assert_eq!(
        check("twilio", headers.clone(), body, Some(with_port), "12345", 0),
        Reason::Ok
    );
    assert_eq!(
        check(
            "twilio",
            headers.clone(),
            &flipped(body),
            Some(url),
            "12345",
            0
        ),
        Reason::BadSignature
    );
    assert_eq!(
        check(
            "twilio",
            headers.clone(),
            body,
            Some(&url.replace("foo", "fop")),
            "12345",
            0
        ),
        Reason::BadSignature
    );
    assert_eq!(
        check("twilio", headers.clone(), body, Some(url), "12346", 0),
        Reason::BadSignature
    );
    assert_eq!(
        check("twilio", headers, body, None, "12345", 0),
        Reason::MissingUrl
    );
}

#[test]
fn twilio_json_body_is_covered_by_its_digest_in_the_url() {
    let body = br#"{"a":1}"#;
    let url = "https://example.com/json?bodySHA256=015abd7f5cc57a2dd94b7590f04ad8084273905ee33ec5cebeae62276a97f862";
    let headers = json!({ "X-Twilio-Signature": "2dbqeLZZP02unwOYn2I9MWztx+s=" });
    assert_eq!(
        check("twilio", headers.clone(), body, Some(url), "12345", 0),
        Reason::Ok
    );
    assert_eq!(
        check("twilio", headers, br#"{"a":2}"#, Some(url), "12345", 0),
        Reason::BadSignature
    );
}

#[test]
fn paypal_certificate_signature() {
    let body = br#"{"id":"WH-2WR32451HC0233532-67976317FL4543714","event_type":"PAYMENT.CAPTURE.COMPLETED","create_time":"2026-11-30T10:00:00Z","resource":{"id":"5O190127TN364715T"}}"#;
    let headers = json!({
        "PAYPAL-TRANSMISSION-ID": "103e3700-8a1a-11ee-9a6c-6b3b8a0d5e1f",
        "PAYPAL-TRANSMISSION-TIME": "2026-11-30T10:00:05Z",
        "PAYPAL-AUTH-ALGO": "SHA256withRSA",
        "PAYPAL-CERT-URL": PAYPAL_CERT_URL,
        "PAYPAL-TRANSMISSION-SIG": "G6YT+rR22XCekDS/o9K1pWaP2kNs4IBRXR2k0MjJrWW05BbVtbzuqi17iCYPNKXiTpsoJ0pMcmZy1qP48PlpWo0hXpq8CMlGXvTC9yN4RSwnGlOnI7b3yTBG7U3LCevYmeZWMVeXJSweLrK3ZtnoGvBdhD7j2SPOZaKbUfjqkmZe8qhAIxp/FU26sUuAeDuMWa/NN1W7+gs3Mc5zGMIfj4r7yL/ejYzJeTp0AcMOrbbUzq5QVxX0Y0Bj9ZQNO+4Qjoe4VDxN0B1WYAlvNrCtj3fHYqaIC6jjS8NV50rTd8rtlyDMzrXph1HTqi3hYh4pD8+Ujz6iXO8EgadB0Rwjxw=="
    });
    let scheme = "paypal;webhook_id=1JE4291016473214C";
    let secret = format!("{PAYPAL_CERT_URL}\n{PAYPAL_CERT}");
    let now = 1_796_032_805; // 2026-11-30T10:00:05Z
    assert_eq!(
        check(scheme, headers.clone(), body, None, &secret, now),
        Reason::Ok
    );
    assert_eq!(
        check(scheme, headers.clone(), &flipped(body), None, &secret, now),
        Reason::BadSignature
    );
    assert_eq!(
        check(
            "paypal;webhook_id=1JE4291016473214D",
            headers.clone(),
            body,
            None,
            &secret,
            now
        ),
        Reason::BadSignature
    );
    assert_eq!(
        check(scheme, headers.clone(), body, None, &secret, now + 301),
        Reason::TimestampTooOld
    );
    assert_eq!(
        check(scheme, headers.clone(), body, None, &secret, now - 301),
        Reason::TimestampInFuture
    );
    // Another certificate under the URL the delivery names: not the signer.
    let other = format!("{PAYPAL_CERT_URL}\n{PAYPAL_OTHER_CERT}");
    assert_eq!(
        check(scheme, headers.clone(), body, None, &other, now),
        Reason::BadSignature
    );
    // The right certificate, registered under another URL.
    let elsewhere =
        format!("https://api.paypal.com/v1/notifications/certs/CERT-other\n{PAYPAL_CERT}");
    assert_eq!(
        check(scheme, headers.clone(), body, None, &elsewhere, now),
        Reason::UnknownCertificate
    );
    // A certificate without its URL cannot be matched to deliveries.
    assert_eq!(
        check(scheme, headers.clone(), body, None, PAYPAL_CERT, now),
        Reason::InvalidSecret
    );
    let mut wrong_algo = headers.clone();
    wrong_algo["PAYPAL-AUTH-ALGO"] = json!("SHA1withRSA");
    assert_eq!(
        check(scheme, wrong_algo, body, None, &secret, now),
        Reason::MalformedHeader
    );
    // The webhook id is part of the scheme: without it, no scheme.
    assert!(Scheme::parse("t", "scheme", "paypal").is_err());
    assert!(Scheme::parse("t", "scheme", "paypal;webhook_id=").is_err());
    assert!(Scheme::parse("t", "scheme", "stripe;webhook_id=x").is_err());
}

fn ed25519_signer(seed: u8) -> (ed25519_dalek::SigningKey, [u8; 32]) {
    let key = ed25519_dalek::SigningKey::from_bytes(&[seed; 32]);
    let public = key.verifying_key().to_bytes();
    (key, public)
}

#[test]
fn standard_webhooks_v1a_beside_v1() {
    use ed25519_dalek::Signer;
    let (signer, public) = ed25519_signer(7);
    let (_, other) = ed25519_signer(8);
    let body = br#"{"type":"user.created"}"#;
    let ts = 1_700_000_000;
    let v1a = b64(&signer
        .sign(format!("msg_1.{ts}.{}", std::str::from_utf8(body).unwrap()).as_bytes())
        .to_bytes());
    let headers = json!({
        "webhook-id": "msg_1", "webhook-timestamp": ts.to_string(),
        "webhook-signature": format!("v1,{} v1a,{v1a}", b64(&[0u8; 32])),
    });
    let key = format!("whpk_{}", b64(&public));
    assert_eq!(
        check("standard", headers.clone(), body, None, &key, ts),
        Reason::Ok
    );
    assert_eq!(
        check("supabase", headers.clone(), body, None, &key, ts),
        Reason::Ok
    );
    assert_eq!(
        check("standard", headers.clone(), &flipped(body), None, &key, ts),
        Reason::BadSignature
    );
    let wrong = format!("whpk_{}", b64(&other));
    assert_eq!(
        check("standard", headers.clone(), body, None, &wrong, ts),
        Reason::BadSignature
    );
    // An HMAC secret does not verify an Ed25519 signature, nor the reverse.
    assert_eq!(
        check("standard", headers, body, None, "whsec_c2VjcmV0", ts),
        Reason::BadSignature
    );
    assert_eq!(
        check("standard", json!({}), body, None, "whpk_not base64", ts),
        Reason::MissingHeader
    );
}

#[test]
fn public_key_checks_are_bounded_per_delivery() {
    use ed25519_dalek::Signer;
    let (signer, public) = ed25519_signer(7);
    let body = br#"{"type":"user.created"}"#;
    let ts = 1_700_000_000;
    let genuine = b64(&signer
        .sign(format!("msg_1.{ts}.{}", std::str::from_utf8(body).unwrap()).as_bytes())
        .to_bytes());
    let scheme = Scheme::parse("t", "scheme", "standard").unwrap();
    let keys: Vec<String> = (20..36u8)
        .map(|seed| format!("whpk_{}", b64(&ed25519_signer(seed).1)))
        .chain(std::iter::once(format!("whpk_{}", b64(&public))))
        .collect();
    let with = |signatures: usize, keys: &[String]| {
        // The genuine signature last, after forged ones.
        let mut entries: Vec<String> = (1..signatures)
            .map(|_| format!("v1a,{}", b64(&[1u8; 64])))
            .collect();
        entries.push(format!("v1a,{genuine}"));
        let headers = json!({
            "webhook-id": "msg_1", "webhook-timestamp": ts.to_string(),
            "webhook-signature": entries.join(" "),
        });
        let secrets: Vec<Option<&str>> = keys.iter().map(|k| Some(k.as_str())).collect();
        verify(&scheme, &headers, body, None, &secrets, 300, ts).reason
    };
    // A rotation's worth: two signatures against a few keys.
    assert_eq!(with(2, &keys[13..]), Reason::Ok);
    assert_eq!(with(1, &keys[1..]), Reason::Ok);
    // Past the budget, refused before any check: the genuine one too.
    assert_eq!(with(8, &keys[1..]), Reason::MalformedHeader);
    assert_eq!(with(2, &keys[9..]), Reason::Ok);
    assert_eq!(with(2, &keys[8..]), Reason::MalformedHeader);
    assert_eq!(with(3, &keys[10..]), Reason::MalformedHeader);
    // HMAC signatures and keys do not count against it.
    let hmac_keys: Vec<String> = (0..15)
        .map(|n| format!("whsec_{}", b64(&[n as u8 + 1; 24])))
        .collect();
    let mut mixed = hmac_keys.clone();
    mixed.push(format!("whpk_{}", b64(&public)));
    assert_eq!(with(8, &mixed), Reason::Ok);
}

#[test]
fn discord_ed25519() {
    use ed25519_dalek::Signer;
    let (signer, public) = ed25519_signer(3);
    let body = br#"{"id":"1150","type":2,"data":{"name":"ping"}}"#;
    let ts = "1700000000";
    let sig = signer.sign(&[ts.as_bytes(), body].concat());
    let headers =
        json!({ "X-Signature-Ed25519": hex::encode(sig.to_bytes()), "X-Signature-Timestamp": ts });
    let key = hex::encode(public);
    assert_eq!(
        check("discord", headers.clone(), body, None, &key, 1_700_000_000),
        Reason::Ok
    );
    assert_eq!(
        check(
            "discord",
            headers.clone(),
            &flipped(body),
            None,
            &key,
            1_700_000_000
        ),
        Reason::BadSignature
    );
    assert_eq!(
        check("discord", headers.clone(), body, None, &key, 1_700_000_301),
        Reason::TimestampTooOld
    );
    assert_eq!(
        check("discord", headers, body, None, "not hex", 1_700_000_000),
        Reason::InvalidSecret
    );
}

#[test]
fn sendgrid_ecdsa_p256() {
    use p256::ecdsa::signature::Signer;
    use p256::pkcs8::EncodePublicKey;
    let signer = p256::ecdsa::SigningKey::from_bytes(&[9u8; 32].into()).unwrap();
    let public = signer.verifying_key().to_public_key_der().unwrap();
    let body = br#"[{"email":"a@example.com","event":"delivered","sg_event_id":"sg_1"}]"#;
    let ts = "1700000000";
    let sig: p256::ecdsa::Signature = signer.sign(&[ts.as_bytes(), body].concat());
    let headers = json!({
        "X-Twilio-Email-Event-Webhook-Signature": b64(sig.to_der().as_bytes()),
        "X-Twilio-Email-Event-Webhook-Timestamp": ts,
    });
    let key = b64(public.as_bytes());
    assert_eq!(
        check("sendgrid", headers.clone(), body, None, &key, 1_700_000_000),
        Reason::Ok
    );
    let pem = public.to_pem("PUBLIC KEY", Default::default()).unwrap();
    assert_eq!(
        check("sendgrid", headers.clone(), body, None, &pem, 1_700_000_000),
        Reason::Ok
    );
    assert_eq!(
        check(
            "sendgrid",
            headers.clone(),
            &flipped(body),
            None,
            &key,
            1_700_000_000
        ),
        Reason::BadSignature
    );
    let shifted = json!({
        "X-Twilio-Email-Event-Webhook-Signature": headers["X-Twilio-Email-Event-Webhook-Signature"],
        "X-Twilio-Email-Event-Webhook-Timestamp": "1700000001",
    });
    assert_eq!(
        check("sendgrid", shifted, body, None, &key, 1_700_000_000),
        Reason::BadSignature
    );
}

#[test]
fn hmac_presets_as_documented() {
    // Mailgun: timestamp then token, in the body.
    let body = br#"{"signature":{"timestamp":"1700000000","token":"tok123","signature":"5516afc23d600f85e1b684bf89318b302f7ac528e1abfa320a743b72c495ce39"},"event-data":{"id":"ev1","event":"delivered"}}"#;
    assert_eq!(
        check(
            "mailgun",
            json!({}),
            body,
            None,
            "key-mailgun-test",
            1_700_000_000
        ),
        Reason::Ok
    );
    assert_eq!(
        check(
            "mailgun",
            json!({}),
            body,
            None,
            "key-mailgun-tesu",
            1_700_000_000
        ),
        Reason::BadSignature
    );
    assert_eq!(
        check("mailgun", json!({}), br#"{"event-data":{}}"#, None, "k", 0),
        Reason::MissingHeader
    );

    // Linear: the body, its timestamp in milliseconds inside, one minute.
    let body = br#"{"action":"create","type":"Issue","data":{"id":"iss_1"},"webhookTimestamp":1700000000123}"#;
    let headers = json!({ "Linear-Signature": "59ad93a9f7775d1520b66481c6b66133989ada0bd012a48ecbd944410db0666e" });
    let linear = |now| {
        let scheme = Scheme::parse("t", "scheme", "linear").unwrap();
        verify(
            &scheme,
            &headers,
            body,
            None,
            &[Some("lin_secret")],
            scheme.default_tolerance(),
            now,
        )
        .reason
    };
    assert_eq!(linear(1_700_000_030), Reason::Ok);
    assert_eq!(linear(1_700_000_061), Reason::TimestampTooOld);

    // HubSpot v3: method, URL, body, timestamp.
    let body = br#"[{"eventId":1,"subscriptionType":"contact.creation"}]"#;
    let headers = json!({
        "X-HubSpot-Signature-v3": "vlIhjtBJU+0Lf1hySWgAmz7lAFDJsxNob4XGLGZq724=",
        "X-HubSpot-Request-Timestamp": "1700000000000",
    });
    let url = "https://x.test/hooks/hubspot?a=b";
    assert_eq!(
        check(
            "hubspot",
            headers.clone(),
            body,
            Some(url),
            "hs_secret",
            1_700_000_000
        ),
        Reason::Ok
    );
    assert_eq!(
        check(
            "hubspot",
            headers.clone(),
            body,
            Some("https://x.test/hooks/hubspot%3Fa=b"),
            "hs_secret",
            1_700_000_000
        ),
        Reason::Ok
    );
    assert_eq!(
        check(
            "hubspot",
            headers.clone(),
            body,
            Some("https://x.test/hooks/hubspot?a=c"),
            "hs_secret",
            1_700_000_000
        ),
        Reason::BadSignature
    );
    assert_eq!(
        check("hubspot", headers, body, None, "hs_secret", 1_700_000_000),
        Reason::MissingUrl
    );

    // Square: URL then body.
    let body = br#"{"event_id":"e1","type":"payment.updated"}"#;
    let headers =
        json!({ "x-square-hmacsha256-signature": "xOdSWy1u920KbfBB3q5WU9hW3M5ULQg4EORuifcgP4Y=" });
    assert_eq!(
        check(
            "square",
            headers.clone(),
            body,
            Some("https://x.test/sq"),
            "sq_key",
            0
        ),
        Reason::Ok
    );
    assert_eq!(
        check(
            "square",
            headers.clone(),
            body,
            Some("https://x.test/sr"),
            "sq_key",
            0
        ),
        Reason::BadSignature
    );
    assert_eq!(
        check(
            "square",
            headers,
            &flipped(body),
            Some("https://x.test/sq"),
            "sq_key",
            0
        ),
        Reason::BadSignature
    );
}

#[test]
fn handshakes_are_recognised_for_their_scheme_only() {
    let zoom = Scheme::parse("t", "scheme", "zoom").unwrap();
    let body = json!({ "event": "endpoint.url_validation", "payload": { "plainToken": "qgg8vlvZRS6UYooatFL8Aw" } });
    let answer = handshake::recognise(&zoom, &body, Some(b"zoom_secret")).unwrap();
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&answer.response).unwrap(),
        json!({ "plainToken": "qgg8vlvZRS6UYooatFL8Aw",
                "encryptedToken": "46a324cfb7c2ec760e4cd561586a53aadb6fc7561eb8d626d6ee1b71d808b3c0" })
    );
    let twitch = Scheme::parse("t", "scheme", "twitch").unwrap();
    let answer = handshake::recognise(
        &twitch,
        &json!({ "challenge": "pogchamp-kappa-360noscope-vohiyo" }),
        None,
    )
    .unwrap();
    assert_eq!(
        (answer.response.as_str(), answer.content_type),
        ("pogchamp-kappa-360noscope-vohiyo", "text/plain")
    );
    let slack = Scheme::parse("t", "scheme", "slack").unwrap();
    let answer = handshake::recognise(
        &slack,
        &json!({ "type": "url_verification", "challenge": "3eZbrw1aB" }),
        None,
    )
    .unwrap();
    assert_eq!(answer.response, r#"{"challenge":"3eZbrw1aB"}"#);
    let discord = Scheme::parse("t", "scheme", "discord").unwrap();
    assert_eq!(
        handshake::recognise(&discord, &json!({ "type": 1 }), None)
            .unwrap()
            .response,
        r#"{"type":1}"#
    );
    // A Twitch notification is an event whatever its unsigned
    // message-type header says: only a verification's body has a challenge.
    assert!(handshake::recognise(
        &twitch,
        &json!({ "subscription": { "type": "channel.follow" }, "event": {} }),
        None
    )
    .is_none());
    // A revocation (the subscription and no event) is acknowledged, never
    // claimed; its status is whatever ended it.
    for status in [
        "authorization_revoked",
        "user_removed",
        "notification_failures_exceeded",
        "version_removed",
    ] {
        let revoked = handshake::recognise(
            &twitch,
            &json!({ "subscription": { "id": "f1c2", "status": status, "type": "channel.follow" } }),
            None,
        )
        .unwrap();
        assert_eq!(
            (revoked.kind, revoked.response.as_str()),
            ("revocation", "")
        );
    }
    // Not for another provider's scheme, and not an event.
    assert!(handshake::recognise(&slack, &body, None).is_none());
    assert!(handshake::recognise(&discord, &json!({ "type": 2 }), None).is_none());
    assert!(handshake::recognise(
        &Scheme::Plain(Kind::Stripe),
        &json!({ "type": "url_verification", "challenge": "x" }),
        None
    )
    .is_none());
}
