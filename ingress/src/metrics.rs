//! The HTTP layer's metrics, in Prometheus' text format at `/metrics`:
//! requests by provider and status, their latency, the wait for a database
//! connection, and what was turned away before the database. What happened
//! to the deliveries afterwards (queued, processed, dead) is the
//! extension's own metrics' (`webhook_metrics_prometheus()`).
//!
//! Labels are bounded: a provider label is only ever a registered
//! provider's name (a request naming any other counts under `-`).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

/// Seconds.
const BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

#[derive(Default, Clone)]
struct Histogram {
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn observe(&mut self, seconds: f64) {
        if self.counts.is_empty() {
            self.counts = vec![0; BUCKETS.len()];
        }
        for (i, bound) in BUCKETS.iter().enumerate() {
            if seconds <= *bound {
                self.counts[i] += 1;
            }
        }
        self.sum += seconds;
        self.count += 1;
    }

    fn write(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        for (i, bound) in BUCKETS.iter().enumerate() {
            let n = self.counts.get(i).copied().unwrap_or(0);
            let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {n}");
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}",
            self.count
        );
        let braces = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let _ = writeln!(out, "{name}_sum{braces} {}", self.sum);
        let _ = writeln!(out, "{name}_count{braces} {}", self.count);
    }
}

#[derive(Default)]
struct Figures {
    requests: BTreeMap<(String, u16), u64>,
    latency: BTreeMap<String, Histogram>,
    pool_wait: Histogram,
    rejected: BTreeMap<&'static str, u64>,
    connections_closed: BTreeMap<&'static str, u64>,
    senders_unread: BTreeMap<&'static str, u64>,
    database_errors: BTreeMap<String, u64>,
}

/// What is read when scraped: the pool, the requests in flight, the
/// registry.
pub struct Gauges {
    pub pool_max: usize,
    pub pool_open: usize,
    pub pool_in_use: usize,
    pub pool_waiting: usize,
    pub in_flight: usize,
    pub connections_open: usize,
    /// The bounds on connections, as set.
    pub connections: crate::connections::Bounds,
    pub providers_served: usize,
    /// When the registry was last read; None: not yet.
    pub registry_read: Option<SystemTime>,
}

#[derive(Default)]
pub struct Metrics {
    figures: Mutex<Figures>,
}

/// A counter by reason: `webhook_ingress_<name>{reason="…"}`.
fn by_reason(out: &mut String, name: &str, help: &str, counts: &BTreeMap<&'static str, u64>) {
    let _ = writeln!(out, "# HELP webhook_ingress_{name} {help}");
    let _ = writeln!(out, "# TYPE webhook_ingress_{name} counter");
    for (reason, n) in counts {
        let _ = writeln!(out, "webhook_ingress_{name}{{reason=\"{reason}\"}} {n}");
    }
}

/// Escape a label value.
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

impl Metrics {
    /// A request answered: `provider` is "-" unless registered.
    pub fn answered(&self, provider: &str, status: u16, took: Duration) {
        let mut f = self.figures();
        *f.requests
            .entry((provider.to_string(), status))
            .or_default() += 1;
        f.latency
            .entry(provider.to_string())
            .or_default()
            .observe(took.as_secs_f64());
    }

