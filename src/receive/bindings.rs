//! Signed bytes bound to one delivery. Where a provider does not sign the
//! event id (GitHub, Shopify, a generic HMAC of the body), the delivery's
//! signed bytes are bound to the id the first time they are seen, in
//! `webhook.signature_bindings`: the same signed bytes under another id
//! are a replay with a forged header, and are refused as `replayed`.

use crate::errors::Result;
use crate::event_lock::EventLock;
use crate::plans::Statement;
use pgrx::pg_sys;
use pgrx::spi::SpiClient;

/// Which event id these signed bytes were first seen under, if any.
static BOUND_TO: Statement = Statement {
    sql: "SELECT event_id FROM webhook.signature_bindings WHERE provider = $1 AND digest = $2",
    arg_types: &[pg_sys::TEXTOID, pg_sys::BYTEAOID],
};

/// Bind signed bytes to an event id. Runs under the signed-bytes lock, so
/// no other transaction is inserting the same key.
static BIND: Statement = Statement {
    sql: "INSERT INTO webhook.signature_bindings (provider, digest, event_id)
          VALUES ($1, $2, $3)
          ON CONFLICT (provider, digest) DO NOTHING",
    arg_types: &[pg_sys::TEXTOID, pg_sys::BYTEAOID, pg_sys::TEXTOID],
};

/// What binding a delivery's signed bytes to its (unsigned) event id found.
pub enum Binding {
    /// Bound to this id, now or before: go on and claim.
    Bound,
    /// Another open transaction is binding the same bytes right now.
    Busy,
    /// Already bound to another id: a replay under a forged id header.
    ToAnotherId,
}

/// Bind `digest` (of a provider's signed bytes) to `event_id`, under the
/// signed-bytes lock so that two transactions never insert the same key.
/// A claim only tries the lock, so nobody waits; inbox intake (`wait`)
/// waits for the other transaction instead, because it may only answer
/// 2xx once the delivery is stored for good. Held until the transaction
/// ends when this call inserted the binding.
pub fn bind(
    client: &mut SpiClient<'_>,
    provider: &str,
    digest: &[u8],
    event_id: &str,
    wait: bool,
) -> Result<Binding> {
    let lock = EventLock::for_signed_bytes(provider, digest);
    if wait {
        lock.acquire();
    } else if !lock.try_acquire() {
        return Ok(Binding::Busy);
    }
    let bound_to = match BOUND_TO
        .run(client, &[provider.into(), digest.into()])?
        .next()
    {
        Some(row) => row.get::<String>(1)?,
        None => None,
    };
    match bound_to {
        Some(first) => {
            lock.release();
            Ok(if first == event_id {
                Binding::Bound
            } else {
                Binding::ToAnotherId
            })
        }
        None => {
            BIND.run(client, &[provider.into(), digest.into(), event_id.into()])?;
            Ok(Binding::Bound)
        }
    }
}
