//! Settings, all under the `webhook.` prefix.

use pgrx::datum::Interval;
use pgrx::{GucContext, GucFlags, GucRegistry, GucSetting};

/// Default lease of a claim, in seconds: how long a committed claim that was
/// neither completed nor failed keeps other deliveries answered
/// `in_progress` before one of them may take the event over as `retry`.
pub static LEASE_TIMEOUT: GucSetting<i32> = GucSetting::<i32>::new(300);

/// Largest payload or raw body a claim accepts, in kB. GitHub, whose cap is
/// the largest among the major providers, documents 25 MB.
pub static MAX_PAYLOAD_SIZE: GucSetting<i32> = GucSetting::<i32>::new(25 * 1024);

/// Failed attempts after which an event is parked as dead instead of being
/// retried again; 0 retries forever.
pub static MAX_ATTEMPTS: GucSetting<i32> = GucSetting::<i32>::new(10);

/// Whether duplicates of processed events are archived. Off makes the
/// duplicate answer read-only (one index lookup, nothing written), at the
/// price of not recording the redeliveries themselves.
pub static ARCHIVE_DUPLICATES: GucSetting<bool> = GucSetting::<bool>::new(true);

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
    GucRegistry::define_int_guc(
        c"webhook.max_payload_size",
        c"Largest webhook payload or raw body webhook_claim accepts.",
        c"Larger deliveries are refused with SQLSTATE 54000 before anything is parsed or written.",
        &MAX_PAYLOAD_SIZE,
        1,
        1024 * 1024,
        GucContext::Suset,
        GucFlags::UNIT_KB,
    );

    GucRegistry::define_bool_guc(
        c"webhook.archive_duplicates",
        c"Archive every duplicate delivery of a processed event.",
        c"Off answers duplicates without writing anything: faster under retry storms, \
          but the archive no longer shows each redelivery (nor flags a changed payload in one).",
        &ARCHIVE_DUPLICATES,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"webhook.max_attempts",
        c"Failed attempts after which an event is dead.",
        c"An event that failed (webhook_fail, or a lease that ran out) this many times is parked: \
          its deliveries are answered 'dead' until an operator calls webhook_requeue. 0 means never.",
        &MAX_ATTEMPTS,
        0,
        i32::MAX,
        GucContext::Suset,
        GucFlags::default(),
    );
}

pub fn max_payload_bytes() -> usize {
    usize::try_from(MAX_PAYLOAD_SIZE.get()).unwrap_or(0) * 1024
}

pub fn default_lease() -> Interval {
    Interval::from_micros(i64::from(LEASE_TIMEOUT.get()) * 1_000_000)
}
