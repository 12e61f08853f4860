//! Steering the inbox under load: eight workers per test, intake going on
//! beside them. A paused consumer or provider gets nothing while the rest
//! drains, and takes up where it stopped once resumed; a quarantined
//! entity is set aside, arrivals included, and released whole; a cap is
//! never exceeded, sampled from the database and from the workers; a
//! rate holds within 10 % over twelve seconds; a circuit breaker opens,
//! lets one event through after its cooldown, and closes on success. Every
//! event is processed exactly once per consumer throughout.
//!
//! The rate and the breaker are judged by the clock, so each runs alone:
//! on a two-core machine the other tests' eight workers each would starve
//! them, and a rate the machine cannot reach says nothing about the limit.
#![cfg(feature = "client-tests")]

mod common;
use common::*;
use postgres::Client;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

const DB: &str = "pgwi_flow";

/// The suite's database, with a table where each (consumer, event) may be
/// done once: a second time fails the worker, and the test.
fn db() -> &'static str {
    static DONE_TABLE: std::sync::Once = std::sync::Once::new();
    let db = database(DB);
    DONE_TABLE.call_once(|| {
        connect(db)
            .batch_execute(
                "CREATE TABLE IF NOT EXISTS done (
                 consumer text NOT NULL, provider text NOT NULL, event_id text NOT NULL,
                 done_at timestamptz NOT NULL DEFAULT clock_timestamp(),
                 PRIMARY KEY (consumer, provider, event_id))",
            )
            .unwrap();
    });
    db
}

static CLOCK: RwLock<()> = RwLock::new(());

/// Held by every test that the clock does not judge: they run together.
fn beside_others() -> RwLockReadGuard<'static, ()> {
    CLOCK
        .read()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Held by a test the clock judges: nothing else of this suite runs.
fn alone() -> RwLockWriteGuard<'static, ()> {
    CLOCK
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// `wait_for` with room for a loaded machine: these tests drain
/// thousands of events with eight workers each, several tests at once.
/// It looks every 20 ms, and a worker that found nothing waits as long:
/// on two cores, polls that find nothing are CPU the drains need.
fn wait_long(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !ready() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn register(admin: &mut Client, provider: &str, consumers: &[&str], ordering: Option<bool>) {
    let consumers: Vec<String> = consumers.iter().map(|c| c.to_string()).collect();
    admin
        .execute(
            "SELECT webhook_register_provider($1, scheme => 'stripe', secret => 'whsec_' || $1,
                                              consumers => $2, ordering => $3::boolean IS NOT NULL,
                                              entity_key_from => CASE WHEN $3::boolean IS NOT NULL THEN 'body:customer' END,
                                              order_from => CASE WHEN $3::boolean IS NOT NULL THEN 'body:seq' END,
                                              fifo => $3::boolean)",
            &[&provider, &consumers, &ordering],
        )
        .unwrap();
}

/// Queue events `{prefix}{first..=last}` of `provider`, each about
/// customer `c{n % customers}`, in order.
fn enqueue(
    admin: &mut Client,
    provider: &str,
    prefix: &str,
    first: i32,
    last: i32,
    customers: i32,
) {
    for from in (first..=last).step_by(1000) {
        let to = (from + 999).min(last);
        let queued: i64 = admin
            .query_one(
                "SELECT count(*) FILTER (WHERE q.status = 'queued')
                   FROM generate_series($3::int, $4::int) g,
                        webhook_enqueue($1, $2 || g, 'invoice.paid',
                                        jsonb_build_object('customer', 'c' || g % $5, 'seq', g)) q",
                &[&provider, &prefix, &from, &to, &customers],
            )
            .unwrap()
            .get(0);
        assert_eq!(
            queued,
            i64::from(to - from + 1),
            "intake answers queued, whatever is steered"
        );
    }
}

/// One worker round, in one transaction: lease, record each event done,
/// complete, commit. `holding` is told how many leases this worker holds
/// (up before the work, down before the commit that ends them).
fn round(
    client: &mut Client,
    consumer: &str,
    provider: Option<&str>,
    batch: i32,
    holding: Option<&AtomicI64>,
    work: Duration,
) -> usize {
    let mut tx = client.transaction().unwrap();
    let leased = tx
        .query(
            "SELECT id::text, provider, event_id FROM webhook_next($1, $2, $3)",
            &[&batch, &consumer, &provider],
        )
        .unwrap();
    if let Some(h) = holding {
        h.fetch_add(leased.len() as i64, SeqCst);
    }
    if !leased.is_empty() {
        // Prepared once a round, as a worker would: parsing and planning
        // them for every event is CPU the other workers need.
        let record = tx
            .prepare("INSERT INTO done (consumer, provider, event_id) VALUES ($1, $2, $3)")
            .unwrap();
        let complete = tx
            .prepare("SELECT webhook_complete($1::text::uuid)")
            .unwrap();
        for row in &leased {
            let (id, p, e): (String, String, String) = (row.get(0), row.get(1), row.get(2));
            tx.execute(&record, &[&consumer, &p, &e])
                .unwrap_or_else(|err| panic!("{consumer} did {p}/{e} twice: {}", message(&err)));
            tx.execute(&complete, &[&id]).unwrap();
        }
    }
    std::thread::sleep(work);
    if let Some(h) = holding {
        h.fetch_sub(leased.len() as i64, SeqCst);
    }
    tx.commit().unwrap();
    leased.len()
}

fn done(client: &mut Client, consumer: &str, provider: &str) -> i64 {
    client
        .query_one(
            "SELECT count(*) FROM done WHERE consumer = $1 AND provider = $2",
            &[&consumer, &provider],
        )
        .unwrap()
        .get(0)
}

