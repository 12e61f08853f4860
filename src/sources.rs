//! Where a delivery's event id and type come from, and whether its
//! signature covers them.
//!
//! The event id decides deduplication, so it is taken from what the
//! signature covers whenever the provider puts it there: a signed source
//! always wins over an unsigned one. Where it is not signed, `bindings`
//! ties the delivery's signed bytes to it.
//!
//! Read alike by `receive`, which takes the delivery, and by `route`,
//! which computes where an intake tier sends it without verifying it.

use crate::input;
use crate::jsonb;
use crate::schemes::{catalog::Body, Authentic, HeaderTrust, Headers, Scheme};
use std::borrow::Cow;

/// What a body too malformed to read is reported as.
const FUNCTION: &str = "webhook_receive";

/// A value read off a delivery, and whether its signature covers it.
pub struct Sourced {
    pub value: String,
    pub signed: bool,
}

/// Where a provider puts a value: `header:<name>` or `body:<dotted.path>`,
/// alternatives separated by `|`. The first present *signed* alternative
/// wins; only if none is present, the first present unsigned one. What is
/// signed is what the delivery's signature covers (`authentic`): the body
/// only where the scheme vouches for it by a digest, a header only if this
/// delivery's signature covers it. A header the scheme signs in another
/// family than the one verified is not read at all: a relay added it.
/// Strings are taken as they are, numbers in their exact JSON digits.
pub fn extract(
    source: &str,
    headers: &Headers<'_>,
    authentic: &Authentic,
    body: &serde_json::Value,
) -> Option<Sourced> {
    let read = |alternative: &str| -> Option<Sourced> {
        let (kind, path) = alternative.split_once(':')?;
        match kind {
            "header" => {
                let signed = match authentic.header(path) {
                    HeaderTrust::Signed => true,
                    HeaderTrust::Unsigned => false,
                    HeaderTrust::Foreign => return None,
                };
                headers
                    .get(path)
                    .ok()
                    .filter(|v| !v.is_empty())
                    .map(|v| Sourced {
                        value: v.to_string(),
                        signed,
                    })
            }
            "body" => jsonb::body_value(body, path).map(|value| Sourced {
                value,
                signed: authentic.body_vouched(),
            }),
            _ => None,
        }
    };
    let found: Vec<Sourced> = source.split('|').filter_map(read).collect();
    let first_signed = found.iter().position(|s| s.signed);
    found.into_iter().nth(first_signed.unwrap_or(0))
}

/// The body as the scheme's provider sends it, as JSON text and document:
/// one event (an object), a batch (an array), form fields (stored as an
/// object of strings), or the JSON object a form carries as its one
/// `payload` field. None: not what the provider sends.
pub fn document<'b>(scheme: &Scheme, body: &'b [u8]) -> Option<(Cow<'b, str>, serde_json::Value)> {
    let kind = scheme.body();
    if let Ok((text, value)) = input::json_body(FUNCTION, "body", body, kind == Body::Batch) {
        return Some((text.into(), value));
    }
    let fields = match kind {
        Body::Form => form(body)?,
        Body::FormOrPayload => {
            let fields = form(body)?;
            match fields
                .as_object()
                .and_then(|f| f.get("payload").filter(|_| f.len() == 1))
            {
                Some(serde_json::Value::String(payload)) => {
                    let (text, value) =
                        input::json_body(FUNCTION, "body", payload.as_bytes(), false).ok()?;
                    return Some((text.to_string().into(), value));
                }
                _ => fields,
            }
        }
        Body::Event | Body::Batch => return None,
    };
    Some((fields.to_string().into(), fields))
}

/// Form fields as a JSON object of strings; None where a name or value is
/// not UTF-8 or holds a NUL, which `jsonb` cannot store.
fn form(body: &[u8]) -> Option<serde_json::Value> {
    let mut fields = serde_json::Map::new();
    for (name, value) in crate::schemes::form_fields(body) {
        let name = String::from_utf8(name).ok()?;
        let value = String::from_utf8(value).ok()?;
        if name.contains('\0') || value.contains('\0') {
            return None;
        }
        fields.insert(name, serde_json::Value::String(value));
    }
    Some(serde_json::Value::Object(fields))
}
