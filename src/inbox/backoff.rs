//! When a failed inbox attempt is tried again.
//!
//! Attempt `n` failed: attempt `n + 1` starts after
//!
//! ```text
//! delay(n) = min(backoff_max, backoff_base * 2^(n - 1)) * (1 - jitter / 4),  jitter in [0, 1)
//! ```
//!
//! With the defaults (`webhook.backoff_base` 10 s, `webhook.backoff_max`
//! 1 h, `webhook.max_attempts` 10) the retries come after about 10 s, 20 s,
//! 40 s, … 43 min: a failing event is tried ten times over roughly an hour
//! and a half, then parked as dead. The first retries come fast enough to
//! ride out a deploy or a brief outage downstream; the last ones wait long
//! enough for a real fix; and an event that cannot succeed reaches an
//! operator within the afternoon, not after Stripe's three days (in inbox
//! mode the provider has already been answered, so nobody else retries).
//! River's `attempt^4` seconds grows slower at first and faster later;
//! Oban's `15 + 2^attempt` is close to this with a larger base.
//!
//! The jitter only ever shortens the delay, so `backoff_max` is a true
//! upper bound, and events that failed together (an outage) spread over a
//! quarter of their delay instead of retrying in one burst. It is drawn
//! from the failed lease's id, which is random: no generator is needed,
//! and the delay of a given attempt can be checked after the fact.

/// Microseconds before the attempt after attempt `attempt` (1-based),
/// for `jitter` in `[0, 1)`.
pub fn delay_micros(attempt: i32, base_ms: i32, max_ms: i32, jitter: f64) -> i64 {
    let doublings = attempt.saturating_sub(1).clamp(0, 40);
    let base = f64::from(base_ms.max(1)) * 1000.0;
    let max = f64::from(max_ms.max(1)) * 1000.0;
    let uncapped = base * 2f64.powi(doublings);
    let jitter = jitter.clamp(0.0, 1.0);
    (uncapped.min(max) * (1.0 - jitter / 4.0)).round() as i64
}

/// The jitter a lease id gives: its last two bytes, which are random in a
/// version 4 UUID, as a fraction of 2^16.
pub fn jitter_of(lease: pgrx::Uuid) -> f64 {
    let bytes = lease.as_bytes();
    f64::from(u16::from_be_bytes([bytes[14], bytes[15]])) / 65536.0
}

/// The delay after attempt `attempt` failed under lease `lease`, with the
/// session's settings.
pub fn delay_after(attempt: i32, lease: pgrx::Uuid) -> i64 {
    delay_micros(
        attempt,
        crate::gucs::BACKOFF_BASE.get(),
        crate::gucs::BACKOFF_MAX.get(),
        jitter_of(lease),
    )
}
