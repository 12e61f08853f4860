//! Metrics over time: what the rollup counts is exactly what committed,
//! whatever runs beside it (transactions still writing, a report holding
//! the archive, attempts outliving several rollups, a prepared
//! transaction, handlers rolling back at random), and what the export
//! says.
#![cfg(feature = "client-tests")]

mod common;
use common::sign::{now, stripe};
use common::*;
use postgres::Client;
use std::time::Duration;

const DB: &str = "pgwi_metrics";

/// A counter since counting began (0 when never seen).
fn total(client: &mut Client, provider: &str, consumer: &str, metric: &str, label: &str) -> i64 {
    client
        .query_one(
            "SELECT coalesce(sum(count), 0)::bigint FROM webhook.metric_totals
              WHERE provider = $1 AND consumer = $2 AND metric = $3 AND label = $4",
            &[&provider, &consumer, &metric, &label],
        )
        .unwrap()
        .get(0)
}

/// The observations of a histogram, all buckets together, and their sum.
fn histogram(client: &mut Client, provider: &str, consumer: &str, metric: &str) -> (i64, f64) {
    let row = client
        .query_one(
            "SELECT coalesce(sum(count), 0)::bigint, coalesce(sum(sum), 0) FROM webhook.metric_totals
              WHERE provider = $1 AND consumer = $2 AND metric = $3",
            &[&provider, &consumer, &metric],
        )
        .unwrap();
    (row.get(0), row.get(1))
}

/// One series of webhook_metrics(), by its Prometheus name and labels.
fn series(
    client: &mut Client,
    metric: &str,
    provider: &str,
    consumer: &str,
    label_value: Option<&str>,
) -> Option<f64> {
    client
        .query_opt(
            "SELECT value FROM webhook_metrics()
              WHERE metric = $1 AND provider = $2 AND consumer = $3 AND label_value IS NOT DISTINCT FROM $4",
            &[&metric, &provider, &consumer, &label_value],
        )
        .unwrap()
        .map(|r| r.get(0))
}

fn setup() -> (std::sync::MutexGuard<'static, ()>, Client) {
    // Each test counts what it did against the database's totals, and the
    // rollup is one for the whole database: one test at a time.
    let guard = one_at_a_time();
    let db = database(DB);
    (guard, connect(db))
}

fn claim_one(client: &mut Client, provider: &str, event_id: &str) -> Claim {
    claim_in(client, provider, event_id, None).unwrap()
}

