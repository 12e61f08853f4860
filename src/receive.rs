//! `webhook_receive`: the one call a handler needs. Verify the delivery
//! with the provider's registered scheme and secrets, read its event id
//! and type where the provider puts them, claim it, and say what to answer.
//!
//! A delivery that cannot be trusted or read is archived as REJECTED with
//! its reason and claims nothing, so forgeries and misconfigurations show
//! up in `webhook.rejected_deliveries` instead of vanishing. Only a bounded
//! prefix of a rejected body is kept, with its size and SHA-256: a flood of
//! forgeries cannot fill the disk.
//!
//! The event id decides deduplication, so it is taken from what the
//! signature covers whenever the provider puts it there (a signed source
//! always wins over an unsigned one). Where it is not signed (GitHub,
//! Shopify, a generic HMAC of the body), the delivery's signed bytes are
//! bound to the id the first time they are seen, in
//! `webhook.signature_bindings`: the same signed bytes under another id are
//! a replay with a forged header, and are refused as `replayed`.

use crate::archive::{self, Rejection};
use crate::claim::{self, api::Claims, Delivery, Outcome};
use crate::composite;
use crate::errors::Result;
use crate::event_lock::EventLock;
use crate::input::{
    self, MAX_EVENT_ID_BYTES, MAX_EVENT_TYPE_BYTES, MAX_PROVIDER_BYTES, MAX_SIGNATURE_BYTES,
};
use crate::jsonb::{self, RawJsonb};
use crate::ordering;
use crate::plans::Statement;
use crate::registry;
use crate::schemes::{self, handshake, Headers, Scheme};
use crate::status::ClaimStatus;
use pgrx::datum::Interval;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;

const FUNCTION: &str = "webhook_receive";

