//! The testing checklist of the webhook-idempotency patterns document the
//! project started from, one named test per line of it, against a real
//! server. Part of `make hardening`: one test restarts the server.
#![cfg(feature = "client-tests")]

mod common;
use common::*;
use postgres::Client;
use std::collections::HashMap;
use std::time::{Duration, Instant};

const DB: &str = "pgwi_checklist";

/// "Send same webhook event twice → only one order created"
#[test]
fn same_webhook_event_sent_twice_creates_one_order() {
    let _turn = one_at_a_time();
    let scenario = Scenario::start("9 checklist: same event twice", "cl-twice");
    let mut client = connect(database(DB));
    assert_eq!(
        deliver(&mut client, "cl-twice", "evt_1", Duration::ZERO),
        Answer::Done
    );
    assert_eq!(
        deliver(&mut client, "cl-twice", "evt_1", Duration::ZERO),
        Answer::Duplicate
    );
    scenario.sent(2);
    scenario.finish(&mut client, 1);
}

/// "Send webhook while server is processing same event → second is rejected"
/// Rejected means not acknowledged (409), so the provider comes back; once
/// the first finishes, the next delivery is acknowledged as a duplicate.
#[test]
fn webhook_sent_while_the_same_event_is_processing_is_rejected() {
    let _turn = one_at_a_time();
    let db = database(DB);
    let scenario = Scenario::start("9 checklist: during processing", "cl-busy");
    let mut first = connect(db);
    let mut second = connect(db);

    let mut tx = first.transaction().unwrap();
    let claim = claim_in(&mut tx, "cl-busy", "evt_1", None).unwrap();
    tx.execute("INSERT INTO side_effects VALUES ('cl-busy', 'evt_1')", &[])
        .unwrap();
    let started = Instant::now();
    assert_eq!(
        deliver(&mut second, "cl-busy", "evt_1", Duration::ZERO),
        Answer::InProgress
    );
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "rejected at once, not after waiting"
    );
    tx.execute("SELECT webhook_complete($1::text::uuid)", &[&claim.id])
        .unwrap();
    tx.commit().unwrap();
    assert_eq!(
        deliver(&mut second, "cl-busy", "evt_1", Duration::ZERO),
        Answer::Duplicate
    );
    scenario.sent(3);
    scenario.finish(&mut second, 1);
}

/// "Kill server mid-processing → restart → Stripe retries → event processed once"
/// Both ways of use: a handler transaction open at the crash, and a
/// two-phase claim committed before it.
#[test]
fn server_killed_mid_processing_restarted_and_retried_processes_once() {
    let _turn = one_at_a_time();
    let db = database(DB);
    let scenario = Scenario::start("9 checklist: server killed mid-processing", "cl-kill");
    {
        let mut handler = connect(db);
        let mut tx = handler.transaction().unwrap();
        assert!(
            claim_in(&mut tx, "cl-kill", "evt_tx", None)
                .unwrap()
                .claimed
        );
        tx.execute("INSERT INTO side_effects VALUES ('cl-kill', 'evt_tx')", &[])
            .unwrap();
        let mut worker = connect(db);
        assert!(
            claim_in(&mut worker, "cl-kill", "evt_2p", Some("1 second"))
                .unwrap()
                .claimed
        );
        scenario.sent(2);

        crash_server();
        assert!(
            tx.commit().is_err(),
            "nothing commits through a dead server"
        );
    }
    start_server();

    let mut client = connect(db);
    assert_eq!(
        deliver(&mut client, "cl-kill", "evt_tx", Duration::ZERO),
        Answer::Done
    );
    scenario.sent(1);
    // The two-phase claim survived the crash with its lease: in progress
    // until the lease runs out, then a retry.
    let attempts = deliver_until_acknowledged(&mut client, "cl-kill", "evt_2p");
    scenario.sent(attempts);
    assert_eq!(
        event_state(&mut client, "cl-kill", "evt_2p"),
        ("processed".into(), 2)
    );
    scenario.finish(&mut client, 2);
}

