//! Calendly: `Calendly-Webhook-Signature: t=<unix seconds>,v1=<hex>`.
//! Signed: `<t>.<body>`, HMAC-SHA256, hex (Stripe's construction under
//! another header). Key: the webhook signing key verbatim. Calendly's own
//! example allows three minutes.

use super::{timestamp_and_signatures, Headers, Reason, Signed};
use crate::signature::Algorithm;

pub fn read(headers: &Headers<'_>) -> Result<Signed, Reason> {
    let (timestamp, candidates) =
        timestamp_and_signatures(headers.get("Calendly-Webhook-Signature")?, ',', "t", "v1")?;
    Ok(Signed::hmac(Algorithm::Sha256, candidates)
        .prefix(format!("{timestamp}."))
        .at(timestamp))
}