/// Receive a delivery given its raw body (exact: signatures cover these
/// bytes). `inbox`: store and queue it for workers and answer 2xx at once
/// (true), claim it for this transaction to process (false), or as the
/// provider is registered (NULL). `url`: the public URL the provider
/// called, for the schemes that sign it (Twilio, Square, HubSpot); behind
/// a proxy, the URL as the provider saw it, not as the application did.
/// `complete_on_commit`: a claimed event is complete when this
/// transaction commits, with no `webhook_complete` (one-transaction
/// handlers); it changes nothing for a queued delivery.
#[pg_extern(volatile, security_definer, parallel_unsafe, name = "webhook_receive")]
#[search_path(pg_catalog, pg_temp)]
#[allow(clippy::too_many_arguments)]
fn receive_bytes(
    provider: Option<&str>,
    headers: Option<RawJsonb>,
    body: Option<&[u8]>,
    lease: default!(Option<Interval>, "NULL"),
    inbox: default!(Option<bool>, "NULL"),
    url: default!(Option<&str>, "NULL"),
    complete_on_commit: default!(Option<bool>, false),
    fcinfo: pg_sys::FunctionCallInfo,
) -> std::result::Result<
    pgrx::composite_type!('static, "webhook.receive_result"),
    pg_sys::panic::ErrorReport,
> {
    let claims = Claims::of(FUNCTION, lease, complete_on_commit)?;
    let answer = receive_answer(provider, headers, body, claims, url, Mode::from(inbox))?;
    Ok(answer.into_row(fcinfo)?)
}

/// Text form, for a body passed as a string.
#[pg_extern(volatile, security_definer, parallel_unsafe, name = "webhook_receive")]
#[search_path(pg_catalog, pg_temp)]
#[allow(clippy::too_many_arguments)]
fn receive_string(
    provider: Option<&str>,
    headers: Option<RawJsonb>,
    body: Option<&str>,
    lease: default!(Option<Interval>, "NULL"),
    inbox: default!(Option<bool>, "NULL"),
    url: default!(Option<&str>, "NULL"),
    complete_on_commit: default!(Option<bool>, false),
    fcinfo: pg_sys::FunctionCallInfo,
) -> std::result::Result<
    pgrx::composite_type!('static, "webhook.receive_result"),
    pg_sys::panic::ErrorReport,
> {
    receive_bytes(
        provider,
        headers,
        body.map(str::as_bytes),
        lease,
        inbox,
        url,
        complete_on_commit,
        fcinfo,
    )
}

/// How a delivery is taken.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
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

pub(crate) fn receive_answer(
    provider: Option<&str>,
    headers: Option<RawJsonb>,
    body: Option<&[u8]>,
    claims: Claims,
    url: Option<&str>,
    mode: Mode,
) -> Result<Answer> {
    let provider = input::required_text(FUNCTION, "provider", provider, MAX_PROVIDER_BYTES)?;
    let headers = input::required(FUNCTION, "headers", headers)?;
    let body = input::required(FUNCTION, "body", body)?;
    input::payload_size(FUNCTION, "body", body.len())?;
    let url = input::url(FUNCTION, "url", url)?;
    let request = Incoming {
        provider,
        headers,
        body,
        url,
    };
    Spi::connect_mut(|client| receive(client, request, claims, mode))
}

pub(crate) struct Answer {
    outcome: Outcome,
    http_status: i32,
    reason: &'static str,
    /// What the handler dispatches on; unknown for rejected deliveries.
    event_id: Option<String>,
    event_type: Option<String>,
    /// Whether the signature covers the event type (false: it came from a
    /// header anyone relaying the delivery could have changed).
    event_type_signed: Option<bool>,
    /// What to send the provider instead of an empty 2xx (a handshake's
    /// answer), and its content type.
    response: Option<(String, &'static str)>,
}

impl Answer {
    /// webhook_receive's answer, a `webhook.receive_result`.
    fn into_row(self, fcinfo: pg_sys::FunctionCallInfo) -> Result<composite::Row> {
        let (response, response_type) = match self.response {
            Some((body, content_type)) => (Some(body), Some(content_type)),
            None => (None, None),
        };
        let mut values = self.outcome.values();
        values.extend([
            composite::value(self.http_status),
            composite::value(self.reason),
            composite::value(self.event_id),
            composite::value(self.event_type),
            composite::value(self.event_type_signed),
            composite::value(response),
            composite::value(response_type),
        ]);
        composite::of_call(fcinfo, values)
    }

    fn refused(id: pgrx::Uuid, http_status: i32, reason: &'static str) -> Self {
        Answer {
            outcome: Outcome {
                id,
                status: ClaimStatus::Rejected,
                attempts: 0,
                result: None,
                tie: false,
            },
            http_status,
            reason,
            event_id: None,
            event_type: None,
            event_type_signed: None,
            response: None,
        }
    }
}

/// A secret verified a delivery: say so, at most once a minute, and never
/// wait for it. A transaction that touched it holds its row until it ends,
/// and every other one skips it meanwhile.
static TOUCH_SECRET: Statement = Statement {
    sql: "UPDATE webhook.provider_secrets s
             SET last_used_at = pg_catalog.now()
           WHERE s.ctid = (SELECT t.ctid FROM webhook.provider_secrets t
                            WHERE t.provider = $1 AND t.fingerprint = $2
                              AND (t.last_used_at IS NULL
                                   OR t.last_used_at < pg_catalog.now() - interval '1 minute')
                              FOR UPDATE SKIP LOCKED)",
    arg_types: &[pg_sys::TEXTOID, pg_sys::TEXTOID],
};

/// Which event id these signed bytes were first seen under, if any.
static BOUND_TO: Statement = Statement {
    sql: "SELECT event_id FROM webhook.signature_bindings WHERE provider = $1 AND digest = $2",
    arg_types: &[pg_sys::TEXTOID, pg_sys::BYTEAOID],
};

/// Bind signed bytes to an event id. Runs under the signed-bytes lock, so
/// no other transaction is inserting the same key.
static BIND: Statement = Statement {
    sql: "INSERT INTO webhook.signature_bindings (provider, digest, event_id)
          VALUES ($1, $2, $3)
          ON CONFLICT (provider, digest) DO NOTHING",
    arg_types: &[pg_sys::TEXTOID, pg_sys::BYTEAOID, pg_sys::TEXTOID],
};

/// A value read off a delivery, and whether its signature covers it.
struct Sourced {
    value: String,
    signed: bool,
}

/// Where a provider puts a value: `header:<name>` or `body:<dotted.path>`,
/// alternatives separated by `|`. The first present *signed* alternative
/// wins; only if none is present, the first present unsigned one. The
/// body is always signed; a header only if the scheme's signature covers
/// it (`covered`). Strings are taken as they are, numbers in their exact
/// JSON digits.
fn extract(
    source: &str,
    headers: &Headers<'_>,
    covered: &[&str],
    body: &serde_json::Value,
) -> Option<Sourced> {
    let read = |alternative: &str| -> Option<Sourced> {
        let (kind, path) = alternative.split_once(':')?;
        match kind {
            "header" => headers
                .get(path)
                .ok()
                .filter(|v| !v.is_empty())
                .map(|v| Sourced {
                    value: v.to_string(),
                    signed: covered.iter().any(|c| c.eq_ignore_ascii_case(path)),
                }),
            "body" => jsonb::body_value(body, path).map(|value| Sourced {
                value,
                signed: true,
            }),
            _ => None,
        }
    };
    let found: Vec<Sourced> = source.split('|').filter_map(read).collect();
    let first_signed = found.iter().position(|s| s.signed);
    found.into_iter().nth(first_signed.unwrap_or(0))
}

/// Headers as they are archived: the values of the headers named in
/// `webhook.redact_headers` replaced, and none at all past
/// `MAX_ARCHIVED_HEADER_BYTES`.
fn archived_headers(raw: RawJsonb, json: &serde_json::Value) -> Result<Option<RawJsonb>> {
    if raw.size() > MAX_ARCHIVED_HEADER_BYTES {
        return Ok(None);
    }
    let Some(object) = json.as_object() else {
        return Ok(Some(raw));
    };
    let redact = crate::gucs::redacted_headers();
    let is_secret = |name: &str| redact.iter().any(|r| r.eq_ignore_ascii_case(name));
    if !object.keys().any(|name| is_secret(name)) {
        return Ok(Some(raw));
    }
    let redacted: serde_json::Map<String, serde_json::Value> = object
        .iter()
        .map(|(name, value)| {
            let value = if is_secret(name) {
                serde_json::Value::String("[redacted]".into())
            } else {
                value.clone()
            };
            (name.clone(), value)
        })
        .collect();
    let text = serde_json::Value::Object(redacted).to_string();
    jsonb::from_text(FUNCTION, "headers", &text).map(Some)
}

/// Request headers are archived only up to this size (a real request's
/// headers are a few kilobytes); beyond it the row keeps none.
const MAX_ARCHIVED_HEADER_BYTES: usize = 64 * 1024;

/// The request as far as it was read, for archiving a refusal.
struct Request<'a> {
    provider: &'a str,
    body: &'a [u8],
    signature: Option<&'a str>,
    headers: Option<RawJsonb>,
    /// Once verified: the fingerprint of the key that did it.
    verified_by: Option<&'a str>,
}

fn reject(
    client: &mut SpiClient<'_>,
    request: &Request<'_>,
    http_status: i32,
    reason: &'static str,
    event_id: Option<&str>,
) -> Result<Answer> {
    let id = crate::uuid::new_v7();
    archive::record_rejection(
        client,
        Rejection {
            id,
            provider: request.provider,
            event_id,
            body: request.body,
            kept: crate::gucs::rejected_body_bytes(),
            signature: request.signature,
            headers: request.headers,
            reason,
        },
    )?;
    Ok(Answer::refused(id, http_status, reason))
}

/// A delivery as the handler passed it.
struct Incoming<'a> {
    provider: &'a str,
    headers: RawJsonb,
    body: &'a [u8],
    url: Option<&'a str>,
}

fn receive(
    client: &mut SpiClient<'_>,
    incoming: Incoming<'_>,
    claims: Claims,
    mode: Mode,
) -> Result<Answer> {
    let Incoming {
        provider: provider_name,
        headers,
        body,
        url,
    } = incoming;
    let provider = registry::provider(client, provider_name)?;
    let inbox = match mode {
        Mode::AsRegistered => provider.inbox,
        Mode::Claim => false,
        Mode::Inbox => true,
    };
    let headers_json = headers.to_json().unwrap_or(serde_json::Value::Null);
    let parsed_headers = Headers::from_json(&headers_json);
    let signature = parsed_headers.as_ref().ok().and_then(|h| {
        provider
            .scheme
            .signature_headers()
            .into_iter()
            .find_map(|name| h.get(name).ok())
    });
    let mut request = Request {
        provider: provider_name,
        body,
        signature: signature.filter(|s| s.len() <= MAX_SIGNATURE_BYTES),
        headers: None,
        verified_by: None,
    };

    let headers_parsed = match parsed_headers {
        Ok(h) => h,
        Err(reason) => return reject(client, &request, 401, reason.as_str(), None),
    };
    request.headers = archived_headers(headers, &headers_json)?;
    let secrets: Vec<Option<&str>> = provider.secrets.iter().map(Option::as_deref).collect();
    let signed = schemes::Request {
        headers: &headers_parsed,
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
    // Which key verified it: archived with the delivery, and the key's
    // last use kept.
    let verified_by = provider
        .fingerprints
        .get(authentic.secret)
        .and_then(Option::as_deref);
    if let Some(fingerprint) = verified_by {
        TOUCH_SECRET.run(client, &[provider_name.into(), fingerprint.into()])?;
    }
    request.verified_by = verified_by;

    // Parsed once: serde's document for reading the ids, jsonb for storing.
    let Some((body_text, body_json)) = document(&provider.scheme, body) else {
        return reject(client, &request, 400, "malformed_body", None);
    };
    let key = secrets
        .get(authentic.secret)
        .copied()
        .flatten()
        .and_then(|secret| provider.scheme.hmac_key(secret));
    if let Some(handshake) = handshake::recognise(
        &provider.scheme,
        &headers_parsed,
        &body_json,
        key.as_deref(),
    ) {
        let payload = jsonb::from_text(FUNCTION, "body", &body_text)?;
        return answer_handshake(client, &request, payload, handshake);
    }
    let covered = authentic.covered_headers;
    let event_id = extract(
        &provider.event_id_from,
        &headers_parsed,
        covered,
        &body_json,
    );
    let event_type = extract(
        &provider.event_type_from,
        &headers_parsed,
        covered,
        &body_json,
    );
    let (Some(event_id), Some(event_type)) = (event_id, event_type) else {
        return reject(client, &request, 400, "missing_event_id", None);
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
        provider: provider_name,
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
        let http_status = match outcome.status {
            ClaimStatus::InProgress => 409,
            _ => 200,
        };
        let reason = match (&order, outcome.status, outcome.tie) {
            (_, _, true) => "tie",
            (_, ClaimStatus::Stale, false) => "older",
            (Some(None), _, _) => "unordered",
            _ => "ok",
        };
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

    if !event_id.signed {
        // The id is not covered by the signature: bind the signed bytes to
        // it, or refuse them under any other id.
        match bind(
            client,
            provider_name,
            &authentic.signed_digest(body),
            &event_id.value,
            inbox,
        )? {
            Binding::Bound => {}
            // Another open transaction is receiving these very bytes: a
            // concurrent redelivery, answered as any in-progress event is.
            Binding::Busy => return Ok(answer(claim::observe_in_progress(client, &delivery)?)),
            Binding::ToAnotherId => {
                return reject(client, &request, 401, "replayed", Some(&event_id.value))
            }
        }
    }
    let outcome = if inbox {
        crate::inbox::enqueue(client, &delivery)?
    } else {
        claim::claim(client, &delivery)?
    };
    Ok(answer(outcome))
}

/// The body as the scheme's provider sends it, as JSON text and document:
/// one event (an object), a batch (an array), or form fields (stored as an
/// object of strings). None: not what the provider sends.
fn document<'b>(
    scheme: &Scheme,
    body: &'b [u8],
) -> Option<(std::borrow::Cow<'b, str>, serde_json::Value)> {
    use crate::schemes::catalog::Body;
    let kind = scheme.body();
    if let Ok((text, value)) = input::json_body(FUNCTION, "body", body, kind == Body::Batch) {
        return Some((text.into(), value));
    }
    if kind != Body::Form {
        return None;
    }
    let mut fields = serde_json::Map::new();
    for (name, value) in crate::schemes::form_fields(body) {
        let name = String::from_utf8(name).ok()?;
        let value = String::from_utf8(value).ok()?;
        if name.contains('\0') || value.contains('\0') {
            return None;
        }
        fields.insert(name, serde_json::Value::String(value));
    }
    let value = serde_json::Value::Object(fields);
    Some((value.to_string().into(), value))
}

/// A verified endpoint check: archived as a handshake, answered with what
/// the provider expects.
fn answer_handshake(
    client: &mut SpiClient<'_>,
    request: &Request<'_>,
    payload: RawJsonb,
    handshake: handshake::Handshake,
) -> Result<Answer> {
    let id = crate::uuid::new_v7();
    archive::record_handshake(
        client,
        archive::Handshake {
            id,
            provider: request.provider,
            kind: handshake.kind,
            payload,
            raw_body: request.body,
            signature: request.signature,
            headers: request.headers,
            verified_by: request.verified_by,
        },
    )?;
    Ok(Answer {
        outcome: Outcome {
            id,
            status: ClaimStatus::Handshake,
            attempts: 0,
            result: None,
            tie: false,
        },
        http_status: 200,
        reason: "handshake",
        event_id: None,
        event_type: Some(handshake.kind.to_string()),
        event_type_signed: Some(true),
        response: Some((handshake.response, handshake.content_type)),
    })
}

/// What binding a delivery's signed bytes to its (unsigned) event id found.
enum Binding {
    /// Bound to this id, now or before: go on and claim.
    Bound,
    /// Another open transaction is binding the same bytes right now.
    Busy,
    /// Already bound to another id: a replay under a forged id header.
    ToAnotherId,
}

/// Bind `digest` (of a provider's signed bytes) to `event_id`, under the
/// signed-bytes lock so that two transactions never insert the same key.
/// A claim only tries the lock, so nobody waits; inbox intake (`wait`)
/// waits for the other transaction instead, because it may only answer
/// 2xx once the delivery is stored for good. Held until the transaction
/// ends when this call inserted the binding.
fn bind(
    client: &mut SpiClient<'_>,
    provider: &str,
    digest: &[u8],
    event_id: &str,
    wait: bool,
) -> Result<Binding> {
    let lock = EventLock::for_signed_bytes(provider, digest);
    if wait {
        lock.acquire();
    } else if !lock.try_acquire() {
        return Ok(Binding::Busy);
    }
    let bound_to = match BOUND_TO
        .run(client, &[provider.into(), digest.into()])?
        .next()
    {
        Some(row) => row.get::<String>(1)?,
        None => None,
    };
    match bound_to {
        Some(first) => {
            lock.release();
            Ok(if first == event_id {
                Binding::Bound
            } else {
                Binding::ToAnotherId
            })
        }
        None => {
            BIND.run(client, &[provider.into(), digest.into(), event_id.into()])?;
            Ok(Binding::Bound)
        }
    }
}
