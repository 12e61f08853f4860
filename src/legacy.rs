//! The entry points of the previous release's SQL, kept in the library.
//!
//! Installing a new library and running `ALTER EXTENSION pg_webhook_inbox
//! UPDATE` are two steps, and between them every database still runs the
//! previous release's SQL, whose functions name these C symbols with their
//! old arguments. Each one takes the old arguments and does what it did,
//! through the current code, reading and writing only what the previous
//! release's tables have. The current SQL never creates them (`sql =
//! false`); they go once nothing can still be on 0.2.0.

use crate::errors::PgResult;
use crate::jsonb::RawJsonb;
use crate::receive::{receive_row, Mode};
use crate::requeue::Log;
use pgrx::datum::Interval;
use pgrx::pg_sys;
use pgrx::prelude::*;

/// 0.2.0's `webhook_fail(uuid, text)`.
#[pg_extern(sql = false)]
fn webhook_fail(id: Option<pgrx::Uuid>, err: Option<&str>) -> PgResult<()> {
    crate::lifecycle::fail_attempt(id, err, None, Some(false))
}

/// 0.2.0's `webhook_receive(text, jsonb, bytea, interval)`: always claims.
#[pg_extern(sql = false)]
fn webhook_receive(
    provider: Option<&str>,
    headers: Option<RawJsonb>,
    body: Option<&[u8]>,
    lease: Option<Interval>,
) -> std::result::Result<
    TableIterator<
        'static,
        (
            name!(id, pgrx::Uuid),
            name!(claimed, bool),
            name!(status, String),
            name!(attempts, i32),
            name!(result, Option<RawJsonb>),
            name!(http_status, i32),
            name!(reason, String),
            name!(event_id, Option<String>),
            name!(event_type, Option<String>),
            name!(event_type_signed, Option<bool>),
        ),
    >,
    pg_sys::panic::ErrorReport,
> {
    receive_row(provider, headers, body, lease, Mode::Claim)
}

/// 0.2.0's `webhook_receive(text, jsonb, text, interval)`.
#[pg_extern(sql = false)]
fn webhook_receive_text(
    provider: Option<&str>,
    headers: Option<RawJsonb>,
    body: Option<&str>,
    lease: Option<Interval>,
) -> std::result::Result<
    TableIterator<
        'static,
        (
            name!(id, pgrx::Uuid),
            name!(claimed, bool),
            name!(status, String),
            name!(attempts, i32),
            name!(result, Option<RawJsonb>),
            name!(http_status, i32),
            name!(reason, String),
            name!(event_id, Option<String>),
            name!(event_type, Option<String>),
            name!(event_type_signed, Option<bool>),
        ),
    >,
    pg_sys::panic::ErrorReport,
> {
    receive_row(
        provider,
        headers,
        body.map(str::as_bytes),
        lease,
        Mode::Claim,
    )
}

/// 0.2.0's `webhook_requeue(text, text)`: its tables have no requeue log.
#[pg_extern(sql = false)]
fn webhook_requeue(provider: Option<&str>, event_id: Option<&str>) -> PgResult<()> {
    crate::requeue::requeue_checked(provider, event_id, None, Log::Unavailable)
}
