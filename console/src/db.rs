//! The database, as the role the console was given. Each request opens its
//! own connection (the console serves a few people, not traffic) and
//! reads values as text, cast in SQL: a page shows them, it computes
//! nothing from them.

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

#[derive(Clone)]
pub struct Db {
    conninfo: String,
}

impl Db {
    pub fn new(conninfo: String) -> Self {
        Db { conninfo }
    }

    pub async fn connect(&self) -> Result<Session, Refusal> {
        let (client, connection) = tokio_postgres::connect(&self.conninfo, NoTls).await?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        // Long lists are paged and bounded, but a slow query never holds a
        // page for more than this.
        client
            .batch_execute(
                "SET statement_timeout = '15s'; SET application_name = 'webhook-console'",
            )
            .await?;
        Ok(Session { client })
    }
}

pub struct Session {
    client: Client,
}

impl Session {
    /// Every row, every column as text.
    pub async fn rows(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, Refusal> {
        let rows = self.client.query(sql, params).await?;
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
