//! Deliveries signed by the providers' official SDKs (installed from npm
//! and PyPI at pinned versions by `.ci/sdk-fixtures`), or signed as the
//! provider documents it and accepted by its SDK's verifier, must pass
//! webhook_verify, and must fail once one byte of the body, of the URL or
//! of the signed timestamp is changed, or with a key that is not the
//! signer's.
#![cfg(feature = "client-tests")]

mod common;
use common::*;
use postgres::Client;

fn verify(
    client: &mut Client,
    scheme: &str,
    headers: &str,
    body: &[u8],
    secret: &str,
    url: Option<&str>,
) -> (bool, String) {
    let row = client
        .query_one(
            "SELECT valid, reason FROM webhook_verify_detail($1, $2::text::jsonb, $3::bytea, ARRAY[$4::text], url => $5)",
            &[&scheme, &headers, &body, &secret, &url],
        )
        .unwrap();
    (row.get(0), row.get(1))
}

#[test]
fn deliveries_signed_by_provider_sdks_verify_until_tampered() {
    let path = std::env::var("SDK_FIXTURES")
        .expect("SDK_FIXTURES names the file .ci/sdk-fixtures wrote (make test sets it)");
    let fixtures = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut client = connect(database("pgwi_provider_sdks"));
    let mut seen = std::collections::BTreeMap::<String, usize>::new();

    for line in fixtures.lines().filter(|l| !l.trim().is_empty()) {
        let f: serde_json::Value = serde_json::from_str(line).unwrap();
        let (sdk, scheme) = (f["sdk"].as_str().unwrap(), f["scheme"].as_str().unwrap());
        let headers = f["headers"].to_string();
        let body = f["body"].as_str().unwrap().as_bytes().to_vec();
        let secret = f["secret"].as_str().unwrap();
        let url = f["url"].as_str();
        if !edition_verifies_with(scheme, secret) {
            // Signed with a private key: the portable edition refuses it.
            let err = client
                .query(
                    "SELECT * FROM webhook_verify_detail($1, $2::text::jsonb, $3::bytea, ARRAY[$4::text], url => $5)",
                    &[&scheme, &headers, &body, &secret, &url],
                )
                .expect_err("a public-key scheme is refused");
            assert_eq!(sql_state(&err), Some("0A000"), "{sdk}: {}", message(&err));
            continue;
        }
        let ok = verify(&mut client, scheme, &headers, &body, secret, url);
        assert_eq!(ok, (true, "ok".into()), "{sdk}: {line}");

        let mut tampered = body.clone();
        let middle = tampered.len() / 2;
        tampered[middle] ^= 0x01;
        assert_eq!(
            verify(&mut client, scheme, &headers, &tampered, secret, url),
            (false, "bad_signature".into()),
            "{sdk}: body"
        );

        // Another key: a shared secret one character off, or a public key
        // or certificate that did not sign it.
        let other = match f["wrong_secret"].as_str() {
            Some(other) => other.to_string(),
            None => {
                let mut other: Vec<char> = secret.chars().collect();
                other[10] = if other[10] == 'A' { 'B' } else { 'A' };
                other.into_iter().collect()
            }
        };
        assert_eq!(
            verify(&mut client, scheme, &headers, &body, &other, url),
            (false, "bad_signature".into()),
            "{sdk}: secret"
        );

        if let Some(url) = url {
            let changed = url.replacen("hooks.", "hookz.", 1);
            assert_ne!(changed, url);
            assert_eq!(
                verify(&mut client, scheme, &headers, &body, secret, Some(&changed)),
                (false, "bad_signature".into()),
                "{sdk}: url"
            );
        }
        if let Some(shifted) = f.get("shifted_headers") {
            assert_eq!(
                verify(
                    &mut client,
                    scheme,
                    &shifted.to_string(),
                    &body,
                    secret,
                    url
                ),
                (false, "bad_signature".into()),
                "{sdk}: timestamp"
            );
        }
        if let Some(unknown) = f.get("unknown_key_headers") {
            assert_eq!(
                verify(
                    &mut client,
                    scheme,
                    &unknown.to_string(),
                    &body,
                    secret,
                    url
                ),
                (false, "unknown_certificate".into()),
                "{sdk}: certificate"
            );
        }

        if f["timestamped"].as_bool().unwrap() {
            let signed_at: i64 = client
                .query_one(
                    "SELECT extract(epoch FROM signed_at)::bigint
                       FROM webhook_verify_detail($1, $2::text::jsonb, $3::bytea, ARRAY[$4::text], url => $5)",
                    &[&scheme, &headers, &body, &secret, &url],
                )
                .unwrap()
                .get(0);
            let shifted = headers.replace(&signed_at.to_string(), &(signed_at + 1).to_string());
            assert_ne!(shifted, headers);
            assert_eq!(
                verify(&mut client, scheme, &shifted, &body, secret, url),
                (false, "bad_signature".into()),
                "{sdk}: timestamp"
            );
        }
        let scheme = scheme.split(';').next().unwrap();
        *seen.entry(format!("{scheme:<9} {sdk}")).or_default() += 1;
    }

    for (what, n) in &seen {
        eprintln!("{what}: {n} deliveries verified, and refused after tampering");
    }
    let schemes: std::collections::BTreeSet<&str> =
        seen.keys().map(|k| k.split(' ').next().unwrap()).collect();
    let every = [
        "discord", "github", "paddle", "paypal", "sendgrid", "slack", "standard", "stripe",
        "twilio",
    ];
    assert_eq!(
        schemes.into_iter().collect::<Vec<_>>(),
        every
            .into_iter()
            .filter(|s| edition_verifies(s))
            .collect::<Vec<_>>()
    );
}
