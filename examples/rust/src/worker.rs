//! An inbox worker in tokio-postgres: leases a batch of events from
//! `webhook_next`, does the work, and completes the batch in one call.
//!
//! Per event: one external side effect (an email through an HTTP API, with
//! an idempotency key derived from the event by `webhook_outbound_key`, so
//! a retry after a crash cannot send it twice) and one database write. The
//! batch's writes commit together with `webhook_complete_batch` (so each
//! happens exactly once). A failed event is recorded with `webhook_fail` in
//! the same transaction and retried after the backoff. It polls for work
//! (`LISTEN webhook_inbox` would wake it sooner; see the Python and Node
//! workers).
//!
//! On SIGTERM it finishes the event in hand, hands the rest of its batch
//! back at once (`webhook_fail` with `retry_in => 0`), and exits. When the
//! database goes away (a restart, a failover) it reconnects, waiting longer
//! each time up to half a minute, back to half a second once connected,
//! each wait drawn at random from its upper half so that workers one
//! restart dropped do not all come back at the same instant; what it held
//! was rolled back with its connection, and its leases run out and are
//! taken again.
//!
//! `DATABASE_URL=postgresql://app@localhost/shop cargo run --release --bin webhook-worker`

use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio_postgres::{GenericClient, Row};

const LANGUAGE: &str = "rust-worker";
const BATCH: i32 = 10;
const POLL: Duration = Duration::from_millis(500);

type Error = Box<dyn std::error::Error + Send + Sync>;

struct Worker {
    consumer: String,
    /// How long a batch's leases last: after a crash, its events wait this
    /// long before another worker takes them.
    lease: String,
    email_url: String,
    http: reqwest::Client,
    stopping: Arc<AtomicBool>,
}

impl Worker {
    async fn process(&self, tx: &impl GenericClient, row: &Row) -> Result<(), Error> {
        let (provider, event_id, event_type): (String, String, String) =
            (row.get(1), row.get(2), row.get(3));
        let payload: Option<Value> = row.get(4);
        let attempts: i32 = row.get(5);
        let fail_first = payload
            .as_ref()
            .and_then(|p| p.get("fail_first_attempt"))
            .and_then(Value::as_bool)
            .unwrap_or(false);
        if fail_first && attempts == 1 {
            return Err("injected failure on the first attempt".into());
        }
        // The same key on every attempt of this event, whichever lease runs it.
        let lease: uuid::Uuid = row.get(0);
        let key: String = tx
            .query_one(
                "SELECT webhook_outbound_key($1, $2)",
                &[&lease, &format!("email/{}", self.consumer)],
            )
            .await?
            .get(0);
        self.http
            .post(&self.email_url)
            .header("idempotency-key", key)
            .json(&json!({ "to": "customer@example.com", "event": event_id }))
            .send()
            .await?
            .error_for_status()?;
        tx.execute(
            "INSERT INTO orders (provider, event_id, event_type, language) VALUES ($1, $2, $3, $4)",
            &[&provider, &event_id, &event_type, &LANGUAGE],
        )
        .await?;
        Ok(())
    }

    /// One batch. Returns how many events it leased. The lease commits on
    /// its own, so operators see the events as leased
    /// (`webhook.inbox_stats`, `webhook.blocked_entities`). The batch's work
    /// then commits in one transaction with one `webhook_complete_batch`,
    /// each event in a savepoint, so that a failing event undoes only its
    /// own work. A lease that ran out and was taken over refuses the batch
    /// (55006) and its work rolls back: the events are then done one
    /// transaction each, so the others still commit.
    async fn work_once(&self, client: &mut tokio_postgres::Client) -> Result<usize, Error> {
        let leased = client
            .query(
                "SELECT id, provider, event_id, event_type, payload, attempts
                   FROM webhook_next($1, $2, lease => $3::text::interval)",
                &[&BATCH, &self.consumer, &self.lease],
            )
            .await?;
        match self.finish(client, &leased).await {
            Err(err) if lost_lease(&err) => {
                for row in &leased {
                    match self.finish(client, std::slice::from_ref(row)).await {
                        // 55006: this one was taken over; its work rolled
                        // back.
                        Err(err) if !lost_lease(&err) => return Err(err),
                        _ => {}
                    }
                }
            }
            done => done?,
        }
        Ok(leased.len())
    }

