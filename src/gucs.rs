//! Settings, all under the `webhook.` prefix.

use pgrx::datum::Interval;
use pgrx::{GucContext, GucFlags, GucRegistry, GucSetting};

/// Default lease of a claim, in seconds: how long a committed claim that was
/// neither completed nor failed keeps other deliveries answered
/// `in_progress` before one of them may take the event over as `retry`.
pub static LEASE_TIMEOUT: GucSetting<i32> = GucSetting::<i32>::new(300);

pub fn init() {
    GucRegistry::define_int_guc(
        c"webhook.lease_timeout",
        c"Default lease of a webhook claim.",
        c"A claim that commits without being completed or failed (two-phase use) \
          keeps its event for this long; afterwards the next delivery takes it over \
          as a retry. Per-call leases override it.",
        &LEASE_TIMEOUT,
        1,
        i32::MAX,
        GucContext::Userset,
        GucFlags::UNIT_S,
    );
}

pub fn default_lease() -> Interval {
    Interval::from_micros(i64::from(LEASE_TIMEOUT.get()) * 1_000_000)
}
