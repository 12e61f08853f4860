//! The entry points of the previous release's SQL, kept in the library.
//!
//! Installing a new library and running `ALTER EXTENSION pg_webhook_inbox
//! UPDATE` are two steps, and between them every database still runs the
//! previous release's SQL, whose functions name these C symbols with their
//! old arguments. Each one takes the old arguments and does what it did,
//! through the current code, reading and writing only what the previous
//! release's tables have. The current SQL never creates them (`sql =
//! false`); they go once nothing can still be on a release before this one.

use crate::claim::api::{checked_payload, claim, claim_raw, Claims};
use crate::errors::PgResult;
use crate::inbox;
use crate::jsonb::RawJsonb;
use crate::receive::{receive_answer, Mode, ReceiveRow};
use crate::requeue::Log;
use pgrx::datum::{Interval, TimestampWithTimeZone};
use pgrx::pg_sys;
use pgrx::prelude::*;

/// Which release's SQL an entry point serves: what its tables have.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Sql {
    /// 0.2.0: no inbox.
    Release0_2,
    /// 0.3.0: no ordering.
    Release0_3,
    /// 0.4.0: no handshakes (its claim_status has no label for them).
    Release0_4,
    /// 0.5.0 and 0.6.0: everything but the registry's triggers, so
    /// nothing read from the registry may be kept (see `registry`).
    Release0_6,
    Current,
}

impl Sql {
    pub fn has_handshakes(self) -> bool {
        matches!(self, Sql::Release0_6 | Sql::Current)
    }

    /// The registry's tables tell every backend when they change.
    pub fn announces_registry_changes(self) -> bool {
        self == Sql::Current
    }
}

/// `webhook_receive`'s row up to 0.4.0: no handshake response.
type ReceiveRow0_4 = (
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
);

fn receive_released(
    provider: Option<&str>,
    headers: Option<RawJsonb>,
    body: Option<&[u8]>,
    lease: Option<Interval>,
    mode: Mode,
    sql: Sql,
) -> std::result::Result<TableIterator<'static, ReceiveRow0_4>, pg_sys::panic::ErrorReport> {
    let claims = Claims::leased("webhook_receive", lease)?;
    let (id, claimed, status, attempts, result, http, reason, event_id, event_type, signed, _, _) =
        receive_answer(provider, headers, body, claims, None, mode, sql)?.row();
    Ok(TableIterator::once((
        id, claimed, status, attempts, result, http, reason, event_id, event_type, signed,
    )))
}

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
    receive_released(provider, headers, body, lease, Mode::Claim, Sql::Release0_2)
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
    receive_released(
        provider,
        headers,
        body.map(str::as_bytes),
        lease,
        Mode::Claim,
        Sql::Release0_2,
    )
}

/// 0.2.0's `webhook_requeue(text, text)`: its tables have no requeue log.
#[pg_extern(sql = false)]
fn webhook_requeue(provider: Option<&str>, event_id: Option<&str>) -> PgResult<()> {
    crate::requeue::requeue_checked(provider, event_id, None, Log::Unavailable)
}

/// 0.3.0's `webhook_receive(text, jsonb, bytea, interval, boolean)`: its
/// tables have no ordering.
#[pg_extern(sql = false)]
fn receive_delivery(
    provider: Option<&str>,
    headers: Option<RawJsonb>,
    body: Option<&[u8]>,
    lease: Option<Interval>,
    inbox: Option<bool>,
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
    receive_released(
        provider,
        headers,
        body,
        lease,
        Mode::from(inbox),
        Sql::Release0_3,
    )
}

/// 0.3.0's `webhook_receive(text, jsonb, text, interval, boolean)`.
#[pg_extern(sql = false)]
fn receive_delivery_text(
    provider: Option<&str>,
    headers: Option<RawJsonb>,
    body: Option<&str>,
    lease: Option<Interval>,
    inbox: Option<bool>,
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
    receive_delivery(provider, headers, body.map(str::as_bytes), lease, inbox)
}

