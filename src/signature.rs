//! `verify_hmac`: the one primitive every provider scheme is built on.
//!
//! The comparison is the `hmac` crate's `verify_slice`, which is constant
//! time in the signature: a forger learns nothing from how long a rejection
//! took. The expected digest is never turned into a string and compared.

use crate::errors::{PgResult, Result, WebhookError};
use crate::input;
use base64::Engine;
use hmac::{Hmac, Mac};
use pgrx::prelude::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    Sha1,
    Sha256,
    Sha512,
}

impl Algorithm {
    pub fn parse(name: &str) -> Option<Self> {
        let is = |a: &str, b: &str| name.eq_ignore_ascii_case(a) || name.eq_ignore_ascii_case(b);
        if is("sha256", "sha-256") {
            Some(Self::Sha256)
        } else if is("sha1", "sha-1") {
            Some(Self::Sha1)
        } else if is("sha512", "sha-512") {
            Some(Self::Sha512)
        } else {
            None
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Sha1 => "sha1",
            Self::Sha256 => "sha256",
            Self::Sha512 => "sha512",
        }
    }

    pub fn digest_len(self) -> usize {
        match self {
            Self::Sha1 => 20,
            Self::Sha256 => 32,
            Self::Sha512 => 64,
        }
    }
}

/// Verify `signature` over the raw body bytes.
#[pg_extern(immutable, parallel_safe)]
fn verify_hmac(
    secret: Option<&str>,
    payload: Option<&[u8]>,
    signature: Option<&str>,
    algorithm: default!(Option<&str>, "'sha256'"),
) -> PgResult<bool> {
    Ok(verify_args(secret, payload, signature, algorithm)?)
}

/// Text form: the body's bytes in the database encoding (UTF-8 in practice).
#[pg_extern(immutable, parallel_safe, name = "verify_hmac")]
fn verify_hmac_text(
    secret: Option<&str>,
    payload: Option<&str>,
    signature: Option<&str>,
    algorithm: default!(Option<&str>, "'sha256'"),
) -> PgResult<bool> {
    Ok(verify_args(
        secret,
        payload.map(str::as_bytes),
        signature,
        algorithm,
    )?)
}

fn verify_args(
    secret: Option<&str>,
    payload: Option<&[u8]>,
    signature: Option<&str>,
    algorithm: Option<&str>,
) -> Result<bool> {
    const F: &str = "verify_hmac";
    let secret = input::required(F, "secret", secret)?;
    if secret.is_empty() {
        return Err(WebhookError::EmptyArgument {
            function: F,
            arg: "secret",
        });
    }
    let payload = input::required(F, "payload", payload)?;
    let signature = input::required(F, "signature", signature)?;
    let algorithm = input::required(F, "algorithm", algorithm)?;
    let algorithm = Algorithm::parse(algorithm).ok_or_else(|| WebhookError::UnknownAlgorithm {
        function: F,
        arg: "algorithm",
        given: algorithm.to_string(),
    })?;
    let expected = decode_signature(F, signature, algorithm)?;
    Ok(verify(algorithm, secret.as_bytes(), payload, &expected))
}

/// Constant-time HMAC check of `tag` over `message`.
pub fn verify(algorithm: Algorithm, key: &[u8], message: &[u8], tag: &[u8]) -> bool {
    matches_any(algorithm, key, &[message], std::slice::from_ref(&tag))
}

/// How much of a message is hashed between two interrupt checks: a few
/// milliseconds of SHA-256 even in a debug build.
const CHUNK_BYTES: usize = 64 * 1024;

/// HMAC-SHA256 of the concatenated `parts` under `key`, hashed in slices
/// so that a large body can be cancelled part way.
pub fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    // HMAC accepts keys of any length, so new_from_slice cannot fail; an
    // empty tag would match nothing.
    let Ok(mut mac) = <Hmac<sha2::Sha256> as Mac>::new_from_slice(key) else {
        return Vec::new();
    };
    for part in parts {
        for chunk in part.chunks(CHUNK_BYTES) {
            crate::input::check_for_interrupts();
            mac.update(chunk);
        }
    }
    mac.finalize().into_bytes().to_vec()
}

/// Whether any of `tags` is the HMAC of the concatenated `parts` under
/// `key`. The MAC is computed once; each comparison is the `hmac` crate's
/// constant-time `verify_slice` on a copy of it.
pub fn matches_any<T: AsRef<[u8]>>(
    algorithm: Algorithm,
    key: &[u8],
    parts: &[&[u8]],
    tags: &[T],
) -> bool {
    fn check<M: Mac + hmac::digest::KeyInit + Clone, T: AsRef<[u8]>>(
        key: &[u8],
        parts: &[&[u8]],
        tags: &[T],
    ) -> bool {
        // HMAC accepts keys of any length, so new_from_slice cannot fail.
        let Ok(mut mac) = <M as hmac::digest::KeyInit>::new_from_slice(key) else {
            return false;
        };
        // In slices, so that a large body can be cancelled part way.
        for part in parts {
            for chunk in part.chunks(CHUNK_BYTES) {
                crate::input::check_for_interrupts();
                mac.update(chunk);
            }
        }
        tags.iter()
            .any(|tag| mac.clone().verify_slice(tag.as_ref()).is_ok())
    }
    match algorithm {
        Algorithm::Sha1 => check::<Hmac<sha1::Sha1>, T>(key, parts, tags),
        Algorithm::Sha256 => check::<Hmac<sha2::Sha256>, T>(key, parts, tags),
        Algorithm::Sha512 => check::<Hmac<sha2::Sha512>, T>(key, parts, tags),
    }
}

