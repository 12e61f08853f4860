//! Replaying inbox events: a dry run counts what a run then queues; after
//! a "bug fix" each matching event is applied again once per consumer,
//! and the workers are told which replay it is; the same request twice is
//! one replay; live events overtake a throttled replay; a replay is
//! paused, resumed and cancelled with its progress visible; every filter
//! selects what it says; twice what the lock table holds goes in one call;
//! bad arguments and the application role are refused.
#![cfg(feature = "client-tests")]

mod common;
use common::*;
use postgres::Client;
use std::time::{Duration, Instant};

const DB: &str = "pgwi_replay";

fn register(admin: &mut Client, provider: &str, consumers: &[&str]) {
    let consumers: Vec<String> = consumers.iter().map(|c| c.to_string()).collect();
    admin
        .execute(
            "SELECT webhook_register_provider($1, scheme => 'stripe', secret => 'whsec_replay',
                                              consumers => $2)",
            &[&provider, &consumers],
        )
        .unwrap();
}

/// The replay's table of effects: one row per event a worker applied
/// under a replay, written in the transaction that completes it.
fn effects_table(admin: &mut Client) {
    static CREATED: std::sync::Mutex<bool> = std::sync::Mutex::new(false);
    let mut created = CREATED.lock().unwrap();
    if *created {
        return;
    }
    *created = true;
    admin
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS replay_effects (
                 replay_id uuid, provider text, consumer text, event_id text,
                 done_at timestamptz DEFAULT clock_timestamp())",
        )
        .unwrap();
}

/// A worker's round: lease, write each event's effect (with the replay
/// webhook_next names), complete, commit. Returns how many it did.
fn apply_once(client: &mut Client, provider: &str, consumer: &str, batch: i32) -> usize {
    let mut tx = client.transaction().unwrap();
    let leased = tx
        .query(
            "SELECT id::text, event_id, replay_id::text FROM webhook_next($1, $2, $3)",
            &[&batch, &consumer, &provider],
        )
        .unwrap();
    for row in &leased {
        let (lease, event_id, replay): (String, String, Option<String>) =
            (row.get(0), row.get(1), row.get(2));
        tx.execute(
            "INSERT INTO replay_effects (replay_id, provider, consumer, event_id) VALUES ($1::text::uuid, $2, $3, $4)",
            &[&replay, &provider, &consumer, &event_id],
        )
        .unwrap();
        tx.execute("SELECT webhook_complete($1::text::uuid)", &[&lease])
            .unwrap();
    }
    tx.commit().unwrap();
    leased.len()
}

/// Work `provider`'s queue for `consumer` with `workers` connections until
/// `done` says so (or a minute passes).
fn pool(
    db: &'static str,
    provider: &'static str,
    consumer: &'static str,
    workers: usize,
    done: fn(&mut Client) -> bool,
) -> Vec<std::thread::JoinHandle<usize>> {
    (0..workers)
        .map(|_| {
            std::thread::spawn(move || {
                let mut client = connect(db);
                let deadline = Instant::now() + Duration::from_secs(120);
                let mut applied = 0;
                loop {
                    let n = apply_once(&mut client, provider, consumer, 10);
                    applied += n;
                    if n == 0 {
                        if done(&mut client) {
                            return applied;
                        }
                        assert!(
                            Instant::now() < deadline,
                            "{provider}/{consumer}: not drained in time"
                        );
                        std::thread::sleep(Duration::from_millis(20));
                    }
                }
            })
        })
        .collect()
}

/// Whether `provider` has seen `events` events and finished all of them.
/// One statement, one snapshot: read in two, events committed between them
/// would look both absent and finished, and a worker would stop early.
fn drained(client: &mut Client, provider: &str, events: i64) -> bool {
    client
        .query_one(
            "SELECT (SELECT count(*) FROM webhook.events WHERE provider = $1) = $2
                    AND NOT EXISTS (SELECT FROM webhook.inbox WHERE provider = $1 AND status <> 'processed')",
            &[&provider, &events],
        )
        .unwrap()
        .get(0)
}

fn drain(client: &mut Client, provider: &str, consumer: &str) {
    while apply_once(client, provider, consumer, 500) > 0 {}
}

