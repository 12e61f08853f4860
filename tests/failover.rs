//! Failover under traffic, on real servers: a primary and a streaming
//! standby made with `pg_basebackup -R`, handlers claiming deliveries,
//! a provider queueing into the inbox and workers draining it, all through
//! a connection string that lists both servers with
//! `target_session_attrs=read-write`. The primary is stopped the way a
//! power cut stops it (`-m immediate`) mid-traffic and the standby
//! promoted; every client reconnects to it and goes on, redelivering what
//! it had no answer for, as providers do.
//!
//! With synchronous replication (`remote_apply`), nothing acknowledged is
//! lost. With asynchronous replication, what was acknowledged but not yet
//! replicated is lost, and counted. In both, nothing is done twice and
//! nothing is left stuck. On a standby, reads work and writes are refused.
//!
//! Run by `make failover-test`, which gives it a directory and two ports:
//! FAILOVER_DIR, FAILOVER_PORT (the primary; the standby is the next).

#![cfg(feature = "client-tests")]

mod common;

use common::cluster::{bindir_of, fresh_dir, Cluster, StopOnDrop};
use common::traffic::{self, deliverer, worker, Tally};
use common::{message, sql_state, wait_for};
use postgres::config::TargetSessionAttrs;
use postgres::Config;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

const DB: &str = "failover";

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set: run `make failover-test`"))
}

fn bindir() -> PathBuf {
    bindir_of(
        &std::env::var("PG_CONFIG")
            .unwrap_or_else(|_| "/usr/lib/postgresql/15/bin/pg_config".into()),
    )
}

/// A cluster of the pair, ready to stream to a standby.
fn server(dir: &std::path::Path, port: u16) -> Cluster {
    Cluster {
        bindir: bindir(),
        data: dir.join("data"),
        port,
        options: "-c wal_level=replica -c max_wal_senders=4 -c hot_standby=on -c fsync=off".into(),
    }
}

/// A fresh primary with the extension in use, and its standby, both up.
struct Pair {
    primary: Cluster,
    standby: Cluster,
}

/// A fresh directory with a place for each server, the server's user's.
fn pair_dir(name: &str) -> PathBuf {
    let dir = fresh_dir(&PathBuf::from(env("FAILOVER_DIR")).join(name));
    for server in ["primary", "standby"] {
        fresh_dir(&dir.join(server));
    }
    dir
}

impl Pair {
    /// `offset`: which pair of ports from FAILOVER_PORT (each test its own).
    fn new(name: &str, offset: u16) -> Pair {
        Pair::of_edition(name, offset, false)
    }

    /// `portable`: the portable edition, from its plain script.
    fn of_edition(name: &str, offset: u16, portable: bool) -> Pair {
        let base: u16 = env("FAILOVER_PORT").parse().unwrap();
        let dir = pair_dir(name);
        let primary = server(&dir.join("primary"), base + 2 * offset);
        let standby = server(&dir.join("standby"), base + 2 * offset + 1);
        primary.init(&[]);
        primary.start();
        let mut admin = primary.connect("postgres");
        admin
            .batch_execute(&format!("CREATE DATABASE {DB}"))
            .unwrap();
        let mut c = primary.connect(DB);
        if portable {
            let port = primary.port.to_string();
            let script = common::portable_script().to_str().unwrap();
            primary.program(
                "psql",
                &[
                    "-X",
                    "-q",
                    "-v",
                    "ON_ERROR_STOP=1",
                    "-o",
                    "/dev/null",
                    "-h",
                    "127.0.0.1",
                    "-p",
                    &port,
                    "-U",
                    "postgres",
                    "-d",
                    DB,
                    "-f",
                    script,
                ],
            );
        } else {
            c.batch_execute("CREATE EXTENSION pg_webhook_inbox")
                .unwrap();
        }
        c.batch_execute(
            "
             SELECT webhook_register_provider('fo_claims', scheme => 'stripe', secret => 'whsec_failover');
             SELECT webhook_register_provider('fo_inbox', scheme => 'stripe', secret => 'whsec_failover',
                                              inbox => true);
",
        )
        .unwrap();
        c.batch_execute(traffic::EFFECTS).unwrap();
        primary.program(
            "pg_basebackup",
            &[
                "-h",
                "127.0.0.1",
                "-p",
                &primary.port.to_string(),
                "-U",
                "postgres",
                "-D",
                standby.data.to_str().unwrap(),
                "-R",
                "-X",
                "stream",
                // A checkpoint at once, not spread over minutes.
                "-c",
                "fast",
                "--no-sync",
            ],
        );
        standby.start();
        let pair = Pair { primary, standby };
        pair.wait_streaming();
        pair
    }

