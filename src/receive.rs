//! `webhook_receive`: the one call a handler needs. Verify the delivery
//! with the provider's registered scheme and secrets, read its event id
//! and type where the provider puts them, claim it, and say what to answer.
//!
//! A delivery that cannot be trusted or read is archived as REJECTED with
//! its reason and claims nothing, so forgeries and misconfigurations show
//! up in `webhook.rejected_deliveries` instead of vanishing.

use crate::claim::{self, ClaimStatus, Delivery, Outcome};
use crate::errors::{Result, WebhookError};
use crate::input::{
    self, MAX_EVENT_ID_BYTES, MAX_EVENT_TYPE_BYTES, MAX_PROVIDER_BYTES, MAX_SIGNATURE_BYTES,
};
use crate::jsonb::RawJsonb;
use crate::plans::Statement;
use crate::schemes::{self, Headers, Scheme};
use pgrx::datum::Interval;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;

const FUNCTION: &str = "webhook_receive";

/// Receive a delivery given its raw body (exact: signatures cover these bytes).
#[pg_extern(volatile, security_definer, parallel_unsafe)]
#[search_path(pg_catalog, pg_temp)]
fn webhook_receive(
    provider: Option<&str>,
    headers: Option<RawJsonb>,
    body: Option<&[u8]>,
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
            name!(http_status, i32),
            name!(reason, String),
            name!(event_id, Option<String>),
            name!(event_type, Option<String>),
        ),
    >,
    pg_sys::panic::ErrorReport,
> {
    let provider = input::required_text(FUNCTION, "provider", provider, MAX_PROVIDER_BYTES)?;
    let headers = input::required(FUNCTION, "headers", headers)?;
    let body = input::required(FUNCTION, "body", body)?;
    input::payload_size(FUNCTION, "body", body.len())?;
    let lease = input::lease(FUNCTION, "lease", lease)?;
    let answer = Spi::connect_mut(|client| receive(client, provider, headers, body, lease))?;
    let (id, claimed, status, attempts, result) = answer.outcome.row();
    Ok(TableIterator::once((
        id,
        claimed,
        status,
        attempts,
        result,
        answer.http_status,
        answer.reason.to_string(),
        answer.event_id,
        answer.event_type,
    )))
}

/// Text form, for a body passed as a string.
#[pg_extern(volatile, security_definer, parallel_unsafe, name = "webhook_receive")]
#[search_path(pg_catalog, pg_temp)]
fn webhook_receive_text(
    provider: Option<&str>,
    headers: Option<RawJsonb>,
    body: Option<&str>,
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
            name!(http_status, i32),
            name!(reason, String),
            name!(event_id, Option<String>),
            name!(event_type, Option<String>),
        ),
    >,
    pg_sys::panic::ErrorReport,
> {
    webhook_receive(provider, headers, body.map(str::as_bytes), lease)
}

struct Answer {
    outcome: Outcome,
    http_status: i32,
    reason: &'static str,
    /// What the handler dispatches on; unknown for rejected deliveries.
    event_id: Option<String>,
    event_type: Option<String>,
}

struct Provider {
    scheme: Scheme,
    tolerance: i64,
    event_id_from: String,
    event_type_from: String,
    secrets: Vec<Option<String>>,
}

static LOAD_PROVIDER: Statement = Statement {
    sql: "SELECT p.scheme,
                 pg_catalog.date_part('epoch', p.tolerance)::int8,
                 p.event_id_from,
                 p.event_type_from,
                 pg_catalog.array_agg(s.secret ORDER BY s.added_at DESC)
                     FILTER (WHERE s.secret IS NOT NULL AND s.retired_at IS NULL)
            FROM webhook.providers p
            LEFT JOIN webhook.provider_secrets s ON s.provider = p.name
           WHERE p.name = $1
           GROUP BY p.name",
    arg_types: &[pg_sys::TEXTOID],
};

/// A delivery refused before any claim: archived with its reason.
static REJECT: Statement = Statement {
    sql: "INSERT INTO webhook.delivery_log
              (id, provider, event_id, event_type, payload, raw_body, signature, headers,
               claim_status, reject_reason)
          VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'rejected', $9)",
    arg_types: &[
        pg_sys::UUIDOID,
        pg_sys::TEXTOID,
        pg_sys::TEXTOID,
        pg_sys::TEXTOID,
        pg_sys::JSONBOID,
        pg_sys::BYTEAOID,
        pg_sys::TEXTOID,
        pg_sys::JSONBOID,
        pg_sys::TEXTOID,
    ],
};

