//! `webhook-console`: a web console for pg_webhook_inbox, for the engineer
//! on call. Server-rendered HTML, no script; it connects as the role it is
//! given and calls only the extension's views and functions, so the
//! database decides who sees and does what (`webhook_grant_operator` acts,
//! `webhook_grant_viewer` looks).
//!
//! ```text
//! webhook-console [--listen 127.0.0.1:8480 | --listen unix:PATH] [--database <conninfo>]
//! ```
//!
//! The database comes from `--database`, else `WEBHOOK_CONSOLE_DATABASE`,
//! else `DATABASE_URL`, else libpq's defaults (`PGHOST`…). Basic
//! authentication is required when `WEBHOOK_CONSOLE_USER` and
//! `WEBHOOK_CONSOLE_PASSWORD` are set. It answers only requests whose
//! `Host` is its listen address (and `localhost` on loopback) or one of
//! `WEBHOOK_CONSOLE_HOSTS` (comma-separated, as a reverse proxy passes
//! them), and holds at most `WEBHOOK_CONSOLE_CONNECTIONS` (4) connections.
//!
//! On loopback without a password, every process of the machine can act
//! as the console's role. Where other users or services share it, listen
//! on a Unix socket (`unix:PATH`, made readable and writable by the
//! console's user and group only: a reverse proxy in that group reaches
//! it, nobody else) or set the password.

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

/// Where it listens: an address and port, or a Unix socket's path.
enum Listen {
    Tcp(SocketAddr),
    Unix(std::path::PathBuf),
}

impl std::fmt::Display for Listen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Listen::Tcp(address) => write!(f, "http://{address}/"),
            Listen::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

fn parse_listen(text: &str) -> Result<Listen, String> {
    match text.strip_prefix("unix:") {
        Some("") => Err(
            "--listen: unix: needs the socket's path, like unix:/run/webhook-console/console.sock"
                .into(),
        ),
        Some(path) => Ok(Listen::Unix(path.into())),
        None => text.parse().map(Listen::Tcp).map_err(|e| {
            format!("--listen: {e} (an address and port, like 127.0.0.1:8480, or unix:PATH)")
        }),
    }
}

struct Config {
    listen: Listen,
    database: String,
    basic: Option<(String, String)>,
    hosts: Vec<String>,
    connections: usize,
}

fn config() -> Result<Config, String> {
    let mut listen = Listen::Tcp("127.0.0.1:8480".parse().expect("a literal address"));
    let mut database = std::env::var("WEBHOOK_CONSOLE_DATABASE")
        .or_else(|_| std::env::var("DATABASE_URL"))
        .unwrap_or_default();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "--listen" => listen = parse_listen(&value("--listen")?)?,
            "--database" => database = value("--database")?,
            "-h" | "--help" => {
                return Err(
                    "usage: webhook-console [--listen 127.0.0.1:8480 | --listen unix:PATH] [--database <conninfo>]"
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
    match &listen {
        Listen::Tcp(address) if basic.is_none() && !address.ip().is_loopback() => eprintln!(
            "webhook-console: listening on {address} without basic authentication: \
             anyone who reaches it acts as the database role it connects as"
        ),
        Listen::Tcp(address) if basic.is_none() => eprintln!(
            "webhook-console: listening on {address} without basic authentication: \
             every process of this machine can act as the database role it connects as \
             (listen on a Unix socket, --listen unix:PATH, or set WEBHOOK_CONSOLE_PASSWORD)"
        ),
        _ => {}
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
        hosts: match &listen {
            Listen::Tcp(address) => security::hosts_for(*address, &hosts),
            // Through a socket, what the client calls it: localhost, or
            // the names a reverse proxy passes.
            Listen::Unix(_) => security::hosts_for_socket(&hosts),
        },
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
    let router = screens::router(app);
    let stop = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let refused = |err: std::io::Error| -> ! {
        eprintln!("webhook-console: cannot listen on {}: {err}", config.listen);
        std::process::exit(1);
    };
    match &config.listen {
        Listen::Tcp(address) => {
            let listener = tokio::net::TcpListener::bind(address)
                .await
                .unwrap_or_else(|e| refused(e));
            eprintln!("webhook-console: {}", config.listen);
            axum::serve(listener, router)
                .with_graceful_shutdown(stop)
                .await
                .expect("the server runs");
        }
        Listen::Unix(path) => {
            let listener = bind_socket(path).unwrap_or_else(|e| refused(e));
            eprintln!("webhook-console: {}", config.listen);
            axum::serve(listener, router)
                .with_graceful_shutdown(stop)
                .await
                .expect("the server runs");
            let _ = std::fs::remove_file(path);
        }
    }
}

/// A Unix socket at `path`, readable and writable by this user and its
/// group only. A socket left by an earlier run is replaced; any other
/// file there is not.
fn bind_socket(path: &std::path::Path) -> std::io::Result<tokio::net::UnixListener> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    if let Ok(found) = std::fs::symlink_metadata(path) {
        if !found.file_type().is_socket() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "a file that is not a socket is there",
            ));
        }
        std::fs::remove_file(path)?;
    }
    // Made as the umask allows (the packaged unit's UMask=0077: the user
    // alone), then opened to the group.
    let listener = tokio::net::UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))?;
    Ok(listener)
}
