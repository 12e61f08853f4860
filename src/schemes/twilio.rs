//! Twilio: `X-Twilio-Signature: <base64>`, HMAC-SHA1 keyed with the
//! account's auth token (or, under a Webhook Setting, HMAC-SHA256 or
//! HMAC-SHA1 keyed with a shared key, as `SETTINGS` says) over the full
//! URL Twilio called, then:
//!
//! - for a form body (`application/x-www-form-urlencoded`, most callbacks):
//!   every field's name and value, decoded, sorted by name (then value),
//!   concatenated;
//! - for a JSON body: nothing more; the URL carries the body's SHA-256 in
//!   its `bodySHA256` query parameter, which must match the body.
//!
//! Twilio's own validators accept the URL with and without the scheme's
//! default port (`:443`, `:80`), because Twilio has signed both forms;
//! so are both tried here. No timestamp is signed.

use super::{Reason, Request, Signed};
use crate::signature::{decode_base64, Algorithm};
use sha2::{Digest, Sha256};

/// Sent when a Webhook Setting signs with a shared key instead of the
/// auth token: `key=<the key's sid>,algorithm=HMAC_SHA256` (or
/// `HMAC_SHA1`). The signed string is the same; only the key and the
/// hash change. Not signed itself, and needs not be: it picks between two
/// HMACs, each under a secret the sender must have.
const SETTINGS: &str = "X-Twilio-Webhooks-Signature-Settings";

/// The HMAC the request is signed with, read as Twilio's library reads
/// the settings header: its first non-empty `algorithm` (names and values
/// trimmed, any case); none, or no header, is the auth token's SHA-1. An
/// algorithm it does not know refuses the request.
fn algorithm(headers: &super::Headers<'_>) -> Result<Algorithm, Reason> {
    if !headers.has(SETTINGS) {
        return Ok(Algorithm::Sha1);
    }
    let blank: &[char] = &[' ', '\t'];
    let named = headers.get(SETTINGS)?.split(',').find_map(|part| {
        let (name, value) = part.split_once('=')?;
        let value = value.trim_matches(blank);
        (name.trim_matches(blank) == "algorithm" && !value.is_empty()).then_some(value)
    });
    match named.map(str::to_ascii_uppercase).as_deref() {
        None | Some("HMAC_SHA1") => Ok(Algorithm::Sha1),
        Some("HMAC_SHA256") => Ok(Algorithm::Sha256),
        Some(_) => Err(Reason::MalformedHeader),
    }
}

pub fn read(request: &Request<'_, '_>) -> Result<Signed, Reason> {
    let header = request.headers.get("X-Twilio-Signature")?;
    let algorithm = algorithm(request.headers)?;
    let digest = decode_base64(header, algorithm.digest_len()).ok_or(Reason::MalformedHeader)?;
    let url = request.url()?;
    let signed_fields: Vec<u8> = match query_value(url, "bodySHA256") {
        Some(expected) => {
            // Public data against public data: no secret to time.
            let actual = hex::encode(Sha256::digest(request.body));
            if !expected.eq_ignore_ascii_case(&actual) {
                return Err(Reason::BadSignature);
            }
            Vec::new()
        }
        None => {
            // Counted before anything is decoded or sorted: a genuine
            // form has a few dozen fields.
            if form_field_count(request.body) > MAX_FORM_FIELDS {
                return Err(Reason::BadSignature);
            }
            let mut fields = form_fields(request.body);
            fields.sort();
            fields
                .into_iter()
                .flat_map(|(k, v)| [k, v])
                .flatten()
                .collect()
        }
    };
    let mut signed = Signed::hmac(algorithm, vec![digest]).without_body();
    signed.prefixes = url_forms(url)
        .into_iter()
        .map(|url| [url.as_bytes(), &signed_fields].concat())
        .collect();
    Ok(signed)
}

/// The most fields a form body may have under a scheme that reads its
/// fields before checking its signature (Twilio signs them sorted). The
/// providers send a few dozen; a form of more is refused as not theirs
/// (`bad_signature`) before any field is decoded or sorted. The portable
/// edition's twin is `webhook._max_form_fields()`.
pub const MAX_FORM_FIELDS: usize = 1000;

/// The number of fields `form_fields` would return, without decoding any.
pub fn form_field_count(body: &[u8]) -> usize {
    body.split(|&b| b == b'&')
        .filter(|pair| !pair.is_empty())
        .count()
}

/// The fields of a form body, percent-decoded (`+` is a space), in order.
/// Never fails: a malformed escape is kept as written, as browsers and
/// Twilio's libraries do.
pub fn form_fields(body: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    body.split(|&b| b == b'&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let mut parts = pair.splitn(2, |&b| b == b'=');
            let name = parts.next().unwrap_or_default();
            let value = parts.next().unwrap_or_default();
            (percent_decode(name), percent_decode(value))
        })
        .collect()
}

fn percent_decode(text: &[u8]) -> Vec<u8> {
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        match text[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < text.len() => match (hex(text[i + 1]), hex(text[i + 2])) {
                (Some(hi), Some(lo)) => {
                    out.push(hi << 4 | lo);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            other => out.push(other),
        }
        i += 1;
    }
    out
}

/// The value of a query parameter, as written.
fn query_value<'u>(url: &'u str, name: &str) -> Option<&'u str> {
    let query = url.split('#').next()?.split_once('?')?.1;
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value)
}

/// The URL as given, then with its default port added or removed.
fn url_forms(url: &str) -> Vec<String> {
    let mut forms = vec![url.to_string()];
    let (default_port, rest) = if let Some(rest) = url.strip_prefix("https://") {
        (":443", rest)
    } else if let Some(rest) = url.strip_prefix("http://") {
        (":80", rest)
    } else {
        return forms;
    };
    let scheme = &url[..url.len() - rest.len()];
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    let host = authority.rsplit('@').next().unwrap_or(authority);
    let userinfo = &authority[..authority.len() - host.len()];
    if let Some(bare) = host.strip_suffix(default_port) {
        forms.push(format!("{scheme}{userinfo}{bare}{path}"));
    } else if !host.ends_with(']') && !host.contains(':') {
        forms.push(format!("{scheme}{userinfo}{host}{default_port}{path}"));
    }
    forms
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_fields_are_decoded() {
        assert_eq!(
            form_fields(b"To=%2B15551234567&Body=Hello+world%21&Empty=&Bare&bad=%zz%4"),
            vec![
                (b"To".to_vec(), b"+15551234567".to_vec()),
                (b"Body".to_vec(), b"Hello world!".to_vec()),
                (b"Empty".to_vec(), b"".to_vec()),
                (b"Bare".to_vec(), b"".to_vec()),
                (b"bad".to_vec(), b"%zz%4".to_vec()),
            ]
        );
    }

    #[test]
    fn both_port_forms_are_tried() {
        assert_eq!(
            url_forms("https://example.com/sms?x=1"),
            [
                "https://example.com/sms?x=1",
                "https://example.com:443/sms?x=1"
            ]
        );
        assert_eq!(
            url_forms("https://u:p@example.com:443/sms"),
            [
                "https://u:p@example.com:443/sms",
                "https://u:p@example.com/sms"
            ]
        );
        assert_eq!(
            url_forms("http://example.com:8080/"),
            ["http://example.com:8080/"]
        );
    }
}
