//! Which key verified a delivery: archived with it, and the key's last use
//! kept in `webhook.provider_secrets`, so that an operator can tell a
//! secret nobody signs with any more before retiring it.

use crate::errors::Result;
use crate::plans::Statement;
use crate::registry::Provider;
use pgrx::pg_sys;
use pgrx::spi::SpiClient;

/// A secret verified a delivery: say so, at most once a minute, and never
/// wait for it. A transaction that touched it holds its row until it ends,
/// and every other one skips it meanwhile.
static TOUCH_SECRET: Statement = Statement {
    sql: "UPDATE webhook.provider_secrets s
             SET last_used_at = pg_catalog.now()
           WHERE s.ctid = (SELECT t.ctid FROM webhook.provider_secrets t
                            WHERE t.provider = $1 AND t.fingerprint = $2
                              AND (t.last_used_at IS NULL
                                   OR t.last_used_at < pg_catalog.now() - interval '1 minute')
                              FOR UPDATE SKIP LOCKED)",
    arg_types: &[pg_sys::TEXTOID, pg_sys::TEXTOID],
};

/// The fingerprint of the provider's secret number `secret` (the one that
/// verified the delivery), its use noted.
pub fn used<'p>(
    client: &mut SpiClient<'_>,
    name: &str,
    provider: &'p Provider,
    secret: usize,
) -> Result<Option<&'p str>> {
    let fingerprint = provider.fingerprints.get(secret).and_then(Option::as_deref);
    if let Some(fingerprint) = fingerprint {
        TOUCH_SECRET.run(client, &[name.into(), fingerprint.into()])?;
    }
    Ok(fingerprint)
}
