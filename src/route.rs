//! Where a delivery lives when the intake tier is split across databases
//! (docs/scale-out.md): its route key, its slot, and the slot its ids
//! carry.
//!
//! The route key is read from **signed material only**, without a secret,
//! so a proxy that holds none can compute it and a sender cannot choose
//! it:
//!
//! 1. the **entity key**, for a provider registered with ordering, so that
//!    one entity's watermark and FIFO line live in one database;
//! 2. else the **event id, where the scheme signs it**, or where it signs
//!    nothing at all (a shared token: its holder may send any id anyway);
//! 3. else the **SHA-256 of the signed bytes**, so that a replay of them
//!    under a fresh unsigned id lands where the first delivery did and
//!    meets its binding (`receive`'s bindings).
//!
//! A delivery none of these can be read from (malformed headers, a body
//! that is not the provider's) routes by the SHA-256 of its body: its
//! refusal is archived in one place too.
//!
//! The slot is the first four bytes of SHA-256(provider, newline, key) as a
//! big-endian `int4`, masked to the number of slots (a power of two): the
//! same `hash & (n - 1)` PL/Proxy applies to `RUN ON`'s value. SQL's
//! `webhook_route_hash` and the examples compute the same; the tests hold
//! all of them to it.
//!
//! A database holding one slot is told so by `webhook.slot` and
//! `webhook.slots` (`webhook_set_slot`): it stamps its slot into every id
//! it makes (`uuid`), so finishing calls route by the id alone, and it
//! refuses a delivery that routes elsewhere, which a stale cluster map
//! would otherwise split from its duplicates.

use crate::errors::{Result, WebhookError};
use crate::schemes::{self, Headers, Scheme};
use pgrx::prelude::*;
use sha2::{Digest, Sha256};

/// What a delivery routes by; its text form is `webhook_route_key`'s.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteKey {
    Entity(String),
    Event(String),
    Signed([u8; 32]),
    /// Nothing signed could be read: the body's digest.
    Unreadable([u8; 32]),
}

impl RouteKey {
    pub fn text(&self) -> String {
        match self {
            RouteKey::Entity(key) => format!("entity:{key}"),
            RouteKey::Event(id) => format!("event:{id}"),
            RouteKey::Signed(digest) => format!("signed:{}", hex::encode(digest)),
            RouteKey::Unreadable(digest) => format!("body:{}", hex::encode(digest)),
        }
    }
}

/// How a provider is registered, as far as routing needs it.
pub struct Registration<'a> {
    pub scheme: &'a Scheme,
    pub event_id_from: &'a str,
    /// Registered with ordering: where the entity key is.
    pub entity_key_from: Option<&'a str>,
}

/// A delivery's route key (see the module's rule).
pub fn key(
    registration: &Registration<'_>,
    headers: &serde_json::Value,
    body: &[u8],
    url: Option<&str>,
) -> RouteKey {
    signed_key(registration, headers, body, url)
        .unwrap_or_else(|| RouteKey::Unreadable(Sha256::digest(body).into()))
}

fn signed_key(
    registration: &Registration<'_>,
    headers: &serde_json::Value,
    body: &[u8],
    url: Option<&str>,
) -> Option<RouteKey> {
    let headers = Headers::from_json(headers).ok()?;
    let request = schemes::Request {
        headers: &headers,
        body,
        url,
    };
    let covered = schemes::claimed(registration.scheme, &request).ok()?;
    let (_, document) = crate::sources::document(registration.scheme, body)?;
    if let Some(from) = registration.entity_key_from {
        if covered.body_vouched() {
            if let Some(entity) = crate::ordering::entity_key(from, &document) {
                return Some(RouteKey::Entity(entity));
            }
        }
    }
    match crate::sources::extract(registration.event_id_from, &headers, &covered, &document) {
        Some(id) if id.signed => Some(RouteKey::Event(id.value)),
        // Nothing is signed (a shared token): the id as sent is all there
        // is, and routing by it keeps each event's retries on one slot.
        Some(id) if registration.scheme.signs_nothing() => Some(RouteKey::Event(id.value)),
        _ => Some(RouteKey::Signed(covered.signed_digest(body))),
    }
}

/// The key's hash: SHA-256 over the provider's name, a newline and the
/// key's text, its first four bytes as a big-endian signed integer.
pub fn hash(provider: &str, key: &str) -> i32 {
    let mut hasher = Sha256::new();
    hasher.update(provider.as_bytes());
    hasher.update(b"\n");
    hasher.update(key.as_bytes());
    let digest = hasher.finalize();
    i32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]])
}

/// The slot of a hash among `slots` (a power of two).
pub fn slot(hash: i32, slots: i32) -> i32 {
    hash & (slots - 1)
}

/// This database's slot and the number of slots, when it holds one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Holding {
    pub slot: i32,
    pub slots: i32,
}

/// `webhook.slot` and `webhook.slots`, checked: None when this database is
/// not one slot of a tier (both unset).
pub fn holding(function: &'static str) -> Result<Option<Holding>> {
    let slot = crate::gucs::SLOT.get();
    let slots = crate::gucs::SLOTS.get();
    if slot < 0 && slots == 0 {
        return Ok(None);
    }
    let power_of_two = slots > 0 && (slots & (slots - 1)) == 0;
    if !power_of_two || !(0..slots).contains(&slot) {
        return Err(WebhookError::BadSlotSettings {
            function,
            slot,
            slots,
        });
    }
    Ok(Some(Holding { slot, slots }))
}