#[test]
fn a_known_mix_of_deliveries_is_counted_by_provider_consumer_status_and_reason() {
    let (_one, mut c) = setup();
    c.batch_execute(
        "SELECT webhook_register_provider('mix_signed', scheme => 'stripe', secret => 'whsec_mix');
         SELECT webhook_register_provider('mix_queue', scheme => 'stripe', secret => 'whsec_q',
                                          inbox => true, consumers => ARRAY['billing', 'audit']);",
    )
    .unwrap();
    settle(&mut c);

    // Claims: three new events completed, two duplicates, one failed then
    // retried and completed, one failed for good (dead).
    for e in ["m1", "m2", "m3"] {
        assert_eq!(
            deliver(&mut c, "mix_claims", e, Duration::ZERO),
            Answer::Done
        );
    }
    for e in ["m1", "m2"] {
        assert_eq!(
            deliver(&mut c, "mix_claims", e, Duration::ZERO),
            Answer::Duplicate
        );
    }
    let first = claim_one(&mut c, "mix_claims", "m4");
    c.execute("SELECT webhook_fail($1::text::uuid, 'boom')", &[&first.id])
        .unwrap();
    assert_eq!(
        deliver(&mut c, "mix_claims", "m4", Duration::ZERO),
        Answer::Done
    );
    let doomed = claim_one(&mut c, "mix_claims", "m5");
    c.execute(
        "SELECT webhook_fail($1::text::uuid, 'bad data', permanent => true)",
        &[&doomed.id],
    )
    .unwrap();

    // Signed deliveries through webhook_receive: one good, two forged.
    let body = payload("s1");
    let good = receive(
        &mut c,
        "mix_signed",
        &stripe(&body, now(), "whsec_mix"),
        body.as_bytes(),
    )
    .unwrap();
    c.execute(
        "SELECT webhook_complete($1::text::uuid)",
        &[&good.get::<_, String>("id_text")],
    )
    .unwrap();
    for forged in ["f1", "f2"] {
        let body = payload(forged);
        let row = receive(
            &mut c,
            "mix_signed",
            &stripe(&body, now(), "whsec_wrong"),
            body.as_bytes(),
        )
        .unwrap();
        assert_eq!(row.get::<_, i32>("http_status"), 401, "{forged}");
    }

    // The inbox: four events for two consumers. billing completes all;
    // audit completes two, fails one to retry later, parks one as dead.
    for e in ["q1", "q2", "q3", "q4"] {
        let body = payload(e);
        let row = receive(
            &mut c,
            "mix_queue",
            &stripe(&body, now(), "whsec_q"),
            body.as_bytes(),
        )
        .unwrap();
        assert_eq!(row.get::<_, String>("status"), "queued");
    }
    assert_eq!(
        work_once(&mut c, "mix_queue", "billing", 10).unwrap().len(),
        4
    );
    let leases: Vec<String> = c
        .query(
            "SELECT id::text FROM webhook_next(4, 'audit', 'mix_queue')",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(leases.len(), 4);
    c.execute("SELECT webhook_complete($1::text::uuid)", &[&leases[0]])
        .unwrap();
    c.execute("SELECT webhook_complete($1::text::uuid)", &[&leases[1]])
        .unwrap();
    c.execute(
        "SELECT webhook_fail($1::text::uuid, 'later')",
        &[&leases[2]],
    )
    .unwrap();
    c.execute(
        "SELECT webhook_fail($1::text::uuid, 'never', permanent => true)",
        &[&leases[3]],
    )
    .unwrap();

    settle(&mut c);
    let t = |c: &mut Client, p: &str, consumer: &str, m: &str, l: &str| total(c, p, consumer, m, l);
    assert_eq!(t(&mut c, "mix_claims", "", "deliveries", "claimed"), 5);
    assert_eq!(t(&mut c, "mix_claims", "", "deliveries", "retry"), 1);
    assert_eq!(t(&mut c, "mix_claims", "", "deliveries", "duplicate"), 2);
    assert_eq!(t(&mut c, "mix_claims", "", "completions", ""), 4);
    assert_eq!(t(&mut c, "mix_claims", "", "failures", ""), 2);
    assert_eq!(t(&mut c, "mix_claims", "", "dead_letters", ""), 1);
    assert_eq!(
        histogram(&mut c, "mix_claims", "", "attempts"),
        (4, 5.0),
        "m4 took two attempts"
    );
    assert_eq!(
        histogram(&mut c, "mix_claims", "", "processing").0,
        6,
        "every attempt that ended"
    );
    assert_eq!(t(&mut c, "mix_signed", "", "deliveries", "claimed"), 1);
    assert_eq!(t(&mut c, "mix_signed", "", "deliveries", "rejected"), 2);
    assert_eq!(
        t(&mut c, "mix_signed", "", "rejections", "bad_signature"),
        2
    );
    assert_eq!(t(&mut c, "mix_queue", "", "deliveries", "queued"), 4);
    assert_eq!(t(&mut c, "mix_queue", "billing", "completions", ""), 4);
    assert_eq!(t(&mut c, "mix_queue", "audit", "completions", ""), 2);
    assert_eq!(t(&mut c, "mix_queue", "audit", "failures", ""), 2);
    assert_eq!(t(&mut c, "mix_queue", "audit", "dead_letters", ""), 1);
    assert_eq!(t(&mut c, "mix_queue", "billing", "failures", ""), 0);
    assert_eq!(histogram(&mut c, "mix_queue", "billing", "latency").0, 4);

    // The same through webhook_metrics(), labels and gauges included.
    let s = |c: &mut Client, m: &str, p: &str, consumer: &str, l: Option<&str>| {
        series(c, m, p, consumer, l)
    };
    assert_eq!(
        s(
            &mut c,
            "webhook_deliveries_total",
            "mix_claims",
            "",
            Some("duplicate")
        ),
        Some(2.0)
    );
    assert_eq!(
        s(
            &mut c,
            "webhook_rejections_total",
            "mix_signed",
            "",
            Some("bad_signature")
        ),
        Some(2.0)
    );
    assert_eq!(
        s(
            &mut c,
            "webhook_completions_total",
            "mix_queue",
            "audit",
            None
        ),
        Some(2.0)
    );
    assert_eq!(
        s(
            &mut c,
            "webhook_dead_letters_total",
            "mix_queue",
            "audit",
            None
        ),
        Some(1.0)
    );
    assert_eq!(
        s(
            &mut c,
            "webhook_latency_seconds_count",
            "mix_queue",
            "billing",
            None
        ),
        Some(4.0)
    );
    assert_eq!(
        s(
            &mut c,
            "webhook_latency_seconds_bucket",
            "mix_queue",
            "billing",
            Some("+Inf")
        ),
        Some(4.0)
    );
    assert_eq!(
        s(
            &mut c,
            "webhook_attempts_bucket",
            "mix_claims",
            "",
            Some("1")
        ),
        Some(3.0)
    );
    assert_eq!(
        s(
            &mut c,
            "webhook_attempts_bucket",
            "mix_claims",
            "",
            Some("2")
        ),
        Some(4.0),
        "cumulative"
    );
    assert_eq!(
        s(
            &mut c,
            "webhook_inbox_events",
            "mix_queue",
            "audit",
            Some("dead")
        ),
        Some(1.0)
    );
    assert_eq!(
        s(
            &mut c,
            "webhook_inbox_events",
            "mix_queue",
            "audit",
            Some("scheduled")
        ),
        Some(1.0),
        "backing off"
    );
    assert_eq!(
        s(
            &mut c,
            "webhook_inbox_events",
            "mix_queue",
            "audit",
            Some("ready")
        ),
        Some(0.0)
    );

    // And in the text format, every family with its TYPE, every label bounded.
    let text: String = c
        .query_one("SELECT webhook_metrics_prometheus()", &[])
        .unwrap()
        .get(0);
    assert!(
        text.contains("# TYPE webhook_latency_seconds histogram\n"),
        "{text}"
    );
    assert!(
        text.contains("webhook_deliveries_total{provider=\"mix_claims\",status=\"duplicate\"} 2\n"),
        "{text}"
    );
    assert!(
        text.contains("webhook_completions_total{provider=\"mix_queue\",consumer=\"audit\"} 2\n"),
        "{text}"
    );
    assert!(
        !text.contains("m1") && !text.contains("q1"),
        "no event id is ever a label"
    );
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let (name_labels, value) = line.rsplit_once(' ').unwrap();
        assert!(value == "+Inf" || value.parse::<f64>().is_ok(), "{line}");
        assert!(name_labels.starts_with("webhook_"), "{line}");
    }
}

