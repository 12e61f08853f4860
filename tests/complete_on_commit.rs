//! One call per handler: a claim made with `complete_on_commit => true`
//! is completed by the commit of the transaction that made it, and undone
//! by its rollback, over real connections and real commits.
#![cfg(feature = "client-tests")]

mod common;
use common::*;
use postgres::Client;
use std::sync::{Arc, Barrier};
use std::time::Duration;

const DB: &str = "pgwi_complete_on_commit";

/// The claim a one-call handler makes.
fn claim_on_commit(
    tx: &mut impl postgres::GenericClient,
    provider: &str,
    event_id: &str,
) -> Result<Claim, postgres::Error> {
    let row = tx.query_one(
        "SELECT id::text, claimed, status, attempts
           FROM webhook_claim($1, $2, 'invoice.paid', $3::text, 'v1=test',
                              complete_on_commit => true)",
        &[&provider, &event_id, &payload(event_id)],
    )?;
    Ok(Claim {
        id: row.get(0),
        claimed: row.get(1),
        status: row.get(2),
        attempts: row.get(3),
    })
}

/// The one-call handler: claim, side effect, commit; nothing else. `fail`
/// makes the work fail, and the transaction roll back.
fn handle(
    client: &mut Client,
    provider: &str,
    event_id: &str,
    hold: Duration,
    fail: bool,
) -> Result<Answer, postgres::Error> {
    let mut tx = client.transaction()?;
    let claim = claim_on_commit(&mut tx, provider, event_id)?;
    if !claim.claimed {
        tx.commit()?;
        return Ok(match claim.status.as_str() {
            "duplicate" => Answer::Duplicate,
            "in_progress" => Answer::InProgress,
            other => panic!("unexpected claim status {other}"),
        });
    }
    tx.execute(
        "INSERT INTO side_effects (provider, event_id) VALUES ($1, $2)",
        &[&provider, &event_id],
    )?;
    if !hold.is_zero() {
        std::thread::sleep(hold);
    }
    if fail {
        tx.rollback()?;
        return Ok(Answer::Failed);
    }
    tx.commit()?;
    Ok(Answer::Done)
}

/// The bug this option fixes: a one-transaction handler that commits
/// without `webhook_complete`. With the default (two-phase) claim its
/// event is answered `retry` once the lease runs out, and its side effect
/// would happen twice; with `complete_on_commit` the commit completed it.
#[test]
fn a_handler_that_commits_without_completing_is_done_only_with_complete_on_commit() {
    let db = database(DB);
    let mut client = connect(db);

    // The default: the claim committed on its own does not count as done.
    let mut tx = client.transaction().unwrap();
    let claim = claim_in(&mut tx, "stripe", "evt_forgot", Some("1 second")).unwrap();
    assert_eq!(claim.status, "claimed");
    tx.execute(
        "INSERT INTO side_effects (provider, event_id) VALUES ('stripe', 'evt_forgot')",
        &[],
    )
    .unwrap();
    tx.commit().unwrap();
    std::thread::sleep(Duration::from_millis(1300));
    let mut tx = client.transaction().unwrap();
    let again = claim_in(&mut tx, "stripe", "evt_forgot", None).unwrap();
    assert_eq!(
        (again.claimed, again.status.as_str()),
        (true, "retry"),
        "a two-phase claim is not done until webhook_complete"
    );
    tx.rollback().unwrap();

    // One call: the commit is the completion.
    assert_eq!(
        handle(&mut client, "stripe", "evt_one_call", Duration::ZERO, false).unwrap(),
        Answer::Done
    );
    assert_eq!(
        event_state(&mut client, "stripe", "evt_one_call"),
        ("processed".into(), 1)
    );
    std::thread::sleep(Duration::from_millis(1300));
    let later = claim_in(&mut client, "stripe", "evt_one_call", None).unwrap();
    assert_eq!((later.claimed, later.status.as_str()), (false, "duplicate"));
    assert_eq!(side_effects(&mut client, "stripe", "evt_one_call"), 1);
    assert_eq!(
        archive(&mut client, "stripe", "evt_one_call"),
        ["claimed:PROCESSED", "duplicate:SKIPPED"]
    );
    // Finishing it after the commit is refused: it is finished.
    let id = claim_id(&mut client, "evt_one_call");
    let err = client
        .execute("SELECT webhook_complete($1::text::uuid)", &[&id])
        .unwrap_err();
    assert_eq!(sql_state(&err), Some("55000"), "{}", message(&err));
}

fn claim_id(client: &mut Client, event_id: &str) -> String {
    client
        .query_one(
            "SELECT claim_id::text FROM webhook.events WHERE provider = 'stripe' AND event_id = $1",
            &[&event_id],
        )
        .unwrap()
        .get(0)
}

/// A handler whose work fails rolls back, and the claim with it: the next
/// delivery claims the event afresh, and nothing was done twice.
#[test]
fn a_rolled_back_handler_leaves_the_event_to_its_next_delivery() {
    let db = database(DB);
    let mut client = connect(db);
    assert_eq!(
        handle(&mut client, "stripe", "evt_rollback", Duration::ZERO, true).unwrap(),
        Answer::Failed
    );
    assert_eq!(side_effects(&mut client, "stripe", "evt_rollback"), 0);
    let mut tx = client.transaction().unwrap();
    let claim = claim_on_commit(&mut tx, "stripe", "evt_rollback").unwrap();
    assert_eq!(
        (claim.claimed, claim.status.as_str(), claim.attempts),
        (true, "claimed", 1)
    );
    tx.execute(
        "INSERT INTO side_effects (provider, event_id) VALUES ('stripe', 'evt_rollback')",
        &[],
    )
    .unwrap();
    tx.commit().unwrap();
    assert_eq!(
        handle(&mut client, "stripe", "evt_rollback", Duration::ZERO, false).unwrap(),
        Answer::Duplicate
    );
    assert_eq!(side_effects(&mut client, "stripe", "evt_rollback"), 1);
}

