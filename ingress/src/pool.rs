//! The database connections: never more than `--connections`, each kept
//! open between deliveries with `webhook_receive` prepared on it (or,
//! behind a transaction pooler, nothing prepared: see `Pooler`). A
//! request waits for one in a queue bounded in length (`--queue`) and in
//! time (`--pool-timeout`); past either it is answered 503 at once, so a
//! burst larger than the database can take queues in the providers'
//! retries, not in this process's memory.
//!
//! A connection broken by a restart or a failover is dropped the moment it
//! fails (or is found closed when taken from the idle list), and the next
//! request opens a new one: with several hosts in the connection string
//! and `target_session_attrs=read-write`, on whichever is the primary now.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, NoTls, Row, Statement};

/// The one statement a delivery runs: verified, archived and queued, or
/// refused, in one call that commits on its own (autocommit), so that the
/// answer goes out after the delivery is stored. `inbox => true`: queued
/// whatever the registry says, since only inbox providers are routed here
/// (a provider switched to claim mode since the last read of the registry
/// is still stored, never lost).
const RECEIVE: &str = "SELECT status, http_status, reason, response, response_type
                         FROM webhook_receive($1, $2::jsonb, $3::bytea, inbox => true,
                                              url => $4, traceparent => $5)";

/// What `--database` reaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pooler {
    /// The server itself, or a pooler that lends a client one server
    /// connection for as long as it is connected (a session pooler): the
    /// statement is prepared once per connection and the backstop timeout
    /// set for the session.
    None,
    /// A pooler that lends a server connection for one transaction at a
    /// time (PgBouncer's pool_mode=transaction, Supavisor's and Neon's
    /// pooled endpoints, RDS Proxy): the next statement of the same client
    /// connection may run on another server connection, where a statement
    /// prepared on the first does not exist (or another of the same name
    /// does), and a session setting lands on whichever server connection
    /// ran it, for its next clients. So nothing is named and nothing is
    /// set for the session: each delivery is one unnamed statement.
    Transaction,
}

/// An open connection and, unless behind a transaction pooler, its
/// prepared statement.
pub struct Conn {
    pub client: Client,
    pub receive: Option<Statement>,
    /// The task that drives the connection: it ends once the socket is
    /// closed, after the client is dropped.
    driver: tokio::task::JoinHandle<()>,
}

/// Why no connection was lent.
#[derive(Debug)]
pub enum Unavailable {
    /// Every connection stayed in use for the pool's timeout, or the queue
    /// was full.
    Busy(&'static str),
    /// None could be opened.
    Database(tokio_postgres::Error),
}

pub struct Pool {
    config: tokio_postgres::Config,
    permits: Arc<Semaphore>,
    idle: Mutex<Vec<Conn>>,
    timeout: Duration,
    queue: usize,
    waiting: AtomicUsize,
    /// Connections open now (idle or lent).
    open: Arc<AtomicUsize>,
    statement_timeout: Duration,
    pooler: Pooler,
    pub size: usize,
}

/// One delivery, as `webhook_receive` takes it.
pub struct Delivery<'a> {
    pub provider: &'a str,
    pub headers: &'a serde_json::Value,
    pub body: &'a [u8],
    pub url: Option<&'a str>,
    pub traceparent: Option<&'a str>,
}

impl Pool {
    pub fn new(
        config: tokio_postgres::Config,
        size: usize,
        timeout: Duration,
        queue: usize,
        statement_timeout: Duration,
        pooler: Pooler,
    ) -> Self {
        let mut config = config;
        // In the startup packet, which every pooler passes on, rather than
        // a SET, which a transaction pooler would leave on a server
        // connection of its own. A name the connection string gives wins.
        if config.get_application_name().is_none() {
            config.application_name("webhook-ingress");
        }
        Pool {
            config,
            permits: Arc::new(Semaphore::new(size)),
            idle: Mutex::new(Vec::new()),
            timeout,
            queue,
            waiting: AtomicUsize::new(0),
            open: Arc::new(AtomicUsize::new(0)),
            statement_timeout,
            pooler,
            size,
        }
    }

    /// The backstop: a statement of a request that gave up is cancelled
    /// then (see Lent's drop), and if the cancel is lost, the server gives
    /// up on it at twice the request's deadline.
    fn backstop_ms(&self) -> u128 {
        self.statement_timeout.as_millis().max(1) * 2
    }

