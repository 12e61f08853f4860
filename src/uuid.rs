//! Delivery ids: UUID version 7 (RFC 9562), a millisecond Unix timestamp
//! followed by random bits from PostgreSQL's strong random source. Ids
//! sort by arrival, so the archive's primary key grows at its right edge
//! instead of touching a random index page per delivery. Inbox lease ids
//! are made the same way, with version 8.
//!
//! An id is all it takes to complete or fail a claim or a lease, so its
//! random bits come from the strong source; drawing them a few kilobytes
//! at a time makes that source cost one call per hundreds of ids instead
//! of one per delivery (it was a twentieth of a read-only duplicate's
//! time). The bytes are drawn in the backend that uses them, never before
//! a fork, and each is handed out once.

use pgrx::pg_sys;
use std::cell::RefCell;

/// Random bytes each id takes (the timestamp and version fill the rest).
const RANDOM_BYTES: usize = 10;
/// How many ids one draw from the strong source serves.
const IDS_PER_DRAW: usize = 400;

struct Pool {
    bytes: [u8; RANDOM_BYTES * IDS_PER_DRAW],
    /// Bytes before this one were handed out already.
    next: usize,
}

thread_local! {
    static POOL: RefCell<Pool> = const {
        RefCell::new(Pool { bytes: [0; RANDOM_BYTES * IDS_PER_DRAW], next: RANDOM_BYTES * IDS_PER_DRAW })
    };
}

/// Ten bytes from the strong random source, never handed out before.
fn random_bytes() -> [u8; RANDOM_BYTES] {
    POOL.with(|pool| {
        let mut pool = pool.borrow_mut();
        if pool.next == pool.bytes.len() {
            let len = pool.bytes.len();
            // SAFETY: the buffer is `len` writable bytes.
            let ok = unsafe { pg_sys::pg_strong_random(pool.bytes.as_mut_ptr().cast(), len) };
            if !ok {
                pgrx::error!("pg_webhook_inbox: could not generate random bytes for a delivery id");
            }
            pool.next = 0;
        }
        let start = pool.next;
        let mut out = [0u8; RANDOM_BYTES];
        out.copy_from_slice(&pool.bytes[start..start + RANDOM_BYTES]);
        // Not kept once handed out.
        pool.bytes[start..start + RANDOM_BYTES].fill(0);
        pool.next = start + RANDOM_BYTES;
        out
    })
}

/// A delivery id: version 7.
pub fn new_v7() -> pgrx::Uuid {
    time_ordered(0x70)
}

/// An inbox lease id (`webhook_next`'s `id`): laid out as a delivery id,
/// time first, so that the leases' unique index also grows at its right
/// edge instead of taking a random page (and, after each checkpoint, a
/// full-page image) per lease; with version 8 (RFC 9562's vendor-specific
/// version), so that it is never taken for a delivery.
pub fn new_lease_id() -> pgrx::Uuid {
    time_ordered(0x80)
}

fn time_ordered(version: u8) -> pgrx::Uuid {
    let mut bytes = [0u8; 16];
    bytes[6..].copy_from_slice(&random_bytes());
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    bytes[..6].copy_from_slice(&millis.to_be_bytes()[2..]);
    bytes[6] = (bytes[6] & 0x0f) | version;
    bytes[8] = (bytes[8] & 0x3f) | 0x80; // RFC 9562 variant

    // In a database holding one slot of a tier, the last two bytes say
    // which (`route`): finishing calls route by the id alone. 58 random
    // bits remain, beside the millisecond.
    let slot = crate::gucs::SLOT.get();
    if slot >= 0 {
        bytes[14..].copy_from_slice(&(slot as u16).to_be_bytes());
    }
    pgrx::Uuid::from_bytes(bytes)
}

/// Whether `id` can be a delivery's: every delivery id is version 7 (made
/// here), while inbox leases are version 8 (`new_lease_id`; version 4,
/// from `gen_random_uuid`, before 0.11.0). Finishing a lease then skips
/// looking for it among the archive's deliveries, a lookup planned anew on
/// each call (`plans::Statement::run_pruned`).
pub fn may_be_delivery(id: &pgrx::Uuid) -> bool {
    id.as_bytes()[6] >> 4 == 7
}
