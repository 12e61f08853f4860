//! `webhook-console`: a web console for pg_webhook_inbox, for the engineer
//! on call. Server-rendered HTML, no script; it connects as the role it is
//! given and calls only the extension's views and functions, so the
//! database decides who sees and does what (`webhook_grant_operator` acts,
//! `webhook_grant_viewer` looks).
//!
//! ```text
//! webhook-console [--listen 127.0.0.1:8480] [--database <conninfo>]
//! ```
//!
//! The database comes from `--database`, else `WEBHOOK_CONSOLE_DATABASE`,
//! else `DATABASE_URL`, else libpq's defaults (`PGHOST`…). Basic
//! authentication is required when `WEBHOOK_CONSOLE_USER` and
//! `WEBHOOK_CONSOLE_PASSWORD` are set. It answers only requests whose
//! `Host` is its listen address (and `localhost` on loopback) or one of
//! `WEBHOOK_CONSOLE_HOSTS` (comma-separated, as a reverse proxy passes
//! them), and holds at most `WEBHOOK_CONSOLE_CONNECTIONS` (4) connections.

mod charts;
mod db;
mod html;
mod page;
mod screens;
mod security;

use std::net::SocketAddr;
use std::sync::Arc;

/// What every request shares.
pub struct App {
    pub db: Arc<db::Db>,
    pub guard: security::Guard,
}

pub type State = axum::extract::State<Arc<App>>;

struct Config {
    listen: SocketAddr,
    database: String,
    basic: Option<(String, String)>,
    hosts: Vec<String>,
    connections: usize,
}

fn config() -> Result<Config, String> {
    let mut listen: SocketAddr = "127.0.0.1:8480".parse().expect("a literal address");
    let mut database = std::env::var("WEBHOOK_CONSOLE_DATABASE")
        .or_else(|_| std::env::var("DATABASE_URL"))
        .unwrap_or_default();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "--listen" => {
                listen = value("--listen")?.parse().map_err(|e| {
                    format!("--listen: {e} (an address and port, like 127.0.0.1:8480)")
                })?
            }
            "--database" => database = value("--database")?,
            "-h" | "--help" => {
                return Err(
                    "usage: webhook-console [--listen 127.0.0.1:8480] [--database <conninfo>]"
                        .into(),
                )
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if database.is_empty() {
        database = libpq_environment();
    }
    let basic = match (
        std::env::var("WEBHOOK_CONSOLE_USER"),
        std::env::var("WEBHOOK_CONSOLE_PASSWORD"),
    ) {
        (Ok(user), Ok(password)) if !user.is_empty() && !password.is_empty() => {
            Some((user, password))
        }
        (Ok(_), Err(_)) | (Err(_), Ok(_)) => {
            return Err(
                "set both WEBHOOK_CONSOLE_USER and WEBHOOK_CONSOLE_PASSWORD, or neither".into(),
            )
        }
        _ => None,
    };
    if basic.is_none() && !listen.ip().is_loopback() {
        eprintln!(
            "webhook-console: listening on {listen} without basic authentication: \
             anyone who reaches it acts as the database role it connects as"
        );
    }
    let hosts: Vec<String> = std::env::var("WEBHOOK_CONSOLE_HOSTS")
        .unwrap_or_default()
        .split(',')
        .map(str::to_string)
        .collect();
    let connections = match std::env::var("WEBHOOK_CONSOLE_CONNECTIONS") {
        Ok(n) => n
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=100).contains(n))
            .ok_or("WEBHOOK_CONSOLE_CONNECTIONS must be a number from 1 to 100")?,
        Err(_) => 4,
    };
    Ok(Config {
        hosts: security::hosts_for(listen, &hosts),
        listen,
        database,
        basic,
        connections,
    })
}

/// A connection string from libpq's environment variables, with libpq's
/// defaults for those unset (the Rust driver reads none of them itself).
fn libpq_environment() -> String {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let user = var("PGUSER")
        .or_else(|| var("USER"))
        .unwrap_or_else(|| "postgres".into());
    let mut parts = vec![
        (
            "host",
            var("PGHOST").unwrap_or_else(|| "/var/run/postgresql".into()),
        ),
        ("port", var("PGPORT").unwrap_or_else(|| "5432".into())),
        ("dbname", var("PGDATABASE").unwrap_or_else(|| user.clone())),
        ("user", user),
    ];
    if let Some(password) = var("PGPASSWORD") {
        parts.push(("password", password));
    }
    parts
        .into_iter()
        .map(|(key, value)| {
            format!(
                "{key}='{}'",
                value.replace('\\', "\\\\").replace('\'', "\\'")
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[tokio::main]
async fn main() {
    let config = match config() {
        Ok(config) => config,
        Err(message) => {
            eprintln!("webhook-console: {message}");
            std::process::exit(2);
        }
    };
    let app = Arc::new(App {
        db: Arc::new(db::Db::new(config.database, config.connections)),
        guard: security::Guard::new(config.basic, config.hosts),
    });
    // Fail at start, not at the first page, when the database is out of
    // reach or the role cannot see the extension.
    match app.db.connect().await {
        Ok(session) => match session.value("SELECT current_user::text", &[]).await {
            Ok(role) => eprintln!("webhook-console: connected as {}", role.unwrap_or_default()),
            Err(refusal) => {
                eprintln!("webhook-console: {} {}", refusal.code, refusal.message);
                std::process::exit(1);
            }
        },
        Err(refusal) => {
            eprintln!("webhook-console: {}", refusal.message);
            std::process::exit(1);
        }
    }
    let listener = match tokio::net::TcpListener::bind(config.listen).await {
        Ok(listener) => listener,
        Err(err) => {
            eprintln!("webhook-console: cannot listen on {}: {err}", config.listen);
            std::process::exit(1);
        }
    };
    eprintln!("webhook-console: http://{}/", config.listen);
    let router = screens::router(app);
    axum::serve(listener, router)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .expect("the server runs");
}
