//! GitHub: `X-Hub-Signature-256: sha256=<hex>` over the raw body, key = the
//! webhook secret verbatim. GitHub signs no timestamp and no header: the
//! same body and signature could be resent under a fresh
//! `X-GitHub-Delivery`, so `webhook_receive` binds each signed body to the
//! delivery id it first came with and refuses it under any other.
//!
//! The legacy `X-Hub-Signature: sha1=<hex>` that GitHub still sends beside
//! it is not read, as GitHub's own library (`@octokit/webhooks-methods`)
//! reads only the SHA-256 header: a request carrying only the SHA-1 one is
//! refused as `missing_header`. Every GitHub.com and supported GitHub
//! Enterprise Server delivery carries `X-Hub-Signature-256` (since GHES
//! 3.0); an older server that signs with SHA-1 alone is registered as the
//! generic `hmac;header=X-Hub-Signature;algorithm=sha1;prefix=sha1=`
//! (docs/reference.md, "GitHub").

use super::{Headers, Reason, Signed};
use crate::signature::{decode_signature_hex, Algorithm};

pub fn read(headers: &Headers<'_>) -> Result<Signed, Reason> {
    let hex = headers
        .get("X-Hub-Signature-256")?
        .strip_prefix("sha256=")
        .ok_or(Reason::MalformedHeader)?;
    let digest = decode_signature_hex(hex, 32).ok_or(Reason::MalformedHeader)?;
    Ok(Signed::hmac(Algorithm::Sha256, vec![digest]))
}
