//! The `webhook_receive` SQL functions: a body as bytes or as text, and
//! what the caller may decide about how the delivery is taken.

use super::{receive, Mode, FUNCTION};
use crate::claim::api::Claims;
use crate::jsonb::RawJsonb;
use crate::status::ClaimStatus;
use pgrx::datum::Interval;
use pgrx::pg_sys;
use pgrx::prelude::*;

/// Receive a delivery given its raw body (exact: signatures cover these
/// bytes). `inbox`: store and queue it for workers and answer 2xx at once
/// (true), claim it for this transaction to process (false), or as the
/// provider is registered (NULL). `url`: the public URL the provider
/// called, for the schemes that sign it (Twilio, Square, HubSpot); behind
/// a proxy, the URL as the provider saw it, not as the application did.
/// `complete_on_commit`: a claimed event is complete when this
/// transaction commits, with no `webhook_complete` (one-transaction
/// handlers); it changes nothing for a queued delivery. `traceparent`: the
/// W3C trace context of the application's request span, which a queued
/// event's worker gets from `webhook_next` (see `trace`).
#[pg_extern(volatile, security_definer, parallel_unsafe, name = "webhook_receive")]
#[search_path(pg_catalog, pg_temp)]
#[allow(clippy::too_many_arguments)]
fn receive_traced_bytes(
    provider: Option<&str>,
    headers: Option<RawJsonb>,
    body: Option<&[u8]>,
    lease: default!(Option<Interval>, "NULL"),
    inbox: default!(Option<bool>, "NULL"),
    url: default!(Option<&str>, "NULL"),
    complete_on_commit: default!(Option<bool>, false),
    traceparent: default!(Option<&str>, "NULL"),
    fcinfo: pg_sys::FunctionCallInfo,
) -> std::result::Result<
    pgrx::composite_type!('static, "webhook.receive_result"),
    pg_sys::panic::ErrorReport,
> {
    let traceparent = crate::trace::checked(FUNCTION, traceparent)?;
    let claims = Claims::of(FUNCTION, lease, complete_on_commit)?;
    let answer = receive(provider, headers, body, claims, url, Mode::from(inbox))?;
    if let Some(traceparent) = traceparent {
        if answer.outcome.status == ClaimStatus::Queued {
            Spi::connect_mut(|client| {
                crate::trace::record(client, answer.outcome.id, traceparent)
            })?;
        }
    }
    Ok(answer.into_row(fcinfo)?)
}

/// Text form, for a body passed as a string.
#[pg_extern(volatile, security_definer, parallel_unsafe, name = "webhook_receive")]
#[search_path(pg_catalog, pg_temp)]
#[allow(clippy::too_many_arguments)]
fn receive_traced_string(
    provider: Option<&str>,
    headers: Option<RawJsonb>,
    body: Option<&str>,
    lease: default!(Option<Interval>, "NULL"),
    inbox: default!(Option<bool>, "NULL"),
    url: default!(Option<&str>, "NULL"),
    complete_on_commit: default!(Option<bool>, false),
    traceparent: default!(Option<&str>, "NULL"),
    fcinfo: pg_sys::FunctionCallInfo,
) -> std::result::Result<
    pgrx::composite_type!('static, "webhook.receive_result"),
    pg_sys::panic::ErrorReport,
> {
    receive_traced_bytes(
        provider,
        headers,
        body.map(str::as_bytes),
        lease,
        inbox,
        url,
        complete_on_commit,
        traceparent,
        fcinfo,
    )
}

/// `webhook_receive` as the release before trace context declares it
/// (no `traceparent`): its SQL calls this until `ALTER EXTENSION …
/// UPDATE`, and deliveries keep arriving meanwhile.
#[pg_extern(sql = false)]
#[allow(clippy::too_many_arguments)]
fn receive_bytes(
    provider: Option<&str>,
    headers: Option<RawJsonb>,
    body: Option<&[u8]>,
    lease: Option<Interval>,
    inbox: Option<bool>,
    url: Option<&str>,
    complete_on_commit: Option<bool>,
    fcinfo: pg_sys::FunctionCallInfo,
) -> std::result::Result<
    pgrx::composite_type!('static, "webhook.receive_result"),
    pg_sys::panic::ErrorReport,
> {
    receive_traced_bytes(
        provider,
        headers,
        body,
        lease,
        inbox,
        url,
        complete_on_commit,
        None,
        fcinfo,
    )
}

/// The text form as the release before trace context declares it.
#[pg_extern(sql = false)]
#[allow(clippy::too_many_arguments)]
fn receive_string(
    provider: Option<&str>,
    headers: Option<RawJsonb>,
    body: Option<&str>,
    lease: Option<Interval>,
    inbox: Option<bool>,
    url: Option<&str>,
    complete_on_commit: Option<bool>,
    fcinfo: pg_sys::FunctionCallInfo,
) -> std::result::Result<
    pgrx::composite_type!('static, "webhook.receive_result"),
    pg_sys::panic::ErrorReport,
> {
    receive_traced_string(
        provider,
        headers,
        body,
        lease,
        inbox,
        url,
        complete_on_commit,
        None,
        fcinfo,
    )
}
