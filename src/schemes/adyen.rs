//! Adyen (standard webhooks): the signature is in the body, each
//! notification item's `additionalData.hmacSignature`, the base64
//! HMAC-SHA256 of eight of its fields joined by ':' (pspReference,
//! originalReference, merchantAccountCode, merchantReference,
//! amount.value, amount.currency, eventCode, success; an absent one is
//! empty), keyed with the hex the Customer Area shows decoded to bytes.
//! Read as Adyen's libraries read it: a number as its digits, a boolean
//! as `true` or `false`.
//!
//! Adyen sends one item a request; a request of more is refused as
//! malformed, since each item is signed alone and one verified item
//! would vouch for nothing of the others. The fields are joined without
//! escaping, so a ':' moved between two of them signs alike: the catalog
//! says the body is not vouched for (`fields_unframed`), and the signed
//! string is bound to the body it first came with. Nothing in the string
//! is a time, and Adyen retries an item unchanged: the event's id is its
//! signature, a MAC of exactly the fields Adyen says tell one event from
//! another.

use super::{Reason, Request, Signed};
use crate::signature::{decode_base64, Algorithm};
use serde_json::Value;

/// The signed fields, in order: a path in the item.
const FIELDS: &[&[&str]] = &[
    &["pspReference"],
    &["originalReference"],
    &["merchantAccountCode"],
    &["merchantReference"],
    &["amount", "value"],
    &["amount", "currency"],
    &["eventCode"],
    &["success"],
];

pub fn read(request: &Request<'_, '_>) -> Result<Signed, Reason> {
    let notification: Value =
        serde_json::from_slice(request.body).map_err(|_| Reason::MalformedHeader)?;
    let items = notification
        .get("notificationItems")
        .ok_or(Reason::MissingHeader)?
        .as_array()
        .ok_or(Reason::MalformedHeader)?;
    let [item] = items.as_slice() else {
        return Err(Reason::MalformedHeader);
    };
    let item = item
        .get("NotificationRequestItem")
        .ok_or(Reason::MissingHeader)?;
    if !item.is_object() {
        return Err(Reason::MalformedHeader);
    }
    let signature = item
        .get("additionalData")
        .and_then(|data| data.get("hmacSignature"))
        .ok_or(Reason::MissingHeader)?
        .as_str()
        .ok_or(Reason::MalformedHeader)?;
    let digest = decode_base64(signature, 32).ok_or(Reason::MalformedHeader)?;
    if !item.get("amount").is_some_and(Value::is_object) {
        return Err(Reason::MalformedHeader);
    }
    let mut signed = Vec::with_capacity(FIELDS.len());
    for path in FIELDS {
        let value = path.iter().try_fold(item, |at, key| at.get(key));
        signed.push(match value {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(text)) => text.clone(),
            Some(Value::Bool(b)) => b.to_string(),
            Some(Value::Number(n)) if n.is_i64() || n.is_u64() => n.to_string(),
            Some(_) => return Err(Reason::MalformedHeader),
        });
    }
    Ok(Signed::hmac(Algorithm::Sha256, vec![digest])
        .prefix(signed.join(":"))
        .without_body())
}

/// The key as the Customer Area shows it: hex, decoded to its bytes.
pub fn key(secret: &str) -> Option<Vec<u8>> {
    if secret.is_empty() {
        return None;
    }
    hex::decode(secret).ok()
}
