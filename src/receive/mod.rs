//! `webhook_receive`: the one call a handler needs. Verify the delivery
//! with the provider's registered scheme and secrets, read its event id
//! and type where the provider puts them, claim it (or queue it), and say
//! what to answer. `receive` below is the whole flow, top to bottom; each
//! step it takes lives in its own place:
//!
//! * `api` — the SQL functions and their arguments;
//! * `rejections` — a refusal archived with its reason, bounded;
//! * `headers` — headers as archived, secret ones redacted;
//! * `secrets` — which key verified a delivery, and its last use;
//! * `handshakes` — endpoint checks, answered as their provider expects;
//! * `crate::sources` (shared with `route`) — the body as a document, and
//!   where the event id and type come from, signed or not;
//! * `bindings` — signed bytes bound to one event id, where the id is not
//!   signed;
//! * `filters` — whether the provider and its consumers take the event,
//!   judged on signed material only;
//! * `answer` — what the caller gets back.

mod answer;
mod api;
mod bindings;
mod filters;
mod handshakes;
mod headers;
mod rejections;
mod secrets;

use crate::claim::{self, api::Claims, Delivery, Outcome};
use crate::errors::Result;
use crate::input::{
    self, MAX_EVENT_ID_BYTES, MAX_EVENT_TYPE_BYTES, MAX_PROVIDER_BYTES, MAX_SIGNATURE_BYTES,
};
use crate::jsonb::{self, RawJsonb};
use crate::ordering;
use crate::registry;
use crate::schemes::{self, Headers};
use answer::Answer;
use bindings::Binding;
use pgrx::prelude::*;
use rejections::{reject, Request};

const FUNCTION: &str = "webhook_receive";

/// How a delivery is taken.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// As the provider is registered (`webhook.providers.inbox`).
    AsRegistered,
    /// Claimed, for the caller's transaction to process.
    Claim,
    /// Queued in the inbox for workers; answered 2xx at once.
    Inbox,
}

impl From<Option<bool>> for Mode {
    /// webhook_receive's `inbox` argument.
    fn from(inbox: Option<bool>) -> Self {
        match inbox {
            None => Mode::AsRegistered,
            Some(false) => Mode::Claim,
            Some(true) => Mode::Inbox,
        }
    }
}

impl Mode {
    /// Whether the delivery goes to the inbox, for a provider registered
    /// with `inbox` as it is.
    fn queues(self, registered_inbox: bool) -> bool {
        match self {
            Mode::AsRegistered => registered_inbox,
            Mode::Claim => false,
            Mode::Inbox => true,
        }
    }
}

/// A delivery as the handler passed it, checked.
struct Incoming<'a> {
    provider: &'a str,
    headers: RawJsonb,
    body: &'a [u8],
    url: Option<&'a str>,
}

/// Check the arguments, then receive the delivery.
fn receive(
    provider: Option<&str>,
    headers: Option<RawJsonb>,
    body: Option<&[u8]>,
    claims: Claims,
    url: Option<&str>,
    mode: Mode,
) -> Result<Answer> {
    crate::standby::refuse_writes(FUNCTION)?;
    let provider = input::required_text(FUNCTION, "provider", provider, MAX_PROVIDER_BYTES)?;
    let headers = input::required(FUNCTION, "headers", headers)?;
    let body = input::required(FUNCTION, "body", body)?;
    input::payload_size(FUNCTION, "body", body.len())?;
    let url = input::url(FUNCTION, "url", url)?;
    let incoming = Incoming {
        provider,
        headers,
        body,
        url,
    };
    Spi::connect_mut(|client| flow(client, incoming, claims, mode))
}

