//! The long tail: an HMAC of the raw body in one header, described in the
//! scheme string itself:
//!
//! `hmac;header=X-Signature[;algorithm=sha256|sha1|sha512][;encoding=hex|base64][;prefix=sha256=]`
//!
//! Defaults: SHA-256, hex, no prefix. The key is the secret verbatim. No
//! timestamp is signed, so deduplication (and, for an id read from a
//! header, the binding of signed bodies to ids) is the replay protection.

use super::{Headers, Reason, Signed};
use crate::errors::WebhookError;
use crate::signature::{decode_base64, decode_hex, Algorithm};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenericHmac {
    header: String,
    algorithm: Algorithm,
    base64: bool,
    prefix: String,
}

/// The options of a `name;key=value;…` scheme string, in order: each key
/// trimmed and lower-cased, its value as written; for one that is not
/// key=value, what to say of it. The generic HMAC's grammar, which the
/// shared token's shares.
pub(super) fn options(spec: &str) -> impl Iterator<Item = Result<(String, &str), String>> {
    spec.split(';').skip(1).map(|option| {
        option
            .split_once('=')
            .map(|(key, value)| (key.trim().to_ascii_lowercase(), value))
            .ok_or_else(|| format!("option \"{option}\" is not key=value"))
    })
}

impl GenericHmac {
    pub fn parse(
        function: &'static str,
        arg: &'static str,
        spec: &str,
    ) -> Result<Self, WebhookError> {
        let bad = |detail: String| WebhookError::BadSchemeOption {
            function,
            arg,
            given: spec.to_string(),
            detail,
        };
        let mut header = None;
        let mut algorithm = Algorithm::Sha256;
        let mut base64 = false;
        let mut prefix = String::new();
        for option in options(spec) {
            let (key, value) = option.map_err(bad)?;
            match key.as_str() {
                "header" if !value.trim().is_empty() => header = Some(value.trim().to_string()),
                "algorithm" => {
                    algorithm = Algorithm::parse(value.trim())
                        .ok_or_else(|| bad(format!("unknown algorithm \"{value}\"")))?
                }
                "encoding" => {
                    base64 = match value.trim().to_ascii_lowercase().as_str() {
                        "hex" => false,
                        "base64" => true,
                        other => return Err(bad(format!("unknown encoding \"{other}\""))),
                    }
                }
                // The prefix is everything after the first '=': "prefix=sha256=".
                "prefix" => prefix = value.to_string(),
                other => return Err(bad(format!("unknown option \"{other}\""))),
            }
        }
        let header = header.ok_or_else(|| bad("the header option is required".into()))?;
        Ok(GenericHmac {
            header,
            algorithm,
            base64,
            prefix,
        })
    }

    pub fn header(&self) -> &str {
        &self.header
    }

    pub fn read(&self, headers: &Headers<'_>) -> Result<Signed, Reason> {
        let value = headers.get(&self.header)?;
        let encoded = value
            .strip_prefix(self.prefix.as_str())
            .ok_or(Reason::MalformedHeader)?;
        let len = self.algorithm.digest_len();
        let digest = if self.base64 {
            decode_base64(encoded, len)
        } else {
            decode_hex(encoded, len)
        };
        let digest = digest.ok_or(Reason::MalformedHeader)?;
        Ok(Signed::hmac(self.algorithm, vec![digest]))
    }
}
