//! Signed bytes bound to one delivery. Where a provider does not sign the
//! event id (GitHub, Shopify, a generic HMAC of the body), or does not
//! vouch for the body (PayPal's CRC32, Mailgun's token), the delivery's
//! signed bytes are bound the first time they are seen, in
//! `webhook.signature_bindings`, to its id and, where the body is not
//! vouched for, to the body's SHA-256. The same signed bytes with another
//! id or another body are a replay with forged parts, refused as
//! `replayed`: one signature vouches for one delivery.

use crate::errors::{Result, WebhookError};
use crate::event_lock::EventLock;
use crate::plans::Statement;
use pgrx::pg_sys;
use pgrx::spi::SpiClient;

/// Which delivery these signed bytes were first seen with, if any.
static BOUND_TO: Statement = Statement {
    sql: "SELECT event_id, body_digest FROM webhook.signature_bindings
           WHERE provider = $1 AND digest = $2",
    arg_types: &[pg_sys::TEXTOID, pg_sys::BYTEAOID],
};

/// Whether the installed tables bind bodies: not before `ALTER EXTENSION
/// … UPDATE` has brought the release this library belongs to.
static BINDS_BODIES: crate::installed::Column =
    crate::installed::Column::new("webhook.signature_bindings", "body_digest");

/// Refuse a delivery whose body must be bound while the tables cannot
/// bind it (the library is newer than the installed SQL): an error, so
/// the handler answers 5xx and the provider brings it again after the
/// update, rather than accepting what the old tables cannot check.
fn require_body_binding(client: &mut SpiClient<'_>) -> Result<()> {
    if BINDS_BODIES.present(client)? {
        return Ok(());
    }
    Err(WebhookError::SchemaNotUpdated {
        function: "webhook_receive",
        needs: "a delivery whose signature does not vouch for its body",
    })
}

/// Bind signed bytes to an event id: one row returned if they were not
/// bound yet. Runs under the signed-bytes lock, so no other transaction is
/// inserting the same key and the insert never waits.
static BIND: Statement = Statement {
    sql: "INSERT INTO webhook.signature_bindings (provider, digest, event_id, body_digest)
          VALUES ($1, $2, $3, $4)
          ON CONFLICT (provider, digest) DO NOTHING
          RETURNING 1",
    arg_types: &[
        pg_sys::TEXTOID,
        pg_sys::BYTEAOID,
        pg_sys::TEXTOID,
        pg_sys::BYTEAOID,
    ],
};

/// The body a binding made by an earlier release (by id only) vouches
/// for from now on.
static BIND_BODY: Statement = Statement {
    sql: "UPDATE webhook.signature_bindings SET body_digest = $3
           WHERE provider = $1 AND digest = $2 AND body_digest IS NULL",
    arg_types: &[pg_sys::TEXTOID, pg_sys::BYTEAOID, pg_sys::BYTEAOID],
};

/// The same two for signed bytes that cover the body (their digest does):
/// only the event id is bound. These run on the previous release's table
/// as well, so a library installed before `ALTER EXTENSION … UPDATE`
/// keeps binding GitHub's and Shopify's deliveries.
static BOUND_TO_ID: Statement = Statement {
    sql: "SELECT event_id FROM webhook.signature_bindings WHERE provider = $1 AND digest = $2",
    arg_types: &[pg_sys::TEXTOID, pg_sys::BYTEAOID],
};

static BIND_ID: Statement = Statement {
    sql: "INSERT INTO webhook.signature_bindings (provider, digest, event_id)
          VALUES ($1, $2, $3)
          ON CONFLICT (provider, digest) DO NOTHING
          RETURNING 1",
    arg_types: &[pg_sys::TEXTOID, pg_sys::BYTEAOID, pg_sys::TEXTOID],
};

/// The delivery a signature vouches for: its event id, and the SHA-256 of
/// its body where the signature does not cover the body by a digest.
#[derive(Clone, Copy)]
pub struct Vouched<'a> {
    pub event_id: &'a str,
    pub body: Option<&'a [u8]>,
}

/// What binding a delivery's signed bytes to its (unsigned) event id found.
pub enum Binding {
    /// Bound to this id, now or before: go on and claim.
    Bound,
    /// Another open transaction is binding the same bytes right now.
    Busy,
    /// Already bound to another id or body: a replay with forged parts.
    ToAnotherDelivery,
}

/// Bind `digest` (of a provider's signed bytes) to a delivery, under the
/// signed-bytes lock so that two transactions never insert the same key.
/// A claim only tries the lock, so nobody waits; inbox intake (`wait`)
/// waits for the other transaction instead, because it may only answer
/// 2xx once the delivery is stored for good. Held until the transaction
/// ends when this call inserted the binding.
pub fn bind(
    client: &mut SpiClient<'_>,
    provider: &str,
    digest: &[u8],
    vouched: Vouched<'_>,
    wait: bool,
) -> Result<Binding> {
    if vouched.body.is_some() {
        require_body_binding(client)?;
    }
    let lock = EventLock::for_signed_bytes(provider, digest);
    if wait {
        lock.acquire();
    } else if !lock.try_acquire() {
        return Ok(Binding::Busy);
    }
    // Signed bytes are new far more often than not: bind them first, and
    // read what they are bound to only when they were bound already (one
    // statement for a new delivery instead of two).
    let inserted = match vouched.body {
        Some(body) => BIND.run(
            client,
            &[
                provider.into(),
                digest.into(),
                vouched.event_id.into(),
                body.into(),
            ],
        )?,
        None => BIND_ID.run(
            client,
            &[provider.into(), digest.into(), vouched.event_id.into()],
        )?,
    };
    if !inserted.is_empty() {
        return Ok(Binding::Bound);
    }
    let bound_to = if vouched.body.is_some() {
        BOUND_TO
            .run(client, &[provider.into(), digest.into()])?
            .next()
            .map(|row| Ok::<_, WebhookError>((row.get::<String>(1)?, row.get::<Vec<u8>>(2)?)))
            .transpose()?
    } else {
        BOUND_TO_ID
            .run(client, &[provider.into(), digest.into()])?
            .next()
            .map(|row| Ok::<_, WebhookError>((row.get::<String>(1)?, None)))
            .transpose()?
    };
    match bound_to {
        Some((event_id, body)) => {
            if event_id.as_deref() != Some(vouched.event_id) {
                lock.release();
                return Ok(Binding::ToAnotherDelivery);
            }
            match (body.as_deref(), vouched.body) {
                (bound, given) if bound == given => {
                    lock.release();
                    Ok(Binding::Bound)
                }
                // Bound by a release that did not bind bodies yet (Twilio's
                // deliveries were bound by id only): the first body seen
                // since is the one. The lock stays until commit.
                (None, Some(given)) => {
                    BIND_BODY.run(client, &[provider.into(), digest.into(), given.into()])?;
                    Ok(Binding::Bound)
                }
                _ => {
                    lock.release();
                    Ok(Binding::ToAnotherDelivery)
                }
            }
        }
        None => Err(WebhookError::Internal(
            "a signature binding vanished while its lock was held".into(),
        )),
    }
}
