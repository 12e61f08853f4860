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

mod adyen;
mod calendly;
pub mod catalog;
mod discord;
mod generic;
#[cfg(any(test, feature = "pg_test"))]
pub mod genuine;
mod github;
pub mod handshake;
mod headers;
mod hubspot;
mod keys;
mod linear;
mod mailgun;
mod paddle;
mod paypal;
mod sendgrid;
mod shopify;
mod slack;
mod sns;
mod square;
mod standard;
mod stripe;
mod telnyx;
mod token;
mod twilio;
mod twitch;
mod workos;
mod zendesk;
mod zoom;

pub use catalog::Kind;
use catalog::Make;
pub use generic::GenericHmac;
pub use headers::Headers;
use keys::{Candidate, Key, Registered};
pub use twilio::form_fields;

use crate::errors::WebhookError;
use crate::signature::Algorithm;

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
    /// The scheme signs the URL the provider called, and none was given.
    MissingUrl,
    /// The delivery names the certificate that signed it, and no
    /// certificate is registered under that name (PayPal).
    UnknownCertificate,
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
            Reason::MissingUrl => "missing_url",
            Reason::UnknownCertificate => "unknown_certificate",
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

/// What a scheme reads a delivery from: its headers and raw body, and the
/// public URL the provider called, for the schemes that sign it.
pub struct Request<'h, 'a> {
    pub headers: &'h Headers<'a>,
    pub body: &'h [u8],
    pub url: Option<&'h str>,
}

impl Request<'_, '_> {
    /// The URL, for a scheme that signs it: `MissingUrl` when the handler
    /// did not pass one.
    fn url(&self) -> Result<&str, Reason> {
        self.url.ok_or(Reason::MissingUrl)
    }
}

/// What a scheme reads off a request: the signatures to try, the bytes
/// signed around the body, and the signing time if the scheme has one.
pub struct Signed {
    pub candidates: Vec<Candidate>,
    /// What is signed before the body; alternatives are tried in order
    /// (Twilio's URL with and without its default port).
    pub prefixes: Vec<Vec<u8>>,
    /// Whether the raw body follows the prefix. False where the scheme
    /// covers the body inside the prefix instead (a CRC for PayPal, the
    /// form fields for Twilio, a digest for Mailgun's token).
    pub body_signed: bool,
    /// What is signed after the body (HubSpot's timestamp).
    pub suffix: Vec<u8>,
    pub timestamp: Option<i64>,
    /// Headers (lower case) whose values are part of the prefix, so covered
    /// by the signature: only these may be trusted as an event id.
    pub covered_headers: &'static [&'static str],
    /// The key the delivery says signed it (PayPal's certificate URL): only
    /// a key registered under that name may verify it.
    pub key_name: Option<String>,
}

impl Signed {
    /// Signatures over the body alone.
    pub fn new(candidates: Vec<Candidate>) -> Self {
        Signed {
            candidates,
            prefixes: vec![Vec::new()],
            body_signed: true,
            suffix: Vec::new(),
            timestamp: None,
            covered_headers: &[],
            key_name: None,
        }
    }

    /// HMAC tags of one algorithm over the body alone.
    pub fn hmac(algorithm: Algorithm, tags: Vec<Vec<u8>>) -> Self {
        Signed::new(
            tags.into_iter()
                .map(|tag| Candidate::hmac(algorithm, tag))
                .collect(),
        )
    }

    pub fn prefix(mut self, prefix: impl Into<Vec<u8>>) -> Self {
        self.prefixes = vec![prefix.into()];
        self
    }

    pub fn at(mut self, timestamp: i64) -> Self {
        self.timestamp = Some(timestamp);
        self
    }

    pub fn covering(mut self, headers: &'static [&'static str]) -> Self {
        self.covered_headers = headers;
        self
    }

    /// The signed bytes are the prefix alone (the scheme covers the body
    /// inside it).
    pub fn without_body(mut self) -> Self {
        self.body_signed = false;
        self
    }
}