    /// Until pg_stat_replication on the primary shows a standby in `state`.
    fn wait_replication(&self, what: &str, condition: &str) {
        let mut c = self.primary.connect("postgres");
        let probe = format!("SELECT EXISTS (SELECT FROM pg_stat_replication WHERE {condition})");
        wait_for(what, || c.query_one(&probe, &[]).unwrap().get(0));
    }

    fn wait_streaming(&self) {
        self.wait_replication("the standby to stream", "state = 'streaming'");
    }

    /// Commits wait until the standby has applied them. Set on the primary
    /// only, after the base backup: a standby that copied it would, once
    /// promoted, wait forever for a standby of its own.
    fn make_synchronous(&self) {
        let mut c = self.primary.connect("postgres");
        for statement in [
            "ALTER SYSTEM SET synchronous_standby_names = '*'",
            "ALTER SYSTEM SET synchronous_commit = 'remote_apply'",
            "SELECT pg_reload_conf()",
        ] {
            c.batch_execute(statement).unwrap();
        }
        self.wait_replication("the standby to be synchronous", "sync_state = 'sync'");
    }

    /// The primary stopped as a power cut stops it, and the standby
    /// promoted a moment later; returns the time from the one to the other.
    fn fail_over(&self) -> Duration {
        let down = Instant::now();
        self.primary.stop("immediate");
        std::thread::sleep(Duration::from_millis(300));
        self.standby.promote();
        down.elapsed()
    }