    pub fn open_connections(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    pub fn in_use(&self) -> usize {
        self.size - self.permits.available_permits()
    }

    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    /// A connection, and how long the request waited for its turn.
    pub async fn get(self: &Arc<Self>) -> Result<(Lent, Duration), Unavailable> {
        let started = Instant::now();
        let permit = match self.permits.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                // Counted while it waits, however the wait ends: a request
                // given up by its deadline drops this future mid-wait.
                let waiting = Waiting::join(&self.waiting);
                if waiting.ahead >= self.queue {
                    return Err(Unavailable::Busy("queue_full"));
                }
                let permit =
                    tokio::time::timeout(self.timeout, self.permits.clone().acquire_owned()).await;
                drop(waiting);
                match permit {
                    Ok(Ok(permit)) => permit,
                    _ => return Err(Unavailable::Busy("pool_timeout")),
                }
            }
        };
        let waited = started.elapsed();
        let reused = {
            let mut idle = self.idle.lock().expect("the pool's lock");
            std::iter::from_fn(|| idle.pop()).find(|conn| {
                let alive = !conn.client.is_closed();
                if !alive {
                    self.open.fetch_sub(1, Ordering::Relaxed);
                }
                alive
            })
        };
        let conn = match reused {
            Some(conn) => conn,
            None => self.connect().await.map_err(Unavailable::Database)?,
        };
        Ok((
            Lent {
                conn: Some(conn),
                pool: Arc::clone(self),
                permit: Some(permit),
                busy: false,
            },
            waited,
        ))
    }

    async fn connect(&self) -> Result<Conn, tokio_postgres::Error> {
        let (client, connection) = self.config.connect(NoTls).await?;
        let open = Arc::clone(&self.open);
        open.fetch_add(1, Ordering::Relaxed);
        let driver = tokio::spawn(async move {
            let _ = connection.await;
        });
        let prepared = async {
            match self.pooler {
                Pooler::None => {
                    client
                        .batch_execute(&format!("SET statement_timeout = {}", self.backstop_ms()))
                        .await?;
                    client.prepare(RECEIVE).await.map(Some)
                }
                Pooler::Transaction => Ok(None),
            }
        }
        .await;
        match prepared {
            Ok(receive) => Ok(Conn {
                client,
                receive,
                driver,
            }),
            Err(err) => {
                open.fetch_sub(1, Ordering::Relaxed);
                Err(err)
            }
        }
    }
}

impl Conn {
    /// Receive one delivery: its row once it is committed. On the
    /// statement prepared for the connection; or, behind a transaction
    /// pooler, as an unnamed statement (parsed, bound and run in one round
    /// trip, and in one transaction of its own, which the pooler keeps on
    /// one server connection). No backstop timeout is set there: a SET
    /// would stay on the server connection for its next clients, and a
    /// transaction around the statement for a SET LOCAL costs a tenth of
    /// the throughput (docs/ingress.md); the role's own statement_timeout
    /// is the backstop.
    async fn receive(&self, d: &Delivery<'_>) -> Result<Row, tokio_postgres::Error> {
        match &self.receive {
            Some(statement) => {
                self.client
                    .query_one(
                        statement,
                        &[&d.provider, d.headers, &d.body, &d.url, &d.traceparent],
                    )
                    .await
            }
            None => {
                let params: [(&(dyn ToSql + Sync), Type); 5] = [
                    (&d.provider, Type::TEXT),
                    (d.headers, Type::JSONB),
                    (&d.body, Type::BYTEA),
                    (&d.url, Type::TEXT),
                    (&d.traceparent, Type::TEXT),
                ];
                let rows = self.client.query_typed(RECEIVE, &params).await?;
                // A function of one composite result in FROM: always one row.
                Ok(rows
                    .into_iter()
                    .next()
                    .expect("webhook_receive returns one row"))
            }
        }
    }
}

/// One request in the queue for a connection, counted until dropped.
struct Waiting<'a> {
    count: &'a AtomicUsize,
    /// How many were waiting when it joined.
    ahead: usize,
}

impl<'a> Waiting<'a> {
    fn join(count: &'a AtomicUsize) -> Self {
        Waiting {
            ahead: count.fetch_add(1, Ordering::Relaxed),
            count,
        }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A connection lent to one request; back to the idle list when it ends,
/// unless it broke, the request gave it up (`discard`), or the request was
/// dropped while a statement was running on it (its deadline passed): a
/// connection with a statement still running (waiting on a lock, perhaps)
/// would make the next request wait behind it.
pub struct Lent {
    conn: Option<Conn>,
    pool: Arc<Pool>,
    /// Its place among `--connections`: given back only once the
    /// connection is back in the pool or closed, so that the server never
    /// holds more connections of this pool than that.
    permit: Option<OwnedSemaphorePermit>,
    busy: bool,
}

impl Lent {
    pub fn conn(&self) -> &Conn {
        self.conn.as_ref().expect("a lent connection holds one")
    }

    /// Receive one delivery on this connection: its row once it is
    /// committed.
    pub async fn receive(&mut self, d: &Delivery<'_>) -> Result<Row, tokio_postgres::Error> {
        self.busy = true;
        let row = self.conn().receive(d).await;
        self.busy = false;
        row
    }

    /// Close it instead of keeping it: it failed in a way that leaves its
    /// state unknown.
    pub fn discard(mut self) {
        if self.conn.take().is_some() {
            self.pool.open.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            if self.busy {
                // Cancel the statement, then close: a backend blocked on
                // a lock would not notice a closed socket, and would stay
                // one more connection than the pool holds. (A statement
                // cancelled after it committed is answered as a duplicate
                // when the provider retries.)
                // Its place is given back once the socket is closed (or
                // after a few seconds, should the server not answer).
                let cancel = conn.client.cancel_token();
                let open = Arc::clone(&self.pool.open);
                let permit = self.permit.take();
                tokio::spawn(async move {
                    let _ = cancel.cancel_query(NoTls).await;
                    let Conn { client, driver, .. } = conn;
                    drop(client);
                    let _ = tokio::time::timeout(Duration::from_secs(5), driver).await;
                    open.fetch_sub(1, Ordering::Relaxed);
                    drop(permit);
                });
            } else if conn.client.is_closed() {
                self.pool.open.fetch_sub(1, Ordering::Relaxed);
            } else {
                self.pool.idle.lock().expect("the pool's lock").push(conn);
            }
        }
    }
}
