//! What the next delivery sees after the previous one failed halfway.
//! (The retry-poisoning postmortem: a failed event must never be skipped.)
#![cfg(feature = "client-tests")]

mod common;
use common::*;
use std::time::Duration;

/// Failure recorded with a savepoint: the business writes roll back, the
/// claim's history stays, and the retry completes the event.
#[test]
fn failure_halfway_recorded_then_retry_completes() {
    let db = database("pgwi_failure_recovery");
    let mut client = connect(db);

    let mut tx = client.transaction().unwrap();
    let claim = claim_in(&mut tx, "stripe", "evt_poison", None).unwrap();
    assert_eq!(claim.status, "claimed");
    tx.batch_execute("SAVEPOINT work").unwrap();
    tx.execute(
        "INSERT INTO side_effects VALUES ('stripe', 'evt_poison')",
        &[],
    )
    .unwrap();
    // The business logic breaks halfway.
    let err = tx.batch_execute("SELECT 1 / 0").unwrap_err();
    tx.batch_execute("ROLLBACK TO SAVEPOINT work").unwrap();
    tx.execute(
        "SELECT webhook_fail($1::text::uuid, $2)",
        &[&claim.id, &err.to_string()],
    )
    .unwrap();
    tx.commit().unwrap();

    assert_eq!(side_effects(&mut client, "stripe", "evt_poison"), 0);
    assert_eq!(
        event_state(&mut client, "stripe", "evt_poison"),
        ("failed".into(), 1)
    );

    // The provider retries: the event is re-claimed and driven to completion.
    assert_eq!(
        deliver(&mut client, "stripe", "evt_poison", Duration::ZERO),
        Answer::Done
    );
    assert_eq!(side_effects(&mut client, "stripe", "evt_poison"), 1);
    assert_eq!(
        event_state(&mut client, "stripe", "evt_poison"),
        ("processed".into(), 2)
    );
    assert_eq!(
        archive(&mut client, "stripe", "evt_poison"),
        ["claimed:FAILED", "retry:PROCESSED"]
    );
    // And later retries are duplicates.
    assert_eq!(
        deliver(&mut client, "stripe", "evt_poison", Duration::ZERO),
        Answer::Duplicate
    );
    assert_eq!(side_effects(&mut client, "stripe", "evt_poison"), 1);
}

/// Failure without a savepoint: the whole transaction aborts, claim
/// included, and nothing is left that could block or poison the retry.
#[test]
fn aborted_transaction_leaves_nothing_behind() {
    let db = database("pgwi_failure_recovery");
    let mut client = connect(db);

    let mut tx = client.transaction().unwrap();
    let claim = claim_in(&mut tx, "paddle", "evt_abort", None).unwrap();
    assert!(claim.claimed);
    tx.execute(
        "INSERT INTO side_effects VALUES ('paddle', 'evt_abort')",
        &[],
    )
    .unwrap();
    assert!(tx.batch_execute("SELECT 1 / 0").is_err());
    drop(tx); // rolls back

    assert_eq!(
        deliver(&mut client, "paddle", "evt_abort", Duration::ZERO),
        Answer::Done
    );
    assert_eq!(side_effects(&mut client, "paddle", "evt_abort"), 1);
    assert_eq!(
        event_state(&mut client, "paddle", "evt_abort"),
        ("processed".into(), 1)
    );
}

/// A deploy or an OOM killer ends the handler's backend mid-transaction.
#[test]
fn backend_terminated_mid_transaction_then_retry_completes() {
    let db = database("pgwi_failure_recovery");
    let mut victim = connect(db);
    let mut admin = connect(db);
    let pid: i32 = victim
        .query_one("SELECT pg_backend_pid()", &[])
        .unwrap()
        .get(0);

    let mut tx = victim.transaction().unwrap();
    let claim = claim_in(&mut tx, "github", "evt_killed", None).unwrap();
    assert!(claim.claimed);
    tx.execute(
        "INSERT INTO side_effects VALUES ('github', 'evt_killed')",
        &[],
    )
    .unwrap();

    // While it is live, a retry is told to come back later.
    assert_eq!(
        deliver(&mut admin, "github", "evt_killed", Duration::ZERO),
        Answer::InProgress
    );

    let killed: bool = admin
        .query_one("SELECT pg_terminate_backend($1, 5000)", &[&pid])
        .unwrap()
        .get(0);
    assert!(killed);
    assert!(
        tx.execute("SELECT 1", &[]).is_err(),
        "the victim's connection is gone"
    );
    drop(tx);

    assert_eq!(
        deliver(&mut admin, "github", "evt_killed", Duration::ZERO),
        Answer::Done
    );
    assert_eq!(side_effects(&mut admin, "github", "evt_killed"), 1);
    assert_eq!(
        event_state(&mut admin, "github", "evt_killed"),
        ("processed".into(), 1)
    );
}