    /// Both servers, the writable one found by libpq's rule.
    fn either(&self) -> Config {
        let mut c = Config::new();
        c.host("127.0.0.1")
            .port(self.primary.port)
            .host("127.0.0.1")
            .port(self.standby.port)
            .user("postgres")
            .dbname(DB)
            .target_session_attrs(TargetSessionAttrs::ReadWrite)
            .connect_timeout(Duration::from_secs(2));
        c
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        drop(StopOnDrop(vec![self.primary.clone(), self.standby.clone()]));
        // A passing test leaves nothing (see .ci/pg-temp); a failing one
        // keeps both clusters and their logs for inspection.
        if !std::thread::panicking() {
            let dir = self.primary.data.parent().unwrap().parent().unwrap();
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// What a failover did to the traffic.
#[derive(Debug)]
struct Figures {
    acknowledged: usize,
    lost: usize,
    doubled: usize,
    stuck: i64,
    leased_at_failover: usize,
    taken_again: i64,
    /// Requests that failed, by kind: each retried.
    failed: std::collections::BTreeMap<String, usize>,
    outage: Duration,
}

/// Of the events leased when the primary went, those processed at a later
/// attempt: their lease ran out and another worker took them.
fn taken_again(c: &mut postgres::Client, leased: &[String]) -> i64 {
    c.query_one(
        "SELECT count(*) FROM webhook.inbox WHERE status = 'processed' AND attempts > 1
            AND event_id = ANY ($1)",
        &[&leased],
    )
    .unwrap()
    .get(0)
}

fn failover_under_traffic(pair: &Pair) -> Figures {
    let stop = Arc::new(AtomicBool::new(false));
    let stop_workers = Arc::new(AtomicBool::new(false));
    let mut deliverers = Vec::new();
    for t in 0..3 {
        deliverers.push(deliverer(
            pair.either(),
            "fo_claims",
            false,
            format!("c{t}_"),
            Arc::clone(&stop),
        ));
    }
    for t in 0..2 {
        deliverers.push(deliverer(
            pair.either(),
            "fo_inbox",
            true,
            format!("q{t}_"),
            Arc::clone(&stop),
        ));
    }
    let workers: Vec<_> = (0..3)
        .map(|_| worker(pair.either(), "fo_inbox", Arc::clone(&stop_workers)))
        .collect();
    std::thread::sleep(Duration::from_secs(3));

    // A worker that leased a batch and is still at work when the primary
    // goes: its leases must run out and be taken again by the others.
    let leased: Vec<String> = pair
        .primary
        .connect(DB)
        .query(
            "SELECT event_id FROM webhook_next(5, 'default', 'fo_inbox', lease => '2 seconds')",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let outage = pair.fail_over();
    std::thread::sleep(Duration::from_secs(3));
    stop.store(true, SeqCst);
    let delivered = Tally::merge(deliverers.into_iter().map(|d| d.join().unwrap()));

    // Workers drain what is left, leases that ran out included.
    let mut c = pair.standby.connect(DB);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left: i64 = c
            .query_one(
                "SELECT count(*) FROM webhook.inbox WHERE status IN ('ready', 'leased')",
                &[],
            )
            .unwrap()
            .get(0);
        if left == 0 || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    stop_workers.store(true, SeqCst);
    let worked = Tally::merge(workers.into_iter().map(|w| w.join().unwrap()));
    let all = Tally::merge([delivered, worked]);
    let (lost, doubled, stuck) = traffic::outcome(&mut c, &all.acknowledged);
    let taken_again = taken_again(&mut c, &leased);
    Figures {
        acknowledged: all.acknowledged.len(),
        lost,
        doubled,
        stuck,
        leased_at_failover: leased.len(),
        taken_again,
        failed: all.failed,
        outage,
    }
}

#[test]
fn with_synchronous_replication_a_failover_loses_nothing_acknowledged_and_does_nothing_twice() {
    let started = Instant::now();
    let pair = Pair::new("sync", 0);
    eprintln!("pair up in {:?}", started.elapsed());
    pair.make_synchronous();
    let f = failover_under_traffic(&pair);
    eprintln!("failover, synchronous (remote_apply): {f:?}");
    assert!(f.acknowledged > 100, "traffic ran: {f:?}");
    assert!(
        f.failed.contains_key("connection"),
        "the failover interrupted requests: {f:?}"
    );
    assert!(f.outage < Duration::from_secs(30), "{f:?}");
    assert_eq!(f.lost, 0, "acknowledged and lost: {f:?}");
    assert_eq!(f.doubled, 0, "done twice: {f:?}");
    assert_eq!(f.stuck, 0, "left unfinished: {f:?}");
    assert!(f.leased_at_failover > 0, "{f:?}");
    assert_eq!(
        f.taken_again as usize, f.leased_at_failover,
        "every lease live at the failover ran out and was taken again: {f:?}"
    );
}

#[test]
fn with_asynchronous_replication_a_failover_does_nothing_twice_and_counts_what_it_lost() {
    let pair = Pair::new("async", 1);
    let f = failover_under_traffic(&pair);
    eprintln!("failover, asynchronous: {f:?}");
    assert!(f.acknowledged > 100, "traffic ran: {f:?}");
    assert!(
        f.failed.contains_key("connection"),
        "the failover interrupted requests: {f:?}"
    );
    assert_eq!(f.doubled, 0, "done twice: {f:?}");
    assert_eq!(f.stuck, 0, "left unfinished: {f:?}");
}

/// On a standby (read-only, in recovery): verification, reports and
/// metrics answer; every function that writes is refused with 25006,
/// naming itself and the standby.
#[test]
fn a_standby_answers_reads_and_refuses_writes() {
    standby_answers_reads_and_refuses_writes(Pair::new("standby", 2));
}

#[test]
fn a_standby_of_the_portable_edition_answers_reads_and_refuses_writes() {
    standby_answers_reads_and_refuses_writes(Pair::of_edition("standby-portable", 3, true));
}

fn standby_answers_reads_and_refuses_writes(pair: Pair) {
    let mut p = pair.primary.connect(DB);
    p.batch_execute(
        "SELECT webhook_claim('fo_claims', 'evt_before', 'invoice.paid', '{\"id\": 1}'::jsonb, 'sig',
                              complete_on_commit => true);
         SELECT webhook_enqueue('fo_inbox', 'evt_queued', 'invoice.paid', '{\"id\": 2}'::jsonb);
         CREATE ROLE fo_role;",
    )
    .unwrap();
    let lsn: String = p
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .unwrap()
        .get(0);
    let mut s = pair.standby.connect(DB);
    wait_for("the standby to catch up", || {
        s.query_one(
            "SELECT pg_last_wal_replay_lsn() >= $1::text::pg_lsn",
            &[&lsn],
        )
        .unwrap()
        .get(0)
    });
    let body = r#"{"id":"evt_verify","type":"invoice.paid"}"#;
    let headers = common::sign::stripe(body, common::sign::now(), "whsec_failover");
    let verified: bool = s
        .query_one(
            "SELECT webhook_verify('stripe', $1::text::jsonb, $2::text, ARRAY['whsec_failover'])",
            &[&headers.to_string(), &body],
        )
        .unwrap_or_else(|e| panic!("on the standby, webhook_verify: {}", message(&e)))
        .get(0);
    assert!(verified, "a genuine delivery verifies on the standby");
    let reads = [
        "SELECT verify_hmac('whsec', 'body'::bytea, repeat('a', 64))::text",
        "SELECT count(*)::text FROM webhook.events WHERE event_id = 'evt_before'",
        "SELECT count(*)::text FROM webhook.inbox_stats",
        "SELECT count(*)::text FROM webhook.provider_stats",
        "SELECT count(*)::text FROM webhook.provider_summary",
        "SELECT count(*)::text FROM webhook.dead_letters",
        "SELECT count(*)::text FROM webhook.stuck_claims",
        "SELECT count(*)::text FROM webhook.deliveries",
        "SELECT count(*)::text FROM webhook.archive_partitions",
        "SELECT count(*)::text FROM webhook.paused",
        "SELECT count(*)::text FROM webhook_metrics()",
        "SELECT left(webhook_metrics_prometheus(), 6)",
    ];
    for read in reads {
        if let Err(e) = s.query_one(read, &[]) {
            panic!("on the standby, {read}: {}", message(&e));
        }
    }
    let receive = format!(
        "SELECT status FROM webhook_receive('fo_claims', '{}'::jsonb, '{body}'::bytea)",
        headers
    );
    let claim_id = "(SELECT claim_id FROM webhook.events WHERE event_id = 'evt_before')";
    let complete = format!("SELECT webhook_complete({claim_id})");
    let fail = format!("SELECT webhook_fail({claim_id}, 'boom')");
    let extend = format!("SELECT webhook_extend({claim_id}, '1 minute')");
    let complete_batch = format!("SELECT webhook_complete_batch(ARRAY[{claim_id}])");
    let fail_batch = format!("SELECT webhook_fail_batch(ARRAY[{claim_id}], 'boom')");
    let request = "'0190d6a0-0000-7000-8000-000000000001'::uuid";
    let checkpoint = format!("SELECT idempotency_checkpoint({request}, 'charged')");
    let finish = format!("SELECT idempotency_finish({request}, 200)");
    let fail_request = format!("SELECT idempotency_fail({request}, 'boom')");
    // Every function of the API that writes, with arguments it accepts.
    let writes: Vec<(&str, &str)> = vec![
        (
            "webhook_claim",
            "SELECT webhook_claim('fo_claims', 'evt_standby', 'invoice.paid', '{}'::jsonb, 'sig')",
        ),
        ("webhook_receive", &receive),
        (
            "webhook_enqueue",
            "SELECT webhook_enqueue('fo_inbox', 'evt_standby', 'invoice.paid', '{}'::jsonb)",
        ),
        (
            "webhook_enqueue_batches",
            "CALL webhook_enqueue_batches('fo_inbox', '[]'::jsonb)",
        ),
        (
            "webhook_enqueue_polled",
            "SELECT webhook_enqueue_polled('fo_inbox', 'evt_polled', 'invoice.paid', '{}'::jsonb)",
        ),
        (
            "webhook_next",
            "SELECT * FROM webhook_next(1, 'default', 'fo_inbox')",
        ),
        ("webhook_complete", &complete),
        ("webhook_fail", &fail),
        ("webhook_extend", &extend),
        ("webhook_complete_batch", &complete_batch),
        ("webhook_fail_batch", &fail_batch),
        (
            "webhook_requeue",
            "SELECT webhook_requeue('fo_claims', 'evt_before')",
        ),
        ("webhook_requeue_dead", "SELECT webhook_requeue_dead()"),
        (
            "idempotency_begin",
            "SELECT * FROM idempotency_begin('api', 'key-1', 'fp')",
        ),
        ("idempotency_checkpoint", &checkpoint),
        ("idempotency_finish", &finish),
        ("idempotency_fail", &fail_request),
        ("idempotency_purge", "SELECT idempotency_purge()"),
        (
            "webhook_register_provider",
            "SELECT webhook_register_provider('fo_new', scheme => 'stripe', secret => 'x')",
        ),
        (
            "webhook_add_secret",
            "SELECT webhook_add_secret('fo_claims', 'whsec_next')",
        ),
        (
            "webhook_retire_secret",
            "SELECT webhook_retire_secret('fo_claims', 'whsec_failover')",
        ),
        ("webhook_pause", "SELECT webhook_pause('fo_inbox')"),
        ("webhook_resume", "SELECT webhook_resume('fo_inbox')"),
        (
            "webhook_quarantine",
            "SELECT webhook_quarantine('fo_inbox', 'cus_1')",
        ),
        (
            "webhook_release",
            "SELECT webhook_release('fo_inbox', 'cus_1')",
        ),
        (
            "webhook_set_limit",
            "SELECT webhook_set_limit('default', 'fo_inbox', max_leases => 5)",
        ),
        (
            "webhook_set_filter",
            "SELECT webhook_set_filter('fo_inbox', event_types => ARRAY['invoice.paid'])",
        ),
        (
            "webhook_reset_watermark",
            "SELECT webhook_reset_watermark('fo_inbox', 'cus_1')",
        ),
        (
            "webhook_backfill",
            "SELECT webhook_backfill('fo_inbox', 'default', now() - interval '1 day')",
        ),
        (
            "webhook_replay",
            "SELECT webhook_replay('fo_inbox', dry_run => false)",
        ),
        (
            "webhook_replay_pause",
            "SELECT webhook_replay_pause(gen_random_uuid())",
        ),
        (
            "webhook_replay_resume",
            "SELECT webhook_replay_resume(gen_random_uuid())",
        ),
        (
            "webhook_replay_cancel",
            "SELECT webhook_replay_cancel(gen_random_uuid())",
        ),
        ("webhook_purge", "SELECT webhook_purge()"),
        (
            "webhook_create_partitions",
            "SELECT webhook_create_partitions()",
        ),
        ("webhook_metrics_rollup", "SELECT webhook_metrics_rollup()"),
        (
            "webhook_alerts_evaluate",
            "SELECT webhook_alerts_evaluate()",
        ),
        (
            "webhook_alert_acknowledge",
            "SELECT webhook_alert_acknowledge(1)",
        ),
        (
            "webhook_alert_silence",
            "SELECT webhook_alert_silence(1, '1 hour')",
        ),
        ("webhook_grant_app", "SELECT webhook_grant_app('fo_role')"),
        (
            "webhook_grant_monitor",
            "SELECT webhook_grant_monitor('fo_role')",
        ),
        (
            "webhook_grant_operator",
            "SELECT webhook_grant_operator('fo_role')",
        ),
        (
            "webhook_grant_viewer",
            "SELECT webhook_grant_viewer('fo_role')",
        ),
        (
            "webhook_scope_app",
            "SELECT webhook_scope_app('fo_role', ARRAY['fo_inbox'])",
        ),
        (
            "webhook_unscope_app",
            "SELECT webhook_unscope_app('fo_role')",
        ),
        ("webhook_set_slot", "SELECT webhook_set_slot(0, 1)"),
    ];
    // The list is the API's: every volatile function but the reads above
    // and the registry's trigger. A new function that writes fails here
    // until it refuses on a standby and is listed.
    let volatile: Vec<String> = s
        .query(
            "SELECT DISTINCT p.proname::text
               FROM pg_proc p
              -- The API, whichever way it was installed (the portable
              -- edition's plain script makes no extension).
              WHERE p.pronamespace = 'public'::regnamespace AND p.provolatile = 'v'
                AND (p.proname LIKE 'webhook\\_%' OR p.proname LIKE 'idempotency\\_%')
                AND p.proname NOT IN ('webhook_verify', 'webhook_verify_detail', 'webhook_metrics',
                                      'webhook_metrics_prometheus', 'webhook_registry_changed')
              ORDER BY 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let mut listed: Vec<String> = writes.iter().map(|(f, _)| f.to_string()).collect();
    listed.sort();
    assert_eq!(
        listed, volatile,
        "the functions that write, and those this test calls"
    );
    let mut refusals = Vec::new();
    for (function, write) in &writes {
        let err = s
            .query(*write, &[])
            .expect_err(&format!("on the standby, {write} was not refused"));
        assert_eq!(sql_state(&err), Some("25006"), "{write}: {}", message(&err));
        let text = message(&err);
        assert!(
            text.starts_with(&format!("{function}: this server is a standby")),
            "{write}: the refusal names the function and the standby: {text}"
        );
        refusals.push(format!("{write}: {text}"));
    }
    eprintln!("refusals on the standby: {refusals:#?}");
}

/// The example receivers and workers themselves through a failover with
/// synchronous replication: Python (psycopg, libpq underneath) and Rust
/// (tokio-postgres), whose drivers take a connection string listing both
/// servers with `target_session_attrs=read-write`. (node-postgres takes
/// one host: behind a failover it needs an address that follows the
/// primary, as docs/high-availability.md says.) Providers deliver over
/// HTTP and redeliver anything not answered 2xx; the workers send their
/// emails to a stand-in of the email API.
///
/// Nothing acknowledged is lost, no order or email is doubled, nothing is
/// left in the inbox, and no GitHub delivery (sent once, as GitHub sends
/// it) is refused: the receivers wait out the failover within their
/// retry budget. Run by `make examples-test`, which builds the examples.
#[test]
fn examples_through_a_failover_lose_nothing_acknowledged_and_do_nothing_twice() {
    use common::examples::{outcome, wait_drained, Delivered, Shop, SHOP};
    let pair = Pair::new("examples", 4);
    pair.make_synchronous();
    pair.primary.connect(DB).batch_execute(SHOP).unwrap();
    let url = format!(
        "postgresql://{}@127.0.0.1:{},127.0.0.1:{}/{DB}?target_session_attrs=read-write&connect_timeout=2",
        common::examples::APP_ROLE,
        pair.primary.port,
        pair.standby.port
    );
    let mut shop = Shop::start(&["python", "rust"], &url, "3 seconds");
    let stop = Arc::new(AtomicBool::new(false));
    let providers = shop.providers(&stop);
    std::thread::sleep(Duration::from_secs(4));

    // A worker that leased a batch and is still at work when the primary
    // goes: its leases run out and the examples' workers take them. (Its
    // events are queued with the lease, or the examples' workers, idle,
    // would have them first.)
    let mut held = pair.primary.connect(DB);
    let mut tx = held.transaction().unwrap();
    tx.batch_execute(
        "SELECT webhook_enqueue('github', 'gh-held-' || i, 'issues', '{\"action\": \"held\"}'::jsonb)
           FROM generate_series(1, 5) AS i",
    )
    .unwrap();
    let leased: Vec<String> = tx
        .query(
            "SELECT event_id FROM webhook_next(5, 'default', 'github', lease => '3 seconds')",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    tx.commit().unwrap();
    let outage = pair.fail_over();
    let mut c = pair.standby.connect(DB);
    let promoted: std::time::SystemTime = c.query_one("SELECT now()", &[]).unwrap().get(0);
    std::thread::sleep(Duration::from_secs(4));
    stop.store(true, SeqCst);
    let delivered = Delivered::merge(providers.into_iter().map(|p| p.join().unwrap()));
    shop.assert_running();

    wait_drained(
        &mut c,
        "the examples' workers to drain the inbox on the new primary",
    );
    let taken_again = taken_again(&mut c, &leased);
    let o = outcome(&mut c, &delivered, &shop.email);
    // Orders by who made them, all and since the promotion: each example
    // found the new primary through its connection string.
    let by_language: Vec<(String, i64, i64)> = c
        .query(
            "SELECT language, count(*), count(*) FILTER (WHERE created_at > $1)
               FROM orders GROUP BY 1 ORDER BY 1",
            &[&promoted],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    shop.stop();
    eprintln!(
        "examples through a failover (synchronous): outage {outage:?}; {o:?}; answers other than 2xx \
         (each redelivered) {:?}; GitHub deliveries refused at their only attempt {}; \
         leased at the failover {}, taken again {taken_again}; orders by language (all, since the promotion) {by_language:?}",
        delivered.refused,
        delivered.github_dropped,
        leased.len()
    );
    assert_eq!(
        by_language.len(),
        4,
        "every receiver and worker did work: {by_language:?}"
    );
    assert!(
        by_language.iter().all(|(_, _, after)| *after > 0),
        "every receiver and worker worked on the new primary: {by_language:?}"
    );
    o.assert_clean();
    assert!(
        !delivered.refused.contains_key("500"),
        "a failover is never a 500: {:?}",
        delivered.refused
    );
    assert_eq!(
        delivered.github_dropped, 0,
        "a GitHub delivery refused during the failover is an event lost: {:?}",
        delivered.refused
    );
    assert!(!leased.is_empty());
    assert_eq!(
        taken_again as usize,
        leased.len(),
        "every lease live at the failover ran out and was taken again"
    );
}

/// webhook-ingress (INGRESS_BIN) through a failover with synchronous
/// replication, connected to both servers with
/// `target_session_attrs=read-write`: senders deliver new signed events
/// and redeliver each until it is answered 2xx, as providers do, while the
/// primary is stopped immediately and the standby promoted. Every event
/// answered 2xx is on the new primary, stored and queued exactly once; the
/// ingress rides out the failover within its requests' deadline (no 5xx
/// but 503). Run by `make failover-test`, which builds the ingress.
#[test]
fn the_ingress_through_a_failover_loses_nothing_acknowledged() {
    use common::ingress::{header_list, http, Ingress};
    let pair = Pair::new("ingress", 5);
    pair.make_synchronous();
    let role = "failover_ingress";
    let mut c = pair.primary.connect(DB);
    common::ensure_role(&mut c, role, true);
    c.batch_execute(&format!("SELECT webhook_grant_app('{role}')"))
        .unwrap();
    let conninfo = format!(
        "host=127.0.0.1,127.0.0.1 port={},{} dbname={DB} user={role} \
         target_session_attrs=read-write connect_timeout=2",
        pair.primary.port, pair.standby.port
    );
    let ingress = Arc::new(Ingress::start_with(&conninfo, &[]));
    let stop = Arc::new(AtomicBool::new(false));
    let senders: Vec<_> = (0..4)
        .map(|s| {
            let (ingress, stop) = (Arc::clone(&ingress), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut acknowledged = Vec::new();
                let mut answers = std::collections::BTreeMap::<u16, usize>::new();
                let mut i = 0;
                while !stop.load(SeqCst) {
                    let id = format!("evt_ingress_{s}_{i}");
                    let body = format!(r#"{{"id":"{id}","type":"invoice.paid","data":{{}}}}"#);
                    let headers = header_list(&common::sign::stripe(
                        &body,
                        common::sign::now(),
                        "whsec_failover",
                    ));
                    let deadline = Instant::now() + Duration::from_secs(60);
                    loop {
                        assert!(Instant::now() < deadline, "{id} never answered 2xx");
                        let status = http(
                            ingress.addr,
                            "POST",
                            "/webhooks/fo_inbox",
                            &headers,
                            body.as_bytes(),
                        )
                        .map_or(0, |a| a.status);
                        *answers.entry(status).or_default() += 1;
                        if (200..300).contains(&status) {
                            acknowledged.push(id);
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(100));
                    }
                    i += 1;
                }
                (acknowledged, answers)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    let outage = pair.fail_over();
    std::thread::sleep(Duration::from_secs(3));
    stop.store(true, SeqCst);
    let mut acknowledged = Vec::new();
    let mut answers = std::collections::BTreeMap::<u16, usize>::new();
    for sender in senders {
        let (ids, by_status) = sender.join().unwrap();
        acknowledged.extend(ids);
        for (status, n) in by_status {
            *answers.entry(status).or_default() += n;
        }
    }
    let mut c = pair.standby.connect(DB);
    let stored: i64 = c
        .query_one(
            "SELECT count(*) FROM webhook.events WHERE provider = 'fo_inbox' AND event_id = ANY ($1)",
            &[&acknowledged],
        )
        .unwrap()
        .get(0);
    let queued: i64 = c
        .query_one(
            "SELECT count(*) FROM webhook.inbox WHERE provider = 'fo_inbox' AND event_id = ANY ($1)",
            &[&acknowledged],
        )
        .unwrap()
        .get(0);
    let after: i64 = c
        .query_one(
            "SELECT count(*) FROM webhook.events WHERE provider = 'fo_inbox'
                AND event_id LIKE 'evt_ingress_%'",
            &[],
        )
        .unwrap()
        .get(0);
    eprintln!(
        "the ingress through a failover (synchronous): outage {outage:?}; {} events acknowledged, \
         {stored} of them on the new primary, {queued} queued; answers by status {answers:?}",
        acknowledged.len()
    );
    assert!(
        acknowledged.len() > 20,
        "traffic ran: {}",
        acknowledged.len()
    );
    assert_eq!(
        stored as usize,
        acknowledged.len(),
        "nothing acknowledged is lost"
    );
    assert_eq!(queued, stored, "each queued once");
    assert_eq!(
        after as usize,
        acknowledged.len(),
        "nothing stored twice or unacknowledged"
    );
    assert!(
        !answers.keys().any(|s| *s >= 500 && *s != 503),
        "no 5xx but 503: {answers:?}"
    );
    let logs = ingress.logs();
    drop(ingress);
    assert!(!logs.contains("\"level\":\"error\""), "{logs}");
}
