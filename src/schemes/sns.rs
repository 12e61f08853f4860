//! Amazon SNS (HTTP/S subscriptions). The signature is in the body: a
//! JSON message whose `Signature` (base64) is RSA over a canonical string
//! of its fields, each written `Name\nvalue\n` in a fixed order: for a
//! `Notification`, Message, MessageId, Subject (when there is one),
//! Timestamp, TopicArn, Type; for a `SubscriptionConfirmation` or an
//! `UnsubscribeConfirmation`, Message, MessageId, SubscribeURL, Timestamp,
//! Token, TopicArn, Type. `SigningCertURL` names the certificate; the
//! database fetches nothing: the DBA registers it under that URL, as
//! PayPal's (`keys::certificate_under_url`).
//!
//! `SignatureVersion` 2 (SHA256withRSA) only. Version 1 signs a SHA-1
//! digest, which AWS itself recommends leaving: a topic still on it is
//! set to 2 with one call (docs/providers.md), and its deliveries are
//! refused as malformed until then.
//!
//! SNS retries a message unchanged, signature and all, for as long as
//! its delivery policy says (hours), so no timestamp window applies: the
//! message id deduplicates. Fields outside the canonical string
//! (UnsubscribeURL, MessageAttributes, anything added) are not signed: the
//! catalog says the body is not vouched for, and the signed string is
//! bound to the body it first came with.

use super::keys::{Candidate, Method};
use super::{Reason, Request, Signed};
use crate::signature::decode_base64_any;
use serde_json::Value;

/// An RSA-4096 signature is 512 bytes, 684 base64 characters.
const MAX_SIGNATURE_CHARS: usize = 700;

const NOTIFICATION: &[&str] = &[
    "Message",
    "MessageId",
    "Subject",
    "Timestamp",
    "TopicArn",
    "Type",
];
const CONFIRMATION: &[&str] = &[
    "Message",
    "MessageId",
    "SubscribeURL",
    "Timestamp",
    "Token",
    "TopicArn",
    "Type",
];

pub fn read(request: &Request<'_, '_>) -> Result<Signed, Reason> {
    let message: Value =
        serde_json::from_slice(request.body).map_err(|_| Reason::MalformedHeader)?;
    let fields = message.as_object().ok_or(Reason::MissingHeader)?;
    // A field the message must have, as a string. Subject alone may be
    // absent (or null, as some SDKs write a notification without one).
    let field = |name: &str| match fields.get(name) {
        None => Err(Reason::MissingHeader),
        Some(Value::String(text)) => Ok(text.as_str()),
        Some(_) => Err(Reason::MalformedHeader),
    };
    let names = match field("Type")? {
        "Notification" => NOTIFICATION,
        "SubscriptionConfirmation" | "UnsubscribeConfirmation" => CONFIRMATION,
        _ => return Err(Reason::MalformedHeader),
    };
    if field("SignatureVersion")? != "2" {
        return Err(Reason::MalformedHeader);
    }
    let encoded = field("Signature")?;
    let certificate = field("SigningCertURL")?;
    if encoded.len() > MAX_SIGNATURE_CHARS || certificate.is_empty() {
        return Err(Reason::MalformedHeader);
    }
    let signature = decode_base64_any(encoded)
        .filter(|sig| !sig.is_empty())
        .ok_or(Reason::MalformedHeader)?;
    let mut canonical = String::new();
    for name in names {
        if *name == "Subject" && fields.get("Subject").is_none_or(Value::is_null) {
            continue;
        }
        canonical.push_str(name);
        canonical.push('\n');
        canonical.push_str(field(name)?);
        canonical.push('\n');
    }
    let mut signed = Signed::new(vec![Candidate {
        method: Method::RsaSha256,
        signature,
    }])
    .prefix(canonical)
    .without_body();
    signed.key_name = Some(certificate.to_string());
    Ok(signed)
}
