//! The `webhook_claim` SQL functions: a payload as `jsonb`, or the raw body
//! as `bytea` or `text` (kept byte for byte, so that its signature can be
//! verified again later). Arguments are checked here, before anything is
//! written; the claim itself is `super::claim`.

use super::Delivery;
use crate::errors::{Result, WebhookError};
use crate::input::{
    self, MAX_EVENT_ID_BYTES, MAX_EVENT_TYPE_BYTES, MAX_PROVIDER_BYTES, MAX_SIGNATURE_BYTES,
};
use crate::jsonb::{self, RawJsonb};
use pgrx::datum::Interval;
use pgrx::pg_sys;
use pgrx::prelude::*;

const FUNCTION: &str = "webhook_claim";

/// Claim a delivery whose payload is already `jsonb`. With
/// `complete_on_commit`, the claim itself completes the event when the
/// caller's transaction commits (one-transaction handlers); without it, the
/// event stays claimed until `webhook_complete` (two-phase handlers).
#[pg_extern(volatile, security_definer, parallel_unsafe, name = "webhook_claim")]
#[search_path(pg_catalog, pg_temp)]
#[allow(clippy::too_many_arguments)]
fn claim_payload(
    provider: Option<&str>,
    event_id: Option<&str>,
    event_type: Option<&str>,
    payload: Option<RawJsonb>,
    signature: Option<&str>,
    lease: default!(Option<Interval>, "NULL"),
    complete_on_commit: default!(Option<bool>, false),
    fcinfo: pg_sys::FunctionCallInfo,
) -> std::result::Result<
    pgrx::composite_type!('static, "webhook.claim_result"),
    pg_sys::panic::ErrorReport,
> {
    let payload = checked_payload(FUNCTION, payload)?;
    let claims = Claims::new(lease, complete_on_commit)?;
    let outcome = claim(
        provider, event_id, event_type, payload, None, signature, claims,
    )?;
    Ok(outcome.into_row(fcinfo)?)
}

/// Claim a delivery given its raw body, kept byte for byte in the archive so
/// its signature can be verified again later.
#[pg_extern(volatile, security_definer, parallel_unsafe, name = "webhook_claim")]
#[search_path(pg_catalog, pg_temp)]
#[allow(clippy::too_many_arguments)]
fn claim_body(
    provider: Option<&str>,
    event_id: Option<&str>,
    event_type: Option<&str>,
    body: Option<&[u8]>,
    signature: Option<&str>,
    lease: default!(Option<Interval>, "NULL"),
    complete_on_commit: default!(Option<bool>, false),
    fcinfo: pg_sys::FunctionCallInfo,
) -> std::result::Result<
    pgrx::composite_type!('static, "webhook.claim_result"),
    pg_sys::panic::ErrorReport,
> {
    let claims = Claims::new(lease, complete_on_commit)?;
    let outcome = claim_raw(provider, event_id, event_type, body, signature, claims)?;
    Ok(outcome.into_row(fcinfo)?)
}

/// Text form of the raw-body claim: an untyped literal or a client's string
/// parameter lands here, and its bytes are archived as given.
#[pg_extern(volatile, security_definer, parallel_unsafe, name = "webhook_claim")]
#[search_path(pg_catalog, pg_temp)]
#[allow(clippy::too_many_arguments)]
fn claim_body_text(
    provider: Option<&str>,
    event_id: Option<&str>,
    event_type: Option<&str>,
    body: Option<&str>,
    signature: Option<&str>,
    lease: default!(Option<Interval>, "NULL"),
    complete_on_commit: default!(Option<bool>, false),
    fcinfo: pg_sys::FunctionCallInfo,
) -> std::result::Result<
    pgrx::composite_type!('static, "webhook.claim_result"),
    pg_sys::panic::ErrorReport,
> {
    let claims = Claims::new(lease, complete_on_commit)?;
    let body = body.map(str::as_bytes);
    let outcome = claim_raw(provider, event_id, event_type, body, signature, claims)?;
    Ok(outcome.into_row(fcinfo)?)
}

/// How a claim owns its event: for a lease, until `webhook_complete`
/// (`Some`), or until its transaction ends, whose commit completes the
/// event (`None`).
pub(crate) struct Claims(Option<Interval>);

impl Claims {
    /// From the `lease` and `complete_on_commit` arguments: a claim that
    /// completes on commit has no lease to give.
    pub(crate) fn new(lease: Option<Interval>, complete_on_commit: Option<bool>) -> Result<Self> {
        Self::of(FUNCTION, lease, complete_on_commit)
    }

    pub(crate) fn of(
        function: &'static str,
        lease: Option<Interval>,
        complete_on_commit: Option<bool>,
    ) -> Result<Self> {
        match input::required(function, "complete_on_commit", complete_on_commit)? {
            false => Ok(Claims(Some(input::lease(function, "lease", lease)?))),
            true if lease.is_some() => Err(WebhookError::InvalidArgument {
                function,
                arg: "lease",
                rule:
                    "must be NULL when complete_on_commit is true: the claim owns its event until \
                       its transaction ends, and the commit completes it",
            }),
            true => Ok(Claims(None)),
        }
    }

    /// A claim with the default lease.
    pub(crate) fn leased(function: &'static str) -> Result<Self> {
        Self::of(function, None, Some(false))
    }

    pub(crate) fn lease(&self) -> Option<Interval> {
        self.0
    }
}

/// Claim a delivery given as its raw body.
fn claim_raw(
    provider: Option<&str>,
    event_id: Option<&str>,
    event_type: Option<&str>,
    body: Option<&[u8]>,
    signature: Option<&str>,
    claims: Claims,
) -> Result<super::Outcome> {
    let body = input::required(FUNCTION, "body", body)?;
    let payload = payload_of_body(FUNCTION, body)?;
    claim(
        provider,
        event_id,
        event_type,
        payload,
        Some(body),
        signature,
        claims,
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
    claims: Claims,
) -> Result<Delivery<'a>> {
    Ok(Delivery {
        function,
        provider: input::required_text(function, "provider", provider, MAX_PROVIDER_BYTES)?,
        event_id: input::required_text(function, "event_id", event_id, MAX_EVENT_ID_BYTES)?,
        event_type: input::required_text(function, "event_type", event_type, MAX_EVENT_TYPE_BYTES)?,
        payload,
        raw_body,
        signature: input::optional_text(function, "signature", signature, MAX_SIGNATURE_BYTES)?,
        headers: None,
        lease: claims.lease(),
        // Set by the caller once the registry is read (ordering::of_payload).
        order: None,
        verified_by: None,
    })
}

/// Claim a delivery given as arguments.
pub(crate) fn claim(
    provider: Option<&str>,
    event_id: Option<&str>,
    event_type: Option<&str>,
    payload: RawJsonb,
    raw_body: Option<&[u8]>,
    signature: Option<&str>,
    claims: Claims,
) -> Result<super::Outcome> {
    crate::standby::refuse_writes(FUNCTION)?;
    let delivery = delivery(
        FUNCTION, provider, event_id, event_type, payload, raw_body, signature, claims,
    )?;
    Spi::connect_mut(|client| {
        crate::scopes::check_provider(client, FUNCTION, "provider", delivery.provider)?;
        let order = crate::ordering::of_payload(client, delivery.provider, &delivery.payload)?;
        let delivery = super::Delivery {
            order: order.as_ref(),
            ..delivery
        };
        super::claim(client, &delivery)
    })
}
