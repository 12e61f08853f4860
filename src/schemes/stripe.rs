//! Stripe: `Stripe-Signature: t=<unix seconds>,v1=<hex>[,v1=<hex>…][,v0=…]`.
//! Signed: `<t>.<body>`, HMAC-SHA256, hex. Key: the endpoint secret
//! (`whsec_…`) used verbatim, prefix included — it is not base64.
//! Every `v1` is tried (Stripe sends one per active secret while rolling);
//! `v0` (test-mode legacy) is ignored, as Stripe's SDKs do.

use super::{timestamp_and_signatures, Headers, Reason, Signed};
use crate::signature::Algorithm;

pub fn read(headers: &Headers<'_>) -> Result<Signed, Reason> {
    let (timestamp, candidates) =
        timestamp_and_signatures(headers.get("Stripe-Signature")?, ',', "t", "v1")?;
    Ok(Signed::hmac(Algorithm::Sha256, candidates)
        .prefix(format!("{timestamp}."))
        .at(timestamp))
}
