//! Which key verified a delivery: archived with it, and the key's last use
//! kept in `webhook.secret_uses`, so that an operator can tell a
//! secret nobody signs with any more before retiring it.

use crate::errors::Result;
use crate::plans::Statement;
use crate::registry::Provider;
use pgrx::pg_sys;
use pgrx::spi::SpiClient;

/// A secret verified a delivery: say so, at most once a minute, and never
/// wait for it. A transaction that touched it holds its row in
/// `webhook.secret_uses` until it ends, and every other one skips it
/// meanwhile; the secret's own row is never locked, so retiring it never
/// waits for a handler. `webhook_add_secret` makes the row; were it
/// missing (a secret restored without it), the first use makes it.
static TOUCH_SECRET: Statement = Statement {
    sql: "WITH touched AS (
              UPDATE webhook.secret_uses u
                 SET last_used_at = pg_catalog.now()
               WHERE u.ctid = (SELECT t.ctid FROM webhook.secret_uses t
                                WHERE t.provider = $1 AND t.fingerprint = $2
                                  AND (t.last_used_at IS NULL
                                       OR t.last_used_at < pg_catalog.now() - interval '1 minute')
                                  FOR UPDATE SKIP LOCKED)
          )
          INSERT INTO webhook.secret_uses (provider, fingerprint, last_used_at)
          SELECT $1, $2, pg_catalog.now()
           WHERE NOT EXISTS (SELECT FROM webhook.secret_uses t WHERE t.provider = $1 AND t.fingerprint = $2)
          ON CONFLICT ON CONSTRAINT secret_uses_pkey DO NOTHING",
    arg_types: &[pg_sys::TEXTOID, pg_sys::TEXTOID],
};

/// The release before `webhook.secret_uses` kept the use on the secret.
static TOUCH_SECRET_ROW: Statement = Statement {
    sql: "UPDATE webhook.provider_secrets s
             SET last_used_at = pg_catalog.now()
           WHERE s.ctid = (SELECT t.ctid FROM webhook.provider_secrets t
                            WHERE t.provider = $1 AND t.fingerprint = $2
                              AND (t.last_used_at IS NULL
                                   OR t.last_used_at < pg_catalog.now() - interval '1 minute')
                              FOR UPDATE SKIP LOCKED)",
    arg_types: &[pg_sys::TEXTOID, pg_sys::TEXTOID],
};

static SECRET_USES: crate::installed::Column =
    crate::installed::Column::new("webhook.secret_uses", "last_used_at");

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
        let touch = if SECRET_USES.present(client)? {
            &TOUCH_SECRET
        } else {
            &TOUCH_SECRET_ROW
        };
        touch.run(client, &[name.into(), fingerprint.into()])?;
    }
    Ok(fingerprint)
}