#[test]
fn a_rolled_back_claim_or_lease_is_never_counted() {
    let (_one, mut c) = setup();
    settle(&mut c);
    let mut tx = c.transaction().unwrap();
    let claim = claim_in(&mut tx, "rb_claims", "r1", None).unwrap();
    tx.execute("SELECT webhook_complete($1::text::uuid)", &[&claim.id])
        .unwrap();
    tx.rollback().unwrap();

    enqueue_many(&mut c, "rb_queue", "r", 3);
    let mut tx = c.transaction().unwrap();
    for row in tx
        .query(
            "SELECT id::text FROM webhook_next(3, 'default', 'rb_queue')",
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
    tx.rollback().unwrap();

    settle(&mut c);
    assert_eq!(total(&mut c, "rb_claims", "", "deliveries", "claimed"), 0);
    assert_eq!(total(&mut c, "rb_claims", "", "completions", ""), 0);
    assert_eq!(total(&mut c, "rb_queue", "", "deliveries", "queued"), 3);
    assert_eq!(total(&mut c, "rb_queue", "default", "completions", ""), 0);

    // The same events done for real are counted once.
    assert_eq!(
        deliver(&mut c, "rb_claims", "r1", Duration::ZERO),
        Answer::Done
    );
    assert_eq!(
        work_once(&mut c, "rb_queue", "default", 10).unwrap().len(),
        3
    );
    settle(&mut c);
    assert_eq!(total(&mut c, "rb_claims", "", "completions", ""), 1);
    assert_eq!(total(&mut c, "rb_queue", "default", "completions", ""), 3);
    assert_eq!(
        histogram(&mut c, "rb_queue", "default", "attempts"),
        (3, 3.0),
        "a rolled-back lease is no attempt"
    );
}

#[test]
fn a_transaction_still_writing_holds_the_count_back_until_it_commits() {
    let (_one, mut c) = setup();
    let db = database(DB);
    settle(&mut c);
    let mut writer = connect(db);
    writer.batch_execute("BEGIN").unwrap();
    let held = claim_in(&mut writer, "hold_claims", "h1", None).unwrap();
    writer
        .execute("SELECT webhook_complete($1::text::uuid)", &[&held.id])
        .unwrap();
    // Committed after the writer began: counted only once the bound passes
    // the writer, never skipped.
    assert_eq!(
        deliver(&mut c, "hold_claims", "h2", Duration::ZERO),
        Answer::Done
    );
    for _ in 0..3 {
        c.query_one("SELECT webhook_metrics_rollup()", &[]).unwrap();
    }
    assert_eq!(
        total(&mut c, "hold_claims", "", "deliveries", "claimed"),
        0,
        "held back by the writer"
    );
    let writer_began: std::time::SystemTime = writer.query_one("SELECT now()", &[]).unwrap().get(0);
    let until: std::time::SystemTime = c
        .query_one("SELECT counted_until FROM webhook.metric_marks", &[])
        .unwrap()
        .get(0);
    assert!(
        until <= writer_began,
        "the bound stays at the writer's start"
    );

    writer.batch_execute("COMMIT").unwrap();
    settle(&mut c);
    assert_eq!(total(&mut c, "hold_claims", "", "deliveries", "claimed"), 2);
    assert_eq!(total(&mut c, "hold_claims", "", "completions", ""), 2);
}

#[test]
fn a_report_holding_the_archive_does_not_hold_the_count_back() {
    let (_one, mut c) = setup();
    let db = database(DB);
    let mut report = connect(db);
    report
        .batch_execute(
            "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM webhook.delivery_log;",
        )
        .unwrap();
    assert_eq!(
        deliver(&mut c, "report_claims", "p1", Duration::ZERO),
        Answer::Done
    );
    // settle() would time out if the idle report held the bound.
    settle(&mut c);
    assert_eq!(total(&mut c, "report_claims", "", "completions", ""), 1);
    report.batch_execute("COMMIT").unwrap();
}

#[test]
fn a_prepared_transaction_holds_the_count_back_until_it_is_committed() {
    let (_one, mut c) = setup();
    let db = database(DB);
    settle(&mut c);
    let mut writer = connect(db);
    writer.batch_execute("BEGIN").unwrap();
    let claim = claim_in(&mut writer, "prep_claims", "x1", None).unwrap();
    writer
        .execute("SELECT webhook_complete($1::text::uuid)", &[&claim.id])
        .unwrap();
    writer
        .batch_execute("PREPARE TRANSACTION 'metrics_prepared'")
        .unwrap();
    assert_eq!(
        deliver(&mut c, "prep_claims", "x2", Duration::ZERO),
        Answer::Done
    );
    for _ in 0..3 {
        c.query_one("SELECT webhook_metrics_rollup()", &[]).unwrap();
    }
    assert_eq!(total(&mut c, "prep_claims", "", "deliveries", "claimed"), 0);
    c.batch_execute("COMMIT PREPARED 'metrics_prepared'")
        .unwrap();
    settle(&mut c);
    assert_eq!(total(&mut c, "prep_claims", "", "deliveries", "claimed"), 2);
    assert_eq!(total(&mut c, "prep_claims", "", "completions", ""), 2);
}

#[test]
fn an_attempt_that_outlives_several_rollups_is_counted_once_when_it_ends() {
    let (_one, mut c) = setup();
    settle(&mut c);
    // A claim committed unfinished (its work runs outside the transaction).
    let claim = claim_one(&mut c, "long_claims", "l1");
    settle(&mut c);
    settle(&mut c);
    assert_eq!(total(&mut c, "long_claims", "", "completions", ""), 0);
    let open = series(
        &mut c,
        "webhook_oldest_unfinished_claim_seconds",
        "long_claims",
        "",
        None,
    );
    assert!(open.is_some(), "the open claim is a gauge");
    c.execute("SELECT webhook_complete($1::text::uuid)", &[&claim.id])
        .unwrap();
    settle(&mut c);
    settle(&mut c);
    assert_eq!(total(&mut c, "long_claims", "", "completions", ""), 1);
    assert_eq!(
        series(
            &mut c,
            "webhook_oldest_unfinished_claim_seconds",
            "long_claims",
            "",
            None
        ),
        None
    );

    // A lease held across rollups, one that ran out and was leased again.
    enqueue_many(&mut c, "long_queue", "l", 2);
    let held: String = c
        .query_one(
            "SELECT id::text FROM webhook_next(1, 'default', 'long_queue')",
            &[],
        )
        .unwrap()
        .get(0);
    let lapsing: String = c
        .query_one(
            "SELECT id::text FROM webhook_next(1, 'default', 'long_queue', lease => '1 second')",
            &[],
        )
        .unwrap()
        .get(0);
    settle(&mut c);
    std::thread::sleep(Duration::from_millis(1100));
    let again: String = c
        .query_one(
            "SELECT id::text FROM webhook_next(1, 'default', 'long_queue')",
            &[],
        )
        .unwrap()
        .get(0);
    assert_ne!(again, lapsing);
    settle(&mut c);
    assert_eq!(
        total(&mut c, "long_queue", "default", "failures", ""),
        1,
        "the lease that ran out"
    );
    for lease in [&held, &again] {
        c.execute("SELECT webhook_complete($1::text::uuid)", &[lease])
            .unwrap();
    }
    settle(&mut c);
    settle(&mut c);
    assert_eq!(total(&mut c, "long_queue", "default", "completions", ""), 2);
    assert_eq!(
        histogram(&mut c, "long_queue", "default", "attempts"),
        (2, 3.0)
    );
    assert_eq!(
        count(
            &mut c,
            "SELECT count(*) FROM webhook.metric_open WHERE provider LIKE 'long_%'"
        ),
        0,
        "nothing left open"
    );
}

#[test]
fn handlers_and_workers_rolling_back_at_random_are_counted_exactly() {
    let (_one, mut c) = setup();
    let db = database(DB);
    settle(&mut c);
    enqueue_many(&mut c, "storm_queue", "s", 600);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // A rollup running all along, as a scraping exporter would.
    let roller = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut r = connect(db);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                r.query_one("SELECT webhook_metrics_rollup()", &[]).unwrap();
                std::thread::sleep(Duration::from_millis(3));
            }
        })
    };
    let handlers: Vec<_> = (0..6u64)
        .map(|t| {
            std::thread::spawn(move || {
                let mut h = connect(db);
                let (mut committed, mut seed) = (0i64, 0x9e37_79b9 ^ (t + 1));
                let mut coin = || {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    seed % 4 == 0
                };
                for i in 0..150 {
                    let mut tx = h.transaction().unwrap();
                    let claim =
                        claim_in(&mut tx, "storm_claims", &format!("t{t}-{i}"), None).unwrap();
                    tx.execute("SELECT webhook_complete($1::text::uuid)", &[&claim.id])
                        .unwrap();
                    if coin() {
                        tx.rollback().unwrap();
                    } else {
                        tx.commit().unwrap();
                        committed += 1;
                    }
                    let mut tx = h.transaction().unwrap();
                    let leased = tx
                        .query(
                            "SELECT id::text FROM webhook_next(2, 'default', 'storm_queue')",
                            &[],
                        )
                        .unwrap();
                    for row in &leased {
                        tx.execute(
                            "SELECT webhook_complete($1::text::uuid)",
                            &[&row.get::<_, String>(0)],
                        )
                        .unwrap();
                    }
                    if coin() {
                        tx.rollback().unwrap();
                    } else {
                        tx.commit().unwrap();
                    }
                }
                committed
            })
        })
        .collect();
    let committed: i64 = handlers.into_iter().map(|h| h.join().unwrap()).sum();
    while !work_once(&mut c, "storm_queue", "default", 100)
        .unwrap()
        .is_empty()
    {}
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    roller.join().unwrap();
    settle(&mut c);
    settle(&mut c);
    assert!(committed > 500 && committed < 900, "{committed}");
    assert_eq!(
        total(&mut c, "storm_claims", "", "deliveries", "claimed"),
        committed
    );
    assert_eq!(
        total(&mut c, "storm_claims", "", "completions", ""),
        committed
    );
    assert_eq!(
        total(&mut c, "storm_queue", "default", "completions", ""),
        600
    );
    assert_eq!(
        histogram(&mut c, "storm_queue", "default", "latency").0,
        600
    );
}

