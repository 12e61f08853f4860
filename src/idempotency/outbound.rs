//! `webhook_outbound_key`: a stable idempotency key for an external call
//! made while processing an event.
//!
//! A handler that charges a card or sends an email while processing an
//! event may run more than once for that event: its transaction can fail
//! after the call, its lease can run out, the provider can redeliver. Sent
//! with the same key every time, the call happens once. Keys made from a
//! clock or a random number (`checkout-${orderId}-${Date.now()}`) differ
//! on every attempt and defeat this; keys made by hand from the event id
//! alone collide when one event makes two different calls. This key is a
//! digest of the provider, the event id and the operation, so:
//!
//! * every attempt of the same event and operation gets the same key,
//!   whichever delivery, claim or inbox lease the handler holds;
//! * different events or operations get different keys;
//! * it is 68 ASCII characters (`whk_` and 64 hex digits), inside every
//!   provider's limit (Stripe's is 255) and safe in any header.

use crate::errors::{PgResult, Result, WebhookError};
use crate::input::{self, MAX_EVENT_ID_BYTES, MAX_PROVIDER_BYTES};
use crate::plans::Statement;
use pgrx::pg_sys;
use pgrx::prelude::*;

const FUNCTION: &str = "webhook_outbound_key";

/// Longest operation name: a label, not a payload.
pub const MAX_OPERATION_BYTES: usize = 255;

/// The key for `operation` of the event that claim, delivery or lease `id`
/// belongs to (any attempt's).
#[pg_extern(stable, security_definer, parallel_safe, name = "webhook_outbound_key")]
#[search_path(pg_catalog, pg_temp)]
fn outbound_key_of_claim(id: Option<pgrx::Uuid>, operation: Option<&str>) -> PgResult<String> {
    let id = input::required(FUNCTION, "id", id)?;
    let operation = input::required_text(FUNCTION, "operation", operation, MAX_OPERATION_BYTES)?;
    let (provider, event_id) = Spi::connect_mut(|client| event_of(client, id))?;
    Ok(key(&provider, &event_id, operation))
}

/// The key for `operation` of the event `event_id` from `provider`.
#[pg_extern(immutable, parallel_safe, name = "webhook_outbound_key")]
fn outbound_key_of_event(
    provider: Option<&str>,
    event_id: Option<&str>,
    operation: Option<&str>,
) -> PgResult<String> {
    let provider = input::required_text(FUNCTION, "provider", provider, MAX_PROVIDER_BYTES)?;
    let event_id = input::required_text(FUNCTION, "event_id", event_id, MAX_EVENT_ID_BYTES)?;
    let operation = input::required_text(FUNCTION, "operation", operation, MAX_OPERATION_BYTES)?;
    Ok(key(provider, event_id, operation))
}

pub fn key(provider: &str, event_id: &str, operation: &str) -> String {
    // The tag versions the derivation: a different one later must not
    // repeat (or collide with) the keys handed out by this one.
    let digest = super::digest_of(&[
        b"pg_webhook_inbox outbound key v1",
        provider.as_bytes(),
        event_id.as_bytes(),
        operation.as_bytes(),
    ]);
    format!("whk_{}", hex::encode(digest))
}

/// Which event `id` belongs to: a delivery (every claim's id is its
/// delivery's), the current lease of an inbox row, or an earlier lease
/// that failed or ran out. (A claim's archive row is purged only long
/// after its processing ended.)
static EVENT_OF: Statement = Statement {
    sql: "SELECT provider, event_id FROM webhook.delivery_log
           WHERE id = $1 AND event_id IS NOT NULL
          UNION ALL
          SELECT provider, event_id FROM webhook.inbox WHERE claim_id = $1
          UNION ALL
          SELECT provider, event_id FROM webhook.inbox_failures WHERE claim_id = $1
          LIMIT 1",
    arg_types: &[pg_sys::UUIDOID],
};

fn event_of(client: &mut pgrx::spi::SpiClient<'_>, id: pgrx::Uuid) -> Result<(String, String)> {
    let unknown = || WebhookError::UnknownDelivery {
        function: FUNCTION,
        id: id.to_string(),
    };
    let row = EVENT_OF
        .run_pruned(client, &[id.into()])?
        .next()
        .ok_or_else(unknown)?;
    Ok((
        row.get::<String>(1)?.ok_or_else(unknown)?,
        row.get::<String>(2)?.ok_or_else(unknown)?,
    ))
}

#[cfg(test)]
mod tests {
    use super::key;

    #[test]
    fn same_event_and_operation_same_key() {
        assert_eq!(
            key("stripe", "evt_1", "charge"),
            key("stripe", "evt_1", "charge")
        );
    }

    #[test]
    fn any_change_changes_the_key() {
        let base = key("stripe", "evt_1", "charge");
        assert_ne!(base, key("stripe", "evt_2", "charge"));
        assert_ne!(base, key("stripe", "evt_1", "refund"));
        assert_ne!(base, key("paddle", "evt_1", "charge"));
        // The boundaries between the parts count.
        assert_ne!(key("a", "bc", "d"), key("ab", "c", "d"));
    }

    #[test]
    fn fits_every_providers_limit() {
        let long = "x".repeat(255);
        let k = key(&long, &long, &long);
        assert_eq!(k.len(), 68);
        assert!(k.starts_with("whk_"));
        assert!(k[4..].bytes().all(|b| b.is_ascii_hexdigit()));
    }
}
