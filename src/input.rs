//! Validation of the arguments every entry point shares.
//!
//! Checks run before anything is written, so a rejected call leaves no row
//! behind; each failure names the argument it is about.

use crate::errors::{Result, WebhookError};
use pgrx::datum::Interval;

/// Byte limits. `event_id` follows the providers: Stripe, Paddle and GitHub
/// ids are well under 255 bytes, and the seed schema used VARCHAR(255).
pub const MAX_PROVIDER_BYTES: usize = 64;
pub const MAX_EVENT_ID_BYTES: usize = 255;
pub const MAX_EVENT_TYPE_BYTES: usize = 255;
pub const MAX_SIGNATURE_BYTES: usize = 8192;

/// A required, non-empty, bounded text argument.
pub fn required_text<'a>(
    function: &'static str,
    arg: &'static str,
    value: Option<&'a str>,
    limit: usize,
) -> Result<&'a str> {
    let value = value.ok_or(WebhookError::NullArgument { function, arg })?;
    if value.is_empty() {
        return Err(WebhookError::EmptyArgument { function, arg });
    }
    if value.len() > limit {
        return Err(WebhookError::ArgumentTooLong {
            function,
            arg,
            limit,
            actual: value.len(),
        });
    }
    Ok(value)
}

/// An optional, bounded text argument (NULL allowed, length checked).
pub fn optional_text<'a>(
    function: &'static str,
    arg: &'static str,
    value: Option<&'a str>,
    limit: usize,
) -> Result<Option<&'a str>> {
    match value {
        Some(v) if v.len() > limit => Err(WebhookError::ArgumentTooLong {
            function,
            arg,
            limit,
            actual: v.len(),
        }),
        other => Ok(other),
    }
}

/// Longest URL accepted: far past any webhook endpoint's.
pub const MAX_URL_BYTES: usize = 8192;

/// The public URL a provider called (NULL allowed): absolute `http://` or
/// `https://`, bounded, no whitespace or control characters (a URL as sent
/// on the wire has none).
pub fn url<'a>(
    function: &'static str,
    arg: &'static str,
    value: Option<&'a str>,
) -> Result<Option<&'a str>> {
    let Some(url) = optional_text(function, arg, value, MAX_URL_BYTES)? else {
        return Ok(None);
    };
    let scheme_ok = ["http://", "https://"].iter().any(|scheme| {
        url.get(..scheme.len())
            .is_some_and(|s| s.eq_ignore_ascii_case(scheme))
            && url.len() > scheme.len()
    });
    if !scheme_ok || url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(WebhookError::InvalidArgument {
            function,
            arg,
            rule:
                "must be the absolute http:// or https:// URL the provider called, as it called it",
        });
    }
    Ok(Some(url))
}

pub fn required<T>(function: &'static str, arg: &'static str, value: Option<T>) -> Result<T> {
    value.ok_or(WebhookError::NullArgument { function, arg })
}

/// A lease length: positive and at most `webhook.max_lease`, or the
/// caller's mistake is caught before any row is written. NULL means "use
/// the `webhook.lease_timeout` setting" (itself cut to the ceiling).
pub fn lease(
    function: &'static str,
    arg: &'static str,
    value: Option<Interval>,
) -> Result<Interval> {
    match value {
        None => Ok(crate::gucs::default_lease()),
        Some(iv) if iv.as_micros() <= 0 => Err(WebhookError::NonPositiveInterval { function, arg }),
        Some(iv) if iv.as_micros() > i128::from(crate::gucs::max_lease_micros()) => {
            Err(WebhookError::LeaseTooLong {
                function,
                arg,
                limit_seconds: crate::gucs::MAX_LEASE.get(),
            })
        }
        Some(iv) => Ok(iv),
    }
}

/// `text` cut to at most `limit` bytes on a character boundary, with a
/// marker saying how much was dropped: for messages kept forever.
pub fn truncated(text: &str, limit: usize) -> std::borrow::Cow<'_, str> {
    if text.len() <= limit {
        return text.into();
    }
    // Room for "… [<up to 20 digits> bytes cut]".
    const MARKER: usize = 40;
    let mut end = limit.saturating_sub(MARKER);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… [{} bytes cut]", &text[..end], text.len() - end).into()
}

/// A payload within `webhook.max_payload_size`, checked before any parsing.
pub fn payload_size(function: &'static str, arg: &'static str, actual: usize) -> Result<()> {
    let limit = crate::gucs::max_payload_bytes();
    if actual > limit {
        return Err(WebhookError::PayloadTooLarge {
            function,
            arg,
            limit,
            actual,
        });
    }
    Ok(())
}

/// Raw webhook body → the text PostgreSQL will parse as jsonb, and the
/// parsed document (for reading the event id and type out of it).
///
/// The body must be UTF-8 JSON whose top level is an object: every provider
/// sends an object, and anything else is a misrouted or forged request.
pub fn json_object_body<'a>(
    function: &'static str,
    arg: &'static str,
    body: &'a [u8],
) -> Result<(&'a str, serde_json::Value)> {
    json_body(function, arg, body, false)
}

/// `json_object_body`, or an array too when `batch` (providers that send
/// a batch of events per request).
pub fn json_body<'a>(
    function: &'static str,
    arg: &'static str,
    body: &'a [u8],
    batch: bool,
) -> Result<(&'a str, serde_json::Value)> {
    let text = std::str::from_utf8(body).map_err(|e| WebhookError::InvalidUtf8 {
        function,
        arg,
        detail: format!("Invalid byte sequence at byte offset {}.", e.valid_up_to()),
    })?;
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| WebhookError::InvalidJson {
            function,
            arg,
            detail: format!("{e}."),
        })?;
    if !(value.is_object() || batch && value.as_array().is_some_and(|a| !a.is_empty())) {
        return Err(WebhookError::NotAnObject {
            function,
            arg,
            found: json_kind(&value),
        });
    }
    if holds_nul(&value) {
        // Valid JSON that jsonb refuses: caught here, so that it is a
        // refusal naming the argument (and a 400 from webhook_receive)
        // rather than an error from deep inside jsonb_in.
        return Err(WebhookError::InvalidJson {
            function,
            arg,
            detail: "It contains the escape \\u0000, which PostgreSQL's jsonb cannot store.".into(),
        });
    }
    Ok((text, value))
}

/// Let a loop over untrusted input be stopped by `statement_timeout` or
/// `pg_cancel_backend` (a no-op in plain unit tests, which have no server).
#[inline]
pub fn check_for_interrupts() {
    #[cfg(not(test))]
    pgrx::check_for_interrupts!();
}

/// Does any string or key of the document hold U+0000?
fn holds_nul(value: &serde_json::Value) -> bool {
    check_for_interrupts();
    match value {
        serde_json::Value::String(s) => s.contains('\0'),
        serde_json::Value::Array(items) => items.iter().any(holds_nul),
        serde_json::Value::Object(fields) => fields
            .iter()
            .any(|(key, v)| key.contains('\0') || holds_nul(v)),
        _ => false,
    }
}

pub fn json_kind(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}
