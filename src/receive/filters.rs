//! Filters on signed fields (`webhook.filters`, sql/filters.sql): whether
//! the provider takes a verified delivery's event, and which of its inbox
//! consumers do.
//!
//! Only what the delivery's signature covers is judged. A filter's event
//! types are compared only with a signed event type, its JSON path only
//! with a body the signature vouches for; `webhook_set_filter` refuses
//! filters that would read anything else, and a filter that reads what
//! this delivery does not sign (the provider registered again, with
//! another scheme or source, since) takes the event: dropping it on a
//! sender's word is what filters must never do.

use crate::errors::Result;
use crate::jsonb::RawJsonb;
use crate::plans::Statement;
use crate::registry;
use crate::sources::Sourced;
use pgrx::pg_sys;
use pgrx::spi::SpiClient;

/// What the filters say of one delivery, where any does not take it.
pub struct Verdict {
    /// Why the provider's own filter does not take the event; None: it
    /// does, or it has none.
    pub event: Option<String>,
    /// The inbox consumers whose filter does not take it, with why.
    pub consumers: Vec<(String, String)>,
}

/// Each filter of the provider, with why it does not take the event (NULL:
/// it does). $4, $5: whether the event type and the body are signed.
static JUDGE: Statement = Statement {
    sql: "SELECT f.consumer,
                 CASE WHEN $4 AND f.event_types IS NOT NULL AND NOT $2 = ANY (f.event_types)
                          THEN pg_catalog.format('event type %s is not among the filter''s event_types', $2)
                      WHEN $5 AND f.payload_path IS NOT NULL
                           AND NOT coalesce(pg_catalog.jsonb_path_match($3, f.payload_path, '{}', true), false)
                          THEN pg_catalog.format('the body does not match the filter''s payload_path %s',
                                                 f.payload_path)
                 END
            FROM webhook.filters f
           WHERE f.provider = $1",
    arg_types: &[
        pg_sys::TEXTOID,
        pg_sys::TEXTOID,
        pg_sys::JSONBOID,
        pg_sys::BOOLOID,
        pg_sys::BOOLOID,
    ],
};

/// Judge a verified delivery of `provider`. None: every filter takes it
/// (or the provider has none, which costs a look at the registry's cache).
pub fn judge(
    client: &mut SpiClient<'_>,
    provider: &str,
    event_type: &Sourced,
    body_signed: bool,
    payload: RawJsonb,
) -> Result<Option<Verdict>> {
    if !registry::has_filter(client, provider)? {
        return Ok(None);
    }
    let mut verdict = Verdict {
        event: None,
        consumers: Vec::new(),
    };
    for row in JUDGE.run(
        client,
        &[
            provider.into(),
            event_type.value.as_str().into(),
            payload.into(),
            event_type.signed.into(),
            body_signed.into(),
        ],
    )? {
        let consumer = row.get::<String>(1)?.unwrap_or_default();
        let Some(reason) = row.get::<String>(2)? else {
            continue;
        };
        if consumer.is_empty() {
            verdict.event = Some(reason);
        } else {
            verdict.consumers.push((consumer, reason));
        }
    }
    Ok((verdict.event.is_some() || !verdict.consumers.is_empty()).then_some(verdict))
}
