//! Linear: `Linear-Signature: <hex>`, HMAC-SHA256 of the raw body, keyed
//! with the webhook's signing secret verbatim. The signing time is in the
//! signed body, `webhookTimestamp`, in milliseconds; Linear asks receivers
//! to refuse one more than a minute away. A body without it is reported as
//! a malformed header, as a scheme with a missing timestamp header is.

use super::{Reason, Request, Signed};
use crate::signature::{decode_signature_hex, Algorithm};

pub fn read(request: &Request<'_, '_>) -> Result<Signed, Reason> {
    let digest = decode_signature_hex(request.headers.get("Linear-Signature")?, 32)
        .ok_or(Reason::MalformedHeader)?;
    let body: serde_json::Value =
        serde_json::from_slice(request.body).map_err(|_| Reason::MalformedHeader)?;
    let millis = body
        .get("webhookTimestamp")
        .and_then(|ts| ts.as_i64())
        .filter(|ts| *ts >= 0)
        .ok_or(Reason::MalformedHeader)?;
    Ok(Signed::hmac(Algorithm::Sha256, vec![digest]).at(millis / 1000))
}
