//! Slack: `X-Slack-Signature: v0=<hex>` and `X-Slack-Request-Timestamp:
//! <unix seconds>`. Signed: `v0:<timestamp>:<body>`, HMAC-SHA256, hex.
//! Key: the app's signing secret verbatim.

use super::{unix_seconds, Headers, Reason, Signed};
use crate::signature::{decode_signature_hex, Algorithm};

pub fn read(headers: &Headers<'_>) -> Result<Signed, Reason> {
    let signature = headers.get("X-Slack-Signature")?;
    let timestamp = unix_seconds(headers.get("X-Slack-Request-Timestamp")?)?;
    let hex = signature
        .strip_prefix("v0=")
        .ok_or(Reason::MalformedHeader)?;
    let digest = decode_signature_hex(hex, 32).ok_or(Reason::MalformedHeader)?;
    Ok(Signed::hmac(Algorithm::Sha256, vec![digest])
        .prefix(format!("v0:{timestamp}:"))
        .at(timestamp)
        .covering(&["x-slack-request-timestamp"]))
}
