#![cfg(feature = "client-tests")]
//! A role with no grant on the extension at all can still call
//! `pg_advisory_lock`, which PostgreSQL gives every role. So no lock the
//! extension relies on may be one such a role can compute and take: its
//! maintenance (partitions, purges, backfills, replays, the metrics'
//! rollup, alert evaluation) locks rows of a table only the owner may
//! touch, and the portable edition's event locks are keyed with a secret
//! only the owner reads (the compiled edition's live in a lock space SQL
//! cannot reach). From a role with no grants, holding every advisory key
//! the extension once used, in both editions: deliveries are claimed and
//! maintenance runs, without waiting.

mod common;

use common::*;
use postgres::Client;

const APP: &str = "strangers_app";
const OPS: &str = "strangers_ops";
const STRANGER: &str = "strangers_nobody";

fn prepare(name: &str) -> Client {
    let mut db = installed_database(name);
    {
        // Roles are the cluster's: the suite's tests make theirs one at a time.
        static ROLES: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _one = ROLES.lock().unwrap_or_else(|e| e.into_inner());
        for role in [APP, OPS, STRANGER] {
            ensure_role(&mut db, role, true);
        }
    }
    db.batch_execute(&format!(
        "SELECT webhook_grant_app('{APP}');
         SELECT webhook_grant_operator('{OPS}');
         SELECT webhook_register_provider('gh', secret => 's', scheme => 'github');"
    ))
    .unwrap();
    db
}

/// Session locks on `keys`, held by the stranger until `stranger` closes.
fn hold(stranger: &mut Client, keys: &[String]) {
    for key in keys {
        stranger
            .batch_execute(&format!("SELECT pg_advisory_lock({key})"))
            .unwrap_or_else(|e| panic!("{key}: {}", message(&e)));
    }
}

#[test]
fn no_role_can_hold_an_event_or_the_maintenance_by_its_advisory_key() {
    let db_name = "strangers_locks";
    let mut db = prepare(db_name);
    let mut stranger = connect_as(db_name, STRANGER);
    // The keys the extension once took: the portable edition's event
    // locks (a fixed-seed hash of provider and event id) and the
    // maintenance's (a hash of a fixed name).
    let mut keys: Vec<String> = ["e-held", "e-held-2"]
        .iter()
        .map(|e| format!("hashtextextended('gh' || chr(1) || '{e}', 22344)"))
        .collect();
    for name in [
        "pg_webhook_inbox archive partitions",
        "pg_webhook_inbox.alerts",
        "pg_webhook_inbox.metrics",
    ] {
        keys.push(format!("hashtext('{name}')"));
    }
    keys.push("hashtext('pg_webhook_inbox replay')::bigint".into());
    hold(&mut stranger, &keys);

    // Deliveries of those events are claimed, not answered in_progress.
    let mut app = connect_as(db_name, APP);
    app.batch_execute("SET lock_timeout = '2s'").unwrap();
    for event_id in ["e-held", "e-held-2"] {
        let status: String = app
            .query_one(
                "SELECT (webhook_claim('gh', $1, 'push', '{}'::jsonb, NULL, complete_on_commit => true)).status::text",
                &[&event_id],
            )
            .unwrap()
            .get(0);
        assert_eq!(status, "claimed", "{event_id}");
    }

    // The maintenance runs, each within the lock timeout.
    let mut ops = connect_as(db_name, OPS);
    ops.batch_execute("SET lock_timeout = '2s'").unwrap();
    for call in [
        "SELECT webhook_create_partitions(40)",
        "SELECT webhook_metrics_rollup()",
        "SELECT webhook_alerts_evaluate()",
        "SELECT webhook_purge(older_than => '30 days')",
    ] {
        ops.batch_execute(call)
            .unwrap_or_else(|e| panic!("{call}: {}", message(&e)));
    }

    // Nor can it lock the maintenance's rows, or compute an event's key.
    let err = stranger
        .batch_execute("SELECT FROM webhook.maintenance_locks FOR UPDATE")
        .expect_err("the stranger locked the maintenance");
    assert_eq!(
        err.code().map(|c| c.code()),
        Some("42501"),
        "{}",
        message(&err)
    );
    if portable() {
        let err = stranger
            .batch_execute("SELECT webhook._lock_key('gh', 'e-held')")
            .expect_err("the stranger computed an event's key");
        assert_eq!(
            err.code().map(|c| c.code()),
            Some("42501"),
            "{}",
            message(&err)
        );
        let (keyed, predictable): (i64, i64) = {
            let row = db
                .query_one(
                    "SELECT webhook._lock_key('gh', 'e-held'), hashtextextended('gh' || chr(1) || 'e-held', 22344)",
                    &[],
                )
                .unwrap();
            (row.get(0), row.get(1))
        };
        assert_ne!(keyed, predictable);
    }
}

/// The maintenance still takes its locks: two runs of a kind wait for
/// each other (or, for the rollup, the second has nothing to do).
#[test]
fn maintenance_still_runs_one_at_a_time() {
    let db_name = "strangers_one_at_a_time";
    drop(prepare(db_name));
    let mut first = connect_as(db_name, OPS);
    let mut second = connect_as(db_name, OPS);
    second.batch_execute("SET lock_timeout = '300ms'").unwrap();
    let mut held = first.transaction().unwrap();
    held.batch_execute("SELECT webhook_alerts_evaluate()")
        .unwrap();
    let err = second
        .batch_execute("SELECT webhook_alerts_evaluate()")
        .expect_err("two evaluations at once");
    assert_eq!(
        err.code().map(|c| c.code()),
        Some("55P03"),
        "{}",
        message(&err)
    );
    let err = second
        .batch_execute("SELECT webhook_create_partitions(40)")
        .err();
    assert!(err.is_none(), "partitions do not wait for alerts: {err:?}");
    held.batch_execute("SELECT webhook_create_partitions(41)")
        .unwrap();
    let err = second
        .batch_execute("SELECT webhook_create_partitions(42)")
        .expect_err("two partition runs at once");
    assert_eq!(
        err.code().map(|c| c.code()),
        Some("55P03"),
        "{}",
        message(&err)
    );
    held.commit().unwrap();
    second
        .batch_execute("SELECT webhook_create_partitions(42); SELECT webhook_alerts_evaluate()")
        .unwrap();
}
