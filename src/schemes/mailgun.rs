//! Mailgun: the signature is in the body, not a header:
//! `{"signature": {"timestamp": "…", "token": "…", "signature": "<hex>"},
//! "event-data": {…}}`. Signed: the timestamp then the token,
//! HMAC-SHA256, hex, keyed with the HTTP webhook signing key verbatim. A
//! missing or unreadable signature object is reported as a missing or
//! malformed header.
//!
//! The signature covers the timestamp and token only, not the event: the
//! signed bytes are bound to the event id at first sight (Mailgun's own
//! advice is to refuse a token seen before), so a captured signature
//! cannot carry another event.

use super::{unix_seconds, Reason, Request, Signed};
use crate::signature::{decode_signature_hex, Algorithm};

pub fn read(request: &Request<'_, '_>) -> Result<Signed, Reason> {
    let body: serde_json::Value =
        serde_json::from_slice(request.body).map_err(|_| Reason::MalformedHeader)?;
    let object = body.get("signature").ok_or(Reason::MissingHeader)?;
    let field = |name: &str| -> Result<&str, Reason> {
        object
            .get(name)
            .ok_or(Reason::MissingHeader)?
            .as_str()
            .ok_or(Reason::MalformedHeader)
    };
    let sent = field("timestamp")?;
    let timestamp = unix_seconds(sent)?;
    let token = field("token")?;
    if token.is_empty() || token.len() > 256 {
        return Err(Reason::MalformedHeader);
    }
    let digest = decode_signature_hex(field("signature")?, 32).ok_or(Reason::MalformedHeader)?;
    Ok(Signed::hmac(Algorithm::Sha256, vec![digest])
        .prefix(format!("{sent}{token}"))
        .without_body()
        .at(timestamp))
}
