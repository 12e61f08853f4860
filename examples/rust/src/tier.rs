//! The slot a delivery belongs to in an intake tier (docs/scale-out.md):
//! the first four bytes of SHA-256(provider, newline, route key) as a
//! big-endian integer, masked to the number of slots (a power of two), as
//! `webhook_route_slot` computes it in SQL and PL/Proxy's `RUN ON` masks
//! it. The route key itself comes from `webhook_route_key`.

use sha2::{Digest, Sha256};

pub fn route_hash(provider: &str, route_key: &str) -> i32 {
    let mut hasher = Sha256::new();
    hasher.update(provider.as_bytes());
    hasher.update(b"\n");
    hasher.update(route_key.as_bytes());
    let digest = hasher.finalize();
    i32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]])
}

/// None unless `slots` is a power of two.
pub fn route_slot(provider: &str, route_key: &str, slots: i32) -> Option<i32> {
    (slots > 0 && slots & (slots - 1) == 0).then(|| route_hash(provider, route_key) & (slots - 1))
}

/// The slot a delivery or lease id made in a slot's database carries.
pub fn slot_of_id(id: &[u8; 16]) -> i32 {
    i32::from(u16::from_be_bytes([id[14], id[15]]))
}