#[test]
fn a_quantile_is_read_from_the_minutes_and_bad_arguments_are_refused() {
    let (_one, mut c) = setup();
    settle(&mut c);
    for e in 0..20 {
        deliver(&mut c, "quantile_claims", &format!("qq{e}"), Duration::ZERO);
    }
    settle(&mut c);
    let p50: f64 = c
        .query_one(
            "SELECT webhook_metric_quantile(0.5, 'processing', provider => 'quantile_claims')",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(p50 > 0.0 && p50 <= 0.1, "a handler of no work: {p50}");
    let none: Option<f64> = c
        .query_one(
            "SELECT webhook_metric_quantile(0.5, 'latency', provider => 'nobody')",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(none, None);
    for (sql, state, words) in [
        (
            "SELECT webhook_metric_quantile(1.5, 'latency')",
            "22023",
            "\"quantile\"",
        ),
        (
            "SELECT webhook_metric_quantile(0.5, 'deliveries')",
            "22023",
            "\"metric\"",
        ),
    ] {
        let err = c.query_one(sql, &[]).unwrap_err();
        assert_eq!(sql_state(&err), Some(state), "{sql}");
        assert!(message(&err).contains(words), "{sql}: {}", message(&err));
    }
}

#[test]
fn minutes_past_the_retention_are_deleted_and_the_totals_kept() {
    let (_one, mut c) = setup();
    settle(&mut c);
    c.batch_execute(
        "INSERT INTO webhook.metric_minutes (minute, provider, consumer, metric, label, count)
         VALUES (date_trunc('minute', now() - interval '3 hours'), 'old_claims', '', 'deliveries', 'claimed', 5),
                (date_trunc('minute', now() - interval '30 minutes'), 'old_claims', '', 'deliveries', 'claimed', 7);
         INSERT INTO webhook.metric_totals (provider, consumer, metric, label, count)
         VALUES ('old_claims', '', 'deliveries', 'claimed', 12);
         SET webhook.metrics_retention = '2h';",
    )
    .unwrap();
    deliver(&mut c, "old_claims", "o1", Duration::ZERO);
    settle(&mut c);
    c.batch_execute("RESET webhook.metrics_retention").unwrap();
    let kept: Vec<i64> = c
        .query(
            "SELECT count FROM webhook.metric_minutes WHERE provider = 'old_claims' AND metric = 'deliveries'
              ORDER BY minute",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        kept.first(),
        Some(&7),
        "the minute 3 hours ago is gone: {kept:?}"
    );
    assert_eq!(kept.iter().sum::<i64>(), 8);
    assert_eq!(total(&mut c, "old_claims", "", "deliveries", "claimed"), 13);
}

#[test]
fn after_a_long_pause_each_rollup_counts_ten_minutes_and_the_lag_says_so() {
    let (_one, mut c) = setup();
    settle(&mut c);
    c.batch_execute(
        "UPDATE webhook.metric_marks SET counted_until = counted_until - interval '25 minutes'",
    )
    .unwrap();
    let step = |c: &mut Client| -> f64 {
        c.query_one("SELECT webhook_metrics_rollup()", &[]).unwrap();
        c.query_one(
            "SELECT extract(epoch FROM clock_timestamp() - counted_until)::float8 FROM webhook.metric_marks",
            &[],
        )
        .unwrap()
        .get(0)
    };
    let lag = step(&mut c);
    assert!((14.0 * 60.0..16.0 * 60.0).contains(&lag), "{lag}");
    let reported = series(&mut c, "webhook_metrics_lag_seconds", "", "", None).unwrap();
    assert!(
        reported >= 4.0 * 60.0,
        "the gauge shows the lag: {reported}"
    );
    settle(&mut c);
    assert!(step(&mut c) < 60.0);
}

#[test]
fn a_claim_that_completes_on_commit_is_counted_from_its_archive_row_alone() {
    let (_one, mut c) = setup();
    settle(&mut c);
    let claim_sql =
        "SELECT id::text FROM webhook_claim('coc_claims', $1, 'invoice.paid', '{}'::jsonb, NULL,
                                                      complete_on_commit => true)";
    // Committed: completed with its transaction.
    for e in ["c1", "c2", "c3"] {
        let mut tx = c.transaction().unwrap();
        tx.query_one(claim_sql, &[&e]).unwrap();
        tx.commit().unwrap();
    }
    // Rolled back: nothing.
    let mut tx = c.transaction().unwrap();
    tx.query_one(claim_sql, &[&"c4"]).unwrap();
    tx.rollback().unwrap();
    // Failed before its commit: a failure, not a completion.
    let mut tx = c.transaction().unwrap();
    let id: String = tx.query_one(claim_sql, &[&"c5"]).unwrap().get(0);
    tx.execute("SELECT webhook_fail($1::text::uuid, 'bad')", &[&id])
        .unwrap();
    tx.commit().unwrap();
    let marked = count(
        &mut c,
        "SELECT count(*) FROM webhook.delivery_log WHERE provider = 'coc_claims' AND claim_completes",
    );
    assert_eq!(
        marked, 4,
        "each committed claim that completes on commit says so"
    );
    settle(&mut c);
    assert_eq!(total(&mut c, "coc_claims", "", "deliveries", "claimed"), 4);
    assert_eq!(total(&mut c, "coc_claims", "", "completions", ""), 3);
    assert_eq!(total(&mut c, "coc_claims", "", "failures", ""), 1);
    assert_eq!(histogram(&mut c, "coc_claims", "", "attempts"), (3, 3.0));
    assert_eq!(histogram(&mut c, "coc_claims", "", "latency").0, 3);
    // A claim with a lease is not marked, and is counted once completed.
    let claim = claim_one(&mut c, "coc_claims", "c6");
    assert_eq!(
        count(&mut c, &format!("SELECT count(*) FROM webhook.delivery_log WHERE id = '{}' AND claim_completes IS NULL", claim.id)),
        1
    );
    c.execute("SELECT webhook_complete($1::text::uuid)", &[&claim.id])
        .unwrap();
    settle(&mut c);
    assert_eq!(total(&mut c, "coc_claims", "", "completions", ""), 4);
}

#[test]
fn one_family_is_read_alone_and_an_unknown_one_is_refused() {
    let (_one, mut c) = setup();
    deliver(&mut c, "family_claims", "f1", Duration::ZERO);
    settle(&mut c);
    let names: Vec<String> = c
        .query(
            "SELECT DISTINCT metric FROM webhook_metrics('webhook_latency_seconds') ORDER BY 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        names,
        [
            "webhook_latency_seconds_bucket",
            "webhook_latency_seconds_count",
            "webhook_latency_seconds_sum"
        ]
    );
    let all: i64 = count(&mut c, "SELECT count(*) FROM webhook_metrics()");
    let parts: i64 = count(
        &mut c,
        "SELECT count(*) FROM webhook._metric_families() f, webhook_metrics(f.family)",
    );
    assert_eq!(parts, all, "the families together are everything");
    let err = c
        .query(
            "SELECT * FROM webhook_metrics('webhook_latency_seconds_bucket')",
            &[],
        )
        .unwrap_err();
    assert_eq!(sql_state(&err), Some("22023"));
    assert!(message(&err).contains("\"family\""), "{}", message(&err));
}

/// A failure is counted by when it was written, not by when its
/// transaction began: a worker idle in a transaction while a rollup passes,
/// then failing its lease, is counted all the same (and a claim's
/// two-phase failure the same way).
#[test]
fn a_failure_written_after_a_rollup_passed_its_transactions_start_is_counted() {
    let (_one, mut c) = setup();
    let db = database(DB);
    enqueue_many(&mut c, "late_queue", "l", 1);
    let lease: String = c
        .query_one(
            "SELECT id::text FROM webhook_next(1, 'default', 'late_queue')",
            &[],
        )
        .unwrap()
        .get(0);
    let claim = claim_one(&mut c, "late_claims", "l1");
    let mut worker = connect(db);
    worker.batch_execute("BEGIN; SELECT 1;").unwrap();
    // Idle, holding no transaction id: the rollups pass its start.
    std::thread::sleep(Duration::from_millis(20));
    settle(&mut c);
    worker
        .execute(
            "SELECT webhook_fail($1::text::uuid, 'downstream refused')",
            &[&lease],
        )
        .unwrap();
    worker
        .execute(
            "SELECT webhook_fail($1::text::uuid, 'downstream refused')",
            &[&claim.id],
        )
        .unwrap();
    worker.batch_execute("COMMIT").unwrap();
    settle(&mut c);
    assert_eq!(total(&mut c, "late_queue", "default", "failures", ""), 1);
    assert_eq!(total(&mut c, "late_claims", "", "failures", ""), 1);
}

/// Every transition a row can make twice between two rollups: what each
/// attempt ended in is counted once, whatever put the row back to work
/// before the rollup looked (a replay, a requeue), and whether the first
/// attempt was seen open by an earlier rollup or not.
#[test]
fn outcomes_undone_before_a_rollup_are_counted_exactly_once() {
    let (_one, mut c) = setup();
    settle(&mut c);
    let lease = |c: &mut Client, provider: &str| -> String {
        c.query_one(
            "SELECT id::text FROM webhook_next(1, 'default', $1)",
            &[&provider],
        )
        .unwrap()
        .get(0)
    };
    let run = |c: &mut Client, sql: &str, id: &str| {
        c.execute(sql, &[&id]).unwrap();
    };
    let replay = |c: &mut Client, provider: &str, status: &str| {
        c.execute(
            "SELECT webhook_replay($1, statuses => ARRAY[$2], reason => 'metrics: ' || $2 || ' ' || clock_timestamp(),
                                   dry_run => false)",
            &[&provider, &status],
        )
        .unwrap();
    };
    let complete = "SELECT webhook_complete($1::text::uuid)";
    let park = "SELECT webhook_fail($1::text::uuid, 'broken for good', permanent => true)";
    // Replays are of registered providers.
    c.batch_execute(
        "SELECT webhook_register_provider(p, scheme => 'stripe', secret => 'whsec_' || p, inbox => true)
           FROM unnest('{twice_done,twice_open,twice_counted,twice_dead}'::text[]) p",
    )
    .unwrap();

    // Completed, replayed, completed again: two completions.
    enqueue_many(&mut c, "twice_done", "d", 1);
    let first = lease(&mut c, "twice_done");
    run(&mut c, complete, &first);
    replay(&mut c, "twice_done", "processed");
    let second = lease(&mut c, "twice_done");
    run(&mut c, complete, &second);
    settle(&mut c);
    assert_eq!(total(&mut c, "twice_done", "default", "completions", ""), 2);
    assert_eq!(histogram(&mut c, "twice_done", "default", "latency").0, 2);

    // The same, the first lease seen open by a rollup before it completed.
    enqueue_many(&mut c, "twice_open", "o", 1);
    let first = lease(&mut c, "twice_open");
    settle(&mut c);
    run(&mut c, complete, &first);
    replay(&mut c, "twice_open", "processed");
    let second = lease(&mut c, "twice_open");
    run(&mut c, complete, &second);
    settle(&mut c);
    assert_eq!(total(&mut c, "twice_open", "default", "completions", ""), 2);

    // Counted before the replay: not counted again.
    enqueue_many(&mut c, "twice_counted", "c", 1);
    let first = lease(&mut c, "twice_counted");
    run(&mut c, complete, &first);
    settle(&mut c);
    replay(&mut c, "twice_counted", "processed");
    settle(&mut c);
    assert_eq!(
        total(&mut c, "twice_counted", "default", "completions", ""),
        1
    );

    // Parked, requeued, completed: one dead letter, one failure, one completion.
    enqueue_many(&mut c, "twice_requeued", "r", 1);
    let first = lease(&mut c, "twice_requeued");
    run(&mut c, park, &first);
    c.execute("SELECT webhook_requeue('twice_requeued', 'r1')", &[])
        .unwrap();
    let second = lease(&mut c, "twice_requeued");
    run(&mut c, complete, &second);
    settle(&mut c);
    assert_eq!(
        (
            total(&mut c, "twice_requeued", "default", "dead_letters", ""),
            total(&mut c, "twice_requeued", "default", "failures", ""),
            total(&mut c, "twice_requeued", "default", "completions", ""),
        ),
        (1, 1, 1)
    );

    // Parked, replayed, parked again: two dead letters.
    enqueue_many(&mut c, "twice_dead", "x", 1);
    let first = lease(&mut c, "twice_dead");
    run(&mut c, park, &first);
    replay(&mut c, "twice_dead", "dead");
    let second = lease(&mut c, "twice_dead");
    run(&mut c, park, &second);
    settle(&mut c);
    assert_eq!(
        total(&mut c, "twice_dead", "default", "dead_letters", ""),
        2
    );

    // Parked and counted, then requeued: not counted again.
    enqueue_many(&mut c, "twice_seen_dead", "s", 1);
    let first = lease(&mut c, "twice_seen_dead");
    run(&mut c, park, &first);
    settle(&mut c);
    c.execute("SELECT webhook_requeue('twice_seen_dead', 's1')", &[])
        .unwrap();
    settle(&mut c);
    assert_eq!(
        total(&mut c, "twice_seen_dead", "default", "dead_letters", ""),
        1
    );

    // A claimed event parked, requeued and claimed again by its next
    // delivery, which completes: one dead letter, one completion.
    let claim = claim_one(&mut c, "twice_claims", "k1");
    run(&mut c, park, &claim.id);
    c.execute("SELECT webhook_requeue('twice_claims', 'k1')", &[])
        .unwrap();
    let again = claim_one(&mut c, "twice_claims", "k1");
    assert_eq!(again.status, "retry");
    run(&mut c, complete, &again.id);
    settle(&mut c);
    assert_eq!(
        (
            total(&mut c, "twice_claims", "", "dead_letters", ""),
            total(&mut c, "twice_claims", "", "completions", ""),
        ),
        (1, 1)
    );
    assert_eq!(
        count(&mut c, "SELECT count(*) FROM webhook.metric_held"),
        0,
        "nothing left held"
    );
}

