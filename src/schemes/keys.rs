//! What a delivery is verified with: a shared HMAC secret, or, for the
//! providers that sign with a private key, their public key or
//! certificate. Each scheme says which a registered secret is
//! (`Scheme::key`), by the provider's own published format, never by
//! guessing from the text.
//!
//! Public-key checks use the RustCrypto implementations (`ed25519-dalek`,
//! `p256`, `rsa`, `x509-cert`): signature verification is public data
//! against public data, so there is no secret to leak through timing; MAC
//! comparisons stay in `signature::matches_any`, constant time.

use crate::signature::{self, Algorithm};
use base64::Engine;

/// How one signature in a request is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Hmac(Algorithm),
    /// Ed25519 (RFC 8032), a 64-byte signature.
    Ed25519,
    /// ECDSA over P-256 with SHA-256, the signature DER-encoded.
    EcdsaP256,
    /// RSASSA-PKCS1-v1_5 with SHA-256.
    RsaSha256,
}

impl Method {
    /// A public-key signature: each check costs about a hundred HMACs.
    pub fn is_public_key(self) -> bool {
        !matches!(self, Method::Hmac(_))
    }
}

/// One signature a request carries, and how to check it.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub method: Method,
    pub signature: Vec<u8>,
}

impl Candidate {
    pub fn hmac(algorithm: Algorithm, signature: Vec<u8>) -> Self {
        Candidate {
            method: Method::Hmac(algorithm),
            signature,
        }
    }
}

pub enum Key {
    Hmac(Vec<u8>),
    Ed25519(ed25519_dalek::VerifyingKey),
    P256(p256::ecdsa::VerifyingKey),
    Rsa(rsa::pkcs1v15::VerifyingKey<sha2::Sha256>),
}

/// A secret as a scheme reads it: the key, and the name deliveries give it
/// when they say which key signed them (PayPal's certificate URL).
pub struct Registered {
    pub key: Key,
    pub name: Option<String>,
}

impl From<Key> for Registered {
    fn from(key: Key) -> Self {
        Registered { key, name: None }
    }
}

impl Key {
    /// Whether any candidate of this key's kind is a signature of the
    /// concatenated `parts`.
    pub fn verifies(&self, candidates: &[Candidate], parts: &[&[u8]]) -> bool {
        let of = |method: Method| {
            candidates
                .iter()
                .filter(move |c| c.method == method)
                .map(|c| c.signature.as_slice())
        };
        match self {
            Key::Hmac(key) => [Algorithm::Sha1, Algorithm::Sha256, Algorithm::Sha512]
                .into_iter()
                .any(|algorithm| {
                    let tags: Vec<&[u8]> = of(Method::Hmac(algorithm)).collect();
                    !tags.is_empty() && signature::matches_any(algorithm, key, parts, &tags)
                }),
            Key::Ed25519(key) => {
                let message = parts.concat();
                of(Method::Ed25519).any(|sig| {
                    ed25519_dalek::Signature::from_slice(sig)
                        .is_ok_and(|sig| key.verify_strict(&message, &sig).is_ok())
                })
            }
            Key::P256(key) => {
                use p256::ecdsa::signature::Verifier;
                let message = parts.concat();
                of(Method::EcdsaP256).any(|sig| {
                    p256::ecdsa::Signature::from_der(sig)
                        .is_ok_and(|sig| key.verify(&message, &sig).is_ok())
                })
            }
            Key::Rsa(key) => {
                use rsa::signature::Verifier;
                let message = parts.concat();
                of(Method::RsaSha256).any(|sig| {
                    rsa::pkcs1v15::Signature::try_from(sig)
                        .is_ok_and(|sig| key.verify(&message, &sig).is_ok())
                })
            }
        }
    }
}

/// A raw 32-byte Ed25519 public key.
pub fn ed25519(bytes: &[u8]) -> Option<Key> {
    let bytes: [u8; 32] = bytes.try_into().ok()?;
    ed25519_dalek::VerifyingKey::from_bytes(&bytes)
        .ok()
        .map(Key::Ed25519)
}

/// A P-256 public key as a DER SubjectPublicKeyInfo, in base64 (how
/// SendGrid shows it) or PEM.
pub fn p256_public_key(text: &str) -> Option<Key> {
    use p256::pkcs8::DecodePublicKey;
    let der = pem_or_base64(text, "PUBLIC KEY")?;
    p256::ecdsa::VerifyingKey::from_public_key_der(&der)
        .ok()
        .map(Key::P256)
}

