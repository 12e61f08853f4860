//! A shared token in a header, the same string the DBA registers as the
//! secret: GitLab's `X-Gitlab-Token`, and any sender that authenticates
//! so, written `token;header=<name>`. Nothing of the request is signed:
//! the token says who sent it, not what it says, and whoever holds it can
//! send any event. So the catalog's entries of this family vouch for
//! nothing in the body (`body_covered none`), there are no signed bytes to
//! bind an id to (`Scheme::signs_nothing`: the id is as the sender gives
//! it, and deduplication by it is the whole protection), and the header is
//! never archived, since its value is the secret (`Scheme::secret_header`).
//!
//! The comparison is the engine's own: the token is made the key of an
//! HMAC of a fixed message, the tag a registered secret's MAC of the same
//! message is then checked against, in constant time like every other
//! MAC. The two agree exactly when the token is the secret.

use super::{Headers, Reason, Signed};
use crate::errors::WebhookError;
use crate::signature::{self, Algorithm};

/// What the tag is a MAC of: any fixed bytes do.
pub const PREFIX: &[u8] = b"pg_webhook_inbox shared token\n";

/// The longest token read; a longer header is malformed, not hashed.
pub const MAX_TOKEN_BYTES: usize = 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedToken {
    header: String,
}

impl SharedToken {
    /// `token;header=<name>`, the generic HMAC's option grammar.
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
        for option in super::generic::options(spec) {
            let (key, value) = option.map_err(bad)?;
            match key.as_str() {
                "header" if !value.trim().is_empty() => header = Some(value.trim().to_string()),
                other => return Err(bad(format!("unknown option \"{other}\""))),
            }
        }
        let header = header.ok_or_else(|| bad("the header option is required".into()))?;
        Ok(SharedToken { header })
    }

    pub fn header(&self) -> &str {
        &self.header
    }

    pub fn read(&self, headers: &Headers<'_>) -> Result<Signed, Reason> {
        let token = headers.get(&self.header)?;
        if token.is_empty() || token.len() > MAX_TOKEN_BYTES {
            return Err(Reason::MalformedHeader);
        }
        let tag = signature::hmac_sha256(token.as_bytes(), &[PREFIX]);
        Ok(Signed::hmac(Algorithm::Sha256, vec![tag])
            .prefix(PREFIX)
            .without_body())
    }
}

#[cfg(test)]
mod tests {
    use super::super::{verify, Reason, Scheme};
    use serde_json::json;

    /// The header equal to the secret verifies, whatever the body; any
    /// other token, an empty or an overlong one does not, and every
    /// secret of a rotation is tried.
    #[test]
    fn the_token_is_compared_with_each_secret() {
        let scheme = Scheme::parse("t", "scheme", "gitlab").unwrap();
        let check = |token: &str, body: &[u8], secrets: &[Option<&str>]| {
            verify(
                &scheme,
                &json!({ "X-Gitlab-Token": token }),
                body,
                None,
                secrets,
                0,
                0,
            )
            .reason
        };
        let secret = Some("glpat-secret-token");
        assert_eq!(check("glpat-secret-token", b"{}", &[secret]), Reason::Ok);
        assert_eq!(check("glpat-secret-token", b"[1]", &[secret]), Reason::Ok);
        assert_eq!(
            check("glpat-secret-token", b"{}", &[Some("old"), None, secret]),
            Reason::Ok
        );
        assert_eq!(
            check("glpat-secret-tokeN", b"{}", &[secret]),
            Reason::BadSignature
        );
        // A header's value is read as HTTP defines it, without the
        // whitespace around it.
        assert_eq!(check(" glpat-secret-token ", b"{}", &[secret]), Reason::Ok);
        assert_eq!(check("", b"{}", &[secret]), Reason::MalformedHeader);
        let long = "t".repeat(super::MAX_TOKEN_BYTES + 1);
        assert_eq!(check(&long, b"{}", &[Some(&long)]), Reason::MalformedHeader);
        let most = "t".repeat(super::MAX_TOKEN_BYTES);
        assert_eq!(check(&most, b"{}", &[Some(&most)]), Reason::Ok);
        assert_eq!(
            verify(&scheme, &json!({}), b"{}", None, &[secret], 0, 0).reason,
            Reason::MissingHeader
        );
        assert_eq!(scheme.signature_headers(), Vec::<&str>::new());
        assert_eq!(scheme.secret_header(), Some("X-Gitlab-Token"));
    }

    #[test]
    fn its_options_are_read_as_the_generic_hmacs() {
        let scheme = Scheme::parse("t", "scheme", "token;header= X-Hook-Token ").unwrap();
        assert_eq!(scheme.secret_header(), Some("X-Hook-Token"));
        for (spec, detail) in [
            ("token", "the header option is required"),
            ("token;header=", "unknown option \"header\""),
            ("token;prefix=x", "unknown option \"prefix\""),
            ("token;header", "is not key=value"),
        ] {
            let err = match Scheme::parse("f", "scheme", spec) {
                Err(crate::errors::WebhookError::BadSchemeOption { detail, .. }) => detail,
                other => panic!("{spec}: {other:?}"),
            };
            assert!(err.contains(detail), "{spec}: {err}");
        }
    }
}
