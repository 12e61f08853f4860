//! Delivery ids: random (version 4) UUIDs from PostgreSQL's own strong
//! random source, the one `gen_random_uuid()` uses.

use pgrx::pg_sys;

pub fn new_v4() -> pgrx::Uuid {
    let mut bytes = [0u8; 16];
    // SAFETY: the buffer is 16 writable bytes.
    let ok = unsafe { pg_sys::pg_strong_random(bytes.as_mut_ptr().cast(), bytes.len()) };
    if !ok {
        pgrx::error!("pg_webhook_inbox: could not generate random bytes for a delivery id");
    }
    bytes[6] = (bytes[6] & 0x0f) | 0x40; // version 4
    bytes[8] = (bytes[8] & 0x3f) | 0x80; // RFC 4122 variant
    pgrx::Uuid::from_bytes(bytes)
}
