//! `POST <prefix>/<provider>`: one delivery, stored or refused.
//!
//! In order, each step cheaper than the next and none touching the
//! database before it must: the sender's rate; the provider (registered
//! for the inbox and in the role's scope); the body's declared length,
//! then the body itself, read within `--read-timeout` and no further than
//! `--max-body`; then `webhook_receive`, which verifies, archives and
//! queues it in one autocommitted statement. The answer is what
//! `webhook_receive` says (2xx only once the row is committed), or 503
//! with `Retry-After` whenever the delivery could not be stored: every
//! provider retries that, so nothing is acknowledged that is not kept.

use crate::connections::RequestStarted;
use crate::pool::Unavailable;
use crate::providers::Route;
use crate::{log, App};
use axum::body::Body;
use axum::extract::{ConnectInfo, Path, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a provider is told while the database cannot take its delivery.
const RETRY_AFTER_SECONDS: &str = "30";

pub async fn deliver(
    State(app): State<Arc<App>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Path(provider): Path<String>,
    request: Request,
) -> Response {
    let started = Instant::now();
    // The whole request, from its first byte, within --total-timeout.
    let total_deadline = request
        .extensions()
        .get::<RequestStarted>()
        .map_or(started, |s| s.0)
        + app.config.total_timeout;
    let in_flight = app.in_flight();
    let source = crate::source::sender(
        peer,
        request.headers(),
        app.config.client_ip_header.as_ref(),
        |why| {
            app.metrics.sender_unread(why);
            app.unread_sender.log(|unlogged| {
                log::event(
                    "warn",
                    "sender_unread",
                    json!({
                        "header": app.config.client_ip_header.as_ref().map(|h| h.as_str()),
                        "why": why.label(),
                        "taken_as": peer.ip().to_string(),
                        "unlogged": unlogged,
                    }),
                )
            });
        },
    );
    // Bounded memory: at most --max-requests bodies of --max-body each.
    let outcome = if in_flight.count > app.config.max_requests {
        app.metrics.rejected("overloaded");
        unavailable("overloaded")
    } else {
        take(&app, &provider, source, request, started, total_deadline).await
    };
    let status = outcome.response.status().as_u16();
    let label = if app.providers.all().contains_key(&provider) {
        provider.as_str()
    } else {
        "-"
    };
    app.metrics.answered(label, status, started.elapsed());
    // Every request with --access-log; else the refusals and failures, a
    // line a second at most, so that a flood of forgeries cannot fill the
    // journal.
    let line = |unlogged: Option<u64>| {
        let mut fields = json!({
            "provider": label,
            "source": source.to_string(),
            "http_status": status,
            "outcome": outcome.what,
            "ms": (started.elapsed().as_secs_f64() * 1000.0 * 100.0).round() / 100.0,
        });
        if let Some(unlogged) = unlogged {
            fields["unlogged"] = json!(unlogged);
        }
        log::event(
            if status >= 500 { "warn" } else { "info" },
            "delivery",
            fields,
        );
    };
    if app.config.access_log {
        line(None);
    } else if status >= 400 {
        app.refusals_logged.log(|unlogged| line(Some(unlogged)));
    }
    outcome.response
}

/// An answer, and in a word what it was (for the log).
struct Outcome {
    response: Response,
    what: String,
}

fn outcome(response: Response, what: impl Into<String>) -> Outcome {
    Outcome {
        response,
        what: what.into(),
    }
}

fn json_answer(status: StatusCode, body: Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// Turned away before the database.
fn rejected(app: &App, reason: &'static str, status: StatusCode, message: String) -> Outcome {
    app.metrics.rejected(reason);
    outcome(
        json_answer(status, json!({ "status": reason, "reason": message })),
        reason,
    )
}

/// Not stored, for now: the provider retries.
fn unavailable(what: impl Into<String>) -> Outcome {
    outcome(
        (
            StatusCode::SERVICE_UNAVAILABLE,
            [
                (header::RETRY_AFTER, RETRY_AFTER_SECONDS),
                (header::CONTENT_TYPE, "application/json"),
            ],
            json!({ "status": "unavailable" }).to_string(),
        )
            .into_response(),
        what,
    )
}

async fn take(
    app: &Arc<App>,
    provider: &str,
    source: std::net::IpAddr,
    request: Request,
    started: Instant,
    total_deadline: Instant,
) -> Outcome {
    if let Some(limit) = &app.limit {
        if let Err(wait) = limit.take(source) {
            let mut out = rejected(
                app,
                "rate_limited",
                StatusCode::TOO_MANY_REQUESTS,
                format!(
                    "more than {} deliveries a second from {source}",
                    app.config.rate.map_or(0.0, |r| r.0)
                ),
            );
            let seconds = wait.as_secs_f64().ceil().max(1.0).to_string();
            out.response.headers_mut().insert(
                header::RETRY_AFTER,
                seconds.parse().expect("digits are a header value"),
            );
            return out;
        }
    }
    match route(app, provider).await {
        Route::Inbox => {}
        Route::ClaimMode => {
            return rejected(
                app,
                "claim_mode",
                StatusCode::NOT_FOUND,
                format!(
                    "provider \"{provider}\" is registered for claim mode; the ingress takes only \
                     inbox deliveries (register it with inbox => true, or receive it in a handler)"
                ),
            )
        }
        Route::Unreadable => return unavailable("registry_unread"),
        Route::Unknown => {
            return rejected(
                app,
                "unknown_provider",
                StatusCode::NOT_FOUND,
                // Echoed only as long as a provider's name may be: the
                // path is the sender's to write.
                if provider.len() <= 64 {
                    format!("no provider \"{provider}\" is registered for this ingress's role")
                } else {
                    "no provider of that name is registered (a name has at most 64 bytes)".into()
                },
            );
        }
    }
    let (parts, body) = request.into_parts();
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > app.config.max_body as u64) {
        return too_large(app);
    }
    let left = total_deadline.saturating_duration_since(Instant::now());
    let within = app.config.read_timeout.min(left);
    let body = match read_body(body, app.config.max_body, within).await {
        Ok(body) => body,
        Err(Unread::TooLarge) => return too_large(app),
        Err(Unread::Slow) if within < app.config.read_timeout => return total_timeout(app),
        Err(Unread::Slow) => {
            return rejected(
                app,
                "slow_body",
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "the body did not arrive within {} s",
                    app.config.read_timeout.as_secs_f64()
                ),
            )
        }
        Err(Unread::Broken) => {
            return rejected(
                app,
                "broken_body",
                StatusCode::BAD_REQUEST,
                "the body could not be read".into(),
            )
        }
    };
    let url = app.config.public_url.as_ref().map(|base| {
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        format!("{base}{path}")
    });
    let headers = headers_json(&parts.headers);
    let traceparent = parts
        .headers
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .filter(|v| well_formed_traceparent(v));
    let deadline = (started + app.config.request_timeout).min(total_deadline);
    let stored = store(
        app,
        provider,
        &headers,
        &body,
        url.as_deref(),
        traceparent,
        deadline,
    )
    .await;
    if stored.what == "deadline" && deadline == total_deadline {
        app.metrics.rejected("total_timeout");
    }
    stored
}