/// Workers of `consumer` running `round` until `stop`, each returning how
/// many events it processed.
fn workers(
    db: &'static str,
    n: usize,
    consumer: &'static str,
    provider: Option<&'static str>,
    batch: i32,
    stop: &Arc<AtomicBool>,
) -> Vec<std::thread::JoinHandle<usize>> {
    (0..n)
        .map(|_| {
            let stop = Arc::clone(stop);
            std::thread::spawn(move || {
                let mut client = connect(db);
                let mut processed = 0;
                while !stop.load(SeqCst) {
                    let n = round(&mut client, consumer, provider, batch, None, Duration::ZERO);
                    processed += n;
                    if n == 0 {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                }
                processed
            })
        })
        .collect()
}

#[test]
fn a_paused_consumer_gets_nothing_while_another_drains_and_resumes_where_it_stopped() {
    let _clock = beside_others();
    let db = db();
    let mut admin = connect(db);
    register(
        &mut admin,
        "fl_pause",
        &["fl_billing", "fl_analytics"],
        None,
    );
    enqueue(&mut admin, "fl_pause", "e", 1, 4000, 1);

    let stop = Arc::new(AtomicBool::new(false));
    let mut pool = workers(db, 4, "fl_billing", Some("fl_pause"), 5, &stop);
    pool.extend(workers(db, 4, "fl_analytics", Some("fl_pause"), 5, &stop));

    // Paused mid-drain: the workers' backends have their caches already,
    // and must see the pause at their next call.
    wait_long("billing to be under way", || {
        done(&mut admin, "fl_billing", "fl_pause") >= 200
    });
    assert!(admin
        .query_one(
            "SELECT webhook_pause(consumer => 'fl_billing', reason => 'downstream down')",
            &[]
        )
        .unwrap()
        .get::<_, bool>(0));
    // Rounds that leased before the pause committed finish.
    std::thread::sleep(Duration::from_millis(300));
    let at_pause = done(&mut admin, "fl_billing", "fl_pause");
    assert!(
        at_pause < 4000,
        "billing drained before the pause could be tested"
    );
    // Intake goes on while paused.
    enqueue(&mut admin, "fl_pause", "e", 4001, 4500, 1);
    wait_long("analytics to drain everything", || {
        done(&mut admin, "fl_analytics", "fl_pause") == 4500
    });
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        done(&mut admin, "fl_billing", "fl_pause"),
        at_pause,
        "a paused consumer leased"
    );
    let waiting: i64 = admin
        .query_one(
            "SELECT waiting FROM webhook.paused WHERE consumer = 'fl_billing'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(waiting, 4500 - at_pause, "webhook.paused counts what waits");
    let gauge: f64 = admin
        .query_one(
            "SELECT value FROM webhook_metrics('webhook_steering_paused')
              WHERE provider = '' AND consumer = 'fl_billing' AND label_value = 'pause'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(gauge, 1.0, "the pause shows in the metrics");

    assert!(admin
        .query_one("SELECT webhook_resume(consumer => 'fl_billing')", &[])
        .unwrap()
        .get::<_, bool>(0));
    wait_long("billing to drain once resumed", || {
        done(&mut admin, "fl_billing", "fl_pause") == 4500
    });
    stop.store(true, SeqCst);
    let processed: usize = pool.into_iter().map(|w| w.join().unwrap()).sum();
    assert_eq!(processed, 9000, "each event once per consumer");
    assert_eq!(unfinished(&mut admin, "fl_pause"), 0);
}

#[test]
fn a_paused_provider_is_passed_over_by_workers_of_every_provider() {
    let _clock = beside_others();
    let db = db();
    let mut admin = connect(db);
    register(&mut admin, "fl_pa", &["fl_mixed"], None);
    register(&mut admin, "fl_pb", &["fl_mixed"], None);
    admin
        .query_one("SELECT webhook_pause(provider => 'fl_pa')", &[])
        .unwrap();
    enqueue(&mut admin, "fl_pa", "a", 1, 1000, 1);
    enqueue(&mut admin, "fl_pb", "b", 1, 1000, 1);

    let stop = Arc::new(AtomicBool::new(false));
    let pool = workers(db, 6, "fl_mixed", None, 10, &stop);
    // A worker of the paused provider's queue alone gets nothing at all.
    let mut only_a = connect(db);
    wait_long("the other provider to drain", || {
        done(&mut admin, "fl_mixed", "fl_pb") == 1000
    });
    assert_eq!(
        round(
            &mut only_a,
            "fl_mixed",
            Some("fl_pa"),
            10,
            None,
            Duration::ZERO
        ),
        0
    );
    assert_eq!(
        done(&mut admin, "fl_mixed", "fl_pa"),
        0,
        "a paused provider's events were leased"
    );

    // Paused for this consumer only: the same.
    admin
        .batch_execute(
            "SELECT webhook_resume(provider => 'fl_pa');
             SELECT webhook_pause(provider => 'fl_pa', consumer => 'fl_mixed');",
        )
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(done(&mut admin, "fl_mixed", "fl_pa"), 0);
    // Resuming something else resumes nothing.
    assert!(!admin
        .query_one("SELECT webhook_resume(provider => 'fl_pa')", &[])
        .unwrap()
        .get::<_, bool>(0));
    admin
        .query_one(
            "SELECT webhook_resume(provider => 'fl_pa', consumer => 'fl_mixed')",
            &[],
        )
        .unwrap();
    wait_long("the resumed provider to drain", || {
        done(&mut admin, "fl_mixed", "fl_pa") == 1000
    });
    stop.store(true, SeqCst);
    let processed: usize = pool.into_iter().map(|w| w.join().unwrap()).sum();
    assert_eq!(processed, 2000);
}

#[test]
fn a_quarantined_entity_is_set_aside_with_its_arrivals_while_the_rest_drains() {
    let _clock = beside_others();
    let db = db();
    let mut admin = connect(db);
    // FIFO: eight workers, never two events of a customer at once.
    // Ordered without FIFO: one worker, since two could complete a
    // customer's events out of order, the older refused as stale.
    for (provider, fifo, pool_size) in [("fl_qfifo", true, 8), ("fl_q", false, 1)] {
        register(&mut admin, provider, &["fl_qc"], Some(fifo));
        // 40 customers; c3 is the noisy one.
        enqueue(&mut admin, provider, "e", 1, 2000, 40);
        let set_aside: i64 = admin
            .query_one(
                "SELECT webhook_quarantine($1, 'c3', reason => 'noisy customer')",
                &[&provider],
            )
            .unwrap()
            .get(0);
        assert_eq!(
            set_aside, 50,
            "{provider}: its ready events set aside at once"
        );

        let stop = Arc::new(AtomicBool::new(false));
        let pool = workers(db, pool_size, "fl_qc", Some(provider), 10, &stop);
        // Its arrivals while quarantined are set aside as met.
        enqueue(&mut admin, provider, "e", 2001, 2500, 40);
        wait_long(&format!("{provider}: everything but c3 to drain"), || {
            done(&mut admin, "fl_qc", provider) == 2437
        });
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(
            done(&mut admin, "fl_qc", provider),
            2437,
            "{provider}: c3 leased"
        );
        let quarantined: i64 = admin
            .query_one(
                "SELECT quarantined FROM webhook.inbox_stats WHERE provider = $1",
                &[&provider],
            )
            .unwrap()
            .get(0);
        assert_eq!(quarantined, 63, "{provider}");
        let waiting: i64 = admin
            .query_one(
                "SELECT waiting FROM webhook.paused WHERE provider = $1",
                &[&provider],
            )
            .unwrap()
            .get(0);
        assert_eq!(waiting, 63, "{provider}");

        let released: i64 = admin
            .query_one("SELECT webhook_release($1, 'c3')", &[&provider])
            .unwrap()
            .get(0);
        assert_eq!(released, 63, "{provider}");
        wait_long(&format!("{provider}: c3 to drain once released"), || {
            done(&mut admin, "fl_qc", provider) == 2500
        });
        stop.store(true, SeqCst);
        let processed: usize = pool.into_iter().map(|w| w.join().unwrap()).sum();
        assert_eq!(processed, 2500, "{provider}: each event once");
        // In order, for the FIFO provider: each customer's events were
        // done in their sequence.
        if fifo {
            let out_of_order: i64 = admin
                .query_one(
                    "SELECT count(*) FROM (
                         SELECT event_id, lag(substr(event_id, 2)::int) OVER w AS before,
                                substr(event_id, 2)::int AS n
                           FROM done WHERE provider = $1
                         WINDOW w AS (PARTITION BY substr(event_id, 2)::int % 40 ORDER BY done_at, event_id)) x
                      WHERE before > n",
                    &[&provider],
                )
                .unwrap()
                .get(0);
            assert_eq!(out_of_order, 0, "FIFO held through the quarantine");
        }
    }
}

/// Every way an operator puts events back in the queue (a release, dead
/// letters requeued, a replay, a replay resumed) makes them due in the
/// order they were first queued, whatever order their rows lie in. Before
/// each, the rows are rewritten newest first, so that the heap holds them
/// in reverse. An ordered provider's worker, leasing by due time, then
/// finishes released and requeued events in order and refuses none as
/// stale; a replay re-applies each entity's newest event and finds the
/// older ones stale, as it always did.
#[test]
fn events_put_back_are_due_in_the_order_first_queued() {
    let _clock = beside_others();
    let db = db();
    let mut admin = connect(db);
    let mut worker = connect(db);
    let consumer = "fl_turned";
    let queue = |admin: &mut Client, provider: &str| {
        register(admin, provider, &[consumer], Some(false));
        enqueue(admin, provider, "t", 1, 40, 1);
    };
    let reverse_heap = |admin: &mut Client, provider: &str| {
        admin
            .batch_execute(&format!(
                "SET fl.provider = '{provider}';
                 DO $$
                 DECLARE r record;
                 BEGIN
                     FOR r IN SELECT delivery_id, consumer FROM webhook.inbox
                               WHERE provider = current_setting('fl.provider') ORDER BY queued_at DESC LOOP
                         UPDATE webhook.inbox SET attempts = attempts
                          WHERE delivery_id = r.delivery_id AND consumer = r.consumer;
                     END LOOP;
                 END $$"
            ))
            .unwrap();
    };
    let in_turn = |admin: &mut Client, provider: &str| {
        let out_of_turn: i64 = admin
            .query_one(
                "SELECT count(*) FROM (
                     SELECT run_at <= lag(run_at) OVER (ORDER BY queued_at, order_value, delivery_id) AS early
                       FROM webhook.inbox WHERE provider = $1 AND status = 'ready') x
                  WHERE early",
                &[&provider],
            )
            .unwrap()
            .get(0);
        assert_eq!(out_of_turn, 0, "{provider}: due in the order first queued");
    };
    // Lease five at a time and finish them, as one worker does, until
    // nothing is left: how many were processed, how many found stale.
    let drain = |worker: &mut Client, admin: &mut Client, provider: &str| -> (i64, i64) {
        loop {
            let mut tx = worker.transaction().unwrap();
            let n: i64 = tx
                .query_one(
                    "SELECT count(webhook_complete(id)) FROM webhook_next(5, $1, $2)",
                    &[&consumer, &provider],
                )
                .unwrap()
                .get(0);
            tx.commit().unwrap();
            if n == 0 {
                break;
            }
        }
        admin
            .query_one(
                "SELECT count(*) FILTER (WHERE status = 'processed'), count(*) FILTER (WHERE status = 'stale')
                   FROM webhook.inbox WHERE provider = $1",
                &[&provider],
            )
            .map(|r| (r.get(0), r.get(1)))
            .unwrap()
    };
    let count = |client: &mut Client, sql: &str, provider: &str| -> i64 {
        client.query_one(sql, &[&provider]).unwrap().get(0)
    };

    let released = "fl_turn_released";
    queue(&mut admin, released);
    assert_eq!(
        count(&mut admin, "SELECT webhook_quarantine($1, 'c0')", released),
        40
    );
    reverse_heap(&mut admin, released);
    assert_eq!(
        count(&mut admin, "SELECT webhook_release($1, 'c0')", released),
        40
    );
    in_turn(&mut admin, released);
    assert_eq!(
        drain(&mut worker, &mut admin, released),
        (40, 0),
        "{released}"
    );

    let requeued = "fl_turn_requeued";
    queue(&mut admin, requeued);
    let failed = "SELECT count(webhook_fail(id, 'gone', permanent => true)) FROM webhook_next(40, 'fl_turned', $1)";
    assert_eq!(count(&mut worker, failed, requeued), 40);
    reverse_heap(&mut admin, requeued);
    assert_eq!(
        count(
            &mut admin,
            "SELECT webhook_requeue_dead(provider => $1)",
            requeued
        ),
        40
    );
    in_turn(&mut admin, requeued);
    assert_eq!(
        drain(&mut worker, &mut admin, requeued),
        (40, 0),
        "{requeued}"
    );

    let replayed = "fl_turn_replayed";
    queue(&mut admin, replayed);
    assert_eq!(drain(&mut worker, &mut admin, replayed), (40, 0));
    reverse_heap(&mut admin, replayed);
    let replay = "SELECT events FROM webhook_replay($1, reason => 'in turn', dry_run => false)";
    assert_eq!(count(&mut admin, replay, replayed), 40);
    in_turn(&mut admin, replayed);
    assert_eq!(
        drain(&mut worker, &mut admin, replayed),
        (1, 39),
        "{replayed}: the newest re-applied"
    );

    let replay: String = admin
        .query_one(
            "SELECT replay_id::text FROM webhook_replay($1, statuses => '{processed,stale}',
                                                      reason => 'paused, in turn', dry_run => false)",
            &[&replayed],
        )
        .unwrap()
        .get(0);
    let held: i64 = admin
        .query_one("SELECT webhook_replay_pause($1::text::uuid)", &[&replay])
        .unwrap()
        .get(0);
    assert_eq!(held, 40);
    reverse_heap(&mut admin, replayed);
    let resumed: i64 = admin
        .query_one("SELECT webhook_replay_resume($1::text::uuid)", &[&replay])
        .unwrap()
        .get(0);
    assert_eq!(resumed, 40);
    in_turn(&mut admin, replayed);
    assert_eq!(
        drain(&mut worker, &mut admin, replayed),
        (1, 39),
        "{replayed}: resumed"
    );
}

