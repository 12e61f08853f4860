//! The hardening suite: each failure mode webhook handlers are known to
//! hit, staged against a real server, with the figures that prove the
//! promise — no duplicated side effect, no lost event, no crashed backend.
//!
//! Run by `make hardening` (part of `make test`), which starts a server of
//! its own: one scenario stops and restarts it. Scenarios take turns.
#![cfg(feature = "client-tests")]

mod common;
use common::*;
use postgres::Client;
use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const DB: &str = "pgwi_hardening";

/// Deterministic pseudo-random numbers (xorshift64), so a failing run can
/// be repeated exactly.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            v.swap(i, self.below(i as u64 + 1) as usize);
        }
    }
}

/// Scenario 1: The handler commits, and the connection is reset before the client
/// reads the answer. The provider saw no 200 and retries.
#[test]
fn s1_tcp_reset_after_commit() {
    let _turn = one_at_a_time();
    let db = database(DB);
    let scenario = Scenario::start("1 TCP reset after commit", "tcp-reset");
    let mut observer = connect(db);
    let events = 50;
    for i in 0..events {
        let event_id = format!("evt_{i}");
        query_then_reset(
            db,
            &format!("SELECT handle('tcp-reset', '{event_id}')"),
            || {
                wait_for("the handler's commit", || {
                    side_effects(&mut observer, "tcp-reset", &event_id) == 1
                })
            },
        );
        scenario.sent(1);
        // The provider retries, twice for good measure: both are duplicates.
        for _ in 0..2 {
            assert_eq!(
                deliver(&mut observer, "tcp-reset", &event_id, Duration::ZERO),
                Answer::Duplicate
            );
            scenario.sent(1);
        }
    }
    scenario.finish(&mut observer, events);
}

/// Scenario 2: The handler's transaction is cut off mid-process: by its own
/// statement_timeout, by a client that cancels its query, and by a client
/// that gives up and closes the connection with the transaction open.
#[test]
fn s2_worker_timeout_mid_process() {
    let _turn = one_at_a_time();
    let db = database(DB);
    let scenario = Scenario::start("2 worker timeout mid-process", "timeout");
    let mut provider = connect(db);
    let events = 30;
    for i in 0..events {
        let event_id = format!("evt_{i}");
        let mut worker = connect(db);
        let mut tx = worker.transaction().unwrap();
        let claim = claim_in(&mut tx, "timeout", &event_id, None).unwrap();
        assert!(claim.claimed);
        tx.execute(
            "INSERT INTO side_effects VALUES ('timeout', $1)",
            &[&event_id],
        )
        .unwrap();
        match i % 3 {
            0 => {
                tx.batch_execute("SET LOCAL statement_timeout = '50ms'")
                    .unwrap();
                let err = tx.batch_execute("SELECT pg_sleep(5)").unwrap_err();
                assert_eq!(sql_state(&err), Some("57014"), "{err}");
                drop(tx);
            }
            1 => {
                let cancel = tx.cancel_token();
                let canceller = std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(50));
                    cancel.cancel_query(postgres::NoTls).unwrap();
                });
                let err = tx.batch_execute("SELECT pg_sleep(5)").unwrap_err();
                assert_eq!(sql_state(&err), Some("57014"), "{err}");
                canceller.join().unwrap();
                drop(tx);
            }
            // The load balancer's timeout: the client walks away with its
            // transaction open, without so much as a ROLLBACK.
            _ => std::mem::forget(tx),
        }
        drop(worker);
        scenario.sent(1);
        // Until the server notices the lost client, retries are answered
        // in_progress; the provider keeps trying.
        scenario.sent(deliver_until_acknowledged(
            &mut provider,
            "timeout",
            &event_id,
        ));
    }
    scenario.finish(&mut provider, events);
}

