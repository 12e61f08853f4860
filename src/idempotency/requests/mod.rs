//! Idempotency keys for the application's own API.
//!
//! A request carrying an `Idempotency-Key` begins with
//! `idempotency_begin(scope, key, fingerprint)`, which answers one of:
//!
//! * `new` — this request owns the key now, under a lease (as a claim
//!   owns an event). It does its work, records recovery points for
//!   multi-step work (`idempotency_checkpoint`), and ends with
//!   `idempotency_finish` (the response later retries get back) or
//!   `idempotency_fail` (retryable: the key is free again; final: the
//!   failure is what later retries get back). A request that takes over a
//!   key whose earlier attempt crashed or failed retryably is also `new`,
//!   with that attempt's last recovery point, so it resumes there instead
//!   of starting over.
//! * `in_progress` — another request with the key is running: HTTP 409.
//! * `replay` — the key finished before: its stored response.
//! * `mismatch` — the key came with a different request (fingerprint):
//!   HTTP 422.
//!
//! Nothing here waits on another session. Every write to a key row happens
//! under the key's lock (`EventLock::for_idempotency_key`), which
//! `idempotency_begin` only tries: when another transaction is live on the
//! key, the answer is `in_progress` at once. The functions that finish a
//! request take the lock and may wait, as the ones that finish a claim do:
//! the holder is then a competing begin (for one statement) or a request
//! that took the key over after this one's lease ran out, whose outcome
//! decides the answer (55006 once the takeover commits).
//!
//! Every call works in the caller's transaction. In one-transaction use
//! (begin, the request's writes, finish, commit) an abort takes the key
//! row with it and the key is simply free again. In multi-step use each
//! step commits with its recovery point, and a crash leaves the key in
//! progress until its lease runs out; the client's retry then resumes.
//! The request id `new` returns fences each attempt: once another attempt
//! took the key over, the old one's calls are refused with SQLSTATE 55006.
//!
//! * `begin` — `idempotency_begin` and its state machine;
//! * `steps` — what the owner of a key does next, each fenced:
//!   `idempotency_checkpoint`, `idempotency_finish`, `idempotency_fail`,
//!   and the response stored for replays;
//! * `fingerprint` — `idempotency_fingerprint`;
//! * here — the limits, and `idempotency_purge`.

mod begin;
mod fingerprint;
mod steps;

use crate::errors::{PgResult, WebhookError};
use crate::plans::Statement;
use pgrx::datum::Interval;
use pgrx::pg_sys;
use pgrx::prelude::*;

/// Longest scope, key, fingerprint and step name. The IETF draft puts no
/// limit on keys; Stripe's is 255 characters.
pub(super) const MAX_SCOPE_BYTES: usize = 255;
pub(super) const MAX_KEY_BYTES: usize = 255;
pub(super) const MAX_FINGERPRINT_BYTES: usize = 255;
pub(super) const MAX_STEP_BYTES: usize = 255;
/// An HTTP method is a short token (`POST`, `PATCH`).
pub(super) const MAX_METHOD_BYTES: usize = 32;
/// A recovery point's output is a step's result (an order id, a charge
/// id), not a document.
pub(super) const MAX_OUTPUT_BYTES: usize = 64 * 1024;
/// All of a request's recovery points together, as stored (compressed):
/// rewritten by every checkpoint, so bounded.
pub(super) const MAX_RECOVERY_BYTES: usize = 256 * 1024;
/// Failure messages are kept whole up to this size, then cut.
pub(super) const MAX_ERROR_BYTES: usize = 2048;

/// Expire keys first used longer ago than `older_than`
/// (`webhook.idempotency_retention` by default; Stripe keeps keys 24
/// hours). A key whose request is still in progress (its lease running) is
/// never removed; one whose lease ran out was abandoned by a crashed
/// request and goes like the others. Schedule it like `webhook_purge`.
/// Returns how many keys were removed.
#[pg_extern(
    volatile,
    security_definer,
    parallel_unsafe,
    name = "idempotency_purge"
)]
#[search_path(pg_catalog, pg_temp)]
fn purge_keys(older_than: default!(Option<Interval>, "NULL")) -> PgResult<i64> {
    const F: &str = "idempotency_purge";
    crate::standby::refuse_writes(F)?;
    let older_than = match older_than {
        None => crate::gucs::idempotency_retention(),
        Some(iv) if iv.as_micros() <= 0 => {
            return Err(WebhookError::NonPositiveInterval {
                function: F,
                arg: "older_than",
            }
            .into())
        }
        Some(iv) => iv,
    };
    Ok(Spi::connect_mut(|client| {
        let removed = PURGE.run(client, &[older_than.into()])?.next();
        Ok::<_, WebhookError>(match removed {
            Some(row) => row.get::<i64>(1)?.unwrap_or(0),
            None => 0,
        })
    })?)
}

static PURGE: Statement = Statement {
    sql: "WITH removed AS (
              DELETE FROM webhook.idempotency_keys
               WHERE created_at < pg_catalog.now() - $1
                 AND NOT (status = 'in_progress' AND locked_until > pg_catalog.clock_timestamp())
           RETURNING 1)
          SELECT pg_catalog.count(*) FROM removed",
    arg_types: &[pg_sys::INTERVALOID],
};
