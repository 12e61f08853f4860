//! Many connections, the same events, at the same time: every side effect
//! happens exactly once, and no claim ever waits for another transaction.
#![cfg(feature = "client-tests")]

mod common;
use common::*;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

const CONNECTIONS: usize = 8;
const EVENTS: usize = 200;

/// Each of 8 connections delivers all 200 events, in its own shuffled
/// order, holding its transaction open for a while after each claim. Every
/// connection runs with a `lock_timeout` far shorter than that hold: a
/// claim that waited on another handler's open transaction would fail the
/// test with SQLSTATE 55P03 instead of answering. The timeout stays above
/// what a relation's extension can take on a busy machine (its lock is
/// taken and given back around a write, which the machine can stall for
/// tens of milliseconds): that is no wait on a handler.
#[test]
fn eight_connections_same_two_hundred_events_exactly_once_without_waiting() {
    let db = database("pgwi_concurrency");
    let hold = Duration::from_millis(250);
    let barrier = Arc::new(Barrier::new(CONNECTIONS));

    let workers: Vec<_> = (0..CONNECTIONS)
        .map(|worker| {
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                let mut client = connect(db);
                client.batch_execute("SET lock_timeout = '100ms'").unwrap();
                let mut order: Vec<usize> = (0..EVENTS).collect();
                shuffle(&mut order, worker as u64 + 1);
                barrier.wait();
                let mut answers = Vec::with_capacity(EVENTS);
                let mut slowest_claim = Duration::ZERO;
                for event in order {
                    let started = Instant::now();
                    let answer = try_deliver(&mut client, "storm", &format!("evt_{event}"), hold)
                        .unwrap_or_else(|e| {
                            panic!("delivery of evt_{event} failed: {}", message(&e))
                        });
                    if answer != Answer::Done {
                        slowest_claim = slowest_claim.max(started.elapsed());
                    }
                    answers.push((event, answer));
                }
                (answers, slowest_claim)
            })
        })
        .collect();

    let mut in_progress = 0;
    let mut slowest = Duration::ZERO;
    for w in workers {
        let (answers, slowest_claim) = w.join().expect("worker thread");
        in_progress += answers
            .iter()
            .filter(|(_, a)| *a == Answer::InProgress)
            .count();
        slowest = slowest.max(slowest_claim);
    }
    eprintln!("in_progress answers: {in_progress}; slowest non-owning claim: {slowest:?}");

    // The provider retries whatever was answered 409; then every event is done.
    let mut client = connect(db);
    for event in 0..EVENTS {
        deliver_until_acknowledged(&mut client, "storm", &format!("evt_{event}"));
    }
    let rows = client
        .query(
            "SELECT e.event_id, count(s.*)
               FROM webhook.events e LEFT JOIN side_effects s USING (provider, event_id)
              WHERE e.provider = 'storm'
              GROUP BY e.event_id",
            &[],
        )
        .unwrap();
    assert_eq!(rows.len(), EVENTS, "every event is known");
    for row in rows {
        let (event, count): (String, i64) = (row.get(0), row.get(1));
        assert_eq!(count, 1, "{event} had {count} side effects");
    }
    let unfinished: i64 = client
        .query_one(
            "SELECT count(*) FROM webhook.events WHERE provider = 'storm' AND status <> 'processed'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(unfinished, 0);
}

/// The seeds' lost event: a duplicate arrives while the first attempt is
/// still running, and the first attempt then fails. The duplicate must not
/// have been acknowledged, so the provider's retry still processes it.
#[test]
fn duplicate_during_an_attempt_that_then_fails_is_not_lost() {
    let db = database("pgwi_concurrency");
    let mut first = connect(db);
    let mut second = connect(db);

    let mut tx = first.transaction().unwrap();
    let claim = claim_in(&mut tx, "clerk", "evt_flaky", None).unwrap();
    assert_eq!(claim.status, "claimed");
    tx.execute(
        "INSERT INTO side_effects VALUES ('clerk', 'evt_flaky')",
        &[],
    )
    .unwrap();

    let started = Instant::now();
    let answer = deliver(&mut second, "clerk", "evt_flaky", Duration::ZERO);
    assert_eq!(
        answer,
        Answer::InProgress,
        "a live attempt is never acknowledged"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "the duplicate did not wait"
    );

    tx.rollback().unwrap(); // the first attempt fails

    let attempts = deliver_until_acknowledged(&mut second, "clerk", "evt_flaky");
    assert_eq!(
        attempts, 1,
        "the retry after the failure is processed at once"
    );
    assert_eq!(side_effects(&mut second, "clerk", "evt_flaky"), 1);
    assert_eq!(
        event_state(&mut second, "clerk", "evt_flaky").0,
        "processed"
    );
}