#[test]
fn a_cap_is_never_exceeded_by_eight_workers_leasing_at_once() {
    let _clock = beside_others();
    let db = db();
    let mut admin = connect(db);
    register(&mut admin, "fl_cap", &["fl_capped"], None);
    admin
        .query_one(
            "SELECT webhook_set_limit('fl_capped', max_leases => 3)",
            &[],
        )
        .unwrap();
    enqueue(&mut admin, "fl_cap", "e", 1, 600, 1);

    let holding = Arc::new(AtomicI64::new(0));
    let most_held = Arc::new(AtomicI64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    // Half the workers lease and finish in one transaction; half lease in
    // one and finish in the next, so that their leases are committed and
    // seen by the sampler below.
    let pool: Vec<_> = (0..8)
        .map(|w| {
            let (holding, most_held, stop) = (Arc::clone(&holding), Arc::clone(&most_held), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut client = connect(db);
                let mut processed = 0;
                while !stop.load(SeqCst) {
                    let n = if w % 2 == 0 {
                        round(&mut client, "fl_capped", Some("fl_cap"), 2, Some(&holding), Duration::from_millis(3))
                    } else {
                        let leased = client
                            .query("SELECT id::text, event_id FROM webhook_next(2, 'fl_capped', 'fl_cap')", &[])
                            .unwrap();
                        let now = holding.fetch_add(leased.len() as i64, SeqCst) + leased.len() as i64;
                        most_held.fetch_max(now, SeqCst);
                        std::thread::sleep(Duration::from_millis(3));
                        let mut tx = client.transaction().unwrap();
                        for row in &leased {
                            let (id, e): (String, String) = (row.get(0), row.get(1));
                            tx.execute(
                                "INSERT INTO done (consumer, provider, event_id) VALUES ('fl_capped', 'fl_cap', $1)",
                                &[&e],
                            )
                            .unwrap();
                            tx.execute("SELECT webhook_complete($1::text::uuid)", &[&id]).unwrap();
                        }
                        holding.fetch_sub(leased.len() as i64, SeqCst);
                        tx.commit().unwrap();
                        leased.len()
                    };
                    most_held.fetch_max(holding.load(SeqCst), SeqCst);
                    processed += n;
                    if n == 0 {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
                processed
            })
        })
        .collect();

    // The database's view, every few milliseconds: live leases committed.
    let mut most_live = 0;
    let mut samples = 0;
    while done(&mut admin, "fl_capped", "fl_cap") < 600 {
        let live: i64 = admin
            .query_one(
                "SELECT count(*) FROM webhook.inbox
                  WHERE consumer = 'fl_capped' AND status = 'leased' AND run_at > clock_timestamp()",
                &[],
            )
            .unwrap()
            .get(0);
        most_live = most_live.max(live);
        samples += 1;
        std::thread::sleep(Duration::from_millis(2));
    }
    stop.store(true, SeqCst);
    let processed: usize = pool.into_iter().map(|w| w.join().unwrap()).sum();
    assert_eq!(processed, 600);
    assert!(samples > 20, "too few samples to judge: {samples}");
    assert!(
        most_live <= 3,
        "the database saw {most_live} live leases under a cap of 3"
    );
    let most_held = most_held.load(SeqCst);
    assert!(
        most_held <= 3,
        "workers held {most_held} leases at once under a cap of 3"
    );
    assert!(
        most_held >= 2,
        "the cap was never approached ({most_held}): the test tests nothing"
    );
    let live: i64 = admin
        .query_one(
            "SELECT live_leases FROM webhook.limits_in_effect WHERE consumer = 'fl_capped'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(live, 0);
}

#[test]
fn a_rate_holds_within_ten_percent_over_twelve_seconds() {
    let _clock = alone();
    let db = db();
    let mut admin = connect(db);
    register(&mut admin, "fl_rate", &["fl_rated"], None);
    admin
        .query_one(
            "SELECT webhook_set_limit('fl_rated', rate => 50, burst => 4)",
            &[],
        )
        .unwrap();
    enqueue(&mut admin, "fl_rate", "e", 1, 2000, 1);

    let leased = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let pool: Vec<_> = (0..8)
        .map(|_| {
            let (leased, stop) = (Arc::clone(&leased), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut client = connect(db);
                while !stop.load(SeqCst) {
                    let n = round(
                        &mut client,
                        "fl_rated",
                        Some("fl_rate"),
                        5,
                        None,
                        Duration::ZERO,
                    );
                    leased.fetch_add(n, SeqCst);
                    if n == 0 {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(12));
    stop.store(true, SeqCst);
    let elapsed = started.elapsed().as_secs_f64();
    for w in pool {
        w.join().unwrap();
    }
    let leased = leased.load(SeqCst) as f64;
    let expected = 50.0 * elapsed;
    assert!(
        (leased - expected).abs() <= expected * 0.10,
        "{leased} leases in {elapsed:.1} s under 50/s (expected {expected:.0} ± 10 %)"
    );
}

#[test]
fn a_circuit_breaker_opens_lets_one_event_through_after_its_cooldown_and_closes_on_success() {
    let _clock = alone();
    let db = db();
    let mut admin = connect(db);
    register(&mut admin, "fl_brk", &["fl_fragile"], None);
    admin
        .query_one(
            "SELECT webhook_set_limit('fl_fragile', breaker_failures => 5, breaker_cooldown => '1 second')",
            &[],
        )
        .unwrap();
    enqueue(&mut admin, "fl_brk", "e", 1, 1000, 1);

    let down = Arc::new(AtomicBool::new(true));
    let stop = Arc::new(AtomicBool::new(false));
    let attempts: Arc<Mutex<Vec<(Instant, bool)>>> = Arc::default();
    let pool: Vec<_> = (0..8)
        .map(|_| {
            let (down, stop, attempts) = (Arc::clone(&down), Arc::clone(&stop), Arc::clone(&attempts));
            std::thread::spawn(move || {
                let mut client = connect(db);
                while !stop.load(SeqCst) {
                    // When the lease was asked for, not when it ended: an
                    // attempt leased before the breaker opened may finish
                    // after, on a loaded machine, and is no probe.
                    let asked = Instant::now();
                    let mut tx = client.transaction().unwrap();
                    let leased = tx
                        .query("SELECT id::text, event_id FROM webhook_next(1, 'fl_fragile', 'fl_brk')", &[])
                        .unwrap();
                    for row in &leased {
                        let (id, e): (String, String) = (row.get(0), row.get(1));
                        let failing = down.load(SeqCst);
                        if failing {
                            tx.execute("SELECT webhook_fail($1::text::uuid, 'downstream 503', interval '0')", &[&id])
                                .unwrap();
                        } else {
                            tx.execute(
                                "INSERT INTO done (consumer, provider, event_id) VALUES ('fl_fragile', 'fl_brk', $1)",
                                &[&e],
                            )
                            .unwrap();
                            tx.execute("SELECT webhook_complete($1::text::uuid)", &[&id]).unwrap();
                        }
                        attempts.lock().unwrap().push((asked, !failing));
                    }
                    tx.commit().unwrap();
                    if leased.is_empty() {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                }
            })
        })
        .collect();

    let state = |admin: &mut Client| -> String {
        admin
            .query_one(
                // No row until its first failure: closed.
                "SELECT coalesce((SELECT state::text FROM webhook.breakers WHERE consumer = 'fl_fragile'), 'closed')",
                &[],
            )
            .unwrap()
            .get(0)
    };
    wait_long("the breaker to open", || state(&mut admin) == "open");
    let opened = Instant::now();
    let evaluated = admin
        .query(
            "SELECT change FROM webhook_alerts_evaluate() WHERE rule = 'circuit_open'",
            &[],
        )
        .unwrap();
    assert_eq!(evaluated.len(), 1, "an open breaker raises an alert");
    let gauge: f64 = admin
        .query_one(
            "SELECT value FROM webhook_metrics('webhook_circuit_breaker_open') WHERE consumer = 'fl_fragile'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(gauge, 1.0, "and shows in the metrics");
    // Down for 3.5 cooldowns: each ends with one probe, which fails.
    std::thread::sleep(Duration::from_millis(3500));
    let failed_while_open = attempts
        .lock()
        .unwrap()
        .iter()
        .filter(|(asked, _)| *asked > opened)
        .count();
    assert!(
        (2..=4).contains(&failed_while_open),
        "{failed_while_open} attempts in 3.5 cooldowns of an open breaker: one probe per cooldown expected"
    );
    let failures_before: usize = attempts
        .lock()
        .unwrap()
        .iter()
        .filter(|(asked, _)| *asked <= opened)
        .count();
    assert!(
        failures_before <= 5 + 8,
        "{failures_before} failures before the breaker opened (5, and what was in flight)"
    );

    // The downstream recovers: the next probe succeeds, the breaker
    // closes, everything drains.
    down.store(false, SeqCst);
    wait_long("the breaker to close", || state(&mut admin) == "closed");
    wait_long("everything to drain", || {
        done(&mut admin, "fl_fragile", "fl_brk") == 1000
    });
    stop.store(true, SeqCst);
    for w in pool {
        w.join().unwrap();
    }
    let resolved = admin
        .query(
            "SELECT change FROM webhook_alerts_evaluate() WHERE rule = 'circuit_open'",
            &[],
        )
        .unwrap();
    assert_eq!(
        resolved.len(),
        1,
        "the alert resolves once the breaker closed"
    );
    assert_eq!(resolved[0].get::<_, String>(0), "resolved");
    let failures: i64 = admin
        .query_one("SELECT breaker_failures_now::bigint FROM webhook.limits_in_effect WHERE consumer = 'fl_fragile'", &[])
        .unwrap()
        .get(0);
    assert_eq!(failures, 0, "a success forgets the failures");
    let gauges: i64 = admin
        .query_one(
            "SELECT count(*) FROM webhook_metrics('webhook_circuit_breaker_open') WHERE consumer = 'fl_fragile'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(gauges, 0, "a closed breaker has no series");
}

#[test]
fn steering_is_for_operators_and_refuses_bad_arguments_with_their_own_sqlstates() {
    let _clock = beside_others();
    let db = db();
    let mut admin = connect(db);
    register(&mut admin, "fl_plain", &["fl_x"], None);
    ensure_role(&mut admin, "fl_app", true);
    ensure_role(&mut admin, "fl_ops", true);
    admin
        .batch_execute(
            "SELECT webhook_grant_app('fl_app'); SELECT webhook_grant_operator('fl_ops');",
        )
        .unwrap();
    let mut app = connect_as(db, "fl_app");
    for call in [
        "SELECT webhook_pause(consumer => 'fl_x')",
        "SELECT webhook_resume(consumer => 'fl_x')",
        "SELECT webhook_quarantine('fl_plain', 'c1')",
        "SELECT webhook_release('fl_plain', 'c1')",
        "SELECT webhook_set_limit('fl_x', max_leases => 1)",
        "SELECT * FROM webhook.pauses",
        "SELECT * FROM webhook.limits_in_effect",
    ] {
        let err = app.batch_execute(call).unwrap_err();
        assert_eq!(sql_state(&err), Some("42501"), "{call}: {}", message(&err));
    }
    let mut ops = connect_as(db, "fl_ops");
    ops.batch_execute(
        "SELECT webhook_pause(consumer => 'fl_x', reason => 'maintenance');
         SELECT webhook_set_limit('fl_x', max_leases => 2, rate => 10);
         SELECT * FROM webhook.paused; SELECT * FROM webhook.limits_in_effect;
         SELECT webhook_resume(consumer => 'fl_x');
         SELECT webhook_set_limit('fl_x');",
    )
    .unwrap();
    let who: i64 = admin
        .query_one(
            "SELECT count(*) FROM webhook.limits WHERE consumer = 'fl_x'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(who, 0, "every limit NULL removes the limit");

    for (call, state, names) in [
        (
            "SELECT webhook_pause()",
            "22004",
            "\"provider\" or \"consumer\"",
        ),
        (
            "SELECT webhook_pause(consumer => '')",
            "22023",
            "\"consumer\"",
        ),
        (
            "SELECT webhook_pause(provider => repeat('p', 256))",
            "22023",
            "\"provider\"",
        ),
        (
            "SELECT webhook_pause(consumer => 'c', reason => repeat('r', 3000))",
            "22023",
            "\"reason\"",
        ),
        (
            "SELECT webhook_resume()",
            "22004",
            "\"provider\" or \"consumer\"",
        ),
        (
            "SELECT webhook_quarantine(NULL, 'c1')",
            "22004",
            "\"provider\"",
        ),
        (
            "SELECT webhook_quarantine('fl_plain', NULL)",
            "22004",
            "\"entity_key\"",
        ),
        (
            "SELECT webhook_quarantine('fl_nobody', 'c1')",
            "42704",
            "\"provider\"",
        ),
        (
            "SELECT webhook_quarantine('fl_plain', 'c1')",
            "55000",
            "has no entity key",
        ),
        (
            "SELECT webhook_release('fl_plain', NULL)",
            "22004",
            "\"entity_key\"",
        ),
        (
            "SELECT webhook_set_limit(NULL, max_leases => 1)",
            "22004",
            "\"consumer\"",
        ),
        (
            "SELECT webhook_set_limit('c', max_leases => 0)",
            "22023",
            "\"max_leases\"",
        ),
        (
            "SELECT webhook_set_limit('c', rate => 0)",
            "22023",
            "\"rate\"",
        ),
        (
            "SELECT webhook_set_limit('c', rate => 'NaN')",
            "22023",
            "\"rate\"",
        ),
        (
            "SELECT webhook_set_limit('c', burst => 3)",
            "22023",
            "\"burst\" needs a rate",
        ),
        (
            "SELECT webhook_set_limit('c', rate => 5, burst => 0)",
            "22023",
            "\"burst\"",
        ),
        (
            "SELECT webhook_set_limit('c', breaker_failures => 0)",
            "22023",
            "\"breaker_failures\"",
        ),
        (
            "SELECT webhook_set_limit('c', breaker_cooldown => '1s')",
            "22023",
            "needs breaker_failures",
        ),
        (
            "SELECT webhook_set_limit('c', breaker_failures => 3, breaker_cooldown => '-1s')",
            "22023",
            "\"breaker_cooldown\"",
        ),
    ] {
        let err = admin.batch_execute(call).unwrap_err();
        assert_eq!(sql_state(&err), Some(state), "{call}: {}", message(&err));
        assert!(message(&err).contains(names), "{call}: {}", message(&err));
    }
}

/// Lease (and commit the lease) in one call: the events' providers.
fn lease(client: &mut Client, batch: i32, consumer: &str, provider: Option<&str>) -> Vec<String> {
    client
        .query(
            "SELECT provider FROM webhook_next($1, $2, $3)",
            &[&batch, &consumer, &provider],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

fn of(providers: &[String], provider: &str) -> usize {
    providers.iter().filter(|p| *p == provider).count()
}

#[test]
fn limits_of_one_provider_and_of_every_provider_hold_together_in_calls_without_a_provider() {
    let _clock = beside_others();
    let db = db();
    let mut admin = connect(db);
    register(&mut admin, "fl_ma", &["fl_mix"], None);
    register(&mut admin, "fl_mb", &["fl_mix"], None);
    enqueue(&mut admin, "fl_ma", "a", 1, 100, 1);
    enqueue(&mut admin, "fl_mb", "b", 1, 15, 1);

    // Only fl_ma's events are capped: calls of every provider (which take
    // the providers in turns) get two of them in all, and everything of
    // fl_mb's.
    admin
        .query_one(
            "SELECT webhook_set_limit('fl_mix', provider => 'fl_ma', max_leases => 2)",
            &[],
        )
        .unwrap();
    let (mut a, mut b) = (0, 0);
    for _ in 0..10 {
        let got = lease(&mut admin, 10, "fl_mix", None);
        (a, b) = (a + of(&got, "fl_ma"), b + of(&got, "fl_mb"));
    }
    assert_eq!((a, b), (2, 15));
    // Those two are live: no more of fl_ma, whoever asks.
    assert!(lease(&mut admin, 10, "fl_mix", Some("fl_ma")).is_empty());

    // A cap on the whole consumer as well: 5 at most (the 17 live already
    // were leased before it: see the docs on lowering a cap).
    enqueue(&mut admin, "fl_mb", "b", 16, 100, 1);
    admin
        .query_one("SELECT webhook_set_limit('fl_mix', max_leases => 5)", &[])
        .unwrap();
    let got = lease(&mut admin, 10, "fl_mix", Some("fl_mb"));
    assert_eq!(got.len(), 5, "{got:?}");
    assert!(
        lease(&mut admin, 10, "fl_mix", None).is_empty(),
        "the consumer's cap is full"
    );

    // Set again, a cap keeps counting the leases its slots hold.
    admin
        .batch_execute(
            "SELECT webhook_set_limit('fl_mix');
             SELECT webhook_set_limit('fl_mix', provider => 'fl_ma', max_leases => 3);",
        )
        .unwrap();
    let live: i64 = admin
        .query_one(
            "SELECT live_leases FROM webhook.limits_in_effect WHERE consumer = 'fl_mix' AND provider = 'fl_ma'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(live, 2);
    let got = lease(&mut admin, 10, "fl_mix", Some("fl_ma"));
    assert_eq!(
        got.len(),
        1,
        "fl_ma's new cap of 3, two of them live: {got:?}"
    );

    // A breaker of one provider's events leaves the other's flowing.
    admin
        .batch_execute(
            "SELECT webhook_set_limit('fl_mix', provider => 'fl_ma');
             SELECT webhook_set_limit('fl_mix', provider => 'fl_mb', breaker_failures => 1,
                                      breaker_cooldown => '1 hour');",
        )
        .unwrap();
    admin
        .query_one(
            "SELECT webhook_fail(id, 'down') FROM webhook_next(1, 'fl_mix', 'fl_mb')",
            &[],
        )
        .unwrap();
    let got = lease(&mut admin, 10, "fl_mix", None);
    assert_eq!((of(&got, "fl_ma"), of(&got, "fl_mb")), (10, 0), "{got:?}");
    assert!(lease(&mut admin, 10, "fl_mix", Some("fl_mb")).is_empty());
    assert!(admin
        .query_one(
            "SELECT webhook_resume(provider => 'fl_mb', consumer => 'fl_mix')",
            &[]
        )
        .unwrap()
        .get::<_, bool>(0));
    let got = lease(&mut admin, 10, "fl_mix", Some("fl_mb"));
    assert_eq!(got.len(), 10, "closed by webhook_resume: {got:?}");
}

#[test]
fn a_quarantine_of_one_consumer_leaves_the_others_and_a_release_keeps_what_another_still_covers() {
    let _clock = beside_others();
    let db = db();
    let mut admin = connect(db);
    register(&mut admin, "fl_qq", &["fl_q1", "fl_q2"], Some(false));
    enqueue(&mut admin, "fl_qq", "e", 1, 40, 4);
    let set_aside: i64 = admin
        .query_one("SELECT webhook_quarantine('fl_qq', 'c1', 'fl_q1')", &[])
        .unwrap()
        .get(0);
    assert_eq!(set_aside, 10, "c1's events of fl_q1 only");
    assert_eq!(
        lease(&mut admin, 100, "fl_q2", Some("fl_qq")).len(),
        40,
        "fl_q2 gets c1 too"
    );
    assert_eq!(lease(&mut admin, 100, "fl_q1", Some("fl_qq")).len(), 30);

    // Quarantined for every consumer as well: releasing fl_q1's
    // quarantine releases nothing while the other covers c1.
    admin
        .query_one("SELECT webhook_quarantine('fl_qq', 'c1')", &[])
        .unwrap();
    let released: i64 = admin
        .query_one("SELECT webhook_release('fl_qq', 'c1', 'fl_q1')", &[])
        .unwrap()
        .get(0);
    assert_eq!(released, 0);
    assert!(lease(&mut admin, 100, "fl_q1", Some("fl_qq")).is_empty());
    let released: i64 = admin
        .query_one("SELECT webhook_release('fl_qq', 'c1')", &[])
        .unwrap()
        .get(0);
    assert_eq!(released, 10);
    assert_eq!(lease(&mut admin, 100, "fl_q1", Some("fl_qq")).len(), 10);
}

#[test]
fn what_rolls_back_or_runs_out_gives_its_slot_and_counts_nothing() {
    let _clock = beside_others();
    let db = db();
    let mut admin = connect(db);
    register(&mut admin, "fl_undo", &["fl_undone"], None);
    enqueue(&mut admin, "fl_undo", "e", 1, 20, 1);
    admin
        .query_one(
            "SELECT webhook_set_limit('fl_undone', max_leases => 1, breaker_failures => 2,
                                      breaker_cooldown => '1 hour')",
            &[],
        )
        .unwrap();

    // A worker that leases under the cap and then fails halfway (its
    // transaction rolls back) leaves the slot free for the next.
    let mut worker = connect(db);
    let mut tx = worker.transaction().unwrap();
    let leased = tx
        .query(
            "SELECT id FROM webhook_next(5, 'fl_undone', 'fl_undo')",
            &[],
        )
        .unwrap();
    assert_eq!(leased.len(), 1, "a cap of one");
    tx.rollback().unwrap();
    assert_eq!(
        lease(&mut admin, 5, "fl_undone", Some("fl_undo")).len(),
        1,
        "the rolled-back lease freed its slot"
    );
    assert!(
        lease(&mut admin, 5, "fl_undone", Some("fl_undo")).is_empty(),
        "the committed lease holds it"
    );
    let live: i64 = admin
        .query_one(
            "SELECT live_leases FROM webhook.limits_in_effect WHERE consumer = 'fl_undone'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(live, 1);

    // A lease that runs out frees its slot: the next call leases again
    // under the same cap.
    admin
        .batch_execute(
            "UPDATE webhook.inbox SET run_at = clock_timestamp() - interval '1 second'
              WHERE consumer = 'fl_undone' AND status = 'leased'",
        )
        .unwrap();
    let again = lease(&mut admin, 5, "fl_undone", Some("fl_undo"));
    assert_eq!(again.len(), 1, "{again:?}");

    // Failures rolled back count nothing against the breaker; two
    // committed in a row open it.
    let failures = |admin: &mut Client| -> (String, i32) {
        let row = admin
            .query_one(
                "SELECT coalesce(max(state::text), 'closed'), coalesce(max(failures), 0)
                   FROM webhook.breakers WHERE consumer = 'fl_undone'",
                &[],
            )
            .unwrap();
        (row.get(0), row.get(1))
    };
    let id: String = admin
        .query_one(
            "SELECT claim_id::text FROM webhook.inbox
              WHERE consumer = 'fl_undone' AND status = 'leased' AND run_at > clock_timestamp()",
            &[],
        )
        .unwrap()
        .get(0);
    let mut tx = worker.transaction().unwrap();
    tx.execute("SELECT webhook_fail($1::text::uuid, 'boom')", &[&id])
        .unwrap();
    tx.rollback().unwrap();
    assert_eq!(
        failures(&mut admin),
        ("closed".into(), 0),
        "a rolled-back failure"
    );
    admin
        .execute(
            "SELECT webhook_fail($1::text::uuid, 'boom', interval '0')",
            &[&id],
        )
        .unwrap();
    assert_eq!(failures(&mut admin), ("closed".into(), 1));
    let next = lease(&mut admin, 5, "fl_undone", Some("fl_undo"));
    assert_eq!(next.len(), 1, "the failed lease freed the slot: {next:?}");
    let id: String = admin
        .query_one(
            "SELECT claim_id::text FROM webhook.inbox
              WHERE consumer = 'fl_undone' AND status = 'leased' AND run_at > clock_timestamp()",
            &[],
        )
        .unwrap()
        .get(0);
    admin
        .execute(
            "SELECT webhook_fail($1::text::uuid, 'boom', interval '0')",
            &[&id],
        )
        .unwrap();
    assert_eq!(failures(&mut admin), ("open".into(), 2));
    assert!(
        lease(&mut admin, 5, "fl_undone", Some("fl_undo")).is_empty(),
        "open"
    );
}

/// Two teams share a consumer whose limit (and breaker) is consumer-wide,
/// each scoped to its own provider: one team's failures open its own
/// provider's breaker, never the other's.
#[test]
fn one_providers_failures_never_open_another_providers_breaker() {
    let _clock = beside_others();
    let db = db();
    let mut admin = connect(db);
    register(&mut admin, "fl_team_a", &["fl_shared"], None);
    register(&mut admin, "fl_team_b", &["fl_shared"], None);
    admin
        .batch_execute(
            "SELECT webhook_set_limit('fl_shared', breaker_failures => 3, breaker_cooldown => '1 hour');",
        )
        .unwrap();
    ensure_role(&mut admin, "fl_team_a_app", true);
    ensure_role(&mut admin, "fl_team_b_app", true);
    admin
        .batch_execute(
            "SELECT webhook_grant_app('fl_team_a_app'); SELECT webhook_grant_app('fl_team_b_app');
             SELECT webhook_scope_app('fl_team_a_app', '{fl_team_a}');
             SELECT webhook_scope_app('fl_team_b_app', '{fl_team_b}');",
        )
        .unwrap();
    enqueue(&mut admin, "fl_team_a", "a", 1, 10, 10);
    enqueue(&mut admin, "fl_team_b", "b", 1, 10, 10);
    // Team A's downstream is broken: three of its events fail.
    let mut team_a = connect_as(db, "fl_team_a_app");
    for _ in 0..3 {
        let id: String = team_a
            .query_one(
                "SELECT id::text FROM webhook_next(1, 'fl_shared', 'fl_team_a')",
                &[],
            )
            .unwrap()
            .get(0);
        team_a
            .execute(
                "SELECT webhook_fail($1::text::uuid, 'downstream of team a is down')",
                &[&id],
            )
            .unwrap();
    }
    let states = |admin: &mut Client| -> Vec<(String, String)> {
        admin
            .query(
                "SELECT provider, state::text FROM webhook.breakers WHERE consumer = 'fl_shared' ORDER BY provider",
                &[],
            )
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect()
    };
    assert_eq!(
        states(&mut admin),
        [("fl_team_a".to_string(), "open".to_string())]
    );
    // Team A gets nothing; team B drains as before, and its success does
    // not close team A's breaker.
    assert!(lease(&mut team_a, 5, "fl_shared", Some("fl_team_a")).is_empty());
    let mut team_b = connect_as(db, "fl_team_b_app");
    for _ in 0..10 {
        let rows = team_b
            .query(
                "SELECT id::text FROM webhook_next(1, 'fl_shared', 'fl_team_b')",
                &[],
            )
            .unwrap();
        assert_eq!(
            rows.len(),
            1,
            "team B's events are leased while team A's breaker is open"
        );
        let id: String = rows[0].get(0);
        team_b
            .execute("SELECT webhook_complete($1::text::uuid)", &[&id])
            .unwrap();
    }
    assert_eq!(
        states(&mut admin),
        [("fl_team_a".to_string(), "open".to_string())]
    );
    // A call for any provider passes over team A's events only.
    enqueue(&mut admin, "fl_team_b", "b", 11, 12, 10);
    let any = lease(&mut admin, 10, "fl_shared", None);
    assert_eq!((of(&any, "fl_team_b"), of(&any, "fl_team_a")), (2, 0));
    let open = admin
        .query_one(
            "SELECT breaker_state::text FROM webhook.limits_in_effect WHERE consumer = 'fl_shared'",
            &[],
        )
        .unwrap()
        .get::<_, String>(0);
    assert_eq!(open, "open", "the limit shows its worst breaker");
    // Setting the limit again starts its breakers closed.
    admin
        .batch_execute("SELECT webhook_set_limit('fl_shared', breaker_failures => 3, breaker_cooldown => '1 hour')")
        .unwrap();
    assert!(states(&mut admin).is_empty());
}
