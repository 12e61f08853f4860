//! What steers one consumer's leases, as `webhook.pauses` and
//! `webhook.limits` say: read by the registry's cache (`registry`, which
//! keeps it per backend until a change commits) and acted on by the inbox
//! (`inbox::flow`). Its own module, so that neither of those two needs the
//! other to say what it is.

use crate::errors::Result;

/// What steers one consumer's leases.
pub struct Controls {
    /// The consumer is paused, for every provider.
    pub paused: bool,
    /// Providers whose events it may not lease: paused.
    pub paused_providers: Vec<String>,
    /// Providers with quarantined entities (the entities themselves are
    /// read by the lease statement, in its own snapshot).
    pub quarantined: Vec<String>,
    /// Its limits.
    pub limits: Vec<Limit>,
}

/// One limit of a consumer (`webhook.limits`).
pub struct Limit {
    /// The provider limited; empty for all of the consumer's events.
    pub provider: String,
    pub cap: bool,
    /// A rate: how long a rate slot rests between two leases, in seconds.
    pub rate_rest: Option<f64>,
    pub breaker: bool,
}

impl Controls {
    /// The limits a call for `provider` is under: its own, and the
    /// consumer-wide ones.
    pub fn limits_of<'a>(&'a self, provider: &'a str) -> impl Iterator<Item = &'a Limit> + 'a {
        self.limits
            .iter()
            .filter(move |l| l.provider.is_empty() || l.provider == provider)
    }

    /// Whether a breaker watches this consumer's events of `provider`.
    pub fn breaker_watches(&self, provider: &str) -> bool {
        self.limits_of(provider).any(|l| l.breaker)
    }
}

/// Everything that steers consumer `$1`, with the watched tables' oids
/// (see `registry`).
macro_rules! load_controls {
    () => {
        "SELECT EXISTS (SELECT FROM webhook.pauses WHERE provider = '' AND consumer = $1),
                ARRAY(SELECT provider FROM webhook.pauses
                       WHERE provider <> '' AND entity_key = '' AND consumer IN ('', $1)),
                ARRAY(SELECT DISTINCT provider FROM webhook.pauses
                       WHERE entity_key <> '' AND consumer IN ('', $1)),
                ARRAY(SELECT provider FROM webhook.limits WHERE consumer = $1 ORDER BY provider),
                ARRAY(SELECT max_leases IS NOT NULL FROM webhook.limits WHERE consumer = $1 ORDER BY provider),
                ARRAY(SELECT burst / rate FROM webhook.limits WHERE consumer = $1 ORDER BY provider),
                ARRAY(SELECT breaker_failures IS NOT NULL FROM webhook.limits WHERE consumer = $1 ORDER BY provider), "
    };
}
pub(crate) use load_controls;

/// The controls in a row of `load_controls!`; None when nothing steers
/// the consumer.
pub fn controls_from(row: &crate::plans::Row<'_>) -> Result<Option<Controls>> {
    let paused = row.get::<bool>(1)?.unwrap_or(false);
    let paused_providers = row.get::<Vec<String>>(2)?.unwrap_or_default();
    let quarantined = row.get::<Vec<String>>(3)?.unwrap_or_default();
    let providers = row.get::<Vec<String>>(4)?.unwrap_or_default();
    let caps = row.get::<Vec<bool>>(5)?.unwrap_or_default();
    let rests = row.get::<Vec<Option<f64>>>(6)?.unwrap_or_default();
    let breakers = row.get::<Vec<bool>>(7)?.unwrap_or_default();
    let limits: Vec<Limit> = providers
        .into_iter()
        .zip(caps)
        .zip(rests)
        .zip(breakers)
        .map(|(((provider, cap), rate_rest), breaker)| Limit {
            provider,
            cap,
            rate_rest,
            breaker,
        })
        .collect();
    if !paused && paused_providers.is_empty() && quarantined.is_empty() && limits.is_empty() {
        return Ok(None);
    }
    Ok(Some(Controls {
        paused,
        paused_providers,
        quarantined,
        limits,
    }))
}