/// Hex of exactly `len` bytes, in lower case: a provider's signature as
/// the provider writes it. Every provider that signs in hex writes lower
/// case, and its own library compares the hex as text, so an upper-case
/// copy is refused by it; it is refused here too (malformed).
pub fn decode_signature_hex(text: &str, len: usize) -> Option<Vec<u8>> {
    if text.bytes().any(|b| b.is_ascii_uppercase()) {
        return None;
    }
    decode_hex(text, len)
}

/// Hex of exactly `len` bytes, either case.
pub fn decode_hex(text: &str, len: usize) -> Option<Vec<u8>> {
    if text.len() != len * 2 {
        return None;
    }
    hex::decode(text).ok()
}

/// Base64 of exactly `len` bytes: standard or URL-safe alphabet, padded or not.
pub fn decode_base64(text: &str, len: usize) -> Option<Vec<u8>> {
    use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
    [&STANDARD, &STANDARD_NO_PAD, &URL_SAFE, &URL_SAFE_NO_PAD]
        .into_iter()
        .find_map(|engine| engine.decode(text).ok().filter(|bytes| bytes.len() == len))
}

/// Base64 of any length (secrets), same alphabets.
pub fn decode_base64_any(text: &str) -> Option<Vec<u8>> {
    use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
    [&STANDARD, &STANDARD_NO_PAD, &URL_SAFE, &URL_SAFE_NO_PAD]
        .into_iter()
        .find_map(|engine| engine.decode(text).ok())
}

/// Turn a signature as providers send it into digest bytes.
///
/// Accepted: hex (either case) or base64 (standard or URL-safe alphabet,
/// padded or not), optionally behind a `<algorithm>=` prefix such as
/// GitHub's `sha256=`. The digest length of each algorithm tells the two
/// encodings apart without guessing (hex of SHA-256 is 64 characters,
/// base64 is 43 or 44). A prefix naming another algorithm is malformed:
/// it means the caller verifies with the wrong one.
pub fn decode_signature(
    function: &'static str,
    signature: &str,
    algorithm: Algorithm,
) -> Result<Vec<u8>> {
    let malformed = |detail: String| WebhookError::MalformedSignature {
        function,
        arg: "signature",
        detail,
    };
    let trimmed = signature.trim();
    let digest = match trimmed.split_once('=') {
        Some((prefix, rest))
            if !prefix.is_empty()
                && prefix
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-') =>
        {
            match Algorithm::parse(prefix) {
                Some(named) if named == algorithm => rest,
                Some(named) => {
                    return Err(malformed(format!(
                        "The signature is labelled \"{}\" but the algorithm is \"{}\".",
                        named.name(),
                        algorithm.name()
                    )))
                }
                // Not an algorithm label: '=' may be base64 padding.
                None => trimmed,
            }
        }
        _ => trimmed,
    };
    let want = algorithm.digest_len();
    if let Some(bytes) = decode_hex(digest, want).or_else(|| decode_base64(digest, want)) {
        return Ok(bytes);
    }
    Err(malformed(format!(
        "A {} signature is {} hex characters or {} base64 characters; got {} characters.",
        algorithm.name(),
        want * 2,
        want.div_ceil(3) * 4,
        digest.len()
    )))
}

#[cfg(test)]
mod unit_tests {
    use super::*;

    #[test]
    fn hex_and_base64_of_the_same_digest_decode_alike() {
        let digest: Vec<u8> = (0u8..32).collect();
        let hex = hex::encode(&digest);
        let b64 = base64::engine::general_purpose::STANDARD.encode(&digest);
        assert_eq!(
            decode_signature("t", &hex, Algorithm::Sha256).unwrap(),
            digest
        );
        assert_eq!(
            decode_signature("t", &hex.to_uppercase(), Algorithm::Sha256).unwrap(),
            digest
        );
        assert_eq!(
            decode_signature("t", &b64, Algorithm::Sha256).unwrap(),
            digest
        );
        assert_eq!(
            decode_signature("t", b64.trim_end_matches('='), Algorithm::Sha256).unwrap(),
            digest
        );
        assert_eq!(
            decode_signature("t", &format!("sha256={hex}"), Algorithm::Sha256).unwrap(),
            digest
        );
    }

    #[test]
    fn wrong_shapes_are_malformed() {
        for bad in [
            "",
            "zz",
            "sha1=00",
            "sha512=abcd",
            &"a".repeat(63),
            "not base64 at all!!",
        ] {
            assert!(
                decode_signature("t", bad, Algorithm::Sha256).is_err(),
                "{bad:?}"
            );
        }
    }
}
