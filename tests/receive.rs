//! webhook_receive over a real connection, as an application role that
//! holds nothing but EXECUTE on the handler functions: a Stripe, a GitHub
//! and a Standard Webhooks delivery, each genuine, forged, stale and
//! replayed.
#![cfg(feature = "client-tests")]

mod common;
use common::sign::{github, now, standard, stripe};
use common::*;
use postgres::Client;

const STRIPE_SECRET: &str = "whsec_client_test_stripe";
const GITHUB_SECRET: &str = "client-test-github";
/// Standard Webhooks secret: whsec_ + base64 of the key bytes.
const STANDARD_SECRET: &str = "whsec_Y2xpZW50LXRlc3Qtc3RhbmRhcmQta2V5MDE=";

struct Answer {
    id: String,
    status: String,
    http: i32,
    reason: String,
    result: Option<String>,
}

/// The whole handler: receive, do the work if it is ours, complete with
/// the answer we want duplicates to get.
fn handle(app: &mut Client, provider: &str, headers: &serde_json::Value, body: &str) -> Answer {
    let mut tx = app.transaction().unwrap();
    let row = tx
        .query_one(
            "SELECT id::text, claimed, status, http_status, reason, result::text
               FROM webhook_receive($1, $2::text::jsonb, $3::bytea)",
            &[&provider, &headers.to_string(), &body.as_bytes()],
        )
        .unwrap();
    let answer = Answer {
        id: row.get(0),
        status: row.get(2),
        http: row.get(3),
        reason: row.get(4),
        result: row.get(5),
    };
    if row.get::<_, bool>(1) {
        tx.execute(
            "SELECT webhook_complete($1::text::uuid, jsonb_build_object('handled_by', 'receive-test'))",
            &[&answer.id],
        )
        .unwrap();
    }
    tx.commit().unwrap();
    answer
}

fn app_connection(db: &str) -> Client {
    // Two tests granting the same role at once would update the same
    // catalog rows at once.
    let _setup = one_at_a_time();
    let mut admin = connect(db);
    ensure_role(&mut admin, "webhook_handler", true);
    admin
        .batch_execute("SELECT webhook_grant_app('webhook_handler');")
        .unwrap();
    admin
        .execute(
            "SELECT webhook_register_provider('stripe', secret => $1)",
            &[&STRIPE_SECRET],
        )
        .unwrap();
    // Claimed like the others here; the inbox has its own suite.
    admin
        .execute(
            "SELECT webhook_register_provider('github', secret => $1, inbox => false)",
            &[&GITHUB_SECRET],
        )
        .unwrap();
    admin
        .execute(
            "SELECT webhook_register_provider('clerk', secret => $1)",
            &[&STANDARD_SECRET],
        )
        .unwrap();
    connect_as(db, "webhook_handler")
}

