//! Request headers as they are archived: the values of the headers named
//! in `webhook.redact_headers`, and of the one whose value is the secret
//! (a shared token's), replaced; none at all past
//! `MAX_ARCHIVED_HEADER_BYTES`.

use super::FUNCTION;
use crate::errors::Result;
use crate::jsonb::{self, RawJsonb};

/// Request headers are archived only up to this size (a real request's
/// headers are a few kilobytes); beyond it the row keeps none.
const MAX_ARCHIVED_HEADER_BYTES: usize = 64 * 1024;

/// `raw` as archived; `json`: the same headers, parsed; `secret`: the
/// header the scheme reads the secret itself from, if any.
pub fn archived(
    raw: RawJsonb,
    json: &serde_json::Value,
    secret: Option<&str>,
) -> Result<Option<RawJsonb>> {
    if raw.size() > MAX_ARCHIVED_HEADER_BYTES {
        return Ok(None);
    }
    let Some(object) = json.as_object() else {
        return Ok(Some(raw));
    };
    let redact = crate::gucs::redacted_headers();
    let is_secret = |name: &str| {
        redact.iter().any(|r| r.eq_ignore_ascii_case(name))
            || secret.is_some_and(|s| s.eq_ignore_ascii_case(name))
    };
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
