//! A long soak: a steady, realistic mix of webhook traffic against one
//! server, for as long as it is told (SOAK_SECONDS), with faults, recording
//! every SOAK_SAMPLE_SECONDS what a DBA watches, drawing it (SVG, in
//! SOAK_OUT), and asserting at the end that nothing was lost, done twice
//! or left stuck, and that memory and the hot tables stayed flat.
//!
//! The mix: a shop whose handlers claim signed deliveries and commit their
//! side effect with the claim, a hub whose deliveries go to the inbox and
//! two workers, an ordered provider in FIFO lines (twenty customers, each
//! event newer than the last) with a worker of its own. Providers resend a
//! tenth of what they delivered (retries), a second shop sends the same
//! events concurrently, another thread sends copies of recent ones, and a
//! twentieth of the shop's traffic is forged. Workers fail one attempt in
//! twenty (retried), one hub event in a hundred is poison (dead on its
//! first attempt, requeued by the operator, then processed), and a worker
//! is killed holding its leases every twenty seconds. Every sample the
//! operator replays a second of the hub's traffic of half a minute before.
//! pg_cron rolls metrics up and evaluates alerts every minute and makes
//! partitions and purges on schedule; the server is stopped like a power
//! cut and started again every SOAK_RESTART_SECONDS.
//!
//! Run by `make soak DURATION=<seconds>` (and for two minutes by `make
//! test`), on a throwaway server of .ci/pg-temp with pg_cron preloaded.

#![cfg(feature = "client-tests")]

mod common;

use common::sign::{now, stripe};
use common::traffic::{reconnect, recover};
use common::{base_config, crash_server, message, start_server};
use postgres::{Client, Config};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SECRET: &str = "whsec_soak";

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name}: a number of seconds"))
        })
        .unwrap_or(default)
}

/// What every thread shares: the stop flag, latencies since the last
/// sample, counters, and what providers were told.
#[derive(Default)]
struct Shared {
    stop: AtomicBool,
    /// Traffic stops, workers drain.
    draining: AtomicBool,
    receive_ms: Mutex<Vec<f64>>,
    next_ms: Mutex<Vec<f64>>,
    deliveries: AtomicU64,
    failed_requests: AtomicU64,
    /// (provider, event id) answered 2xx for a genuine delivery.
    acknowledged: Mutex<Vec<(String, String)>>,
    /// Forged deliveries, and how many were not rejected.
    forged: AtomicU64,
    forged_accepted: AtomicU64,
    /// Recent genuine shop events, for concurrent copies.
    recent: Mutex<Vec<(String, String)>>,
    worker_kills: AtomicU64,
    restarts: AtomicU64,
}

fn config(name: &str) -> Config {
    let mut c = base_config();
    c.application_name(&format!("soak-{name}"));
    c
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1000.0
}

/// One delivery of (provider, event) through webhook_receive, signed
/// (or forged); a claimed event's side effect committed with it.
/// Ok((status, the HTTP status the provider is answered)).
fn deliver(
    c: &mut Client,
    shared: &Shared,
    provider: &str,
    body: &str,
    secret: &str,
) -> Result<(String, i32), postgres::Error> {
    let headers = stripe(body, now(), secret).to_string();
    let mut tx = c.transaction()?;
    let started = Instant::now();
    let row = tx.query_one(
        "SELECT status, event_id, http_status FROM webhook_receive($1, $2::text::jsonb, $3::text,
                                                                   complete_on_commit => true)",
        &[&provider, &headers, &body],
    )?;
    shared.receive_ms.lock().unwrap().push(ms(started));
    let status: String = row.get(0);
    if status == "claimed" || status == "retry" {
        tx.execute(
            "INSERT INTO effects (provider, event_id) VALUES ($1, $2)",
            &[&provider, &row.get::<_, Option<String>>(1)],
        )?;
    }
    tx.commit()?;
    shared.deliveries.fetch_add(1, SeqCst);
    Ok((status, row.get(2)))
}

