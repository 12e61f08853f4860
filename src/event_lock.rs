//! The per-event lock that makes "someone is working on this right now"
//! visible to other backends without anyone waiting for it.
//!
//! A claim that owns its event holds a transaction-scoped advisory lock on
//! the event's key until its transaction ends; so do `webhook_complete`,
//! `webhook_fail` and `webhook_extend`. Every write to an event row happens
//! under this lock, which gives two guarantees:
//!
//! * a claim tries the lock without waiting: if it is taken, another
//!   transaction is live on the event and the answer is `in_progress` at
//!   once, never a wait on that transaction's row lock;
//! * a claim that gets the lock never meets an uncommitted insert or update
//!   of the event row, so its INSERT … ON CONFLICT cannot block either.
//!
//! An aborted transaction (error, lost client, `pg_terminate_backend`,
//! crash) releases the lock together with its uncommitted rows, so nothing
//! is left behind that could block the retry.
//!
//! The lock lives in the advisory lock space but under its own sub-id, so it
//! never collides with an application's `pg_advisory_lock(bigint)` or
//! `pg_advisory_lock(int, int)` keys. In `pg_locks` it shows as an advisory
//! lock with `objsubid` = 22344 ("WH").

use pgrx::pg_sys;
use sha2::{Digest, Sha256};

const EVENT_LOCK_SUBID: u16 = 0x5748;

thread_local! {
    /// Locks this backend took and still holds in its current
    /// transaction: (the transaction's local id, how many).
    static HELD: std::cell::Cell<(u32, usize)> = const { std::cell::Cell::new((0, 0)) };
}

/// The backend's current local transaction id: changes with every
/// transaction, so the count of held locks starts over.
fn local_transaction() -> u32 {
    // SAFETY: MyProc is this backend's own PGPROC, set up before any
    // function of the extension can run.
    unsafe {
        #[cfg(any(feature = "pg13", feature = "pg14", feature = "pg15", feature = "pg16"))]
        let lxid = (*pg_sys::MyProc).lxid;
        #[cfg(any(feature = "pg17", feature = "pg18"))]
        let lxid = (*pg_sys::MyProc).vxid.lxid;
        lxid
    }
}

fn held() -> usize {
    let (xact, count) = HELD.get();
    if xact == local_transaction() {
        count
    } else {
        0
    }
}

fn count_held(change: isize) {
    let count = held().saturating_add_signed(change);
    HELD.set((local_transaction(), count));
}

/// How many event locks one transaction may hold: half of the shared lock
/// table (`max_locks_per_transaction` × `max_connections`, roughly), so
/// that one bulk import can neither run the server out of shared memory
/// nor starve every other transaction of locks.
pub fn budget() -> usize {
    // SAFETY: settings fixed at server start.
    let (per_xact, backends) = unsafe { (pg_sys::max_locks_per_xact, pg_sys::MaxBackends) };
    usize::try_from(per_xact.max(1)).unwrap_or(64) * usize::try_from(backends.max(1)).unwrap_or(100)
        / 2
}

/// Refuse a new event lock when the transaction holds its budget already:
/// a clear error up front instead of "out of shared memory" half way
/// through, with what to do instead.
pub fn check_budget(function: &'static str) -> crate::errors::Result<()> {
    let limit = budget();
    if held() >= limit {
        return Err(crate::errors::WebhookError::TooManyEventsInTransaction { function, limit });
    }
    Ok(())
}

#[derive(Clone, Copy)]
pub struct EventLock {
    tag: pg_sys::LOCKTAG,
}

impl EventLock {
    pub fn for_event(provider: &str, event_id: &str) -> Self {
        Self::keyed(&[provider.as_bytes(), event_id.as_bytes()])
    }

    /// The lock on one provider's signed bytes (by their SHA-256), held by
    /// a transaction that binds them to an event id (see `receive`).
    pub fn for_signed_bytes(provider: &str, digest: &[u8]) -> Self {
        Self::keyed(&[b"signed", provider.as_bytes(), digest])
    }

    /// The lock on one idempotency key of the application's own API (see
    /// `idempotency`): the same rule as for events, so that a second
    /// request with the key is answered at once instead of waiting.
    pub fn for_idempotency_key(scope: &str, key: &str) -> Self {
        Self::keyed(&[b"idempotency", scope.as_bytes(), key.as_bytes()])
    }

