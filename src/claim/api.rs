//! The `webhook_claim` SQL functions: a payload as `jsonb`, or the raw body
//! as `bytea` or `text` (kept byte for byte, so that its signature can be
//! verified again later). Arguments are checked here, before anything is
//! written; the claim itself is `super::claim`.

use super::Delivery;
use crate::errors::{PgResult, Result, WebhookError};
use crate::input::{
    self, MAX_EVENT_ID_BYTES, MAX_EVENT_TYPE_BYTES, MAX_PROVIDER_BYTES, MAX_SIGNATURE_BYTES,
};
use crate::jsonb::{self, RawJsonb};
use pgrx::datum::Interval;
use pgrx::pg_sys;
use pgrx::prelude::*;

const FUNCTION: &str = "webhook_claim";

type ClaimRow = TableIterator<
    'static,
    (
        name!(id, pgrx::Uuid),
        name!(claimed, bool),
        name!(status, String),
        name!(attempts, i32),
        name!(result, Option<RawJsonb>),
    ),
>;

/// Claim a delivery whose payload is already `jsonb`.
#[pg_extern(volatile, security_definer, parallel_unsafe)]
#[search_path(pg_catalog, pg_temp)]
fn webhook_claim(
    provider: Option<&str>,
    event_id: Option<&str>,
    event_type: Option<&str>,
    payload: Option<RawJsonb>,
    signature: Option<&str>,
    lease: default!(Option<Interval>, "NULL"),
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
    let payload = checked_payload(FUNCTION, payload)?;
    claim_row(
        provider, event_id, event_type, payload, None, signature, lease,
    )
}

/// Claim a delivery given its raw body, kept byte for byte in the archive so
/// its signature can be verified again later.
#[pg_extern(volatile, security_definer, parallel_unsafe, name = "webhook_claim")]
#[search_path(pg_catalog, pg_temp)]
fn webhook_claim_raw(
    provider: Option<&str>,
    event_id: Option<&str>,
    event_type: Option<&str>,
    body: Option<&[u8]>,
    signature: Option<&str>,
    lease: default!(Option<Interval>, "NULL"),
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
    let body = input::required(FUNCTION, "body", body)?;
    let payload = payload_of_body(FUNCTION, body)?;
    claim_row(
        provider,
        event_id,
        event_type,
        payload,
        Some(body),
        signature,
        lease,
    )
}

/// Text form of the raw-body claim: an untyped literal or a client's string
/// parameter lands here, and its bytes are archived as given.
#[pg_extern(volatile, security_definer, parallel_unsafe, name = "webhook_claim")]
#[search_path(pg_catalog, pg_temp)]
fn webhook_claim_text(
    provider: Option<&str>,
    event_id: Option<&str>,
    event_type: Option<&str>,
    body: Option<&str>,
    signature: Option<&str>,
    lease: default!(Option<Interval>, "NULL"),
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

/// A `jsonb` payload argument, checked: present, within
/// `webhook.max_payload_size`, and a JSON object.
pub(crate) fn checked_payload(
    function: &'static str,
    payload: Option<RawJsonb>,
) -> Result<RawJsonb> {
    let payload = input::required(function, "payload", payload)?;
    input::payload_size(function, "payload", payload.size())?;
    if !payload.is_object() {
        return Err(WebhookError::NotAnObject {
            function,
            arg: "payload",
            found: payload.kind(),
        });
    }
    Ok(payload)
}

/// The payload of a raw `body` argument: within `webhook.max_payload_size`
/// and a JSON object jsonb can store.
pub(crate) fn payload_of_body(function: &'static str, body: &[u8]) -> Result<RawJsonb> {
    input::payload_size(function, "body", body.len())?;
    let (text, _) = input::json_object_body(function, "body", body)?;
    jsonb::from_text(function, "body", text)
}

/// A delivery given as arguments, checked before anything is written.
#[allow(clippy::too_many_arguments)]
pub(crate) fn delivery<'a>(
    function: &'static str,
    provider: Option<&'a str>,
    event_id: Option<&'a str>,
    event_type: Option<&'a str>,
    payload: RawJsonb,
    raw_body: Option<&'a [u8]>,
    signature: Option<&'a str>,
    lease: Option<Interval>,
) -> Result<Delivery<'a>> {
    Ok(Delivery {
        provider: input::required_text(function, "provider", provider, MAX_PROVIDER_BYTES)?,
        event_id: input::required_text(function, "event_id", event_id, MAX_EVENT_ID_BYTES)?,
        event_type: input::required_text(function, "event_type", event_type, MAX_EVENT_TYPE_BYTES)?,
        payload,
        raw_body,
        signature: input::optional_text(function, "signature", signature, MAX_SIGNATURE_BYTES)?,
        headers: None,
        lease: input::lease(function, "lease", lease)?,
        // The registry's order is read by webhook_receive only, from a
        // body it verified itself.
        order: None,
        verified_by: None,
    })
}

fn claim_row(
    provider: Option<&str>,
    event_id: Option<&str>,
    event_type: Option<&str>,
    payload: RawJsonb,
    raw_body: Option<&[u8]>,
    signature: Option<&str>,
    lease: Option<Interval>,
) -> PgResult<ClaimRow> {
    let delivery = delivery(
        FUNCTION, provider, event_id, event_type, payload, raw_body, signature, lease,
    )?;
    let outcome = Spi::connect_mut(|client| super::claim(client, &delivery))?;
    Ok(TableIterator::once(outcome.row()))
}
