//! The intake tier on real clusters, as `.ci/scale-test` starts them:
//! a PL/Proxy proxy (`pg_webhook_inbox_proxy`), four clusters holding
//! eight slot databases (slot s on cluster s mod 4), the application's
//! database, and an empty cluster a slot moves to. Senders and workers
//! talk to the proxy over real connections, as an application role whose
//! user mapping reaches the slots as a role with the application grants.
//!
//! Run by `make scale-test` (part of `make test` on PostgreSQL 15).
#![cfg(feature = "client-tests")]

mod common;

#[path = "../examples/rust/src/tier.rs"]
mod example_tier;

use common::sign;
use postgres::{Client, Config, NoTls};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

const SLOTS: i32 = 8;
const SHARDS: usize = 4;
const STRIPE_SECRET: &str = "whsec_tier_stripe";
const GITHUB_SECRET: &str = "tier-github-secret";
const ORDERS_SECRET: &str = "whsec_tier_orders";

// ---------------------------------------------------------------------------
// The servers.

/// Which of `.ci/scale-test`'s servers: its index gives its port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Server {
    Proxy,
    Shard(usize),
    App,
    Spare,
}

impl Server {
    fn index(self) -> usize {
        match self {
            Server::Proxy => 0,
            Server::Shard(k) => 1 + k,
            Server::App => 5,
            Server::Spare => 6,
        }
    }

    fn name(self) -> String {
        match self {
            Server::Proxy => "proxy".into(),
            Server::Shard(k) => format!("shard{k}"),
            Server::App => "app".into(),
            Server::Spare => "spare".into(),
        }
    }

    fn port(self) -> u16 {
        let base: u16 = std::env::var("TIER_PORT")
            .expect("TIER_PORT: run through .ci/scale-test (make scale-test)")
            .parse()
            .unwrap();
        base + self.index() as u16
    }

    fn connect_as(self, db: &str, user: &str) -> Result<Client, postgres::Error> {
        Config::new()
            .host("127.0.0.1")
            .port(self.port())
            .user(user)
            .dbname(db)
            .connect_timeout(Duration::from_secs(5))
            .options("-c lock_timeout=10s")
            .connect(NoTls)
    }

    fn connect(self, db: &str) -> Client {
        self.connect_as(db, "postgres")
            .unwrap_or_else(|e| panic!("connect to {db} on {}: {e}", self.name()))
    }

    fn pg_ctl(self, args: &[&str]) {
        let dir = std::env::var("TIER_DIR").unwrap();
        let bindir = std::env::var("PG_BINDIR").unwrap();
        let data = format!("{dir}/{}/data", self.name());
        let opts = std::fs::read_to_string(format!("{dir}/{}/opts", self.name())).unwrap();
        let log = format!("{dir}/{}/server.log", self.name());
        let pg_ctl = format!("{bindir}/pg_ctl");
        let user = std::env::var("PG_SERVER_USER").unwrap_or_default();
        let mut cmd = if user.is_empty() {
            std::process::Command::new(&pg_ctl)
        } else {
            let mut c = std::process::Command::new("runuser");
            c.args(["-u", &user, "--", &pg_ctl]);
            c
        };
        let mut all = vec!["-D", &data, "-l", &log, "-o", opts.trim()];
        all.extend_from_slice(args);
        let status = cmd
            .args(all)
            .stdout(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "pg_ctl {args:?} on {}", self.name());
    }
}

/// The cluster a slot's database starts on.
fn home(slot: i32) -> Server {
    Server::Shard(slot as usize % SHARDS)
}

fn slot_db(slot: i32) -> String {
    format!("slot{slot}")
}

fn partition(slot: i32, server: Server) -> String {
    format!(
        "host=127.0.0.1 port={} dbname={}",
        server.port(),
        slot_db(slot)
    )
}

/// Where each slot's database is now (a move changes it).
static PLACES: Mutex<[Option<Server>; SLOTS as usize]> = Mutex::new([None; SLOTS as usize]);

fn place(slot: i32) -> Server {
    PLACES.lock().unwrap()[slot as usize].unwrap_or_else(|| home(slot))
}

/// The tests share the tier, and some stop or move part of it.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn create_role(client: &mut Client, role: &str) {
    client
        .batch_execute(&format!(
            "DO $$ BEGIN
                 IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{role}') THEN
                     CREATE ROLE {role} LOGIN;
                 END IF;
             END $$"
        ))
        .unwrap();
}

/// A slot's database on `server`: the extension, the slot, the
/// application grants for the role the proxy's user mapping names.
fn create_slot_database(server: Server, slot: i32) {
    let mut admin = server.connect("postgres");
    create_role(&mut admin, "tier_app");
    admin
        .batch_execute(&format!("CREATE DATABASE {}", slot_db(slot)))
        .unwrap();
    let mut db = server.connect(&slot_db(slot));
    db.batch_execute(&format!(
        "CREATE EXTENSION pg_webhook_inbox;
         SELECT webhook_set_slot({slot}, {SLOTS});
         SELECT webhook_grant_app('tier_app');"
    ))
    .unwrap();
}

/// Set the tier up once: slots, the proxy and its cluster map, roles and
/// mappings, the providers (registered through the proxy), and the
/// application's database.
fn tier() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        // Set up already, by an earlier run of the suite on these servers
        // (.ci/scale-test runs the route vectors' test on its own first).
        let set_up: bool = Server::Proxy
            .connect("postgres")
            .query_one("SELECT EXISTS (SELECT FROM pg_database WHERE datname = 'tier')", &[])
            .unwrap()
            .get(0);
        if set_up {
            return;
        }
        for slot in 0..SLOTS {
            create_slot_database(home(slot), slot);
        }
        let mut admin = Server::Proxy.connect("postgres");
        admin.batch_execute("CREATE DATABASE tier").unwrap();
        create_role(&mut admin, "app");
        let partitions: Vec<String> = (0..SLOTS)
            .map(|s| format!("partition_{s} '{}'", partition(s, home(s))))
            .collect();
        let mut proxy = Server::Proxy.connect("tier");
        proxy
            .batch_execute(&format!(
                "CREATE EXTENSION pg_webhook_inbox_proxy CASCADE;
                 CREATE SERVER webhook_tier FOREIGN DATA WRAPPER plproxy OPTIONS ({});
                 CREATE USER MAPPING FOR app SERVER webhook_tier OPTIONS (user 'tier_app');
                 CREATE USER MAPPING FOR postgres SERVER webhook_tier OPTIONS (user 'postgres');
                 GRANT USAGE ON FOREIGN SERVER webhook_tier TO app;
                 SELECT webhook_proxy_grant_app('app');",
                partitions.join(", ")
            ))
            .unwrap();
        register_providers(&mut proxy);

        let mut admin = Server::App.connect("postgres");
        admin.batch_execute("CREATE DATABASE shop").unwrap();
        create_role(&mut admin, "app");
        let mut shop = Server::App.connect("shop");
        shop.batch_execute(
            "CREATE EXTENSION pg_webhook_inbox;
             CREATE TABLE ledger (
                 provider   text NOT NULL,
                 event_id   text NOT NULL,
                 event_type text NOT NULL,
                 entity     text,
                 applied_at timestamptz NOT NULL DEFAULT clock_timestamp()
             );
             CREATE TABLE entity_state (entity text PRIMARY KEY, version bigint NOT NULL, event_id text NOT NULL);
             SELECT webhook_grant_app('app');
             GRANT SELECT, INSERT, UPDATE ON ledger, entity_state TO app;",
        )
        .unwrap();
    });
}

