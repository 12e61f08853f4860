#![cfg(feature = "client-tests")]
//! What a transaction has done through the extension (the claims whose
//! commit completes their event) is the extension's to remember, never the
//! caller's to claim. The compiled edition keeps it in its backend's
//! memory; the portable edition in a setting any role can write, sealed
//! with a key only the extension's owner reads. From an application role,
//! in both editions: a forged value, a value carried over from an earlier
//! transaction, and one kept past a rollback to a savepoint give no right
//! to fail or rewrite an event processed already, and the genuine use
//! still works.

mod common;

use common::*;
use postgres::Client;

const APP: &str = "state_app";
const SETTING: &str = "pg_webhook_inbox.completes_here";
static ROLES: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn prepare(name: &str) -> Client {
    let mut db = installed_database(name);
    {
        // Roles are the cluster's: the suite's tests make theirs one at a time.
        let _one = ROLES.lock().unwrap_or_else(|e| e.into_inner());
        ensure_role(&mut db, APP, true);
    }
    db.batch_execute(&format!(
        "SELECT webhook_grant_app('{APP}');
         SELECT webhook_register_provider('gh', secret => 's', scheme => 'github');"
    ))
    .unwrap();
    db
}

/// A claim that completes on commit, committed: the event is processed.
fn processed(db: &mut Client, app: &mut Client, event_id: &str) -> String {
    let id: String = app
        .query_one(
            "SELECT (webhook_claim('gh', $1, 'push', '{}'::jsonb, NULL, complete_on_commit => true)).id::text",
            &[&event_id],
        )
        .unwrap()
        .get(0);
    assert_eq!(state(db, event_id), "processed");
    id
}

fn state(client: &mut Client, event_id: &str) -> String {
    client
        .query_one(
            "SELECT status::text FROM webhook.events WHERE provider = 'gh' AND event_id = $1",
            &[&event_id],
        )
        .unwrap()
        .get(0)
}

/// Finishing calls on a processed event's delivery, each in a transaction
/// of its own after `setup` ran in it: every one refused as the compiled
/// edition refuses it (55000, "already PROCESSED"), the event unchanged.
fn refused_after(db: &mut Client, app: &mut Client, event_id: &str, id: &str, setup: &str) {
    for call in [
        format!("SELECT webhook_fail('{id}', 'forged')"),
        format!("SELECT webhook_complete('{id}', '{{\"rewritten\": true}}')"),
    ] {
        let mut tx = app.transaction().unwrap();
        tx.batch_execute(setup).unwrap();
        let err = tx.batch_execute(&call).expect_err(&call);
        assert_eq!(
            err.code().map(|c| c.code()),
            Some("55000"),
            "{call}: {}",
            message(&err)
        );
        assert!(
            message(&err).contains("is already PROCESSED"),
            "{call}: {}",
            message(&err)
        );
        drop(tx);
    }
    assert_eq!(state(db, event_id), "processed");
    let result: Option<String> = db
        .query_one(
            "SELECT result::text FROM webhook.events WHERE provider = 'gh' AND event_id = $1",
            &[&event_id],
        )
        .unwrap()
        .get(0);
    assert_eq!(result, None, "the result was rewritten");
}

#[test]
fn a_forged_claim_of_this_transaction_is_no_right_to_finish() {
    let db_name = "state_forged";
    let mut db = prepare(db_name);
    let mut app = connect_as(db_name, APP);
    let id = processed(&mut db, &mut app, "e-forged");
    // The value a portable claim writes, without its seal; with a seal of
    // the right shape and the wrong bytes; set for the session.
    for setup in [
        format!("SELECT set_config('{SETTING}', '{id},', true)"),
        format!("SELECT set_config('{SETTING}', '00000000000000000000000000000000:{id},', true)"),
        format!("SELECT set_config('{SETTING}', '{id},', false)"),
    ] {
        refused_after(&mut db, &mut app, "e-forged", &id, &setup);
        app.batch_execute(&format!("RESET \"{SETTING}\"")).unwrap();
    }
}

