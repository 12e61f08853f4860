//! Provider signature schemes, and `webhook_verify` that checks a delivery
//! against one of them.
//!
//! Each provider module says three things, exactly as the provider
//! documents them: which headers carry the signature (and timestamp), what
//! bytes are signed, and how a secret becomes the HMAC key. The engine here
//! does the rest the same way for all: constant-time comparison against
//! every signature the request carries and every secret given (rotation),
//! then the timestamp window.
//!
//! Everything below `verify` is plain Rust over plain data, so the parsers
//! are property-tested without a server.

pub mod catalog;
mod generic;
mod github;
mod headers;
mod paddle;
mod shopify;
mod slack;
mod standard;
mod stripe;

pub use generic::GenericHmac;
pub use headers::Headers;

use crate::errors::WebhookError;
use crate::signature::{self, Algorithm};

/// Why a delivery was accepted or refused; the SQL `reason` column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    Ok,
    /// A header the scheme requires is absent.
    MissingHeader,
    /// The headers are not a JSON object of strings, or a required header
    /// cannot be parsed (no signature in it, a timestamp that is not a
    /// number, bad hex or base64, an absurd length).
    MalformedHeader,
    /// Well-formed, but no signature matches any of the secrets.
    BadSignature,
    /// Authentic, but signed longer ago than the tolerance: a replay.
    TimestampTooOld,
    /// Authentic, but signed further in the future than the tolerance.
    TimestampInFuture,
    /// No secret given (an empty array, or only NULLs and empty strings).
    NoSecret,
    /// None of the secrets can be a key for this scheme (e.g. a Standard
    /// Webhooks secret that is not base64).
    InvalidSecret,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Ok => "ok",
            Reason::MissingHeader => "missing_header",
            Reason::MalformedHeader => "malformed_header",
            Reason::BadSignature => "bad_signature",
            Reason::TimestampTooOld => "timestamp_too_old",
            Reason::TimestampInFuture => "timestamp_in_future",
            Reason::NoSecret => "no_secret",
            Reason::InvalidSecret => "invalid_secret",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    pub reason: Reason,
    /// The timestamp the sender signed, in Unix seconds, when the scheme has
    /// one and it could be read (also when the verdict is negative).
    pub signed_at: Option<i64>,
}

impl Verdict {
    pub fn valid(&self) -> bool {
        self.reason == Reason::Ok
    }

    fn refused(reason: Reason) -> Self {
        Verdict {
            reason,
            signed_at: None,
        }
    }
}

/// What a scheme reads off a request: the signatures to try, the bytes
/// signed before the body, and the signing time if the scheme has one.
pub struct Signed {
    pub algorithm: Algorithm,
    pub candidates: Vec<Vec<u8>>,
    pub prefix: Vec<u8>,
    pub timestamp: Option<i64>,
    /// Headers (lower case) whose values are part of `prefix`, so covered
    /// by the signature: only these may be trusted as an event id.
    pub covered_headers: &'static [&'static str],
}

/// What an authentic delivery proves beyond its body.
pub struct Authentic {
    pub signed_at: Option<i64>,
    /// The bytes signed before the body (timestamp, id…): with the body,
    /// the whole signed material.
    pub prefix: Vec<u8>,
    pub covered_headers: &'static [&'static str],
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scheme {
    Stripe,
    Github,
    Standard,
    Paddle,
    Shopify,
    Slack,
    /// A provider whose signature is the generic HMAC of the body, named:
    /// its catalog entry says which (`catalog::Entry::generic`).
    Preset(&'static str, GenericHmac),
    Hmac(GenericHmac),
}

impl Scheme {
    /// A scheme by its name or one of its aliases (`catalog`), or the
    /// generic `hmac;…` form with its options. `function` and `arg` say
    /// whose argument it was, for the error.
    pub fn parse(
        function: &'static str,
        arg: &'static str,
        name: &str,
    ) -> Result<Scheme, WebhookError> {
        let unknown = || WebhookError::UnknownScheme {
            function,
            arg,
            given: name.to_string(),
            known: catalog::known(),
        };
        let entry = catalog::lookup(name).ok_or_else(unknown)?;
        if let Some(spec) = entry.generic {
            return GenericHmac::parse(function, arg, spec)
                .map(|generic| Scheme::Preset(entry.name, generic));
        }
        match entry.name {
            "stripe" => Ok(Scheme::Stripe),
            "github" => Ok(Scheme::Github),
            "standard" => Ok(Scheme::Standard),
            "paddle" => Ok(Scheme::Paddle),
            "shopify" => Ok(Scheme::Shopify),
            "slack" => Ok(Scheme::Slack),
            "hmac" => GenericHmac::parse(function, arg, name.trim()).map(Scheme::Hmac),
            _ => Err(unknown()),
        }
    }

    /// The scheme's canonical name in the catalog.
    pub fn name(&self) -> &'static str {
        match self {
            Scheme::Stripe => "stripe",
            Scheme::Github => "github",
            Scheme::Standard => "standard",
            Scheme::Paddle => "paddle",
            Scheme::Shopify => "shopify",
            Scheme::Slack => "slack",
            Scheme::Preset(name, _) => name,
            Scheme::Hmac(_) => "hmac",
        }
    }

    /// The timestamp window when nobody gave one, in seconds; 0 for
    /// schemes that sign no timestamp (it is never used for them).
    pub fn default_tolerance(&self) -> i64 {
        catalog::lookup(self.name())
            .and_then(|entry| entry.tolerance)
            .unwrap_or(0)
    }

    fn read(&self, headers: &Headers<'_>) -> Result<Signed, Reason> {
        match self {
            Scheme::Stripe => stripe::read(headers),
            Scheme::Github => github::read(headers),
            Scheme::Standard => standard::read(headers),
            Scheme::Paddle => paddle::read(headers),
            Scheme::Shopify => shopify::read(headers),
            Scheme::Slack => slack::read(headers),
            Scheme::Preset(_, generic) | Scheme::Hmac(generic) => generic.read(headers),
        }
    }

    /// The headers that carry the signature, in the order they are read;
    /// the first present one is archived with the delivery.
    pub fn signature_headers(&self) -> Vec<&str> {
        match self {
            Scheme::Stripe => vec!["Stripe-Signature"],
            Scheme::Github => vec!["X-Hub-Signature-256", "X-Hub-Signature"],
            Scheme::Standard => vec!["webhook-signature", "svix-signature"],
            Scheme::Paddle => vec!["Paddle-Signature"],
            Scheme::Shopify => vec!["X-Shopify-Hmac-Sha256"],
            Scheme::Slack => vec!["X-Slack-Signature"],
            Scheme::Preset(_, generic) | Scheme::Hmac(generic) => vec![generic.header()],
        }
    }

    /// How a configured secret becomes the HMAC key: the scheme's rule,
    /// never guessed from the secret's look. None: not a valid key here.
    fn key(&self, secret: &str) -> Option<Vec<u8>> {
        match self {
            Scheme::Standard => standard::key(secret),
            // Stripe's whsec_… string, GitHub's and Slack's secrets, Paddle's
            // pdl_ntfset_… key, Shopify's client secret and the presets'
            // secrets are all used as the literal bytes of the string.
            _ => Some(secret.as_bytes().to_vec()),
        }
    }
}

