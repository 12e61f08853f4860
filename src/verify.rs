//! The SQL face of the schemes: `webhook_verify` and
//! `webhook_verify_detail`, each for a `bytea` body (exact: signatures
//! cover the raw bytes) and a `text` body, and `webhook_schemes()`, the
//! catalog as a table. VOLATILE: the timestamp window is measured against
//! the clock at each call.
//!
//! Everyone may call these (they read no table), so every input is
//! bounded: the body by `webhook.max_payload_size`, the headers by
//! `headers::MAX_HEADERS`, and every loop over them can be cancelled.

use crate::errors::{PgResult, WebhookError};
use crate::input;
use crate::jsonb::RawJsonb;
use crate::schemes::{catalog, verify, Scheme, Verdict};
use pgrx::datum::{Interval, TimestampWithTimeZone};

use pgrx::pg_sys;
use pgrx::prelude::*;

/// True when the delivery is signed by one of `secrets` under `scheme` and,
/// for schemes that sign a timestamp, within `tolerance` of now (NULL: the
/// scheme's default, `webhook_schemes().tolerance`). `secrets` holds what
/// the scheme verifies with: shared secrets, or the provider's public keys
/// or certificates. `url`: the public URL the provider called, for the
/// schemes that sign it (Twilio, Square, HubSpot).
#[pg_extern(volatile, parallel_safe, name = "webhook_verify")]
pub(crate) fn verify_request(
    scheme: Option<&str>,
    headers: Option<RawJsonb>,
    body: Option<&[u8]>,
    secrets: Option<Vec<Option<String>>>,
    tolerance: default!(Option<Interval>, "NULL"),
    url: default!(Option<&str>, "NULL"),
) -> PgResult<bool> {
    Ok(run(
        "webhook_verify",
        scheme,
        headers,
        body,
        secrets,
        tolerance,
        url,
    )?
    .valid())
}

#[pg_extern(volatile, parallel_safe, name = "webhook_verify")]
pub(crate) fn verify_request_text(
    scheme: Option<&str>,
    headers: Option<RawJsonb>,
    body: Option<&str>,
    secrets: Option<Vec<Option<String>>>,
    tolerance: default!(Option<Interval>, "NULL"),
    url: default!(Option<&str>, "NULL"),
) -> PgResult<bool> {
    verify_request(
        scheme,
        headers,
        body.map(str::as_bytes),
        secrets,
        tolerance,
        url,
    )
}

/// The same check, saying why: `reason` is one of ok, missing_header,
/// malformed_header, bad_signature, timestamp_too_old, timestamp_in_future,
/// no_secret, invalid_secret, missing_url, unknown_certificate; `signed_at`
/// is the signed timestamp, if any.
#[pg_extern(volatile, parallel_safe, name = "webhook_verify_detail")]
pub(crate) fn verify_request_detail(
    scheme: Option<&str>,
    headers: Option<RawJsonb>,
    body: Option<&[u8]>,
    secrets: Option<Vec<Option<String>>>,
    tolerance: default!(Option<Interval>, "NULL"),
    url: default!(Option<&str>, "NULL"),
) -> std::result::Result<
    TableIterator<
        'static,
        (
            name!(valid, bool),
            name!(reason, String),
            name!(signed_at, Option<TimestampWithTimeZone>),
        ),
    >,
    pg_sys::panic::ErrorReport,
> {
    let verdict = run(
        "webhook_verify_detail",
        scheme,
        headers,
        body,
        secrets,
        tolerance,
        url,
    )?;
    Ok(TableIterator::once(detail_row(verdict)))
}

#[pg_extern(volatile, parallel_safe, name = "webhook_verify_detail")]
pub(crate) fn verify_request_detail_text(
    scheme: Option<&str>,
    headers: Option<RawJsonb>,
    body: Option<&str>,
    secrets: Option<Vec<Option<String>>>,
    tolerance: default!(Option<Interval>, "NULL"),
    url: default!(Option<&str>, "NULL"),
) -> std::result::Result<
    TableIterator<
        'static,
        (
            name!(valid, bool),
            name!(reason, String),
            name!(signed_at, Option<TimestampWithTimeZone>),
        ),
    >,
    pg_sys::panic::ErrorReport,
> {
    verify_request_detail(
        scheme,
        headers,
        body.map(str::as_bytes),
        secrets,
        tolerance,
        url,
    )
}