/// The whole of `webhook_receive`, in the order it happens.
fn flow(
    client: &mut pgrx::spi::SpiClient<'_>,
    incoming: Incoming<'_>,
    claims: Claims,
    mode: Mode,
) -> Result<Answer> {
    let Incoming {
        provider: name,
        headers,
        body,
        url,
    } = incoming;
    crate::scopes::check_provider(client, FUNCTION, "provider", name)?;
    let provider = registry::provider(client, name)?;
    let inbox = mode.queues(provider.inbox);

    // The request as far as it is read, for archiving a refusal.
    let headers_json = headers.to_json().unwrap_or(serde_json::Value::Null);
    // In a tier of databases, only the slot the delivery routes to may
    // hold it: anywhere else its duplicates would not find it.
    let registration = crate::route::Registration {
        scheme: &provider.scheme,
        event_id_from: &provider.event_id_from,
        entity_key_from: provider
            .ordering
            .as_ref()
            .map(|(entity, _)| entity.as_str()),
    };
    crate::route::check(FUNCTION, name, &registration, &headers_json, body, url)?;
    let parsed_headers = Headers::from_json(&headers_json);
    let signature = parsed_headers.as_ref().ok().and_then(|h| {
        provider
            .scheme
            .signature_headers()
            .into_iter()
            .find_map(|header| h.get(header).ok())
    });
    let mut request = Request {
        provider: name,
        body,
        signature: signature.filter(|s| s.len() <= MAX_SIGNATURE_BYTES),
        headers: None,
        verified_by: None,
    };
    let parsed_headers = match parsed_headers {
        Ok(h) => h,
        Err(reason) => return reject(client, &request, 401, reason.as_str(), None),
    };
    request.headers = headers::archived(headers, &headers_json, provider.scheme.secret_header())?;

    // Verify.
    let secrets: Vec<Option<&str>> = provider.secrets.iter().map(Option::as_deref).collect();
    let signed = schemes::Request {
        headers: &parsed_headers,
        body,
        url,
    };
    let authentic = match schemes::authenticate(
        &provider.scheme,
        &signed,
        &secrets,
        provider.tolerance,
        schemes::now_unix(),
    ) {
        Ok(authentic) => authentic,
        Err(verdict) => return reject(client, &request, 401, verdict.reason.as_str(), None),
    };
    request.verified_by = secrets::used(client, name, &provider, authentic.secret)?;

    // An endpoint check in the headers alone (Okta's, a GET with no body):
    // answered before the body is read, archived with an empty payload.
    if let Some(handshake) =
        crate::schemes::handshake::recognise_headers(&provider.scheme, &parsed_headers)
    {
        let payload = jsonb::from_text(FUNCTION, "body", "{}")?;
        return handshakes::answer(client, &request, payload, handshake);
    }

    // Read: parsed once, serde's document for the ids, jsonb for storing.
    let Some((body_text, body_json)) = crate::sources::document(&provider.scheme, body) else {
        return reject(client, &request, 400, "malformed_body", None);
    };
    if let Some(handshake) = handshakes::recognise(&provider, authentic.secret, &body_json) {
        let payload = jsonb::from_text(FUNCTION, "body", &body_text)?;
        return handshakes::answer(client, &request, payload, handshake);
    }
    let event_id = crate::sources::extract(
        &provider.event_id_from,
        &parsed_headers,
        &authentic,
        &body_json,
    );
    let event_type = crate::sources::extract(
        &provider.event_type_from,
        &parsed_headers,
        &authentic,
        &body_json,
    );
    // Named for what is missing: the id first, as it decides the dedup.
    let Some(event_id) = event_id else {
        return reject(client, &request, 400, "missing_event_id", None);
    };
    let Some(event_type) = event_type else {
        return reject(client, &request, 400, "missing_event_type", None);
    };
    if event_id.value.len() > MAX_EVENT_ID_BYTES || event_type.value.len() > MAX_EVENT_TYPE_BYTES {
        return reject(client, &request, 400, "malformed_event_id", None);
    }
    let payload = jsonb::from_text(FUNCTION, "body", &body_text)?;
    // None: the provider is not ordered; Some(None): this event has no
    // entity key or order value, and is processed unordered.
    let order = provider
        .ordering
        .as_ref()
        .map(|(entity_key_from, order_from)| {
            ordering::read(entity_key_from, order_from, &body_json)
        });
    let delivery = Delivery {
        function: FUNCTION,
        provider: name,
        event_id: &event_id.value,
        event_type: &event_type.value,
        payload,
        raw_body: Some(body),
        signature: request.signature,
        headers: request.headers,
        lease: claims.lease(),
        order: order.as_ref().and_then(Option::as_ref),
        verified_by: request.verified_by,
    };
    let answer = |outcome: Outcome| {
        let (http_status, reason) = answer::of_outcome(&outcome, matches!(order, Some(None)));
        Answer {
            outcome,
            http_status,
            reason,
            event_id: Some(event_id.value.clone()),
            event_type: Some(event_type.value.clone()),
            event_type_signed: Some(event_type.signed),
            response: None,
        }
    };

    // Bind the signed bytes to the one delivery they may vouch for, where
    // the signature does not cover its id or its body; refuse them with
    // any other. A scheme that signs nothing (a shared token) has no bytes
    // to bind: its id is what the token's holder says.
    let unvouched_body = authentic.unvouched_body_digest(body);
    if !provider.scheme.signs_nothing() && (!event_id.signed || unvouched_body.is_some()) {
        let signed = authentic.signed_digest(body);
        let vouched = bindings::Vouched {
            event_id: &event_id.value,
            body: unvouched_body.as_ref().map(|digest| &digest[..]),
        };
        match bindings::bind(client, name, &signed, vouched, inbox)? {
            Binding::Bound => {}
            // Another open transaction is receiving these very bytes: a
            // concurrent redelivery, answered as any in-progress event is.
            Binding::Busy => return Ok(answer(claim::observe_in_progress(client, &delivery)?)),
            Binding::ToAnotherDelivery => {
                return reject(client, &request, 401, "replayed", Some(&event_id.value))
            }
        }
    }

    // Filter, on what the signature covers; then claim, or queue.
    let verdict = filters::judge(
        client,
        name,
        &event_type,
        authentic.body_vouched(),
        delivery.payload,
    )?;
    let outcome = match (verdict, inbox) {
        (None, true) => crate::inbox::enqueue(client, &delivery)?,
        (None, false) => claim::claim(client, &delivery)?,
        (Some(verdict), true) => crate::inbox::enqueue_filtered(
            client,
            &delivery,
            verdict.event.as_deref(),
            &verdict.consumers,
        )?,
        // A claim has no consumers: only the provider's filter applies.
        (Some(verdict), false) => match verdict.event {
            Some(reason) => claim::filter_out(client, &delivery, &reason)?,
            None => claim::claim(client, &delivery)?,
        },
    };
    Ok(answer(outcome))
}