/// What an authentic delivery proves: which bytes its signature covers,
/// and so which of its values are the signer's.
pub struct Authentic {
    pub signed_at: Option<i64>,
    /// The signed bytes around the body (timestamp, id, URL…) as verified.
    pub prefix: Vec<u8>,
    pub body_signed: bool,
    pub suffix: Vec<u8>,
    /// The headers this delivery's signature covers (its family's).
    pub covered_headers: &'static [&'static str],
    /// What the scheme's signature can cover, in every family.
    pub covers: catalog::Covers,
    /// Which of the secrets given verified it (its index).
    pub secret: usize,
}

/// Whether a header of an authentic delivery is the signer's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderTrust {
    /// Covered by this delivery's signature.
    Signed,
    /// A header the scheme never signs: present, but anyone could have set it.
    Unsigned,
    /// A header the scheme signs in another family than the one this
    /// delivery was verified with: whoever relayed the request added it,
    /// and it is not read at all.
    Foreign,
}

impl Authentic {
    pub fn header(&self, name: &str) -> HeaderTrust {
        let named = |list: &[&str]| list.iter().any(|h| h.eq_ignore_ascii_case(name));
        if named(self.covered_headers) {
            HeaderTrust::Signed
        } else if named(self.covers.headers) {
            HeaderTrust::Foreign
        } else {
            HeaderTrust::Unsigned
        }
    }

    /// Whether values read from the body are the signer's.
    pub fn body_vouched(&self) -> bool {
        self.covers.body.vouches()
    }

    /// The body's SHA-256 where the signature does not vouch for the body
    /// (a checksum, unframed fields, nothing): the one body its signed
    /// bytes may come with, bound to them at first sight.
    pub fn unvouched_body_digest(&self, body: &[u8]) -> Option<[u8; 32]> {
        use sha2::{Digest, Sha256};
        (!self.body_vouched()).then(|| Sha256::digest(body).into())
    }