/// Scenario 3: A deploy mid-webhook: (a) the handler's backend is terminated in the
/// middle of its transaction; (b) in two-phase use, the worker process is
/// killed with SIGTERM or SIGKILL between its committed claim and its
/// completion.
#[test]
fn s3_deploy_mid_webhook() {
    let _turn = one_at_a_time();
    let db = database(DB);
    let scenario = Scenario::start("3 deploy mid-webhook", "deploy");
    let mut admin = connect(db);

    // (a) pg_terminate_backend, one-transaction handlers.
    let terminated = 20;
    for i in 0..terminated {
        let event_id = format!("evt_term_{i}");
        let mut victim = connect(db);
        let pid: i32 = victim
            .query_one("SELECT pg_backend_pid()", &[])
            .unwrap()
            .get(0);
        let mut tx = victim.transaction().unwrap();
        assert!(
            claim_in(&mut tx, "deploy", &event_id, None)
                .unwrap()
                .claimed
        );
        tx.execute(
            "INSERT INTO side_effects VALUES ('deploy', $1)",
            &[&event_id],
        )
        .unwrap();
        let killed: bool = admin
            .query_one("SELECT pg_terminate_backend($1, 5000)", &[&pid])
            .unwrap()
            .get(0);
        assert!(killed);
        assert!(tx.commit().is_err(), "the terminated handler cannot commit");
        scenario.sent(1);
        scenario.sent(deliver_until_acknowledged(&mut admin, "deploy", &event_id));
    }

    // (b) two-phase workers killed as processes.
    let killed_workers = 10;
    let psql = format!(
        "{}/psql",
        std::env::var("PG_BINDIR").unwrap_or_else(|_| "/usr/bin".into())
    );
    for i in 0..killed_workers {
        let event_id = format!("evt_kill_{i}");
        let claim_sql = format!(
            "SELECT id FROM webhook_claim('deploy', '{event_id}', 'invoice.paid', '{{}}'::jsonb, NULL, '1 second')"
        );
        let mut worker = std::process::Command::new(&psql)
            .args([
                "-X",
                "-q",
                "-d",
                db,
                "-c",
                &claim_sql,
                "-c",
                "SELECT pg_sleep(60)",
            ])
            .env("PGOPTIONS", "-c client_connection_check_interval=100")
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("start a psql worker");
        wait_for("the worker's committed claim", || {
            admin
                .query_opt(
                    "SELECT 1 FROM webhook.events WHERE provider = 'deploy' AND event_id = $1",
                    &[&event_id],
                )
                .unwrap()
                .is_some()
        });
        if i % 2 == 0 {
            let pid = worker.id().to_string();
            assert!(std::process::Command::new("kill")
                .args(["-TERM", &pid])
                .status()
                .unwrap()
                .success());
        } else {
            worker.kill().unwrap(); // SIGKILL
        }
        worker.wait().unwrap();
        scenario.sent(1);

        // Deliveries during the lease are in progress; the first after it
        // is a retry, which does the work once.
        let started = Instant::now();
        loop {
            let claim = claim_in(&mut admin, "deploy", &event_id, None).unwrap();
            scenario.sent(1);
            if claim.claimed {
                assert_eq!((claim.status.as_str(), claim.attempts), ("retry", 2));
                admin
                    .execute(
                        "INSERT INTO side_effects VALUES ('deploy', $1)",
                        &[&event_id],
                    )
                    .unwrap();
                admin
                    .execute("SELECT webhook_complete($1::text::uuid)", &[&claim.id])
                    .unwrap();
                break;
            }
            assert_eq!(claim.status, "in_progress");
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "lease never ran out"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let completions: i64 = admin
            .query_one(
                "SELECT count(*) FROM webhook.deliveries
                  WHERE provider = 'deploy' AND event_id = $1 AND processing_status = 'PROCESSED'",
                &[&event_id],
            )
            .unwrap()
            .get(0);
        assert_eq!(completions, 1);
    }
    scenario.finish(&mut admin, terminated + killed_workers);
}

/// Scenario 4: Retry poisoning: a failure injected halfway through the work, then
/// the provider's retry, which must complete the event — never skip it.
#[test]
fn s4_retry_poisoning() {
    let _turn = one_at_a_time();
    let db = database(DB);
    let scenario = Scenario::start("4 retry poisoning", "poison");
    let mut client = connect(db);
    let events = 50;
    for i in 0..events {
        let event_id = format!("evt_{i}");
        if i % 2 == 0 {
            // One transaction, failure recorded behind a savepoint.
            let mut tx = client.transaction().unwrap();
            let claim = claim_in(&mut tx, "poison", &event_id, None).unwrap();
            tx.batch_execute("SAVEPOINT work").unwrap();
            tx.execute(
                "INSERT INTO side_effects VALUES ('poison', $1)",
                &[&event_id],
            )
            .unwrap();
            assert!(tx.batch_execute("SELECT 1 / 0").is_err());
            tx.batch_execute("ROLLBACK TO SAVEPOINT work").unwrap();
            tx.execute(
                "SELECT webhook_fail($1::text::uuid, 'division by zero')",
                &[&claim.id],
            )
            .unwrap();
            tx.commit().unwrap();
        } else {
            // Two phases: the claim committed, the side effect failed.
            let claim = claim_in(&mut client, "poison", &event_id, Some("1 hour")).unwrap();
            client
                .execute(
                    "SELECT webhook_fail($1::text::uuid, 'upstream 503')",
                    &[&claim.id],
                )
                .unwrap();
        }
        scenario.sent(1);
        let retry = deliver(&mut client, "poison", &event_id, Duration::ZERO);
        assert_eq!(
            retry,
            Answer::Done,
            "the retry after a failure does the work"
        );
        scenario.sent(1);
        assert_eq!(
            event_state(&mut client, "poison", &event_id),
            ("processed".into(), 2)
        );
    }
    scenario.finish(&mut client, events);
}

/// Scenario 5: Concurrent duplicates across servers: 16 connections, 2,000 events,
/// each delivered 5 to 10 times in random order and timing. One handler in
/// ten holds its transaction for 100 ms, and every connection has a
/// lock_timeout of 50 ms: a claim that waited behind another transaction
/// would fail the scenario with SQLSTATE 55P03.
#[test]
fn s5_concurrent_duplicates_across_servers() {
    let _turn = one_at_a_time();
    let db = database(DB);
    let scenario = Arc::new(Scenario::start("5 concurrent duplicates", "storm"));
    let (connections, events) = (16, 2000);

    let mut rng = Rng::new(5);
    let mut queue: Vec<usize> = Vec::new();
    for event in 0..events {
        for _ in 0..5 + rng.below(6) {
            queue.push(event);
        }
    }
    rng.shuffle(&mut queue);
    let queue = Arc::new(Mutex::new(VecDeque::from(queue)));

    let workers: Vec<_> = (0..connections)
        .map(|w| {
            let (queue, scenario) = (Arc::clone(&queue), Arc::clone(&scenario));
            std::thread::spawn(move || {
                let mut rng = Rng::new(100 + w as u64);
                let mut client = connect(db);
                client.batch_execute("SET lock_timeout = '50ms'").unwrap();
                let mut slowest = Duration::ZERO;
                loop {
                    let Some(event) = queue.lock().unwrap().pop_front() else {
                        break;
                    };
                    let event_id = format!("evt_{event}");
                    let hold = if rng.below(10) == 0 {
                        Duration::from_millis(100)
                    } else {
                        Duration::from_micros(rng.below(2000))
                    };
                    let started = Instant::now();
                    let answer = try_deliver(&mut client, "storm", &event_id, hold)
                        .unwrap_or_else(|e| panic!("delivery of {event_id}: {e}"));
                    scenario.sent(1);
                    if answer != Answer::Done {
                        slowest = slowest.max(started.elapsed());
                    }
                    if answer == Answer::InProgress {
                        // 409: the provider will deliver it again later.
                        queue.lock().unwrap().push_back(event);
                    }
                    if rng.below(4) == 0 {
                        std::thread::sleep(Duration::from_micros(rng.below(1000)));
                    }
                }
                slowest
            })
        })
        .collect();
    let slowest = workers
        .into_iter()
        .map(|w| w.join().unwrap())
        .max()
        .unwrap();
    eprintln!("slowest claim that did not own its event: {slowest:?}");

    let mut client = connect(db);
    let unfinished: i64 = client
        .query_one("SELECT count(*) FROM webhook.events WHERE provider = 'storm' AND status <> 'processed'", &[])
        .unwrap()
        .get(0);
    assert_eq!(unfinished, 0);
    Arc::try_unwrap(scenario)
        .ok()
        .unwrap()
        .finish(&mut client, events);
}

/// Scenario 6: Server crash: PostgreSQL stopped with `pg_ctl stop -m immediate`
/// while claims and completions are in flight, then restarted. Whatever
/// was acknowledged before the crash survives it; after the providers'
/// retries every event is completed exactly once.
#[test]
fn s6_server_crash() {
    let _turn = one_at_a_time();
    let db = database(DB);
    let scenario = Arc::new(Scenario::start("6 server crash", "crash"));
    let (connections, events, copies) = (8, 400, 3);

    let mut queue: Vec<usize> = (0..events)
        .flat_map(|e| std::iter::repeat_n(e, copies))
        .collect();
    Rng::new(6).shuffle(&mut queue);
    let total = queue.len();
    let queue = Arc::new(Mutex::new(VecDeque::from(queue)));
    let acknowledged = Arc::new(Mutex::new(HashSet::new()));
    let cut_off = Arc::new(std::sync::atomic::AtomicUsize::new(0));

    let workers: Vec<_> = (0..connections)
        .map(|_| {
            let (queue, acknowledged, scenario, cut_off) = (
                Arc::clone(&queue),
                Arc::clone(&acknowledged),
                Arc::clone(&scenario),
                Arc::clone(&cut_off),
            );
            std::thread::spawn(move || {
                let mut client: Option<Client> = None;
                loop {
                    let Some(event) = queue.lock().unwrap().pop_front() else {
                        break;
                    };
                    let event_id = format!("evt_{event}");
                    let conn = match &mut client {
                        Some(c) => c,
                        None => match reconnect(db) {
                            Some(c) => client.insert(c),
                            None => panic!("server did not come back"),
                        },
                    };
                    scenario.sent(1);
                    match try_deliver(conn, "crash", &event_id, Duration::from_millis(2)) {
                        Ok(answer) if answer.acknowledged() => {
                            acknowledged.lock().unwrap().insert(event);
                        }
                        Ok(_) => queue.lock().unwrap().push_back(event),
                        Err(_) => {
                            // Connection lost mid-delivery: no answer, so the provider retries.
                            cut_off.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            client = None;
                            queue.lock().unwrap().push_back(event);
                        }
                    }
                }
            })
        })
        .collect();

    // Crash once about half the deliveries are through.
    wait_for("half the deliveries", || {
        queue.lock().unwrap().len() <= total / 2
    });
    let acknowledged_before = acknowledged.lock().unwrap().clone();
    crash_server();
    std::thread::sleep(Duration::from_millis(300));
    start_server();
    for w in workers {
        w.join().expect("worker");
    }
    assert!(
        !acknowledged_before.is_empty(),
        "work was acknowledged before the crash"
    );
    let cut_off = cut_off.load(std::sync::atomic::Ordering::Relaxed);
    assert!(cut_off > 0, "the crash cut deliveries off mid-flight");
    eprintln!("deliveries cut off by the crash: {cut_off}");

    let mut client = connect(db);
    for event in &acknowledged_before {
        assert_eq!(
            side_effects(&mut client, "crash", &format!("evt_{event}")),
            1,
            "evt_{event} was acknowledged before the crash and must have survived it"
        );
    }
    assert_eq!(
        acknowledged.lock().unwrap().len(),
        events,
        "every event acknowledged in the end"
    );
    Arc::try_unwrap(scenario)
        .ok()
        .unwrap()
        .finish(&mut client, events);
}

fn reconnect(db: &str) -> Option<Client> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if let Ok(client) = try_connect(db) {
            return Some(client);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    None
}

/// Scenario 7: A slow worker whose lease ran out, after another worker reclaimed
/// and completed the event, tries to complete: refused, and its
/// transaction's business writes roll back.
#[test]
fn s7_stale_lease_slow_worker() {
    let _turn = one_at_a_time();
    let db = database(DB);
    let scenario = Scenario::start("7 stale lease, slow worker", "stale");
    let mut slow = connect(db);
    let mut fast = connect(db);
    let events = 20;
    for i in 0..events {
        let event_id = format!("evt_{i}");
        let claim = claim_in(&mut slow, "stale", &event_id, Some("100 milliseconds")).unwrap();
        assert!(claim.claimed);
        scenario.sent(1);
        let mut tx = slow.transaction().unwrap();
        tx.execute(
            "INSERT INTO side_effects VALUES ('stale', $1)",
            &[&event_id],
        )
        .unwrap();
        std::thread::sleep(Duration::from_millis(150)); // the lease runs out

        assert_eq!(
            deliver(&mut fast, "stale", &event_id, Duration::ZERO),
            Answer::Done
        );
        scenario.sent(1);

        let err = tx
            .execute("SELECT webhook_complete($1::text::uuid)", &[&claim.id])
            .unwrap_err();
        assert_eq!(sql_state(&err), Some("55006"), "{err}");
        drop(tx); // rolls back the slow worker's side effect
        assert_eq!(side_effects(&mut fast, "stale", &event_id), 1);
    }
    scenario.finish(&mut fast, events);
}

/// Scenario 8: Bad input: every call is refused with a clear error or answers
/// false; the backend stays up and nothing is half-written.
#[test]
fn s8_bad_input_matrix() {
    let _turn = one_at_a_time();
    let db = database(DB);
    let scenario = Scenario::start("8 bad input refused, nothing written", "bad-input");
    let mut client = connect(db);
    let pid: i32 = client
        .query_one("SELECT pg_backend_pid()", &[])
        .unwrap()
        .get(0);
    let counts = |c: &mut Client| -> (i64, i64) {
        let row = c
            .query_one(
                "SELECT (SELECT count(*) FROM webhook.events WHERE provider = 'bad-input'),
                        (SELECT count(*) FROM webhook.deliveries WHERE provider = 'bad-input')",
                &[],
            )
            .unwrap();
        (row.get(0), row.get(1))
    };

    let ten_mb = format!("{{\"pad\": \"{}\"}}", "x".repeat(10 * 1024 * 1024));
    let thirty_mb = format!("{{\"pad\": \"{}\"}}", "x".repeat(30 * 1024 * 1024));
    let long_id = "e".repeat(256);
    let huge_signature = "a".repeat(1024 * 1024);
    let sha256_hex = "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843";

    let claim = "SELECT * FROM webhook_claim($1, $2, $3, $4::text, $5)";
    // (sql, text parameters, expected SQLSTATE)
    let refused: Vec<(&str, Vec<Option<&str>>, &str)> = vec![
        (claim, vec![None, Some("e"), Some("t"), Some("{}"), None], "22004"),
        (claim, vec![Some("bad-input"), None, Some("t"), Some("{}"), None], "22004"),
        (claim, vec![Some("bad-input"), Some("e"), None, Some("{}"), None], "22004"),
        (claim, vec![Some("bad-input"), Some("e"), Some("t"), None, None], "22004"),
        (claim, vec![Some(""), Some("e"), Some("t"), Some("{}"), None], "2200F"),
        (claim, vec![Some("bad-input"), Some(""), Some("t"), Some("{}"), None], "2200F"),
        (claim, vec![Some("bad-input"), Some("e"), Some(""), Some("{}"), None], "2200F"),
        (claim, vec![Some("bad-input"), Some(&long_id), Some("t"), Some("{}"), None], "22001"),
        (claim, vec![Some("bad-input"), Some("e"), Some("t"), Some("{}"), Some(&huge_signature)], "22001"),
        (claim, vec![Some("bad-input"), Some("e"), Some("t"), Some(&thirty_mb), None], "54000"),
        (claim, vec![Some("bad-input"), Some("e"), Some("t"), Some("[1, 2, 3]"), None], "2203C"),
        (claim, vec![Some("bad-input"), Some("e"), Some("t"), Some("\"a string\""), None], "2203C"),
        (claim, vec![Some("bad-input"), Some("e"), Some("t"), Some("null"), None], "2203C"),
        (claim, vec![Some("bad-input"), Some("e"), Some("t"), Some("{\"a\": }"), None], "22032"),
        (claim, vec![Some("bad-input"), Some("e"), Some("t"), Some(""), None], "22032"),
        (claim, vec![Some("bad-input"), Some("e"), Some("t"), Some("{} trailing"), None], "22032"),
        (
            "SELECT * FROM webhook_claim($1, $2, $3, decode($4, 'hex'), $5)",
            vec![Some("bad-input"), Some("e"), Some("t"), Some("7b22ff227d"), None],
            "22021",
        ),
        (
            "SELECT * FROM webhook_claim(convert_from(decode($1, 'hex'), 'UTF8'), $2, $3, $4::text, $5)",
            vec![Some("c3"), Some("e"), Some("t"), Some("{}"), None],
            "22021",
        ),
        (
            "SELECT * FROM webhook_claim($1, $2, $3, $4::text, $5, '-1 second')",
            vec![Some("bad-input"), Some("e"), Some("t"), Some("{}"), None],
            "22023",
        ),
        ("SELECT webhook_complete($1::text::uuid)", vec![None], "22004"),
        ("SELECT webhook_complete($1::text::uuid)", vec![Some("00000000-0000-4000-8000-000000000000")], "P0002"),
        ("SELECT webhook_complete($1::text::uuid)", vec![Some("not-a-uuid")], "22P02"),
        ("SELECT webhook_fail($1::text::uuid, 'x')", vec![Some("00000000-0000-4000-8000-000000000000")], "P0002"),
        ("SELECT webhook_extend($1::text::uuid, '1 minute')", vec![Some("00000000-0000-4000-8000-000000000000")], "P0002"),
    ];
    let verify = "SELECT verify_hmac($1, $2, $3)";
    let body = Some("what do ya want for nothing?");
    let refused_signatures: Vec<Option<&str>> = vec![
        None,
        Some(""),
        Some("   "),
        Some("00"),
        Some(&sha256_hex[..63]),
        Some("zz5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec38"),
        Some("sha1=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"),
        Some("sha512=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"),
        Some("W9zBRr9gdU5qBCQmCJV1x1oAPwidJzmDneyouWTsOE="),
        Some("W9zBRr9gdU5qBCQmCJV1x1oAPwidJzmDneyouWTsOEM=="),
        Some("!!!!BRr9gdU5qBCQmCJV1x1oAPwidJzmDneyouWTsOEM="),
        Some(&huge_signature),
    ];

    let mut calls = 0;
    for (sql, params, sqlstate) in &refused {
        let params: Vec<&(dyn postgres::types::ToSql + Sync)> = params
            .iter()
            .map(|p| p as &(dyn postgres::types::ToSql + Sync))
            .collect();
        let err = client.query(*sql, &params).expect_err(sql);
        assert_eq!(sql_state(&err), Some(*sqlstate), "{sql}: {err}");
        calls += 1;
    }
    for signature in &refused_signatures {
        let expected = if signature.is_none() {
            "22004"
        } else {
            "22P02"
        };
        let err = client
            .query(verify, &[&"Jefe", &body, signature])
            .expect_err("malformed signature");
        assert_eq!(sql_state(&err), Some(expected), "{signature:?}: {err}");
        calls += 1;
    }
    // Well-formed but wrong: false, not an error.
    for (secret, signature) in [("Jefe", &"0".repeat(64)), ("jefe", &sha256_hex.to_string())] {
        let ok: bool = client
            .query_one(verify, &[&secret, &body, signature])
            .unwrap()
            .get(0);
        assert!(!ok);
        calls += 1;
    }
    let ok: bool = client
        .query_one(verify, &[&"Jefe", &body, &sha256_hex])
        .unwrap()
        .get(0);
    assert!(ok, "the matrix's own reference signature is valid");
    scenario.sent(calls + 1);

    // Nothing was written, and the same backend is still serving us.
    assert_eq!(counts(&mut client), (0, 0));
    let still: i32 = client
        .query_one("SELECT pg_backend_pid()", &[])
        .unwrap()
        .get(0);
    assert_eq!(still, pid);

    // Large is not bad: a 10 MB payload is claimed and archived whole.
    let status: String = client
        .query_one(claim, &[&"big", &"evt_10mb", &"t", &ten_mb, &None::<&str>])
        .unwrap()
        .get(2);
    assert_eq!(status, "claimed");
    let archived: i32 = client
        .query_one(
            "SELECT octet_length(raw_body) FROM webhook.deliveries WHERE event_id = 'evt_10mb'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(archived as usize, ten_mb.len());
    scenario.finish(&mut client, 0);
}
