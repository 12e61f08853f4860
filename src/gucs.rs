//! Settings, all under the `webhook.` prefix.

use pgrx::datum::Interval;
use pgrx::{GucContext, GucFlags, GucRegistry, GucSetting};
use std::ffi::{CStr, CString};

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

/// Longest lease any claim or `webhook_extend` may take, in seconds: an
/// application cannot hold an event `in_progress` until the provider gives
/// up on it.
pub static MAX_LEASE: GucSetting<i32> = GucSetting::<i32>::new(3600);

/// Bytes of a rejected delivery's body kept in the archive (with its full
/// size and SHA-256): enough to see what a forgery was, too little for a
/// flood of them to fill the disk.
pub static REJECTED_BODY_LIMIT: GucSetting<i32> = GucSetting::<i32>::new(4096);

/// Request headers whose values are never archived.
pub static REDACT_HEADERS: GucSetting<Option<CString>> =
    GucSetting::<Option<CString>>::new(Some(DEFAULT_REDACT_HEADERS));

const DEFAULT_REDACT_HEADERS: &CStr = c"authorization, proxy-authorization, cookie, set-cookie, \
    x-api-key, api-key, x-auth-token, x-access-token, x-csrf-token";

/// The inbox's first retry delay, in milliseconds; each further failure
/// doubles it (see `inbox::backoff`).
pub static BACKOFF_BASE: GucSetting<i32> = GucSetting::<i32>::new(10_000);

/// The longest delay between two inbox attempts, in milliseconds.
pub static BACKOFF_MAX: GucSetting<i32> = GucSetting::<i32>::new(3_600_000);

/// Whether queueing an event wakes listening workers (`NOTIFY webhook_inbox`).
pub static INBOX_NOTIFY: GucSetting<bool> = GucSetting::<bool>::new(true);

/// How long maintenance (`webhook_purge`, `webhook_create_partitions`)
/// waits for a lock on the archive, in milliseconds. While it waits, every
/// claim that needs the same table queues behind it; past this, it skips
/// what needed the lock, says so, and does it on a later run.
pub static MAINTENANCE_LOCK_TIMEOUT: GucSetting<i32> = GucSetting::<i32>::new(200);

/// How long the per-minute metrics are kept, in minutes (the totals
/// Prometheus reads are kept for good).
pub static METRICS_RETENTION: GucSetting<i32> = GucSetting::<i32>::new(14 * 24 * 60);
pub static METRICS_UNREGISTERED: GucSetting<i32> = GucSetting::<i32>::new(100);
pub static ORDER_MAX_FUTURE: GucSetting<i32> = GucSetting::<i32>::new(24 * 60 * 60);

/// How long an idempotency key of the application's API is kept, in
/// seconds, from its first request: Stripe keeps its keys for 24 hours.
/// Past it, a finished key starts anew and `idempotency_purge` removes it.
pub static IDEMPOTENCY_RETENTION: GucSetting<i32> = GucSetting::<i32>::new(86_400);

/// Largest response body `idempotency_finish` stores for replays, in kB.
pub static IDEMPOTENCY_MAX_RESPONSE: GucSetting<i32> = GucSetting::<i32>::new(1024);

/// The slot this database holds in a tier of databases (`route`), or -1.
pub static SLOT: GucSetting<i32> = GucSetting::<i32>::new(-1);

/// How many slots the tier has (a power of two), or 0.
pub static SLOTS: GucSetting<i32> = GucSetting::<i32>::new(0);

