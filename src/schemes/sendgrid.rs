//! SendGrid's signed Event Webhook: `X-Twilio-Email-Event-Webhook-Signature`
//! (base64 of a DER ECDSA signature) and
//! `X-Twilio-Email-Event-Webhook-Timestamp` (Unix seconds). Signed: the
//! timestamp as sent, then the body, with ECDSA P-256 and SHA-256. Key: the
//! verification key SendGrid shows once signing is on (base64 of a DER
//! public key), or the same in PEM.
//!
//! The body is a JSON array of events, one `sg_event_id` each.

use super::keys::{Candidate, Method};
use super::{unix_seconds, Headers, Reason, Signed};
use crate::signature::decode_base64_any;

pub const SIGNATURE: &str = "X-Twilio-Email-Event-Webhook-Signature";
const TIMESTAMP: &str = "X-Twilio-Email-Event-Webhook-Timestamp";

/// A DER P-256 signature is at most 72 bytes, 96 base64 characters.
const MAX_SIGNATURE_CHARS: usize = 96;

pub fn read(headers: &Headers<'_>) -> Result<Signed, Reason> {
    let encoded = headers.get(SIGNATURE)?;
    let sent = headers.get(TIMESTAMP)?;
    let timestamp = unix_seconds(sent)?;
    if encoded.len() > MAX_SIGNATURE_CHARS {
        return Err(Reason::MalformedHeader);
    }
    let signature = decode_base64_any(encoded)
        .filter(|der| der.len() >= 8)
        .ok_or(Reason::MalformedHeader)?;
    Ok(Signed::new(vec![Candidate {
        method: Method::EcdsaP256,
        signature,
    }])
    .prefix(sent)
    .at(timestamp)
    .covering(&["x-twilio-email-event-webhook-timestamp"]))
}
