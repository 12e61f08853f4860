//! Paddle Billing: `Paddle-Signature: ts=<unix seconds>;h1=<hex>[;h1=<hex>…]`.
//! Signed: `<ts>:<body>`, HMAC-SHA256, hex. Key: the notification
//! destination's secret key (`pdl_ntfset_…`) verbatim. Paddle sends one
//! `h1` per active secret while rotating; each is tried.
//!
//! Paddle's SDKs allow only 5 seconds of clock skew by default, which
//! rejects legitimate deliveries that queued a little; the tolerance here
//! is the caller's, 5 minutes by default.

use super::{unix_seconds, Headers, Reason, Signed};
use crate::signature::{decode_hex, Algorithm};

pub fn read(headers: &Headers<'_>) -> Result<Signed, Reason> {
    let header = headers.get("Paddle-Signature")?;
    let mut timestamp = None;
    let mut candidates = Vec::new();
    let mut saw_h1 = false;
    for item in header.split(';') {
        let Some((key, value)) = item.trim().split_once('=') else { continue };
        match key {
            "ts" => timestamp = Some(unix_seconds(value)?),
            "h1" => {
                saw_h1 = true;
                candidates.extend(decode_hex(value, 32));
            }
            _ => {}
        }
    }
    let timestamp = timestamp.ok_or(Reason::MalformedHeader)?;
    if !saw_h1 || candidates.is_empty() {
        return Err(Reason::MalformedHeader);
    }
    Ok(Signed {
        algorithm: Algorithm::Sha256,
        candidates,
        prefix: format!("{timestamp}:").into_bytes(),
        timestamp: Some(timestamp),
    })
}