#[test]
fn stripe_github_and_standard_webhooks_through_webhook_receive_as_an_app_role() {
    let db = database("pgwi_receive");
    let mut app = app_connection(db);

    let stripe_body =
        r#"{"id":"evt_recv_1","type":"invoice.paid","data":{"object":{"amount_paid":500}}}"#;
    let github_body = r#"{"ref":"refs/heads/main","commits":[]}"#;
    let clerk_body = r#"{"type":"user.created","data":{"id":"user_1"}}"#;
    let deliveries = [
        (
            "stripe",
            stripe(stripe_body, now(), STRIPE_SECRET),
            stripe_body,
        ),
        (
            "github",
            github("gh-delivery-1", "push", github_body, GITHUB_SECRET),
            github_body,
        ),
        (
            "clerk",
            standard("msg_recv_1", clerk_body, now(), STANDARD_SECRET),
            clerk_body,
        ),
    ];

    for (provider, headers, body) in &deliveries {
        // Genuine: claimed, handled, 200.
        let first = handle(&mut app, provider, headers, body);
        assert_eq!(
            (first.status.as_str(), first.http, first.reason.as_str()),
            ("claimed", 200, "ok"),
            "{provider}"
        );

        // Replayed (the provider's retry, or an attacker's copy): a duplicate
        // that gets the first answer back, and does nothing.
        let replay = handle(&mut app, provider, headers, body);
        assert_eq!(
            (replay.status.as_str(), replay.http),
            ("duplicate", 200),
            "{provider}"
        );
        assert_eq!(
            replay.result.as_deref(),
            Some(r#"{"handled_by": "receive-test"}"#)
        );

        // Forged: the body changed under the same signature.
        let forged_body = body
            .replace("main", "evil")
            .replace("500", "50000")
            .replace("user_1", "user_2");
        let forged = handle(&mut app, provider, headers, &forged_body);
        assert_eq!(
            (forged.status.as_str(), forged.http, forged.reason.as_str()),
            ("rejected", 401, "bad_signature"),
            "{provider}"
        );
    }

    // Stale: genuine signatures from an hour ago (GitHub signs no time).
    let old = now() - 3600;
    let stale_stripe = handle(
        &mut app,
        "stripe",
        &stripe(stripe_body, old, STRIPE_SECRET),
        stripe_body,
    );
    assert_eq!(
        (stale_stripe.http, stale_stripe.reason.as_str()),
        (401, "timestamp_too_old")
    );
    let stale_clerk = handle(
        &mut app,
        "clerk",
        &standard("msg_recv_1", clerk_body, old, STANDARD_SECRET),
        clerk_body,
    );
    assert_eq!(
        (stale_clerk.http, stale_clerk.reason.as_str()),
        (401, "timestamp_too_old")
    );

    // What the application role cannot do, over its own connection.
    for sql in [
        "SELECT count(*) FROM webhook.events",
        "UPDATE webhook.events SET status = 'processed'",
        "DELETE FROM webhook.deliveries",
        "SELECT secret FROM webhook.provider_secrets",
        "SELECT * FROM webhook_providers()",
        "SELECT webhook_add_secret('stripe', 'attacker')",
    ] {
        let err = app.batch_execute(sql).expect_err(sql);
        assert_eq!(sql_state(&err), Some("42501"), "{sql}: {err}");
    }

    // The archive, seen by the owner: three events processed once each,
    // every forgery and replay on record.
    let mut admin = connect(db);
    let processed: i64 = admin
        .query_one(
            "SELECT count(*) FROM webhook.events
              WHERE status = 'processed' AND provider IN ('stripe', 'github', 'clerk')",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(processed, 3);
    let rejected: Vec<String> = admin
        .query(
            "SELECT provider || ':' || reason FROM webhook.rejected_deliveries
              WHERE provider IN ('stripe', 'github', 'clerk') ORDER BY 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        rejected,
        [
            "clerk:bad_signature",
            "clerk:timestamp_too_old",
            "github:bad_signature",
            "stripe:bad_signature",
            "stripe:timestamp_too_old"
        ]
    );
}

/// Each backend keeps the registry it read; a change another session
/// commits reaches it on its next delivery, and one rolled back never
/// does. The application's connection stays open throughout, so every
/// answer after the first comes from a backend that had the provider
/// cached.
#[test]
fn a_registry_change_reaches_every_open_connection_once_committed() {
    let db = database("pgwi_receive");
    let mut app = app_connection(db);
    let mut admin = connect(db);
    let (old, new) = ("whsec_rotate_old", "whsec_rotate_new");
    admin
        .execute(
            "SELECT webhook_register_provider('rotate', scheme => 'stripe', secret => $1)",
            &[&old],
        )
        .unwrap();
    let delivery = |n: u32, secret: &str| {
        let body = format!(r#"{{"id":"evt_rotate_{n}","type":"invoice.paid"}}"#);
        (stripe(&body, now(), secret), body)
    };

    let (headers, body) = delivery(1, old);
    assert_eq!(handle(&mut app, "rotate", &headers, &body).reason, "ok");

    // The new secret in and the old one out, committed or rolled back.
    let rotate = |admin: &mut Client, commit: bool| {
        let mut tx = admin.transaction().unwrap();
        tx.execute("SELECT webhook_add_secret('rotate', $1)", &[&new])
            .unwrap();
        tx.execute(
            "SELECT webhook_retire_secret('rotate', $1, force => true)",
            &[&old],
        )
        .unwrap();
        if commit {
            tx.commit().unwrap();
        } else {
            tx.rollback().unwrap();
        }
    };

    // A rotation that rolls back changes nothing for the open connection.
    rotate(&mut admin, false);
    let (headers, body) = delivery(2, old);
    assert_eq!(handle(&mut app, "rotate", &headers, &body).reason, "ok");
    let (headers, body) = delivery(3, new);
    assert_eq!(
        handle(&mut app, "rotate", &headers, &body).reason,
        "bad_signature"
    );

    // Committed, it holds on the very next delivery.
    rotate(&mut admin, true);
    let (headers, body) = delivery(4, old);
    assert_eq!(
        handle(&mut app, "rotate", &headers, &body).reason,
        "bad_signature"
    );
    let (headers, body) = delivery(5, new);
    assert_eq!(handle(&mut app, "rotate", &headers, &body).reason, "ok");

    // So does a change of mode: registered for the inbox, the next
    // delivery is queued.
    admin
        .execute(
            "SELECT webhook_register_provider('rotate', scheme => 'stripe', inbox => true)",
            &[],
        )
        .unwrap();
    let (headers, body) = delivery(6, new);
    assert_eq!(handle(&mut app, "rotate", &headers, &body).status, "queued");

    // And a provider dropped is unknown at once.
    admin
        .execute("DELETE FROM webhook.providers WHERE name = 'rotate'", &[])
        .unwrap();
    let (headers, body) = delivery(7, new);
    let err = app
        .query_one(
            "SELECT status FROM webhook_receive('rotate', $1::text::jsonb, $2::bytea)",
            &[&headers.to_string(), &body.as_bytes()],
        )
        .unwrap_err();
    assert_eq!(sql_state(&err), Some("42704"), "{}", message(&err));
}

/// A retirement reaches a connection in the middle of a transaction (its
/// next delivery there is checked against the registry as committed), and
/// one made under `session_replication_role = replica` (a restore, a
/// logical replication apply) reaches every connection too.
#[test]
fn a_retired_secret_is_refused_inside_open_transactions_and_after_replica_changes() {
    let db = database("pgwi_receive");
    let mut app = app_connection(db);
    let mut admin = connect(db);
    let (old, new) = ("whsec_retire_old", "whsec_retire_new");
    admin
        .execute(
            "SELECT webhook_register_provider('retire', scheme => 'stripe', secret => $1)",
            &[&old],
        )
        .unwrap();
    admin
        .execute("SELECT webhook_add_secret('retire', $1)", &[&new])
        .unwrap();
    let receive = |tx: &mut postgres::Transaction<'_>, n: u32, secret: &str| -> String {
        let body = format!(r#"{{"id":"evt_retire_{n}","type":"invoice.paid"}}"#);
        tx.query_one(
            "SELECT reason FROM webhook_receive('retire', $1::text::jsonb, $2::bytea)",
            &[&stripe(&body, now(), secret).to_string(), &body.as_bytes()],
        )
        .unwrap()
        .get(0)
    };

    // Inside one open transaction, which read the registry (and verified
    // with the new secret): the old one is retired and committed elsewhere.
    let mut tx = app.transaction().unwrap();
    assert_eq!(receive(&mut tx, 1, new), "ok");
    admin
        .execute(
            "SELECT webhook_retire_secret('retire', $1, force => true)",
            &[&old],
        )
        .unwrap();
    assert_eq!(receive(&mut tx, 2, old), "bad_signature");
    assert_eq!(receive(&mut tx, 3, new), "ok");
    tx.commit().unwrap();

    // Under session_replication_role = replica, as pg_restore and logical
    // replication write.
    let mut tx = app.transaction().unwrap();
    assert_eq!(receive(&mut tx, 4, new), "ok");
    tx.commit().unwrap();
    admin
        .batch_execute(
            "SET session_replication_role = replica;
             UPDATE webhook.provider_secrets SET retired_at = now()
              WHERE provider = 'retire' AND retired_at IS NULL;
             RESET session_replication_role;",
        )
        .unwrap();
    let mut tx = app.transaction().unwrap();
    assert_eq!(receive(&mut tx, 5, new), "no_secret");
    tx.commit().unwrap();
}

/// A leaked key must stop verifying now: a handler transaction that noted
/// the key's use and stays open does not hold its retirement back; a
/// transaction that does hold the secret's row is waited for at most
/// webhook.maintenance_lock_timeout, and named in the error.
#[test]
fn retiring_a_secret_never_waits_for_a_handler() {
    let db = database("pgwi_receive");
    let mut app = app_connection(db);
    let mut admin = connect(db);
    let leaked = "whsec_leaked_key";
    admin
        .batch_execute(
            "SELECT webhook_register_provider('leaky', scheme => 'stripe', secret => 'whsec_leaked_key');
             SELECT webhook_add_secret('leaky', 'whsec_leaky_new');",
        )
        .unwrap();
    // A handler verified a delivery with the leaked key (noting its use)
    // and is still working, its transaction open.
    let mut handler = app.transaction().unwrap();
    let body = r#"{"id":"evt_leaky_1","type":"invoice.paid"}"#;
    let reason: String = handler
        .query_one(
            "SELECT reason FROM webhook_receive('leaky', $1::text::jsonb, $2::bytea)",
            &[&stripe(body, now(), leaked).to_string(), &body.as_bytes()],
        )
        .unwrap()
        .get(0);
    assert_eq!(reason, "ok");
    let started = std::time::Instant::now();
    admin
        .batch_execute(
            "SET webhook.maintenance_lock_timeout = '2s';
             SELECT webhook_retire_secret('leaky', 'whsec_leaked_key', force => true);",
        )
        .unwrap();
    assert!(
        started.elapsed() < std::time::Duration::from_millis(1500),
        "retired at once, not after the handler"
    );
    handler.commit().unwrap();
    let used: Option<std::time::SystemTime> = admin
        .query_one(
            "SELECT last_used_at FROM webhook.secret_usage WHERE provider = 'leaky'
                AND fingerprint = webhook._fingerprint('whsec_leaked_key')",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(used.is_some(), "the use was still recorded");

    // Someone holding the secret's own row (a registry change left open):
    // the wait is bounded and the error names them.
    admin
        .batch_execute("SELECT webhook_add_secret('leaky', 'whsec_leaky_third')")
        .unwrap();
    let mut holder = connect(db);
    holder
        .batch_execute(
            "SET application_name = 'forgotten-registry-change';
             BEGIN;
             SELECT 1 FROM webhook.provider_secrets WHERE provider = 'leaky'
                AND fingerprint = webhook._fingerprint('whsec_leaky_third') FOR UPDATE;",
        )
        .unwrap();
    let err = admin
        .batch_execute("SELECT webhook_retire_secret('leaky', 'whsec_leaky_third', force => true)")
        .unwrap_err();
    assert_eq!(sql_state(&err), Some("55P03"));
    let detail = err
        .as_db_error()
        .unwrap()
        .detail()
        .unwrap_or_default()
        .to_string();
    assert!(detail.contains("forgotten-registry-change"), "{detail}");
    holder.batch_execute("ROLLBACK").unwrap();
    admin
        .batch_execute("SELECT webhook_retire_secret('leaky', 'whsec_leaky_third', force => true)")
        .unwrap();
}
