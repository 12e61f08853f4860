//! Shopify: `X-Shopify-Hmac-Sha256: <base64>` over the raw body, key = the
//! app's client secret verbatim. Events deliveries (Shopify's newer
//! subscriptions) send the same HMAC as `Shopify-Hmac-Sha256`, their
//! headers without the `X-`. Shopify signs no timestamp
//! (`X-Shopify-Triggered-At` is not covered by the HMAC) and no header, so
//! `webhook_receive` binds each signed body to the event id it first came
//! with and refuses it under any other.

use super::{Headers, Reason, Signed};
use crate::signature::{decode_base64, Algorithm};

/// Webhooks' header, then Events'.
pub const SIGNATURES: [&str; 2] = ["X-Shopify-Hmac-Sha256", "Shopify-Hmac-Sha256"];

pub fn read(headers: &Headers<'_>) -> Result<Signed, Reason> {
    let name = SIGNATURES
        .into_iter()
        .find(|name| headers.has(name))
        .unwrap_or(SIGNATURES[0]);
    let digest = decode_base64(headers.get(name)?, 32).ok_or(Reason::MalformedHeader)?;
    Ok(Signed::hmac(Algorithm::Sha256, vec![digest]))
}
