//! The screens, and the rules every request passes first.
//!
//! * `overview` — per provider and consumer, at a glance;
//! * `deliveries` — search the archive; one event's every attempt;
//! * `dead` — dead letters, requeued one or all behind a confirmation;
//! * `replays` — a replay planned (dry run), confirmed, watched, paused;
//! * `providers` — the registry, secrets by fingerprint, pause and resume;
//! * `alerts` — alerts, acknowledged.
//!
//! Reading is a GET; every action is a POST carrying this console's form
//! token, asked for on a confirmation page where it changes more than one
//! thing, and answered with a redirect that says what happened.

mod alerts;
mod dead;
mod deliveries;
mod overview;
mod providers;
mod replays;

use crate::db::Session;
use crate::html::Html;
use crate::{page, security, App};
use axum::extract::Request;
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use std::collections::HashMap;
use std::sync::Arc;

/// Query string or form fields.
pub type Fields = HashMap<String, String>;

pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/", get(overview::show))
        .route("/deliveries", get(deliveries::list))
        .route("/deliveries/{id}", get(deliveries::detail))
        .route("/dead", get(dead::list))
        .route("/dead/confirm", get(dead::confirm))
        .route("/dead/requeue", post(dead::requeue))
        .route("/replays", get(replays::list))
        .route("/replays/plan", get(replays::plan))
        .route("/replays/run", post(replays::run))
        .route("/replays/change", post(replays::change))
        .route("/providers", get(providers::list))
        .route("/providers/steer", post(providers::steer))
        .route("/alerts", get(alerts::list))
        .route("/alerts/acknowledge", post(alerts::acknowledge))
        .route("/style.css", get(|| async { page::style() }))
        .fallback(|| async { not_found() })
        .layer(middleware::from_fn_with_state(app.clone(), guard))
        .with_state(app)
}

/// Every request: a `Host` the console answers to, a POST from its own
/// pages, basic authentication when configured; every answer: the
/// security headers.
async fn guard(
    axum::extract::State(app): axum::extract::State<Arc<App>>,
    request: Request,
    next: Next,
) -> Response {
    let headers = request.headers();
    let value = |name: header::HeaderName| headers.get(name).and_then(|v| v.to_str().ok());
    let authorization = value(header::AUTHORIZATION);
    let host_allowed = app.guard.host_allowed(value(header::HOST));
    let same_origin = request.method() != axum::http::Method::POST
        || app.guard.same_origin(
            value(header::ORIGIN),
            value(header::HeaderName::from_static("sec-fetch-site")),
        );
    let mut response = if !host_allowed {
        (
            StatusCode::MISDIRECTED_REQUEST,
            "this console does not answer to that host name (WEBHOOK_CONSOLE_HOSTS lists the names it does)",
        )
            .into_response()
    } else if !same_origin {
        page::forged()
    } else if app.guard.admits(authorization) {
        next.run(request).await
    } else {
        (
            StatusCode::UNAUTHORIZED,
            [(
                header::WWW_AUTHENTICATE,
                "Basic realm=\"webhook console\", charset=\"UTF-8\"",
            )],
            "authentication required",
        )
            .into_response()
    };
    for (name, value) in security::HEADERS {
        response
            .headers_mut()
            .insert(*name, HeaderValue::from_static(value));
    }
    response
}

fn not_found() -> Response {
    let mut body = Html::new();
    body.raw("<p>No such page.</p>");
    let mut response = page::page("Not found", "", None, body);
    *response.status_mut() = StatusCode::NOT_FOUND;
    response
}

/// A field's value, trimmed; None when absent or empty.
pub fn field<'a>(fields: &'a Fields, name: &str) -> Option<&'a str> {
    fields.get(name).map(|v| v.trim()).filter(|v| !v.is_empty())
}

/// A field as an owned optional string (a query parameter).
pub fn param(fields: &Fields, name: &str) -> Option<String> {
    field(fields, name).map(str::to_string)
}

/// The opening of a form that posts to `action`, with the form token.
pub fn form(app: &App, action: &'static str, class: &'static str) -> Html {
    let mut h = Html::new();
    h.raw("<form method=\"post\"")
        .attr("action", action)
        .attr("class", class)
        .raw("><input type=\"hidden\" name=\"csrf\"")
        .attr("value", app.guard.csrf_token())
        .raw(">");
    h
}

/// A hidden field carrying a value to the POST.
pub fn hidden(h: &mut Html, name: &'static str, value: &str) {
    h.raw("<input type=\"hidden\"")
        .attr("name", name)
        .attr("value", value)
        .raw(">");
}

/// A text input, filled with the value given last time.
pub fn input(h: &mut Html, label: &'static str, name: &'static str, fields: &Fields) {
    h.raw("<label>")
        .raw(label)
        .raw(" <input type=\"text\"")
        .attr("name", name)
        .attr("value", fields.get(name).map(String::as_str).unwrap_or(""))
        .raw("></label>");
}

/// A connection as the console's role, or the page saying why not.
pub async fn connect(app: &App) -> Result<Session, Response> {
    app.db
        .connect()
        .await
        .map_err(|refusal| page::refused("the connection", refusal))
}

/// An action's form carries this console's token, or nothing is done.
// The refusal is a whole page, as every handler's answer is: boxing it
// would only be unboxed again.
#[allow(clippy::result_large_err)]
pub fn check_token(app: &App, fields: &Fields) -> Result<(), Response> {
    match app.guard.csrf_valid(fields.get("csrf").map(String::as_str)) {
        true => Ok(()),
        false => Err(page::forged()),
    }
}

/// A number the database gave as text, for charts and counts.
pub fn number(value: &Option<String>) -> i64 {
    value
        .as_deref()
        .and_then(|v| v.parse::<f64>().ok())
        .map(|v| v as i64)
        .unwrap_or(0)
}

/// The text of a column, or empty.
pub fn text(row: &[Option<String>], n: usize) -> &str {
    row.get(n).and_then(|v| v.as_deref()).unwrap_or("")
}

/// The notice a redirect carried, if this console signed it.
pub fn notice<'a>(app: &App, fields: &'a Fields) -> Option<&'a str> {
    app.guard.notice(
        fields.get("notice").map(String::as_str),
        fields.get("n").map(String::as_str),
    )
}
