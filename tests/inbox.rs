//! The inbox over real connections: workers draining a backlog while
//! deliveries keep arriving, several consumers, retries at their scheduled
//! times, and GitHub in inbox mode. Killed workers, terminated backends and
//! a crashed server are in `hardening_inbox_crashes.rs` (a hardening suite).
#![cfg(feature = "client-tests")]

mod common;
use common::*;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const DB: &str = "pgwi_inbox";

/// A worker's connection: a lock wait past 200 ms fails the test, since a
/// worker must never wait on another's lock.
fn worker_connection(db: &str) -> postgres::Client {
    let mut client = connect(db);
    client.batch_execute("SET lock_timeout = '200ms'").unwrap();
    client
}

/// Register a Stripe-signed provider whose events go to `consumers` (an
/// array literal).
fn register_with_consumers(admin: &mut postgres::Client, provider: &str, consumers: &str) {
    admin
        .execute(
            "SELECT webhook_register_provider($1, scheme => 'stripe', secret => 'whsec_' || $1,
                                              consumers => $2::text::text[])",
            &[&provider, &consumers],
        )
        .unwrap();
}

#[test]
fn eight_workers_drain_twenty_thousand_events_while_deliveries_keep_arriving() {
    let db = database(DB);
    let mut admin = connect(db);
    enqueue_many(&mut admin, "drain", "evt_", 20_000);

    // Every (event) handed out by webhook_next, and to which worker: with
    // leases far longer than the run, each must be handed out exactly once.
    let handed_out: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    let producing = Arc::new(AtomicBool::new(true));
    let started = Instant::now();

    // Two producers: 2,000 new events, each followed by a duplicate.
    let producers: Vec<_> = (0..2)
        .map(|p| {
            std::thread::spawn(move || {
                let mut client = connect(db);
                for i in 0..1_000 {
                    let event_id = format!("late_{p}_{i}");
                    for expected in ["queued", "duplicate"] {
                        let status: String = client
                            .query_one(
                                "SELECT status FROM webhook_enqueue('drain', $1, 'invoice.paid', '{\"late\": true}'::jsonb)",
                                &[&event_id],
                            )
                            .unwrap()
                            .get(0);
                        assert_eq!(status, expected, "{event_id}");
                    }
                }
            })
        })
        .collect();

    let workers: Vec<_> = (0..8)
        .map(|w| {
            let (handed_out, producing) = (Arc::clone(&handed_out), Arc::clone(&producing));
            std::thread::spawn(move || {
                let mut client = worker_connection(db);
                loop {
                    let done = work_once(&mut client, "drain", "default", 20)
                        .unwrap_or_else(|e| panic!("worker {w}: {}", message(&e)));
                    if done.is_empty() {
                        if !producing.load(Ordering::SeqCst) {
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    let mut seen = handed_out.lock().unwrap();
                    for event_id in done {
                        if let Some(other) = seen.insert(event_id.clone(), w) {
                            panic!("{event_id} was leased to worker {other} and to worker {w}");
                        }
                    }
                }
            })
        })
        .collect();

    for p in producers {
        p.join().expect("producer");
    }
    producing.store(false, Ordering::SeqCst);
    for w in workers {
        w.join().expect("worker");
    }
    eprintln!(
        "8 workers drained 22,000 events in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    assert_eq!(handed_out.lock().unwrap().len(), 22_000);
    assert_eq!(unfinished(&mut admin, "drain"), 0);
    let row = admin
        .query_one(
            "SELECT count(DISTINCT event_id), count(*) FROM side_effects WHERE provider = 'drain'",
            &[],
        )
        .unwrap();
    assert_eq!(
        (row.get::<_, i64>(0), row.get::<_, i64>(1)),
        (22_000, 22_000),
        "each event's side effect exactly once"
    );
    let spread: i64 = admin
        .query_one(
            "SELECT count(DISTINCT event_id) FROM webhook.events WHERE provider = 'drain' AND status = 'queued'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(spread, 22_000, "dedup: one event row each");
}

#[test]
fn workers_that_roll_back_leave_nothing_behind_for_the_others() {
    // Each worker's pick starts where its last one did, past the entries
    // its leases left; a batch another worker rolls back is ready again
    // before that point. Every worker stops at its first empty answer, so
    // an event passed over there would stay queued. Half the workers serve
    // the provider, half every provider of their consumer.
    let db = database(DB);
    let mut admin = connect(db);
    register_with_consumers(&mut admin, "rollback", "{rollback_worker}");
    enqueue_many(&mut admin, "rollback", "rb_", 6_000);
    let workers: Vec<_> = (0..4)
        .map(|w| {
            std::thread::spawn(move || {
                let mut client = worker_connection(db);
                let provider = (w % 2 == 0).then_some("rollback");
                let (mut batches, mut rolled_back) = (0, 0);
                loop {
                    let mut tx = client.transaction().unwrap();
                    let leased: Vec<(String, String)> = tx
                        .query(
                            "SELECT id::text, event_id FROM webhook_next(10, 'rollback_worker', $1)",
                            &[&provider],
                        )
                        .unwrap()
                        .iter()
                        .map(|row| (row.get(0), row.get(1)))
                        .collect();
                    if leased.is_empty() {
                        break;
                    }
                    batches += 1;
                    if batches % 4 == 0 {
                        // A worker that dies before it commits.
                        tx.rollback().unwrap();
                        rolled_back += 1;
                        continue;
                    }
                    let (ids, events): (Vec<String>, Vec<String>) = leased.into_iter().unzip();
                    tx.execute(
                        "INSERT INTO side_effects (provider, event_id) SELECT 'rollback', unnest($1::text[])",
                        &[&events],
                    )
                    .unwrap();
                    tx.execute("SELECT webhook_complete_batch($1::text[]::uuid[])", &[&ids])
                        .unwrap();
                    tx.commit().unwrap();
                }
                rolled_back
            })
        })
        .collect();
    let rolled_back: i32 = workers.into_iter().map(|w| w.join().expect("worker")).sum();
    assert!(rolled_back > 50, "{rolled_back} batches rolled back");
    assert_eq!(unfinished(&mut admin, "rollback"), 0);
    let row = admin
        .query_one(
            "SELECT count(DISTINCT event_id), count(*) FROM side_effects WHERE provider = 'rollback'",
            &[],
        )
        .unwrap();
    assert_eq!(
        (row.get::<_, i64>(0), row.get::<_, i64>(1)),
        (6_000, 6_000),
        "each event's side effect exactly once"
    );
}

#[test]
fn a_batch_rolled_back_behind_a_workers_picks_is_leased_by_its_next_call() {
    // A worker holds the ten oldest events and dies (its transaction rolls
    // back) after another has drained everything else, in full batches:
    // the ten are ready again before where the drainer's picks start. Its
    // next call must lease them, not answer "none".
    let db = database(DB);
    let mut admin = connect(db);
    register_with_consumers(&mut admin, "behind", "{behind_worker}");
    for (round, provider) in [Some("behind"), None].into_iter().enumerate() {
        enqueue_many(&mut admin, "behind", &format!("bh{round}_"), 1_010);
        let mut dying = worker_connection(db);
        let mut dying_tx = dying.transaction().unwrap();
        let held = dying_tx
            .query(
                "SELECT id FROM webhook_next(10, 'behind_worker', $1)",
                &[&provider],
            )
            .unwrap();
        assert_eq!(held.len(), 10);
        let mut drainer = worker_connection(db);
        for _ in 0..100 {
            let done = work_once_of(&mut drainer, provider, "behind_worker", 10).unwrap();
            assert_eq!(done.len(), 10);
        }
        dying_tx.rollback().unwrap();
        let done = work_once_of(&mut drainer, provider, "behind_worker", 10).unwrap();
        assert_eq!(done.len(), 10, "{provider:?}: the rolled-back batch");
        assert_eq!(unfinished(&mut admin, "behind"), 0);
    }
}

#[test]
fn consumers_each_process_each_event_once_and_one_failing_holds_no_one_back() {
    let db = database(DB);
    let mut admin = connect(db);
    register_with_consumers(&mut admin, "multi", "{billing,analytics}");
    enqueue_many(&mut admin, "multi", "m_", 300);

    // Billing is down: every attempt fails and is retried at once.
    let billing_down = std::thread::spawn(move || {
        let mut client = worker_connection(db);
        for _ in 0..3 {
            loop {
                let leased = client
                    .query(
                        "SELECT id::text FROM webhook_next(50, 'billing', 'multi')",
                        &[],
                    )
                    .unwrap();
                if leased.is_empty() {
                    break;
                }
                for row in leased {
                    let lease: String = row.get(0);
                    client
                        .execute(
                            "SELECT webhook_fail($1::text::uuid, 'billing API 503', retry_in => '1 hour')",
                            &[&lease],
                        )
                        .unwrap();
                }
            }
        }
    });
    // Analytics drains everything meanwhile.
    let mut analytics = worker_connection(db);
    while !work_once(&mut analytics, "multi", "analytics", 50)
        .unwrap()
        .is_empty()
    {}
    billing_down.join().unwrap();

    let state = |client: &mut postgres::Client, consumer: &str| -> (i64, i64) {
        let row = client
            .query_one(
                "SELECT count(*) FILTER (WHERE status = 'processed'), count(*) FILTER (WHERE status = 'ready')
                   FROM webhook.inbox WHERE provider = 'multi' AND consumer = $1",
                &[&consumer],
            )
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert_eq!(state(&mut admin, "analytics"), (300, 0));
    assert_eq!(state(&mut admin, "billing"), (0, 300), "backing off");

    // Billing recovers: its events become due, and it processes each once.
    admin
        .batch_execute(
            "UPDATE webhook.inbox SET run_at = clock_timestamp() WHERE consumer = 'billing'",
        )
        .unwrap();
    let mut billing = worker_connection(db);
    while !work_once(&mut billing, "multi", "billing", 50)
        .unwrap()
        .is_empty()
    {}
    assert_eq!(state(&mut admin, "billing"), (300, 0));
    let per_event: i64 = admin
        .query_one(
            "SELECT count(*) FROM (SELECT event_id FROM side_effects WHERE provider = 'multi'
                                    GROUP BY event_id HAVING count(*) <> 2) odd",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(per_event, 0, "one side effect per event and consumer");
    let attempts: i64 = admin
        .query_one(
            "SELECT max(attempts) FROM webhook.inbox WHERE provider = 'multi' AND consumer = 'analytics'",
            &[],
        )
        .unwrap()
        .get::<_, i32>(0)
        .into();
    assert_eq!(attempts, 1, "billing's failures cost analytics nothing");
}

/// A failing event is leased again at the times the backoff formula gives
/// (checked against it with a real clock), then dead after max_attempts;
/// a requeue brings it back once.
#[test]
fn a_failing_event_is_retried_at_its_scheduled_times_then_dead_then_requeued_once() {
    let db = database(DB);
    let mut admin = connect(db);
    admin
        .execute(
            "SELECT webhook_enqueue('backoff', 'evt_backoff', 'invoice.paid', '{}'::jsonb)",
            &[],
        )
        .unwrap();
    let mut worker = worker_connection(db);
    worker
        .batch_execute(
            "SET webhook.backoff_base = '200ms'; SET webhook.backoff_max = '700ms';
             SET webhook.max_attempts = 4",
        )
        .unwrap();
    let lease_now = |worker: &mut postgres::Client| -> Option<(String, i32)> {
        worker
            .query_opt(
                "SELECT id::text, attempts FROM webhook_next(1, 'default', 'backoff')",
                &[],
            )
            .unwrap()
            .map(|r| (r.get(0), r.get(1)))
    };
    let mut failed_at = Instant::now();
    let poll = Duration::from_millis(5);
    for attempt in 1..=4 {
        let (lease, attempts) = loop {
            if let Some(leased) = lease_now(&mut worker) {
                break leased;
            }
            assert!(
                failed_at.elapsed() < Duration::from_secs(5),
                "never retried"
            );
            std::thread::sleep(poll);
        };
        let waited = failed_at.elapsed();
        assert_eq!(attempts, attempt);
        if attempt > 1 {
            // Formula: min(700 ms, 200 ms * 2^(n-1)) less up to a quarter.
            let full = (200u64 << (attempt - 2)).min(700) as f64 / 1000.0;
            let waited = waited.as_secs_f64();
            assert!(
                waited >= full * 0.75 - 0.01 && waited <= full + 0.5,
                "attempt {attempt} came {waited:.3} s after the failure; the formula says {full} s less up to 25%"
            );
        }
        worker
            .execute(
                "SELECT webhook_fail($1::text::uuid, 'still down')",
                &[&lease],
            )
            .unwrap();
        failed_at = Instant::now();
    }
    std::thread::sleep(Duration::from_millis(800));
    assert!(lease_now(&mut worker).is_none(), "dead, not retried");
    let dead: i64 = admin
        .query_one(
            "SELECT count(*) FROM webhook.dead_letters WHERE event_id = 'evt_backoff' AND attempts = 4",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(dead, 1);

    admin
        .execute("SELECT webhook_requeue('backoff', 'evt_backoff')", &[])
        .unwrap();
    let (lease, attempts) = lease_now(&mut worker).expect("requeued: ready at once");
    assert_eq!(attempts, 1);
    worker
        .execute("SELECT webhook_complete($1::text::uuid)", &[&lease])
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert!(lease_now(&mut worker).is_none(), "once");
}

/// GitHub never redelivers by itself: in inbox mode every genuine delivery
/// is answered 2xx — new, duplicate, concurrent duplicate, after a failed
/// attempt — and only forgeries are refused.
#[test]
fn github_deliveries_in_inbox_mode_always_get_a_2xx_unless_rejected() {
    let db = database(DB);
    let mut admin = connect(db);
    admin
        .batch_execute("SELECT webhook_register_provider('github', secret => 'gh-inbox')")
        .unwrap();
    let answers: Arc<Mutex<Vec<(String, i32)>>> = Arc::default();
    let senders: Vec<_> = (0..6)
        .map(|t| {
            let answers = Arc::clone(&answers);
            std::thread::spawn(move || {
                let mut client = connect(db);
                for i in 0..150 {
                    // Every thread sends the same 150 deliveries, in a
                    // different order: concurrent duplicates galore.
                    let n = (i * 7 + t * 31) % 150;
                    let delivery = format!("gh-{n}");
                    let body = format!(r#"{{"n": {n}}}"#);
                    let secret = if i % 10 == 9 { "forged" } else { "gh-inbox" };
                    let headers = sign::github(&delivery, "push", &body, secret);
                    let row = client
                        .query_one(
                            "SELECT status, http_status FROM webhook_receive('github', $1::text::jsonb, $2::bytea)",
                            &[&headers.to_string(), &body.as_bytes()],
                        )
                        .unwrap();
                    answers.lock().unwrap().push((
                        format!("{}/{}", if secret == "forged" { "forged" } else { "genuine" }, row.get::<_, String>(0)),
                        row.get(1),
                    ));
                }
            })
        })
        .collect();
    for s in senders {
        s.join().unwrap();
    }
    let answers = answers.lock().unwrap();
    for (what, http_status) in answers.iter() {
        match what.as_str() {
            "genuine/queued" | "genuine/duplicate" => assert_eq!(*http_status, 200, "{what}"),
            "forged/rejected" => assert_eq!(*http_status, 401),
            other => panic!("unexpected answer {other} ({http_status})"),
        }
    }
    let queued = answers
        .iter()
        .filter(|(w, _)| w == "genuine/queued")
        .count();
    assert_eq!(queued, 150, "each delivery queued exactly once");
}

/// Queueing wakes listening workers with one notification per
/// transaction, without a payload; `webhook.inbox_notify = off` sends none.
#[test]
fn queueing_notifies_listeners_once_per_transaction() {
    // A database of its own: notifications are per database, and the other
    // tests here queue events all the time.
    let db = "pgwi_inbox_notify";
    empty_database(db)
        .batch_execute("CREATE EXTENSION pg_webhook_inbox")
        .unwrap();
    let mut listener = connect(db);
    listener.batch_execute("LISTEN webhook_inbox").unwrap();
    let mut producer = connect(db);
    let heard = |listener: &mut postgres::Client| -> Vec<String> {
        use postgres::fallible_iterator::FallibleIterator;
        listener
            .notifications()
            .timeout_iter(Duration::from_millis(500))
            .map(|n| Ok(format!("{}:{}", n.channel(), n.payload())))
            .collect()
            .unwrap()
    };
    // Fifty events in one transaction: one wake-up, no payload.
    enqueue_many(&mut producer, "notify", "batch_", 50);
    assert_eq!(heard(&mut listener), ["webhook_inbox:"]);
    // Three transactions: three.
    for i in 0..3 {
        producer
            .execute(
                "SELECT webhook_enqueue('notify', $1, 't', '{}'::jsonb)",
                &[&format!("single_{i}")],
            )
            .unwrap();
    }
    assert_eq!(heard(&mut listener).len(), 3);
    // A duplicate queues nothing and wakes no one.
    producer
        .execute(
            "SELECT webhook_enqueue('notify', 'single_0', 't', '{}'::jsonb)",
            &[],
        )
        .unwrap();
    assert!(heard(&mut listener).is_empty());
    producer
        .batch_execute(
            "SET webhook.inbox_notify = off;
             SELECT webhook_enqueue('notify', 'quiet', 't', '{}'::jsonb);",
        )
        .unwrap();
    assert!(heard(&mut listener).is_empty());
    // A requeue makes an event ready at once: it wakes workers too.
    producer
        .batch_execute(
            "RESET webhook.inbox_notify;
             SELECT webhook_fail(id, 'no', permanent => true) FROM webhook_next(1, provider => 'notify');
             SELECT webhook_requeue_dead(provider => 'notify');",
        )
        .unwrap();
    assert_eq!(heard(&mut listener).len(), 1);
}

/// A duplicate that arrives while the first delivery's transaction is still
/// open waits for it. If the first rolls back (the receiver crashed after
/// queueing, before committing), the duplicate is the one stored and
/// queued; had it been acknowledged as a duplicate at once, the event would
/// be lost. If the first commits, the duplicate is a duplicate.
#[test]
fn a_duplicate_waits_for_the_first_delivery_and_is_queued_if_the_first_rolls_back() {
    let db = database(DB);
    let mut admin = connect(db);
    admin
        .batch_execute(
            "SELECT webhook_register_provider('github-halfway', scheme => 'github', secret => 'gh-halfway')",
        )
        .unwrap();
    for (delivery, first_commits, second_expected) in [
        ("halfway-rolled-back", false, "queued"),
        ("halfway-committed", true, "duplicate"),
    ] {
        let body = format!(r#"{{"delivery": "{delivery}"}}"#);
        let headers = sign::github(delivery, "push", &body, "gh-halfway").to_string();
        let receive =
            "SELECT status FROM webhook_receive('github-halfway', $1::text::jsonb, $2::bytea)";
        let mut first = connect(db);
        let mut tx = first.transaction().unwrap();
        let status: String = tx
            .query_one(receive, &[&headers, &body.as_bytes()])
            .unwrap()
            .get(0);
        assert_eq!(status, "queued");

        let (headers2, body2) = (headers.clone(), body.clone());
        let second = std::thread::spawn(move || {
            let mut client = connect(db);
            let row = client
                .query_one(receive, &[&headers2, &body2.as_bytes()])
                .unwrap();
            row.get::<_, String>(0)
        });
        // The second is waiting on the first's transaction.
        wait_for("the duplicate to wait", || {
            let waiting: i64 = admin
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'
                      AND query LIKE '%webhook_receive(''github-halfway''%'",
                    &[],
                )
                .unwrap()
                .get(0);
            waiting == 1
        });
        if first_commits {
            tx.commit().unwrap();
        } else {
            tx.rollback().unwrap();
        }
        assert_eq!(second.join().unwrap(), second_expected, "{delivery}");
        let queued: i64 = admin
            .query_one(
                "SELECT count(*) FROM webhook.inbox WHERE provider = 'github-halfway' AND event_id = $1",
                &[&delivery],
            )
            .unwrap()
            .get(0);
        assert_eq!(queued, 1, "{delivery}: queued exactly once");
    }
}

/// A backfill in one transaction: each queued event holds its lock until
/// commit, so past the transaction's share of the lock table the next
/// `webhook_enqueue` is refused up front (54000, saying what to do), never
/// "out of shared memory" half way through. `webhook_enqueue_batches`
/// queues any number, committing as it goes, as an application role.
#[test]
fn a_backfill_past_the_lock_budget_is_refused_up_front_and_batches_queue_any_number() {
    let db = database(DB);
    let mut admin = connect(db);
    admin
        .batch_execute("SELECT webhook_register_provider('backfill', scheme => 'stripe')")
        .unwrap();
    const EVENTS: i32 = 12_000;
    let err = admin
        .query_one(
            "SELECT count(*) FROM generate_series(1, $1) g,
                    LATERAL webhook_enqueue('backfill', 'evt_fill_' || g, 't', '{}'::jsonb) e",
            &[&EVENTS],
        )
        .unwrap_err();
    assert_eq!(sql_state(&err), Some("54000"), "{}", message(&err));
    assert!(
        message(&err).contains("as many as the lock table allows"),
        "{}",
        message(&err)
    );
    assert!(
        err.as_db_error()
            .and_then(|e| e.hint())
            .is_some_and(|h| h.contains("webhook_enqueue_batches")),
        "{err:?}"
    );
    assert_eq!(
        count(
            &mut admin,
            "SELECT count(*) FROM webhook.inbox WHERE provider = 'backfill'"
        ),
        0,
        "nothing half-written"
    );

    let _setup = one_at_a_time();
    ensure_role(&mut admin, "webhook_backfill", true);
    admin
        .batch_execute("SELECT webhook_grant_app('webhook_backfill')")
        .unwrap();
    drop(_setup);
    let mut app = connect_as(db, "webhook_backfill");
    let events = serde_json::Value::from(
        (1..=EVENTS)
            .map(|n| serde_json::json!({ "event_id": format!("evt_fill_{n}"), "event_type": "t", "payload": { "n": n } }))
            .collect::<Vec<_>>(),
    )
    .to_string();
    let queued: i64 = app
        .query_one(
            "CALL webhook_enqueue_batches('backfill', $1::text::jsonb, batch_size => 2000)",
            &[&events],
        )
        .unwrap()
        .get(0);
    assert_eq!(queued, i64::from(EVENTS));
    assert_eq!(
        count(
            &mut admin,
            "SELECT count(*) FROM webhook.inbox WHERE provider = 'backfill'"
        ),
        i64::from(EVENTS)
    );
    // Again: every event a duplicate, none queued twice.
    let queued: i64 = app
        .query_one(
            "CALL webhook_enqueue_batches('backfill', $1::text::jsonb)",
            &[&events],
        )
        .unwrap()
        .get(0);
    assert_eq!(queued, 0);
    // Inside a transaction block it cannot commit, and says so.
    let mut tx = app.transaction().unwrap();
    let err = tx
        .query_one(
            "CALL webhook_enqueue_batches('backfill', '[{\"event_id\": \"x\", \"event_type\": \"t\", \"payload\": {}}]', batch_size => 1)",
            &[],
        )
        .unwrap_err();
    assert_eq!(sql_state(&err), Some("2D000"), "{}", message(&err));
}
