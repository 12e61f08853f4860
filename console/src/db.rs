//! The database, as the role the console was given, through a small pool
//! of its own: at most `WEBHOOK_CONSOLE_CONNECTIONS` (4) connections, kept
//! open between requests. A request waits its turn for one at most
//! `WAIT`, then is answered "busy": a burst of requests to a slow page
//! never takes more backends than that from the application's roles
//! (give the console's role a CONNECTION LIMIT as well). Values are read
//! as text, cast in SQL: a page shows them, it computes nothing from them.

use std::sync::{Arc, Mutex};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, NoTls};

/// A row of text values (NULL as None).
pub type Row = Vec<Option<String>>;

/// What the database said when it refused: its SQLSTATE and message, shown
/// to the operator as they are.
#[derive(Debug)]
pub struct Refusal {
    pub code: String,
    pub message: String,
    pub hint: Option<String>,
}

impl From<tokio_postgres::Error> for Refusal {
    fn from(err: tokio_postgres::Error) -> Self {
        match err.as_db_error() {
            Some(db) => Refusal {
                code: db.code().code().to_string(),
                message: db.message().to_string(),
                hint: db.hint().map(str::to_string),
            },
            None => Refusal {
                code: "08006".into(),
                message: format!("the database could not be reached: {err}"),
                hint: None,
            },
        }
    }
}

impl Refusal {
    /// Whether the role was refused for lack of a privilege.
    pub fn is_privilege(&self) -> bool {
        self.code == "42501"
    }
}

/// How long a request waits for a connection before it is turned away.
const WAIT: std::time::Duration = std::time::Duration::from_secs(5);

pub struct Db {
    conninfo: String,
    /// One permit per connection the console may hold; waiters queue here.
    permits: Arc<Semaphore>,
    /// Connections open and not in use.
    idle: Mutex<Vec<Client>>,
}

impl Db {
    pub fn new(conninfo: String, connections: usize) -> Self {
        Db {
            conninfo,
            permits: Arc::new(Semaphore::new(connections.max(1))),
            idle: Mutex::new(Vec::new()),
        }
    }

    /// A connection for one request: an idle one, or a new one while the
    /// pool is below its size; else wait up to `WAIT` for one to be freed.
    pub async fn connect(self: &Arc<Self>) -> Result<Session, Refusal> {
        let permit = match tokio::time::timeout(WAIT, self.permits.clone().acquire_owned()).await {
            Ok(Ok(permit)) => permit,
            _ => {
                return Err(Refusal {
                    code: "53300".into(),
                    message: format!(
                        "the console is busy: every one of its connections stayed in use for {} s",
                        WAIT.as_secs()
                    ),
                    hint: Some("Try again in a moment.".into()),
                })
            }
        };
        let reused = {
            let mut idle = self.idle.lock().expect("the pool's lock");
            std::iter::from_fn(|| idle.pop()).find(|client| !client.is_closed())
        };
        let client = match reused {
            Some(client) => client,
            None => self.open().await?,
        };
        Ok(Session {
            client: Some(client),
            db: Arc::clone(self),
            _permit: permit,
        })
    }

    async fn open(&self) -> Result<Client, Refusal> {
        let (client, connection) = tokio_postgres::connect(&self.conninfo, NoTls).await?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        // Long lists are paged and bounded, but a slow query never holds a
        // page (nor a connection) for more than this.
        client
            .batch_execute(
                "SET statement_timeout = '15s'; SET application_name = 'webhook-console'",
            )
            .await?;
        Ok(client)
    }
}

/// A connection lent to one request; back to the pool when it ends.
pub struct Session {
    client: Option<Client>,
    db: Arc<Db>,
    _permit: OwnedSemaphorePermit,
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Some(client) = self.client.take().filter(|c| !c.is_closed()) {
            self.db.idle.lock().expect("the pool's lock").push(client);
        }
    }
}

impl Session {
    /// Every row, every column as text.
    pub async fn rows(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, Refusal> {
        let client = self
            .client
            .as_ref()
            .expect("a session holds its connection");
        let rows = client.query(sql, params).await?;
        Ok(rows
            .iter()
            .map(|row| {
                (0..row.len())
                    .map(|i| row.get::<_, Option<String>>(i))
                    .collect()
            })
            .collect())
    }

    /// The first column of the first row, if any.
    pub async fn value(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<String>, Refusal> {
        Ok(self
            .rows(sql, params)
            .await?
            .into_iter()
            .next()
            .and_then(|row| row.into_iter().next().flatten()))
    }
}
