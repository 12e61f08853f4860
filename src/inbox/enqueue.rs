//! `webhook_enqueue`: queue an event a handler verified itself. (A
//! verified delivery is queued by `webhook_receive` in inbox mode too; see
//! `receive`.)

use crate::claim::api::{checked_payload, delivery, payload_of_body, Claims};
use crate::claim::Outcome;
use crate::composite;
use crate::errors::{PgResult, Result};
use crate::input::{self};
use crate::jsonb::RawJsonb;
use pgrx::pg_sys;
use pgrx::prelude::*;

pub(crate) const ENQUEUE: &str = "webhook_enqueue";

/// Queue a delivery the caller has verified (payload as `jsonb`): `queued`
/// when its event is new, `duplicate` when it was seen before. Either way
/// it is stored once the transaction commits: answer 2xx. `traceparent`:
/// the W3C trace context of the application's request span, which the
/// event's worker gets from `webhook_next` (see `trace`).
#[pg_extern(volatile, security_definer, parallel_unsafe, name = "webhook_enqueue")]
#[search_path(pg_catalog, pg_temp)]
fn enqueue_traced_payload(
    provider: Option<&str>,
    event_id: Option<&str>,
    event_type: Option<&str>,
    payload: Option<RawJsonb>,
    signature: default!(Option<&str>, "NULL"),
    traceparent: default!(Option<&str>, "NULL"),
    fcinfo: pg_sys::FunctionCallInfo,
) -> std::result::Result<
    pgrx::composite_type!('static, "webhook.enqueue_result"),
    pg_sys::panic::ErrorReport,
> {
    let traceparent = crate::trace::checked(ENQUEUE, traceparent)?;
    let payload = checked_payload(ENQUEUE, payload)?;
    let queued = enqueue(provider, event_id, event_type, payload, None, signature)?;
    Ok(composite::of_call(
        fcinfo,
        queued.traced(traceparent)?.values(),
    )?)
}

/// `webhook_enqueue` with the raw body, archived byte for byte.
#[pg_extern(volatile, security_definer, parallel_unsafe, name = "webhook_enqueue")]
#[search_path(pg_catalog, pg_temp)]
fn enqueue_traced_body(
    provider: Option<&str>,
    event_id: Option<&str>,
    event_type: Option<&str>,
    body: Option<&[u8]>,
    signature: default!(Option<&str>, "NULL"),
    traceparent: default!(Option<&str>, "NULL"),
    fcinfo: pg_sys::FunctionCallInfo,
) -> std::result::Result<
    pgrx::composite_type!('static, "webhook.enqueue_result"),
    pg_sys::panic::ErrorReport,
> {
    let traceparent = crate::trace::checked(ENQUEUE, traceparent)?;
    let queued = enqueue_raw(provider, event_id, event_type, body, signature)?;
    Ok(composite::of_call(
        fcinfo,
        queued.traced(traceparent)?.values(),
    )?)
}

/// `webhook_enqueue` with the raw body passed as text.
#[pg_extern(volatile, security_definer, parallel_unsafe, name = "webhook_enqueue")]
#[search_path(pg_catalog, pg_temp)]
fn enqueue_traced_body_text(
    provider: Option<&str>,
    event_id: Option<&str>,
    event_type: Option<&str>,
    body: Option<&str>,
    signature: default!(Option<&str>, "NULL"),
    traceparent: default!(Option<&str>, "NULL"),
    fcinfo: pg_sys::FunctionCallInfo,
) -> std::result::Result<
    pgrx::composite_type!('static, "webhook.enqueue_result"),
    pg_sys::panic::ErrorReport,
> {
    enqueue_traced_body(
        provider,
        event_id,
        event_type,
        body.map(str::as_bytes),
        signature,
        traceparent,
        fcinfo,
    )
}

/// `webhook_enqueue` as the release before trace context declares it (no
/// `traceparent`): its SQL calls this until `ALTER EXTENSION … UPDATE`.
#[pg_extern(sql = false)]
fn enqueue_payload(
    provider: Option<&str>,
    event_id: Option<&str>,
    event_type: Option<&str>,
    payload: Option<RawJsonb>,
    signature: Option<&str>,
    fcinfo: pg_sys::FunctionCallInfo,
) -> std::result::Result<
    pgrx::composite_type!('static, "webhook.enqueue_result"),
    pg_sys::panic::ErrorReport,
> {
    enqueue_traced_payload(
        provider, event_id, event_type, payload, signature, None, fcinfo,
    )
}

/// The raw-body form as the release before trace context declares it.
#[pg_extern(sql = false)]
fn enqueue_body(
    provider: Option<&str>,
    event_id: Option<&str>,
    event_type: Option<&str>,
    body: Option<&[u8]>,
    signature: Option<&str>,
    fcinfo: pg_sys::FunctionCallInfo,
) -> std::result::Result<
    pgrx::composite_type!('static, "webhook.enqueue_result"),
    pg_sys::panic::ErrorReport,
> {
    enqueue_traced_body(
        provider, event_id, event_type, body, signature, None, fcinfo,
    )
}

/// The text form as the release before trace context declares it.
#[pg_extern(sql = false)]
fn enqueue_body_text(
    provider: Option<&str>,
    event_id: Option<&str>,
    event_type: Option<&str>,
    body: Option<&str>,
    signature: Option<&str>,
    fcinfo: pg_sys::FunctionCallInfo,
) -> std::result::Result<
    pgrx::composite_type!('static, "webhook.enqueue_result"),
    pg_sys::panic::ErrorReport,
> {
    enqueue_traced_body_text(
        provider, event_id, event_type, body, signature, None, fcinfo,
    )
}

/// What `webhook_enqueue` answers: the delivery, and whether its event was
/// queued (new) or a duplicate.
pub(crate) struct Queued {
    id: pgrx::Uuid,
    status: crate::status::ClaimStatus,
}

impl Queued {
    /// The trace context kept for a delivery that queued its event.
    fn traced(self, traceparent: Option<&str>) -> Result<Self> {
        if let Some(traceparent) = traceparent {
            if self.status == crate::status::ClaimStatus::Queued {
                Spi::connect_mut(|client| crate::trace::record(client, self.id, traceparent))?;
            }
        }
        Ok(self)
    }

    /// The values of the columns `(id, queued, status)`.
    fn values(self) -> Vec<Option<pg_sys::Datum>> {
        vec![
            composite::value(self.id),
            composite::value(self.status == crate::status::ClaimStatus::Queued),
            composite::value(self.status.as_str()),
        ]
    }
}

/// Queue a delivery given its raw body.
pub(crate) fn enqueue_raw(
    provider: Option<&str>,
    event_id: Option<&str>,
    event_type: Option<&str>,
    body: Option<&[u8]>,
    signature: Option<&str>,
) -> PgResult<Queued> {
    let body = input::required(ENQUEUE, "body", body)?;
    let payload = payload_of_body(ENQUEUE, body)?;
    enqueue(
        provider,
        event_id,
        event_type,
        payload,
        Some(body),
        signature,
    )
}

/// Queue a delivery whose payload is checked.
pub(crate) fn enqueue(
    provider: Option<&str>,
    event_id: Option<&str>,
    event_type: Option<&str>,
    payload: RawJsonb,
    raw_body: Option<&[u8]>,
    signature: Option<&str>,
) -> PgResult<Queued> {
    crate::standby::refuse_writes(ENQUEUE)?;
    // A queued event is leased by workers, not by this call: the default.
    let claims = Claims::leased(ENQUEUE)?;
    let d = delivery(
        ENQUEUE, provider, event_id, event_type, payload, raw_body, signature, claims,
    )?;
    let Outcome { id, status, .. } = Spi::connect_mut(|client| {
        crate::scopes::check_provider(client, ENQUEUE, "provider", d.provider)?;
        let order = crate::ordering::of_payload(client, d.provider, &d.payload)?;
        let d = crate::claim::Delivery {
            order: order.as_ref(),
            ..d
        };
        super::enqueue(client, &d)
    })?;
    Ok(Queued { id, status })
}