/// 0.4.0's `webhook_receive(text, jsonb, bytea, interval, boolean)`: no
/// URL, no handshakes.
#[pg_extern(sql = false)]
fn receive_body(
    provider: Option<&str>,
    headers: Option<RawJsonb>,
    body: Option<&[u8]>,
    lease: Option<Interval>,
    inbox: Option<bool>,
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
    receive_released(
        provider,
        headers,
        body,
        lease,
        Mode::from(inbox),
        Sql::Release0_4,
    )
}

/// 0.4.0's `webhook_receive(text, jsonb, text, interval, boolean)`.
#[pg_extern(sql = false)]
fn receive_body_text(
    provider: Option<&str>,
    headers: Option<RawJsonb>,
    body: Option<&str>,
    lease: Option<Interval>,
    inbox: Option<bool>,
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
    receive_body(provider, headers, body.map(str::as_bytes), lease, inbox)
}

/// Up to 0.4.0, `webhook_verify(text, jsonb, bytea, text[], interval)`:
/// no URL.
#[pg_extern(sql = false)]
fn webhook_verify(
    scheme: Option<&str>,
    headers: Option<RawJsonb>,
    body: Option<&[u8]>,
    secrets: Option<Vec<Option<String>>>,
    tolerance: Option<Interval>,
) -> PgResult<bool> {
    crate::verify::verify_request(scheme, headers, body, secrets, tolerance, None)
}

/// Up to 0.4.0, `webhook_verify(text, jsonb, text, text[], interval)`.
#[pg_extern(sql = false)]
fn webhook_verify_text(
    scheme: Option<&str>,
    headers: Option<RawJsonb>,
    body: Option<&str>,
    secrets: Option<Vec<Option<String>>>,
    tolerance: Option<Interval>,
) -> PgResult<bool> {
    crate::verify::verify_request_text(scheme, headers, body, secrets, tolerance, None)
}

/// Up to 0.4.0, `webhook_verify_detail(text, jsonb, bytea, text[], interval)`.
#[pg_extern(sql = false)]
fn webhook_verify_detail(
    scheme: Option<&str>,
    headers: Option<RawJsonb>,
    body: Option<&[u8]>,
    secrets: Option<Vec<Option<String>>>,
    tolerance: Option<Interval>,
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
    crate::verify::verify_request_detail(scheme, headers, body, secrets, tolerance, None)
}

/// Up to 0.4.0, `webhook_verify_detail(text, jsonb, text, text[], interval)`.
#[pg_extern(sql = false)]
fn webhook_verify_detail_text(
    scheme: Option<&str>,
    headers: Option<RawJsonb>,
    body: Option<&str>,
    secrets: Option<Vec<Option<String>>>,
    tolerance: Option<Interval>,
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
    crate::verify::verify_request_detail_text(scheme, headers, body, secrets, tolerance, None)
}

/// 0.2.0's and 0.3.0's `webhook_complete(uuid, jsonb)`: no watermarks.
#[pg_extern(sql = false)]
fn webhook_complete(id: Option<pgrx::Uuid>, result: Option<RawJsonb>) -> PgResult<()> {
    crate::lifecycle::complete(id, result, Sql::Release0_3)
}

/// 0.3.0's `webhook_next(integer, text, text, text, interval)`: no
/// ordering.
#[pg_extern(sql = false)]
fn webhook_next(
    batch: Option<i32>,
    consumer: Option<&str>,
    provider: Option<&str>,
    event_type: Option<&str>,
    lease: Option<Interval>,
) -> std::result::Result<
    TableIterator<
        'static,
        (
            name!(id, pgrx::Uuid),
            name!(provider, String),
            name!(event_id, String),
            name!(event_type, String),
            name!(payload, Option<RawJsonb>),
            name!(attempts, i32),
            name!(consumer, String),
            name!(delivery_id, pgrx::Uuid),
            name!(queued_at, pgrx::datum::TimestampWithTimeZone),
            name!(lease_expires_at, pgrx::datum::TimestampWithTimeZone),
        ),
    >,
    pg_sys::panic::ErrorReport,
