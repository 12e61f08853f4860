//! HubSpot, signature v3: `X-HubSpot-Signature-v3: <base64>` and
//! `X-HubSpot-Request-Timestamp: <Unix milliseconds>`. Signed:
//! `POST` + the URL HubSpot called + the body + the timestamp as sent,
//! HMAC-SHA256, keyed with the app's client secret verbatim. HubSpot
//! decodes a few escapes in the URL before signing (`%3A` → `:` and the
//! others below), so the same is done here. Refused past five minutes.
//!
//! The body is a JSON array of up to 100 events.

use super::{Reason, Request, Signed};
use crate::signature::{decode_base64, Algorithm};

pub fn read(request: &Request<'_, '_>) -> Result<Signed, Reason> {
    let headers = request.headers;
    let digest =
        decode_base64(headers.get("X-HubSpot-Signature-v3")?, 32).ok_or(Reason::MalformedHeader)?;
    let sent = headers.get("X-HubSpot-Request-Timestamp")?;
    if sent.is_empty() || sent.len() > 15 || !sent.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Reason::MalformedHeader);
    }
    let millis: i64 = sent.parse().map_err(|_| Reason::MalformedHeader)?;
    let mut signed = Signed::hmac(Algorithm::Sha256, vec![digest])
        .prefix(format!("POST{}", decode_uri(request.url()?)))
        .at(millis / 1000)
        .covering(&["x-hubspot-request-timestamp"]);
    signed.suffix = sent.as_bytes().to_vec();
    Ok(signed)
}

/// The escapes HubSpot documents as decoded before signing.
fn decode_uri(url: &str) -> String {
    const DECODED: [(&str, &str); 12] = [
        ("%3A", ":"),
        ("%2F", "/"),
        ("%3F", "?"),
        ("%40", "@"),
        ("%21", "!"),
        ("%24", "$"),
        ("%27", "'"),
        ("%28", "("),
        ("%29", ")"),
        ("%2A", "*"),
        ("%2C", ","),
        ("%3B", ";"),
    ];
    let mut out = String::with_capacity(url.len());
    let mut rest = url;
    while let Some(at) = rest.find('%') {
        out.push_str(&rest[..at]);
        let escape = rest.get(at..at + 3).unwrap_or(&rest[at..]);
        match DECODED
            .iter()
            .find(|(code, _)| code.eq_ignore_ascii_case(escape))
        {
            Some((_, plain)) => {
                out.push_str(plain);
                rest = &rest[at + 3..];
            }
            None => {
                out.push('%');
                rest = &rest[at + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn documented_escapes_are_decoded_others_kept() {
        assert_eq!(
            super::decode_uri("https://x.test/a%3Ab%2fc?q=%20%2A%"),
            "https://x.test/a:b/c?q=%20*%"
        );
    }
}
