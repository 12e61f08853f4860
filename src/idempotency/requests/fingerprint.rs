//! `idempotency_fingerprint`: what makes two requests the same request.

use super::MAX_METHOD_BYTES;
use crate::errors::{PgResult, Result};
use crate::input;
use pgrx::prelude::*;

/// A hash of what makes two requests "the same request" for a key: the
/// method, the path and the body. Send it as `idempotency_begin`'s
/// fingerprint, or compute one of your own (a canonical form of the
/// parameters that matter).
#[pg_extern(immutable, parallel_safe, name = "idempotency_fingerprint")]
fn fingerprint_bytes(
    method: Option<&str>,
    path: Option<&str>,
    body: default!(Option<&[u8]>, "NULL"),
) -> PgResult<String> {
    Ok(fingerprint(method, path, body.unwrap_or_default())?)
}

/// `idempotency_fingerprint` for a body passed as text.
#[pg_extern(immutable, parallel_safe, name = "idempotency_fingerprint")]
fn fingerprint_text(
    method: Option<&str>,
    path: Option<&str>,
    body: Option<&str>,
) -> PgResult<String> {
    Ok(fingerprint(
        method,
        path,
        body.unwrap_or_default().as_bytes(),
    )?)
}

fn fingerprint(method: Option<&str>, path: Option<&str>, body: &[u8]) -> Result<String> {
    const F: &str = "idempotency_fingerprint";
    let method = input::required_text(F, "method", method, MAX_METHOD_BYTES)?.to_ascii_uppercase();
    let path = input::required_text(F, "path", path, input::MAX_URL_BYTES)?;
    let digest = crate::idempotency::digest_of(&[
        b"pg_webhook_inbox request fingerprint v1",
        method.as_bytes(),
        path.as_bytes(),
        body,
    ]);
    Ok(format!("sha256:{}", hex::encode(digest)))
}

#[cfg(test)]
mod tests {
    use super::fingerprint;

    #[test]
    fn fingerprints_cover_method_path_and_body() {
        let base = fingerprint(Some("POST"), Some("/orders"), b"{}").unwrap();
        assert_eq!(
            base,
            fingerprint(Some("post"), Some("/orders"), b"{}").unwrap()
        );
        assert_ne!(
            base,
            fingerprint(Some("PUT"), Some("/orders"), b"{}").unwrap()
        );
        assert_ne!(
            base,
            fingerprint(Some("POST"), Some("/orders/1"), b"{}").unwrap()
        );
        assert_ne!(
            base,
            fingerprint(Some("POST"), Some("/orders"), b"{ }").unwrap()
        );
        assert!(base.starts_with("sha256:") && base.len() == 71);
    }
}