> {
    Ok(TableIterator::new(crate::inbox::api::next(
        batch,
        consumer,
        provider,
        event_type,
        lease,
        Sql::Release0_3,
    )?))
}

/// 0.2.0's and 0.3.0's `webhook_schemes()`: the columns before ordering's
/// presets.
#[pg_extern(sql = false)]
fn webhook_schemes() -> TableIterator<
    'static,
    (
        name!(scheme, String),
        name!(aliases, Vec<String>),
        name!(event_id_from, Option<String>),
        name!(event_type_from, Option<String>),
        name!(event_id_signed, bool),
        name!(event_type_signed, bool),
        name!(tolerance, Option<Interval>),
        name!(signs, String),
    ),
> {
    TableIterator::new(crate::verify::scheme_catalog().map(
        |(scheme, aliases, id, kind, id_signed, kind_signed, tolerance, signs, _, _)| {
            (
                scheme,
                aliases,
                id,
                kind,
                id_signed,
                kind_signed,
                tolerance,
                signs,
            )
        },
    ))
}

/// 0.6.0's and 0.7.0's `idempotency_begin(text, text, text, interval)`: a
/// set of one row.
#[pg_extern(sql = false)]
fn begin_request(
    scope: Option<&str>,
    key: Option<&str>,
    fingerprint: Option<&str>,
    lease: Option<Interval>,
) -> std::result::Result<
    TableIterator<
        'static,
        (
            name!(outcome, String),
            name!(request_id, Option<pgrx::Uuid>),
            name!(http_status, Option<i32>),
            name!(recovery_point, Option<String>),
            name!(recovery, Option<RawJsonb>),
            name!(response_headers, Option<RawJsonb>),
            name!(response_body, Option<String>),
        ),
    >,
    pg_sys::panic::ErrorReport,
> {
    let row = crate::idempotency::requests::begin_checked(scope, key, fingerprint, lease)?;
    Ok(TableIterator::once(row))
}

/// 0.3.0's to 0.7.0's `webhook_enqueue(text, text, text, jsonb, text)`: a
/// set of one row.
#[pg_extern(sql = false)]
fn webhook_enqueue(
    provider: Option<&str>,
    event_id: Option<&str>,
    event_type: Option<&str>,
    payload: Option<RawJsonb>,
    signature: Option<&str>,
) -> std::result::Result<
    TableIterator<
        'static,
        (
            name!(id, pgrx::Uuid),
            name!(queued, bool),
            name!(status, String),
        ),
    >,
    pg_sys::panic::ErrorReport,
> {
    let payload = checked_payload(inbox::api::ENQUEUE, payload)?;
    let queued = inbox::api::enqueue(provider, event_id, event_type, payload, None, signature)?;
    Ok(TableIterator::once(queued.row()))
}

/// 0.3.0's to 0.7.0's `webhook_enqueue(text, text, text, bytea, text)`.
#[pg_extern(sql = false)]
fn webhook_enqueue_raw(
    provider: Option<&str>,
    event_id: Option<&str>,
    event_type: Option<&str>,
    body: Option<&[u8]>,
    signature: Option<&str>,
) -> std::result::Result<
    TableIterator<
        'static,
        (
            name!(id, pgrx::Uuid),
            name!(queued, bool),
            name!(status, String),
        ),
    >,
    pg_sys::panic::ErrorReport,
> {
    let queued = inbox::api::enqueue_raw(provider, event_id, event_type, body, signature)?;
    Ok(TableIterator::once(queued.row()))
}

