//! PayPal: RSA-SHA256 (`PAYPAL-AUTH-ALGO: SHA256withRSA`) over
//! `<transmission id>|<transmission time>|<webhook id>|<CRC32 of the body>`,
//! the CRC in decimal; the signature, base64, in `PAYPAL-TRANSMISSION-SIG`.
//! The webhook id is the DBA's, registered in the scheme itself:
//! `paypal;webhook_id=WH-…`.
//!
//! PayPal names its signing certificate in `PAYPAL-CERT-URL`, which the
//! database does not fetch: the DBA registers the certificate as a secret,
//! written as the URL on its first line and the PEM after it. A delivery
//! naming a URL that no registered certificate has is `unknown_certificate`.
//!
//! The body is covered only through its CRC32, which is not a
//! cryptographic digest: the signed bytes are bound to the event id the
//! first time they are seen (the event id is treated as unsigned), so a
//! body forged to the same CRC cannot be replayed as another event.

use super::keys::{Candidate, Method};
use super::{Headers, Reason, Request, Scheme, Signed};
use crate::errors::WebhookError;
use crate::signature::decode_base64_any;

/// An RSA-4096 signature is 512 bytes, 684 base64 characters.
const MAX_SIGNATURE_CHARS: usize = 700;

/// `paypal;webhook_id=<id>`.
pub fn parse(
    function: &'static str,
    arg: &'static str,
    spec: &str,
) -> Result<Scheme, WebhookError> {
    let bad = |detail: String| WebhookError::BadSchemeOption {
        function,
        arg,
        given: spec.to_string(),
        detail,
    };
    let mut webhook_id = None;
    for option in spec.split(';').skip(1) {
        match option.split_once('=') {
            Some((key, value)) if key.trim().eq_ignore_ascii_case("webhook_id") => {
                let value = value.trim();
                if value.is_empty() || value.contains('|') {
                    return Err(bad(format!(
                        "webhook_id \"{value}\" is not a PayPal webhook id"
                    )));
                }
                webhook_id = Some(value.to_string());
            }
            _ => return Err(bad(format!("unknown option \"{option}\""))),
        }
    }
    let webhook_id = webhook_id.ok_or_else(|| {
        bad("PayPal signs with the webhook's id: write the scheme as paypal;webhook_id=<id>".into())
    })?;
    Ok(Scheme::PayPal { webhook_id })
}

pub fn read(request: &Request<'_, '_>, webhook_id: &str) -> Result<Signed, Reason> {
    let headers: &Headers<'_> = request.headers;
    let transmission = headers.get("PAYPAL-TRANSMISSION-ID")?;
    let sent = headers.get("PAYPAL-TRANSMISSION-TIME")?;
    let encoded = headers.get("PAYPAL-TRANSMISSION-SIG")?;
    let certificate = headers.get("PAYPAL-CERT-URL")?;
    if !headers
        .get("PAYPAL-AUTH-ALGO")?
        .eq_ignore_ascii_case("SHA256withRSA")
    {
        return Err(Reason::MalformedHeader);
    }
    let timestamp = crate::timestamps::rfc3339_unix(sent).ok_or(Reason::MalformedHeader)?;
    if transmission.is_empty() || transmission.contains('|') || certificate.is_empty() {
        return Err(Reason::MalformedHeader);
    }
    if encoded.len() > MAX_SIGNATURE_CHARS {
        return Err(Reason::MalformedHeader);
    }
    let signature = decode_base64_any(encoded)
        .filter(|sig| !sig.is_empty())
        .ok_or(Reason::MalformedHeader)?;
    let crc = crc32(request.body);
    let mut signed = Signed::new(vec![Candidate {
        method: Method::RsaSha256,
        signature,
    }])
    .prefix(format!("{transmission}|{sent}|{webhook_id}|{crc}"))
    .without_body()
    .at(timestamp)
    .covering(&["paypal-transmission-id", "paypal-transmission-time"]);
    signed.key_name = Some(certificate.to_string());
    Ok(signed)
}

/// CRC32 (IEEE) of the body, cancellable on a large one.
fn crc32(body: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    for chunk in body.chunks(1 << 20) {
        crate::input::check_for_interrupts();
        hasher.update(chunk);
    }
    hasher.finalize()
}