/// (replay_id, started, events) of a run.
fn run(client: &mut Client, call: &str) -> (String, bool, i64) {
    let row = client
        .query_one(
            &format!("SELECT replay_id::text, started, events FROM {call}"),
            &[],
        )
        .unwrap();
    (row.get(0), row.get(1), row.get(2))
}

fn progress(client: &mut Client, replay: &str) -> (String, i64, i64, i64) {
    let row = client
        .query_one(
            "SELECT state, events, done, remaining FROM webhook.replay_progress WHERE id = $1::text::uuid",
            &[&replay],
        )
        .unwrap();
    (row.get(0), row.get(1), row.get(2), row.get(3))
}

#[test]
fn after_a_fix_a_replay_applies_each_matching_event_once_per_consumer_and_says_so() {
    let db = database(DB);
    let mut admin = connect(db);
    effects_table(&mut admin);
    register(&mut admin, "rp_stripe", &["billing", "analytics"]);
    register(&mut admin, "rp_github", &["billing"]);
    // 600 Stripe events (every third invoice.paid), 200 GitHub ones, all
    // processed by the buggy release.
    admin
        .execute(
            "SELECT count(*) FROM generate_series(1, 600) g,
                    webhook_enqueue('rp_stripe', 'evt_' || g,
                                    CASE WHEN g % 3 = 0 THEN 'invoice.paid' ELSE 'charge.succeeded' END,
                                    jsonb_build_object('n', g))",
            &[],
        )
        .unwrap();
    enqueue_many(&mut admin, "rp_github", "gh_", 200);
    drain(&mut admin, "rp_stripe", "billing");
    drain(&mut admin, "rp_stripe", "analytics");
    drain(&mut admin, "rp_github", "billing");
    assert_eq!(
        count(
            &mut admin,
            "SELECT count(*) FROM replay_effects WHERE provider IN ('rp_stripe', 'rp_github') AND replay_id IS NOT NULL"
        ),
        0,
        "live work names no replay"
    );

    // The dry run: how many, a sample, nothing changed.
    let call =
        "webhook_replay('rp_stripe', event_types => '{invoice.paid}', statuses => '{processed}'";
    let row = admin
        .query_one(
            &format!("SELECT replay_id::text, dry_run, events, jsonb_array_length(sample) FROM {call}, sample => 5)"),
            &[],
        )
        .unwrap();
    let (none, dry, planned, sampled): (Option<String>, bool, i64, i32) =
        (row.get(0), row.get(1), row.get(2), row.get(3));
    assert_eq!(
        (none, dry, planned, sampled),
        (None, true, 400, 5),
        "both consumers' 200"
    );
    assert_eq!(
        count(
            &mut admin,
            "SELECT count(*) FROM webhook.inbox WHERE provider = 'rp_stripe' AND status <> 'processed'"
        ),
        0
    );

    // The run queues what the dry run counted; live traffic goes on.
    let (replay, started, events) = run(
        &mut admin,
        &format!("{call}, reason => 'invoice totals fixed', dry_run => false)"),
    );
    assert!(started);
    assert_eq!(events, planned, "the dry run counts what runs");
    // Started again by mistake (a retry, a second terminal): the same
    // replay, nothing more queued.
    let again = run(
        &mut admin,
        &format!("{call}, reason => 'invoice totals fixed', dry_run => false)"),
    );
    assert_eq!(again, (replay.clone(), false, planned));
    assert_eq!(
        count(
            &mut admin,
            "SELECT count(*) FROM webhook.inbox WHERE provider = 'rp_stripe' AND status = 'ready'"
        ),
        400
    );

    // Worker pools per provider and consumer, live GitHub events arriving
    // while the replay drains.
    fn replay_done(client: &mut Client) -> bool {
        count(
            client,
            "SELECT count(*) FROM webhook.replay_progress WHERE filter->>'provider' = 'rp_stripe' AND state <> 'finished'",
        ) == 0
    }
    fn github_done(client: &mut Client) -> bool {
        drained(client, "rp_github", 400)
    }
    let mut workers = pool(db, "rp_stripe", "billing", 4, replay_done);
    workers.extend(pool(db, "rp_stripe", "analytics", 4, replay_done));
    workers.extend(pool(db, "rp_github", "billing", 2, github_done));
    enqueue_many(&mut admin, "rp_github", "gh_live_", 200);
    let applied: usize = workers.into_iter().map(|w| w.join().unwrap()).sum();
    assert_eq!(applied, 400 + 200);

    // Each invoice.paid event once more per consumer, under the replay;
    // nothing else ran again.
    let per_event: Vec<(String, i64)> = admin
        .query(
            "SELECT consumer, count(*) FROM replay_effects WHERE replay_id = $1::text::uuid
              GROUP BY consumer ORDER BY consumer",
            &[&replay],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(
        per_event,
        vec![("analytics".into(), 200), ("billing".into(), 200)]
    );
    assert_eq!(
        count(
            &mut admin,
            &format!(
                "SELECT count(*) FROM (SELECT consumer, event_id FROM replay_effects WHERE replay_id = '{replay}'
                                        GROUP BY 1, 2 HAVING count(*) > 1) x"
            )
        ),
        0,
        "never twice"
    );
    assert_eq!(
        count(
            &mut admin,
            &format!(
                "SELECT count(*) FROM replay_effects e JOIN webhook.events v
                     ON v.provider = e.provider AND v.event_id = e.event_id
                  WHERE e.replay_id = '{replay}' AND v.event_id NOT IN
                        (SELECT event_id FROM webhook.inbox WHERE event_type = 'invoice.paid')"
            )
        ),
        0,
        "only invoice.paid"
    );
    assert_eq!(
        progress(&mut admin, &replay),
        ("finished".into(), 400, 400, 0)
    );
    let who: String = admin
        .query_one(
            "SELECT requested_by || '/' || reason FROM webhook.replays WHERE id = $1::text::uuid",
            &[&replay],
        )
        .unwrap()
        .get(0);
    assert_eq!(who, "postgres/invoice totals fixed");
}

