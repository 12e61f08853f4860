//! `webhook-ingress`: the HTTP front door of pg_webhook_inbox's inbox.
//! `POST <prefix>/<provider>` takes a delivery of any provider registered
//! for the inbox, hands its headers and exact body to `webhook_receive`
//! (which verifies, archives and queues it) and answers what that says;
//! workers take the events with `webhook_next`. A team runs this instead
//! of writing a receiver, and gets its edges right once: body limits,
//! timeouts, a bounded pool, retries through a restart or failover, 503
//! with `Retry-After` whenever a delivery is not stored, rate limits,
//! graceful shutdown, health, readiness and metrics.
//!
//! ```text
//! webhook-ingress --database 'host=db1,db2 dbname=app user=ingress target_session_attrs=read-write' \
//!                 --public-url https://hooks.example.com --prefix /webhooks
//! ```
//!
//! Settings: `webhook-ingress --help`, and docs/ingress.md.

mod away;
mod config;
mod connections;
mod delivery;
mod limits;
mod log;
mod metrics;
mod pool;
mod providers;
mod source;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::json;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// What every request shares.
pub struct App {
    pub config: config::Config,
    pub pool: Arc<pool::Pool>,
    pub providers: providers::Providers,
    pub limit: Option<limits::RateLimit>,
    pub metrics: metrics::Metrics,
    pub bounds: connections::Bounds,
    /// Requests whose proxy header named no address, logged sampled.
    pub unread_sender: source::Sampled,
    /// Refused or failed deliveries, logged sampled without --access-log.
    pub refusals_logged: source::Sampled,
    /// Why /readyz said not ready, logged sampled (the answer says less).
    not_ready_logged: source::Sampled,
    open: Arc<connections::Open>,
    in_flight: Arc<AtomicUsize>,
    shutting_down: AtomicBool,
}

/// Counts a request in flight while it lives.
pub struct InFlight {
    counter: Arc<AtomicUsize>,
    /// Requests in flight, this one included, when it started.
    pub count: usize,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.counter.fetch_sub(1, Ordering::Relaxed);
    }
}

impl App {
    pub fn in_flight(&self) -> InFlight {
        InFlight {
            count: self.in_flight.fetch_add(1, Ordering::Relaxed) + 1,
            counter: Arc::clone(&self.in_flight),
        }
    }
}

fn router(app: Arc<App>) -> Router {
    let deliveries = format!("{}/{{provider}}", app.config.prefix);
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route(&deliveries, post(delivery::deliver))
        .with_state(app)
}

/// The process is up and serving.
async fn healthz() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        json!({ "ok": true }).to_string(),
    )
        .into_response()
}

/// Ready to take deliveries: not shutting down, the database reachable,
/// the extension there and its function granted to this role (the
/// registry is read through it, and with it the providers served).
async fn readyz(State(app): State<Arc<App>>) -> Response {
    // Said in a word: anyone may ask, and the database's own error names
    // roles and databases. The whole error goes to the log.
    let not_ready = |reason: &str, error: Option<String>| {
        if let Some(error) = error {
            app.not_ready_logged.log(|unlogged| {
                log::event(
                    "warn",
                    "not_ready",
                    json!({ "reason": reason, "error": error, "unlogged": unlogged }),
                )
            });
        }
        (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::CONTENT_TYPE, "application/json")],
            json!({ "ready": false, "reason": reason }).to_string(),
        )
            .into_response()
    };
    if app.shutting_down.load(Ordering::Relaxed) {
        return not_ready("shutting down", None);
    }
    let lent = match app.pool.get().await {
        Ok((lent, _)) => lent,
        Err(pool::Unavailable::Busy(why)) => {
            return not_ready("no free database connection", Some(why.to_string()))
        }
        Err(pool::Unavailable::Database(err)) => {
            app.providers.unread();
            return not_ready("database unreachable", Some(away::message(&err)));
        }
    };
    if let Err(err) = app.providers.read(&lent.conn().client).await {
        if away::is_away(&err) {
            lent.discard();
        }
        return not_ready(
            "the registry could not be read",
            Some(format!(
                "webhook_receivable_providers(): {}",
                away::message(&err)
            )),
        );
    }
    let (served, _) = app.providers.served();
    (
        [(header::CONTENT_TYPE, "application/json")],
        json!({ "ready": true, "providers": served }).to_string(),
    )
        .into_response()
}

async fn metrics(State(app): State<Arc<App>>) -> Response {
    let (providers_served, registry_read) = app.providers.served();
    let gauges = metrics::Gauges {
        pool_max: app.pool.size,
        pool_open: app.pool.open_connections(),
        pool_in_use: app.pool.in_use(),
        pool_waiting: app.pool.waiting(),
        in_flight: app.in_flight.load(Ordering::Relaxed),
        connections_open: app.open.count(),
        connections: app.bounds,
        providers_served,
        registry_read,
    };
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        app.metrics.render(gauges),
    )
        .into_response()
}