    fn figures(&self) -> std::sync::MutexGuard<'_, Figures> {
        self.figures.lock().expect("the metrics' lock")
    }

    /// Turned away before the database, and why.
    pub fn rejected(&self, reason: &'static str) {
        *self.figures().rejected.entry(reason).or_default() += 1;
    }

    /// A connection refused at the door or closed for outstaying its
    /// phase (connections.rs).
    pub fn connection_closed(&self, why: crate::connections::Closed) {
        *self
            .figures()
            .connections_closed
            .entry(why.label())
            .or_default() += 1;
    }

    /// A request behind the proxy whose client-address header named no
    /// address (`absent`, `unreadable`): taken as the proxy's.
    pub fn sender_unread(&self, why: crate::source::Unread) {
        *self
            .figures()
            .senders_unread
            .entry(why.label())
            .or_default() += 1;
    }

    pub fn pool_wait(&self, waited: Duration) {
        self.figures().pool_wait.observe(waited.as_secs_f64());
    }

    /// A delivery not stored because of the database (SQLSTATE, or
    /// `unreachable`).
    pub fn database_error(&self, code: &str) {
        *self
            .figures()
            .database_errors
            .entry(code.to_string())
            .or_default() += 1;
    }

    pub fn render(&self, g: Gauges) -> String {
        let f = self.figures();
        let mut out = String::new();
        out.push_str("# HELP webhook_ingress_requests_total Requests answered, by provider (- if not registered) and HTTP status.\n");
        out.push_str("# TYPE webhook_ingress_requests_total counter\n");
        for ((provider, status), n) in &f.requests {
            let _ = writeln!(
                out,
                "webhook_ingress_requests_total{{provider=\"{}\",code=\"{status}\"}} {n}",
                label(provider)
            );
        }
        out.push_str("# HELP webhook_ingress_request_duration_seconds Time from the request's headers to its answer.\n");
        out.push_str("# TYPE webhook_ingress_request_duration_seconds histogram\n");
        for (provider, h) in &f.latency {
            h.write(
                &mut out,
                "webhook_ingress_request_duration_seconds",
                &format!("provider=\"{}\"", label(provider)),
            );
        }
        out.push_str("# HELP webhook_ingress_pool_wait_seconds Time a request waited for a database connection.\n");
        out.push_str("# TYPE webhook_ingress_pool_wait_seconds histogram\n");
        f.pool_wait
            .write(&mut out, "webhook_ingress_pool_wait_seconds", "");
        by_reason(
            &mut out,
            "rejected_total",
            "Requests turned away before the database, by reason.",
            &f.rejected,
        );
        by_reason(
            &mut out,
            "connections_closed_total",
            "Connections refused at the door (max_connections, source_share), closed for outstaying a timeout (header_timeout, idle_timeout), or closed after an answer for their age or requests (max_age, max_requests).",
            &f.connections_closed,
        );
        by_reason(
            &mut out,
            "sender_unread_total",
            "Requests whose --client-ip-header named no address (absent, unreadable), taken as the proxy's.",
            &f.senders_unread,
        );
        out.push_str("# HELP webhook_ingress_database_errors_total Deliveries not stored because of the database, by SQLSTATE (unreachable: no answer).\n");
        out.push_str("# TYPE webhook_ingress_database_errors_total counter\n");
        for (code, n) in &f.database_errors {
            let _ = writeln!(
                out,
                "webhook_ingress_database_errors_total{{code=\"{}\"}} {n}",
                label(code)
            );
        }
        // Unix time; 0 until the first read, so that an alert on its age
        // fires for a registry never read as for one read long ago.
        let registry_read = g
            .registry_read
            .and_then(|at| at.duration_since(SystemTime::UNIX_EPOCH).ok())
            .map_or(0.0, |since| since.as_secs_f64().floor());
        for (name, help, value) in [
            (
                "pool_max",
                "Database connections the ingress may hold.",
                g.pool_max as f64,
            ),
            (
                "pool_open",
                "Database connections open.",
                g.pool_open as f64,
            ),
            (
                "pool_in_use",
                "Database connections lent to requests.",
                g.pool_in_use as f64,
            ),
            (
                "pool_waiting",
                "Requests waiting for a database connection.",
                g.pool_waiting as f64,
            ),
            ("in_flight", "Requests being answered.", g.in_flight as f64),
            (
                "connections_open",
                "Connections open.",
                g.connections_open as f64,
            ),
            (
                "connections_max",
                "Connections open at most (--max-connections).",
                g.connections.max as f64,
            ),
            (
                "connections_per_source_max",
                "Connections open from one peer address at most (--max-connections-per-source).",
                g.connections.per_source as f64,
            ),
            (
                "header_timeout_seconds",
                "Time a request's headers may take (--header-timeout).",
                g.connections.header_timeout.as_secs_f64(),
            ),
            (
                "idle_timeout_seconds",
                "Time a kept-alive connection may wait for its next request (--idle-timeout).",
                g.connections.idle_timeout.as_secs_f64(),
            ),
            (
                "total_timeout_seconds",
                "Time a request may take in all (--total-timeout).",
                g.connections.total_timeout.as_secs_f64(),
            ),
            (
                "providers_served",
                "Providers registered for the inbox that this ingress's role may receive for.",
                g.providers_served as f64,
            ),
            (
                "registry_read_timestamp_seconds",
                "When the provider registry was last read (Unix time; 0: never).",
                registry_read,
            ),
        ] {
            let _ = writeln!(out, "# HELP webhook_ingress_{name} {help}");
            let _ = writeln!(out, "# TYPE webhook_ingress_{name} gauge");
            let _ = writeln!(out, "webhook_ingress_{name} {value}");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_histograms_and_gauges() {
        let m = Metrics::default();
        m.answered("stripe", 200, Duration::from_millis(3));
        m.answered("stripe", 200, Duration::from_millis(30));
        m.rejected("rate_limited");
        m.pool_wait(Duration::from_micros(10));
        m.connection_closed(crate::connections::Closed::SourceShare);
        m.connection_closed(crate::connections::Closed::SourceShare);
        let text = m.render(Gauges {
            pool_max: 8,
            pool_open: 2,
            pool_in_use: 1,
            pool_waiting: 0,
            in_flight: 1,
            connections_open: 5,
            connections: crate::connections::Bounds {
                max: 2048,
                per_source: 64,
                prefixes: crate::source::Prefixes::default(),
                header_timeout: Duration::from_secs(10),
                idle_timeout: Duration::from_millis(2500),
                total_timeout: Duration::from_secs(30),
                max_age: Duration::from_secs(600),
                max_requests: 10000,
            },
            providers_served: 3,
            registry_read: Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)),
        });
        assert!(
            text.contains("webhook_ingress_requests_total{provider=\"stripe\",code=\"200\"} 2"),
            "{text}"
        );
        assert!(text.contains("webhook_ingress_request_duration_seconds_bucket{provider=\"stripe\",le=\"0.005\"} 1"), "{text}");
        assert!(
            text.contains("webhook_ingress_request_duration_seconds_count{provider=\"stripe\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("webhook_ingress_pool_wait_seconds_bucket{le=\"0.001\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("webhook_ingress_rejected_total{reason=\"rate_limited\"} 1"),
            "{text}"
        );
        assert!(text.contains("webhook_ingress_pool_max 8\n"), "{text}");
        assert!(
            text.contains("webhook_ingress_connections_closed_total{reason=\"source_share\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("webhook_ingress_connections_open 5\n"),
            "{text}"
        );
        assert!(
            text.contains("webhook_ingress_idle_timeout_seconds 2.5\n"),
            "{text}"
        );
        assert!(
            text.contains("webhook_ingress_providers_served 3\n"),
            "{text}"
        );
        assert!(
            text.contains("webhook_ingress_registry_read_timestamp_seconds 1800000000\n"),
            "{text}"
        );
    }
}
