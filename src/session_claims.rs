//! Claims this backend made that own their event, so that finishing them in
//! the same session (`webhook_complete`, `webhook_fail`, `webhook_extend`)
//! skips looking the delivery up. Only a shortcut: the finishing statement
//! itself checks ownership, so a stale entry changes nothing but the speed
//! of the refusal.

use std::cell::RefCell;
use std::collections::HashMap;

/// A session that claims without ever finishing must not grow this
/// without bound; past this many entries it starts over.
const CAPACITY: usize = 1024;

thread_local! {
    static OWNED: RefCell<HashMap<pgrx::Uuid, (String, String)>> = RefCell::new(HashMap::new());
}

/// A claim of this session now owns `(provider, event_id)`.
pub fn remember(id: pgrx::Uuid, provider: &str, event_id: &str) {
    OWNED.with(|owned| {
        let mut owned = owned.borrow_mut();
        if owned.len() >= CAPACITY {
            owned.clear();
        }
        owned.insert(id, (provider.to_string(), event_id.to_string()));
    });
}

/// The event a claim of this session owns.
pub fn get(id: pgrx::Uuid) -> Option<(String, String)> {
    OWNED.with(|owned| owned.borrow().get(&id).cloned())
}

/// The claim finished: forget it.
pub fn forget(id: pgrx::Uuid) {
    OWNED.with(|owned| owned.borrow_mut().remove(&id));
}
