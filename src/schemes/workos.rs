//! WorkOS: `WorkOS-Signature: t=<unix milliseconds>, v1=<hex>`. Signed:
//! `<t>.<body>` with `t` as sent, HMAC-SHA256, hex. Key: the endpoint's
//! secret verbatim. WorkOS's libraries allow three minutes.
//!
//! Read as WorkOS's Ruby library reads it: items apart by ',' with the
//! space WorkOS puts after it trimmed (ASCII whitespace only, as the
//! portable edition trims), the first `t=` and the first `v1=`; the
//! timestamp in milliseconds. Its Node library reads the first two items
//! by position instead (docs/providers.md).

use super::{Headers, Reason, Signed};
use crate::signature::{decode_signature_hex, Algorithm};

pub const SIGNATURE: &str = "WorkOS-Signature";

pub fn read(headers: &Headers<'_>) -> Result<Signed, Reason> {
    let items: Vec<&str> = headers
        .get(SIGNATURE)?
        .split(',')
        .map(|item| item.trim_matches(|c: char| c.is_ascii_whitespace()))
        .collect();
    let first = |key: &str| items.iter().find_map(|item| item.strip_prefix(key));
    let sent = first("t=").ok_or(Reason::MalformedHeader)?;
    let millis = unix_millis(sent)?;
    let signature = first("v1=").ok_or(Reason::MalformedHeader)?;
    let digest = decode_signature_hex(signature, 32).ok_or(Reason::MalformedHeader)?;
    Ok(Signed::hmac(Algorithm::Sha256, vec![digest])
        .prefix(format!("{sent}."))
        .at(millis / 1000))
}

/// Milliseconds since the epoch, digits only (at most 15: the year 33658).
fn unix_millis(text: &str) -> Result<i64, Reason> {
    if text.is_empty() || text.len() > 15 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Reason::MalformedHeader);
    }
    text.parse().map_err(|_| Reason::MalformedHeader)
}
