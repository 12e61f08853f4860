//! A webhook receiver in axum + tokio-postgres.
//!
//! * `POST /webhooks/{provider}` — one transaction: claim, business write, complete;
//! * `POST /webhooks-2p/{provider}` — two phases: claim, send an email, complete;
//! * `POST /inbox/{provider}` — inbox: store and answer 200 at once; the
//!   `worker` binary processes it later.
//!
//! The database verifies the signature, deduplicates and claims the delivery
//! (`webhook_receive`); the handler does its work and answers what the
//! provider should hear: 200 done or duplicate, 409 in progress elsewhere,
//! 401 bad signature, 400 unreadable, 500 failed (recorded: the next
//! delivery retries it). An endpoint check (Slack's url_verification, Zoom's,
//! Twitch's, Discord's PING) comes back with the exact body to answer it with.
//!
//! `PUBLIC_URL` is the base URL the providers are configured with (behind a
//! proxy, not what this process sees): schemes that sign the URL (Twilio,
//! Square, HubSpot) verify against `PUBLIC_URL` + the request's path and query.
//! Without it their deliveries are refused (`missing_url`).
//!
//! The pool checks each connection before handing it out, so one broken by
//! a database restart is replaced instead of failing the request. While the
//! database is away (a restart, a failover) a request keeps trying it for
//! up to `DB_RETRY_SECONDS` (8: GitHub gives up on a delivery after 10 s and
//! never sends it again), then answers 503 with `Retry-After`, an answer
//! every provider retries; never 500 for a delivery that was not stored.
//!
//! `DATABASE_URL=postgresql://app@localhost/shop PORT=8003 cargo run --release`