#[test]
fn a_replayed_event_keeps_its_outbound_key_unless_the_operation_names_the_replay() {
    let db = database(DB);
    let mut admin = connect(db);
    register(&mut admin, "rp_keys", &["default"]);
    admin
        .batch_execute("SELECT webhook_enqueue('rp_keys', 'evt_key', 'invoice.paid', '{}'::jsonb)")
        .unwrap();
    let first: String = admin
        .query_one(
            "SELECT id::text FROM webhook_next(1, provider => 'rp_keys')",
            &[],
        )
        .unwrap()
        .get(0);
    let original: String = admin
        .query_one(
            "SELECT webhook_outbound_key($1::text::uuid, 'refund')",
            &[&first],
        )
        .unwrap()
        .get(0);
    admin
        .execute("SELECT webhook_complete($1::text::uuid)", &[&first])
        .unwrap();
    let (replay, _, events) = run(
        &mut admin,
        "webhook_replay('rp_keys', reason => 'refunds went to the wrong account', dry_run => false)",
    );
    assert_eq!(events, 1);
    let row = admin
        .query_one(
            "SELECT id::text, replay_id::text FROM webhook_next(1, provider => 'rp_keys')",
            &[],
        )
        .unwrap();
    let (second, named): (String, Option<String>) = (row.get(0), row.get(1));
    assert_ne!(first, second, "a new lease");
    assert_eq!(named.as_ref(), Some(&replay));
    let replayed: String = admin
        .query_one(
            "SELECT webhook_outbound_key($1::text::uuid, 'refund')",
            &[&second],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        replayed, original,
        "same key: the provider does not repeat the call"
    );
    let fresh: String = admin
        .query_one(
            "SELECT webhook_outbound_key($1::text::uuid, 'refund/' || $2)",
            &[&second, &replay],
        )
        .unwrap()
        .get(0);
    assert_ne!(
        fresh, original,
        "a key of its own when the call must be made again"
    );
}

