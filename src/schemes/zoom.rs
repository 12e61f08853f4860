//! Zoom: `x-zm-signature: v0=<hex>` and `x-zm-request-timestamp: <unix
//! seconds>`. Signed: `v0:<timestamp>:<body>`, HMAC-SHA256, hex. Key: the
//! app's secret token verbatim. Its endpoint check (`endpoint.url_validation`)
//! is answered by `handshake`.

use super::{unix_seconds, Headers, Reason, Signed};
use crate::signature::{decode_signature_hex, Algorithm};

pub fn read(headers: &Headers<'_>) -> Result<Signed, Reason> {
    let hex = headers
        .get("x-zm-signature")?
        .strip_prefix("v0=")
        .ok_or(Reason::MalformedHeader)?;
    let timestamp = unix_seconds(headers.get("x-zm-request-timestamp")?)?;
    let digest = decode_signature_hex(hex, 32).ok_or(Reason::MalformedHeader)?;
    Ok(Signed::hmac(Algorithm::Sha256, vec![digest])
        .prefix(format!("v0:{timestamp}:"))
        .at(timestamp)
        .covering(&["x-zm-request-timestamp"]))
}