use axum::body::Bytes;
use axum::extract::{OriginalUri, Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use serde_json::{json, Value};
use std::time::Duration;

const LANGUAGE: &str = "rust";

#[derive(Clone)]
struct App {
    pool: Pool,
    email_url: String,
    http: reqwest::Client,
    public_url: Option<String>,
}

impl App {
    /// The URL the provider called: the configured public base, then the
    /// path and query. None without `PUBLIC_URL`: the schemes that sign
    /// the URL then refuse the delivery, rather than trust the Host header
    /// its sender chose.
    fn url_of(&self, uri: &axum::http::Uri) -> Option<String> {
        let path = uri.path_and_query().map_or("/", |p| p.as_str());
        self.public_url
            .as_ref()
            .map(|base| format!("{}{path}", base.trim_end_matches('/')))
    }
}

type Answer = Response;
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Whether an error says the database is away (the connection broke, none
/// could be made, the server is shutting down or starting up) rather than
/// answering the request.
fn database_away(err: &BoxError) -> bool {
    use tokio_postgres::error::SqlState;
    let postgres = |e: &tokio_postgres::Error| {
        e.is_closed()
            || e.code().is_some_and(|code| {
                [
                    SqlState::ADMIN_SHUTDOWN,
                    SqlState::CRASH_SHUTDOWN,
                    SqlState::CANNOT_CONNECT_NOW,
                ]
                .contains(code)
            })
            || (e.as_db_error().is_none()
                && std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>()))
    };
    if let Some(e) = err.downcast_ref::<tokio_postgres::Error>() {
        return postgres(e);
    }
    match err.downcast_ref::<deadpool_postgres::PoolError>() {
        Some(deadpool_postgres::PoolError::Backend(e)) => postgres(e),
        Some(deadpool_postgres::PoolError::Timeout(_)) => true,
        _ => false,
    }
}

/// Run one attempt of a handler, again while the database is away, for up
/// to `DB_RETRY_SECONDS`; then 503 with `Retry-After`. Trying again is safe:
/// a broken attempt's writes rolled back with it, and `webhook_receive`
/// answers a delivery it did store as a duplicate (or in progress).
async fn with_database<F, Fut>(mut attempt: F) -> Answer
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Answer, BoxError>>,
{
    let budget = std::env::var("DB_RETRY_SECONDS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .unwrap_or(8.0);
    let deadline = tokio::time::Instant::now() + Duration::from_secs_f64(budget);
    let mut wait = Duration::from_millis(100);
    loop {
        match attempt().await {
            Ok(answer) => return answer,
            Err(err) if database_away(&err) => {
                if tokio::time::Instant::now() + wait >= deadline {
                    eprintln!("receiver: database unavailable ({err}); answering 503");
                    return (
                        StatusCode::SERVICE_UNAVAILABLE,
                        [(header::RETRY_AFTER, "30")],
                        Json(json!({ "status": "unavailable" })),
                    )
                        .into_response();
                }
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(1));
            }
            Err(err) => return answer(500, json!({ "status": "error", "error": err.to_string() })),
        }
    }
}

fn answer(status: i32, body: Value) -> Answer {
    (
        StatusCode::from_u16(status as u16).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        Json(body),
    )
        .into_response()
}

/// An endpoint check, answered with exactly what its provider expects.
fn handshake(row: &tokio_postgres::Row, response: usize) -> Option<Answer> {
    let body: String = row.get::<_, Option<String>>(response)?;
    let content_type: String = row.get(response + 1);
    Some((StatusCode::OK, [(header::CONTENT_TYPE, content_type)], body).into_response())
}

/// Request headers as the JSON object webhook_receive reads.
fn headers_json(headers: &HeaderMap) -> Value {
    let map = headers
        .iter()
        .map(|(name, value)| {
            (
                name.to_string(),
                Value::from(String::from_utf8_lossy(value.as_bytes()).into_owned()),
            )
        })
        .collect();
    Value::Object(map)
}

/// `inbox => false`: claimed here, whatever the provider is registered for;
/// `complete_on_commit`: the commit of the handler's transaction completes it.
const RECEIVE: &str = "SELECT id, claimed, status, http_status, reason, event_id, event_type,
                                response, response_type
                         FROM webhook_receive($1, $2::jsonb, $3::bytea, inbox => false, url => $4,
                                              complete_on_commit => true)";

async fn webhook(
    State(app): State<App>,
    Path(provider): Path<String>,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
    body: Bytes,
) -> Answer {
    let url = app.url_of(&uri);
    with_database(|| one_transaction(&app, &provider, &headers, &body, &url)).await
}

async fn one_transaction(
    app: &App,
    provider: &str,
    headers: &HeaderMap,
    body: &[u8],
    url: &Option<String>,
) -> Result<Answer, BoxError> {
    let mut client = app.pool.get().await?;
    let mut tx = client.transaction().await?;
    let r = tx
        .query_one(RECEIVE, &[&provider, &headers_json(headers), &body, &url])
        .await?;
    if let Some(answer) = handshake(&r, 7) {
        tx.commit().await?;
        return Ok(answer);
    }
    let (id, claimed, status): (uuid::Uuid, bool, String) = (r.get(0), r.get(1), r.get(2));
    if !claimed {
        tx.commit().await?;
        return Ok(answer(
            r.get(3),
            json!({ "status": status, "reason": r.get::<_, String>(4) }),
        ));
    }
    let (event_id, event_type): (String, String) = (r.get(5), r.get(6));
    // A savepoint: a failure undoes the work, not the claim.
    let work = async {
        let sp = tx.savepoint("work").await?;
        sp.execute(
            "INSERT INTO orders (provider, event_id, event_type, language) VALUES ($1, $2, $3, $4)",
            &[&provider, &event_id, &event_type, &LANGUAGE],
        )
        .await?;
        if headers.get("x-test-fail").is_some_and(|v| v == "1") {
            return Err::<(), BoxError>("injected failure halfway".into());
        }
        sp.execute(
            "SELECT webhook_complete($1, $2)",
            &[&id, &json!({ "order": event_id })],
        )
        .await?;
        sp.commit().await?;
        Ok(())
    }
    .await;
    match work {
        Ok(()) => {
            tx.commit().await?;
            Ok(answer(200, json!({ "status": status })))
        }
        Err(err) => {
            tx.execute("SELECT webhook_fail($1, $2)", &[&id, &err.to_string()])
                .await?;
            tx.commit().await?;
            Ok(answer(500, json!({ "status": "failed" })))
        }
    }
}

async fn webhook_two_phase(
    State(app): State<App>,
    Path(provider): Path<String>,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
    body: Bytes,
) -> Answer {
    let url = app.url_of(&uri);
    with_database(|| two_phase(&app, &provider, &headers, &body, &url)).await
}

async fn two_phase(
    app: &App,
    provider: &str,
    headers: &HeaderMap,
    body: &[u8],
    url: &Option<String>,
) -> Result<Answer, BoxError> {
    let client = app.pool.get().await?;
    // Autocommit: the claim commits on its own, with its lease.
    let r = client
        .query_one(
            "SELECT id, claimed, status, http_status, reason, event_id, response, response_type
               FROM webhook_receive($1, $2::jsonb, $3::bytea, lease => '30 seconds', inbox => false,
                                    url => $4)",
            &[&provider, &headers_json(headers), &body, &url],
        )
        .await?;
    if let Some(answer) = handshake(&r, 6) {
        return Ok(answer);
    }
    let (id, claimed, status): (uuid::Uuid, bool, String) = (r.get(0), r.get(1), r.get(2));
    if !claimed {
        return Ok(answer(
            r.get(3),
            json!({ "status": status, "reason": r.get::<_, String>(4) }),
        ));
    }
    let event_id: String = r.get(5);

    // A heartbeat renews the lease while the side effect runs.
    let pool = app.pool.clone();
    let heartbeat = tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(5)).await;
            if let Ok(c) = pool.get().await {
                let _ = c
                    .execute("SELECT webhook_extend($1, '30 seconds')", &[&id])
                    .await;
            }
        }
    });
    // The side effect outside the database, keyed by the event so that a
    // retry after a crash cannot send it twice.
    let key: String = client
        .query_one("SELECT webhook_outbound_key($1, 'email')", &[&id])
        .await?
        .get(0);
    let sent = app
        .http
        .post(&app.email_url)
        .header("idempotency-key", key)
        .json(&json!({ "to": "customer@example.com", "event": event_id }))
        .send()
        .await
        .and_then(|r| r.error_for_status());
    heartbeat.abort();
    match sent {
        Ok(_) => {
            client
                .execute("SELECT webhook_complete($1)", &[&id])
                .await?;
            Ok(answer(200, json!({ "status": status })))
        }
        Err(err) => {
            client
                .execute("SELECT webhook_fail($1, $2)", &[&id, &err.to_string()])
                .await?;
            Ok(answer(500, json!({ "status": "failed" })))
        }
    }
}