/// Names no registered provider owns: past the limit they are one series,
/// (other), and a name quiet for the retention gives its place back.
#[test]
fn invented_provider_names_cannot_grow_the_metrics() {
    let (_one, mut c) = setup();
    settle(&mut c);
    let unregistered_series = |c: &mut Client| -> i64 {
        count(
            c,
            "SELECT count(DISTINCT provider) FROM webhook.metric_totals t
              WHERE provider <> '(other)' AND NOT EXISTS (SELECT FROM webhook.providers p WHERE p.name = t.provider)",
        )
    };
    let before = unregistered_series(&mut c);
    // The DBA's setting (superuser-only), for the database.
    c.batch_execute(&format!(
        "ALTER DATABASE {DB} SET webhook.metrics_unregistered_providers = {}",
        before + 5
    ))
    .unwrap();
    let mut c = connect(DB);
    c.batch_execute(
        "SELECT webhook_claim('made-up-' || i, 'e', 'x', '{}'::jsonb, NULL) FROM generate_series(1, 300) i;
         SELECT webhook_enqueue('made-up-q' || i, 'e', 'x', '{}'::jsonb) FROM generate_series(1, 50) i;",
    )
    .unwrap();
    settle(&mut c);
    assert_eq!(
        unregistered_series(&mut c),
        before + 5,
        "five more names, no more"
    );
    assert!(total(&mut c, "(other)", "", "deliveries", "claimed") >= 295);
    let scrape: String = c
        .query_one("SELECT webhook_metrics_prometheus()", &[])
        .unwrap()
        .get(0);
    assert!(scrape.contains("provider=\"(other)\""));
    assert!(!scrape.contains("made-up-300"));
    let gauges = count(
        &mut c,
        "SELECT count(*) FROM webhook_metrics('webhook_inbox_events') WHERE provider LIKE 'made-up-q%'",
    );
    assert!(
        gauges <= 5 * 5,
        "the inbox gauges of invented names are (other) too: {gauges}"
    );
    // A name quiet for the retention (its minutes gone) loses its series
    // and gives its place back.
    let quiet: String = c
        .query_one(
            "SELECT min(provider) FROM webhook.metric_totals t
              WHERE provider LIKE 'made-up-%' AND NOT EXISTS (SELECT FROM webhook.providers p WHERE p.name = t.provider)",
            &[],
        )
        .unwrap()
        .get(0);
    c.execute(
        "DELETE FROM webhook.metric_minutes WHERE provider = $1",
        &[&quiet],
    )
    .unwrap();
    c.execute(
        "DELETE FROM webhook.metric_open WHERE provider = $1",
        &[&quiet],
    )
    .unwrap();
    settle(&mut c);
    assert_eq!(
        count(
            &mut c,
            &format!("SELECT count(*) FROM webhook.metric_totals WHERE provider = '{quiet}'")
        ),
        0
    );
    c.batch_execute("SELECT webhook_claim('made-up-late', 'e', 'x', '{}'::jsonb, NULL)")
        .unwrap();
    settle(&mut c);
    assert_eq!(
        total(&mut c, "made-up-late", "", "deliveries", "claimed"),
        1,
        "its place was taken by the next name"
    );
    c.batch_execute(&format!(
        "ALTER DATABASE {DB} RESET webhook.metrics_unregistered_providers"
    ))
    .unwrap();
}
