//! The inbox when things die: a worker killed with SIGKILL mid-event, a
//! worker's backend terminated, and the server stopped with `-m immediate`
//! while thousands of events are queued. After each, every event is
//! processed and none twice in the database. And ordering's watermarks
//! across a crash: committed ones survive, one moved by a transaction the
//! crash cut off never happened.
//!
//! Part of the hardening suite (`make hardening`): one scenario stops the
//! server, and the figures join the hardening report.
#![cfg(feature = "client-tests")]

mod common;
use common::*;
use postgres::Client;
use std::io::Write;
use std::time::{Duration, Instant};

const DB: &str = "pgwi_inbox_crashes";

/// Drain `provider`'s events with one worker until none is left, waiting
/// for leases that have yet to run out. Returns how many it processed.
fn drain(db: &str, provider: &str) -> usize {
    let mut client = connect(db);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut processed = 0;
    while unfinished(&mut client, provider) > 0 {
        assert!(Instant::now() < deadline, "{provider}: not drained in time");
        let done = work_once(&mut client, provider, "default", 50).unwrap();
        if done.is_empty() {
            std::thread::sleep(Duration::from_millis(50));
        }
        processed += done.len();
    }
    processed
}

/// Wait until the backend of `application_name` is asleep mid-event.
fn mid_event(client: &mut Client, application_name: &str) {
    wait_for("the worker to be mid-event", || {
        let sleeping: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_stat_activity
                  WHERE application_name = $1 AND query LIKE 'SELECT pg_sleep%'",
                &[&application_name],
            )
            .unwrap()
            .get(0);
        sleeping == 1
    });
}

/// Wait until no backend of `application_name` is left.
fn gone(client: &mut Client, application_name: &str) {
    wait_for(application_name, || {
        let left: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
                &[&application_name],
            )
            .unwrap()
            .get(0);
        left == 0
    });
}

