//! GitHub: `X-Hub-Signature-256: sha256=<hex>` over the raw body, key = the
//! webhook secret verbatim. GitHub signs no timestamp and no header: the
//! same body and signature could be resent under a fresh
//! `X-GitHub-Delivery`, so `webhook_receive` binds each signed body to the
//! delivery id it first came with and refuses it under any other.
//!
//! Only when `X-Hub-Signature-256` is absent is the legacy
//! `X-Hub-Signature: sha1=<hex>` used. HMAC-SHA1 is still unforgeable
//! without the key, but GitHub keeps it only for old integrations; prefer
//! the SHA-256 header.

use super::{Headers, Reason, Signed};
use crate::signature::{decode_hex, Algorithm};

pub fn read(headers: &Headers<'_>) -> Result<Signed, Reason> {
    let (header, label, algorithm) = if headers.has("X-Hub-Signature-256") {
        (
            headers.get("X-Hub-Signature-256")?,
            "sha256=",
            Algorithm::Sha256,
        )
    } else {
        (headers.get("X-Hub-Signature")?, "sha1=", Algorithm::Sha1)
    };
    let hex = header.strip_prefix(label).ok_or(Reason::MalformedHeader)?;
    let digest = decode_hex(hex, algorithm.digest_len()).ok_or(Reason::MalformedHeader)?;
    Ok(Signed::hmac(algorithm, vec![digest]))
}