/// A provider's delivery loop: each event delivered until answered, a
/// tenth sent again once answered (a provider's retry), as fast as the
/// handlers take them at `pace`.
fn provider(
    name: &'static str,
    shared: Arc<Shared>,
    pace: Duration,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let cfg = config(name);
        let mut c = reconnect(&cfg, &shared.stop).unwrap();
        let mut n: u64 = 0;
        while !shared.stop.load(SeqCst) && !shared.draining.load(SeqCst) {
            n += 1;
            let event_id = format!("{name}_{n}");
            let forged = name == "shop" && n.is_multiple_of(20);
            let body = match name {
                "orders" => format!(
                    r#"{{"id":"{event_id}","type":"order.updated","customer":"cus_{}","seq":{}}}"#,
                    n % 20,
                    n / 20
                ),
                _ => format!(r#"{{"id":"{event_id}","type":"invoice.paid","n":{n}}}"#),
            };
            let copies = if n.is_multiple_of(10) { 2 } else { 1 };
            for _ in 0..copies {
                loop {
                    let secret = if forged { "whsec_forged" } else { SECRET };
                    match deliver(&mut c, &shared, name, &body, secret) {
                        // Answered other than 2xx (in_progress: another
                        // copy holds the event): the provider retries.
                        Ok((_, http)) if !forged && http >= 300 => {
                            std::thread::sleep(Duration::from_millis(10));
                        }
                        Ok((status, _)) => {
                            if forged {
                                shared.forged.fetch_add(1, SeqCst);
                                if status != "rejected" {
                                    shared.forged_accepted.fetch_add(1, SeqCst);
                                }
                            } else {
                                let key = (name.to_string(), event_id.clone());
                                shared.acknowledged.lock().unwrap().push(key.clone());
                                if name == "shop" {
                                    let mut recent = shared.recent.lock().unwrap();
                                    recent.push(key);
                                    if recent.len() > 50 {
                                        recent.remove(0);
                                    }
                                }
                            }
                            break;
                        }
                        Err(_) => {
                            shared.failed_requests.fetch_add(1, SeqCst);
                            if !recover(&mut c, &cfg, &shared.stop) {
                                return;
                            }
                            if shared.stop.load(SeqCst) {
                                return;
                            }
                        }
                    }
                }
            }
            std::thread::sleep(pace);
        }
    })
}