/// The request as a whole took longer than --total-timeout (its headers
/// and body sent slowly, each within its own bound).
fn total_timeout(app: &App) -> Outcome {
    rejected(
        app,
        "total_timeout",
        StatusCode::REQUEST_TIMEOUT,
        format!(
            "the request did not arrive within {} s of its first byte",
            app.config.total_timeout.as_secs_f64()
        ),
    )
}

fn too_large(app: &App) -> Outcome {
    rejected(
        app,
        "too_large",
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("the body is over {} bytes", app.config.max_body),
    )
}

/// The provider's route; one not known is looked up in the registry at
/// once, unless a read is under a second old (the registry is otherwise
/// kept fresh off this path: `Providers::keep_fresh`).
async fn route(app: &Arc<App>, provider: &str) -> Route {
    match app.providers.route(provider) {
        Route::Unknown | Route::Unreadable if app.providers.take_turn_to_read() => {
            app.providers.read_pooled(&app.pool).await;
            app.providers.route(provider)
        }
        known => known,
    }
}

enum Unread {
    TooLarge,
    Slow,
    Broken,
}

async fn read_body(body: Body, max: usize, within: Duration) -> Result<axum::body::Bytes, Unread> {
    match tokio::time::timeout(within, axum::body::to_bytes(body, max)).await {
        Err(_) => Err(Unread::Slow),
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(err)) => {
            // to_bytes says "length limit exceeded" through its source.
            let mut source: Option<&dyn std::error::Error> = Some(&err);
            while let Some(e) = source {
                if e.is::<http_body_util::LengthLimitError>() {
                    return Err(Unread::TooLarge);
                }
                source = e.source();
            }
            Err(Unread::Broken)
        }
    }
}