    /// SHA-256 of everything the signature covers: the same bytes signed
    /// again are the same delivery, whatever unsigned headers say.
    pub fn signed_digest(&self, body: &[u8]) -> [u8; 32] {
        use sha2::{Digest, Sha256};
        let mut hasher = Sha256::new();
        hasher.update(&self.prefix);
        if self.body_signed {
            hasher.update(body);
        }
        hasher.update(&self.suffix);
        hasher.finalize().into()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scheme {
    /// A scheme of its own that takes no options (`catalog::Make::Plain`).
    Plain(Kind),
    /// PayPal signs with the webhook's id, which the DBA registers in the
    /// scheme: `paypal;webhook_id=<id>`.
    PayPal {
        webhook_id: String,
    },
    /// A provider verified exactly as another scheme (Typeform as a
    /// generic HMAC, Supabase as Standard Webhooks), under its own name for
    /// its own event id and type sources (`catalog::Make::VerifiedAs`).
    Preset(&'static str, Box<Scheme>),
    Hmac(GenericHmac),
    /// A shared token in a header (`token;header=…`).
    Token(token::SharedToken),
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
        let takes_options = matches!(entry.make, Make::PayPal | Make::Hmac | Make::Token);
        if name.contains(';') && !takes_options {
            return Err(WebhookError::BadSchemeOption {
                function,
                arg,
                given: name.to_string(),
                detail: format!("Scheme \"{}\" takes no options.", entry.name),
            });
        }
        match entry.make {
            Make::Plain(kind) => Ok(Scheme::Plain(kind)),
            Make::PayPal => paypal::parse(function, arg, name.trim()),
            Make::Hmac => GenericHmac::parse(function, arg, name.trim()).map(Scheme::Hmac),
            Make::Token => token::SharedToken::parse(function, arg, name.trim()).map(Scheme::Token),
            Make::VerifiedAs(spec) => Scheme::parse(function, arg, spec)
                .map(|inner| Scheme::Preset(entry.name, Box::new(inner))),
        }
    }

    /// The scheme's entry in the catalog: every scheme has one, since
    /// `parse` makes them from it.
    pub fn entry(&self) -> &'static catalog::Entry {
        catalog::catalog()
            .iter()
            .find(|entry| match (self, entry.make) {
                (Scheme::Plain(kind), Make::Plain(made)) => *kind == made,
                (Scheme::PayPal { .. }, Make::PayPal)
                | (Scheme::Hmac(_), Make::Hmac)
                | (Scheme::Token(_), Make::Token) => true,
                (Scheme::Preset(name, _), Make::VerifiedAs(_)) => entry.name == *name,
                _ => false,
            })
            .expect("every scheme is made from its catalog entry")
    }

    /// What the scheme's provider sends as a body.
    pub fn body(&self) -> catalog::Body {
        self.entry().body
    }

    /// The timestamp window when nobody gave one, in seconds; 0 for
    /// schemes that sign no timestamp (it is never used for them).
    pub fn default_tolerance(&self) -> i64 {
        self.entry().tolerance.unwrap_or(0)
    }

    fn read(&self, request: &Request<'_, '_>) -> Result<Signed, Reason> {
        let headers = request.headers;
        match self {
            Scheme::Plain(Kind::Stripe) => stripe::read(headers),
            Scheme::Plain(Kind::Github) => github::read(headers),
            Scheme::Plain(Kind::Standard) => standard::read(headers),
            Scheme::Plain(Kind::Paddle) => paddle::read(headers),
            Scheme::Plain(Kind::Shopify) => shopify::read(headers),
            Scheme::Plain(Kind::Slack) => slack::read(headers),
            Scheme::Plain(Kind::Discord) => discord::read(headers),
            Scheme::Plain(Kind::SendGrid) => sendgrid::read(headers),
            Scheme::PayPal { webhook_id } => paypal::read(request, webhook_id),
            Scheme::Plain(Kind::Twilio) => twilio::read(request),
            Scheme::Plain(Kind::Square) => square::read(request),
            Scheme::Plain(Kind::Zoom) => zoom::read(headers),
            Scheme::Plain(Kind::Twitch) => twitch::read(headers),
            Scheme::Plain(Kind::Mailgun) => mailgun::read(request),
            Scheme::Plain(Kind::Linear) => linear::read(request),
            Scheme::Plain(Kind::HubSpot) => hubspot::read(request),
            Scheme::Plain(Kind::Calendly) => calendly::read(headers),
            Scheme::Plain(Kind::WorkOs) => workos::read(headers),
            Scheme::Plain(Kind::Zendesk) => zendesk::read(headers),
            Scheme::Plain(Kind::Telnyx) => telnyx::read(headers),
            Scheme::Plain(Kind::Sns) => sns::read(request),
            Scheme::Plain(Kind::Adyen) => adyen::read(request),
            Scheme::Preset(_, inner) => inner.read(request),
            Scheme::Hmac(generic) => generic.read(headers),
            Scheme::Token(token) => token.read(headers),
        }
    }

    /// The headers that carry the signature, in the order they are read;
    /// the first present one is archived with the delivery.
    pub fn signature_headers(&self) -> Vec<&str> {
        match self {
            Scheme::Plain(Kind::Stripe) => vec!["Stripe-Signature"],
            Scheme::Plain(Kind::Github) => vec!["X-Hub-Signature-256"],
            Scheme::Plain(Kind::Standard) => vec!["webhook-signature", "svix-signature"],
            Scheme::Plain(Kind::Paddle) => vec!["Paddle-Signature"],
            Scheme::Plain(Kind::Shopify) => shopify::SIGNATURES.to_vec(),
            Scheme::Plain(Kind::Slack) => vec!["X-Slack-Signature"],
            Scheme::Plain(Kind::Discord) => vec!["X-Signature-Ed25519"],
            Scheme::Plain(Kind::SendGrid) => vec![sendgrid::SIGNATURE],
            Scheme::PayPal { .. } => vec!["PAYPAL-TRANSMISSION-SIG"],
            Scheme::Plain(Kind::Twilio) => vec!["X-Twilio-Signature"],
            Scheme::Plain(Kind::Square) => vec![square::SIGNATURE],
            Scheme::Plain(Kind::Zoom) => vec!["x-zm-signature"],
            Scheme::Plain(Kind::Twitch) => vec!["Twitch-Eventsub-Message-Signature"],
            // In the body.
            Scheme::Plain(Kind::Mailgun) => vec![],
            Scheme::Plain(Kind::Linear) => vec!["Linear-Signature"],
            Scheme::Plain(Kind::HubSpot) => vec!["X-HubSpot-Signature-v3"],
            Scheme::Plain(Kind::Calendly) => vec!["Calendly-Webhook-Signature"],
            Scheme::Plain(Kind::WorkOs) => vec![workos::SIGNATURE],
            Scheme::Plain(Kind::Zendesk) => vec![zendesk::SIGNATURE],
            Scheme::Plain(Kind::Telnyx) => vec![telnyx::SIGNATURE],
            // In the body.
            Scheme::Plain(Kind::Sns | Kind::Adyen) => vec![],
            Scheme::Preset(_, inner) => inner.signature_headers(),
            Scheme::Hmac(generic) => vec![generic.header()],
            // The token is the secret: never archived as the signature.
            Scheme::Token(_) => vec![],
        }
    }

    /// Whether the scheme signs nothing of a request (the shared token):
    /// no signed bytes to bind an id to or route by, the id is as sent.
    pub fn signs_nothing(&self) -> bool {
        self.secret_header().is_some()
    }

    /// A header whose value is the secret itself (the shared token's):
    /// never archived, whatever `webhook.redact_headers` says.
    pub fn secret_header(&self) -> Option<&str> {
        match self {
            Scheme::Token(token) => Some(token.header()),
            Scheme::Preset(_, inner) => inner.secret_header(),
            _ => None,
        }
    }

    /// How a configured secret becomes a key: the scheme's rule, never
    /// guessed from the secret's look. None: not a valid key here.
    fn key(&self, secret: &str) -> Option<Registered> {
        match self {
            Scheme::Plain(Kind::Standard) => standard::key(secret),
            Scheme::Plain(Kind::Discord) => discord::key(secret),
            Scheme::Plain(Kind::Telnyx) => telnyx::key(secret),
            Scheme::Plain(Kind::SendGrid) => keys::p256_public_key(secret).map(Registered::from),
            Scheme::PayPal { .. } | Scheme::Plain(Kind::Sns) => keys::certificate_under_url(secret),
            Scheme::Plain(Kind::Adyen) => adyen::key(secret).map(|key| Key::Hmac(key).into()),
            // Standard Webhooks keyed with the secret's own bytes.
            Scheme::Preset("polar", _) => Some(Key::Hmac(secret.as_bytes().to_vec()).into()),
            Scheme::Preset(_, inner) => inner.key(secret),
            // Stripe's whsec_… string, GitHub's and Slack's secrets, Paddle's
            // pdl_ntfset_… key, Shopify's client secret, Twilio's auth
            // token and the other HMAC secrets are all used as the literal
            // bytes of the string.
            _ => Some(Key::Hmac(secret.as_bytes().to_vec()).into()),
        }
    }

    /// Why `secret` cannot be a key for this scheme, or None when it can:
    /// what `webhook_add_secret` refuses it with.
    pub fn key_problem(&self, secret: &str) -> Option<&'static str> {
        if self.key(secret).is_some() {
            return None;
        }
        Some(match self {
            Scheme::Plain(Kind::Standard) => {
                "a Standard Webhooks key is whsec_ + base64 of the secret (or v1,whsec_…, as Supabase shows it), or whpk_ + base64 of a 32-byte Ed25519 public key"
            }
            Scheme::Plain(Kind::Discord) => "a Discord key is the application's public key, 64 hex digits",
            Scheme::Plain(Kind::Telnyx) => {
                "a Telnyx key is the account's public key as Mission Control shows it, base64 of its 32 bytes"
            }
            Scheme::Plain(Kind::SendGrid) => {
                "a SendGrid key is the verification key it shows (base64 of a DER P-256 public key), or that key in PEM"
            }
            Scheme::PayPal { .. } => {
                "a PayPal key is the certificate's URL (as PAYPAL-CERT-URL names it) on the first line, then the PEM certificate"
            }
            Scheme::Plain(Kind::Adyen) => {
                "an Adyen key is the HMAC key the Customer Area shows, in hex"
            }
            Scheme::Plain(Kind::Sns) => {
                "an SNS key is the signing certificate's URL (as SigningCertURL names it) on the first line, then the PEM certificate"
            }
            Scheme::Preset(_, inner) => return inner.key_problem(secret),
            _ => "not a key for this scheme",
        })
    }

