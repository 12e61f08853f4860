//! Zendesk: `X-Zendesk-Webhook-Signature: <base64>` and
//! `X-Zendesk-Webhook-Signature-Timestamp: <RFC 3339>`. Signed: the
//! timestamp as sent, then the body, with nothing between; HMAC-SHA256.
//! Key: the webhook's signing secret verbatim. Zendesk names no window;
//! the catalog's is five minutes.

use super::{Headers, Reason, Signed};
use crate::signature::{decode_base64, Algorithm};

pub const SIGNATURE: &str = "X-Zendesk-Webhook-Signature";
const TIMESTAMP: &str = "X-Zendesk-Webhook-Signature-Timestamp";

pub fn read(headers: &Headers<'_>) -> Result<Signed, Reason> {
    let digest = decode_base64(headers.get(SIGNATURE)?, 32).ok_or(Reason::MalformedHeader)?;
    let sent = headers.get(TIMESTAMP)?;
    let timestamp = crate::timestamps::rfc3339_unix(sent).ok_or(Reason::MalformedHeader)?;
    Ok(Signed::hmac(Algorithm::Sha256, vec![digest])
        .prefix(sent)
        .at(timestamp)
        .covering(&["x-zendesk-webhook-signature-timestamp"]))
}
