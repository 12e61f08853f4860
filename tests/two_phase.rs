//! Two-phase use, for side effects outside the database: the claim commits
//! with a lease, the side effect happens, then complete or fail commits.
#![cfg(feature = "client-tests")]

mod common;
use common::*;
use std::time::{Duration, Instant};

/// The worker claims, commits, and vanishes before completing. Until the
/// lease runs out the event is in progress; after it, the next delivery
/// takes it over as a retry and completes it.
#[test]
fn vanished_worker_is_in_progress_until_its_lease_then_retry() {
    let db = database("pgwi_two_phase");
    let lease = Duration::from_secs(2);
    let claimed_at = Instant::now();
    let vanished_id = {
        let mut worker = connect(db);
        let claim = claim_in(&mut worker, "svix", "msg_vanish", Some("2 seconds")).unwrap();
        assert_eq!((claim.status.as_str(), claim.attempts), ("claimed", 1));
        claim.id
        // The worker's connection closes here: it crashed before completing.
    };

    let mut client = connect(db);
    let early = claim_in(&mut client, "svix", "msg_vanish", None).unwrap();
    assert!(
        claimed_at.elapsed() < lease,
        "the test checked before the lease ran out"
    );
    assert_eq!(
        (early.claimed, early.status.as_str()),
        (false, "in_progress")
    );

    std::thread::sleep(lease.saturating_sub(claimed_at.elapsed()) + Duration::from_millis(200));
    let late = claim_in(&mut client, "svix", "msg_vanish", None).unwrap();
    assert_eq!(
        (late.claimed, late.status.as_str(), late.attempts),
        (true, "retry", 2)
    );
    client
        .execute(
            "INSERT INTO side_effects VALUES ('svix', 'msg_vanish')",
            &[],
        )
        .unwrap();
    client
        .execute("SELECT webhook_complete($1::text::uuid)", &[&late.id])
        .unwrap();

    assert_eq!(side_effects(&mut client, "svix", "msg_vanish"), 1);
    assert_eq!(
        event_state(&mut client, "svix", "msg_vanish"),
        ("processed".into(), 2)
    );

    // The vanished worker comes back to life and tries to finish: refused,
    // so its transaction would roll back instead of repeating the work.
    let err = client
        .execute("SELECT webhook_complete($1::text::uuid)", &[&vanished_id])
        .unwrap_err();
    assert_eq!(sql_state(&err), Some("55006"), "{err}");
}

/// A two-phase worker whose side effect failed records it; the next
/// delivery is a retry straight away, without waiting for the lease.
#[test]
fn failed_side_effect_is_retried_at_once() {
    let db = database("pgwi_two_phase");
    let mut worker = connect(db);
    let claim = claim_in(&mut worker, "slack", "ev_fail", Some("1 hour")).unwrap();
    assert!(claim.claimed);
    worker
        .execute(
            "SELECT webhook_fail($1::text::uuid, 'smtp 451')",
            &[&claim.id],
        )
        .unwrap();

    let retry = claim_in(&mut worker, "slack", "ev_fail", None).unwrap();
    assert_eq!(
        (retry.claimed, retry.status.as_str(), retry.attempts),
        (true, "retry", 2)
    );
    worker
        .execute("SELECT webhook_complete($1::text::uuid)", &[&retry.id])
        .unwrap();
    assert_eq!(
        archive(&mut worker, "slack", "ev_fail"),
        ["claimed:FAILED", "retry:PROCESSED"]
    );
}

/// A heartbeat keeps a slow worker's claim: without it the lease would
/// have run out and the event been handed to another worker.
#[test]
fn heartbeat_keeps_a_slow_worker_owner() {
    let db = database("pgwi_two_phase");
    let mut worker = connect(db);
    let mut other = connect(db);
    let claim = claim_in(&mut worker, "stripe", "evt_heartbeat", Some("1 second")).unwrap();
    for _ in 0..3 {
        std::thread::sleep(Duration::from_millis(600));
        worker
            .execute(
                "SELECT webhook_extend($1::text::uuid, '1 second')",
                &[&claim.id],
            )
            .unwrap();
        let probe = claim_in(&mut other, "stripe", "evt_heartbeat", None).unwrap();
        assert_eq!(probe.status, "in_progress");
    }
    worker
        .execute("SELECT webhook_complete($1::text::uuid)", &[&claim.id])
        .unwrap();
    assert_eq!(
        event_state(&mut other, "stripe", "evt_heartbeat"),
        ("processed".into(), 1)
    );
}

/// The claim committed but its worker's backend was terminated (a deploy)
/// before completing: same recovery as a vanished client.
#[test]
fn terminated_backend_after_claim_commit_recovers_after_the_lease() {
    let db = database("pgwi_two_phase");
    let mut worker = connect(db);
    let mut admin = connect(db);
    let pid: i32 = worker
        .query_one("SELECT pg_backend_pid()", &[])
        .unwrap()
        .get(0);
    let claim = claim_in(&mut worker, "paddle", "evt_deploy", Some("1 second")).unwrap();
    assert!(claim.claimed);
    let killed: bool = admin
        .query_one("SELECT pg_terminate_backend($1, 5000)", &[&pid])
        .unwrap()
        .get(0);
    assert!(killed);

    assert_eq!(
        claim_in(&mut admin, "paddle", "evt_deploy", None)
            .unwrap()
            .status,
        "in_progress"
    );
    std::thread::sleep(Duration::from_millis(1200));
    assert_eq!(
        deliver(&mut admin, "paddle", "evt_deploy", Duration::ZERO),
        Answer::Done
    );
    assert_eq!(side_effects(&mut admin, "paddle", "evt_deploy"), 1);
    assert_eq!(
        event_state(&mut admin, "paddle", "evt_deploy"),
        ("processed".into(), 2)
    );
}