pub fn init() {
    GucRegistry::define_int_guc(
        c"webhook.slot",
        c"The slot this database holds in a tier of databases, or -1.",
        c"Set with webhook_set_slot(slot, slots). Ids made here carry it in their last two bytes, \
          and webhook_receive refuses (SQLSTATE 55000) a delivery whose route key hashes to another slot.",
        &SLOT,
        -1,
        65_535,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"webhook.slots",
        c"How many slots the tier of databases this one belongs to has (a power of two), or 0.",
        c"Set with webhook_set_slot(slot, slots).",
        &SLOTS,
        0,
        65_536,
        GucContext::Suset,
        GucFlags::default(),
    );
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
    GucRegistry::define_int_guc(
        c"webhook.max_lease",
        c"Longest lease a webhook claim may hold.",
        c"Leases given to webhook_claim, webhook_receive and webhook_extend beyond it are refused \
          (SQLSTATE 22023); a longer webhook.lease_timeout is cut to it.",
        &MAX_LEASE,
        1,
        i32::MAX,
        GucContext::Suset,
        GucFlags::UNIT_S,
    );
    GucRegistry::define_int_guc(
        c"webhook.backoff_base",
        c"Delay before an inbox event's second attempt.",
        c"webhook_fail schedules attempt n+1 after backoff_base * 2^(n-1), at most \
          webhook.backoff_max, less up to a quarter at random so that failures spread out.",
        &BACKOFF_BASE,
        1,
        i32::MAX,
        GucContext::Suset,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"webhook.backoff_max",
        c"Longest delay between two attempts of an inbox event.",
        c"The cap of webhook_fail's exponential backoff.",
        &BACKOFF_MAX,
        1,
        i32::MAX,
        GucContext::Suset,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_bool_guc(
        c"webhook.inbox_notify",
        c"Wake listening workers when an event is queued.",
        c"Sends NOTIFY webhook_inbox (no payload) from at most one committing transaction at a \
          time, so that notifications never serialize commits; workers that LISTEN poll as well.",
        &INBOX_NOTIFY,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"webhook.rejected_body_limit",
        c"Bytes of a rejected delivery's body kept in the archive.",
        c"webhook_receive archives a refused delivery with this much of its body, plus the \
          body's full size and SHA-256.",
        &REJECTED_BODY_LIMIT,
        0,
        1024 * 1024,
        GucContext::Suset,
        GucFlags::UNIT_BYTE,
    );
    GucRegistry::define_int_guc(
        c"webhook.idempotency_retention",
        c"How long an idempotency key is kept from its first request.",
        c"Past it, a request with the key starts anew (unless one is still in progress), \
          and idempotency_purge removes the key.",
        &IDEMPOTENCY_RETENTION,
        1,
        i32::MAX,
        GucContext::Suset,
        GucFlags::UNIT_S,
    );
    GucRegistry::define_int_guc(
        c"webhook.idempotency_max_response",
        c"Largest response body idempotency_finish stores for replays.",
        c"A larger body is refused with SQLSTATE 22001.",
        &IDEMPOTENCY_MAX_RESPONSE,
        0,
        1024 * 1024,
        GucContext::Suset,
        GucFlags::UNIT_KB,
    );
    GucRegistry::define_int_guc(
        c"webhook.maintenance_lock_timeout",
        c"How long webhook_purge and webhook_create_partitions wait for a lock on the archive.",
        c"Claims needing the archive queue behind a waiting lock request: past this, the \
          maintenance skips what needed the lock, warns, and leaves it for its next run.",
        &MAINTENANCE_LOCK_TIMEOUT,
        1,
        60_000,
        GucContext::Suset,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"webhook.metrics_retention",
        c"How long webhook.metric_minutes keeps each minute.",
        c"The rollup (webhook_metrics_rollup) deletes older minutes; the alert rules read \
          windows within it, and the totals webhook_metrics() exports are kept for good.",
        &METRICS_RETENTION,
        60,
        i32::MAX,
        GucContext::Suset,
        GucFlags::UNIT_MIN,
    );
    GucRegistry::define_int_guc(
        c"webhook.metrics_unregistered_providers",
        c"How many provider names not in the registry the metrics count under their own name.",
        c"webhook_claim and webhook_enqueue take any provider name; past this many unregistered \
          names with series of their own, the metrics count further ones as provider (other), \
          so that invented names cannot grow every scrape. A name quiet for \
          webhook.metrics_retention loses its series and frees its place.",
        &METRICS_UNREGISTERED,
        0,
        100_000,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"webhook.order_max_future",
        c"How far past the clock an order value handed to webhook_claim or webhook_enqueue may lie.",
        c"Those calls take a payload their caller verified; an order value further ahead (read \
          as seconds, milliseconds, microseconds or nanoseconds since 1970) would make every \
          later event of its entity stale. Such an event is taken unordered, with a warning. \
          Deliveries webhook_receive verified are not bounded.",
        &ORDER_MAX_FUTURE,
        0,
        i32::MAX,
        GucContext::Suset,
        GucFlags::UNIT_S,
    );
    GucRegistry::define_string_guc(
        c"webhook.redact_headers",
        c"Request headers whose values webhook_receive never archives.",
        c"A comma-separated list of header names, matched case-insensitively; their values \
          are archived as [redacted].",
        &REDACT_HEADERS,
        GucContext::Suset,
        GucFlags::default(),
    );
    reserve_prefix();
}

/// Every `webhook.` setting is one of the above: a misspelt one
/// (`webhook.max_attempt`) is an error instead of a silently kept
/// placeholder.
fn reserve_prefix() {
    // SAFETY: called from _PG_init, with a static NUL-terminated name.
    unsafe {
        #[cfg(not(any(feature = "pg13", feature = "pg14")))]
        pgrx::pg_sys::MarkGUCPrefixReserved(c"webhook".as_ptr());
        #[cfg(any(feature = "pg13", feature = "pg14"))]
        pgrx::pg_sys::EmitWarningsOnPlaceholders(c"webhook".as_ptr());
    }
}

pub fn max_payload_bytes() -> usize {
    usize::try_from(MAX_PAYLOAD_SIZE.get()).unwrap_or(0) * 1024
}

/// `webhook.lease_timeout`, cut to `webhook.max_lease`.
pub fn default_lease() -> Interval {
    let seconds = LEASE_TIMEOUT.get().min(MAX_LEASE.get());
    Interval::from_micros(i64::from(seconds) * 1_000_000)
}

pub fn max_lease_micros() -> i64 {
    i64::from(MAX_LEASE.get()) * 1_000_000
}

pub fn rejected_body_bytes() -> usize {
    usize::try_from(REJECTED_BODY_LIMIT.get()).unwrap_or(0)
}

/// The header names of `webhook.redact_headers`, lower-cased.
pub fn redacted_headers() -> Vec<String> {
    REDACT_HEADERS
        .get()
        .map(|list| {
            list.to_string_lossy()
                .split(',')
                .map(|name| name.trim().to_ascii_lowercase())
                .filter(|name| !name.is_empty())
                .collect()
        })
        .unwrap_or_default()
}

pub fn idempotency_retention() -> Interval {
    Interval::from_micros(i64::from(IDEMPOTENCY_RETENTION.get()) * 1_000_000)
}

pub fn idempotency_max_response_bytes() -> usize {
    usize::try_from(IDEMPOTENCY_MAX_RESPONSE.get()).unwrap_or(0) * 1024
}
