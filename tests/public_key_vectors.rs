#![cfg(feature = "client-tests")]
//! Project Wycheproof's vectors for the three public-key checks (Ed25519,
//! ECDSA P-256 with SHA-256 in DER, RSASSA-PKCS1-v1_5 with SHA-256 and a
//! 2048-bit key), every one, through the portable edition's PL/pgSQL:
//! each answered as Wycheproof expects it (valid: verified; invalid:
//! refused), and every one, the "acceptable" ones included, answered as
//! the compiled edition's RustCrypto implementations answer it, called
//! here the way src/schemes/keys.rs calls them. The compiled edition's
//! own run of the same vectors is src/schemes/keys.rs's unit test.
//!
//! The checks are called directly, as the extension's owner: a scheme's
//! delivery signs bytes of its own shape (a timestamp, then the body),
//! which arbitrary vectors do not have.
//!
//! And the registry's public keys, which the portable edition reads once,
//! when they are registered (webhook._public_keys): a delivery verifies
//! with the key as read then, and the stored keys follow the registry.

mod common;

use common::*;
use wycheproof::TestResult;

/// Whether Wycheproof's expectation allows `verified`, and what the
/// compiled edition's implementation said is what the portable one says.
fn judge(what: &str, expected: TestResult, compiled: bool, portable: bool) {
    assert_eq!(
        portable, compiled,
        "{what}: the portable edition against the compiled one"
    );
    match expected {
        TestResult::Valid => assert!(portable, "{what}: a valid signature refused"),
        TestResult::Invalid => assert!(!portable, "{what}: an invalid signature accepted"),
        TestResult::Acceptable => {}
    }
}

fn verified(
    db: &mut postgres::Client,
    sql: &str,
    params: &[&(dyn postgres::types::ToSql + Sync)],
) -> bool {
    let answer: Option<bool> = db.query_one(sql, params).unwrap().get(0);
    answer.unwrap_or(false)
}

#[test]
fn every_wycheproof_vector_is_judged_as_the_compiled_edition_judges_it() {
    if !portable() {
        eprintln!("NOT CHECKED here: the compiled edition runs these vectors as a unit test (src/schemes/keys.rs)");
        return;
    }
    let mut db = installed_database("public_key_vectors");
    let mut counted = [0usize; 3];

    let set = wycheproof::eddsa::TestSet::load(wycheproof::eddsa::TestName::Ed25519).unwrap();
    for group in &set.test_groups {
        let pk: &[u8] = &group.key.pk;
        for test in &group.tests {
            let compiled = <[u8; 32]>::try_from(pk)
                .ok()
                .and_then(|pk| ed25519_dalek::VerifyingKey::from_bytes(&pk).ok())
                .is_some_and(|key| {
                    ed25519_dalek::Signature::from_slice(&test.sig)
                        .is_ok_and(|sig| key.verify_strict(&test.msg, &sig).is_ok())
                });
            let portable = verified(
                &mut db,
                "SELECT webhook._ed25519_verify($1, $2, $3)",
                &[&pk, &&test.sig[..], &&test.msg[..]],
            );
            judge(
                &format!("Ed25519 #{} ({})", test.tc_id, test.comment),
                test.result,
                compiled,
                portable,
            );
            counted[0] += 1;
        }
    }

    let set = wycheproof::ecdsa::TestSet::load(wycheproof::ecdsa::TestName::EcdsaSecp256r1Sha256)
        .unwrap();
    for group in &set.test_groups {
        use p256::ecdsa::signature::Verifier;
        use p256::pkcs8::DecodePublicKey;
        let der: &[u8] = &group.der;
        let key = p256::ecdsa::VerifyingKey::from_public_key_der(der).ok();
        for test in &group.tests {
            let compiled = key.as_ref().is_some_and(|key| {
                p256::ecdsa::Signature::from_der(&test.sig)
                    .is_ok_and(|sig| key.verify(&test.msg, &sig).is_ok())
            });
            let portable = verified(
                &mut db,
                "SELECT webhook._p256_verify(webhook._p256_key($1), $2, $3)",
                &[&der, &&test.sig[..], &&test.msg[..]],
            );
            judge(
                &format!("ECDSA P-256 #{} ({})", test.tc_id, test.comment),
                test.result,
                compiled,
                portable,
            );
            counted[1] += 1;
        }
    }

    let set = wycheproof::rsa_pkcs1_verify::TestSet::load(
        wycheproof::rsa_pkcs1_verify::TestName::Rsa2048Sha256,
    )
    .unwrap();
    for group in &set.test_groups {
        use rsa::pkcs8::DecodePublicKey;
        use rsa::signature::Verifier;
        let key = rsa::RsaPublicKey::from_public_key_der(&group.der)
            .ok()
            .map(rsa::pkcs1v15::VerifyingKey::<sha2::Sha256>::new);
        let strip = |v: &[u8]| v[v.iter().position(|&b| b != 0).unwrap_or(v.len())..].to_vec();
        let (n, e) = (strip(&group.key.n), strip(&group.key.e));
        for test in &group.tests {
            let compiled = key.as_ref().is_some_and(|key| {
                rsa::pkcs1v15::Signature::try_from(&test.sig[..])
                    .is_ok_and(|sig| key.verify(&test.msg, &sig).is_ok())
            });
            let portable = verified(
                &mut db,
                "SELECT webhook._rsa_verify(ARRAY[webhook._int($1), webhook._int($2), octet_length($1)], $3, $4)",
                &[&n, &e, &&test.sig[..], &&test.msg[..]],
            );
            judge(
                &format!("RSA-2048 #{} ({})", test.tc_id, test.comment),
                test.result,
                compiled,
                portable,
            );
            counted[2] += 1;
        }
    }
    eprintln!(
        "Wycheproof: {} Ed25519, {} ECDSA P-256 and {} RSA-2048 vectors judged alike",
        counted[0], counted[1], counted[2]
    );
    assert!(counted.iter().all(|&n| n > 100), "{counted:?}");
}