#[test]
fn a_worker_killed_with_sigkill_mid_event() {
    let _turn = one_at_a_time();
    let db = database(DB);
    let scenario = Scenario::start("inbox: worker killed with SIGKILL mid-event", "inbox_kill");
    let mut admin = connect(db);
    enqueue_many(&mut admin, "inbox_kill", "evt_", 50);
    scenario.sent(50);

    // A worker process in the two-phase pattern: its lease is committed,
    // then it works in a transaction of its own, and dies in the middle.
    let psql = format!(
        "{}/psql",
        std::env::var("PG_BINDIR").expect("PG_BINDIR (make hardening)")
    );
    let mut worker = std::process::Command::new(psql)
        .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", db])
        .env("PGAPPNAME", "killed-worker")
        // The backend notices its client is gone within 100 ms.
        .env("PGOPTIONS", "-c client_connection_check_interval=100ms")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("start psql");
    worker
        .stdin
        .as_mut()
        .unwrap()
        .write_all(
            b"SELECT id AS lease, event_id FROM webhook_next(1, 'default', 'inbox_kill', lease => '1 s') \\gset
              BEGIN;
              INSERT INTO side_effects (provider, event_id) VALUES ('inbox_kill', :'event_id');
              SELECT pg_sleep(60);
              SELECT webhook_complete(:'lease');
              COMMIT;
",
        )
        .unwrap();
    mid_event(&mut admin, "killed-worker");
    let leased: i64 = admin
        .query_one(
            "SELECT count(*) FROM webhook.inbox WHERE provider = 'inbox_kill' AND status = 'leased'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(leased, 1);
    // SIGKILL: no goodbye to the server.
    worker.kill().unwrap();
    worker.wait().unwrap();
    gone(&mut admin, "killed-worker");

    assert_eq!(
        drain(db, "inbox_kill"),
        50,
        "the killed worker's event came back"
    );
    let attempts: i32 = admin
        .query_one(
            "SELECT max(attempts) FROM webhook.inbox WHERE provider = 'inbox_kill'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(attempts, 2, "the lost attempt counts");
    scenario.finish(&mut admin, 50);
}

#[test]
fn a_workers_backend_terminated_mid_event() {
    let _turn = one_at_a_time();
    let db = database(DB);
    let scenario = Scenario::start("inbox: backend terminated mid-event", "inbox_term");
    let mut admin = connect(db);
    enqueue_many(&mut admin, "inbox_term", "evt_", 50);
    scenario.sent(50);

    // One transaction: lease five, write their side effects, then hang.
    let worker = std::thread::spawn(move || {
        let mut client = connect(db);
        client
            .batch_execute("SET application_name = 'terminated-worker'")
            .unwrap();
        let mut tx = client.transaction().unwrap();
        for row in tx
            .query(
                "SELECT event_id FROM webhook_next(5, 'default', 'inbox_term')",
                &[],
            )
            .unwrap()
        {
            let event_id: String = row.get(0);
            tx.execute(
                "INSERT INTO side_effects (provider, event_id) VALUES ('inbox_term', $1)",
                &[&event_id],
            )
            .unwrap();
        }
        tx.batch_execute("SELECT pg_sleep(60)").unwrap_err()
    });
    mid_event(&mut admin, "terminated-worker");
    admin
        .batch_execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
              WHERE application_name = 'terminated-worker'",
        )
        .unwrap();
    let err = worker.join().unwrap();
    // The FATAL message, or only the closed connection if the server's
    // goodbye was not read first.
    assert!(
        sql_state(&err) == Some("57P01") || err.is_closed(),
        "terminated: {err}"
    );
    gone(&mut admin, "terminated-worker");

    assert_eq!(drain(db, "inbox_term"), 50);
    let attempts: i32 = admin
        .query_one(
            "SELECT max(attempts) FROM webhook.inbox WHERE provider = 'inbox_term'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        attempts, 1,
        "a lease rolled back with its transaction costs no attempt"
    );
    scenario.finish(&mut admin, 50);
}

#[test]
fn the_server_stopped_with_five_thousand_events_queued() {
    let _turn = one_at_a_time();
    let db = database(DB);
    let scenario = Scenario::start("inbox: server crash with 5,000 queued", "inbox_crash");
    let mut admin = connect(db);
    enqueue_many(&mut admin, "inbox_crash", "evt_", 5_000);
    scenario.sent(5_000);
    drop(admin);

    let processed = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let processed = std::sync::Arc::clone(&processed);
            std::thread::spawn(move || {
                let mut client: Option<Client> = None;
                let deadline = Instant::now() + Duration::from_secs(120);
                let mut cut_off = 0;
                loop {
                    assert!(Instant::now() < deadline, "not drained in time");
                    let conn = match &mut client {
                        Some(c) => c,
                        None => match try_connect(db) {
                            Ok(c) => client.insert(c),
                            Err(_) => {
                                std::thread::sleep(Duration::from_millis(100));
                                continue;
                            }
                        },
                    };
                    match work_once(conn, "inbox_crash", "default", 10) {
                        Ok(done) if done.is_empty() => {
                            if unfinished(conn, "inbox_crash") == 0 {
                                return cut_off;
                            }
                            std::thread::sleep(Duration::from_millis(20));
                        }
                        Ok(done) => {
                            processed.fetch_add(done.len(), std::sync::atomic::Ordering::SeqCst);
                        }
                        // The crash: whatever was in flight rolled back.
                        Err(_) => {
                            cut_off += 1;
                            client = None;
                        }
                    }
                }
            })
        })
        .collect();

    wait_for("a thousand events processed", || {
        processed.load(std::sync::atomic::Ordering::SeqCst) >= 1_000
    });
    crash_server();
    std::thread::sleep(Duration::from_millis(300));
    start_server();
    let cut_off: usize = workers.into_iter().map(|w| w.join().expect("worker")).sum();
    assert!(cut_off > 0, "the crash cut workers off mid-transaction");

    let mut admin = connect(db);
    assert_eq!(unfinished(&mut admin, "inbox_crash"), 0);
    scenario.finish(&mut admin, 5_000);
}

