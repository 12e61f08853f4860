//! Shared by the client-side suites: a real server (from PGHOST, PGPORT,
//! PGUSER, as `make test` sets them), a database of each suite's own with
//! the extension installed, and a webhook handler written the way the
//! README tells users to write one.
#![allow(dead_code)]

use postgres::{Client, Config, NoTls};
use std::sync::OnceLock;
use std::time::Duration;

fn base_config() -> Config {
    let env = |k: &str, d: &str| std::env::var(k).unwrap_or_else(|_| d.to_string());
    let mut config = Config::new();
    config
        .host(&env("PGHOST", "127.0.0.1"))
        .port(env("PGPORT", "5432").parse().expect("PGPORT is a port number"))
        .user(&env("PGUSER", "postgres"))
        .connect_timeout(Duration::from_secs(10));
    if let Ok(password) = std::env::var("PGPASSWORD") {
        config.password(password);
    }
    config
}

static DATABASE: OnceLock<String> = OnceLock::new();

/// Create (fresh) the suite's database with the extension and a table the
/// handlers write their side effects to. Call once per test binary; later
/// calls return the same name.
pub fn database(name: &str) -> &'static str {
    DATABASE.get_or_init(|| {
        let mut admin = base_config()
            .dbname(&std::env::var("PGDATABASE").unwrap_or_else(|_| "postgres".into()))
            .connect(NoTls)
            .expect("connect to the test server (is it running? see `make test`)");
        admin.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).unwrap();
        admin.batch_execute(&format!("CREATE DATABASE {name}")).unwrap();
        let mut db = base_config().dbname(name).connect(NoTls).unwrap();
        db.batch_execute(
            "CREATE EXTENSION pg_webhook_inbox;
             CREATE TABLE side_effects (
                 provider text NOT NULL,
                 event_id text NOT NULL,
                 done_at  timestamptz NOT NULL DEFAULT clock_timestamp()
             );",
        )
        .unwrap();
        name.to_string()
    })
}

/// A connection to the suite's database. A claim never waits for another
/// transaction, so a lock wait past a few seconds is a bug: `lock_timeout`
/// turns it into a failed test instead of a hung one.
pub fn connect(db: &str) -> Client {
    base_config()
        .dbname(db)
        .options("-c lock_timeout=5s")
        .connect(NoTls)
        .expect("connect to the suite's database")
}

pub fn payload(event_id: &str) -> String {
    format!(r#"{{"id": "{event_id}", "type": "invoice.paid", "data": {{"amount": 1000}}}}"#)
}

/// What the handler answered the provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// 200 after doing the work.
    Done,
    /// 200 without doing anything: already processed.
    Duplicate,
    /// 409: another attempt is live; the provider will retry.
    InProgress,
    /// 500: the work failed and was recorded with webhook_fail.
    Failed,
}

impl Answer {
    pub fn acknowledged(self) -> bool {
        matches!(self, Answer::Done | Answer::Duplicate)
    }
}

pub struct Claim {
    pub id: String,
    pub claimed: bool,
    pub status: String,
    pub attempts: i32,
}

pub fn claim_in(
    tx: &mut impl postgres::GenericClient,
    provider: &str,
    event_id: &str,
    lease: Option<&str>,
) -> Result<Claim, postgres::Error> {
    let row = tx.query_one(
        "SELECT id::text, claimed, status, attempts
           FROM webhook_claim($1, $2, 'invoice.paid', $3::text, 'v1=test', $4::text::interval)",
        &[&provider, &event_id, &payload(event_id), &lease],
    )?;
    Ok(Claim { id: row.get(0), claimed: row.get(1), status: row.get(2), attempts: row.get(3) })
}

/// The one-transaction handler: claim, side effect and completion commit
/// together or not at all. `hold` keeps the transaction open after the
/// side effect, as slow business logic would.
pub fn deliver(client: &mut Client, provider: &str, event_id: &str, hold: Duration) -> Answer {
    try_deliver(client, provider, event_id, hold).expect("handler transaction")
}

pub fn try_deliver(
    client: &mut Client,
    provider: &str,
    event_id: &str,
    hold: Duration,
) -> Result<Answer, postgres::Error> {
    let mut tx = client.transaction()?;
    let claim = claim_in(&mut tx, provider, event_id, None)?;
    if !claim.claimed {
        tx.commit()?;
        return Ok(match claim.status.as_str() {
            "duplicate" => Answer::Duplicate,
            "in_progress" => Answer::InProgress,
            other => panic!("unexpected claim status {other}"),
        });
    }
    tx.execute("INSERT INTO side_effects (provider, event_id) VALUES ($1, $2)", &[&provider, &event_id])?;
    if !hold.is_zero() {
        std::thread::sleep(hold);
    }
    tx.execute("SELECT webhook_complete($1::text::uuid)", &[&claim.id])?;
    tx.commit()?;
    Ok(Answer::Done)
}

/// The provider's retry loop: deliver until acknowledged.
pub fn deliver_until_acknowledged(client: &mut Client, provider: &str, event_id: &str) -> usize {
    for attempt in 1..=200 {
        if deliver(client, provider, event_id, Duration::ZERO).acknowledged() {
            return attempt;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("{provider}/{event_id} was never acknowledged");
}

pub fn side_effects(client: &mut Client, provider: &str, event_id: &str) -> i64 {
    client
        .query_one(
            "SELECT count(*) FROM side_effects WHERE provider = $1 AND event_id = $2",
            &[&provider, &event_id],
        )
        .unwrap()
        .get(0)
}

pub fn event_state(client: &mut Client, provider: &str, event_id: &str) -> (String, i32) {
    let row = client
        .query_one(
            "SELECT status, attempts FROM webhook.events WHERE provider = $1 AND event_id = $2",
            &[&provider, &event_id],
        )
        .unwrap();
    (row.get(0), row.get(1))
}

/// The archive's processing_status of each delivery of an event, in order.
pub fn archive(client: &mut Client, provider: &str, event_id: &str) -> Vec<String> {
    client
        .query(
            "SELECT claim_status || ':' || processing_status FROM webhook.deliveries
              WHERE provider = $1 AND event_id = $2 ORDER BY created_at, id",
            &[&provider, &event_id],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}