#[test]
fn live_events_overtake_a_throttled_replay() {
    let db = database(DB);
    let mut admin = connect(db);
    effects_table(&mut admin);
    register(&mut admin, "rp_live", &["default"]);
    enqueue_many(&mut admin, "rp_live", "old_", 300);
    drain(&mut admin, "rp_live", "default");
    // 300 events at 25 a second: twelve seconds of them.
    let (replay, _, events) = run(
        &mut admin,
        "webhook_replay('rp_live', reason => 'throttled', rate => 25, dry_run => false)",
    );
    assert_eq!(events, 300);
    fn done(client: &mut Client) -> bool {
        drained(client, "rp_live", 350)
    }
    let workers = pool(db, "rp_live", "default", 2, done);
    std::thread::sleep(Duration::from_secs(2));
    // Live events arrive while most of the replay is still to come; each
    // is applied within a second or so, long before the replay ends.
    for i in 0..50 {
        admin
            .execute(
                "SELECT webhook_enqueue('rp_live', 'live_' || $1::int, 'invoice.paid', '{}'::jsonb)",
                &[&i],
            )
            .unwrap();
        std::thread::sleep(Duration::from_millis(40));
    }
    let (_, _, _, remaining) = progress(&mut admin, &replay);
    let applied: usize = workers.into_iter().map(|w| w.join().unwrap()).sum();
    assert_eq!(applied, 350);
    let slowest: f64 = admin
        .query_one(
            "SELECT extract(epoch FROM max(e.done_at - i.queued_at))::float8
               FROM replay_effects e JOIN webhook.inbox i ON i.provider = e.provider AND i.event_id = e.event_id
              WHERE e.provider = 'rp_live' AND e.event_id LIKE 'live_%'",
            &[],
        )
        .unwrap()
        .get(0);
    let replay_took: f64 = admin
        .query_one(
            "SELECT extract(epoch FROM max(done_at) - min(done_at))::float8 FROM replay_effects WHERE replay_id = $1::text::uuid",
            &[&replay],
        )
        .unwrap()
        .get(0);
    assert!(
        remaining > 150,
        "most of the replay was still to come: {remaining}"
    );
    assert!(
        replay_took > 10.0,
        "the replay kept its rate: {replay_took} s"
    );
    assert!(
        slowest < 2.0,
        "no live event waited behind the replay: {slowest} s"
    );
}

#[test]
fn a_replay_is_paused_resumed_and_cancelled_with_its_progress_in_view() {
    let db = database(DB);
    let mut admin = connect(db);
    effects_table(&mut admin);
    register(&mut admin, "rp_steer", &["default"]);
    enqueue_many(&mut admin, "rp_steer", "evt_", 100);
    drain(&mut admin, "rp_steer", "default");
    let (replay, _, _) = run(
        &mut admin,
        "webhook_replay('rp_steer', reason => 'steered', dry_run => false)",
    );
    assert_eq!(
        progress(&mut admin, &replay),
        ("running".into(), 100, 0, 100)
    );
    // 30 run, one stays leased across the pause.
    assert_eq!(apply_once(&mut admin, "rp_steer", "default", 30), 30);
    let mut holder = connect(db);
    holder.batch_execute("BEGIN").unwrap();
    let held: String = holder
        .query_one(
            "SELECT id::text FROM webhook_next(1, provider => 'rp_steer')",
            &[],
        )
        .unwrap()
        .get(0);
    holder.batch_execute("COMMIT").unwrap();
    assert_eq!(
        progress(&mut admin, &replay),
        ("running".into(), 100, 30, 70)
    );

    let set_aside: i64 = admin
        .query_one("SELECT webhook_replay_pause($1::text::uuid)", &[&replay])
        .unwrap()
        .get(0);
    assert_eq!(set_aside, 69, "the leased one runs to its end");
    assert_eq!(progress(&mut admin, &replay).0, "paused");
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        apply_once(&mut admin, "rp_steer", "default", 100),
        0,
        "nothing leased while paused"
    );
    holder
        .execute("SELECT webhook_complete($1::text::uuid)", &[&held])
        .unwrap();
    assert_eq!(
        progress(&mut admin, &replay),
        ("paused".into(), 100, 31, 69)
    );
    // Pausing twice, resuming a running one: 55000.
    let err = admin
        .query_one("SELECT webhook_replay_pause($1::text::uuid)", &[&replay])
        .unwrap_err();
    assert_eq!(sql_state(&err), Some("55000"), "{}", message(&err));

    assert_eq!(
        admin
            .query_one("SELECT webhook_replay_resume($1::text::uuid)", &[&replay])
            .unwrap()
            .get::<_, i64>(0),
        69
    );
    let err = admin
        .query_one("SELECT webhook_replay_resume($1::text::uuid)", &[&replay])
        .unwrap_err();
    assert_eq!(sql_state(&err), Some("55000"), "{}", message(&err));
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(apply_once(&mut admin, "rp_steer", "default", 19), 19);
    assert_eq!(
        progress(&mut admin, &replay),
        ("running".into(), 100, 50, 50)
    );

    // Cancel: what had not started is put back as it was (processed, with
    // its attempts), and nothing of it is leased again.
    let undone: i64 = admin
        .query_one("SELECT webhook_replay_cancel($1::text::uuid)", &[&replay])
        .unwrap()
        .get(0);
    assert_eq!(undone, 50);
    assert_eq!(
        progress(&mut admin, &replay),
        ("cancelled".into(), 100, 50, 0)
    );
    assert_eq!(
        count(&mut admin, "SELECT count(*) FROM webhook.inbox WHERE provider = 'rp_steer' AND (status <> 'processed' OR attempts <> 1)"),
        0
    );
    assert_eq!(apply_once(&mut admin, "rp_steer", "default", 100), 0);
    assert_eq!(
        count(
            &mut admin,
            &format!("SELECT count(*) FROM replay_effects WHERE replay_id = '{replay}'")
        ),
        49,
        "the one held across the pause was completed without an effect"
    );
    for call in [
        "webhook_replay_pause",
        "webhook_replay_resume",
        "webhook_replay_cancel",
    ] {
        let err = admin
            .query_one(&format!("SELECT {call}($1::text::uuid)"), &[&replay])
            .unwrap_err();
        assert_eq!(sql_state(&err), Some("55000"), "{call}: {}", message(&err));
    }
}