/// Verify one delivery. `now` and `tolerance` in seconds.
pub fn verify(
    scheme: &Scheme,
    headers: &serde_json::Value,
    body: &[u8],
    secrets: &[Option<&str>],
    tolerance: i64,
    now: i64,
) -> Verdict {
    match Headers::from_json(headers) {
        Ok(headers) => verify_headers(scheme, &headers, body, secrets, tolerance, now),
        Err(reason) => Verdict::refused(reason),
    }
}

/// `verify` for headers already read.
pub fn verify_headers(
    scheme: &Scheme,
    headers: &Headers<'_>,
    body: &[u8],
    secrets: &[Option<&str>],
    tolerance: i64,
    now: i64,
) -> Verdict {
    match authenticate(scheme, headers, body, secrets, tolerance, now) {
        Ok(authentic) => Verdict {
            reason: Reason::Ok,
            signed_at: authentic.signed_at,
        },
        Err(refused) => refused,
    }
}

/// Verify a delivery and, when it is authentic, say what its signature
/// covers: what `webhook_receive` may trust beyond the body.
pub fn authenticate(
    scheme: &Scheme,
    headers: &Headers<'_>,
    body: &[u8],
    secrets: &[Option<&str>],
    tolerance: i64,
    now: i64,
) -> Result<Authentic, Verdict> {
    let signed = scheme.read(headers).map_err(Verdict::refused)?;
    let verdict = |reason| {
        Err(Verdict {
            reason,
            signed_at: signed.timestamp,
        })
    };

    let secrets: Vec<&str> = secrets
        .iter()
        .flatten()
        .copied()
        .filter(|s| !s.is_empty())
        .collect();
    if secrets.is_empty() {
        return verdict(Reason::NoSecret);
    }
    let keys: Vec<Vec<u8>> = secrets.iter().filter_map(|s| scheme.key(s)).collect();
    if keys.is_empty() {
        return verdict(Reason::InvalidSecret);
    }
    let parts: [&[u8]; 2] = [&signed.prefix, body];
    let authentic = keys
        .iter()
        .any(|key| signature::matches_any(signed.algorithm, key, &parts, &signed.candidates));
    if !authentic {
        return verdict(Reason::BadSignature);
    }
    match signed.timestamp {
        Some(ts) if ts < now.saturating_sub(tolerance) => verdict(Reason::TimestampTooOld),
        Some(ts) if ts > now.saturating_add(tolerance) => verdict(Reason::TimestampInFuture),
        _ => Ok(Authentic {
            signed_at: signed.timestamp,
            prefix: signed.prefix,
            covered_headers: signed.covered_headers,
        }),
    }
}

/// The current time in Unix seconds, from the system clock (not the
/// transaction's start: a long transaction must not widen the window).
pub fn now_unix() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// A Unix timestamp in whole seconds, as every timestamped scheme sends
/// it. Anything else (fractions, signs, spaces, 20 digits) is malformed.
fn unix_seconds(text: &str) -> Result<i64, Reason> {
    if text.is_empty() || text.len() > 12 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Reason::MalformedHeader);
    }
    text.parse().map_err(|_| Reason::MalformedHeader)
}

/// The `t=…,v1=…` family of headers (Stripe with ',', Paddle with ';'):
/// a timestamp under `ts_key` and one or more hex SHA-256 signatures under
/// `sig_key`; other keys are ignored. Signatures that are not 64 hex digits
/// cannot match and are dropped, but at least one must be usable.
fn timestamp_and_signatures(
    header: &str,
    separator: char,
    ts_key: &str,
    sig_key: &str,
) -> Result<(i64, Vec<Vec<u8>>), Reason> {
    let mut timestamp = None;
    let mut candidates = Vec::new();
    for item in header.split(separator) {
        let Some((key, value)) = item.trim().split_once('=') else {
            continue;
        };
        if key == ts_key {
            timestamp = Some(unix_seconds(value)?);
        } else if key == sig_key {
            candidates.extend(signature::decode_hex(value, 32));
        }
    }
    match (timestamp, candidates.is_empty()) {
        (Some(ts), false) => Ok((ts, candidates)),
        _ => Err(Reason::MalformedHeader),
    }
}

#[cfg(test)]
mod property_tests;