fn register_providers(proxy: &mut Client) {
    proxy
        .batch_execute(&format!(
            "SELECT webhook_register_provider('stripe', secret => '{STRIPE_SECRET}', inbox => true);
             SELECT webhook_register_provider('github', secret => '{GITHUB_SECRET}', inbox => true);
             SELECT webhook_register_provider('orders', secret => '{ORDERS_SECRET}', scheme => 'stripe',
                     inbox => true, ordering => true, entity_key_from => 'body:data.object.id',
                     order_from => 'body:created', fifo => true);"
        ))
        .unwrap();
}

// ---------------------------------------------------------------------------
// Deliveries.

#[derive(Clone, Debug)]
struct Delivery {
    provider: &'static str,
    event_id: String,
    headers: serde_json::Value,
    body: String,
}

fn stripe_event(event_id: &str) -> Delivery {
    let body = format!(
        r#"{{"id":"{event_id}","type":"invoice.paid","data":{{"object":{{"amount":100}}}}}}"#
    );
    Delivery {
        provider: "stripe",
        event_id: event_id.into(),
        headers: sign::stripe(&body, sign::now(), STRIPE_SECRET),
        body,
    }
}

fn github_event(n: usize, tag: &str) -> Delivery {
    let body = format!(r#"{{"action":"opened","number":{n},"tag":"{tag}"}}"#);
    let id = format!("gh-{tag}-{n}");
    Delivery {
        provider: "github",
        headers: sign::github(&id, "issues", &body, GITHUB_SECRET),
        event_id: id,
        body,
    }
}

/// The same signed bytes with a fresh X-GitHub-Delivery: a replay.
fn github_replay(genuine: &Delivery, n: usize) -> Delivery {
    let mut replay = genuine.clone();
    let fresh = format!("{}-replayed-{n}", genuine.event_id);
    replay.headers["X-GitHub-Delivery"] = serde_json::Value::from(fresh.clone());
    replay.event_id = fresh;
    replay
}

fn order_event(entity: &str, version: i64, tag: &str) -> Delivery {
    let event_id = format!("evt_{tag}_{entity}_{version}");
    let body = format!(
        r#"{{"id":"{event_id}","type":"customer.updated","created":{version},"data":{{"object":{{"id":"{entity}"}}}}}}"#
    );
    Delivery {
        provider: "orders",
        headers: sign::stripe(&body, sign::now(), ORDERS_SECRET),
        event_id,
        body,
    }
}

#[derive(Debug, Clone)]
struct Answer {
    id: Option<String>,
    status: String,
    reason: Option<String>,
    http_status: i32,
}

fn receive(proxy: &mut Client, d: &Delivery) -> Result<Answer, postgres::Error> {
    let row = proxy.query_one(
        "SELECT id::text, status, reason, http_status FROM webhook_receive($1, $2::text::jsonb, $3::text)",
        &[&d.provider, &d.headers.to_string(), &d.body],
    )?;
    Ok(Answer {
        id: row.get(0),
        status: row.get(1),
        reason: row.get(2),
        http_status: row.get(3),
    })
}

fn proxy_as_app() -> Result<Client, postgres::Error> {
    Server::Proxy.connect_as("tier", "app")
}

/// A sender as providers are: it retries until the tier answers,
/// reconnecting when its connection went away.
fn send_until_answered(proxy: &mut Option<Client>, d: &Delivery, errors: &AtomicUsize) -> Answer {
    let start = Instant::now();
    loop {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "{d:?} was never answered"
        );
        if proxy.as_ref().is_none_or(|c| c.is_closed()) {
            *proxy = proxy_as_app().ok();
        }
        if let Some(client) = proxy.as_mut() {
            match receive(client, d) {
                Ok(answer) if answer.http_status < 500 => return answer,
                Ok(_) | Err(_) => {
                    errors.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

// ---------------------------------------------------------------------------
// What the slots hold.

/// Every slot database's queued events: (provider, event id) → slots.
fn where_events_are() -> HashMap<(String, String), Vec<i32>> {
    let mut found: HashMap<(String, String), Vec<i32>> = HashMap::new();
    for slot in 0..SLOTS {
        let mut db = place(slot).connect(&slot_db(slot));
        for row in db
            .query("SELECT DISTINCT provider, event_id FROM webhook.inbox", &[])
            .unwrap()
        {
            found
                .entry((row.get(0), row.get(1)))
                .or_default()
                .push(slot);
        }
    }
    found
}

fn slot_of_id(id: &str) -> i32 {
    let bytes: [u8; 16] = hex::decode(id.replace('-', ""))
        .unwrap()
        .try_into()
        .unwrap();
    example_tier::slot_of_id(&bytes)
}

fn run_with_input(program: &str, args: &[&str], input: &str) -> String {
    use std::io::Write;
    let mut child = std::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("run {program}: {e}"));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{program} {args:?} failed");
    String::from_utf8(out.stdout).unwrap()
}

fn python() -> String {
    std::env::var("TIER_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// Inbox rows of events whose id is LIKE `pattern` not yet processed, in
/// every slot.
fn unprocessed(pattern: &str) -> i64 {
    (0..SLOTS)
        .map(|slot| {
            place(slot)
                .connect(&slot_db(slot))
                .query_one(
                    "SELECT count(*) FROM webhook.inbox WHERE event_id LIKE $1 AND status <> 'processed'",
                    &[&pattern],
                )
                .unwrap()
                .get::<_, i64>(0)
        })
        .sum()
}

/// examples/python/tier_apply_worker.py against the tier and the shop,
/// until it finds nothing 25 polls in a row; `crash_after`: it dies right
/// after that many application commits, before completing the lease.
fn apply_worker(env: &[(&str, &str)], crash_after: Option<usize>) -> std::process::Child {
    let mut cmd = std::process::Command::new(python());
    cmd.arg("examples/python/tier_apply_worker.py")
        .env(
            "TIER_URL",
            format!("postgresql://app@127.0.0.1:{}/tier", Server::Proxy.port()),
        )
        .env(
            "APP_URL",
            format!("postgresql://app@127.0.0.1:{}/shop", Server::App.port()),
        )
        .env("TIER_EXIT_WHEN_IDLE", "25")
        .envs(env.iter().copied());
    if let Some(n) = crash_after {
        cmd.env("TIER_CRASH_AFTER_APPLY", n.to_string());
    }
    cmd.spawn().unwrap()
}

// ---------------------------------------------------------------------------
// Workers written in Rust: lease through the proxy slot by slot, complete
// through the proxy, and count the completions that were accepted.

struct Completions(Mutex<BTreeMap<(String, String), usize>>);

/// Tells background threads to stop when the test ends, also by a panic.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

fn work(stop: &AtomicBool, lease: &str, done: &Completions) {
    let mut proxy: Option<Client> = None;
    let mut slot = 0;
    while !stop.load(Ordering::Relaxed) {
        if proxy.as_ref().is_none_or(|c| c.is_closed()) {
            proxy = proxy_as_app().ok();
        }
        let Some(client) = proxy.as_mut() else {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        };
        slot = (slot + 1) % SLOTS;
        let rows = match client.query(
            "SELECT id::text, provider, event_id FROM webhook_next_on($1, 20, lease => $2::text::interval)",
            &[&slot, &lease],
        ) {
            Ok(rows) => rows,
            Err(_) => continue,
        };
        if rows.is_empty() {
            std::thread::sleep(Duration::from_millis(10));
        }
        for row in rows {
            let id: String = row.get(0);
            if client
                .execute("SELECT webhook_complete($1::text::uuid)", &[&id])
                .is_ok()
            {
                *done
                    .0
                    .lock()
                    .unwrap()
                    .entry((row.get(1), row.get(2)))
                    .or_default() += 1;
            }
        }
    }
}

/// Whether every queued event of the tier is processed.
fn drained() -> bool {
    (0..SLOTS).all(|slot| {
        let mut db = place(slot).connect(&slot_db(slot));
        let left: i64 = db
            .query_one(
                "SELECT count(*) FROM webhook.inbox WHERE status NOT IN ('processed', 'stale')",
                &[],
            )
            .unwrap()
            .get(0);
        left == 0
    })
}

fn wait_until(what: &str, limit: Duration, mut ready: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ready() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

// ---------------------------------------------------------------------------

/// The proxy's choice, SQL's slot, and the examples' (Python, Node, Rust)
/// are one function; ids carry the slot that made them; the cluster map
/// is what the slots say they are.
#[test]
fn routing_is_one_function_in_sql_the_examples_and_the_proxy() {
    let _serial = serial();
    tier();
    let mut proxy = proxy_as_app().unwrap();
    let mut sent = Vec::new();
    for n in 0..120 {
        sent.push(stripe_event(&format!("evt_route_{n}")));
        sent.push(github_event(n, "route"));
        sent.push(order_event(
            &format!("cus_route_{}", n % 40),
            n as i64,
            "route",
        ));
    }
    let mut id_slots = HashMap::new();
    for d in &sent {
        let answer = receive(&mut proxy, d).unwrap();
        assert_eq!(answer.status, "queued", "{d:?}: {answer:?}");
        id_slots.insert(
            (d.provider.to_string(), d.event_id.clone()),
            slot_of_id(answer.id.as_deref().unwrap()),
        );
    }
    let landed = where_events_are();

    // SQL, in the application's database: the route key from the
    // registry's sources, then the slot.
    let mut shop = Server::App.connect("shop");
    let mut keys = Vec::new();
    for d in &sent {
        let (scheme, id_from, entity_from) = match d.provider {
            "github" => ("github", "header:X-GitHub-Delivery", None),
            "orders" => ("stripe", "body:id", Some("body:data.object.id")),
            _ => ("stripe", "body:id", None),
        };
        let row = shop
            .query_one(
                "SELECT k, webhook_route_slot($1, k, $6)
                   FROM webhook_route_key($2, $3, $4, $5::text::jsonb, convert_to($7, 'UTF8')) k",
                &[
                    &d.provider,
                    &scheme,
                    &id_from,
                    &entity_from,
                    &d.headers.to_string(),
                    &SLOTS,
                    &d.body,
                ],
            )
            .unwrap();
        let key: String = row.get(0);
        let sql_slot: i32 = row.get(1);
        let expected_kind = match d.provider {
            "github" => "signed:",
            "orders" => "entity:",
            _ => "event:",
        };
        assert!(key.starts_with(expected_kind), "{d:?} routes by {key}");
        let where_ = &landed[&(d.provider.to_string(), d.event_id.clone())];
        assert_eq!(
            where_,
            &vec![sql_slot],
            "{d:?}: the proxy's choice and SQL's"
        );
        assert_eq!(
            id_slots[&(d.provider.to_string(), d.event_id.clone())],
            sql_slot,
            "the id's slot"
        );
        assert_eq!(
            example_tier::route_slot(d.provider, &key, SLOTS),
            Some(sql_slot)
        );
        keys.push((d.provider, key, sql_slot));
    }
    let input: String = keys.iter().map(|(p, k, _)| format!("{p}\t{k}\n")).collect();
    let expected: Vec<String> = keys.iter().map(|(_, _, s)| s.to_string()).collect();
    let from_python = run_with_input(&python(), &["examples/python/tier.py", "8"], &input);
    assert_eq!(
        from_python.lines().collect::<Vec<_>>(),
        expected,
        "Python's slots"
    );
    let from_node = run_with_input("node", &["examples/node/tier.js", "8"], &input);
    assert_eq!(
        from_node.lines().collect::<Vec<_>>(),
        expected,
        "Node's slots"
    );

    // Spread over every slot; one entity's events in one slot.
    let used: BTreeSet<i32> = keys.iter().map(|(_, _, s)| *s).collect();
    assert_eq!(used.len(), SLOTS as usize, "every slot takes deliveries");
    let mut entity_slots: HashMap<String, BTreeSet<i32>> = HashMap::new();
    for (p, k, s) in &keys {
        if *p == "orders" {
            entity_slots.entry(k.clone()).or_default().insert(*s);
        }
    }
    assert!(entity_slots.values().all(|s| s.len() == 1));

    // The cluster map, as the slots describe themselves.
    let mut admin = Server::Proxy.connect("tier");
    for slot in 0..SLOTS {
        let row = admin
            .query_one(
                "SELECT server, database, slot, slots FROM webhook_proxy.slot_database($1)",
                &[&slot],
            )
            .unwrap();
        let server: String = row.get(0);
        assert_eq!(server, format!("127.0.0.1:{}", place(slot).port()));
        assert_eq!(
            (
                row.get::<_, String>(1),
                row.get::<_, i32>(2),
                row.get::<_, i32>(3)
            ),
            (slot_db(slot), slot, SLOTS)
        );
    }
}

/// Every scheme of the catalog (genuine deliveries written by the
/// library's own test, `route::tests`, with the slots it computed): each
/// provider registered through the proxy, each delivery sent through it.
/// Where the proxy put it, the library's slot, SQL's and the examples' are
/// one, and the slot took it (it did not refuse it as misrouted).
#[test]
fn every_scheme_lands_where_its_vector_says() {
    let _serial = serial();
    tier();
    let path = std::env::var("TIER_ROUTE_VECTORS")
        .expect("TIER_ROUTE_VECTORS: run through .ci/scale-test");
    let vectors: Vec<serde_json::Value> = std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(vectors.len() > 21, "{} vectors", vectors.len());
    let text = |v: &serde_json::Value, k: &str| v[k].as_str().map(str::to_string);
    let mut admin = Server::Proxy.connect("tier");
    let mut proxy = proxy_as_app().unwrap();
    let mut shop = Server::App.connect("shop");
    let mut input = String::new();
    let mut expected = Vec::new();
    for v in &vectors {
        let provider = text(v, "provider").unwrap();
        let ordered = v["ordered"].as_bool().unwrap();
        admin
            .query(
                "SELECT * FROM webhook_register_provider($1, secret => $2, scheme => $3, event_id_from => $4,
                         event_type_from => $5, ordering => $6)",
                &[&provider, &text(v, "secret"), &text(v, "scheme"), &text(v, "event_id_from"),
                  &text(v, "event_type_from"), &ordered.then_some(true)],
            )
            .unwrap_or_else(|e| panic!("{provider} registers through the proxy: {e}"));
        let body = hex::decode(text(v, "body").unwrap()).unwrap();
        let headers = v["headers"].to_string();
        let url = text(v, "url");
        let status: String = proxy
            .query_one(
                "SELECT status FROM webhook_receive($1, $2::text::jsonb, $3::bytea, url => $4)",
                &[&provider, &headers, &body, &url],
            )
            .unwrap_or_else(|e| panic!("{provider}: {e}"))
            .get(0);
        assert!(
            matches!(status.as_str(), "claimed" | "queued"),
            "{provider}: {status}"
        );
        // SQL, from the registry as the proxy recorded it.
        let (scheme, id_from, entity_from): (String, String, Option<String>) = {
            let row = admin
                .query_one(
                    "SELECT scheme, event_id_from, entity_key_from FROM webhook_proxy.providers WHERE name = $1",
                    &[&provider],
                )
                .unwrap();
            (row.get(0), row.get(1), row.get(2))
        };
        let row = shop
            .query_one(
                "SELECT k, webhook_route_slot($1, k, $2)
                   FROM webhook_route_key($3, $4, $5, $6::text::jsonb, $7::bytea, $8) k",
                &[
                    &provider,
                    &SLOTS,
                    &scheme,
                    &id_from,
                    &entity_from,
                    &headers,
                    &body,
                    &url,
                ],
            )
            .unwrap();
        let (key, sql_slot): (String, i32) = (row.get(0), row.get(1));
        assert_eq!(
            Some(key.clone()),
            text(v, "route_key"),
            "{provider}: SQL's route key"
        );
        assert_eq!(
            i64::from(sql_slot),
            v["slot"].as_i64().unwrap(),
            "{provider}: SQL's slot"
        );
        input.push_str(&format!("{provider}\t{key}\n"));
        expected.push((provider, sql_slot));
    }
    let mut landed: HashMap<String, Vec<i32>> = HashMap::new();
    for slot in 0..SLOTS {
        let mut db = place(slot).connect(&slot_db(slot));
        for row in db
            .query(
                "SELECT DISTINCT provider FROM webhook.delivery_log WHERE provider ~ '^[ro]-'",
                &[],
            )
            .unwrap()
        {
            landed.entry(row.get(0)).or_default().push(slot);
        }
    }
    for (provider, slot) in &expected {
        assert_eq!(
            landed.get(provider),
            Some(&vec![*slot]),
            "{provider}: the proxy's choice"
        );
    }
    let slots: Vec<String> = expected.iter().map(|(_, s)| s.to_string()).collect();
    let from_python = run_with_input(&python(), &["examples/python/tier.py", "8"], &input);
    assert_eq!(
        from_python.lines().collect::<Vec<_>>(),
        slots,
        "Python's slots"
    );
    let from_node = run_with_input("node", &["examples/node/tier.js", "8"], &input);
    assert_eq!(from_node.lines().collect::<Vec<_>>(), slots, "Node's slots");
    for (line, (provider, slot)) in input.lines().zip(&expected) {
        let key = line.split_once('\t').unwrap().1;
        assert_eq!(example_tier::route_slot(provider, key, SLOTS), Some(*slot));
    }
    eprintln!(
        "routing: {} deliveries of {} schemes, ordered and not, where the library, SQL, the examples and the proxy say",
        expected.len(),
        vectors.iter().filter(|v| v["provider"].as_str().unwrap().starts_with("r-")).count()
    );
}

/// A registry call that fails on some slots: made again, it completes,
/// one row per slot, whatever the failure left behind. Two failures: a
/// slot cluster down (PL/Proxy connects to every slot before it sends,
/// so nothing is written), and slots that refuse the call (the others,
/// in autocommit, have committed their part).
#[test]
fn a_registry_call_that_failed_halfway_is_completed_by_making_it_again() {
    let _serial = serial();
    tier();
    let mut proxy = Server::Proxy.connect("tier");
    let active = |slot: i32, provider: &str, secret: &str| -> i64 {
        place(slot)
            .connect(&slot_db(slot))
            .query_one(
                "SELECT count(*) FROM webhook.provider_secrets
                  WHERE provider = $1 AND secret = $2 AND retired_at IS NULL",
                &[&provider, &secret],
            )
            .unwrap()
            .get(0)
    };
    let add = "SELECT * FROM webhook_add_secret($1, $2)";

    // A slot cluster down.
    let down = Server::Shard(3);
    let rotated = "whsec_tier_rotated";
    down.pg_ctl(&["-m", "fast", "stop"]);
    let failed = proxy.query(add, &[&"stripe", &rotated]);
    down.pg_ctl(&["-w", "start"]);
    assert!(failed.is_err(), "a slot was down");
    let took = (0..SLOTS)
        .filter(|&slot| active(slot, "stripe", rotated) == 1)
        .count();
    assert_eq!(
        proxy.query(add, &[&"stripe", &rotated]).unwrap().len(),
        SLOTS as usize
    );
    assert!((0..SLOTS).all(|slot| active(slot, "stripe", rotated) == 1));

    // Slots that refuse it: a provider registered on half of them only.
    let halves = "whsec_tier_halves";
    for slot in 0..SLOTS / 2 {
        place(slot)
            .connect(&slot_db(slot))
            .batch_execute(
                "SELECT webhook_register_provider('halves', scheme => 'stripe', inbox => true)",
            )
            .unwrap();
    }
    let refused = proxy.query(add, &[&"halves", &halves]).unwrap_err();
    assert_eq!(common::sql_state(&refused), Some("42704"), "{refused}");
    let half_took = (0..SLOTS)
        .filter(|&slot| active(slot, "halves", halves) == 1)
        .count();
    proxy
        .batch_execute(
            "SELECT * FROM webhook_register_provider('halves', scheme => 'stripe', inbox => true)",
        )
        .unwrap();
    assert_eq!(
        proxy.query(add, &[&"halves", &halves]).unwrap().len(),
        SLOTS as usize
    );
    assert!((0..SLOTS).all(|slot| active(slot, "halves", halves) == 1));

    // Deliveries signed with the rotated secret are taken wherever they
    // route.
    let mut app = proxy_as_app().unwrap();
    for n in 0..40 {
        let body = format!(r#"{{"id":"evt_rotated_{n}","type":"invoice.paid"}}"#);
        let d = Delivery {
            provider: "stripe",
            event_id: format!("evt_rotated_{n}"),
            headers: sign::stripe(&body, sign::now(), rotated),
            body,
        };
        assert_eq!(receive(&mut app, &d).unwrap().status, "queued", "{d:?}");
    }
    eprintln!(
        "registry: a cluster down left the call on {took} of {SLOTS} slots, refusing slots left it on {half_took}; made again, on all"
    );
}

/// `webhook_next` leases from every slot at once (batch per slot); a batch
/// of leases finishes in one call on the slot its ids carry, and a batch
/// mixing slots is refused whole, nothing of it finished.
#[test]
fn leases_come_from_every_slot_and_batches_finish_on_theirs() {
    let _serial = serial();
    tier();
    Server::Proxy
        .connect("tier")
        .batch_execute(&format!(
            "SELECT * FROM webhook_register_provider('batches', secret => '{STRIPE_SECRET}', scheme => 'stripe',
                     inbox => true)"
        ))
        .unwrap();
    let mut proxy = proxy_as_app().unwrap();
    for n in 0..120 {
        let mut d = stripe_event(&format!("evt_batch_{n}"));
        d.provider = "batches";
        assert_eq!(receive(&mut proxy, &d).unwrap().status, "queued");
    }
    let leased: Vec<(String, String)> = proxy
        .query(
            "SELECT id::text, event_id FROM webhook_next(3, provider => 'batches')",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let mut by_slot: BTreeMap<i32, Vec<String>> = BTreeMap::new();
    let mut event_of: HashMap<String, String> = HashMap::new();
    for (id, event_id) in &leased {
        by_slot.entry(slot_of_id(id)).or_default().push(id.clone());
        event_of.insert(id.clone(), event_id.clone());
    }
    assert_eq!(by_slot.len(), SLOTS as usize, "every slot leased");
    assert!(
        by_slot.values().all(|ids| ids.len() <= 3),
        "at most batch per slot"
    );
    let status = |id: &str| -> String {
        let slot = slot_of_id(id);
        let mut db = place(slot).connect(&slot_db(slot));
        db.query_one(
            "SELECT status::text FROM webhook.inbox WHERE provider = 'batches' AND event_id = $1",
            &[&event_of[id]],
        )
        .unwrap()
        .get(0)
    };
    // Two slots' leases in one batch: refused, nothing finished.
    let mixed = vec![by_slot[&0][0].clone(), by_slot[&1][0].clone()];
    assert!(proxy
        .execute(
            "SELECT webhook_complete_batch($1::text[]::uuid[])",
            &[&mixed]
        )
        .is_err());
    assert!(
        mixed.iter().all(|id| status(id) == "leased"),
        "a mixed batch finished nothing"
    );
    // Each slot's batch finishes there: half completed, half failed.
    for (slot, ids) in &by_slot {
        if slot % 2 == 0 {
            proxy
                .execute("SELECT webhook_complete_batch($1::text[]::uuid[])", &[ids])
                .unwrap();
            assert!(
                ids.iter().all(|id| status(id) == "processed"),
                "slot {slot}"
            );
        } else {
            proxy
                .execute(
                    "SELECT webhook_fail_batch($1::text[]::uuid[], 'downstream is down', retry_in => '0 s')",
                    &[ids],
                )
                .unwrap();
            assert!(ids.iter().all(|id| status(id) == "ready"), "slot {slot}");
        }
    }
}

/// Registry calls run on every slot, agree, and may run again; the
/// application role may not make them; the proxy keeps no secret.
#[test]
fn registry_calls_run_on_every_slot_and_repeat_safely() {
    let _serial = serial();
    tier();
    let mut proxy = Server::Proxy.connect("tier");
    for _ in 0..2 {
        let rows = proxy
            .query(
                "SELECT name, scheme, active_secrets FROM webhook_register_provider('paddle', secret => 'pdl_ntfset_01_tier')",
                &[],
            )
            .unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].get::<_, i32>(2), 1);
    }
    let added = proxy
        .query(
            "SELECT * FROM webhook_add_secret('paddle', 'pdl_ntfset_02_tier')",
            &[],
        )
        .unwrap();
    assert_eq!(added.len(), SLOTS as usize, "one answer per slot");
    for slot in 0..SLOTS {
        let mut db = place(slot).connect(&slot_db(slot));
        let secrets: i64 = db
            .query_one(
                "SELECT count(*) FROM webhook.provider_secrets WHERE provider = 'paddle' AND retired_at IS NULL",
                &[],
            )
            .unwrap()
            .get(0);
        assert_eq!(secrets, 2, "slot {slot}");
    }
    proxy
        .batch_execute("SELECT webhook_retire_secret('paddle', 'pdl_ntfset_01_tier')")
        .unwrap();
    for slot in 0..SLOTS {
        let mut db = place(slot).connect(&slot_db(slot));
        let active: i64 = db
            .query_one(
                "SELECT count(*) FROM webhook.provider_secrets WHERE provider = 'paddle' AND retired_at IS NULL",
                &[],
            )
            .unwrap()
            .get(0);
        assert_eq!(active, 1, "slot {slot} retired one");
    }
    let routes: Vec<String> = proxy
        .query(
            "SELECT name FROM webhook_proxy.providers WHERE name !~ '^[ro]-' ORDER BY name",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    // What every slot registered, and nothing else (other tests add theirs).
    for name in ["github", "orders", "paddle", "stripe"] {
        assert!(routes.iter().any(|r| r == name), "{name} in {routes:?}");
    }
    for slot in 0..SLOTS {
        let mut db = place(slot).connect(&slot_db(slot));
        let registered: Vec<String> = db
            .query(
                "SELECT name FROM webhook.providers WHERE name !~ '^[ro]-' ORDER BY name",
                &[],
            )
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert_eq!(registered, routes, "slot {slot}");
    }
    // Nothing on the proxy holds a secret.
    let columns: i64 = proxy
        .query_one(
            "SELECT count(*) FROM information_schema.columns
              WHERE table_schema = 'webhook_proxy' AND column_name ILIKE '%secret%'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(columns, 0);

    // A quarantine goes to the entity's slot only; a limit to every slot.
    let entity_slot: i32 = Server::App
        .connect("shop")
        .query_one(
            "SELECT webhook_route_slot('orders', 'entity:cus_quarantined', $1)",
            &[&SLOTS],
        )
        .unwrap()
        .get(0);
    proxy
        .batch_execute(
            "SELECT webhook_quarantine('orders', 'cus_quarantined', reason => 'a tier test');
             SELECT webhook_set_limit('default', 'orders', max_leases => 50);",
        )
        .unwrap();
    let held = |sql: &str| -> Vec<i32> {
        (0..SLOTS)
            .filter(|&slot| {
                let n: i64 = place(slot)
                    .connect(&slot_db(slot))
                    .query_one(sql, &[])
                    .unwrap()
                    .get(0);
                n > 0
            })
            .collect()
    };
    let quarantined = "SELECT count(*) FROM webhook.pauses WHERE entity_key = 'cus_quarantined'";
    let limited =
        "SELECT count(*) FROM webhook.limits WHERE provider = 'orders' AND max_leases = 50";
    assert_eq!(held(quarantined), vec![entity_slot]);
    assert_eq!(held(limited), (0..SLOTS).collect::<Vec<_>>());
    proxy
        .batch_execute(
            "SELECT webhook_release('orders', 'cus_quarantined');
             SELECT webhook_set_limit('default', 'orders');",
        )
        .unwrap();
    assert!(held(quarantined).is_empty() && held(limited).is_empty());

    let mut app = proxy_as_app().unwrap();
    for sql in [
        "SELECT * FROM webhook_quarantine('orders', 'cus_1')",
        "SELECT * FROM webhook_register_provider('evil', secret => 'x')",
        "SELECT * FROM webhook_add_secret('stripe', 'whsec_mine')",
        "SELECT * FROM webhook_proxy.providers",
    ] {
        let err = app.batch_execute(sql).unwrap_err();
        assert_eq!(common::sql_state(&err), Some("42501"), "{sql}: {err}");
    }
    // complete_on_commit cannot cross the tier.
    let d = stripe_event("evt_tier_coc");
    let err = app
        .query_one(
            "SELECT * FROM webhook_receive($1, $2::text::jsonb, $3::text, complete_on_commit => true)",
            &[&d.provider, &d.headers.to_string(), &d.body],
        )
        .unwrap_err();
    assert_eq!(common::sql_state(&err), Some("0A000"), "{err}");
}

/// Several senders, redeliveries, and GitHub replays under fresh unsigned
/// delivery ids; one slot cluster crashes (`-m immediate`) mid-storm and
/// comes back; workers lease and complete through the proxy throughout.
/// 0 duplicated, 0 lost, every replay refused, the crashed cluster's
/// leases expired and taken over.
#[test]
fn a_storm_survives_a_slot_cluster_crash() {
    let _serial = serial();
    tier();
    const SENDERS: usize = 4;
    const PER_SENDER: usize = 700;
    let crashed = Server::Shard(2);
    let errors = Arc::new(AtomicUsize::new(0));
    let progress = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let _stop_on_drop = StopOnDrop(stop.clone());
    let done = Arc::new(Completions(Mutex::new(BTreeMap::new())));

    // A worker that leased from the crashed cluster's slots just before
    // the crash, and died with it: its leases must expire and be taken.
    let workers: Vec<_> = (0..3)
        .map(|_| {
            let (stop, done) = (stop.clone(), done.clone());
            std::thread::spawn(move || work(&stop, "3 seconds", &done))
        })
        .collect();

    let senders: Vec<_> = (0..SENDERS)
        .map(|c| {
            let (errors, progress) = (errors.clone(), progress.clone());
            std::thread::spawn(move || {
                let mut proxy = None;
                let mut answers = Vec::new();
                let mut genuine_github = Vec::new();
                for n in 0..PER_SENDER {
                    let d = match n % 3 {
                        0 => stripe_event(&format!("evt_storm_{c}_{n}")),
                        1 => github_event(n, &format!("storm{c}")),
                        _ => order_event(&format!("cus_storm_{c}_{}", n % 50), n as i64, "storm"),
                    };
                    let first = send_until_answered(&mut proxy, &d, &errors);
                    answers.push((d.clone(), "first", first));
                    if n % 4 == 0 {
                        // A redelivery of the same event.
                        let again = send_until_answered(&mut proxy, &d, &errors);
                        answers.push((d.clone(), "again", again));
                    }
                    if d.provider == "github" {
                        genuine_github.push(d);
                    }
                    if n % 5 == 0 {
                        if let Some(g) = genuine_github.get(n % genuine_github.len().max(1)) {
                            let replay = github_replay(g, n);
                            let answer = send_until_answered(&mut proxy, &replay, &errors);
                            answers.push((replay, "replay", answer));
                        }
                    }
                    progress.fetch_add(1, Ordering::Relaxed);
                }
                answers
            })
        })
        .collect();

    // Mid-storm: lease what the crashed cluster's slots hold (as a worker
    // on that side would), then stop the cluster as a power cut would.
    wait_until("a third of the storm", Duration::from_secs(120), || {
        progress.load(Ordering::Relaxed) >= SENDERS * PER_SENDER / 3
    });
    let mut orphaned = Vec::new();
    {
        let mut proxy = proxy_as_app().unwrap();
        for slot in [2, 6] {
            for row in proxy
                .query("SELECT id, provider, event_id FROM webhook_next_on($1, 5, lease => '2 seconds')", &[&slot])
                .unwrap()
            {
                orphaned.push((slot, row.get::<_, String>(1), row.get::<_, String>(2)));
            }
        }
    }
    crashed.pg_ctl(&["-m", "immediate", "stop"]);
    std::thread::sleep(Duration::from_secs(2));
    crashed.pg_ctl(&["-w", "start"]);

    let mut answers = Vec::new();
    for s in senders {
        answers.extend(s.join().unwrap());
    }
    wait_until(
        "the workers to drain the tier",
        Duration::from_secs(180),
        drained,
    );
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }

    // Every replay refused; every genuine first delivery queued; every
    // redelivery a duplicate.
    let mut sent = BTreeSet::new();
    for (d, kind, answer) in &answers {
        match *kind {
            "replay" => assert_eq!(
                (answer.http_status, answer.reason.as_deref()),
                (401, Some("replayed")),
                "{d:?}"
            ),
            "first" => {
                assert_eq!(answer.status, "queued", "{d:?}");
                sent.insert((d.provider.to_string(), d.event_id.clone()));
            }
            _ => assert_eq!(answer.status, "duplicate", "{d:?}"),
        }
    }
    let replays = answers.iter().filter(|a| a.1 == "replay").count();
    assert!(replays >= 100, "{replays} replays");
    let landed = where_events_are();
    let storm: BTreeMap<_, _> = landed
        .iter()
        .filter(|((_, e), _)| e.contains("storm"))
        .collect();
    // 0 lost, 0 duplicated: each event in one slot, completed once.
    assert_eq!(storm.len(), sent.len(), "events in the tier");
    assert!(
        storm.values().all(|slots| slots.len() == 1),
        "an event in two slots"
    );
    let done = done.0.lock().unwrap();
    for key in &sent {
        assert_eq!(done.get(key), Some(&1), "completions of {key:?}");
    }
    // The orphaned leases ran out and were taken over: a second attempt.
    assert!(!orphaned.is_empty());
    for (slot, provider, event_id) in &orphaned {
        let mut db = place(*slot).connect(&slot_db(*slot));
        let attempts: i32 = db
            .query_one(
                "SELECT attempts FROM webhook.inbox WHERE provider = $1 AND event_id = $2",
                &[provider, event_id],
            )
            .unwrap()
            .get(0);
        assert!(
            attempts >= 2,
            "{provider}/{event_id} was taken over ({attempts} attempts)"
        );
    }
    assert!(
        errors.load(Ordering::Relaxed) > 0,
        "the crash was felt by the senders"
    );
    eprintln!(
        "storm: {} deliveries ({} events, {replays} replays refused), {} retried sends, {} leases taken over",
        answers.len(),
        sent.len(),
        errors.load(Ordering::Relaxed),
        orphaned.len()
    );
}

/// Python apply workers (examples/python/tier_apply_worker.py) killed
/// right after the application's commit, before the tier's completion:
/// every event's business row exactly once.
#[test]
fn apply_is_exactly_once_when_workers_die_between_the_two_commits() {
    let _serial = serial();
    tier();
    let mut proxy = proxy_as_app().unwrap();
    const EVENTS: usize = 400;
    for n in 0..EVENTS {
        assert_eq!(
            receive(&mut proxy, &stripe_event(&format!("evt_apply_{n}")))
                .unwrap()
                .status,
            "queued"
        );
    }
    let spawn =
        |crash_after: Option<usize>| apply_worker(&[("TIER_LEASE", "2 seconds")], crash_after);
    // Workers that die after their 7th to 30th application commit, until
    // twenty of them have died that way.
    let mut crashes = 0;
    let mut round = 0;
    while crashes < 20 {
        let mut pool: Vec<_> = (0..2)
            .map(|i| spawn(Some(7 + (round * 2 + i) % 24)))
            .collect();
        round += 1;
        for child in &mut pool {
            let status = child.wait().unwrap();
            if status.code() == Some(3) {
                crashes += 1;
            } else {
                assert!(status.success(), "worker exited with {status}");
            }
        }
        if unprocessed("evt_apply_%") == 0 {
            break;
        }
    }
    // Then workers that do not die drain the rest.
    let mut pool: Vec<_> = (0..2).map(|_| spawn(None)).collect();
    for child in &mut pool {
        assert!(child.wait().unwrap().success());
    }
    let mut shop = Server::App.connect("shop");
    let rows = shop
        .query_one(
            "SELECT count(*), count(DISTINCT event_id) FROM ledger WHERE event_id LIKE 'evt_apply_%'",
            &[],
        )
        .unwrap();
    assert_eq!(
        (rows.get::<_, i64>(0), rows.get::<_, i64>(1)),
        (EVENTS as i64, EVENTS as i64)
    );
    let duplicates: i64 = shop
        .query_one(
            "SELECT count(*) FROM webhook.delivery_log WHERE event_id LIKE 'evt_apply_%' AND claim_status = 'duplicate'",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(crashes >= 10, "{crashes} workers died between the commits");
    assert!(
        duplicates >= crashes as i64,
        "each crash's event came back as a duplicate ({duplicates})"
    );
    eprintln!("apply: {EVENTS} events, {crashes} workers killed between the commits, {duplicates} duplicates answered by the application");
}

/// The apply worker while the proxy and the application's database
/// restart under it: it opens its connections again (never polling a
/// dead one) and applies every event exactly once.
#[test]
fn the_apply_worker_rides_out_restarts_of_the_proxy_and_the_application_database() {
    let _serial = serial();
    tier();
    let mut proxy = proxy_as_app().unwrap();
    const EVENTS: usize = 150;
    for n in 0..EVENTS {
        assert_eq!(
            receive(&mut proxy, &stripe_event(&format!("evt_restart_{n}")))
                .unwrap()
                .status,
            "queued"
        );
    }
    drop(proxy);
    let mut worker = apply_worker(&[("TIER_LEASE", "2 seconds"), ("TIER_BATCH", "2")], None);
    let applied = || -> i64 {
        Server::App
            .connect("shop")
            .query_one(
                "SELECT count(*) FROM ledger WHERE event_id LIKE 'evt_restart_%'",
                &[],
            )
            .unwrap()
            .get(0)
    };
    wait_until("the worker applies", Duration::from_secs(30), || {
        applied() > 0
    });
    Server::Proxy.pg_ctl(&["-m", "fast", "-w", "restart"]);
    let after_proxy = applied();
    wait_until(
        "the worker applies after the proxy restarted",
        Duration::from_secs(30),
        || applied() > after_proxy,
    );
    Server::App.pg_ctl(&["-m", "fast", "-w", "restart"]);
    let status = worker.wait().unwrap();
    assert!(status.success(), "the worker exited with {status}");
    let rows = Server::App
        .connect("shop")
        .query_one(
            "SELECT count(*), count(DISTINCT event_id) FROM ledger WHERE event_id LIKE 'evt_restart_%'",
            &[],
        )
        .unwrap();
    assert_eq!(
        (rows.get::<_, i64>(0), rows.get::<_, i64>(1)),
        (EVENTS as i64, EVENTS as i64),
        "every event applied once"
    );
    assert_eq!(
        unprocessed("evt_restart_%"),
        0,
        "every lease completed in the tier"
    );
}

/// Interleaved events of 200 entities across slots, shuffled, some sent
/// twice, applied by the example workers: every entity ends in its newest
/// event's state, and each entity's events live in one slot.
#[test]
fn every_entity_ends_in_its_newest_state_across_slots() {
    let _serial = serial();
    tier();
    const ENTITIES: usize = 200;
    const VERSIONS: i64 = 4;
    let mut deliveries = Vec::new();
    for e in 0..ENTITIES {
        for v in 1..=VERSIONS {
            let d = order_event(&format!("cus_ord_{e}"), v, "ord");
            if (e + v as usize).is_multiple_of(3) {
                deliveries.push(d.clone());
            }
            deliveries.push(d);
        }
    }
    common::shuffle(&mut deliveries, 20_261_203);
    // Two senders at once, while two workers apply.
    let halves: Vec<Vec<Delivery>> = deliveries
        .chunks(deliveries.len() / 2 + 1)
        .map(|c| c.to_vec())
        .collect();
    let spawn_worker = || apply_worker(&[], None);
    let mut workers: Vec<_> = (0..2).map(|_| spawn_worker()).collect();
    let senders: Vec<_> = halves
        .into_iter()
        .map(|half| {
            std::thread::spawn(move || {
                let errors = AtomicUsize::new(0);
                let mut proxy = None;
                for d in half {
                    let answer = send_until_answered(&mut proxy, &d, &errors);
                    assert!(
                        matches!(answer.status.as_str(), "queued" | "duplicate"),
                        "{answer:?}"
                    );
                }
            })
        })
        .collect();
    for s in senders {
        s.join().unwrap();
    }
    for w in &mut workers {
        assert!(w.wait().unwrap().success());
    }
    // A late worker in case the first ones went idle between two sends.
    let mut late = spawn_worker();
    assert!(late.wait().unwrap().success());

    let mut shop = Server::App.connect("shop");
    let wrong: Vec<(String, i64)> = shop
        .query(
            "SELECT entity, version FROM entity_state WHERE entity LIKE 'cus_ord_%' AND version <> $1",
            &[&VERSIONS],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let states: i64 = shop
        .query_one(
            "SELECT count(*) FROM entity_state WHERE entity LIKE 'cus_ord_%'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(states, ENTITIES as i64);
    assert!(
        wrong.is_empty(),
        "entities not in their newest state: {wrong:?}"
    );
    let landed = where_events_are();
    let mut entity_slots: HashMap<String, BTreeSet<i32>> = HashMap::new();
    for ((provider, event_id), slots) in &landed {
        if provider == "orders" && event_id.starts_with("evt_ord_") {
            let entity = event_id
                .trim_start_matches("evt_ord_")
                .rsplit_once('_')
                .unwrap()
                .0
                .to_string();
            entity_slots.entry(entity).or_default().extend(slots);
        }
    }
    assert_eq!(entity_slots.len(), ENTITIES);
    assert!(
        entity_slots.values().all(|s| s.len() == 1),
        "an entity split across slots"
    );
    let used: BTreeSet<i32> = entity_slots.values().flatten().copied().collect();
    assert_eq!(used.len(), SLOTS as usize);
}

/// Slot 5 moves from its cluster to a new one by logical replication
/// while deliveries continue; then the proxy's cluster map changes. Events
/// received before the move are duplicates after it; nothing is lost or
/// received twice.
#[test]
fn a_slot_moves_to_a_new_cluster_while_deliveries_continue() {
    let _serial = serial();
    tier();
    const MOVED: i32 = 5;
    let source = home(MOVED);
    let target = Server::Spare;
    let mut proxy = proxy_as_app().unwrap();
    let before: Vec<Delivery> = (0..200)
        .map(|n| stripe_event(&format!("evt_move_pre_{n}")))
        .collect();
    for d in &before {
        assert_eq!(receive(&mut proxy, d).unwrap().status, "queued");
    }

    // Deliveries go on throughout.
    let stop = Arc::new(AtomicBool::new(false));
    let _stop_on_drop = StopOnDrop(stop.clone());
    let sender = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let errors = AtomicUsize::new(0);
            let mut proxy = None;
            let mut sent = Vec::new();
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                let d = stripe_event(&format!("evt_move_live_{n}"));
                let answer = send_until_answered(&mut proxy, &d, &errors);
                assert_eq!(answer.status, "queued", "{d:?}");
                sent.push(d);
                n += 1;
            }
            (sent, errors.into_inner())
        })
    };

    // 1. The slot's database on the new cluster, empty, and subscribed.
    create_slot_database(target, MOVED);
    let mut new_db = target.connect(&slot_db(MOVED));
    new_db
        .batch_execute(
            "DO $$ DECLARE t text; BEGIN
                 SELECT string_agg(format('%I.%I', schemaname, tablename), ', ') INTO t
                   FROM pg_tables WHERE schemaname = 'webhook';
                 EXECUTE 'TRUNCATE ' || t;
             END $$",
        )
        .unwrap();
    let mut old_db = source.connect(&slot_db(MOVED));
    old_db
        .batch_execute(
            "CREATE PUBLICATION slot_move FOR TABLES IN SCHEMA webhook WITH (publish_via_partition_root = true)",
        )
        .unwrap();
    new_db
        .batch_execute(&format!(
            "CREATE SUBSCRIPTION slot_move CONNECTION '{} user=postgres' PUBLICATION slot_move",
            partition(MOVED, source)
        ))
        .unwrap();
    wait_until("the initial copy", Duration::from_secs(120), || {
        let pending: i64 = new_db
            .query_one(
                "SELECT count(*) FROM pg_subscription_rel WHERE srsubstate <> 'r'",
                &[],
            )
            .unwrap()
            .get(0);
        pending == 0
    });

    // 2. Cut over: no new sessions on the old database, the open ones
    // ended (their calls fail and their senders retry), the copy caught up.
    // (This test keeps its own session, to compare counts afterwards.)
    let own: i32 = old_db
        .query_one("SELECT pg_backend_pid()", &[])
        .unwrap()
        .get(0);
    source
        .connect("postgres")
        .batch_execute(&format!(
            "ALTER DATABASE {db} ALLOW_CONNECTIONS false;
             SELECT pg_terminate_backend(pid) FROM pg_stat_activity
              WHERE datname = '{db}' AND backend_type = 'client backend' AND pid <> {own};",
            db = slot_db(MOVED)
        ))
        .unwrap();
    let counts = |db: &mut Client| -> (i64, i64) {
        let row = db
            .query_one(
                "SELECT (SELECT count(*) FROM webhook.delivery_log), (SELECT count(*) FROM webhook.inbox)",
                &[],
            )
            .unwrap();
        (row.get(0), row.get(1))
    };
    let final_old = counts(&mut old_db);
    wait_until("the copy to catch up", Duration::from_secs(60), || {
        counts(&mut new_db) == final_old
    });
    // Sequences are not replicated.
    new_db
        .batch_execute("SELECT setval('webhook.alerts_id_seq', coalesce((SELECT max(id) FROM webhook.alerts), 0) + 1, false)")
        .unwrap();

    // 3. The cluster map: the slot's partition names the new cluster.
    let mut admin = Server::Proxy.connect("tier");
    admin
        .batch_execute(&format!(
            "ALTER SERVER webhook_tier OPTIONS (SET partition_{MOVED} '{}')",
            partition(MOVED, target)
        ))
        .unwrap();
    PLACES.lock().unwrap()[MOVED as usize] = Some(target);
    new_db
        .batch_execute(
            "ALTER SUBSCRIPTION slot_move DISABLE;
             ALTER SUBSCRIPTION slot_move SET (slot_name = NONE);
             DROP SUBSCRIPTION slot_move;",
        )
        .unwrap();
    old_db
        .batch_execute("SELECT pg_drop_replication_slot('slot_move'); DROP PUBLICATION slot_move;")
        .unwrap();

    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::Relaxed);
    let (live, errors) = sender.join().unwrap();

    // The old database took nothing after the cut-over.
    assert_eq!(counts(&mut old_db), final_old);
    let row = admin
        .query_one(
            "SELECT server FROM webhook_proxy.slot_database($1)",
            &[&MOVED],
        )
        .unwrap();
    assert_eq!(
        row.get::<_, String>(0),
        format!("127.0.0.1:{}", target.port())
    );
    // Redeliveries of what came before the move: duplicates, wherever
    // they live now.
    for d in &before {
        assert_eq!(receive(&mut proxy, d).unwrap().status, "duplicate", "{d:?}");
    }
    // Nothing lost, nothing twice.
    let landed = where_events_are();
    for d in before.iter().chain(&live) {
        let slots = &landed[&(d.provider.to_string(), d.event_id.clone())];
        assert_eq!(slots.len(), 1, "{d:?}");
    }
    let moved_new: i64 = new_db
        .query_one(
            "SELECT count(*) FROM webhook.inbox WHERE event_id LIKE 'evt_move_%'",
            &[],
        )
        .unwrap()
        .get(0);
    let moved_old: i64 = old_db
        .query_one(
            "SELECT count(*) FROM webhook.inbox WHERE event_id LIKE 'evt_move_%'",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(
        moved_new > moved_old,
        "deliveries reached the moved slot after the move"
    );
    assert!(live.len() > 50, "{} deliveries during the move", live.len());
    eprintln!(
        "move: {} deliveries during the move ({errors} retried sends), slot {MOVED} holds {moved_new} of them (was {moved_old} at the cut-over)",
        live.len()
    );
}