    /// The key `secret` is under this scheme, as bytes for an HMAC (Zoom's
    /// handshake answers with an HMAC under the secret that verified it).
    pub fn hmac_key(&self, secret: &str) -> Option<Vec<u8>> {
        match self.key(secret)?.key {
            Key::Hmac(bytes) => Some(bytes),
            _ => None,
        }
    }
}

/// The most signatures one delivery may carry. Rotation needs two or three;
/// each costs a verification (a public-key one is about a hundred times an
/// HMAC), so a header stuffed with them is malformed, not worked through.
pub const MAX_CANDIDATES: usize = 8;

/// The most keys a delivery is checked against: a provider's active
/// secrets, or `webhook_verify`'s array.
pub const MAX_KEYS: usize = 16;

/// The most public-key checks one delivery may cost: its public-key
/// signatures × the public keys they are tried against × the signed
/// forms. A rotation needs a few; eight signatures against sixteen keys
/// would be 128 Ed25519 checks that anyone may ask of `webhook_verify`, or
/// of `webhook_receive` for a provider with many keys, so such a delivery
/// is refused as malformed before any is made.
pub const MAX_PUBLIC_KEY_CHECKS: usize = 16;

/// Verify one delivery. `now` and `tolerance` in seconds; `url` is the
/// public URL the provider called, for the schemes that sign it.
pub fn verify(
    scheme: &Scheme,
    headers: &serde_json::Value,
    body: &[u8],
    url: Option<&str>,
    secrets: &[Option<&str>],
    tolerance: i64,
    now: i64,
) -> Verdict {
    let headers = match Headers::from_json(headers) {
        Ok(headers) => headers,
        Err(reason) => return Verdict::refused(reason),
    };
    let request = Request {
        headers: &headers,
        body,
        url,
    };
    match authenticate(scheme, &request, secrets, tolerance, now) {
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
    request: &Request<'_, '_>,
    secrets: &[Option<&str>],
    tolerance: i64,
    now: i64,
) -> Result<Authentic, Verdict> {
    let signed = scheme.read(request).map_err(Verdict::refused)?;
    let verdict = |reason| {
        Err(Verdict {
            reason,
            signed_at: signed.timestamp,
        })
    };

    let given: Vec<(usize, &str)> = secrets
        .iter()
        .enumerate()
        .filter_map(|(i, s)| s.filter(|s| !s.is_empty()).map(|s| (i, s)))
        .collect();
    if given.is_empty() {
        return verdict(Reason::NoSecret);
    }
    if signed.candidates.len() > MAX_CANDIDATES {
        return verdict(Reason::MalformedHeader);
    }
    let mut keys: Vec<(usize, Registered)> = given
        .iter()
        .take(MAX_KEYS)
        .filter_map(|&(i, s)| {
            crate::input::check_for_interrupts();
            scheme.key(s).map(|key| (i, key))
        })
        .collect();
    if keys.is_empty() {
        return verdict(Reason::InvalidSecret);
    }
    if let Some(named) = &signed.key_name {
        keys.retain(|(_, key)| key.name.as_deref() == Some(named.as_str()));
        if keys.is_empty() {
            return verdict(Reason::UnknownCertificate);
        }
    }
    let public_signatures = signed
        .candidates
        .iter()
        .filter(|c| c.method.is_public_key())
        .count();
    let public_keys = keys
        .iter()
        .filter(|(_, key)| !matches!(key.key, Key::Hmac(_)))
        .count();
    if public_signatures * public_keys * signed.prefixes.len().max(1) > MAX_PUBLIC_KEY_CHECKS {
        return verdict(Reason::MalformedHeader);
    }
    let body: &[u8] = if signed.body_signed {
        request.body
    } else {
        &[]
    };
    let found = signed.prefixes.iter().find_map(|prefix| {
        let parts: [&[u8]; 3] = [prefix, body, &signed.suffix];
        keys.iter()
            .find(|(_, key)| {
                crate::input::check_for_interrupts();
                key.key.verifies(&signed.candidates, &parts)
            })
            .map(|(i, _)| (*i, prefix))
    });
    let Some((secret, prefix)) = found else {
        return verdict(Reason::BadSignature);
    };
    match signed.timestamp {
        Some(ts) if ts < now.saturating_sub(tolerance) => verdict(Reason::TimestampTooOld),
        Some(ts) if ts > now.saturating_add(tolerance) => verdict(Reason::TimestampInFuture),
        _ => {
            let prefix = prefix.clone();
            Ok(signed.covering_with(scheme, prefix, secret))
        }
    }
}

/// What a delivery's signature covers *if* it is authentic, read without a
/// secret and without verifying anything: how a database that holds no
/// secrets (the intake tier's proxy, see `route`) tells signed material
/// from unsigned. Where a scheme may sign one of several prefixes
/// (Twilio's URL with and without its default port), the first is taken,
/// so one request always reads the same. Nothing read here is trusted as
/// the signer's until a database with the secrets verifies it.
pub fn claimed(scheme: &Scheme, request: &Request<'_, '_>) -> Result<Authentic, Reason> {
    let mut signed = scheme.read(request)?;
    let prefix = std::mem::take(&mut signed.prefixes)
        .into_iter()
        .next()
        .unwrap_or_default();
    Ok(signed.covering_with(scheme, prefix, 0))
}

impl Signed {
    /// What these signed bytes prove once `prefix` verified under the
    /// secret at index `secret`.
    fn covering_with(self, scheme: &Scheme, prefix: Vec<u8>, secret: usize) -> Authentic {
        Authentic {
            signed_at: self.timestamp,
            prefix,
            body_signed: self.body_signed,
            suffix: self.suffix,
            covered_headers: self.covered_headers,
            covers: scheme.entry().covers,
            secret,
        }
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
/// `sig_key`; other keys are ignored. Signatures that are not 64 lower-case
/// hex digits cannot match and are dropped, but at least one must be
/// usable.
///
/// Read as the providers write it and as their libraries split it: items
/// are not trimmed (` v1=…` after a space is another key, as in Stripe's
/// and Paddle's SDKs), and a second timestamp is malformed (Stripe's
/// Python library reads the first, its Node library the last: a header
/// that two official readers read differently is no header Stripe sent).
fn timestamp_and_signatures(
    header: &str,
    separator: char,
    ts_key: &str,
    sig_key: &str,
) -> Result<(i64, Vec<Vec<u8>>), Reason> {
    let mut timestamp = None;
    let mut candidates = Vec::new();
    for item in header.split(separator) {
        let Some((key, value)) = item.split_once('=') else {
            continue;
        };
        if key == ts_key {
            if timestamp.is_some() {
                return Err(Reason::MalformedHeader);
            }
            timestamp = Some(unix_seconds(value)?);
        } else if key == sig_key {
            candidates.extend(crate::signature::decode_signature_hex(value, 32));
        }
    }
    match (timestamp, candidates.is_empty()) {
        (Some(ts), false) => Ok((ts, candidates)),
        _ => Err(Reason::MalformedHeader),
    }
}

#[cfg(test)]
mod property_tests;
#[cfg(test)]
mod vectors;
