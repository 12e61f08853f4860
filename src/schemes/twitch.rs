//! Twitch EventSub: `Twitch-Eventsub-Message-Signature: sha256=<hex>`,
//! HMAC-SHA256 over the message id, the timestamp (RFC 3339, as sent) and
//! the body, concatenated. Key: the subscription's secret verbatim. Twitch
//! asks receivers to refuse messages older than 10 minutes. Its callback
//! check (`webhook_callback_verification`) is answered by `handshake`.

use super::{Headers, Reason, Signed};
use crate::signature::{decode_signature_hex, Algorithm};

pub fn read(headers: &Headers<'_>) -> Result<Signed, Reason> {
    let hex = headers
        .get("Twitch-Eventsub-Message-Signature")?
        .strip_prefix("sha256=")
        .ok_or(Reason::MalformedHeader)?;
    let id = headers.get("Twitch-Eventsub-Message-Id")?;
    let sent = headers.get("Twitch-Eventsub-Message-Timestamp")?;
    let timestamp = crate::timestamps::rfc3339_unix(sent).ok_or(Reason::MalformedHeader)?;
    if id.is_empty() {
        return Err(Reason::MalformedHeader);
    }
    let digest = decode_signature_hex(hex, 32).ok_or(Reason::MalformedHeader)?;
    Ok(Signed::hmac(Algorithm::Sha256, vec![digest])
        .prefix(format!("{id}{sent}"))
        .at(timestamp)
        .covering(&[
            "twitch-eventsub-message-id",
            "twitch-eventsub-message-timestamp",
        ]))
}
