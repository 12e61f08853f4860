//! Shopify: `X-Shopify-Hmac-Sha256: <base64>` over the raw body, key = the
//! app's client secret verbatim. Shopify signs no timestamp
//! (`X-Shopify-Triggered-At` is not covered by the HMAC) and no header, so
//! `webhook_receive` binds each signed body to the `X-Shopify-Event-Id` it
//! first came with and refuses it under any other.

use super::{Headers, Reason, Signed};
use crate::signature::{decode_base64, Algorithm};

pub fn read(headers: &Headers<'_>) -> Result<Signed, Reason> {
    let header = headers.get("X-Shopify-Hmac-Sha256")?;
    let digest = decode_base64(header, 32).ok_or(Reason::MalformedHeader)?;
    Ok(Signed::hmac(Algorithm::Sha256, vec![digest]))
}
