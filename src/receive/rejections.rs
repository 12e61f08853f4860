//! A delivery that cannot be trusted or read is archived as `rejected`
//! with its reason and claims nothing, so forgeries and misconfigurations
//! show up in `webhook.rejected_deliveries` instead of vanishing. What a
//! rejection stores is bounded: a prefix of the body, with its size and
//! SHA-256 (`webhook.rejected_body_bytes`), headers of a real request's size
//! at most, and a signature of a real one's: a flood of forgeries cannot
//! fill the disk.

use super::answer::Answer;
use crate::archive::{self, Rejection};
use crate::errors::Result;
use crate::jsonb::RawJsonb;
use pgrx::spi::SpiClient;

/// The request as far as it was read: what a rejection archives.
pub struct Request<'a> {
    pub provider: &'a str,
    pub body: &'a [u8],
    pub signature: Option<&'a str>,
    /// As archived (see `headers`); None until they parsed.
    pub headers: Option<RawJsonb>,
    /// Once verified: the fingerprint of the key that did it.
    pub verified_by: Option<&'a str>,
}

/// The most header bytes a rejection keeps: a real request's are a few
/// kilobytes. Larger, none are kept.
const MAX_REJECTED_HEADER_BYTES: usize = 8 * 1024;

/// The longest signature a rejection keeps (an RSA-4096 one in base64 is
/// 684 characters). Longer, none is kept.
const MAX_REJECTED_SIGNATURE_BYTES: usize = 1024;

/// Archive the request as rejected for `reason`, and answer `http_status`.
/// `event_id`: the id it claimed to carry, when it was read (a replay's).
pub fn reject(
    client: &mut SpiClient<'_>,
    request: &Request<'_>,
    http_status: i32,
    reason: &'static str,
    event_id: Option<&str>,
) -> Result<Answer> {
    let id = crate::uuid::new_v7();
    archive::record_rejection(
        client,
        Rejection {
            id,
            provider: request.provider,
            event_id,
            body: request.body,
            kept: crate::gucs::rejected_body_bytes(),
            signature: request
                .signature
                .filter(|s| s.len() <= MAX_REJECTED_SIGNATURE_BYTES),
            headers: request
                .headers
                .filter(|h| h.size() <= MAX_REJECTED_HEADER_BYTES),
            reason,
        },
    )?;
    Ok(Answer::refused(id, http_status, reason))
}
