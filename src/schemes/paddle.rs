//! Paddle Billing: `Paddle-Signature: ts=<unix seconds>;h1=<hex>[;h1=<hex>…]`.
//! Signed: `<ts>:<body>`, HMAC-SHA256, hex. Key: the notification
//! destination's secret key (`pdl_ntfset_…`) verbatim. Paddle sends one
//! `h1` per active secret while rotating; each is tried.
//!
//! Paddle's SDKs allow only 5 seconds of clock skew by default, which
//! rejects legitimate deliveries that queued a little; the tolerance here
//! is the caller's, 5 minutes by default.

use super::{timestamp_and_signatures, Headers, Reason, Signed};
use crate::signature::Algorithm;

pub fn read(headers: &Headers<'_>) -> Result<Signed, Reason> {
    let (timestamp, candidates) =
        timestamp_and_signatures(headers.get("Paddle-Signature")?, ';', "ts", "h1")?;
    Ok(Signed::hmac(Algorithm::Sha256, candidates)
        .prefix(format!("{timestamp}:"))
        .at(timestamp))
}
