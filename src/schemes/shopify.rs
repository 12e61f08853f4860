//! Shopify: `X-Shopify-Hmac-Sha256: <base64>` over the raw body, key = the
//! app's client secret verbatim. Shopify signs no timestamp
//! (`X-Shopify-Triggered-At` is not covered by the HMAC), so replays are
//! stopped by deduplicating on `X-Shopify-Event-Id`.

use super::{Headers, Reason, Signed};
use crate::signature::{decode_base64, Algorithm};

pub fn read(headers: &Headers<'_>) -> Result<Signed, Reason> {
    let header = headers.get("X-Shopify-Hmac-Sha256")?;
    let digest = decode_base64(header, 32).ok_or(Reason::MalformedHeader)?;
    Ok(Signed {
        algorithm: Algorithm::Sha256,
        candidates: vec![digest],
        prefix: Vec::new(),
        timestamp: None,
        covered_headers: &[],
    })
}
