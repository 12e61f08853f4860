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

use common::traffic::{self, deliverer, worker, Tally};
use common::{as_root, message, server_command, sql_state, wait_for};
use postgres::config::TargetSessionAttrs;
use postgres::{Client, Config, NoTls};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

const DB: &str = "failover";

/// One PostgreSQL cluster of the pair.
#[derive(Clone)]
struct Server {
    data: PathBuf,
    port: u16,
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set: run `make failover-test`"))
}

fn bindir() -> PathBuf {
    let pg_config = std::env::var("PG_CONFIG")
        .unwrap_or_else(|_| "/usr/lib/postgresql/15/bin/pg_config".into());
    let out = std::process::Command::new(pg_config)
        .arg("--bindir")
        .output()
        .expect("run pg_config");
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// A server program, as the server's user; it must succeed.
fn server_program(program: &str, args: &[&str]) -> std::process::Output {
    let out = server_command(bindir().join(program))
        .args(args)
        .output()
        .expect("run a server program");
    assert!(
        out.status.success(),
        "{program} {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

impl Server {
    fn opts(&self) -> String {
        format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c max_connections=100 \
             -c wal_level=replica -c max_wal_senders=4 -c hot_standby=on -c fsync=off",
            self.port,
            self.data.parent().unwrap().display()
        )
    }

    fn start(&self) {
        let log = self.data.parent().unwrap().join("server.log");
        server_program(
            "pg_ctl",
            &[
                "-D",
                self.data.to_str().unwrap(),
                "-l",
                log.to_str().unwrap(),
                "-o",
                &self.opts(),
                "-w",
                "start",
            ],
        );
    }

    fn stop(&self, mode: &str) {
        server_program(
            "pg_ctl",
            &["-D", self.data.to_str().unwrap(), "-m", mode, "stop"],
        );
    }

    fn promote(&self) {
        server_program(
            "pg_ctl",
            &["-D", self.data.to_str().unwrap(), "-w", "promote"],
        );
    }

    fn config(&self, db: &str) -> Config {
        let mut c = Config::new();
        c.host("127.0.0.1")
            .port(self.port)
            .user("postgres")
            .dbname(db)
            .connect_timeout(Duration::from_secs(5));
        c
    }

    fn connect(&self, db: &str) -> Client {
        self.config(db)
            .connect(NoTls)
            .unwrap_or_else(|e| panic!("connect to port {}: {e}", self.port))
    }
}

/// A fresh primary with the extension in use, and its standby, both up.
struct Pair {
    primary: Server,
    standby: Server,
}

/// A fresh directory with a place for each server, the server's user's.
fn fresh_dir(name: &str) -> PathBuf {
    let dir = PathBuf::from(env("FAILOVER_DIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    for server in ["primary", "standby"] {
        std::fs::create_dir_all(dir.join(server)).unwrap();
    }
    if as_root() {
        let status = std::process::Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(&dir)
            .status()
            .unwrap();
        assert!(status.success());
    }
    dir
}

impl Pair {
    /// `offset`: which pair of ports from FAILOVER_PORT (each test its own).
    fn new(name: &str, offset: u16) -> Pair {
        let base: u16 = env("FAILOVER_PORT").parse().unwrap();
        let dir = fresh_dir(name);
        let primary = Server {
            data: dir.join("primary").join("data"),
            port: base + 2 * offset,
        };
        let standby = Server {
            data: dir.join("standby").join("data"),
            port: base + 2 * offset + 1,
        };
        server_program(
            "initdb",
            &[
                "-D",
                primary.data.to_str().unwrap(),
                "-U",
                "postgres",
                "-A",
                "trust",
                "--no-sync",
            ],
        );
        primary.start();
        let mut admin = primary.connect("postgres");
        admin
            .batch_execute(&format!("CREATE DATABASE {DB}"))
            .unwrap();
        let mut c = primary.connect(DB);
        c.batch_execute(
            "CREATE EXTENSION pg_webhook_inbox;
             SELECT webhook_register_provider('fo_claims', scheme => 'stripe', secret => 'whsec_failover');
             SELECT webhook_register_provider('fo_inbox', scheme => 'stripe', secret => 'whsec_failover',
                                              inbox => true);
",
        )
        .unwrap();
        c.batch_execute(traffic::EFFECTS).unwrap();
        server_program(
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
        // Whichever is still up; a stopped one's error is of no interest.
        for s in [&self.primary, &self.standby] {
            let _ = server_command(bindir().join("pg_ctl"))
                .args(["-D", s.data.to_str().unwrap(), "-m", "immediate", "stop"])
                .output();
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
    let down = Instant::now();
    pair.primary.stop("immediate");
    std::thread::sleep(Duration::from_millis(300));
    pair.standby.promote();
    let outage = down.elapsed();
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
    let taken_again: i64 = c
        .query_one(
            "SELECT count(*) FROM webhook.inbox WHERE status = 'processed' AND attempts > 1
                AND event_id = ANY ($1)",
            &[&leased],
        )
        .unwrap()
        .get(0);
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
/// metrics answer; every function that writes is refused with 25006.
#[test]
fn a_standby_answers_reads_and_refuses_writes() {
    let pair = Pair::new("standby", 2);
    let mut p = pair.primary.connect(DB);
    p.batch_execute(
        "SELECT webhook_claim('fo_claims', 'evt_before', 'invoice.paid', '{\"id\": 1}'::jsonb, 'sig',
                              complete_on_commit => true);
         SELECT webhook_enqueue('fo_inbox', 'evt_queued', 'invoice.paid', '{\"id\": 2}'::jsonb);",
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
    let writes = [
        "SELECT webhook_claim('fo_claims', 'evt_standby', 'invoice.paid', '{}'::jsonb, 'sig')",
        receive.as_str(),
        "SELECT webhook_enqueue('fo_inbox', 'evt_standby', 'invoice.paid', '{}'::jsonb)",
        "SELECT * FROM webhook_next(1, 'default', 'fo_inbox')",
        "SELECT webhook_complete(claim_id) FROM webhook.events WHERE event_id = 'evt_before'",
        "SELECT webhook_register_provider('fo_new', scheme => 'stripe', secret => 'x')",
        "SELECT webhook_pause('fo_inbox')",
        "SELECT webhook_requeue_dead()",
        "SELECT webhook_metrics_rollup()",
        "SELECT webhook_alerts_evaluate()",
        "SELECT webhook_create_partitions()",
    ];
    let mut refusals = Vec::new();
    for write in writes {
        let err = s
            .query_one(write, &[])
            .expect_err(&format!("on the standby, {write} was not refused"));
        assert_eq!(sql_state(&err), Some("25006"), "{write}: {}", message(&err));
        refusals.push(format!("{write}: {}", message(&err)));
    }
    eprintln!("refusals on the standby: {refusals:#?}");
}