/// A check in the middle of its arithmetic is stopped by
/// statement_timeout, as any statement is: a hostile delivery cannot hold
/// a connection past it.
#[test]
fn statement_timeout_stops_a_check() {
    if !portable() {
        eprintln!("NOT CHECKED here: the compiled edition's checks take microseconds");
        return;
    }
    let mut db = installed_database("public_key_timeout");
    let set = wycheproof::eddsa::TestSet::load(wycheproof::eddsa::TestName::Ed25519).unwrap();
    let (group, test) = (&set.test_groups[0], &set.test_groups[0].tests[0]);
    db.batch_execute("SET statement_timeout = '2ms'").unwrap();
    let err = db
        .query_one(
            "SELECT webhook._ed25519_verify($1, $2, $3) FROM generate_series(1, 50)",
            &[&&group.key.pk[..], &&test.sig[..], &&test.msg[..]],
        )
        .expect_err("stopped by statement_timeout");
    assert_eq!(sql_state(&err), Some("57014"), "{}", message(&err));
}

/// A PayPal delivery of a new transmission, signed for `webhook_id` by the
/// suites' test signer named at `url`: (headers, body).
fn paypal_delivery(n: u32, webhook_id: &str, url: &str) -> (serde_json::Value, Vec<u8>) {
    let body =
        format!(r#"{{"id":"WH-EVT-{n}","event_type":"PAYMENT.CAPTURE.COMPLETED"}}"#).into_bytes();
    let (transmission, time) = (
        format!("tx-{n}"),
        common::sign::rfc3339(common::sign::now()),
    );
    let signature = common::sign::paypal_signature(&transmission, &time, webhook_id, &body);
    (
        common::sign::paypal(&transmission, &time, url, &signature),
        body,
    )
}

/// What webhook_receive says of a delivery: its reason, and its status
/// where the signature was good ("ok claimed", "ok in_progress").
fn receive_reason(db: &mut postgres::Client, delivery: &(serde_json::Value, Vec<u8>)) -> String {
    db.query_one(
        "SELECT reason || CASE WHEN reason = 'ok' THEN ' ' || status ELSE '' END
           FROM webhook_receive('paypal', $1::text::jsonb, $2::bytea)",
        &[&delivery.0.to_string(), &delivery.1],
    )
    .unwrap()
    .get(0)
}

/// The portable edition reads a registered public key once: the stored
/// row (its scheme, its numbers) is what a delivery verifies with, a
/// scheme changed reads the key again, a row missing or of another scheme
/// means the secret is read at the delivery, a copy (as a restore of the
/// plain script's database leaves) changes nothing, and the row goes with
/// its provider. The compiled edition answers every delivery the same.
#[test]
fn registered_public_keys_are_read_once_and_follow_the_registry() {
    const URL: &str = "https://api.paypal.com/v1/notifications/certs/CERT-keys";
    let mut db = installed_database("public_key_registry");
    let stored = |db: &mut postgres::Client| -> Vec<(String, String, String)> {
        db.query(
            "SELECT scheme, kind, nums[2]::text || ' ' || name FROM webhook._public_keys ORDER BY 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
    };
    db.execute(
        "SELECT webhook_register_provider('paypal', scheme => 'paypal;webhook_id=WH-1', secret => $1)",
        &[&common::sign::paypal_secret(URL)],
    )
    .unwrap();
    assert_eq!(
        receive_reason(&mut db, &paypal_delivery(1, "WH-1", URL)),
        "ok claimed"
    );
    if portable() {
        let read = vec![(
            "paypal;webhook_id=WH-1".to_string(),
            "rsa".to_string(),
            format!("65537 {URL}"),
        )];
        assert_eq!(stored(&mut db), read);
        // The stored modulus is what verifies: changed, the genuine
        // delivery no longer does.
        db.batch_execute("UPDATE webhook._public_keys SET nums[1] = nums[1] + 2")
            .unwrap();
        assert_eq!(
            receive_reason(&mut db, &paypal_delivery(2, "WH-1", URL)),
            "bad_signature"
        );
        // Missing: the secret is read at the delivery.
        db.batch_execute("DELETE FROM webhook._public_keys")
            .unwrap();
        assert_eq!(
            receive_reason(&mut db, &paypal_delivery(3, "WH-1", URL)),
            "ok claimed"
        );
    }
    // Another webhook id: the key is read again for the new scheme.
    db.execute(
        "SELECT webhook_register_provider('paypal', scheme => 'paypal;webhook_id=WH-2')",
        &[],
    )
    .unwrap();
    assert_eq!(
        receive_reason(&mut db, &paypal_delivery(4, "WH-2", URL)),
        "ok claimed"
    );
    assert_eq!(
        receive_reason(&mut db, &paypal_delivery(5, "WH-1", URL)),
        "bad_signature"
    );
    if portable() {
        let read = vec![(
            "paypal;webhook_id=WH-2".to_string(),
            "rsa".to_string(),
            format!("65537 {URL}"),
        )];
        assert_eq!(stored(&mut db), read);
        // A row of another scheme is not used, even a wrong one.
        db.batch_execute(
            "UPDATE webhook._public_keys SET scheme = 'paypal;webhook_id=WH-9', nums[1] = nums[1] + 2",
        )
        .unwrap();
        assert_eq!(
            receive_reason(&mut db, &paypal_delivery(6, "WH-2", URL)),
            "ok claimed"
        );
        db.batch_execute("SELECT webhook._read_public_keys('paypal', NULL)")
            .unwrap();
        // A copy of the row: one key still, one claim per delivery.
        db.batch_execute("INSERT INTO webhook._public_keys SELECT * FROM webhook._public_keys")
            .unwrap();
        let delivery = paypal_delivery(7, "WH-2", URL);
        assert_eq!(receive_reason(&mut db, &delivery), "ok claimed");
        assert_eq!(receive_reason(&mut db, &delivery), "ok in_progress");
        // A second certificate: its own row, under its own URL, read even
        // as a restore or a logical replication apply adds it
        // (session_replication_role = replica).
        db.batch_execute("SET session_replication_role = replica")
            .unwrap();
        db.execute(
            "SELECT webhook_add_secret('paypal', $1)",
            &[&common::sign::paypal_secret(
                "https://api.paypal.com/v1/notifications/certs/CERT-next",
            )],
        )
        .unwrap();
        db.batch_execute("RESET session_replication_role").unwrap();
        assert_eq!(
            count(
                &mut db,
                "SELECT count(DISTINCT fingerprint) FROM webhook._public_keys"
            ),
            2
        );
        // HMAC secrets have no row.
        db.batch_execute(
            "SELECT webhook_register_provider('stripe', secret => 'whsec_not_a_public_key')",
        )
        .unwrap();
        assert_eq!(
            count(
                &mut db,
                "SELECT count(*) FROM webhook._public_keys WHERE provider = 'stripe'"
            ),
            0
        );
        // A registry row written by hand with no scheme's name: its
        // secrets are still stored (webhook_receive refuses its deliveries
        // by the scheme's name).
        db.batch_execute(
            "INSERT INTO webhook.providers (name, scheme, event_id_from, event_type_from)
             VALUES ('by_hand', 'nonesuch', 'body:id', 'body:type');
             INSERT INTO webhook.provider_secrets (provider, secret, fingerprint)
             VALUES ('by_hand', 'a secret', 'f00d');",
        )
        .unwrap();
        // The provider gone, its keys go.
        db.batch_execute("DELETE FROM webhook.providers WHERE name = 'paypal'")
            .unwrap();
        assert_eq!(
            count(&mut db, "SELECT count(*) FROM webhook._public_keys"),
            0
        );
    }
}
