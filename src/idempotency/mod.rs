//! Idempotency keys, in both directions.
//!
//! * `outbound` — `webhook_outbound_key`: the key a handler sends with an
//!   external call it makes while processing an event. Derived from the
//!   event and an operation name, so every attempt of the same event sends
//!   the same key and the provider of that API (Stripe, an email service)
//!   performs the call once.
//! * `requests` — `idempotency_begin`, `idempotency_checkpoint`,
//!   `idempotency_finish`, `idempotency_fail`: Stripe-style keys for the
//!   application's own HTTP API. A client retrying a POST with the same
//!   `Idempotency-Key` gets the first answer back (or 409 while the first
//!   is still running, or 422 if the key came with another request), and a
//!   multi-step request resumes from its last recovery point after a
//!   crash. The design follows brandur's "Implementing Stripe-like
//!   Idempotency Keys in Postgres"; the answers follow the IETF draft "The
//!   Idempotency-Key HTTP Header Field".
//!
//! The key rows live in `webhook.idempotency_keys` (sql/schema.sql);
//! `idempotency_purge` (sql/operations.sql) expires them.

pub mod outbound;
pub(crate) mod requests;

use sha2::{Digest, Sha256};

/// SHA-256 over `parts`, each prefixed with its length: no two different
/// lists of parts hash the same bytes, whatever the parts contain.
fn digest_of(parts: &[&[u8]]) -> [u8; 32] {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part);
    }
    hasher.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::digest_of;

    #[test]
    fn parts_are_delimited_by_their_lengths() {
        assert_ne!(digest_of(&[b"ab", b"c"]), digest_of(&[b"a", b"bc"]));
        assert_ne!(digest_of(&[b"abc"]), digest_of(&[b"abc", b""]));
        assert_eq!(digest_of(&[b"a", b"b"]), digest_of(&[b"a", b"b"]));
    }
}
