//! The SQL face of the schemes: `webhook_verify` and
//! `webhook_verify_detail`, each for a `bytea` body (exact: signatures
//! cover the raw bytes) and a `text` body. VOLATILE: the timestamp window
//! is measured against the clock at each call.

use super::{verify, Scheme, Verdict};
use crate::errors::WebhookError;
use crate::input;
use pgrx::datum::{Interval, TimestampWithTimeZone};
use pgrx::prelude::*;
use pgrx::{pg_sys, JsonB};

type PgResult<T> = std::result::Result<T, pg_sys::panic::ErrorReport>;

/// True when the delivery is signed by one of `secrets` under `scheme` and,
/// for schemes that sign a timestamp, within `tolerance` of now.
#[pg_extern(volatile, parallel_safe)]
fn webhook_verify(
    scheme: Option<&str>,
    headers: Option<JsonB>,
    body: Option<&[u8]>,
    secrets: Option<Vec<Option<String>>>,
    tolerance: default!(Option<Interval>, "'5 minutes'"),
) -> PgResult<bool> {
    Ok(run("webhook_verify", scheme, headers, body, secrets, tolerance)?.valid())
}

#[pg_extern(volatile, parallel_safe, name = "webhook_verify")]
fn webhook_verify_text(
    scheme: Option<&str>,
    headers: Option<JsonB>,
    body: Option<&str>,
    secrets: Option<Vec<Option<String>>>,
    tolerance: default!(Option<Interval>, "'5 minutes'"),
) -> PgResult<bool> {
    webhook_verify(scheme, headers, body.map(str::as_bytes), secrets, tolerance)
}

/// The same check, saying why: `reason` is one of ok, missing_header,
/// malformed_header, bad_signature, timestamp_too_old, timestamp_in_future,
/// no_secret, invalid_secret; `signed_at` is the signed timestamp, if any.
#[pg_extern(volatile, parallel_safe)]
fn webhook_verify_detail(
    scheme: Option<&str>,
    headers: Option<JsonB>,
    body: Option<&[u8]>,
    secrets: Option<Vec<Option<String>>>,
    tolerance: default!(Option<Interval>, "'5 minutes'"),
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
    )?;
    Ok(TableIterator::once(detail_row(verdict)))
}

#[pg_extern(volatile, parallel_safe, name = "webhook_verify_detail")]
fn webhook_verify_detail_text(
    scheme: Option<&str>,
    headers: Option<JsonB>,
    body: Option<&str>,
    secrets: Option<Vec<Option<String>>>,
    tolerance: default!(Option<Interval>, "'5 minutes'"),
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
    webhook_verify_detail(scheme, headers, body.map(str::as_bytes), secrets, tolerance)
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
    headers: Option<JsonB>,
    body: Option<&[u8]>,
    secrets: Option<Vec<Option<String>>>,
    tolerance: Option<Interval>,
) -> Result<Verdict, WebhookError> {
    let scheme = Scheme::parse(input::required(function, "scheme", scheme)?)?;
    let headers = input::required(function, "headers", headers)?;
    let body = input::required(function, "body", body)?;
    let secrets = input::required(function, "secrets", secrets)?;
    let tolerance = input::required(function, "tolerance", tolerance)?;
    if tolerance.as_micros() <= 0 {
        return Err(WebhookError::NonPositiveInterval {
            function,
            arg: "tolerance",
        });
    }
    let tolerance_secs = i64::try_from(tolerance.as_micros() / 1_000_000).unwrap_or(i64::MAX);
    let secrets: Vec<Option<&str>> = secrets.iter().map(Option::as_deref).collect();
    Ok(verify(
        &scheme,
        &headers.0,
        body,
        &secrets,
        tolerance_secs,
        super::now_unix(),
    ))
}

/// Unix seconds → timestamptz (microseconds since 2000-01-01).
fn to_timestamptz(unix: i64) -> Option<TimestampWithTimeZone> {
    const PG_EPOCH_OFFSET: i64 = 946_684_800;
    let micros = unix.checked_sub(PG_EPOCH_OFFSET)?.checked_mul(1_000_000)?;
    TimestampWithTimeZone::try_from(micros).ok()
}