/// A worker that holds its transaction longer than the lease is still
/// "live": the lease only governs claims that committed without finishing.
#[test]
fn open_transaction_outlives_its_lease_without_being_taken_over() {
    let db = database("pgwi_failure_recovery");
    let mut slow = connect(db);
    let mut other = connect(db);

    let mut tx = slow.transaction().unwrap();
    let claim = claim_in(&mut tx, "shopify", "evt_slow_tx", Some("50 milliseconds")).unwrap();
    tx.execute(
        "INSERT INTO side_effects VALUES ('shopify', 'evt_slow_tx')",
        &[],
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(200));

    assert_eq!(
        deliver(&mut other, "shopify", "evt_slow_tx", Duration::ZERO),
        Answer::InProgress
    );
    tx.execute("SELECT webhook_complete($1::text::uuid)", &[&claim.id])
        .unwrap();
    tx.commit().unwrap();

    assert_eq!(
        deliver(&mut other, "shopify", "evt_slow_tx", Duration::ZERO),
        Answer::Duplicate
    );
    assert_eq!(side_effects(&mut other, "shopify", "evt_slow_tx"), 1);
}

/// The archive refuses a delivery's row after its event row was written
/// (a claim and an intake each write the event first, then the archive, in
/// statements of their own): the call fails whole, so the next delivery
/// finds no event and is claimed, or queued with its inbox rows, as new.
#[test]
fn archive_failing_after_the_event_row_leaves_no_event() {
    // A trigger made and dropped on the archive locks it whole, against the
    // claims of the suite's other tests (a deadlock): a database of its own.
    let mut client = installed_database("pgwi_failure_recovery_archive");
    client
        .batch_execute(
            "CREATE FUNCTION public.refuse_half() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN RAISE EXCEPTION 'archive refused %', NEW.event_id; END $$;
             CREATE TRIGGER refuse_half BEFORE INSERT ON webhook.delivery_log
                 FOR EACH ROW WHEN (NEW.event_id LIKE 'evt_half%')
                 EXECUTE FUNCTION public.refuse_half();",
        )
        .unwrap();
    let claim = "SELECT status FROM webhook_claim('stripe', 'evt_half_claim', 'invoice.paid',
                     '{\"id\": \"evt_half_claim\"}'::jsonb, 'sig', complete_on_commit => true)";
    let enqueue = "SELECT status FROM webhook_enqueue('github', 'evt_half_queue', 'push',
                       '{\"id\": \"evt_half_queue\"}'::jsonb)";
    for sql in [claim, enqueue] {
        let err = client.query_one(sql, &[]).unwrap_err();
        let message = err.as_db_error().map(|e| e.message()).unwrap_or_default();
        assert!(message.contains("archive refused"), "{err:?}");
    }
    let events = |client: &mut postgres::Client| -> i64 {
        client
            .query_one(
                "SELECT count(*) FROM webhook.events WHERE event_id LIKE 'evt_half%'",
                &[],
            )
            .unwrap()
            .get(0)
    };
    assert_eq!(events(&mut client), 0);
    client
        .batch_execute("DROP TRIGGER refuse_half ON webhook.delivery_log")
        .unwrap();

    let status: String = client.query_one(claim, &[]).unwrap().get(0);
    assert_eq!(status, "claimed");
    let status: String = client.query_one(enqueue, &[]).unwrap().get(0);
    assert_eq!(status, "queued");
    assert_eq!(events(&mut client), 2);
    let queued: i64 = client
        .query_one(
            "SELECT count(*) FROM webhook.inbox WHERE event_id = 'evt_half_queue'",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(queued >= 1, "no inbox row for the queued event");
}