#[test]
fn a_sealed_value_of_another_transaction_is_no_right_to_finish() {
    let db_name = "state_replayed";
    let mut db = prepare(db_name);
    let mut app = connect_as(db_name, APP);
    // The genuine value, read in the transaction that wrote it: the
    // claim's own right there (in the compiled edition, the setting stays
    // unset and nothing is kept in it).
    let mut tx = app.transaction().unwrap();
    let id: String = tx
        .query_one(
            "SELECT (webhook_claim('gh', 'e-replayed', 'push', '{}'::jsonb, NULL, complete_on_commit => true)).id::text",
            &[],
        )
        .unwrap()
        .get(0);
    let sealed: Option<String> = tx
        .query_one("SELECT current_setting($1, true)", &[&SETTING])
        .unwrap()
        .get(0);
    tx.commit().unwrap();
    assert_eq!(state(&mut db, "e-replayed"), "processed");
    let sealed = sealed.unwrap_or_else(|| format!("{id},"));
    assert!(sealed.contains(&id), "{sealed}");
    let setup = format!("SELECT set_config('{SETTING}', '{sealed}', true)");
    refused_after(&mut db, &mut app, "e-replayed", &id, &setup);
    // Kept from a rolled-back savepoint of the same transaction: the claim
    // went with it, and the event is another transaction's processed one.
    let mut tx = app.transaction().unwrap();
    tx.batch_execute("SAVEPOINT s").unwrap();
    let again: String = tx
        .query_one(
            "SELECT webhook_claim('gh', 'e-replayed', 'push', '{}'::jsonb, NULL, complete_on_commit => true)::text",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(again.contains("duplicate"), "{again}");
    tx.batch_execute("ROLLBACK TO SAVEPOINT s").unwrap();
    tx.batch_execute(&setup).unwrap();
    let err = tx
        .batch_execute(&format!("SELECT webhook_fail('{id}', 'forged')"))
        .expect_err("fail after the savepoint");
    assert_eq!(
        err.code().map(|c| c.code()),
        Some("55000"),
        "{}",
        message(&err)
    );
    drop(tx);
    assert_eq!(state(&mut db, "e-replayed"), "processed");
}

#[test]
fn the_claim_s_own_transaction_may_still_finish_it() {
    let db_name = "state_genuine";
    let mut db = prepare(db_name);
    let mut app = connect_as(db_name, APP);
    // Completed with a result, or failed: in the claim's own transaction,
    // as a handler does that records what its work made, or whose work
    // failed after the claim.
    for (event_id, call, status) in [
        (
            "e-own",
            "SELECT webhook_complete('{id}', '{\"n\": 1}')",
            "processed",
        ),
        (
            "e-own-failed",
            "SELECT webhook_fail('{id}', 'the work failed')",
            "failed",
        ),
    ] {
        let mut tx = app.transaction().unwrap();
        let id: String = tx
            .query_one(
                "SELECT (webhook_claim('gh', $1, 'push', '{}'::jsonb, NULL, complete_on_commit => true)).id::text",
                &[&event_id],
            )
            .unwrap()
            .get(0);
        tx.batch_execute(&call.replace("{id}", &id)).unwrap();
        tx.commit().unwrap();
        assert_eq!(state(&mut db, event_id), status);
    }
    let result: String = db
        .query_one(
            "SELECT result::text FROM webhook.events WHERE event_id = 'e-own'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(result, r#"{"n": 1}"#);
    // A caller's own value beside the genuine one takes nothing from it.
    let mut tx = app.transaction().unwrap();
    tx.batch_execute(&format!(
        "SELECT set_config('{SETTING}', 'junk', true);
         SELECT webhook_claim('gh', 'e-own-2', 'push', '{{}}'::jsonb, NULL, complete_on_commit => true)"
    ))
    .unwrap();
    tx.commit().unwrap();
    let id: String = db
        .query_one(
            "SELECT claim_id::text FROM webhook.events WHERE provider = 'gh' AND event_id = 'e-own-2'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(state(&mut db, "e-own-2"), "processed");
    refused_after(&mut db, &mut app, "e-own-2", &id, "SELECT 1");
}

/// Several claims of one transaction, each remembered beside the earlier
/// ones under one seal: each may still be finished there, and a forgery
/// added to the sealed value later takes nothing from them nor adds to
/// them.
#[test]
fn every_claim_of_a_transaction_is_remembered() {
    let db_name = "state_several";
    let mut db = prepare(db_name);
    let mut app = connect_as(db_name, APP);
    let mut tx = app.transaction().unwrap();
    let ids: Vec<String> = ["e-one", "e-two", "e-three"]
        .iter()
        .map(|event_id| {
            tx.query_one(
                "SELECT (webhook_claim('gh', $1, 'push', '{}'::jsonb, NULL, complete_on_commit => true)).id::text",
                &[event_id],
            )
            .unwrap()
            .get(0)
        })
        .collect();
    tx.batch_execute(&format!(
        "SELECT webhook_fail('{}', 'the first one failed')",
        ids[0]
    ))
    .unwrap();
    tx.batch_execute(&format!(
        "SELECT webhook_complete('{}', '{{\"n\": 3}}')",
        ids[2]
    ))
    .unwrap();
    tx.commit().unwrap();
    assert_eq!(state(&mut db, "e-one"), "failed");
    assert_eq!(state(&mut db, "e-two"), "processed");
    assert_eq!(state(&mut db, "e-three"), "processed");
    // e-two, processed by that committed transaction: no right here.
    refused_after(&mut db, &mut app, "e-two", &ids[1], "SELECT 1");
}

/// The settings that protect a guarantee and that the shared SQL reads
/// itself: an operator's own value of webhook.maintenance_lock_timeout
/// never reaches the archive's maintenance (the compiled edition refuses
/// the SET; the portable edition the call that would read it).
#[test]
fn maintenance_never_runs_with_an_operator_s_own_lock_timeout() {
    const OPS: &str = "state_ops";
    let db_name = "state_maintenance";
    let mut db = prepare(db_name);
    {
        let _one = ROLES.lock().unwrap_or_else(|e| e.into_inner());
        ensure_role(&mut db, OPS, true);
    }
    db.batch_execute(&format!("SELECT webhook_grant_operator('{OPS}')"))
        .unwrap();
    let mut ops = connect_as(db_name, OPS);
    if !portable() {
        // The library defines the setting once loaded.
        ops.batch_execute("SELECT webhook_schemes() LIMIT 1")
            .unwrap();
    }
    match ops.batch_execute("SET webhook.maintenance_lock_timeout = '1h'") {
        Err(e) => {
            assert!(!portable(), "{}", message(&e));
            assert_eq!(e.code().map(|c| c.code()), Some("42501"));
        }
        Ok(()) => {
            assert!(portable(), "the operator set a protected setting");
            let err = ops
                .batch_execute("SELECT webhook_create_partitions(40)")
                .expect_err("partitions under the operator's own lock timeout");
            assert_eq!(
                err.code().map(|c| c.code()),
                Some("42501"),
                "{}",
                message(&err)
            );
            assert!(
                message(&err).contains("webhook.maintenance_lock_timeout"),
                "{}",
                message(&err)
            );
            ops.batch_execute("RESET webhook.maintenance_lock_timeout")
                .unwrap();
        }
    }
    ops.batch_execute("SELECT webhook_create_partitions(40)")
        .unwrap();
}
