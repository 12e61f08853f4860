//! Settings, from three places: a flag (`--max-body 1048576`) wins over
//! the environment (`WEBHOOK_INGRESS_MAX_BODY=1048576`), which wins over a
//! file named by `--config` or `WEBHOOK_INGRESS_CONFIG` (lines of
//! `WEBHOOK_INGRESS_MAX_BODY=1048576`, the format systemd's
//! `EnvironmentFile` reads, so one file serves both), which wins over the
//! default. Every value is checked at start: a bad one stops the process
//! with a message naming the setting, never a surprise at the first
//! delivery.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

/// One setting: its flag (without `--`), its default and what it is.
struct Setting {
    flag: &'static str,
    default: &'static str,
    help: &'static str,
}

const SETTINGS: &[Setting] = &[
    Setting { flag: "listen", default: "127.0.0.1:8490", help: "address and port to listen on" },
    Setting { flag: "database", default: "", help: "connection string (libpq key=value or URL; several hosts for failover, with target_session_attrs=read-write); else DATABASE_URL" },
    Setting { flag: "public-url", default: "", help: "the base URL providers call (https://hooks.example.com), for the schemes that sign the URL; never taken from the Host header" },
    Setting { flag: "prefix", default: "", help: "path prefix of the provider routes (/webhooks: POST /webhooks/<provider>)" },
    Setting { flag: "max-body", default: "1048576", help: "largest body taken, in bytes; a larger one is refused (413) before it is read" },
    Setting { flag: "max-requests", default: "1024", help: "deliveries in flight at most (bodies held in memory: this times --max-body); one more is answered 503 at once" },
    Setting { flag: "max-connections", default: "2048", help: "connections open at once at most; one more is answered 503 and closed before it is read" },
    Setting { flag: "max-connections-per-source", default: "", help: "connections open at once from one source (default 64; behind a proxy, --client-ip-header set, the proxy is the one peer: --max-connections)" },
    Setting { flag: "source-prefix-v4", default: "32", help: "leading bits of an IPv4 address that make one source, for its connections and its rate (24: a /24 shares one)" },
    Setting { flag: "source-prefix-v6", default: "64", help: "leading bits of an IPv6 address that make one source (64: one host holds a whole /64)" },
    Setting { flag: "header-timeout", default: "10", help: "seconds a request's headers may take, from its first byte (a new connection: from when it opened); the connection is closed after" },
    Setting { flag: "idle-timeout", default: "30", help: "seconds a kept-alive connection may wait after a delivery's answer for its next delivery (health checks, scrapes and unknown paths do not count); closed after" },
    Setting { flag: "max-connection-age", default: "600", help: "seconds a connection may stay open; its next answer after says Connection: close" },
    Setting { flag: "max-connection-requests", default: "10000", help: "requests one connection may send; the last one's answer says Connection: close" },
    Setting { flag: "total-timeout", default: "30", help: "seconds a request may take in all, from its first byte to its answer (headers, body and database); 408 or 503 after" },
    Setting { flag: "read-timeout", default: "5", help: "seconds a sender has to send its whole body (408 after)" },
    Setting { flag: "request-timeout", default: "9", help: "seconds a delivery may take in all, database retries included (GitHub gives up at 10); 503 after" },
    Setting { flag: "connections", default: "8", help: "database connections at most" },
    Setting { flag: "pooler", default: "none", help: "what --database reaches: the server, or a session pooler (none); a transaction pooler (transaction: PgBouncer's pool_mode=transaction, Supavisor's or Neon's pooled endpoint, RDS Proxy), through which no statement is named and nothing is set for the session" },
    Setting { flag: "pool-timeout", default: "2", help: "seconds a request waits for a free connection (503 after)" },
    Setting { flag: "queue", default: "256", help: "requests waiting for a connection at most; one more is answered 503 at once" },
    Setting { flag: "rate", default: "0", help: "deliveries per second allowed from one source (0: no limit); 429 beyond, before the database" },
    Setting { flag: "burst", default: "0", help: "deliveries a source may send at once above its rate (0: the rate, at least 1)" },
    Setting { flag: "client-ip-header", default: "", help: "header a trusted proxy puts the sender's address in (its last entry: X-Forwarded-For, or Forwarded's for=, read as RFC 7239 writes it); else the peer address. A request without a readable one is taken as the proxy's, and logged" },
    Setting { flag: "providers-refresh", default: "30", help: "seconds between reads of the registry (a provider not known is looked up at once, at most once a second)" },
    Setting { flag: "shutdown-timeout", default: "30", help: "seconds in-flight requests get to finish after SIGTERM" },
    Setting { flag: "access-log", default: "false", help: "log every request (true), or only refusals and failures (false)" },
];