/// A failure recorded with webhook_fail after rolling back to a savepoint
/// taken after the claim: the event is failed, and its next delivery is a
/// retry that counts the attempt.
#[test]
fn a_failure_recorded_after_a_savepoint_is_retried() {
    let db = database(DB);
    let mut client = connect(db);
    let mut tx = client.transaction().unwrap();
    let claim = claim_on_commit(&mut tx, "stripe", "evt_savepoint").unwrap();
    assert!(claim.claimed);
    tx.batch_execute("SAVEPOINT work").unwrap();
    tx.execute(
        "INSERT INTO side_effects (provider, event_id) VALUES ('stripe', 'evt_savepoint')",
        &[],
    )
    .unwrap();
    tx.batch_execute("ROLLBACK TO SAVEPOINT work").unwrap();
    tx.execute(
        "SELECT webhook_fail($1::text::uuid, 'card declined')",
        &[&claim.id],
    )
    .unwrap();
    tx.commit().unwrap();
    assert_eq!(
        event_state(&mut client, "stripe", "evt_savepoint"),
        ("failed".into(), 1)
    );
    let mut tx = client.transaction().unwrap();
    let retry = claim_on_commit(&mut tx, "stripe", "evt_savepoint").unwrap();
    assert_eq!(
        (retry.claimed, retry.status.as_str(), retry.attempts),
        (true, "retry", 2)
    );
    tx.commit().unwrap();
    assert_eq!(
        event_state(&mut client, "stripe", "evt_savepoint"),
        ("processed".into(), 2)
    );
    assert_eq!(
        archive(&mut client, "stripe", "evt_savepoint"),
        ["claimed:FAILED", "retry:PROCESSED"]
    );
}

/// While the handler's transaction is open, another delivery is answered
/// `in_progress` at once (never acknowledged: the handler may still fail);
/// after the commit, `duplicate`.
#[test]
fn a_concurrent_delivery_is_in_progress_until_the_commit() {
    let db = database(DB);
    let mut first = connect(db);
    let mut second = connect(db);
    second.batch_execute("SET lock_timeout = '10ms'").unwrap();

    let mut tx = first.transaction().unwrap();
    let claim = claim_on_commit(&mut tx, "stripe", "evt_open").unwrap();
    assert!(claim.claimed);
    assert_eq!(
        handle(&mut second, "stripe", "evt_open", Duration::ZERO, false).unwrap(),
        Answer::InProgress
    );
    tx.commit().unwrap();
    assert_eq!(
        handle(&mut second, "stripe", "evt_open", Duration::ZERO, false).unwrap(),
        Answer::Duplicate
    );
}

/// Eight connections deliver the same 60 events in their own orders, each
/// holding its transaction open after the side effect, and every third
/// attempt's work fails and rolls back. Each connection retries an event
/// until it is acknowledged. Every event's side effect happens exactly
/// once, and no claim waits on another transaction (lock_timeout 100 ms:
/// above what a relation's extension can take on a busy machine, which is
/// no wait on a handler).
#[test]
fn eight_one_call_handlers_process_each_event_exactly_once() {
    const CONNECTIONS: usize = 8;
    const EVENTS: usize = 60;
    let db = database(DB);
    let barrier = Arc::new(Barrier::new(CONNECTIONS));
    let workers: Vec<_> = (0..CONNECTIONS)
        .map(|worker| {
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                let mut client = connect(db);
                client.batch_execute("SET lock_timeout = '100ms'").unwrap();
                let mut order: Vec<usize> = (0..EVENTS).collect();
                shuffle(&mut order, worker as u64 + 11);
                barrier.wait();
                let mut attempts = 0usize;
                for event in order {
                    let event_id = format!("evt_many_{event}");
                    for _ in 0..500 {
                        attempts += 1;
                        let fail = attempts.is_multiple_of(3);
                        let answer = handle(
                            &mut client,
                            "storm",
                            &event_id,
                            Duration::from_millis(2),
                            fail,
                        )
                        .unwrap_or_else(|e| panic!("{event_id}: {}", message(&e)));
                        if answer.acknowledged() {
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("worker thread");
    }
    let mut client = connect(db);
    let rows = client
        .query(
            "SELECT e.event_id, e.status::text, count(s.event_id)
               FROM webhook.events e
               LEFT JOIN side_effects s ON s.provider = e.provider AND s.event_id = e.event_id
              WHERE e.provider = 'storm' AND e.event_id LIKE 'evt_many_%'
              GROUP BY e.event_id, e.status",
            &[],
        )
        .unwrap();
    assert_eq!(rows.len(), EVENTS, "every event was delivered");
    for row in rows {
        let (event_id, status, done): (String, String, i64) = (row.get(0), row.get(1), row.get(2));
        assert_eq!((status.as_str(), done), ("processed", 1), "{event_id}");
    }
}
