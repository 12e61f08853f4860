//! Standard Webhooks (Svix, Clerk, and every sender following the spec):
//! `webhook-id`, `webhook-timestamp` (Unix seconds) and `webhook-signature`,
//! or the same with the `svix-` prefix. Signed: `<id>.<timestamp>.<body>`,
//! HMAC-SHA256, base64. The signature header is a space-separated list of
//! `<version>,<signature>`; every `v1` is tried, other versions (such as
//! the asymmetric `v1a`) are skipped.
//!
//! Key: the secret without its `whsec_` prefix, base64-decoded (padded or
//! not). Unlike Stripe's `whsec_` secrets, these are base64.

use super::{unix_seconds, Headers, Reason, Signed};
use crate::signature::{decode_base64, decode_base64_any, Algorithm};

pub fn read(headers: &Headers<'_>) -> Result<Signed, Reason> {
    // One family, chosen by its signature header; the id and timestamp
    // are read from the same family, and only they are covered.
    let (prefix, covered): (&str, &'static [&'static str]) =
        if headers.has("webhook-signature") || !headers.has("svix-signature") {
            ("webhook-", &["webhook-id", "webhook-timestamp"])
        } else {
            ("svix-", &["svix-id", "svix-timestamp"])
        };
    let get = |name: &str| headers.get(&format!("{prefix}{name}"));
    let signature = get("signature")?;
    let id = get("id")?;
    let timestamp = unix_seconds(get("timestamp")?)?;
    if id.is_empty() {
        return Err(Reason::MalformedHeader);
    }
    let mut saw_v1 = false;
    let mut candidates = Vec::new();
    for entry in signature.split_ascii_whitespace() {
        if let Some(sig) = entry.strip_prefix("v1,") {
            saw_v1 = true;
            candidates.extend(decode_base64(sig, 32));
        }
    }
    if !saw_v1 || candidates.is_empty() {
        return Err(Reason::MalformedHeader);
    }
    Ok(Signed {
        algorithm: Algorithm::Sha256,
        candidates,
        prefix: format!("{id}.{timestamp}.").into_bytes(),
        timestamp: Some(timestamp),
        covered_headers: covered,
    })
}

pub fn key(secret: &str) -> Option<Vec<u8>> {
    let encoded = secret.strip_prefix("whsec_").unwrap_or(secret);
    decode_base64_any(encoded).filter(|k| !k.is_empty())
}