    /// The lock on one entity's FIFO line in one consumer's inbox, held by
    /// a transaction that leases from it (see `inbox::pick::lines`).
    pub fn for_fifo_line(provider: &str, consumer: &str, entity_key: &str) -> Self {
        Self::keyed(&[
            b"fifo",
            provider.as_bytes(),
            consumer.as_bytes(),
            entity_key.as_bytes(),
        ])
    }

    /// The lock on one provider's quarantines: shared by each call of
    /// `webhook_next` that may set a quarantined entity's events aside,
    /// taken alone by `webhook_release` (see `inbox::flow`).
    pub fn for_quarantines(provider: &str) -> Self {
        Self::keyed(&[b"quarantine", provider.as_bytes()])
    }

    /// The lock a transaction holds while it is the one that notifies
    /// waiting inbox workers (see `inbox::wake`).
    pub fn for_wake_up() -> Self {
        Self::keyed(&[b"inbox", b"wake", b"up"])
    }

    fn keyed(parts: &[&[u8]]) -> Self {
        // A cryptographic digest keeps the 64-bit key stable across builds,
        // platforms and Rust versions (std's hashers promise none of that),
        // so backends running different builds during an upgrade agree.
        // Parts are NUL-separated; event keys have two parts, and the
        // longer keys start with different tags, so the kinds cannot
        // collide by accident.
        let mut hasher = Sha256::new();
        for (i, part) in parts.iter().enumerate() {
            if i > 0 {
                hasher.update([0u8]);
            }
            hasher.update(part);
        }
        let digest = hasher.finalize();
        let hi = u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]]);
        let lo = u32::from_be_bytes([digest[4], digest[5], digest[6], digest[7]]);

        let tag = pg_sys::LOCKTAG {
            // SAFETY: MyDatabaseId is set once at backend start and only read here.
            locktag_field1: unsafe { pg_sys::MyDatabaseId }.to_u32(),
            locktag_field2: hi,
            locktag_field3: lo,
            locktag_field4: EVENT_LOCK_SUBID,
            locktag_type: pg_sys::LockTagType::LOCKTAG_ADVISORY as u8,
            locktag_lockmethodid: pg_sys::USER_LOCKMETHOD as u8,
        };
        EventLock { tag }
    }

    /// Take the lock if nobody else holds it; never waits.
    pub fn try_acquire(&self) -> bool {
        self.try_acquire_in(pg_sys::ExclusiveLock)
    }

    /// Take the lock in share mode if nobody holds it alone; never waits.
    pub fn try_acquire_shared(&self) -> bool {
        self.try_acquire_in(pg_sys::ShareLock)
    }

    fn try_acquire_in(&self, mode: u32) -> bool {
        // SAFETY: the tag is fully initialised; a transaction-scoped lock is
        // released by PostgreSQL at commit or abort.
        let result = unsafe { pg_sys::LockAcquire(&self.tag, mode as i32, false, true) };
        let acquired = result != pg_sys::LockAcquireResult::LOCKACQUIRE_NOT_AVAIL;
        if acquired {
            count_held(1);
        }
        acquired
    }

    /// Take the lock, waiting for its holder's transaction to end. Only the
    /// functions that finish a claim wait: the holder is then a competing
    /// claim, and the waiter must see its outcome to answer correctly.
    /// Deadlock detection and `lock_timeout` apply as to any lock.
    pub fn acquire(&self) {
        // SAFETY: as above; with dontWait = false the call either returns
        // with the lock or raises an ERROR.
        unsafe {
            pg_sys::LockAcquire(&self.tag, pg_sys::ExclusiveLock as i32, false, false);
        }
        count_held(1);
    }

    /// Give back a lock taken by this call when the claim turned out not to
    /// own the event, so a duplicate's open transaction does not make later
    /// deliveries look `in_progress`.
    pub fn release(&self) {
        // SAFETY: only called after a successful acquire in the same
        // resource owner; releasing decrements that owner's hold once.
        unsafe {
            pg_sys::LockRelease(&self.tag, pg_sys::ExclusiveLock as i32, false);
        }
        count_held(-1);
    }
}
