//! A standby takes no writes: every function that writes refuses there
//! first, naming the standby.
//!
//! PostgreSQL refuses a write on a standby anyway (SQLSTATE 25006,
//! "cannot execute INSERT in a read-only transaction"), but only at the
//! first statement that writes, with a message that names neither the
//! function nor the reason. After a failover, that is the error a
//! receiver still connected to the old primary's standby sees for every
//! delivery; this one says what happened and what to do, with the same
//! SQLSTATE, so handlers that already treat 25006 as "try another host"
//! keep working. Reads (verification, reports, metrics) run on a standby
//! as on the primary.

use crate::errors::{Result, WebhookError};
use pgrx::pg_sys;

/// Refuse `function` when this server is in recovery. Cheap enough for
/// every call: once recovery is over, PostgreSQL answers from a
/// backend-local flag.
pub fn refuse_writes(function: &'static str) -> Result<()> {
    // SAFETY: reads shared memory under PostgreSQL's own spinlock; callable
    // from any backend at any time.
    if unsafe { pg_sys::RecoveryInProgress() } {
        return Err(WebhookError::OnStandby { function });
    }
    Ok(())
}