#[test]
fn each_filter_selects_what_it_says() {
    let db = database(DB);
    let mut admin = connect(db);
    register(&mut admin, "rp_filter", &["a", "b"]);
    admin
        .execute(
            "SELECT count(*) FROM generate_series(1, 40) g,
                    webhook_enqueue('rp_filter', 'evt_' || g, CASE WHEN g <= 20 THEN 'x' ELSE 'y' END,
                                    jsonb_build_object('amount', g * 10, 'currency', CASE WHEN g % 2 = 0 THEN 'eur' ELSE 'usd' END))",
            &[],
        )
        .unwrap();
    // Consumer a: evt_1..10 fail once then succeed, evt_11..15 fail for
    // good, the rest succeed; consumer b: everything succeeds.
    for _ in 0..3 {
        let mut tx = admin.transaction().unwrap();
        for row in tx
            .query(
                "SELECT id::text, event_id FROM webhook_next(100, 'a', 'rp_filter')",
                &[],
            )
            .unwrap()
        {
            let (id, event): (String, String) = (row.get(0), row.get(1));
            let n: i32 = event[4..].parse().unwrap();
            let attempts: i32 = tx
                .query_one(
                    "SELECT attempts FROM webhook.inbox WHERE claim_id = $1::text::uuid",
                    &[&id],
                )
                .unwrap()
                .get(0);
            if n <= 10 && attempts == 1 {
                tx.execute("SELECT webhook_fail($1::text::uuid, 'timeout talking to ledger', interval '0')", &[&id])
                    .unwrap();
            } else if (11..=15).contains(&n) {
                tx.execute(
                    "SELECT webhook_fail($1::text::uuid, 'card declined', permanent => true)",
                    &[&id],
                )
                .unwrap();
            } else {
                tx.execute("SELECT webhook_complete($1::text::uuid)", &[&id])
                    .unwrap();
            }
        }
        tx.commit().unwrap();
    }
    drain_b(&mut admin);
    let planned = |admin: &mut Client, args: &str| -> i64 {
        admin
            .query_one(
                &format!("SELECT events FROM webhook_replay('rp_filter', {args})"),
                &[],
            )
            .unwrap()
            .get(0)
    };
    assert_eq!(planned(&mut admin, "statuses => '{processed}'"), 35 + 40);
    assert_eq!(planned(&mut admin, "statuses => '{dead}'"), 5);
    assert_eq!(
        planned(&mut admin, "statuses => '{failed}'"),
        10 + 5,
        "failed at least once"
    );
    assert_eq!(planned(&mut admin, "statuses => '{processed,dead}'"), 80);
    assert_eq!(planned(&mut admin, "consumer => 'b'"), 40);
    assert_eq!(planned(&mut admin, "event_types => '{y}'"), 40);
    assert_eq!(
        planned(
            &mut admin,
            "statuses => '{processed,dead}', error_contains => 'LEDGER'"
        ),
        10
    );
    assert_eq!(
        planned(
            &mut admin,
            "statuses => '{dead}', error_contains => 'declined'"
        ),
        5
    );
    assert_eq!(
        planned(
            &mut admin,
            "payload_path => '$.amount >= 300 && $.currency == \"eur\"'"
        ),
        2 * 6
    );
    assert_eq!(
        planned(&mut admin, "payload_path => '$.no.such.thing'"),
        0,
        "not a predicate: no match"
    );
    assert_eq!(
        planned(&mut admin, "since => now() + interval '1 minute'"),
        0
    );
    assert_eq!(
        planned(&mut admin, "until => now() + interval '1 minute'"),
        75
    );
    // The dead letters of consumer a, replayed: dead again or processed,
    // each once.
    let (replay, _, events) = run(
        &mut admin,
        "webhook_replay('rp_filter', consumer => 'a', statuses => '{dead}', reason => 'declines retried', dry_run => false)",
    );
    assert_eq!(events, 5);
    let leased: Vec<Option<String>> = admin
        .query(
            "SELECT replay_id::text FROM webhook_next(100, 'a', 'rp_filter')",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(leased, vec![Some(replay); 5]);
}

fn drain_b(admin: &mut Client) {
    let mut tx = admin.transaction().unwrap();
    for row in tx
        .query(
            "SELECT id::text FROM webhook_next(100, 'b', 'rp_filter')",
            &[],
        )
        .unwrap()
    {
        tx.execute(
            "SELECT webhook_complete($1::text::uuid)",
            &[&row.get::<_, String>(0)],
        )
        .unwrap();
    }
    tx.commit().unwrap();
}

#[test]
fn a_replay_of_twice_the_lock_table_is_one_call() {
    let db = database(DB);
    let mut admin = connect(db);
    register(&mut admin, "rp_big", &["default"]);
    // What a per-event lock would need twice over: the server's whole lock
    // table (max_locks_per_transaction × max_connections) could not hold
    // the replay's events, so one call that queues them all holds none.
    let locks: i64 = admin
        .query_one(
            "SELECT current_setting('max_locks_per_transaction')::int8 * current_setting('max_connections')::int8",
            &[],
        )
        .unwrap()
        .get(0);
    let size = 2 * locks;
    let t = Instant::now();
    enqueue_many(&mut admin, "rp_big", "evt_", i32::try_from(size).unwrap());
    eprintln!("enqueued in {:?}", t.elapsed());
    loop {
        let mut tx = admin.transaction().unwrap();
        let n = tx
            .execute(
                "SELECT webhook_complete_batch(array_agg(id)) FROM webhook_next(1000, provider => 'rp_big')
                 HAVING count(*) > 0",
                &[],
            )
            .unwrap();
        tx.commit().unwrap();
        if n == 0 {
            break;
        }
    }
    assert!(
        locks < size,
        "the lock table ({locks}) is smaller than the replay ({size})"
    );
    eprintln!("processed in {:?}", t.elapsed());
    let (replay, started, events) = run(
        &mut admin,
        "webhook_replay('rp_big', reason => 'everything again', rate => 10000, dry_run => false)",
    );
    assert!(started);
    assert_eq!(events, size);
    assert_eq!(
        progress(&mut admin, &replay),
        ("running".into(), size, 0, size)
    );
    assert_eq!(
        admin
            .query_one("SELECT webhook_replay_cancel($1::text::uuid)", &[&replay])
            .unwrap()
            .get::<_, i64>(0),
        size
    );
}

#[test]
fn a_replay_refuses_what_it_cannot_do_with_its_own_sqlstates_and_only_operators_steer_it() {
    let db = database(DB);
    let mut admin = connect(db);
    register(&mut admin, "rp_errors", &["default"]);
    for (call, state) in [
        ("webhook_replay('rp_nobody')", "42704"),
        ("webhook_replay('rp_errors', statuses => '{done}')", "22023"),
        ("webhook_replay('rp_errors', statuses => '{}')", "22023"),
        ("webhook_replay('rp_errors', statuses => NULL)", "22023"),
        (
            "webhook_replay('rp_errors', event_types => '{\"\"}')",
            "22023",
        ),
        (
            "webhook_replay('rp_errors', since => now(), until => now() - interval '1 day')",
            "22023",
        ),
        ("webhook_replay('rp_errors', error_contains => '')", "22023"),
        ("webhook_replay('rp_errors', rate => 0)", "22023"),
        ("webhook_replay('rp_errors', sample => 5000)", "22023"),
        ("webhook_replay('rp_errors', dry_run => NULL)", "22004"),
        ("webhook_replay('rp_errors', dry_run => false)", "22004"),
        (
            "webhook_replay('rp_errors', reason => '', dry_run => false)",
            "22023",
        ),
        ("webhook_replay('')", "22023"),
        ("webhook_replay_pause(NULL)", "22004"),
        ("webhook_replay_resume(gen_random_uuid())", "42704"),
        ("webhook_replay_cancel(gen_random_uuid())", "42704"),
    ] {
        let err = admin
            .batch_execute(&format!("SELECT * FROM {call}"))
            .unwrap_err();
        assert_eq!(sql_state(&err), Some(state), "{call}: {}", message(&err));
        assert!(
            message(&err).contains("argument"),
            "{call}: {}",
            message(&err)
        );
    }
    let err = admin
        .batch_execute("SELECT * FROM webhook_replay(payload_path => 'not a path')")
        .unwrap_err();
    assert_eq!(sql_state(&err), Some("42601"), "{}", message(&err));

    ensure_role(&mut admin, "rp_app", true);
    ensure_role(&mut admin, "rp_ops", true);
    admin
        .batch_execute(
            "SELECT webhook_grant_app('rp_app'); SELECT webhook_grant_operator('rp_ops')",
        )
        .unwrap();
    let mut app = connect_as(db, "rp_app");
    for call in [
        "SELECT * FROM webhook_replay('rp_errors')",
        "SELECT webhook_replay_pause(gen_random_uuid())",
        "SELECT webhook_replay_resume(gen_random_uuid())",
        "SELECT webhook_replay_cancel(gen_random_uuid())",
        "SELECT * FROM webhook.replays",
        "SELECT * FROM webhook.replay_items",
        "SELECT * FROM webhook.replay_progress",
    ] {
        let err = app.batch_execute(call).unwrap_err();
        assert_eq!(sql_state(&err), Some("42501"), "{call}: {}", message(&err));
    }
    let mut ops = connect_as(db, "rp_ops");
    ops.batch_execute(
        "SELECT * FROM webhook_replay('rp_errors');
         SELECT * FROM webhook_replay('rp_errors', reason => 'ops may', dry_run => false);
         SELECT * FROM webhook.replay_progress",
    )
    .unwrap();
    let by: String = admin
        .query_one(
            "SELECT requested_by FROM webhook.replays WHERE reason = 'ops may'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(by, "rp_ops");
}

#[test]
fn a_replay_that_fails_halfway_queues_nothing_and_the_same_command_then_starts_it() {
    let db = database(DB);
    let mut admin = connect(db);
    register(&mut admin, "rp_halfway", &["default"]);
    enqueue_many(&mut admin, "rp_halfway", "evt_", 50);
    drain(&mut admin, "rp_halfway", "default");
    // Another session holds one of the rows: the replay waits for it past
    // its lock_timeout, and fails after it has read (and locked) the rest.
    let mut holder = connect(db);
    holder.batch_execute("BEGIN").unwrap();
    holder
        .batch_execute(
            "SELECT 1 FROM webhook.inbox WHERE provider = 'rp_halfway' AND event_id = 'evt_25' FOR UPDATE",
        )
        .unwrap();
    let call = "webhook_replay('rp_halfway', reason => 'halfway', dry_run => false)";
    let err = admin
        .query_one(&format!("SELECT replay_id FROM {call}"), &[])
        .unwrap_err();
    assert_eq!(sql_state(&err), Some("55P03"), "{}", message(&err));
    assert_eq!(
        count(
            &mut admin,
            "SELECT count(*) FROM webhook.replays WHERE reason = 'halfway'"
        ),
        0,
        "no replay recorded"
    );
    assert_eq!(
        count(
            &mut admin,
            "SELECT count(*) FROM webhook.inbox WHERE provider = 'rp_halfway' AND status <> 'processed'"
        ),
        0,
        "nothing queued"
    );
    holder.batch_execute("COMMIT").unwrap();
    let (replay, started, events) = run(&mut admin, call);
    assert!(started, "the same command starts it now");
    assert_eq!(events, 50);
    drain(&mut admin, "rp_halfway", "default");
    assert_eq!(
        progress(&mut admin, &replay),
        ("finished".into(), 50, 50, 0)
    );
}