#[test]
fn watermarks_survive_a_crash_and_never_move_backwards() {
    use common::sign::{now, stripe};
    const SECRET: &str = "whsec_crash";
    let _turn = one_at_a_time();
    let db = database(DB);
    let mut admin = connect(db);
    admin
        .batch_execute(&format!(
            "SELECT webhook_register_provider('ordered_crash', scheme => 'stripe', secret => '{SECRET}',
                                              ordering => true)"
        ))
        .unwrap();
    let receive = |client: &mut Client, id: &str, entity: &str, created: i64| -> (String, String) {
        let body = format!(
            r#"{{"id": "{id}", "type": "customer.subscription.updated", "created": {created}, "data": {{"object": {{"id": "{entity}"}}}}}}"#
        );
        let row = client
            .query_one(
                "SELECT id::text, status FROM webhook_receive('ordered_crash', $1::text::jsonb, $2::text)",
                &[&stripe(&body, now(), SECRET).to_string(), &body],
            )
            .unwrap();
        (row.get(0), row.get(1))
    };
    let watermarks = |client: &mut Client| -> Vec<String> {
        client
            .query(
                "SELECT entity_key || '=' || order_value FROM webhook.watermarks
                  WHERE provider = 'ordered_crash' ORDER BY 1",
                &[],
            )
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect()
    };
    // Twenty entities at order 100, each completed and committed.
    for e in 0..20 {
        let (id, status) = receive(
            &mut admin,
            &format!("evt_{e}_100"),
            &format!("sub_{e}"),
            100,
        );
        assert_eq!(status, "claimed");
        admin
            .execute("SELECT webhook_complete($1::text::uuid)", &[&id])
            .unwrap();
    }
    let committed = watermarks(&mut admin);
    assert_eq!(committed.len(), 20);

    // A handler completes a newer event of every entity, and the server
    // dies before it commits.
    let mut handler = connect(db);
    handler.batch_execute("BEGIN").unwrap();
    for e in 0..20 {
        let (id, status) = receive(
            &mut handler,
            &format!("evt_{e}_200"),
            &format!("sub_{e}"),
            200,
        );
        assert_eq!(status, "claimed");
        handler
            .execute("SELECT webhook_complete($1::text::uuid)", &[&id])
            .unwrap();
    }
    drop(admin);
    crash_server();
    std::thread::sleep(Duration::from_millis(300));
    start_server();
    let _ = handler.batch_execute("COMMIT").unwrap_err();

    let mut admin = connect(db);
    assert_eq!(
        watermarks(&mut admin),
        committed,
        "the cut-off moves never happened"
    );
    // An older event is stale against what survived; the newer one, never
    // committed, is claimed again, and moves the watermark when it commits.
    assert_eq!(receive(&mut admin, "evt_0_50", "sub_0", 50).1, "stale");
    let (id, status) = receive(&mut admin, "evt_0_200", "sub_0", 200);
    assert_eq!(status, "claimed");
    admin
        .execute("SELECT webhook_complete($1::text::uuid)", &[&id])
        .unwrap();
    assert_eq!(watermarks(&mut admin)[0], "sub_0=200");
}