/// Refuse a delivery this database's slot does not hold.
pub fn check(
    function: &'static str,
    provider: &str,
    registration: &Registration<'_>,
    headers: &serde_json::Value,
    body: &[u8],
    url: Option<&str>,
) -> Result<()> {
    let Some(holding) = holding(function)? else {
        return Ok(());
    };
    let key = key(registration, headers, body, url).text();
    let routes_to = slot(hash(provider, &key), holding.slots);
    if routes_to == holding.slot {
        return Ok(());
    }
    Err(WebhookError::Misrouted {
        function,
        holding: holding.slot,
        slots: holding.slots,
        routes_to,
        key,
    })
}

/// A delivery's route key, as the proxy of an intake tier computes it
/// before it knows which database verifies it: `scheme`, `event_id_from`
/// and `entity_key_from` as the provider is registered
/// (`webhook.provider_summary`; `entity_key_from` NULL when it is not
/// ordered). Needs no secret and reads no table.
#[pg_extern(immutable, parallel_safe, name = "webhook_route_key")]
fn route_key(
    scheme: Option<&str>,
    event_id_from: Option<&str>,
    entity_key_from: Option<&str>,
    headers: Option<crate::jsonb::RawJsonb>,
    body: Option<&[u8]>,
    url: default!(Option<&str>, "NULL"),
) -> std::result::Result<String, pgrx::pg_sys::panic::ErrorReport> {
    const F: &str = "webhook_route_key";
    let scheme = crate::input::required(F, "scheme", scheme)?;
    let scheme = Scheme::parse(F, "scheme", scheme)?;
    let event_id_from = crate::input::required(F, "event_id_from", event_id_from)?;
    let headers = crate::input::required(F, "headers", headers)?;
    let body = crate::input::required(F, "body", body)?;
    let headers = headers.to_json().unwrap_or(serde_json::Value::Null);
    let registration = Registration {
        scheme: &scheme,
        event_id_from,
        entity_key_from,
    };
    Ok(key(&registration, &headers, body, url).text())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A genuine delivery of every scheme in the catalog (and, where the
    /// scheme has an ordering preset, of an ordered provider of it), with
    /// its route key and slot among 8 as this library computes them. Each
    /// routes by signed material. With `ROUTE_VECTORS` set, written there
    /// as JSON lines: the tier's test (.ci/scale-test) sends them through a
    /// real proxy and holds it, SQL and the examples to these slots.
    #[test]
    fn route_vectors_of_every_scheme() {
        use crate::schemes::genuine::Sender;
        let mut lines = Vec::new();
        for sender in Sender::all() {
            let registration = sender.registration();
            let scheme = Scheme::parse("t", "scheme", &registration.scheme).unwrap();
            let event_id_from = registration
                .event_id_from
                .or(sender.entry.event_id_from)
                .expect("every scheme's sender has an event id source");
            let delivery = sender.deliver("evt-vector", "thing.created", schemes::now_unix());
            let orderings = [(false, None), (true, sender.entry.entity_key_from)];
            for (ordered, entity_key_from) in orderings {
                if ordered && entity_key_from.is_none() {
                    continue;
                }
                let route = Registration {
                    scheme: &scheme,
                    event_id_from,
                    entity_key_from,
                };
                let key = key(&route, &delivery.headers, &delivery.body, delivery.url).text();
                // An ordered provider routes by entity, unless its scheme
                // does not vouch for the body (PayPal, Twilio, Mailgun):
                // another body under the same signature must meet the
                // first one's binding, so those route by the signed bytes.
                let kind = key.split(':').next().unwrap();
                let by_entity = ordered && sender.entry.covers.body.vouches();
                assert!(
                    if by_entity {
                        kind == "entity"
                    } else {
                        kind == "event" || kind == "signed"
                    },
                    "{}: {key}",
                    sender.name()
                );
                let provider = format!("{}-{}", if ordered { "o" } else { "r" }, sender.name());
                lines.push(serde_json::json!({
                    "provider": provider,
                    "scheme": registration.scheme,
                    "secret": registration.secret,
                    "event_id_from": event_id_from,
                    "event_type_from": registration.event_type_from,
                    "ordered": ordered,
                    "headers": delivery.headers,
                    "body": hex::encode(&delivery.body),
                    "url": delivery.url,
                    "route_key": key,
                    "slot": slot(hash(&provider, &key), 8),
                }));
            }
        }
        assert!(lines.len() > schemes::catalog::catalog().len());
        if let Ok(path) = std::env::var("ROUTE_VECTORS") {
            let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
            std::fs::write(&path, text).expect("write the route vectors");
        }
    }

    #[test]
    fn hash_is_the_first_four_bytes_big_endian() {
        // printf 'stripe\nevent:evt_1' | sha256sum begins with 3fe75dc3.
        assert_eq!(hash("stripe", "event:evt_1"), 0x3fe7_5dc3);
        assert_eq!(slot(-1, 8), 7);
        assert_eq!(slot(i32::MIN, 8), 0);
        assert_eq!(slot(13, 8), 5);
    }
}
