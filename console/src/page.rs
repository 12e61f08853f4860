//! The frame every screen is drawn in, and what the console answers when
//! the database refuses, or a form comes without its token.

use crate::db::Refusal;
use crate::html::Html;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

/// The screens, in the order of the navigation bar.
const NAV: &[(&str, &str)] = &[
    ("/", "Overview"),
    ("/deliveries", "Deliveries"),
    ("/dead", "Dead letters"),
    ("/replays", "Replays"),
    ("/providers", "Providers"),
    ("/alerts", "Alerts"),
];

/// A whole page: `title`, the screen's `path` (for the navigation bar), a
/// notice to show (the outcome of the last action, from its redirect),
/// and the body.
pub fn page(title: &str, path: &str, notice: Option<&str>, body: Html) -> Response {
    let mut h = Html::new();
    h.raw("<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>")
        .text(title)
        .raw(" · webhook console</title><link rel=\"stylesheet\" href=\"/style.css\"></head><body><nav>");
    for (href, label) in NAV {
        h.raw("<a").attr("href", href);
        if *href == path {
            h.raw(" class=\"here\"");
        }
        h.raw(">").text(label).raw("</a>");
    }
    h.raw("</nav><main><h1>").text(title).raw("</h1>");
    if let Some(notice) = notice.filter(|n| !n.is_empty()) {
        h.raw("<p class=\"notice\" id=\"notice\">")
            .text(notice)
            .raw("</p>");
    }
    h.push(body).raw("</main></body></html>");
    html_response(StatusCode::OK, h)
}

pub fn html_response(status: StatusCode, h: Html) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        h.into_string(),
    )
        .into_response()
}

/// The database refused: its SQLSTATE and words, shown as they are. A
/// missing privilege is the role's limit, not an error of the console.
pub fn refused(what: &str, refusal: Refusal) -> Response {
    let status = match refusal.code.as_str() {
        "42501" => StatusCode::FORBIDDEN,
        "55000" | "55P03" | "40001" => StatusCode::CONFLICT,
        code if code.starts_with("22") || code.starts_with("42") => StatusCode::BAD_REQUEST,
        "08006" | "53300" => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    let mut body = Html::new();
    body.raw("<p class=\"refused\" id=\"refused\">The database refused ")
        .text(what)
        .raw(": <code>")
        .text(&refusal.code)
        .raw("</code> ")
        .text(&refusal.message)
        .raw("</p>");
    if let Some(hint) = &refusal.hint {
        body.raw("<p>").text(hint).raw("</p>");
    }
    if refusal.is_privilege() {
        body.raw(
            "<p>The console acts as the database role it connects as; this role may not do this. \
             An operator role (<code>SELECT webhook_grant_operator('role')</code>) may.</p>",
        );
    }
    let mut response = page("Refused", "", None, body);
    *response.status_mut() = status;
    response
}

/// A form without this console's token: posted from another page.
pub fn forged() -> Response {
    let mut body = Html::new();
    body.raw(
        "<p class=\"refused\" id=\"refused\">This form did not come from this console \
         (its origin or its token is not this console's): nothing was done.</p>",
    );
    let mut response = page("Refused", "", None, body);
    *response.status_mut() = StatusCode::FORBIDDEN;
    response
}

/// After an action: back to a screen, with what happened, signed so that
/// the screen shows only notices this console made.
pub fn done(app: &crate::App, to: &str, notice: &str) -> Response {
    let sep = if to.contains('?') { '&' } else { '?' };
    let location = format!(
        "{to}{sep}notice={}&n={}",
        crate::html::url_encode(notice),
        app.guard.notice_mac(notice)
    );
    (StatusCode::SEE_OTHER, [(header::LOCATION, location)]).into_response()
}

pub const STYLE: &str = "\
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1d232b;background:#f6f7f9}\
nav{background:#1d232b;padding:.5em 1em}nav a{color:#cfd6df;margin-right:1.2em;text-decoration:none}\
nav a.here{color:#fff;font-weight:600}main{padding:1em 1.5em}h1{font-size:1.3em}h2{font-size:1.1em;margin-top:1.6em}\
table{border-collapse:collapse;background:#fff;margin:.5em 0}th,td{border:1px solid #dde1e6;padding:.25em .5em;\
text-align:left;vertical-align:top}th{background:#eef0f3}td.none{color:#8a939e}\
pre{background:#fff;border:1px solid #dde1e6;padding:.6em;overflow:auto;max-height:30em;white-space:pre-wrap;\
word-break:break-all}.notice{background:#e5f4e8;border:1px solid #9fd1aa;padding:.5em}\
.refused{background:#fbe9e9;border:1px solid #e3a1a1;padding:.5em}.chart rect.d{fill:#5b8def}\
.chart rect.f{fill:#d9534f}.chart{background:#fff;border:1px solid #dde1e6}form.inline{display:inline}\
label{margin-right:.8em}input[type=text]{width:12em}button{cursor:pointer}.muted{color:#6b7480}";

pub fn style() -> Response {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], STYLE).into_response()
}
