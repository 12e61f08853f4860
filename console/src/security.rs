//! What keeps the console safe when it is reachable: optional basic
//! authentication, a CSRF token on every form, and headers that forbid
//! scripts, framing and sniffing. Who may *do* what is not decided here:
//! the console connects as the role it was given, and the database refuses
//! what that role may not do.

use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Secrets of this process, made at start: the CSRF key never leaves it.
pub struct Guard {
    csrf_key: [u8; 32],
    /// `user:password` for basic authentication, if required.
    basic: Option<(String, String)>,
}

/// Compare two byte strings in time that depends on their lengths only.
pub fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Guard {
    pub fn new(basic: Option<(String, String)>) -> Self {
        let mut csrf_key = [0u8; 32];
        getrandom::getrandom(&mut csrf_key).expect("the system's random source");
        Guard { csrf_key, basic }
    }

    #[cfg(test)]
    pub fn with_key(csrf_key: [u8; 32], basic: Option<(String, String)>) -> Self {
        Guard { csrf_key, basic }
    }

    /// Whether a request's `Authorization` header lets it in. Without basic
    /// authentication configured, every request does (the console then
    /// listens on 127.0.0.1 unless told otherwise).
    pub fn admits(&self, authorization: Option<&str>) -> bool {
        let Some((user, password)) = &self.basic else {
            return true;
        };
        let Some(encoded) = authorization.and_then(|h| h.strip_prefix("Basic ")) else {
            return false;
        };
        let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(encoded.trim()) else {
            return false;
        };
        let expected = format!("{user}:{password}");
        same(&decoded, expected.as_bytes())
    }

    /// The token every form carries: a MAC of this process's key, so that
    /// another site's page cannot know it, and a form posted from
    /// anywhere else is refused.
    pub fn csrf_token(&self) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.csrf_key).expect("any key length");
        mac.update(b"pg_webhook_inbox console form");
        hex::encode(mac.finalize().into_bytes())
    }

    pub fn csrf_valid(&self, token: Option<&str>) -> bool {
        token.is_some_and(|t| same(t.as_bytes(), self.csrf_token().as_bytes()))
    }
}

/// Headers on every answer: no script may run (the console has none), no
/// other site may frame it, forms post only to it, nothing is sniffed and
/// no referrer leaks an event id.
pub const HEADERS: &[(&str, &str)] = &[
    (
        "content-security-policy",
        "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; \
         frame-ancestors 'none'; base-uri 'none'",
    ),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    ("x-frame-options", "DENY"),
    ("cache-control", "no-store"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_authentication_takes_only_the_configured_pair() {
        let guard = Guard::with_key([7; 32], Some(("oncall".into(), "s3cret".into())));
        let header = |s: &str| {
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(s)
            )
        };
        assert!(guard.admits(Some(&header("oncall:s3cret"))));
        assert!(!guard.admits(Some(&header("oncall:s3cre"))));
        assert!(!guard.admits(Some(&header("oncall:s3cret2"))));
        assert!(!guard.admits(Some("Basic !!!")));
        assert!(!guard.admits(Some("Bearer x")));
        assert!(!guard.admits(None));
        assert!(Guard::with_key([7; 32], None).admits(None));
    }

    #[test]
    fn a_form_token_is_this_processs_own() {
        let one = Guard::with_key([1; 32], None);
        let other = Guard::with_key([2; 32], None);
        assert!(one.csrf_valid(Some(&one.csrf_token())));
        assert!(!one.csrf_valid(Some(&other.csrf_token())));
        assert!(!one.csrf_valid(Some("")));
        assert!(!one.csrf_valid(None));
    }

    #[test]
    fn comparison_needs_every_byte() {
        assert!(same(b"abc", b"abc"));
        assert!(!same(b"abc", b"abd"));
        assert!(!same(b"abc", b"ab"));
    }
}