/// While another transaction holds an event (here: an operator's
/// `webhook_requeue`, which takes the event's lock), a delivery does not
/// wait and is answered from the event's committed state: a processed
/// event is a duplicate, a dead one stays dead until the requeue commits.
#[test]
fn a_held_event_is_answered_from_its_committed_state() {
    let db = database("pgwi_concurrency");
    let mut operator = connect(db);
    let mut handler = connect(db);

    assert_eq!(
        deliver(&mut handler, "paddle", "evt_held_done", Duration::ZERO),
        Answer::Done
    );
    let mut requeue = operator.transaction().unwrap();
    // Refused (processed is final), but the refusing transaction still
    // holds the event's lock until it ends.
    assert!(requeue
        .execute("SELECT webhook_requeue('paddle', 'evt_held_done')", &[])
        .is_err());
    let mut tx = handler.transaction().unwrap();
    let claim = claim_in(&mut tx, "paddle", "evt_held_done", None).unwrap();
    assert_eq!(
        (claim.claimed, claim.status.as_str(), claim.attempts),
        (false, "duplicate", 1)
    );
    tx.commit().unwrap();
    requeue.rollback().unwrap();

    handler
        .batch_execute("SET webhook.max_attempts = 1")
        .unwrap();
    let mut tx = handler.transaction().unwrap();
    let first = claim_in(&mut tx, "paddle", "evt_held_dead", None).unwrap();
    tx.execute("SELECT webhook_fail($1::text::uuid, 'boom')", &[&first.id])
        .unwrap();
    tx.commit().unwrap();
    handler.batch_execute("RESET webhook.max_attempts").unwrap();

    let mut requeue = operator.transaction().unwrap();
    requeue
        .execute("SELECT webhook_requeue('paddle', 'evt_held_dead')", &[])
        .unwrap();
    let mut tx = handler.transaction().unwrap();
    let claim = claim_in(&mut tx, "paddle", "evt_held_dead", None).unwrap();
    assert_eq!((claim.claimed, claim.status.as_str()), (false, "dead"));
    tx.commit().unwrap();
    requeue.commit().unwrap();

    let mut tx = handler.transaction().unwrap();
    let claim = claim_in(&mut tx, "paddle", "evt_held_dead", None).unwrap();
    assert_eq!((claim.claimed, claim.status.as_str()), (true, "retry"));
    tx.commit().unwrap();
    assert_eq!(
        archive(&mut handler, "paddle", "evt_held_done"),
        ["claimed:PROCESSED", "duplicate:SKIPPED"]
    );
}

/// Parking an event as dead writes its row, so the delivery that parks it
/// keeps the event's lock until it commits: a concurrent delivery is
/// answered at once (`in_progress`) instead of waiting on the uncommitted
/// row.
#[test]
fn a_delivery_beside_one_parking_its_event_as_dead_does_not_wait() {
    let db = database("pgwi_concurrency");
    let mut parker = connect(db);
    parker
        .batch_execute("SET webhook.max_attempts = 1")
        .unwrap();
    let first = claim_in(&mut parker, "paddle", "evt_parked_dead", Some("1 second")).unwrap();
    assert!(first.claimed);
    std::thread::sleep(Duration::from_millis(1300));

    let mut parking = parker.transaction().unwrap();
    let parked = claim_in(&mut parking, "paddle", "evt_parked_dead", None).unwrap();
    assert_eq!(parked.status, "dead");

    let mut other = connect(db);
    other
        .batch_execute("SET lock_timeout = '3s'; SET statement_timeout = '3s'")
        .unwrap();
    let started = Instant::now();
    let beside = claim_in(&mut other, "paddle", "evt_parked_dead", None)
        .expect("answered without waiting for the parking transaction");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "waited {:?}",
        started.elapsed()
    );
    assert_eq!(beside.status, "in_progress");
    parking.commit().unwrap();
    let after = claim_in(&mut other, "paddle", "evt_parked_dead", None).unwrap();
    assert_eq!(after.status, "dead");
}