/// "Send webhook with invalid signature → rejected with 400"
/// The handler verifies before it claims: a forged delivery is refused
/// (this handler answers 401, as the README recommends; any 4xx rejects)
/// and leaves no claim, no archive row and no order.
#[test]
fn webhook_with_invalid_signature_is_rejected() {
    let _turn = one_at_a_time();
    let scenario = Scenario::start("9 checklist: invalid signature", "cl-sig");
    let mut client = connect(database(DB));
    let secret = "whsec_checklist";
    let body = r#"{"id":"evt_1","type":"charge.succeeded"}"#;
    let good = reference_signature(secret, body);

    let handle = |client: &mut Client, body: &str, signature: &str| -> u16 {
        let valid: bool = client
            .query_one(
                "SELECT verify_hmac($1, $2, $3)",
                &[&secret, &body, &signature],
            )
            .unwrap()
            .get(0);
        if !valid {
            return 401;
        }
        match deliver(client, "cl-sig", "evt_1", Duration::ZERO) {
            Answer::Done | Answer::Duplicate => 200,
            _ => 409,
        }
    };
    assert_eq!(handle(&mut client, body, &"0".repeat(64)), 401);
    assert_eq!(
        handle(&mut client, &body.replace("evt_1", "evt_2"), &good),
        401
    );
    let archived: i64 = client
        .query_one(
            "SELECT count(*) FROM webhook.deliveries WHERE provider = 'cl-sig'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(archived, 0, "nothing claimed or archived for a forgery");
    assert_eq!(
        handle(&mut client, body, &good),
        200,
        "the genuine delivery goes through"
    );
    scenario.sent(3);
    scenario.finish(&mut client, 1);
}

/// The sender's side, computed independently of the extension under test:
/// HMAC-SHA256 in hex by openssl's command line.
fn reference_signature(secret: &str, body: &str) -> String {
    let out = std::process::Command::new("openssl")
        .args(["dgst", "-sha256", "-hmac", secret, "-r"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(body.as_bytes())?;
            child.wait_with_output()
        })
        .expect("openssl computes the reference HMAC");
    String::from_utf8(out.stdout)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

/// "Send webhook with old event ID (already completed) → acknowledged, not reprocessed"
#[test]
fn webhook_with_an_already_completed_event_id_is_acknowledged_not_reprocessed() {
    let _turn = one_at_a_time();
    let scenario = Scenario::start("9 checklist: old event id", "cl-old");
    let mut client = connect(database(DB));
    assert_eq!(
        deliver(&mut client, "cl-old", "evt_old", Duration::ZERO),
        Answer::Done
    );
    // Make it old: completed three days ago, past every provider's retry window.
    client
        .execute(
            "UPDATE webhook.events SET first_seen_at = now() - interval '3 days',
                    processed_at = now() - interval '3 days'
              WHERE provider = 'cl-old'",
            &[],
        )
        .unwrap();
    for _ in 0..3 {
        assert_eq!(
            deliver(&mut client, "cl-old", "evt_old", Duration::ZERO),
            Answer::Duplicate
        );
    }
    scenario.sent(4);
    scenario.finish(&mut client, 1);
}

/// "Outbound Stripe call with same idempotency key → returns cached result"
/// A two-phase handler charges through an outbound API that caches by
/// idempotency key, as Stripe's API does, keyed by the event. Its worker
/// dies after the call and before completing; the retry that takes the
/// event over makes the same call with the same key and gets the cached
/// result: one charge.
#[test]
fn outbound_call_with_the_same_idempotency_key_returns_the_cached_result() {
    let _turn = one_at_a_time();
    let db = database(DB);
    let scenario = Scenario::start("9 checklist: outbound idempotency key", "cl-outbound");

    struct PaymentApi {
        charges: usize,
        by_key: HashMap<String, String>,
    }
    impl PaymentApi {
        fn charge(&mut self, idempotency_key: &str) -> String {
            if let Some(cached) = self.by_key.get(idempotency_key) {
                return cached.clone();
            }
            self.charges += 1;
            let result = format!("ch_{}", self.charges);
            self.by_key
                .insert(idempotency_key.to_string(), result.clone());
            result
        }
    }
    let mut api = PaymentApi {
        charges: 0,
        by_key: HashMap::new(),
    };

    let first_result = {
        let mut worker = connect(db);
        let claim = claim_in(
            &mut worker,
            "cl-outbound",
            "evt_1",
            Some("300 milliseconds"),
        )
        .unwrap();
        assert!(claim.claimed);
        api.charge("cl-outbound:evt_1")
        // The worker dies here, before webhook_complete.
    };
    scenario.sent(1);
    std::thread::sleep(Duration::from_millis(400));

    let mut worker = connect(db);
    let claim = claim_in(&mut worker, "cl-outbound", "evt_1", None).unwrap();
    scenario.sent(1);
    assert_eq!(claim.status, "retry");
    let second_result = api.charge("cl-outbound:evt_1");
    assert_eq!(second_result, first_result, "the cached result comes back");
    worker
        .execute(
            "INSERT INTO side_effects VALUES ('cl-outbound', 'evt_1')",
            &[],
        )
        .unwrap();
    worker
        .execute("SELECT webhook_complete($1::text::uuid)", &[&claim.id])
        .unwrap();
    assert_eq!(api.charges, 1, "one charge");
    scenario.finish(&mut worker, 1);
}

/// "Cleanup job removes events older than retention period"
/// Here the cleanup is webhook_purge: it removes archive rows of finished
/// events; the dedup row is kept forever, so a replay after the cleanup is
/// still a duplicate.
#[test]
fn cleanup_removes_archive_rows_older_than_retention_but_never_dedup() {
    let _turn = one_at_a_time();
    let scenario = Scenario::start("9 checklist: retention cleanup", "cl-cleanup");
    let mut client = connect(database(DB));
    for event in ["evt_old", "evt_new"] {
        assert_eq!(
            deliver(&mut client, "cl-cleanup", event, Duration::ZERO),
            Answer::Done
        );
        assert_eq!(
            deliver(&mut client, "cl-cleanup", event, Duration::ZERO),
            Answer::Duplicate
        );
    }
    client
        .execute(
            "UPDATE webhook.delivery_log SET created_at = now() - interval '100 days'
              WHERE provider = 'cl-cleanup' AND event_id = 'evt_old'",
            &[],
        )
        .unwrap();

    let purged: i64 = client
        .query_one("SELECT webhook_purge('90 days')", &[])
        .unwrap()
        .get(0);
    assert_eq!(purged, 2, "both deliveries of the old event");
    let remaining: Vec<String> = client
        .query(
            "SELECT event_id FROM webhook.deliveries WHERE provider = 'cl-cleanup'",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(remaining, ["evt_new", "evt_new"]);

    assert_eq!(
        deliver(&mut client, "cl-cleanup", "evt_old", Duration::ZERO),
        Answer::Duplicate
    );
    scenario.sent(5);
    scenario.finish(&mut client, 2);
}
