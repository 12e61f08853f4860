//! Endpoint checks (Slack's `url_verification`, Zoom's URL validation, …):
//! verified like any delivery, then archived as a handshake, with no
//! event, and answered with what the provider expects.

use super::answer::Answer;
use super::rejections::Request;
use crate::archive;
use crate::claim::Outcome;
use crate::errors::Result;
use crate::jsonb::RawJsonb;
use crate::registry::Provider;
use crate::schemes::handshake;
use crate::status::ClaimStatus;
use pgrx::spi::SpiClient;

/// The handshake this verified request is, if it is one. `secret`: the
/// index of the provider's secret that verified it (Zoom answers with an
/// HMAC under it).
pub fn recognise(
    provider: &Provider,
    secret: usize,
    body: &serde_json::Value,
) -> Option<handshake::Handshake> {
    let key = provider
        .secrets
        .get(secret)
        .and_then(Option::as_deref)
        .and_then(|secret| provider.scheme.hmac_key(secret));
    handshake::recognise(&provider.scheme, body, key.as_deref())
}

/// Archive a verified handshake and answer it.
pub fn answer(
    client: &mut SpiClient<'_>,
    request: &Request<'_>,
    payload: RawJsonb,
    handshake: handshake::Handshake,
) -> Result<Answer> {
    let id = crate::uuid::new_v7();
    archive::record_handshake(
        client,
        archive::Handshake {
            id,
            provider: request.provider,
            kind: handshake.kind,
            payload,
            raw_body: request.body,
            signature: request.signature,
            headers: request.headers,
            verified_by: request.verified_by,
        },
    )?;
    Ok(Answer {
        outcome: Outcome {
            id,
            status: ClaimStatus::Handshake,
            attempts: 0,
            result: None,
            tie: false,
        },
        http_status: 200,
        reason: "handshake",
        event_id: None,
        event_type: Some(handshake.kind.to_string()),
        event_type_signed: Some(true),
        response: Some((handshake.response, handshake.content_type)),
    })
}
