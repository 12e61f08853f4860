//! Discord (interactions and webhook events): `X-Signature-Ed25519: <hex>`
//! and `X-Signature-Timestamp: <unix seconds>`. Signed: the timestamp as
//! sent, then the body, with Ed25519. Key: the application's public key,
//! 64 hex digits, as the developer portal shows it.

use super::keys::{self, Candidate, Method, Registered};
use super::{unix_seconds, Headers, Reason, Signed};
use crate::signature::decode_hex;

pub fn read(headers: &Headers<'_>) -> Result<Signed, Reason> {
    let signature =
        decode_hex(headers.get("X-Signature-Ed25519")?, 64).ok_or(Reason::MalformedHeader)?;
    let sent = headers.get("X-Signature-Timestamp")?;
    let timestamp = unix_seconds(sent)?;
    Ok(Signed::new(vec![Candidate {
        method: Method::Ed25519,
        signature,
    }])
    .prefix(sent)
    .at(timestamp)
    .covering(&["x-signature-timestamp"]))
}

pub fn key(secret: &str) -> Option<Registered> {
    keys::ed25519(&decode_hex(secret.trim(), 32)?).map(Registered::from)
}
