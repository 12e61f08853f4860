//! Standard Webhooks (Svix, Clerk, Resend, Supabase, and every sender
//! following the spec): `webhook-id`, `webhook-timestamp` (Unix seconds)
//! and `webhook-signature`, or the same with the `svix-` prefix. Signed:
//! `<id>.<timestamp>.<body>`. The signature header is a space-separated
//! list of `<version>,<signature>`:
//!
//! - `v1`: HMAC-SHA256, base64, keyed with a `whsec_` secret (base64 of
//!   the key, padded or not; unlike Stripe's `whsec_` secrets, these are
//!   base64);
//! - `v1a`: Ed25519, base64, checked against a `whpk_` public key (base64
//!   of the raw 32-byte key).
//!
//! Both may be in one header; each signature is tried against the keys of
//! its kind, other versions are skipped.

use super::keys::{self, Candidate, Key, Method, Registered};
use super::{unix_seconds, Headers, Reason, Signed};
use crate::signature::{decode_base64, decode_base64_any, Algorithm};

pub fn read(headers: &Headers<'_>) -> Result<Signed, Reason> {
    // One family, chosen by its signature header; the id and timestamp
    // are read from the same family, and only they are covered. A request
    // may carry both families only as one: Svix's library reads `svix-*`
    // first, the Standard Webhooks library only `webhook-*`, so families
    // that differ would be judged two ways; such a request is malformed.
    let both = headers.has("webhook-signature") && headers.has("svix-signature");
    if both {
        for name in ["id", "timestamp", "signature"] {
            if headers.get(&format!("webhook-{name}"))? != headers.get(&format!("svix-{name}"))? {
                return Err(Reason::MalformedHeader);
            }
        }
    }
    let (prefix, covered): (&str, &'static [&'static str]) = if both {
        ("webhook-", STANDARD_AND_SVIX)
    } else if headers.has("webhook-signature") || !headers.has("svix-signature") {
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
    let mut saw_known_version = false;
    let mut candidates = Vec::new();
    for entry in signature.split_ascii_whitespace() {
        let (method, len, encoded) = if let Some(sig) = entry.strip_prefix("v1,") {
            (Method::Hmac(Algorithm::Sha256), 32, sig)
        } else if let Some(sig) = entry.strip_prefix("v1a,") {
            (Method::Ed25519, 64, sig)
        } else {
            continue;
        };
        saw_known_version = true;
        candidates
            .extend(decode_base64(encoded, len).map(|signature| Candidate { method, signature }));
    }
    if !saw_known_version || candidates.is_empty() {
        return Err(Reason::MalformedHeader);
    }
    Ok(Signed::new(candidates)
        .prefix(format!("{id}.{timestamp}."))
        .at(timestamp)
        .covering(covered))
}

/// What a request carrying both families, as one, is covered for.
const STANDARD_AND_SVIX: &[&str] = &[
    "webhook-id",
    "webhook-timestamp",
    "svix-id",
    "svix-timestamp",
];

pub fn key(secret: &str) -> Option<Registered> {
    if let Some(public) = secret.strip_prefix("whpk_") {
        return keys::ed25519(&decode_base64_any(public)?).map(Registered::from);
    }
    // Only in its whsec_ form: a bare base64 key could be a public key
    // pasted without its whpk_, and an HMAC keyed with a public key is a
    // signature anyone can make.
    // Supabase's dashboard shows the secret with its version in front
    // (v1,whsec_…), as its hooks are configured; the key is the same.
    let encoded = secret
        .strip_prefix("v1,")
        .unwrap_or(secret)
        .strip_prefix("whsec_")?;
    decode_base64_any(encoded)
        .filter(|k| !k.is_empty())
        .map(|k| Key::Hmac(k).into())
}