/// 0.3.0's to 0.7.0's `webhook_enqueue(text, text, text, text, text)`.
#[pg_extern(sql = false)]
fn webhook_enqueue_text(
    provider: Option<&str>,
    event_id: Option<&str>,
    event_type: Option<&str>,
    body: Option<&str>,
    signature: Option<&str>,
) -> std::result::Result<
    TableIterator<
        'static,
        (
            name!(id, pgrx::Uuid),
            name!(queued, bool),
            name!(status, String),
        ),
    >,
    pg_sys::panic::ErrorReport,
> {
    webhook_enqueue_raw(
        provider,
        event_id,
        event_type,
        body.map(str::as_bytes),
        signature,
    )
}

/// 0.6.0's `webhook_claim(text, text, text, jsonb, text, interval)`: a set
/// of one row, and no `complete_on_commit`.
#[pg_extern(sql = false)]
fn webhook_claim(
    provider: Option<&str>,
    event_id: Option<&str>,
    event_type: Option<&str>,
    payload: Option<RawJsonb>,
    signature: Option<&str>,
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
        ),
    >,
    pg_sys::panic::ErrorReport,
> {
    let payload = checked_payload("webhook_claim", payload)?;
    let claims = Claims::leased("webhook_claim", lease)?;
    let outcome = claim(
        provider, event_id, event_type, payload, None, signature, claims,
    )?;
    Ok(TableIterator::once(outcome.row()))
}

/// 0.6.0's `webhook_claim(text, text, text, bytea, text, interval)`.
#[pg_extern(sql = false)]
fn webhook_claim_raw(
    provider: Option<&str>,
    event_id: Option<&str>,
    event_type: Option<&str>,
    body: Option<&[u8]>,
    signature: Option<&str>,
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
        ),
    >,
    pg_sys::panic::ErrorReport,
> {
    let claims = Claims::leased("webhook_claim", lease)?;
    let outcome = claim_raw(provider, event_id, event_type, body, signature, claims)?;
    Ok(TableIterator::once(outcome.row()))
}

/// 0.6.0's `webhook_claim(text, text, text, text, text, interval)`.
#[pg_extern(sql = false)]
fn webhook_claim_text(
    provider: Option<&str>,
    event_id: Option<&str>,
    event_type: Option<&str>,
    body: Option<&str>,
    signature: Option<&str>,
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
        ),
    >,
    pg_sys::panic::ErrorReport,
> {
    webhook_claim_raw(
        provider,
        event_id,
        event_type,
        body.map(str::as_bytes),
        signature,
        lease,
    )
}

/// 0.5.0's and 0.6.0's `webhook_receive(text, jsonb, bytea, interval,
/// boolean, text)`: a set of one row, and no `complete_on_commit`.
#[pg_extern(sql = false)]
fn receive_request(
    provider: Option<&str>,
    headers: Option<RawJsonb>,
    body: Option<&[u8]>,
    lease: Option<Interval>,
    inbox: Option<bool>,
    url: Option<&str>,
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
            name!(response, Option<String>),
            name!(response_type, Option<String>),
        ),
    >,
    pg_sys::panic::ErrorReport,
> {
    let claims = Claims::leased("webhook_receive", lease)?;
    let answer: ReceiveRow = receive_answer(
        provider,
        headers,
        body,
        claims,
        url,
        Mode::from(inbox),
        Sql::Release0_6,
    )?
    .row();
    Ok(TableIterator::once(answer))
}

/// 0.5.0's and 0.6.0's `webhook_receive(text, jsonb, text, interval,
/// boolean, text)`.
#[pg_extern(sql = false)]
fn receive_request_text(
    provider: Option<&str>,
    headers: Option<RawJsonb>,
    body: Option<&str>,
    lease: Option<Interval>,
    inbox: Option<bool>,
    url: Option<&str>,
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
            name!(response, Option<String>),
            name!(response_type, Option<String>),
        ),
    >,
    pg_sys::panic::ErrorReport,
> {
    receive_request(
        provider,
        headers,
        body.map(str::as_bytes),
        lease,
        inbox,
        url,
    )
}