    /// Work the events and finish their leases, in one transaction.
    async fn finish(&self, client: &mut tokio_postgres::Client, rows: &[Row]) -> Result<(), Error> {
        let mut tx = client.transaction().await?;
        let mut done: Vec<uuid::Uuid> = Vec::with_capacity(rows.len());
        for row in rows {
            let lease: uuid::Uuid = row.get(0);
            if self.stopping.load(Ordering::SeqCst) {
                tx.execute(
                    "SELECT webhook_fail($1, 'worker shut down', retry_in => '0 s')",
                    &[&lease],
                )
                .await?;
                continue;
            }
            // A savepoint: a failure undoes this event's work only.
            let sp = tx.savepoint("event").await?;
            match self.process(&sp, row).await {
                Ok(()) => {
                    sp.commit().await?;
                    done.push(lease);
                }
                Err(err) if lost_lease(&err) => return Err(err),
                Err(err) => {
                    sp.rollback().await?;
                    tx.execute("SELECT webhook_fail($1, $2)", &[&lease, &err.to_string()])
                        .await?;
                }
            }
        }
        if !done.is_empty() {
            tx.execute("SELECT webhook_complete_batch($1)", &[&done])
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }
}

/// Whether the database said the lease was lost (SQLSTATE 55006).
fn lost_lease(err: &Error) -> bool {
    err.downcast_ref::<tokio_postgres::Error>()
        .and_then(tokio_postgres::Error::code)
        == Some(&tokio_postgres::error::SqlState::OBJECT_IN_USE)
}

/// How long to wait before reconnecting: doubling from 0.5 s to 30 s, each
/// wait drawn from the upper half of its step (jitter), and back to the
/// first step once a connection works.
struct Backoff {
    step: Duration,
}

impl Backoff {
    const FIRST: Duration = Duration::from_millis(500);
    const LAST: Duration = Duration::from_secs(30);

    fn connected(&mut self) {
        self.step = Self::FIRST;
    }

    fn next(&mut self) -> Duration {
        // Jitter without a crate: the clock's nanoseconds are random
        // enough to spread workers apart.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let wait = self.step / 2 + self.step.mul_f64(f64::from(nanos % 1000) / 2000.0);
        self.step = (self.step * 2).min(Self::LAST);
        wait
    }
}

/// Work on one connection until stopped, or until it breaks.
async fn run(worker: &Worker, url: &str, backoff: &mut Backoff) -> Result<(), Error> {
    let (mut client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    backoff.connected();
    while !worker.stopping.load(Ordering::SeqCst) {
        if worker.work_once(&mut client).await? == 0 {
            tokio::time::sleep(POLL).await;
        }
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let url = std::env::var("DATABASE_URL").expect("DATABASE_URL");
    let stopping = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stopping);
    tokio::spawn(async move {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler");
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        flag.store(true, Ordering::SeqCst);
    });
    let worker = Worker {
        consumer: std::env::var("WORKER_CONSUMER").unwrap_or_else(|_| "default".into()),
        lease: std::env::var("WORKER_LEASE").unwrap_or_else(|_| "1 minute".into()),
        email_url: std::env::var("EMAIL_URL")
            .unwrap_or_else(|_| "http://127.0.0.1:8025/send".into()),
        http: reqwest::Client::new(),
        stopping: Arc::clone(&stopping),
    };
    let mut backoff = Backoff {
        step: Backoff::FIRST,
    };
    while !stopping.load(Ordering::SeqCst) {
        match run(&worker, &url, &mut backoff).await {
            Ok(()) => break,
            Err(err) => {
                let delay = backoff.next();
                eprintln!("worker: database unavailable ({err}); reconnecting in {delay:?}");
                let until = tokio::time::Instant::now() + delay;
                while !stopping.load(Ordering::SeqCst) && tokio::time::Instant::now() < until {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }
    Ok(())
}