fn env_name(flag: &str) -> String {
    format!("WEBHOOK_INGRESS_{}", flag.to_uppercase().replace('-', "_"))
}

/// The settings, checked.
#[derive(Clone, Debug)]
pub struct Config {
    pub listen: SocketAddr,
    pub database: String,
    pub public_url: Option<String>,
    pub prefix: String,
    pub max_body: usize,
    pub max_requests: usize,
    pub max_connections: usize,
    pub max_connections_per_source: usize,
    pub source_prefixes: crate::source::Prefixes,
    pub header_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_connection_age: Duration,
    pub max_connection_requests: usize,
    pub total_timeout: Duration,
    pub read_timeout: Duration,
    pub request_timeout: Duration,
    pub connections: usize,
    pub pooler: crate::pool::Pooler,
    pub pool_timeout: Duration,
    pub queue: usize,
    /// Deliveries per second and burst per source; None: no limit.
    pub rate: Option<(f64, f64)>,
    pub client_ip_header: Option<axum::http::HeaderName>,
    pub providers_refresh: Duration,
    pub shutdown_timeout: Duration,
    pub access_log: bool,
}

pub fn usage() -> String {
    let mut text = String::from(
        "usage: webhook-ingress [--config FILE] [--<setting> VALUE]...\n\n\
         Every setting is also read from WEBHOOK_INGRESS_<SETTING> and from the file.\n\n",
    );
    for s in SETTINGS {
        let default = if s.default.is_empty() {
            "unset"
        } else {
            s.default
        };
        text.push_str(&format!(
            "  --{:<27} {} (default {default})\n",
            s.flag, s.help
        ));
    }
    text
}

/// Read the settings from `args` (without the program's name), the
/// environment and the file.
pub fn load(args: impl IntoIterator<Item = String>) -> Result<Config, String> {
    let mut flags: HashMap<&'static str, String> = HashMap::new();
    let mut file: Option<String> = std::env::var("WEBHOOK_INGRESS_CONFIG").ok();
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let (name, inline) = match arg.split_once('=') {
            Some((name, value)) => (name.to_string(), Some(value.to_string())),
            None => (arg.clone(), None),
        };
        if name == "-h" || name == "--help" {
            return Err(usage());
        }
        let Some(flag) = name.strip_prefix("--") else {
            return Err(format!("unexpected argument {arg:?}\n\n{}", usage()));
        };
        let mut value = || {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or(format!("--{flag} needs a value"))
        };
        if flag == "config" {
            file = Some(value()?);
            continue;
        }
        let Some(setting) = SETTINGS.iter().find(|s| s.flag == flag) else {
            return Err(format!("unknown setting --{flag}\n\n{}", usage()));
        };
        flags.insert(setting.flag, value()?);
    }
    let from_file = match file.filter(|f| !f.is_empty()) {
        Some(path) => read_file(&path)?,
        None => HashMap::new(),
    };
    let value = |flag: &'static str| -> String {
        flags
            .get(flag)
            .cloned()
            .or_else(|| std::env::var(env_name(flag)).ok())
            .or_else(|| from_file.get(&env_name(flag)).cloned())
            .unwrap_or_else(|| {
                SETTINGS
                    .iter()
                    .find(|s| s.flag == flag)
                    .expect("a known setting")
                    .default
                    .to_string()
            })
    };
    checked(&value)
}

/// `KEY=VALUE` lines; blank lines and `#` comments skipped; a value may be
/// quoted.
fn read_file(path: &str) -> Result<HashMap<String, String>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("--config {path}: {e}"))?;
    let mut values = HashMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            return Err(format!("{path}:{}: expected KEY=VALUE", n + 1));
        };
        let key = key.trim().to_string();
        if !SETTINGS.iter().any(|s| env_name(s.flag) == key) {
            return Err(format!("{path}:{}: unknown setting {key}", n + 1));
        }
        let value = value.trim();
        let unquoted = value
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .or_else(|| value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
            .unwrap_or(value);
        values.insert(key, unquoted.to_string());
    }
    Ok(values)
}