/// The signature schemes the extension knows, their aliases, where their
/// providers put the event id and type, and ordering's presets: the
/// defaults of `webhook_register_provider`; and what each signature
/// covers: the body by a digest, by unframed fields, by a checksum, or
/// not at all, and which headers.
#[pg_extern(immutable, parallel_safe, name = "webhook_schemes")]
pub(crate) fn scheme_catalog() -> TableIterator<
    'static,
    (
        name!(scheme, String),
        name!(aliases, Vec<String>),
        name!(event_id_from, Option<String>),
        name!(event_type_from, Option<String>),
        name!(event_id_signed, Option<bool>),
        name!(event_type_signed, Option<bool>),
        name!(tolerance, Option<Interval>),
        name!(signs, String),
        name!(entity_key_from, Option<String>),
        name!(order_from, Option<String>),
        name!(body_covered, &'static str),
        name!(headers_covered, Vec<&'static str>),
    ),
> {
    TableIterator::new(catalog::catalog().iter().map(|entry| {
        (
            entry.name.to_string(),
            entry.aliases.iter().map(|a| a.to_string()).collect(),
            entry.event_id_from.map(str::to_string),
            entry.event_type_from.map(str::to_string),
            entry.event_id_signed(),
            entry.event_type_signed(),
            entry
                .tolerance
                .map(|secs| Interval::from_micros(secs * 1_000_000)),
            entry.signs.to_string(),
            entry.entity_key_from.map(str::to_string),
            entry.order_from.map(str::to_string),
            entry.covers.body.as_str(),
            entry.covers.headers.to_vec(),
        )
    }))
}

/// Whether `scheme`'s signature covers a registry source (`header:<name>`
/// or `body:<path>`, alternatives separated by `|`): every alternative
/// must be covered, since a delivery may carry any of them. What a filter
/// reads must be (`webhook_set_filter`); a DBA may check a source before
/// registering it.
#[pg_extern(immutable, parallel_safe, name = "webhook_source_signed")]
fn source_signed(scheme: &str, source: &str) -> PgResult<bool> {
    let scheme = Scheme::parse("webhook_source_signed", "scheme", scheme)?;
    Ok(scheme.entry().covers.source(source))
}

/// Why `key` cannot verify deliveries under `scheme` (a public key or
/// certificate in the wrong format, a Standard Webhooks secret that is not
/// base64), or NULL when it can. `webhook_add_secret` refuses such a key;
/// a DBA may check one before registering it.
#[pg_extern(immutable, parallel_safe, name = "webhook_check_key")]
fn check_key(scheme: &str, key: &str) -> PgResult<Option<&'static str>> {
    Ok(Scheme::parse("webhook_check_key", "scheme", scheme)?.key_problem(key))
}

fn detail_row(verdict: Verdict) -> (bool, String, Option<TimestampWithTimeZone>) {
    (
        verdict.valid(),
        verdict.reason.as_str().to_string(),
        verdict.signed_at.and_then(to_timestamptz),
    )
}

fn run(
    function: &'static str,
    scheme: Option<&str>,
    headers: Option<RawJsonb>,
    body: Option<&[u8]>,
    secrets: Option<Vec<Option<String>>>,
    tolerance: Option<Interval>,
    url: Option<&str>,
) -> Result<Verdict, WebhookError> {
    let scheme = Scheme::parse(
        function,
        "scheme",
        input::required(function, "scheme", scheme)?,
    )?;
    let headers = input::required(function, "headers", headers)?;
    let body = input::required(function, "body", body)?;
    input::payload_size(function, "body", body.len())?;
    let secrets = input::required(function, "secrets", secrets)?;
    if secrets.len() > crate::schemes::MAX_KEYS {
        return Err(WebhookError::InvalidArgument {
            function,
            arg: "secrets",
            rule: "must hold at most 16 keys",
        });
    }
    let url = input::url(function, "url", url)?;
    // NULL: the scheme's own window (five minutes where it signs a time).
    let tolerance_secs = match tolerance {
        None => scheme.default_tolerance(),
        Some(tolerance) if tolerance.as_micros() <= 0 => {
            return Err(WebhookError::NonPositiveInterval {
                function,
                arg: "tolerance",
            })
        }
        Some(tolerance) => i64::try_from(tolerance.as_micros() / 1_000_000).unwrap_or(i64::MAX),
    };
    let secrets: Vec<Option<&str>> = secrets.iter().map(Option::as_deref).collect();
    // Headers serde cannot read (nested past its depth limit) are as
    // malformed as headers that are not an object.
    let headers = headers.to_json().unwrap_or(serde_json::Value::Null);
    Ok(verify(
        &scheme,
        &headers,
        body,
        url,
        &secrets,
        tolerance_secs,
        crate::schemes::now_unix(),
    ))
}

/// Unix seconds → timestamptz (microseconds since 2000-01-01).
fn to_timestamptz(unix: i64) -> Option<TimestampWithTimeZone> {
    const PG_EPOCH_OFFSET: i64 = 946_684_800;
    let micros = unix.checked_sub(PG_EPOCH_OFFSET)?.checked_mul(1_000_000)?;
    TimestampWithTimeZone::try_from(micros).ok()
}