/// Request headers as the JSON object `webhook_receive` reads; a header
/// sent more than once is joined with ", " as HTTP allows.
fn headers_json(headers: &HeaderMap) -> Value {
    let mut map = serde_json::Map::new();
    for (name, value) in headers {
        let value = String::from_utf8_lossy(value.as_bytes());
        match map.get_mut(name.as_str()) {
            Some(Value::String(joined)) => {
                joined.push_str(", ");
                joined.push_str(&value);
            }
            _ => {
                map.insert(name.to_string(), Value::String(value.into_owned()));
            }
        }
    }
    Value::Object(map)
}

/// A version-00 W3C traceparent; anything else is not passed on (the
/// delivery is taken all the same, untraced).
fn well_formed_traceparent(value: &str) -> bool {
    let b = value.as_bytes();
    let hex = |part: &[u8]| part.iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'));
    let zero = |part: &[u8]| part.iter().all(|c| *c == b'0');
    b.len() == 55
        && &b[0..3] == b"00-"
        && b[35] == b'-'
        && b[52] == b'-'
        && hex(&b[3..35])
        && !zero(&b[3..35])
        && hex(&b[36..52])
        && !zero(&b[36..52])
        && hex(&b[53..55])
}

/// Store the delivery, trying again while the database is away (a
/// restart, a failover) until `deadline`. Trying again is safe: an attempt
/// that broke rolled back, or committed and is answered as a duplicate.
async fn store(
    app: &Arc<App>,
    provider: &str,
    headers: &Value,
    body: &[u8],
    url: Option<&str>,
    traceparent: Option<&str>,
    deadline: Instant,
) -> Outcome {
    let mut wait = Duration::from_millis(50);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return unavailable("deadline");
        }
        let attempt = tokio::time::timeout(left, async {
            let (mut lent, waited) = app.pool.get().await?;
            app.metrics.pool_wait(waited);
            let row = lent
                .receive(&crate::pool::Delivery {
                    provider,
                    headers,
                    body,
                    url,
                    traceparent,
                })
                .await;
            match row {
                Ok(row) => Ok(row),
                Err(err) => {
                    if crate::away::is_away(&err) {
                        lent.discard();
                    }
                    Err(Unavailable::Database(err))
                }
            }
        })
        .await;
        match attempt {
            Ok(Ok(row)) => return answer(&row),
            Ok(Err(Unavailable::Busy(why))) => {
                app.metrics.rejected(why);
                return unavailable(why);
            }
            Ok(Err(Unavailable::Database(err))) => {
                let code = err.code().map_or("unreachable", |c| c.code()).to_string();
                app.metrics.database_error(&code);
                if !crate::away::is_away(&err) {
                    let mut fields = json!({ "provider": provider, "sqlstate": code, "error": crate::away::message(&err) });
                    if let Some(hint) = crate::away::pooler_hint(&err) {
                        fields["hint"] = hint.into();
                    }
                    log::event("error", "not_stored", fields);
                    return unavailable(format!("error {code}"));
                }
            }
            // The deadline passed during the attempt: whether it committed
            // is unknown, and a retry of the provider's finds out.
            Err(_) => return unavailable("deadline"),
        }
        if Instant::now() + wait >= deadline {
            return unavailable("database_away");
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(Duration::from_secs(1));
    }
}

/// What `webhook_receive` answered, as the provider should hear it.
fn answer(row: &tokio_postgres::Row) -> Outcome {
    let status: String = row.get(0);
    let http_status: i32 = row.get(1);
    let reason: String = row.get(2);
    let response: Option<String> = row.get(3);
    if let Some(body) = response {
        // An endpoint check: exactly the body its provider expects.
        let content_type: String = row.get(4);
        return outcome(
            (StatusCode::OK, [(header::CONTENT_TYPE, content_type)], body).into_response(),
            "handshake",
        );
    }
    let code = u16::try_from(http_status)
        .ok()
        .and_then(|c| StatusCode::from_u16(c).ok())
        .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    outcome(
        json_answer(code, json!({ "status": status, "reason": reason })),
        status,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_headers_are_joined_and_nothing_is_dropped() {
        let mut headers = HeaderMap::new();
        headers.append("x-a", "1".parse().unwrap());
        headers.append("x-a", "2".parse().unwrap());
        headers.insert("stripe-signature", "t=1,v1=ab".parse().unwrap());
        let json = headers_json(&headers);
        assert_eq!(json["x-a"], "1, 2");
        assert_eq!(json["stripe-signature"], "t=1,v1=ab");
    }

    #[test]
    fn only_well_formed_traceparents_pass() {
        let good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert!(well_formed_traceparent(good));
        for bad in [
            "",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",
        ] {
            assert!(!well_formed_traceparent(bad), "{bad}");
        }
    }
}
