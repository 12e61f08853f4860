//! Stripe: `Stripe-Signature: t=<unix seconds>,v1=<hex>[,v1=<hex>…][,v0=…]`.
//! Signed: `<t>.<body>`, HMAC-SHA256, hex. Key: the endpoint secret
//! (`whsec_…`) used verbatim, prefix included — it is not base64.
//! Every `v1` is tried (Stripe sends one per active secret while rolling);
//! `v0` (test-mode legacy) is ignored, as Stripe's SDKs do.

use super::{unix_seconds, Headers, Reason, Signed};
use crate::signature::{decode_hex, Algorithm};

pub fn read(headers: &Headers<'_>) -> Result<Signed, Reason> {
    let header = headers.get("Stripe-Signature")?;
    let mut timestamp = None;
    let mut candidates = Vec::new();
    let mut saw_v1 = false;
    for item in header.split(',') {
        let Some((key, value)) = item.trim().split_once('=') else { continue };
        match key {
            "t" => timestamp = Some(unix_seconds(value)?),
            "v1" => {
                saw_v1 = true;
                candidates.extend(decode_hex(value, 32));
            }
            _ => {}
        }
    }
    let timestamp = timestamp.ok_or(Reason::MalformedHeader)?;
    if !saw_v1 || candidates.is_empty() {
        return Err(Reason::MalformedHeader);
    }
    Ok(Signed {
        algorithm: Algorithm::Sha256,
        candidates,
        prefix: format!("{timestamp}.").into_bytes(),
        timestamp: Some(timestamp),
    })
}