/// An RSA public key taken from a PEM X.509 certificate. Only the key is
/// used: the DBA who registered the certificate vouched for it.
pub fn rsa_certificate(pem: &str) -> Option<Key> {
    use rsa::pkcs8::DecodePublicKey;
    use x509_cert::der::{DecodePem, Encode};
    let certificate = x509_cert::Certificate::from_pem(pem.trim().as_bytes()).ok()?;
    let spki = certificate
        .tbs_certificate
        .subject_public_key_info
        .to_der()
        .ok()?;
    let key = rsa::RsaPublicKey::from_public_key_der(&spki).ok()?;
    Some(Key::Rsa(rsa::pkcs1v15::VerifyingKey::new(key)))
}

/// A certificate registered under the URL deliveries name it by (PayPal's
/// `PAYPAL-CERT-URL`, SNS's `SigningCertURL`): the URL on the first line,
/// then the PEM certificate.
pub fn certificate_under_url(secret: &str) -> Option<Registered> {
    let start = secret.find("-----BEGIN")?;
    let name = secret[..start].trim();
    if name.is_empty() {
        return None;
    }
    rsa_certificate(&secret[start..]).map(|key| Registered {
        key,
        name: Some(name.to_string()),
    })
}

/// The DER inside `-----BEGIN <label>-----` armour, or bare base64.
fn pem_or_base64(text: &str, label: &str) -> Option<Vec<u8>> {
    let text = text.trim();
    let inner = match text.strip_prefix(&format!("-----BEGIN {label}-----")) {
        Some(rest) => rest.split(&format!("-----END {label}-----")).next()?,
        None => text,
    };
    let compact: String = inner.split_ascii_whitespace().collect();
    base64::engine::general_purpose::STANDARD
        .decode(compact)
        .ok()
        .filter(|der| !der.is_empty())
}

/// Project Wycheproof's vectors through `Key::verifies`, the check every
/// public-key delivery takes: each valid signature verified, each invalid
/// one refused. The portable edition is held to the same vectors, and to
/// this code's answer on the acceptable ones (tests/public_key_vectors.rs).
#[cfg(test)]
mod wycheproof_vectors {
    use super::*;
    use wycheproof::TestResult;

    fn expect(what: String, result: TestResult, verified: bool) {
        match result {
            TestResult::Valid => assert!(verified, "{what}: a valid signature refused"),
            TestResult::Invalid => assert!(!verified, "{what}: an invalid signature accepted"),
            TestResult::Acceptable => {}
        }
    }

    fn verifies(key: Option<&Key>, method: Method, signature: &[u8], message: &[u8]) -> bool {
        key.is_some_and(|key| {
            key.verifies(
                &[Candidate {
                    method,
                    signature: signature.to_vec(),
                }],
                &[message],
            )
        })
    }

    #[test]
    fn ed25519_strict() {
        let set = wycheproof::eddsa::TestSet::load(wycheproof::eddsa::TestName::Ed25519).unwrap();
        for group in &set.test_groups {
            let key = super::ed25519(&group.key.pk);
            for t in &group.tests {
                let ok = verifies(key.as_ref(), Method::Ed25519, &t.sig, &t.msg);
                expect(
                    format!("Ed25519 #{} ({})", t.tc_id, t.comment),
                    t.result,
                    ok,
                );
            }
        }
    }

    #[test]
    fn ecdsa_p256_sha256() {
        use wycheproof::ecdsa::{TestName, TestSet};
        let set = TestSet::load(TestName::EcdsaSecp256r1Sha256).unwrap();
        for group in &set.test_groups {
            let der = base64::engine::general_purpose::STANDARD.encode(&group.der[..]);
            let key = p256_public_key(&der);
            assert!(key.is_some(), "every group's key is read");
            for t in &group.tests {
                let ok = verifies(key.as_ref(), Method::EcdsaP256, &t.sig, &t.msg);
                expect(
                    format!("ECDSA P-256 #{} ({})", t.tc_id, t.comment),
                    t.result,
                    ok,
                );
            }
        }
    }

    #[test]
    fn rsa_pkcs1v15_2048_sha256() {
        use rsa::pkcs8::DecodePublicKey;
        use wycheproof::rsa_pkcs1_verify::{TestName, TestSet};
        let set = TestSet::load(TestName::Rsa2048Sha256).unwrap();
        for group in &set.test_groups {
            let key = rsa::RsaPublicKey::from_public_key_der(&group.der)
                .ok()
                .map(|key| Key::Rsa(rsa::pkcs1v15::VerifyingKey::new(key)));
            for t in &group.tests {
                let ok = verifies(key.as_ref(), Method::RsaSha256, &t.sig, &t.msg);
                expect(
                    format!("RSA-2048 #{} ({})", t.tc_id, t.comment),
                    t.result,
                    ok,
                );
            }
        }
    }
}