/// Concurrent copies: the shop's recent events delivered again while its
/// handlers may still hold them (answered duplicate or in_progress).
fn echo(shared: Arc<Shared>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let cfg = config("echo");
        let mut c = reconnect(&cfg, &shared.stop).unwrap();
        let mut i = 0usize;
        while !shared.stop.load(SeqCst) && !shared.draining.load(SeqCst) {
            let pick = {
                let recent = shared.recent.lock().unwrap();
                (!recent.is_empty()).then(|| recent[i % recent.len()].clone())
            };
            i += 7;
            if let Some((_, event_id)) = pick {
                let n: u64 = event_id.trim_start_matches("shop_").parse().unwrap();
                let body = format!(r#"{{"id":"{event_id}","type":"invoice.paid","n":{n}}}"#);
                if deliver(&mut c, &shared, "shop", &body, SECRET).is_err() {
                    shared.failed_requests.fetch_add(1, SeqCst);
                    if !recover(&mut c, &cfg, &shared.stop) {
                        return;
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    })
}

/// A worker of `provider`'s inbox. Completes each event with its side
/// effect in one transaction; fails one attempt in twenty (retried soon);
/// parks poison events (every hundredth) as dead on their first attempt.
/// With `kill_every`, drops its connection holding its leases that often.
fn worker(
    provider: &'static str,
    index: usize,
    shared: Arc<Shared>,
    kill_every: Option<Duration>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let cfg = config(&format!("{provider}-worker-{index}"));
        let mut c = reconnect(&cfg, &shared.stop).unwrap();
        let mut last_kill = Instant::now();
        let mut round: u64 = 0;
        while !shared.stop.load(SeqCst) {
            round += 1;
            let result = (|| -> Result<usize, postgres::Error> {
                let started = Instant::now();
                let leased = c.query(
                    "SELECT id::text, event_id, attempts, replay_id IS NOT NULL
                       FROM webhook_next(10, 'default', $1, lease => '5 seconds')",
                    &[&provider],
                )?;
                shared.next_ms.lock().unwrap().push(ms(started));
                if kill_every.is_some_and(|every| last_kill.elapsed() > every) && !leased.is_empty()
                {
                    // Killed holding its leases: they run out and are taken again.
                    last_kill = Instant::now();
                    shared.worker_kills.fetch_add(1, SeqCst);
                    return Ok(usize::MAX);
                }
                for row in &leased {
                    let (id, event_id, attempts, replayed): (String, String, i32, bool) =
                        (row.get(0), row.get(1), row.get(2), row.get(3));
                    let n: u64 = event_id.rsplit('_').next().unwrap().parse().unwrap_or(0);
                    let mut tx = c.transaction()?;
                    // Poison once: a requeued dead letter starts its
                    // attempts again, and is processed the second time.
                    let poison = provider == "hub"
                        && n % 100 == 7
                        && !replayed
                        && !tx
                            .query(
                                "INSERT INTO poisoned VALUES ($1) ON CONFLICT DO NOTHING RETURNING 1",
                                &[&event_id],
                            )?
                            .is_empty();
                    if poison {
                        tx.execute(
                            "SELECT webhook_fail($1::text::uuid, 'poison', permanent => true)",
                            &[&id],
                        )?;
                    } else if (n + round).is_multiple_of(20) && attempts < 3 {
                        tx.execute(
                            "SELECT webhook_fail($1::text::uuid, 'flaky', retry_in => '200 milliseconds')",
                            &[&id],
                        )?;
                    } else {
                        let table = if replayed { "replayed" } else { "effects" };
                        tx.execute(
                            &format!("INSERT INTO {table} (provider, event_id) VALUES ($1, $2)"),
                            &[&provider, &event_id],
                        )?;
                        tx.execute("SELECT webhook_complete($1::text::uuid)", &[&id])?;
                    }
                    tx.commit()?;
                }
                Ok(leased.len())
            })();
            match result {
                Ok(usize::MAX) => {
                    drop(std::mem::replace(
                        &mut c,
                        match reconnect(&cfg, &shared.stop) {
                            Some(fresh) => fresh,
                            None => return,
                        },
                    ));
                }
                Ok(0) => {
                    if shared.draining.load(SeqCst) && shared.stop.load(SeqCst) {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                Ok(_) => {}
                Err(_) => {
                    shared.failed_requests.fetch_add(1, SeqCst);
                    if !recover(&mut c, &cfg, &shared.stop) {
                        return;
                    }
                }
            }
        }
    })
}

/// One sample: what a DBA watches, since the last one.
#[derive(Debug, Clone, Default)]
struct Sample {
    at: f64,
    deliveries_per_s: f64,
    receive_p50: f64,
    receive_p99: f64,
    next_p50: f64,
    next_p99: f64,
    /// The largest private memory of the soak's backends, in MB.
    backend_rss_mb: f64,
    wal_mb: f64,
    inbox_backlog: i64,
    sizes_mb: BTreeMap<String, f64>,
    dead_tuples: BTreeMap<String, i64>,
    autovacuums: i64,
    events: i64,
}

fn percentile(values: &mut [f64], p: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(|a, b| a.partial_cmp(b).unwrap());
    values[((values.len() - 1) as f64 * p).round() as usize]
}

/// RssAnon of a backend, in MB: what it allocated itself (shared buffers
/// it touched are counted apart).
fn rss_anon_mb(pid: i32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("RssAnon:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

fn sample(
    c: &mut Client,
    shared: &Shared,
    at: f64,
    span: f64,
    wal_start: &str,
    before: u64,
) -> Sample {
    let mut receive = std::mem::take(&mut *shared.receive_ms.lock().unwrap());
    let mut next = std::mem::take(&mut *shared.next_ms.lock().unwrap());
    let pids: Vec<i32> = c
        .query(
            "SELECT pid FROM pg_stat_activity WHERE application_name LIKE 'soak-%'",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let rss = pids
        .iter()
        .filter_map(|&p| rss_anon_mb(p))
        .fold(0.0, f64::max);
    let wal: f64 = c
        .query_one(
            "SELECT (pg_current_wal_lsn() - $1::text::pg_lsn)::float8 / 1048576",
            &[&wal_start],
        )
        .unwrap()
        .get(0);
    let mut sizes = BTreeMap::new();
    let mut dead = BTreeMap::new();
    let mut autovacuums = 0;
    for row in c
        .query(
            "SELECT c.relname::text, pg_total_relation_size(c.oid)::float8 / 1048576,
                    coalesce(s.n_dead_tup, 0), coalesce(s.autovacuum_count, 0)
               FROM pg_class c LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
              WHERE c.relnamespace = 'webhook'::regnamespace AND c.relkind IN ('r', 'p')",
            &[],
        )
        .unwrap()
    {
        let name: String = row.get(0);
        let size: f64 = row.get(1);
        let dead_tuples: i64 = row.get(2);
        autovacuums += row.get::<_, i64>(3);
        if size > 0.05 || dead_tuples > 0 {
            sizes.insert(name.clone(), size);
            dead.insert(name, dead_tuples);
        }
    }
    let (backlog, events): (i64, i64) = {
        let row = c
            .query_one(
                "SELECT (SELECT count(*) FROM webhook.inbox WHERE status IN ('ready', 'leased')),
                        (SELECT count(*) FROM webhook.events)",
                &[],
            )
            .unwrap();
        (row.get(0), row.get(1))
    };
    let delivered = shared.deliveries.load(SeqCst) - before;
    Sample {
        at,
        deliveries_per_s: delivered as f64 / span,
        receive_p50: percentile(&mut receive, 0.5),
        receive_p99: percentile(&mut receive, 0.99),
        next_p50: percentile(&mut next, 0.5),
        next_p99: percentile(&mut next, 0.99),
        backend_rss_mb: rss,
        wal_mb: wal,
        inbox_backlog: backlog,
        sizes_mb: sizes,
        dead_tuples: dead,
        autovacuums,
        events,
    }
}

/// A line chart of one or more series over time, as SVG.
fn chart(title: &str, unit: &str, series: &[(&str, Vec<(f64, f64)>)]) -> String {
    let (w, h, left, bottom, top, right) = (760.0, 300.0, 110.0, 40.0, 30.0, 170.0);
    let xmax = series
        .iter()
        .flat_map(|(_, s)| s.iter().map(|p| p.0))
        .fold(1.0, f64::max);
    let ymax = series
        .iter()
        .flat_map(|(_, s)| s.iter().map(|p| p.1))
        .fold(0.0, f64::max)
        .max(1e-9)
        * 1.1;
    let x = |v: f64| left + v / xmax * (w - left - right);
    let y = |v: f64| h - bottom - v / ymax * (h - bottom - top);
    let colours = [
        "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    ];
    let mut svg = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">
<rect width="{w}" height="{h}" fill="white"/>
<text x="{left}" y="18" font-size="14">{title}</text>
<line x1="{left}" y1="{b}" x2="{r}" y2="{b}" stroke="black"/>
<line x1="{left}" y1="{top}" x2="{left}" y2="{b}" stroke="black"/>
<text x="{left}" y="{lx}">0</text><text x="{r}" y="{lx}" text-anchor="end">{xmax:.0} s</text>
<text x="{yl}" y="{yt}" text-anchor="end">{top_label} {unit}</text><text x="{yl}" y="{b}" text-anchor="end">0</text>
"#,
        b = h - bottom,
        r = w - right,
        lx = h - bottom + 16.0,
        yl = left - 4.0,
        yt = top + 4.0,
        top_label = match ymax / 1.1 {
            v if v >= 100.0 => format!("{v:.0}"),
            v if v >= 1.0 => format!("{v:.1}"),
            v => format!("{v:.3}"),
        },
    );
    for (i, (name, points)) in series.iter().enumerate() {
        let colour = colours[i % colours.len()];
        let path: Vec<String> = points
            .iter()
            .map(|(a, b)| format!("{:.1},{:.1}", x(*a), y(*b)))
            .collect();
        svg += &format!(
            r#"<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{}"/>
<text x="{}" y="{}" fill="{colour}">{name}</text>
"#,
            path.join(" "),
            w - right + 8.0,
            top + 16.0 * (i as f64 + 1.0)
        );
    }
    svg + "</svg>\n"
}

fn named(v: &[(String, Vec<(f64, f64)>)]) -> Vec<(&str, Vec<(f64, f64)>)> {
    v.iter().map(|(n, p)| (n.as_str(), p.clone())).collect()
}

fn draw(out: &std::path::Path, samples: &[Sample]) {
    let over = |f: &dyn Fn(&Sample) -> f64| -> Vec<(f64, f64)> {
        samples.iter().map(|s| (s.at, f(s))).collect()
    };
    // The six largest at the end: the rest stay under a megabyte.
    let tables: Vec<String> = {
        let last = samples
            .last()
            .map(|s| s.sizes_mb.clone())
            .unwrap_or_default();
        let mut all: Vec<(String, f64)> = last.into_iter().collect();
        all.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap());
        all.into_iter().take(6).map(|(t, _)| t).collect()
    };
    let per_table = |f: &dyn Fn(&Sample, &str) -> f64| -> Vec<(String, Vec<(f64, f64)>)> {
        tables
            .iter()
            .map(|t| (t.clone(), samples.iter().map(|s| (s.at, f(s, t))).collect()))
            .collect()
    };
    let sizes = per_table(&|s, t| s.sizes_mb.get(t).copied().unwrap_or(0.0));
    let dead = per_table(&|s, t| s.dead_tuples.get(t).copied().unwrap_or(0) as f64);

    let charts = [
        (
            "latency",
            chart(
                "webhook_receive and webhook_next, per call",
                "ms",
                &[
                    ("receive p50", over(&|s| s.receive_p50)),
                    ("receive p99", over(&|s| s.receive_p99)),
                    ("next p50", over(&|s| s.next_p50)),
                    ("next p99", over(&|s| s.next_p99)),
                ],
            ),
        ),
        (
            "throughput",
            chart(
                "Deliveries answered",
                "/s",
                &[("deliveries", over(&|s| s.deliveries_per_s))],
            ),
        ),
        (
            "memory",
            chart(
                "Largest backend's private memory (RssAnon)",
                "MB",
                &[("backend", over(&|s| s.backend_rss_mb))],
            ),
        ),
        (
            "sizes",
            chart("Table sizes, with indexes and TOAST", "MB", &named(&sizes)),
        ),
        ("dead-tuples", chart("Dead tuples", "", &named(&dead))),
        (
            "inbox",
            chart(
                "Inbox backlog (ready and leased) and events kept for dedup",
                "rows",
                &[
                    ("backlog", over(&|s| s.inbox_backlog as f64)),
                    ("events", over(&|s| s.events as f64)),
                ],
            ),
        ),
        (
            "wal",
            chart(
                "WAL written since the start",
                "MB",
                &[("WAL", over(&|s| s.wal_mb))],
            ),
        ),
        (
            "autovacuum",
            chart(
                "Autovacuum runs on the extension's tables (counters reset by a crash)",
                "runs",
                &[("autovacuum", over(&|s| s.autovacuums as f64))],
            ),
        ),
    ];
    for (name, svg) in charts {
        std::fs::write(out.join(format!("soak-{name}.svg")), svg).unwrap();
    }
}

#[test]
fn a_soak_of_steady_traffic_with_faults_loses_nothing_and_stays_flat() {
    let seconds = setting("SOAK_SECONDS", 120);
    let every = setting("SOAK_SAMPLE_SECONDS", if seconds < 600 { 10 } else { 60 });
    let restart_every = setting("SOAK_RESTART_SECONDS", if seconds < 600 { 50 } else { 600 });
    let keep = setting("SOAK_KEEP_SECONDS", if seconds < 600 { 30 } else { 600 });
    let purge_schedule = if seconds < 600 {
        "* * * * *"
    } else {
        "*/5 * * * *"
    };
    let out = std::path::PathBuf::from(
        std::env::var("SOAK_OUT").unwrap_or_else(|_| "target/soak".into()),
    );
    std::fs::create_dir_all(&out).unwrap();

    let mut admin = base_config().connect(postgres::NoTls).unwrap();
    admin
        .batch_execute(
            "CREATE EXTENSION pg_webhook_inbox;
             CREATE EXTENSION pg_cron;
             CREATE TABLE effects (provider text NOT NULL, event_id text NOT NULL);
             CREATE TABLE replayed (provider text NOT NULL, event_id text NOT NULL);
             CREATE TABLE poisoned (event_id text PRIMARY KEY);
             SELECT webhook_create_partitions(2);",
        )
        .unwrap();
    for (name, extra) in [
        ("shop", ""),
        ("hub", ", inbox => true"),
        (
            "orders",
            ", inbox => true, ordering => true, fifo => true, entity_key_from => 'body:customer',
               order_from => 'body:seq'",
        ),
    ] {
        admin
            .execute(
                &format!(
                    "SELECT webhook_register_provider($1, scheme => 'stripe', secret => $2{extra})"
                ),
                &[&name, &SECRET],
            )
            .unwrap();
    }
    admin
        .batch_execute(
            "SELECT cron.schedule('webhook-metrics', '* * * * *',
                                  'SELECT webhook_metrics_rollup(); SELECT webhook_alerts_evaluate()');
             SELECT cron.schedule('webhook-partitions', '*/10 * * * *', 'SELECT webhook_create_partitions()');",
        )
        .unwrap();
    // The purge keeps `keep` seconds of finished work: what it removes
    // shows within the run (the inbox's processed rows; the archive's day
    // partitions go whole once a day is past the cutoff, so a soak of hours
    // shows the archive growing by its rows, and the purge's cost).
    admin
        .execute(
            "SELECT cron.schedule('webhook-purge', $1,
                                  format('SELECT webhook_purge(interval %L)', $2::text || ' seconds'))",
            &[&purge_schedule, &keep.to_string()],
        )
        .unwrap();
    let wal_start: String = admin
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .unwrap()
        .get(0);

    let shared = Arc::new(Shared::default());
    let mut threads = vec![
        provider("shop", shared.clone(), Duration::from_millis(2)),
        provider("shop", shared.clone(), Duration::from_millis(2)),
        provider("hub", shared.clone(), Duration::from_millis(2)),
        provider("orders", shared.clone(), Duration::from_millis(5)),
        echo(shared.clone()),
    ];
    // Two providers named shop would deliver the same ids: the second
    // is a copy of the first, concurrent with it, as providers send.
    let mut workers = vec![
        worker("hub", 1, shared.clone(), Some(Duration::from_secs(20))),
        worker("hub", 2, shared.clone(), None),
        worker("orders", 1, shared.clone(), None),
    ];

    let started = Instant::now();
    let mut samples = Vec::new();
    let mut last_restart = Instant::now();
    let mut last_deliveries = 0;
    let mut last_sample = Instant::now();
    while started.elapsed() < Duration::from_secs(seconds) {
        std::thread::sleep(Duration::from_secs(1));
        if last_restart.elapsed() >= Duration::from_secs(restart_every) {
            drop(admin);
            crash_server();
            start_server();
            shared.restarts.fetch_add(1, SeqCst);
            admin = reconnect(&base_config(), &shared.stop).unwrap();
            last_restart = Instant::now();
        }
        if last_sample.elapsed() >= Duration::from_secs(every) {
            let span = last_sample.elapsed().as_secs_f64();
            last_sample = Instant::now();
            // The operator: dead letters requeued, the hub's last minute
            // replayed.
            let _ = admin.batch_execute(
                "SELECT webhook_requeue_dead();
                 SELECT webhook_replay('hub', since => now() - interval '31 seconds',
                                       until => now() - interval '30 seconds', dry_run => false,
                                       reason => 'soak: a second of the hub, processed again');",
            );
            // A server that went away (a crash not of the soak's making
            // shows at the end) is waited for, as the clients do.
            if !recover(&mut admin, &base_config(), &shared.stop) {
                break;
            }
            let s = sample(
                &mut admin,
                &shared,
                started.elapsed().as_secs_f64(),
                span,
                &wal_start,
                last_deliveries,
            );
            last_deliveries = shared.deliveries.load(SeqCst);
            eprintln!("{s:?}");
            samples.push(s);
            draw(&out, &samples);
        }
    }

    // Traffic stops; the operator requeues what is dead, workers drain.
    shared.draining.store(true, SeqCst);
    for t in threads.drain(..) {
        t.join().unwrap();
    }
    let drained = Instant::now();
    loop {
        admin
            .batch_execute("SELECT webhook_requeue_dead()")
            .unwrap();
        let left: i64 = admin
            .query_one(
                "SELECT count(*) FROM webhook.inbox WHERE status NOT IN ('processed', 'stale')",
                &[],
            )
            .unwrap()
            .get(0);
        if left == 0 {
            break;
        }
        assert!(
            drained.elapsed() < Duration::from_secs(120),
            "{left} inbox rows left unprocessed two minutes after traffic stopped"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    shared.stop.store(true, SeqCst);
    for t in workers.drain(..) {
        t.join().unwrap();
    }

    // Nothing lost, nothing doubled, nothing stuck.
    let acknowledged = std::mem::take(&mut *shared.acknowledged.lock().unwrap());
    let mut distinct = acknowledged.clone();
    distinct.sort();
    distinct.dedup();
    let effects: BTreeMap<(String, String), i64> = admin
        .query(
            "SELECT provider, event_id, count(*) FROM effects GROUP BY 1, 2",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| ((r.get(0), r.get(1)), r.get(2)))
        .collect();
    let lost: Vec<_> = distinct
        .iter()
        .filter(|k| !effects.contains_key(*k))
        .collect();
    let doubled: Vec<_> = effects.iter().filter(|(_, &n)| n > 1).collect();
    let stale: i64 = admin
        .query_one(
            "SELECT count(*) FROM webhook.inbox WHERE status = 'stale'",
            &[],
        )
        .unwrap()
        .get(0);
    let events: i64 = admin
        .query_one("SELECT count(*) FROM webhook.events", &[])
        .unwrap()
        .get(0);
    let replays: i64 = admin
        .query_one("SELECT count(*) FROM replayed", &[])
        .unwrap()
        .get(0);
    let cron_failures: Vec<String> = admin
        .query(
            "SELECT command || ': ' || coalesce(return_message, '') FROM cron.job_run_details
              WHERE status = 'failed'
                -- What a job running when the server was crashed says.
                AND return_message NOT SIMILAR TO '%(terminat|shut%down|connection|recovery|starting up|server closed|server restarted)%'",
            &[],
        )
        .map(|rows| rows.iter().map(|r| r.get(0)).collect())
        .unwrap_or_else(|e| vec![message(&e)]);
    let cron_runs: String = admin
        .query_one(
            "SELECT coalesce(string_agg(j.jobname || ' ' || n, ', ' ORDER BY j.jobname), 'none')
               FROM cron.job j
               JOIN (SELECT jobid, count(*) AS n FROM cron.job_run_details
                      WHERE status = 'succeeded' GROUP BY jobid) r USING (jobid)",
            &[],
        )
        .unwrap()
        .get(0);
    let summary = format!(
        "{seconds} s: {} deliveries ({:.0}/s), {} events acknowledged, {} rows in webhook.events, \
         {} forged (accepted: {}), {} replayed side effects, {} stale, {} worker kills, {} restarts, \
         {} failed requests (retried); pg_cron runs that succeeded: {cron_runs}",
        shared.deliveries.load(SeqCst),
        shared.deliveries.load(SeqCst) as f64 / seconds as f64,
        distinct.len(),
        events,
        shared.forged.load(SeqCst),
        shared.forged_accepted.load(SeqCst),
        replays,
        stale,
        shared.worker_kills.load(SeqCst),
        shared.restarts.load(SeqCst),
        shared.failed_requests.load(SeqCst)
    );
    eprintln!("soak: {summary}");
    std::fs::write(out.join("soak-summary.txt"), format!("{summary}\n")).unwrap();
    assert!(lost.is_empty(), "acknowledged and lost: {lost:?}");
    assert!(doubled.is_empty(), "done twice: {doubled:?}");
    assert_eq!(
        stale, 0,
        "an ordered provider's events were delivered in order"
    );
    assert_eq!(
        shared.forged_accepted.load(SeqCst),
        0,
        "a forged delivery was accepted"
    );
    assert_eq!(
        events as usize,
        distinct.len(),
        "webhook.events holds one row per event, forgeries none"
    );
    assert!(
        cron_failures.is_empty(),
        "scheduled jobs failed: {cron_failures:?}"
    );
    // The soak's restarts stop the server as a power cut does; a backend
    // that died of a signal is something else, and a failure.
    assert_eq!(
        common::backend_crashes(),
        0,
        "a backend crashed: see the server log"
    );
    assert!(
        replays > 0 && shared.worker_kills.load(SeqCst) > 0 && shared.restarts.load(SeqCst) > 0,
        "the mix had its replays, worker kills and restarts"
    );

    // Flat: memory and the inbox's backlog in the second half of the run
    // no higher than the first half's peaks allow.
    let half = samples.len() / 2;
    assert!(samples.len() >= 4, "at least four samples");
    let peak = |s: &[Sample], f: &dyn Fn(&Sample) -> f64| s.iter().map(f).fold(0.0, f64::max);
    let rss_first = peak(&samples[..half], &|s| s.backend_rss_mb);
    let rss_second = peak(&samples[half..], &|s| s.backend_rss_mb);
    assert!(
        rss_second <= rss_first * 1.5 + 8.0,
        "backend memory grew: {rss_first:.1} MB, then {rss_second:.1} MB"
    );
    // Over an hour or more the purge has run several times: the inbox
    // table (processed rows kept `keep` seconds) stops growing.
    if seconds >= 1800 {
        let quarter = samples.len() / 4;
        let inbox = |s: &Sample| s.sizes_mb.get("inbox").copied().unwrap_or(0.0);
        let second = peak(&samples[quarter..2 * quarter], &inbox);
        let last = peak(&samples[3 * quarter..], &inbox);
        assert!(
            last <= second * 1.25 + 1.0,
            "the inbox table grew: {second:.1} MB in the second quarter, {last:.1} MB in the last"
        );
    }
    let backlog_first = peak(&samples[..half], &|s| s.inbox_backlog as f64);
    let backlog_second = peak(&samples[half..], &|s| s.inbox_backlog as f64);
    assert!(
        backlog_second <= backlog_first * 2.0 + 500.0,
        "the inbox's backlog grew: {backlog_first}, then {backlog_second}"
    );
}