/// Read the registry once at start and say what is served. A database
/// out of reach is no reason not to start (the ingress answers 503 until
/// it is back, and /readyz says so); a role that may not call
/// `webhook_receivable_providers()`, or a database without the extension,
/// is a mistake to stop on.
async fn first_read(app: &Arc<App>) -> Result<(), String> {
    let lent = match app.pool.get().await {
        Ok((lent, _)) => lent,
        Err(err) => {
            log::event(
                "warn",
                "database_unreachable",
                json!({ "error": format!("{err:?}") }),
            );
            return Ok(());
        }
    };
    if let Err(err) = app.providers.read(&lent.conn().client).await {
        if away::is_away(&err) {
            log::event(
                "warn",
                "database_unreachable",
                json!({ "error": away::message(&err) }),
            );
            return Ok(());
        }
        return Err(format!(
            "webhook_receivable_providers(): {} (is pg_webhook_inbox 0.12.0 or later installed, \
             and the role granted with webhook_grant_app?)",
            away::message(&err)
        ));
    }
    let all = app.providers.all();
    let mut served: Vec<&String> = all
        .iter()
        .filter(|(_, p)| p.inbox)
        .map(|(n, _)| n)
        .collect();
    let mut refused: Vec<&String> = all
        .iter()
        .filter(|(_, p)| !p.inbox)
        .map(|(n, _)| n)
        .collect();
    served.sort();
    refused.sort();
    log::event(
        "info",
        "providers",
        json!({ "served": served, "refused_claim_mode": refused }),
    );
    if app.config.public_url.is_none() {
        let url_signed: Vec<&String> = all
            .iter()
            .filter(|(_, p)| p.inbox && providers::URL_SIGNED.contains(&p.scheme.as_str()))
            .map(|(n, _)| n)
            .collect();
        if !url_signed.is_empty() {
            log::event(
                "warn",
                "public_url_missing",
                json!({
                    "providers": url_signed,
                    "why": "their schemes sign the URL they call; without --public-url their deliveries are refused (missing_url)"
                }),
            );
        }
    }
    Ok(())
}

/// SIGTERM or SIGINT.
async fn stop_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("a SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

#[tokio::main]
async fn main() {
    let config = match config::load(std::env::args().skip(1)) {
        Ok(config) => config,
        Err(message) => {
            eprintln!("webhook-ingress: {message}");
            std::process::exit(2);
        }
    };
    let mut database: tokio_postgres::Config =
        config.database.parse().expect("checked with the settings");
    if database.get_connect_timeout().is_none() {
        database.connect_timeout(std::cmp::min(
            config.request_timeout,
            std::time::Duration::from_secs(5),
        ));
    }
    let pool = Arc::new(pool::Pool::new(
        database,
        config.connections,
        config.pool_timeout,
        config.queue,
        config.request_timeout,
        config.pooler,
    ));
    let app = Arc::new(App {
        limit: config
            .rate
            .map(|(rate, burst)| limits::RateLimit::new(rate, burst, config.source_prefixes)),
        providers: providers::Providers::new(config.providers_refresh),
        metrics: metrics::Metrics::default(),
        bounds: connections::Bounds {
            max: config.max_connections,
            per_source: config.max_connections_per_source,
            prefixes: config.source_prefixes,
            header_timeout: config.header_timeout,
            idle_timeout: config.idle_timeout,
            total_timeout: config.total_timeout,
            max_age: config.max_connection_age,
            max_requests: config.max_connection_requests,
        },
        unread_sender: source::Sampled::default(),
        refusals_logged: source::Sampled::default(),
        not_ready_logged: source::Sampled::default(),
        open: Arc::new(connections::Open::default()),
        pool,
        in_flight: Arc::new(AtomicUsize::new(0)),
        shutting_down: AtomicBool::new(false),
        config,
    });
    if let Err(message) = first_read(&app).await {
        eprintln!("webhook-ingress: {message}");
        std::process::exit(1);
    }
    let refresher = Arc::clone(&app);
    tokio::spawn(async move { refresher.providers.keep_fresh(&refresher.pool).await });
    let listener = match tokio::net::TcpListener::bind(app.config.listen).await {
        Ok(listener) => listener,
        Err(err) => {
            eprintln!(
                "webhook-ingress: cannot listen on {}: {err}",
                app.config.listen
            );
            std::process::exit(1);
        }
    };
    log::event(
        "info",
        "listening",
        json!({
            "address": app.config.listen.to_string(),
            "deliveries": format!("POST {}/<provider>", app.config.prefix),
            "connections": app.config.connections,
        }),
    );
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let counted = Arc::clone(&app);
    let serving = tokio::spawn(connections::serve(
        listener,
        router(Arc::clone(&app)),
        app.bounds,
        Arc::clone(&app.open),
        move |why| counted.metrics.connection_closed(why),
        stopped,
    ));
    stop_signal().await;
    app.shutting_down.store(true, Ordering::Relaxed);
    log::event(
        "info",
        "shutting_down",
        json!({ "in_flight": app.in_flight.load(Ordering::Relaxed) }),
    );
    let _ = stop.send(true);
    let grace = app.config.shutdown_timeout;
    tokio::select! {
        _ = serving => log::event("info", "stopped", json!({})),
        _ = tokio::time::sleep(grace) => {
            log::event(
                "warn",
                "stopped",
                json!({ "unfinished": app.in_flight.load(Ordering::Relaxed), "after_seconds": grace.as_secs_f64() }),
            );
            std::process::exit(1);
        }
    }
}
