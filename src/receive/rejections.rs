//! A delivery that cannot be trusted or read is archived as `rejected`
//! with its reason and claims nothing, so forgeries and misconfigurations
//! show up in `webhook.rejected_deliveries` instead of vanishing. Only a
//! bounded prefix of a rejected body is kept, with its size and SHA-256
//! (`webhook.rejected_body_bytes`): a flood of forgeries cannot fill the
//! disk.

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
            signature: request.signature,
            headers: request.headers,
            reason,
        },
    )?;
    Ok(Answer::refused(id, http_status, reason))
}