fn load_provider(client: &mut SpiClient<'_>, name: &str) -> Result<Provider> {
    let rows = LOAD_PROVIDER.run(client, &[name.into()])?;
    let row = rows
        .into_iter()
        .next()
        .ok_or_else(|| WebhookError::UnknownProvider {
            given: name.to_string(),
        })?;
    Ok(Provider {
        scheme: Scheme::parse(&row.get::<String>(1)?.unwrap_or_default())?,
        tolerance: row.get::<i64>(2)?.unwrap_or(300),
        event_id_from: row.get::<String>(3)?.unwrap_or_default(),
        event_type_from: row.get::<String>(4)?.unwrap_or_default(),
        secrets: row.get::<Vec<Option<String>>>(5)?.unwrap_or_default(),
    })
}

/// Where a provider puts a value: `header:<name>` or `body:<dotted.path>`,
/// alternatives separated by `|`, the first present one wins. Strings are
/// taken as they are, numbers in their JSON form.
fn extract(source: &str, headers: &Headers<'_>, body: &serde_json::Value) -> Option<String> {
    source.split('|').find_map(|alternative| {
        let (kind, path) = alternative.split_once(':')?;
        let value = match kind {
            "header" => {
                return headers
                    .get(path)
                    .ok()
                    .filter(|v| !v.is_empty())
                    .map(str::to_string)
            }
            "body" => path.split('.').try_fold(body, |node, key| node.get(key))?,
            _ => return None,
        };
        match value {
            serde_json::Value::String(s) if !s.is_empty() => Some(s.clone()),
            serde_json::Value::Number(n) => Some(n.to_string()),
            _ => None,
        }
    })
}

fn receive(
    client: &mut SpiClient<'_>,
    provider_name: &str,
    headers: RawJsonb,
    body: &[u8],
    lease: Interval,
) -> Result<Answer> {
    let provider = load_provider(client, provider_name)?;
    let headers_json = headers.to_json().unwrap_or(serde_json::Value::Null);
    let parsed_headers = Headers::from_json(&headers_json);
    let signature = parsed_headers.as_ref().ok().and_then(|h| {
        provider
            .scheme
            .signature_headers()
            .into_iter()
            .find_map(|name| h.get(name).ok())
    });
    let signature = signature.filter(|s| s.len() <= MAX_SIGNATURE_BYTES);

    let reject = |client: &mut SpiClient<'_>,
                  http_status: i32,
                  reason: &'static str,
                  event: (Option<&str>, Option<&str>, Option<RawJsonb>)| {
        let id = crate::uuid::new_v7();
        REJECT.run(
            client,
            &[
                id.into(),
                provider_name.into(),
                event.0.into(),
                event.1.into(),
                event.2.into(),
                body.into(),
                signature.into(),
                Some(headers).into(),
                reason.into(),
            ],
        )?;
        let outcome = Outcome {
            id,
            status: ClaimStatus::Rejected,
            attempts: 0,
            result: None,
        };
        Ok::<_, WebhookError>(Answer {
            outcome,
            http_status,
            reason,
            event_id: None,
            event_type: None,
        })
    };

    let headers_parsed = match parsed_headers {
        Ok(h) => h,
        Err(reason) => return reject(client, 401, reason.as_str(), (None, None, None)),
    };
    let secrets: Vec<Option<&str>> = provider.secrets.iter().map(Option::as_deref).collect();
    let verdict = schemes::verify_headers(
        &provider.scheme,
        &headers_parsed,
        body,
        &secrets,
        provider.tolerance,
        schemes::now_unix(),
    );
    if !verdict.valid() {
        return reject(client, 401, verdict.reason.as_str(), (None, None, None));
    }

    // Parsed once: serde's document for reading the ids, jsonb for storing.
    let Ok((body_text, body_json)) = input::json_object_body(FUNCTION, "body", body) else {
        return reject(client, 400, "malformed_body", (None, None, None));
    };
    let payload = claim::jsonb_from_text(body_text)?;
    let event_id = extract(&provider.event_id_from, &headers_parsed, &body_json);
    let event_type = extract(&provider.event_type_from, &headers_parsed, &body_json);
    let (Some(event_id), Some(event_type)) = (event_id, event_type) else {
        return reject(client, 400, "missing_event_id", (None, None, Some(payload)));
    };
    if event_id.len() > MAX_EVENT_ID_BYTES || event_type.len() > MAX_EVENT_TYPE_BYTES {
        return reject(
            client,
            400,
            "malformed_event_id",
            (None, None, Some(payload)),
        );
    }

    let delivery = Delivery {
        provider: provider_name,
        event_id: &event_id,
        event_type: &event_type,
        payload,
        raw_body: Some(body),
        signature,
        headers: Some(headers),
        lease,
    };
    let outcome = claim::claim(client, &delivery)?;
    let http_status = match outcome.status {
        ClaimStatus::InProgress => 409,
        _ => 200,
    };
    Ok(Answer {
        outcome,
        http_status,
        reason: "ok",
        event_id: Some(event_id),
        event_type: Some(event_type),
    })
}