fn checked(value: &dyn Fn(&'static str) -> String) -> Result<Config, String> {
    let number = |flag: &'static str, min: f64, max: f64| -> Result<f64, String> {
        let text = value(flag);
        text.trim()
            .parse::<f64>()
            .ok()
            .filter(|n| n.is_finite() && (min..=max).contains(n))
            .ok_or(format!(
                "--{flag}: {text:?} is not a number from {min} to {max}"
            ))
    };
    let seconds = |flag: &'static str, max: f64| -> Result<Duration, String> {
        number(flag, 0.001, max).map(Duration::from_secs_f64)
    };
    let listen = value("listen");
    let listen: SocketAddr = listen.parse().map_err(|e| {
        format!("--listen: {listen:?}: {e} (an address and port, like 127.0.0.1:8490)")
    })?;
    let mut database = value("database");
    if database.is_empty() {
        database = std::env::var("DATABASE_URL").unwrap_or_default();
    }
    if database.is_empty() {
        return Err(
            "--database: no database given (the flag, WEBHOOK_INGRESS_DATABASE or DATABASE_URL)"
                .into(),
        );
    }
    database
        .parse::<tokio_postgres::Config>()
        .map_err(|e| format!("--database: not a connection string: {e}"))?;
    let public_url =
        Some(value("public-url").trim_end_matches('/').to_string()).filter(|u| !u.is_empty());
    if let Some(url) = &public_url {
        let (scheme, rest) = url.split_once("://").unwrap_or(("", ""));
        if !matches!(scheme, "http" | "https") || rest.is_empty() || rest.contains(['?', '#']) {
            return Err(format!(
                "--public-url: {url:?} must be an http(s) URL without query or fragment, like https://hooks.example.com"
            ));
        }
    }
    let prefix = value("prefix").trim_end_matches('/').to_string();
    if !(prefix.is_empty() || prefix.starts_with('/')) || prefix.contains(['?', '#', '{', '}', '*'])
    {
        return Err(format!(
            "--prefix: {prefix:?} must be a path starting with /, like /webhooks"
        ));
    }
    let rate = number("rate", 0.0, 1e6)?;
    let burst = number("burst", 0.0, 1e6)?;
    let client_ip_header = match value("client-ip-header").trim() {
        "" => None,
        name => Some(
            axum::http::HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| format!("--client-ip-header: {name:?} is not a header name"))?,
        ),
    };
    let max_connections = number("max-connections", 1.0, 1e6)? as usize;
    // Behind a proxy every connection comes from the proxy: a share per
    // peer would be a bound on the proxy, so the default is the whole.
    let max_connections_per_source = match value("max-connections-per-source").trim() {
        "" if client_ip_header.is_some() => max_connections,
        "" => 64.min(max_connections),
        _ => number("max-connections-per-source", 1.0, 1e6)? as usize,
    };
    if max_connections_per_source > max_connections {
        return Err(format!(
            "--max-connections-per-source: {max_connections_per_source} is more than \
             --max-connections ({max_connections})"
        ));
    }
    let pooler = match value("pooler").trim() {
        "none" | "session" => crate::pool::Pooler::None,
        "transaction" => crate::pool::Pooler::Transaction,
        other => {
            return Err(format!(
                "--pooler: {other:?} is not none or transaction (a session pooler is none)"
            ))
        }
    };
    let access_log = match value("access-log").trim() {
        "true" | "on" | "1" | "yes" => true,
        "false" | "off" | "0" | "no" => false,
        other => return Err(format!("--access-log: {other:?} is not true or false")),
    };
    Ok(Config {
        listen,
        database,
        public_url,
        prefix,
        max_body: number("max-body", 1.0, 1024.0 * 1024.0 * 1024.0)? as usize,
        max_requests: number("max-requests", 1.0, 1e6)? as usize,
        max_connections,
        max_connections_per_source,
        source_prefixes: crate::source::Prefixes {
            v4: number("source-prefix-v4", 0.0, 32.0)? as u8,
            v6: number("source-prefix-v6", 0.0, 128.0)? as u8,
        },
        header_timeout: seconds("header-timeout", 3600.0)?,
        idle_timeout: seconds("idle-timeout", 3600.0)?,
        max_connection_age: seconds("max-connection-age", 86400.0 * 7.0)?,
        max_connection_requests: number("max-connection-requests", 1.0, 1e9)? as usize,
        total_timeout: seconds("total-timeout", 3600.0)?,
        read_timeout: seconds("read-timeout", 3600.0)?,
        request_timeout: seconds("request-timeout", 3600.0)?,
        connections: number("connections", 1.0, 1000.0)? as usize,
        pooler,
        pool_timeout: seconds("pool-timeout", 3600.0)?,
        queue: number("queue", 0.0, 1e6)? as usize,
        rate: (rate > 0.0).then_some((rate, if burst > 0.0 { burst } else { rate.max(1.0) })),
        client_ip_header,
        providers_refresh: seconds("providers-refresh", 86400.0)?,
        shutdown_timeout: seconds("shutdown-timeout", 3600.0)?,
        access_log,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load_with(args: &[&str]) -> Result<Config, String> {
        let mut all = vec!["--database".to_string(), "host=/tmp dbname=x".to_string()];
        all.extend(args.iter().map(|a| a.to_string()));
        load(all)
    }

    #[test]
    fn defaults_and_flags() {
        let c = load_with(&[]).unwrap();
        assert_eq!(c.listen.to_string(), "127.0.0.1:8490");
        assert_eq!(c.max_body, 1_048_576);
        assert!(c.rate.is_none());
        assert_eq!(c.pooler, crate::pool::Pooler::None);
        let pooled = load_with(&["--pooler", "transaction"]).unwrap();
        assert_eq!(pooled.pooler, crate::pool::Pooler::Transaction);
        assert_eq!(
            (c.max_connections, c.max_connections_per_source),
            (2048, 64)
        );
        assert_eq!(
            (c.header_timeout, c.idle_timeout, c.total_timeout),
            (
                Duration::from_secs(10),
                Duration::from_secs(30),
                Duration::from_secs(30)
            )
        );
        let behind_a_proxy = load_with(&["--client-ip-header", "X-Forwarded-For"]).unwrap();
        assert_eq!(behind_a_proxy.max_connections_per_source, 2048);
        let small = load_with(&["--max-connections", "10"]).unwrap();
        assert_eq!(small.max_connections_per_source, 10);
        let c = load_with(&[
            "--rate",
            "5",
            "--prefix=/webhooks/",
            "--public-url",
            "https://h.example.com/",
        ])
        .unwrap();
        assert_eq!(c.rate, Some((5.0, 5.0)));
        assert_eq!(c.prefix, "/webhooks");
        assert_eq!(c.public_url.as_deref(), Some("https://h.example.com"));
    }

    #[test]
    fn bad_values_name_their_setting() {
        for (args, named) in [
            (vec!["--listen", "nowhere"], "--listen"),
            (vec!["--max-body", "-1"], "--max-body"),
            (vec!["--connections", "0"], "--connections"),
            (vec!["--public-url", "hooks.example.com"], "--public-url"),
            (
                vec!["--public-url", "https://h.example.com/?a=1"],
                "--public-url",
            ),
            (vec!["--prefix", "webhooks"], "--prefix"),
            (vec!["--access-log", "maybe"], "--access-log"),
            (vec!["--pooler", "statement"], "--pooler"),
            (vec!["--nonsense", "1"], "--nonsense"),
            (vec!["--rate"], "--rate"),
            (vec!["--max-connections", "0"], "--max-connections"),
            (
                vec![
                    "--max-connections",
                    "10",
                    "--max-connections-per-source",
                    "11",
                ],
                "--max-connections-per-source",
            ),
            (vec!["--header-timeout", "0"], "--header-timeout"),
            (vec!["--idle-timeout", "x"], "--idle-timeout"),
            (vec!["--total-timeout", "-1"], "--total-timeout"),
        ] {
            let err = load_with(&args).unwrap_err();
            assert!(err.contains(named), "{args:?}: {err}");
        }
    }

    #[test]
    fn the_file_is_read_below_the_flags() {
        let path = std::env::temp_dir().join(format!("ingress-config-{}", std::process::id()));
        std::fs::write(
            &path,
            "# settings\nWEBHOOK_INGRESS_MAX_BODY=2048\nWEBHOOK_INGRESS_QUEUE=\"7\"\n",
        )
        .unwrap();
        let c = load_with(&["--config", path.to_str().unwrap(), "--queue", "9"]).unwrap();
        assert_eq!((c.max_body, c.queue), (2048, 9));
        std::fs::write(&path, "WEBHOOK_INGRESS_NOPE=1\n").unwrap();
        let err = load_with(&["--config", path.to_str().unwrap()]).unwrap_err();
        assert!(
            err.contains("unknown setting WEBHOOK_INGRESS_NOPE"),
            "{err}"
        );
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn the_environment_sits_between_the_flags_and_the_file() {
        // Only this test reads the read timeout.
        let path = std::env::temp_dir().join(format!("ingress-env-{}", std::process::id()));
        std::fs::write(&path, "WEBHOOK_INGRESS_READ_TIMEOUT=9\n").unwrap();
        let file = path.to_str().unwrap();
        std::env::set_var("WEBHOOK_INGRESS_READ_TIMEOUT", "7");
        let from_env = load_with(&["--config", file]).unwrap().read_timeout;
        let from_flag = load_with(&["--config", file, "--read-timeout", "3"])
            .unwrap()
            .read_timeout;
        std::env::remove_var("WEBHOOK_INGRESS_READ_TIMEOUT");
        let from_file = load_with(&["--config", file]).unwrap().read_timeout;
        std::fs::remove_file(&path).unwrap();
        assert_eq!(
            (from_flag, from_env, from_file),
            (
                Duration::from_secs(3),
                Duration::from_secs(7),
                Duration::from_secs(9)
            )
        );
    }
}
