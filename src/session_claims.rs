//! Claims this backend made that own their event, so that finishing them in
//! the same session (`webhook_complete`, `webhook_fail`, `webhook_extend`)
//! skips looking the delivery up. Only a shortcut: the finishing statement
//! itself checks ownership, so a stale entry changes nothing but the speed
//! of the refusal. The one thing only this session knows: which of its
//! claims complete on commit and are still in the open transaction, the
//! only place they can still be finished.

use pgrx::pg_sys;
use std::cell::RefCell;
use std::collections::HashMap;

/// A session that claims without ever finishing must not grow this
/// without bound; past this many entries it starts over.
const CAPACITY: usize = 1024;

/// The event a claim of this session owns.
#[derive(Clone)]
pub struct Claimed {
    pub provider: String,
    pub event_id: String,
    /// For a claim that completes on commit: the (sub)transaction that
    /// wrote the event as processed. Finishing it is only possible while
    /// that write is still part of the current transaction.
    pub completed_by: Option<pg_sys::TransactionId>,
}

impl Claimed {
    /// Whether the event was written as processed by a claim that
    /// completes on commit, in this very transaction (not rolled back to a
    /// savepoint before it): then finishing it changes that write.
    pub fn completes_in_this_transaction(&self) -> bool {
        self.completed_by
            .is_some_and(|xid| unsafe { pg_sys::TransactionIdIsCurrentTransactionId(xid) })
    }
}

thread_local! {
    static OWNED: RefCell<HashMap<pgrx::Uuid, Claimed>> = RefCell::new(HashMap::new());
}

/// A claim of this session now owns `(provider, event_id)`; it completes
/// on commit when `completes_on_commit`.
pub fn remember(id: pgrx::Uuid, provider: &str, event_id: &str, completes_on_commit: bool) {
    // The claim wrote the event, so its (sub)transaction has an id.
    let completed_by =
        completes_on_commit.then(|| unsafe { pg_sys::GetCurrentTransactionIdIfAny() });
    OWNED.with(|owned| {
        let mut owned = owned.borrow_mut();
        if owned.len() >= CAPACITY {
            // Keep the claims that complete on commit in the open
            // transaction: they can be finished nowhere else.
            owned.retain(|_, claimed| claimed.completes_in_this_transaction());
        }
        owned.insert(
            id,
            Claimed {
                provider: provider.to_string(),
                event_id: event_id.to_string(),
                completed_by,
            },
        );
    });
}

/// The event a claim of this session owns.
pub fn get(id: pgrx::Uuid) -> Option<Claimed> {
    OWNED.with(|owned| owned.borrow().get(&id).cloned())
}

/// The claim finished: forget it.
pub fn forget(id: pgrx::Uuid) {
    OWNED.with(|owned| owned.borrow_mut().remove(&id));
}
