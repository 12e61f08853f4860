//! Telnyx (API v2): `telnyx-signature-ed25519: <base64>` and
//! `telnyx-timestamp: <unix seconds>`. Signed: the timestamp as sent, a
//! `|`, then the body, with Ed25519. Key: the account's public key as
//! Mission Control shows it, base64 of its 32 bytes. Telnyx's libraries
//! allow five minutes.

use super::keys::{self, Candidate, Method, Registered};
use super::{unix_seconds, Headers, Reason, Signed};
use crate::signature::decode_base64;

pub const SIGNATURE: &str = "telnyx-signature-ed25519";

pub fn read(headers: &Headers<'_>) -> Result<Signed, Reason> {
    let signature = decode_base64(headers.get(SIGNATURE)?, 64).ok_or(Reason::MalformedHeader)?;
    let sent = headers.get("telnyx-timestamp")?;
    let timestamp = unix_seconds(sent)?;
    Ok(Signed::new(vec![Candidate {
        method: Method::Ed25519,
        signature,
    }])
    .prefix(format!("{sent}|"))
    .at(timestamp)
    .covering(&["telnyx-timestamp"]))
}

pub fn key(secret: &str) -> Option<Registered> {
    keys::ed25519(&decode_base64(secret.trim(), 32)?).map(Registered::from)
}