/// One worker of a replay under crashes: lease, write the effect with the
/// replay webhook_next names, complete, commit; reconnect after the server
/// went away. Returns once `finished` says the replay is done.
fn replay_worker(db: &'static str, consumer: &'static str) -> usize {
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut applied = 0;
    let mut client: Option<Client> = None;
    loop {
        assert!(
            Instant::now() < deadline,
            "{consumer}: the replay did not finish"
        );
        let c = match client.as_mut() {
            Some(c) => c,
            None => match try_connect(db) {
                Ok(c) => client.insert(c),
                Err(_) => {
                    std::thread::sleep(Duration::from_millis(100));
                    continue;
                }
            },
        };
        let round = (|| -> Result<usize, postgres::Error> {
            let mut tx = c.transaction()?;
            let leased = tx.query(
                "SELECT id::text, event_id, replay_id::text
                   FROM webhook_next(10, $1, 'crash_replay', lease => interval '2 seconds')",
                &[&consumer],
            )?;
            for row in &leased {
                let (lease, event_id, replay): (String, String, Option<String>) =
                    (row.get(0), row.get(1), row.get(2));
                tx.execute(
                    "INSERT INTO crash_replay_effects VALUES ($1::text::uuid, $2, $3)",
                    &[&replay, &consumer, &event_id],
                )?;
                tx.execute("SELECT webhook_complete($1::text::uuid)", &[&lease])?;
            }
            tx.commit()?;
            Ok(leased.len())
        })();
        match round {
            Ok(0) => {
                let finished: bool = match c.query_one(
                    "SELECT state = 'finished' FROM webhook.replay_progress
                      WHERE filter->>'provider' = 'crash_replay'",
                    &[],
                ) {
                    Ok(row) => row.get(0),
                    Err(_) => {
                        client = None;
                        continue;
                    }
                };
                if finished {
                    return applied;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            Ok(n) => applied += n,
            Err(_) => {
                client = None;
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

#[test]
fn a_replay_cut_by_a_crash_and_resumed_applies_each_event_once_per_consumer() {
    let _turn = one_at_a_time();
    let db = database(DB);
    let mut admin = connect(db);
    admin
        .batch_execute(
            "SELECT webhook_register_provider('crash_replay', scheme => 'stripe', secret => 'whsec_crash',
                                              consumers => ARRAY['billing', 'analytics']);
             CREATE TABLE crash_replay_effects (replay_id uuid, consumer text, event_id text);",
        )
        .unwrap();
    enqueue_many(&mut admin, "crash_replay", "evt_", 2000);
    for consumer in ["billing", "analytics"] {
        loop {
            let done = admin
                .execute(
                    "SELECT webhook_complete_batch(array_agg(id)) FROM webhook_next(1000, $1, 'crash_replay')
                     HAVING count(*) > 0",
                    &[&consumer],
                )
                .unwrap();
            if done == 0 {
                break;
            }
        }
    }
    // Every event again for both consumers, 4000 at 800 a second.
    let start = "SELECT replay_id::text, started, events FROM webhook_replay('crash_replay',
                        reason => 'ledger rebuilt', rate => 800, dry_run => false)";
    let row = admin.query_one(start, &[]).unwrap();
    let (replay, started, events): (String, bool, i64) = (row.get(0), row.get(1), row.get(2));
    assert!(started);
    assert_eq!(events, 4000);
    drop(admin);

    let workers: Vec<_> = ["billing", "billing", "analytics", "analytics"]
        .into_iter()
        .map(|consumer| std::thread::spawn(move || replay_worker(db, consumer)))
        .collect();
    // Mid-replay, the power goes.
    let mut watcher = connect(db);
    wait_for("the replay to be under way", || {
        count(&mut watcher, "SELECT count(*) FROM crash_replay_effects") >= 800
    });
    drop(watcher);
    crash_server();
    std::thread::sleep(Duration::from_millis(300));
    start_server();

    // The operator, unsure whether it ran, starts it again: the same
    // replay, nothing queued twice.
    let mut admin = connect(db);
    let row = admin.query_one(start, &[]).unwrap();
    let again: (String, bool, i64) = (row.get(0), row.get(1), row.get(2));
    assert_eq!(again, (replay.clone(), false, 4000));

    let applied: usize = workers.into_iter().map(|w| w.join().unwrap()).sum();
    let per_consumer: Vec<(String, i64, i64)> = admin
        .query(
            "SELECT consumer, count(*), count(DISTINCT event_id) FROM crash_replay_effects
              WHERE replay_id = $1::text::uuid GROUP BY consumer ORDER BY consumer",
            &[&replay],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(
        per_consumer,
        vec![
            ("analytics".into(), 2000, 2000),
            ("billing".into(), 2000, 2000)
        ],
        "each event once per consumer, none twice, none lost"
    );
    assert!(
        applied >= 4000 - 40,
        "the workers' own count, less what the crash cut off: {applied}"
    );
    assert_eq!(
        count(
            &mut admin,
            "SELECT count(*) FROM crash_replay_effects WHERE replay_id IS NULL"
        ),
        0
    );
}