/// Verified, archived and queued in one statement (its own transaction);
/// the answer goes out after it commits, so a 200 always means it is stored.
async fn webhook_inbox(
    State(app): State<App>,
    Path(provider): Path<String>,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
    body: Bytes,
) -> Answer {
    let url = app.url_of(&uri);
    let queued = || async {
        let client = app.pool.get().await?;
        let r = client
            .query_one(
                "SELECT status, http_status, reason, response, response_type
                   FROM webhook_receive($1, $2::jsonb, $3::bytea, inbox => true, url => $4)",
                &[&provider, &headers_json(&headers), &body.as_ref(), &url],
            )
            .await?;
        if let Some(answer) = handshake(&r, 3) {
            return Ok(answer);
        }
        Ok::<_, BoxError>(answer(
            r.get(1),
            json!({ "status": r.get::<_, String>(0), "reason": r.get::<_, String>(2) }),
        ))
    };
    with_database(queued).await
}

#[tokio::main]
async fn main() {
    let url = std::env::var("DATABASE_URL").expect("DATABASE_URL");
    let config: tokio_postgres::Config = url.parse().expect("a valid DATABASE_URL");
    // Verified: a connection broken by a database restart is found before
    // a request uses it, and replaced.
    let manager = Manager::from_config(
        config,
        tokio_postgres::NoTls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Verified,
        },
    );
    // A request waits at most a second for a connection per attempt; the
    // retry budget above bounds the whole.
    let pool = Pool::builder(manager)
        .max_size(8)
        .wait_timeout(Some(Duration::from_secs(1)))
        .create_timeout(Some(Duration::from_secs(1)))
        .runtime(deadpool_postgres::Runtime::Tokio1)
        .build()
        .expect("pool");
    let app = App {
        pool,
        email_url: std::env::var("EMAIL_URL")
            .unwrap_or_else(|_| "http://127.0.0.1:8025/send".into()),
        http: reqwest::Client::new(),
        public_url: std::env::var("PUBLIC_URL").ok().filter(|u| !u.is_empty()),
    };
    let router = Router::new()
        .route("/healthz", get(|| async { Json(json!({ "ok": true })) }))
        .route("/webhooks/{provider}", post(webhook))
        .route("/webhooks-2p/{provider}", post(webhook_two_phase))
        .route("/inbox/{provider}", post(webhook_inbox))
        .with_state(app);
    let port: u16 = std::env::var("PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(8003);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .expect("bind");
    println!("listening on 127.0.0.1:{port}");
    axum::serve(listener, router).await.expect("serve");
}
