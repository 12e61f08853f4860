//! Delivery ids: UUID version 7 (RFC 9562), a millisecond Unix timestamp
//! followed by random bits from PostgreSQL's strong random source. Ids
//! sort by arrival, so the archive's primary key grows at its right edge
//! instead of touching a random index page per delivery.

use pgrx::pg_sys;

pub fn new_v7() -> pgrx::Uuid {
    let mut bytes = [0u8; 16];
    // SAFETY: the buffer is 16 writable bytes.
    let ok = unsafe { pg_sys::pg_strong_random(bytes.as_mut_ptr().cast(), bytes.len()) };
    if !ok {
        pgrx::error!("pg_webhook_inbox: could not generate random bytes for a delivery id");
    }
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    bytes[..6].copy_from_slice(&millis.to_be_bytes()[2..]);
    bytes[6] = (bytes[6] & 0x0f) | 0x70; // version 7
    bytes[8] = (bytes[8] & 0x3f) | 0x80; // RFC 9562 variant
    pgrx::Uuid::from_bytes(bytes)
}
